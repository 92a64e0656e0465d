"""Fork and resume with the real engines (issue 25).

- openarmature 0.17: a 1,200-item fan-out fails at item 847; the run is forked from a save
  before the failure (``ckptlog fork``) and resumed with ``invoke(resume_invocation=NEW)``,
  which re-runs exactly the items the forked record had not completed, each once.
- LangGraph: a thread forks natively through our saver: ``update_state`` on a past
  ``checkpoint_id`` branches the thread, ``copy_thread`` copies it whole; both go on
  independently of their source, and ``ckptlog diff PATH A@SEQ B@SEQ`` compares them.
"""

from __future__ import annotations

import asyncio
import json
import operator
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Final, TypedDict

import pytest
from openarmature.graph import END, CompiledGraph, GraphBuilder, NodeException, State, append
from pydantic import Field

from eventlog.checkpoints import Checkpointer, CheckpointLog

REPO = Path(__file__).resolve().parents[1]
ITEMS: Final = 1_200
FAIL_AT: Final = 847


def ckptlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventlog.cli", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


class Outer(State):
    items: list[int]
    results: Annotated[list[int], append] = Field(default_factory=list)


class Item(State):
    item: int = 0
    out: int = 0


def fan_out(cp: Checkpointer, ran: Counter[int], fail: set[int]) -> CompiledGraph[Outer]:
    async def square(s: Item) -> dict[str, int]:
        ran[s.item] += 1
        if s.item in fail:
            raise ValueError(f"item {s.item} fails (test)")
        return {"out": s.item * s.item}

    instance = GraphBuilder(Item).add_node("square", square).add_edge("square", END)
    return (
        GraphBuilder(Outer)
        .add_fan_out_node(
            "work",
            subgraph=instance.set_entry("square").compile(),
            items_field="items",
            item_field="item",
            collect_field="out",
            target_field="results",
            concurrency=8,
        )
        .add_edge("work", END)
        .set_entry("work")
        .with_checkpointer(cp)
        .compile()
    )


def completed(record: Any) -> set[int]:
    (fan,) = record.fan_out_progress
    return {i for i, p in enumerate(fan.instances) if p.state == "completed"}


@pytest.mark.parametrize(
    ("n_items", "fail_at"),
    [pytest.param(ITEMS, FAIL_AT, marks=[pytest.mark.slow, pytest.mark.long]), (120, 84)],
    ids=["1200-items", "120-items"],
)
def test_a_failed_fan_out_forked_before_the_failure_resumes_what_the_fork_had_not_done(
    tmp_path: Path, n_items: int, fail_at: int
) -> None:
    """The story of docs/forensics.md (1,200 items failing at 847: ~20 s, so ``slow`` and ``long``:
    ``make test-long``; the same at a tenth of the size runs in every ``make test``)."""
    path = tmp_path / "log"
    items = list(range(n_items))
    ran: Counter[int] = Counter()

    async def first_run() -> None:
        cp = Checkpointer.open(path, durability="process")
        try:
            with pytest.raises(NodeException, match=f"item {fail_at} fails"):
                await fan_out(cp, ran, {fail_at}).invoke(Outer(items=items), invocation_id="job")
        finally:
            await cp.aclose()

    asyncio.run(first_run())
    assert ran[fail_at] == 1

    # The investigation: the failed run's history, and a save well before the failure.
    with CheckpointLog.open(path, readonly=True) as cl:
        history = list(cl.history("job"))
        failed = cl.load("job")
    assert failed is not None
    assert fail_at not in completed(failed)
    before = next(
        e for e in history if e.record is not None and len(completed(e.record)) >= n_items // 2
    )
    done_then = completed(before.record)
    assert n_items // 2 <= len(done_then) < len(completed(failed))

    forked = ckptlog("fork", str(path), "job", "--at", str(before.seq), "--as", "job-retry")
    assert forked.returncode == 0, forked.stderr

    ran.clear()

    async def resume() -> Any:
        cp = Checkpointer.open(path, durability="process")
        try:
            return await fan_out(cp, ran, set()).invoke(
                Outer(items=items), resume_invocation="job-retry"
            )
        finally:
            await cp.aclose()

    final = asyncio.run(resume())
    # exactly what the forked record had not completed ran, each once
    assert set(ran) == set(items) - done_then
    assert set(ran.values()) == {1}
    assert sorted(final.results) == [i * i for i in items]
    with CheckpointLog.open(path, readonly=True) as cl:
        assert cl.verify().ok
        assert [e.seq for e in cl.history("job")] == [e.seq for e in history]  # untouched
        # the engine runs a resume as a new attempt (its own invocation id, the same
        # correlation id) and leaves the fork as it was written
        assert cl.log.last_seq("job-retry") == 1
        (attempt,) = set(cl.log.streams()) - {"job", "job-retry"}
        again = cl.load(attempt)
        retry = cl.load("job-retry")
        assert again is not None
        assert retry is not None
        assert again.correlation_id == retry.correlation_id == failed.correlation_id
    history_text = ckptlog("history", str(path), "job-retry", "-n", "1").stdout
    assert f"fork of job@{before.seq}" in history_text
    diff = json.loads(
        ckptlog("diff", str(path), f"job@{before.seq}", "job-retry@1", "--json").stdout
    )
    assert diff["changes"]["instances"] == []
    assert diff["changes"]["state"] == []


