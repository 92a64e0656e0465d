"""LmdbSaver under real LangGraph ``StateGraph`` s, sync and async.

Where results can be compared, LangGraph's own ``InMemorySaver`` runs the same operations and
is the oracle (STYLE §2): histories must agree on values, next nodes and metadata.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from eventlog.frames import BLOB_APPEND, BLOB_FULL, LgCheckpoint
from eventlog.integrations.langgraph import LmdbSaver
from eventlog.integrations.langgraph_store import KEYFRAME_EVERY

LOOP_STEPS = 500
FAN_OUT = 500


@pytest.fixture
def saver_path(tmp_path: Path) -> Path:
    return tmp_path / "lg"


@pytest.fixture
def saver(saver_path: Path) -> Iterator[LmdbSaver]:
    s = LmdbSaver.open(saver_path, durability="process")
    yield s
    s.close()


def cfg(thread: str, **extra: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 10_000, **extra}


def snapshot_rows(graph: Any, config: RunnableConfig) -> list[tuple[Any, ...]]:
    """What a history must agree on across savers (ids and timestamps differ)."""
    return [
        (s.values, s.next, s.metadata.get("source"), s.metadata.get("step"))
        for s in graph.get_state_history(config)
    ]


def blob_kinds(saver: LmdbSaver, channel: str) -> list[int]:
    kinds = []
    for stream in saver.log.streams():
        for sf in saver.log.read_stream(stream):
            if isinstance(sf.frame, LgCheckpoint):
                kinds += [b.kind for b in sf.frame.blobs if b.channel == channel]
    return kinds


# -- a 500-step loop ---------------------------------------------------------------------------


class Loop(TypedDict):
    n: int
    items: Annotated[list[int], operator.add]


def loop_graph(steps: int) -> StateGraph[Loop]:
    def step(s: Loop) -> dict[str, Any]:
        return {"n": s["n"] + 1, "items": [s["n"]]}

    b = StateGraph(Loop)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return b


def test_500_step_loop_sync(saver: LmdbSaver, saver_path: Path) -> None:
    graph = loop_graph(LOOP_STEPS).compile(checkpointer=saver)
    chunks = list(graph.stream({"n": 0, "items": []}, cfg("loop"), stream_mode="values"))
    final = chunks[-1]
    assert final == {"n": LOOP_STEPS, "items": list(range(LOOP_STEPS))}
    assert graph.get_state(cfg("loop")).values == final
    history = list(graph.get_state_history(cfg("loop")))
    assert len(history) == LOOP_STEPS + 2  # the input checkpoint, step 0, then one per step
    assert history[-3].values == {"n": 1, "items": [0]}
    kinds = blob_kinds(saver, "items")
    assert kinds.count(BLOB_APPEND) > 0.9 * len(kinds)  # the growing list is stored as deltas
    assert saver.verify().ok
    saver.close()
    with LmdbSaver.open(saver_path) as reopened:  # everything came from disk
        again = loop_graph(LOOP_STEPS).compile(checkpointer=reopened)
        assert again.get_state(cfg("loop")).values == final
        assert [s.values for s in again.get_state_history(cfg("loop"))] == [
            s.values for s in history
        ]


def test_500_step_loop_async_matches_in_memory_saver(saver: LmdbSaver) -> None:
    async def run(cp: BaseCheckpointSaver[Any]) -> tuple[Any, list[Any]]:
        graph = loop_graph(LOOP_STEPS).compile(checkpointer=cp)
        last = None
        async for chunk in graph.astream({"n": 0, "items": []}, cfg("loop")):
            last = chunk
        state = await graph.aget_state(cfg("loop"))
        history = [s.values async for s in graph.aget_state_history(cfg("loop"))]
        return (last, state.values), history

    ours = asyncio.run(run(saver))
    oracle = asyncio.run(run(InMemorySaver()))
    assert ours == oracle
    assert ours[0][1]["items"] == list(range(LOOP_STEPS))


# -- a 500-item Send map-reduce ----------------------------------------------------------------


class MapReduce(TypedDict):
    items: list[int]
    results: Annotated[list[int], operator.add]
    total: int


def map_reduce_graph() -> StateGraph[MapReduce]:
    def fan_out(s: MapReduce) -> list[Send]:
        return [Send("work", {"x": i}) for i in s["items"]]

    def work(s: dict[str, int]) -> dict[str, Any]:
        return {"results": [s["x"] * 2]}

    def reduce(s: MapReduce) -> dict[str, Any]:
        return {"total": sum(s["results"])}

    b = StateGraph(MapReduce)
    b.add_node("work", work)
    b.add_node("reduce", reduce)
    b.add_conditional_edges(START, fan_out, ["work"])
    b.add_edge("work", "reduce")
    b.add_edge("reduce", END)
    return b


class CountingSaver(LmdbSaver):
    """Counts put_writes calls (sync or async) to compare with the log's commits."""

    writes_calls = 0

    def put_writes(self, *a: Any, **k: Any) -> None:
        type(self).writes_calls += 1
        super().put_writes(*a, **k)

    async def aput_writes(self, *a: Any, **k: Any) -> None:
        type(self).writes_calls += 1
        await super().aput_writes(*a, **k)


@pytest.mark.parametrize("api", ["sync", "async"])
def test_500_item_send_map_reduce_group_commits_writes(api: str, saver_path: Path) -> None:
    CountingSaver.writes_calls = 0
    with CountingSaver.open(saver_path) as saver:  # fsync: slow commits, as on a real disk
        graph = map_reduce_graph().compile(checkpointer=saver)
        inp = {"items": list(range(FAN_OUT)), "results": [], "total": 0}
        if api == "sync":
            out = graph.invoke(inp, cfg("mr"))
        else:
            out = asyncio.run(graph.ainvoke(inp, cfg("mr")))
        assert out["total"] == sum(2 * i for i in range(FAN_OUT))
        assert sorted(out["results"]) == [2 * i for i in range(FAN_OUT)]
        stats = saver.stats()
        # Every put and put_writes is one frame; concurrent ones share commits.
        assert CountingSaver.writes_calls >= FAN_OUT
        assert stats.frames_appended >= CountingSaver.writes_calls
        assert stats.commits < stats.frames_appended, stats
        if api == "async":  # all 500 tasks enqueue before the writer drains: a handful of commits
            assert stats.commits <= stats.frames_appended // 4, stats
        assert graph.get_state(cfg("mr")).values == out
        assert saver.verify().ok


# -- interrupt and resume ----------------------------------------------------------------------


class Ask(TypedDict):
    question: str
    answer: str
    done: bool


def ask_graph() -> StateGraph[Ask]:
    def ask(s: Ask) -> dict[str, Any]:
        return {"answer": interrupt({"question": s["question"]})}

    def finish(s: Ask) -> dict[str, Any]:
        return {"done": True}

    b = StateGraph(Ask)
    b.add_node("ask", ask)
    b.add_node("finish", finish)
    b.add_edge(START, "ask")
    b.add_edge("ask", "finish")
    b.add_edge("finish", END)
    return b


def test_interrupt_then_resume_in_a_new_process_saver(saver: LmdbSaver, saver_path: Path) -> None:
    graph = ask_graph().compile(checkpointer=saver)
    first = graph.invoke({"question": "name?", "answer": "", "done": False}, cfg("ask"))
    assert first["__interrupt__"][0].value == {"question": "name?"}
    state = graph.get_state(cfg("ask"))
    assert state.next == ("ask",)
    assert state.tasks[0].interrupts[0].value == {"question": "name?"}
    saver.close()
    with LmdbSaver.open(saver_path) as reopened:  # the interrupt was durable
        resumed = ask_graph().compile(checkpointer=reopened)
        out = resumed.invoke(Command(resume="Ada"), cfg("ask"))
        assert out == {"question": "name?", "answer": "Ada", "done": True}
        assert resumed.get_state(cfg("ask")).next == ()
        assert reopened.verify().ok