# -- LangGraph: forks through the saver ---------------------------------------------------------


class Loop(TypedDict):
    n: int
    items: Annotated[list[int], operator.add]


def loop_graph(saver: Any) -> Any:
    from langgraph.graph import END as LG_END  # noqa: PLC0415
    from langgraph.graph import START, StateGraph  # noqa: PLC0415

    def step(s: Loop) -> dict[str, Any]:
        return {"n": s["n"] + 1, "items": [s["n"]]}

    b = StateGraph(Loop)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < 5 else LG_END)
    return b.compile(checkpointer=saver)


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def test_langgraph_forks_from_a_past_checkpoint_and_copies_a_thread(tmp_path: Path) -> None:
    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    path = tmp_path / "log"
    with LmdbSaver.open(path) as saver:
        graph = loop_graph(saver)
        assert graph.invoke({"n": 0, "items": []}, cfg("t"))["items"] == [0, 1, 2, 3, 4]
        original = list(graph.get_state_history(cfg("t")))
        at_2 = next(s for s in original if s.values.get("n") == 2)
        # update_state on a past checkpoint_id: a branch whose parent is that checkpoint
        branch = graph.update_state(at_2.config, {"n": 3, "items": [99]})
        assert (
            branch["configurable"]["checkpoint_id"] != at_2.config["configurable"]["checkpoint_id"]
        )
        branched = graph.get_state(branch)
        assert (
            branched.parent_config["configurable"]["checkpoint_id"]
            == (at_2.config["configurable"]["checkpoint_id"])
        )
        assert branched.values == {"n": 3, "items": [0, 1, 99]}
        resumed = graph.invoke(None, branch)
        assert resumed == {"n": 5, "items": [0, 1, 99, 3, 4]}
        # the original line of checkpoints is still there, unchanged
        assert graph.get_state(at_2.config).values == at_2.values
        assert [s.values for s in graph.get_state_history(cfg("t"))][-len(original) :] == [
            s.values for s in original
        ]
        # copy_thread: the whole thread (the branch included) under a new id
        saver.copy_thread("t", "t-copy")
        assert graph.get_state(cfg("t-copy")).values == graph.get_state(cfg("t")).values
        assert [s.values for s in graph.get_state_history(cfg("t-copy"))] == [
            s.values for s in graph.get_state_history(cfg("t"))
        ]
        # each goes on alone
        graph.update_state(cfg("t-copy"), {"n": 0, "items": [-1]})
        more = graph.invoke(None, cfg("t-copy"))
        assert more["items"][-6:] == [-1, 0, 1, 2, 3, 4]
        assert graph.get_state(cfg("t")).values == resumed
        assert saver.verify().ok
    p = str(path)
    assert ckptlog("verify", p).returncode == 0
    last_t = json.loads(ckptlog("history", p, "--thread", "t", "--json").stdout)[-1]["seq"]
    same = ckptlog("diff", p, f"t@{last_t}", f"t-copy@{last_t}", "--json")
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["changes"] == []
    moved = json.loads(ckptlog("diff", p, f"t@{last_t}", "t-copy@latest", "--json").stdout)
    assert moved["changes"], moved


def test_langgraph_fork_on_postgresql(tmp_path: Path, pg_schemas: Any) -> None:
    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    url = pg_schemas.url(tmp_path / "lg")
    with LmdbSaver.open(url) as saver:
        graph = loop_graph(saver)
        graph.invoke({"n": 0, "items": []}, cfg("t"))
        at_1 = next(s for s in graph.get_state_history(cfg("t")) if s.values.get("n") == 1)
        branch = graph.update_state(at_1.config, {"items": [7]})
        assert graph.invoke(None, branch)["items"] == [0, 7, 1, 2, 3, 4]
        saver.copy_thread("t", "t2")
        assert graph.get_state(cfg("t2")).values == graph.get_state(cfg("t")).values
        assert saver.verify().ok