def test_interrupt_and_resume_async(saver: LmdbSaver) -> None:
    async def run(cp: BaseCheckpointSaver[Any]) -> tuple[Any, Any]:
        graph = ask_graph().compile(checkpointer=cp)
        await graph.ainvoke({"question": "q", "answer": "", "done": False}, cfg("ask"))
        out = await graph.ainvoke(Command(resume="yes"), cfg("ask"))
        return out, [s.next async for s in graph.aget_state_history(cfg("ask"))]

    assert asyncio.run(run(saver)) == asyncio.run(run(InMemorySaver()))


# -- time travel and forks ---------------------------------------------------------------------


def travel_and_fork(cp: BaseCheckpointSaver[Any]) -> tuple[Any, ...]:
    graph = loop_graph(6).compile(checkpointer=cp)
    graph.invoke({"n": 0, "items": []}, cfg("tt"))
    history = list(graph.get_state_history(cfg("tt")))
    at_2 = next(s for s in history if s.values.get("n") == 2)
    replayed = graph.invoke(None, at_2.config)  # replay from a past checkpoint
    fork = graph.update_state(at_2.config, {"n": 4, "items": [99]})
    forked = graph.invoke(None, fork)
    original = graph.get_state(history[0].config).values  # the first branch's head, unchanged
    return replayed, forked, original, snapshot_rows(graph, cfg("tt"))


def test_time_travel_and_fork_match_in_memory_saver(saver: LmdbSaver) -> None:
    ours = travel_and_fork(saver)
    assert ours == travel_and_fork(InMemorySaver())
    replayed, forked, original, rows = ours
    assert replayed == {"n": 6, "items": [0, 1, 2, 3, 4, 5]}
    assert forked == {"n": 6, "items": [0, 1, 99, 4, 5]}
    assert original == {"n": 6, "items": [0, 1, 2, 3, 4, 5]}
    assert any(r[2] == "update" for r in rows)
    assert saver.verify().ok


async def atravel_and_fork(cp: BaseCheckpointSaver[Any]) -> tuple[Any, ...]:
    graph = loop_graph(6).compile(checkpointer=cp)
    await graph.ainvoke({"n": 0, "items": []}, cfg("tt"))
    history = [s async for s in graph.aget_state_history(cfg("tt"))]
    at_3 = next(s for s in history if s.values.get("n") == 3)
    fork = await graph.aupdate_state(at_3.config, {"items": [-1]})
    forked = [c async for c in graph.astream(None, fork, stream_mode="values")][-1]
    rows = [(s.values, s.next) async for s in graph.aget_state_history(cfg("tt"))]
    return forked, rows


def test_async_time_travel_and_fork_match_in_memory_saver(saver: LmdbSaver) -> None:
    ours = asyncio.run(atravel_and_fork(saver))
    assert ours == asyncio.run(atravel_and_fork(InMemorySaver()))
    assert ours[0] == {"n": 6, "items": [0, 1, 2, -1, 3, 4, 5]}


# -- a subgraph --------------------------------------------------------------------------------


class Outer(TypedDict):
    trail: Annotated[list[str], operator.add]


def nested_graph() -> StateGraph[Outer]:
    def inner_a(s: Outer) -> dict[str, Any]:
        return {"trail": ["inner_a"]}

    def inner_gate(s: Outer) -> dict[str, Any]:
        return {"trail": [f"inner_gate:{interrupt('go?')}"]}

    sub = StateGraph(Outer)
    sub.add_node("inner_a", inner_a)
    sub.add_node("inner_gate", inner_gate)
    sub.add_edge(START, "inner_a")
    sub.add_edge("inner_a", "inner_gate")
    sub.add_edge("inner_gate", END)

    b = StateGraph(Outer)
    b.add_node("before", lambda s: {"trail": ["before"]})
    b.add_node("sub", sub.compile())
    b.add_node("after", lambda s: {"trail": ["after"]})
    b.add_edge(START, "before")
    b.add_edge("before", "sub")
    b.add_edge("sub", "after")
    b.add_edge("after", END)
    return b


def run_nested(cp: BaseCheckpointSaver[Any]) -> tuple[Any, ...]:
    graph = nested_graph().compile(checkpointer=cp)
    graph.invoke({"trail": []}, cfg("nest"))
    state = graph.get_state(cfg("nest"), subgraphs=True)
    inner = state.tasks[0].state
    assert inner is not None
    assert not isinstance(inner, dict)
    out = graph.invoke(Command(resume="ok"), cfg("nest"))
    return out, inner.values, inner.next, snapshot_rows(graph, cfg("nest"))


def test_subgraph_checkpoints_in_its_own_namespace(saver: LmdbSaver) -> None:
    ours = run_nested(saver)
    assert ours == run_nested(InMemorySaver())
    out, inner_values, inner_next, _ = ours
    # The subgraph returns its whole trail, which the parent's reducer adds again: LangGraph's
    # own behaviour for a key shared with a subgraph (the in-memory oracle agrees).
    assert out == {"trail": ["before", "before", "inner_a", "inner_gate:ok", "after"]}
    assert inner_values == {"trail": ["before", "inner_a"]}
    assert inner_next == ("inner_gate",)
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(cfg("nest"))}
    assert "" in namespaces
    assert any(ns.startswith("sub:") for ns in namespaces)  # listed across namespaces
    root_only = {
        t.config["configurable"]["checkpoint_ns"]
        for t in saver.list({"configurable": {"thread_id": "nest", "checkpoint_ns": ""}})
    }
    assert root_only == {""}
    assert saver.verify().ok


# -- a DeltaChannel graph ----------------------------------------------------------------------


def extend(state: list[int], writes: list[list[int]]) -> list[int]:
    # Batching-invariant, as DeltaChannel requires: folding batches one by one or at once agrees.
    return state + [x for w in writes for x in w]


class Delta(TypedDict):
    n: int
    log: Annotated[list[int], DeltaChannel(extend, snapshot_frequency=7)]


def delta_graph(steps: int) -> StateGraph[Delta]:
    def step(s: Delta) -> dict[str, Any]:
        return {"n": s["n"] + 1, "log": [s["n"] * 10]}

    b = StateGraph(Delta)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return b


DELTA_STEPS = 40


def test_delta_channel_state_reloads_exactly(saver: LmdbSaver, saver_path: Path) -> None:
    graph = delta_graph(DELTA_STEPS).compile(checkpointer=saver)
    live = graph.invoke({"n": 0, "log": []}, cfg("d"))
    assert live == {"n": DELTA_STEPS, "log": [10 * i for i in range(DELTA_STEPS)]}
    live_history = [s.values for s in graph.get_state_history(cfg("d"))]
    oracle = delta_graph(DELTA_STEPS).compile(checkpointer=InMemorySaver())
    oracle.invoke({"n": 0, "log": []}, cfg("d"))
    assert live_history == [s.values for s in oracle.get_state_history(cfg("d"))]
    # Our one-transaction ancestor walk agrees with the base class's get_tuple walk.
    for snap in graph.get_state_history(cfg("d")):
        ours = saver.get_delta_channel_history(config=snap.config, channels=["log", "n"])
        base = BaseCheckpointSaver.get_delta_channel_history(
            saver, config=snap.config, channels=["log", "n"]
        )
        assert ours == base
    saver.close()
    with LmdbSaver.open(saver_path) as reopened:
        again = delta_graph(DELTA_STEPS).compile(checkpointer=reopened)
        assert again.get_state(cfg("d")).values == live
        assert [s.values for s in again.get_state_history(cfg("d"))] == live_history
        reopened.copy_thread("d", "d-copy")
        assert again.get_state(cfg("d-copy")).values == live
        reopened.prune(["d"], strategy="keep_latest")
        kept = list(reopened.list(cfg("d")))
        assert 1 < len(kept) < len(live_history)  # the ancestors back to a snapshot survive
        assert again.get_state(cfg("d")).values == live
        more = again.invoke({"n": DELTA_STEPS - 3}, cfg("d"))  # and the thread goes on
        assert more["log"] == live["log"] + [10 * (DELTA_STEPS - 3) + i * 10 for i in range(3)]
        assert reopened.verify().ok


def test_delta_channel_async(saver: LmdbSaver) -> None:
    async def run(cp: BaseCheckpointSaver[Any]) -> tuple[Any, list[Any]]:
        graph = delta_graph(15).compile(checkpointer=cp)
        out = await graph.ainvoke({"n": 0, "log": []}, cfg("d"))
        return out, [s.values async for s in graph.aget_state_history(cfg("d"))]

    assert asyncio.run(run(saver)) == asyncio.run(run(InMemorySaver()))


# -- growth: the blobs of a growing list -------------------------------------------------------


def test_growing_list_is_stored_as_appends_with_bounded_chains(saver: LmdbSaver) -> None:
    graph = loop_graph(300).compile(checkpointer=saver)
    graph.invoke({"n": 0, "items": []}, cfg("g"))
    kinds = blob_kinds(saver, "items")
    fulls = [i for i, k in enumerate(kinds) if k == BLOB_FULL]
    # A full copy (keyframe) once the deltas since the last one would outweigh it twice, or
    # after KEYFRAME_EVERY deltas: the gaps grow with the list, up to that bound.
    gaps = [b - a for a, b in itertools.pairwise(fulls)]
    assert gaps == sorted(gaps), gaps
    assert max(gaps) == KEYFRAME_EVERY + 1, gaps
    assert len(fulls) <= 300 // (KEYFRAME_EVERY + 1) + 8, fulls
    assert graph.get_state(cfg("g")).values["items"] == list(range(300))


def _writes_of(saver: LmdbSaver, config: RunnableConfig) -> list[Any]:
    tup = saver.get_tuple(config)
    assert tup is not None
    assert tup.pending_writes is not None
    return tup.pending_writes


def test_pending_writes_of_an_interrupted_fan_out_survive(saver: LmdbSaver) -> None:
    # A fan-out where one worker interrupts: the finished workers' writes are pending writes
    # of the checkpoint, kept across the resume (LangGraph does not re-run them).
    runs: list[int] = []

    def work(s: dict[str, int]) -> dict[str, Any]:
        runs.append(s["x"])
        if s["x"] == 3:
            interrupt("x=3 needs a human")
        return {"results": [s["x"]]}

    b = StateGraph(MapReduce)
    b.add_node("work", work)
    b.add_conditional_edges(START, lambda s: [Send("work", {"x": i}) for i in s["items"]])
    b.add_edge("work", END)
    graph = b.compile(checkpointer=saver)
    graph.invoke({"items": list(range(6)), "results": [], "total": 0}, cfg("fi"))
    writes = _writes_of(saver, cfg("fi"))
    assert sorted(v[0] for _, c, v in writes if c == "results") == [0, 1, 2, 4, 5]
    runs.clear()
    out = graph.invoke(Command(resume="ok"), cfg("fi"))
    assert runs == [3]  # only the interrupted worker ran again
    assert sorted(out["results"]) == list(range(6))


# -- two processes on one path -----------------------------------------------------------------

WORKER = """
import operator, sys
from typing import Annotated, TypedDict
from langgraph.graph import END, START, StateGraph
from eventlog.integrations.langgraph import LmdbSaver

class Loop(TypedDict):
    n: int
    items: Annotated[list[int], operator.add]

path, thread, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = StateGraph(Loop)
b.add_node("step", lambda s: {"n": s["n"] + 1, "items": [s["n"]]})
b.add_edge(START, "step")
b.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
with LmdbSaver.open(path) as saver:
    graph = b.compile(checkpointer=saver)
    graph.invoke({"n": 0, "items": []}, {"configurable": {"thread_id": thread}})
    saver.copy_thread(thread, thread + "-copy")
"""


def test_two_processes_share_one_path(saver_path: Path) -> None:
    steps = 20
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(saver_path), f"p{i}", str(steps)],
            cwd=Path(__file__).resolve().parents[1],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with LmdbSaver.open(saver_path) as shared:
        graph = loop_graph(steps).compile(checkpointer=shared)
        for thread in ("p0", "p1", "p0-copy", "p1-copy"):
            assert graph.get_state(cfg(thread)).values == {"n": steps, "items": list(range(steps))}
        assert shared.verify().ok
