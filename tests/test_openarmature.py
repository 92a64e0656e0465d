"""openarmature drop-in: real openarmature 0.17 graphs on ckptlog's LMDB checkpointer.

Every graph here is built with openarmature's own ``GraphBuilder`` and runs on the real engine;
the plain :class:`eventlog.checkpoints.Checkpointer` is registered with ``with_checkpointer``
and nothing else (no glue), except where a test is about ``eventlog.integrations.openarmature``.
The test graphs avoid the upstream behaviours listed in docs/integrations/openarmature.md
(those have their own reproductions there).

This file is also the child process of the batching crash test:
``python tests/test_openarmature.py crash-child PATH ITEMS FLUSH_EVERY CRASH_AT`` runs a
batched fan-out and dies with ``os._exit`` inside instance ``CRASH_AT``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest
from bench_smoke import run_module
from openarmature.checkpoint import CheckpointFilter as OaFilter
from openarmature.checkpoint import CheckpointNotFound, CheckpointSaveFailed
from openarmature.checkpoint import CheckpointRecord as OaRecord
from openarmature.checkpoint import CheckpointSummary as OaSummary
from openarmature.checkpoint import FanOutInternalSaveBatching as OaBatching
from openarmature.graph import END, CompiledGraph, GraphBuilder, NodeException, State, append
from pydantic import ConfigDict, Field

from eventlog.checkpoints import Checkpointer
from eventlog.errors import CheckpointError, EncodingError
from eventlog.integrations.openarmature import (
    OpenArmatureCheckpointer,
    StateTypes,
    checkpointer_for,
    to_openarmature,
)
from eventlog.records import CheckpointFilter, CheckpointRecord, FanOutInternalSaveBatching

REPO = Path(__file__).resolve().parents[1]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    """Checkpointers opened by a test, closed at teardown even when it fails."""
    cps: list[Any] = []
    yield cps
    for cp in reversed(cps):
        cp.sync.close()


def open_cp(opened: list[Any], path: Path, **kw: Any) -> Checkpointer:
    cp = Checkpointer.open(path, **kw)
    opened.append(cp)
    return cp


# -- graphs ---------------------------------------------------------------------------------


class Calls:
    """Which node bodies ran (and with which item), and which should fail once."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.ran: list[str] = []
        self.items: Counter[int] = Counter()
        self.fail = set(fail or ())

    def hit(self, name: str) -> None:
        self.ran.append(name)
        if name in self.fail:
            raise RuntimeError(f"{name} fails (test)")


class Linear(State):
    a: int = 0
    b: int = 0
    c: int = 0
    trail: Annotated[list[str], append] = Field(default_factory=list)


def linear_graph(calls: Calls, cp: Any) -> CompiledGraph[Linear]:
    def node(name: str, field: str, value: int) -> Callable[[Linear], Any]:
        async def body(_s: Linear) -> dict[str, Any]:
            calls.hit(name)
            return {field: value, "trail": [name]}

        return body

    return (
        GraphBuilder(Linear)
        .add_node("a", node("a", "a", 1))
        .add_node("b", node("b", "b", 2))
        .add_node("c", node("c", "c", 3))
        .add_edge("a", "b")
        .add_edge("b", "c")
        .add_edge("c", END)
        .set_entry("a")
        .with_checkpointer(cp)
        .compile()
    )


class Outer(State):
    items: list[int]
    results: Annotated[list[int], append] = Field(default_factory=list)
    errors: Annotated[list[dict[str, str]], append] = Field(default_factory=list)


class Item(State):
    item: int = 0
    out: int = 0


def fan_out_graph(
    cp: Any,
    body: Callable[[Item], Any],
    *,
    concurrency: int = 8,
    error_policy: str = "fail_fast",
) -> CompiledGraph[Outer]:
    instance = GraphBuilder(Item).add_node("square", body).add_edge("square", END)
    extra = {"errors_field": "errors"} if error_policy == "collect" else {}
    return (
        GraphBuilder(Outer)
        .add_fan_out_node(
            "work",
            subgraph=instance.set_entry("square").compile(),
            items_field="items",
            item_field="item",
            collect_field="out",
            target_field="results",
            concurrency=concurrency,
            error_policy=error_policy,
            **extra,
        )
        .add_edge("work", END)
        .set_entry("work")
        .with_checkpointer(cp)
        .compile()
    )


def squaring(calls: Calls, fail_items: set[int]) -> Callable[[Item], Any]:
    async def square(s: Item) -> dict[str, int]:
        calls.items[s.item] += 1
        if s.item in fail_items:
            raise ValueError(f"item {s.item} fails (test)")
        return {"out": s.item * s.item}

    return square


def instance_states(record: Any) -> list[str]:
    (fan_out,) = record.fan_out_progress
    return [i.state for i in fan_out.instances]


def completed(record: Any) -> set[int]:
    return {i for i, s in enumerate(instance_states(record)) if s == "completed"}


# -- linear graphs: saves, failure and resume, list, delete ---------------------------------


def test_linear_graph_saves_at_every_completed_node(log_dir: Path, opened: list[Any]) -> None:
    cp = open_cp(opened, log_dir)
    final = run(linear_graph(Calls(), cp).invoke(Linear(), invocation_id="lin-1"))
    history = list(cp.sync.history("lin-1"))
    assert [e.kind for e in history] == ["save", "save", "save"]
    assert [[p.node_name for p in e.record.completed_positions] for e in history] == [
        ["a"],
        ["a", "b"],
        ["a", "b", "c"],
    ]
    assert [e.record.state["trail"] for e in history] == [["a"], ["a", "b"], ["a", "b", "c"]]
    head = run(cp.load("lin-1"))
    assert isinstance(head, CheckpointRecord)
    assert head.state == final.model_dump(mode="json")
    assert head.parent_states == ()
    assert head.fan_out_progress == ()


def test_failure_then_resume_skips_completed_nodes_and_keeps_correlation_id(
    log_dir: Path, opened: list[Any]
) -> None:
    calls = Calls(fail={"b"})
    cp = open_cp(opened, log_dir)
    with pytest.raises(NodeException, match="node 'b' raised RuntimeError") as failed:
        run(
            linear_graph(calls, cp).invoke(Linear(), correlation_id="corr-A", invocation_id="att-1")
        )
    assert failed.value.category == "node_exception"
    assert [p.node_name for p in run(cp.load("att-1")).completed_positions] == ["a"]
    cp.sync.close()  # a new process: the resume reads dict states back from the log

    cp = open_cp(opened, log_dir)
    calls.ran.clear()
    calls.fail.clear()
    final = run(linear_graph(calls, cp).invoke(Linear(), resume_invocation="att-1"))
    assert calls.ran == ["b", "c"]  # "a" completed in the first attempt: skipped
    assert final == Linear(a=1, b=2, c=3, trail=["a", "b", "c"])

    attempts = run(cp.list(CheckpointFilter(correlation_id="corr-A")))
    assert len(attempts) == 2
    assert {s.correlation_id for s in attempts} == {"corr-A"}
    second = next(s.invocation_id for s in attempts if s.invocation_id != "att-1")
    assert [s.completed_node_count for s in attempts] == [1, 3]  # oldest first
    resumed = run(cp.load(second))
    assert resumed.correlation_id == "corr-A"
    assert [p.node_name for p in resumed.completed_positions] == ["a", "b", "c"]
    assert run(cp.list(CheckpointFilter(correlation_id="corr-B"))) == []


def test_delete_forgets_one_attempt_and_keeps_its_history(log_dir: Path, opened: list[Any]) -> None:
    calls = Calls(fail={"c"})
    cp = open_cp(opened, log_dir)
    graph = linear_graph(calls, cp)
    with pytest.raises(NodeException):
        run(graph.invoke(Linear(), correlation_id="corr-D", invocation_id="del-1"))
    calls.fail.clear()
    run(graph.invoke(Linear(), resume_invocation="del-1"))
    run(cp.delete("del-1"))
    run(cp.delete("never-saved"))  # unknown ids: a no-op
    assert run(cp.load("del-1")) is None
    remaining = run(cp.list(CheckpointFilter(correlation_id="corr-D")))
    assert len(remaining) == 1
    assert remaining[0].invocation_id != "del-1"
    assert remaining[0].completed_node_count == 3
    assert [e.kind for e in cp.sync.history("del-1")] == ["save", "save", "delete"]
    with pytest.raises(CheckpointNotFound, match="del-1"):
        run(graph.invoke(Linear(), resume_invocation="del-1"))
    assert cp.sync.verify().ok


# -- subgraph: resume inside it ---------------------------------------------------------------


class Shell(State):
    prepared: bool = False
    x: int = 0
    y: int = 0
    z: int = 0
    done: bool = False


class Inner(State):
    x: int = 0
    y: int = 0
    z: int = 0


def test_subgraph_inner_node_resume(log_dir: Path, opened: list[Any]) -> None:
    calls = Calls(fail={"s3"})

    def step(name: str, update: Callable[[Inner], dict[str, int]]) -> Any:
        async def body(s: Inner) -> dict[str, int]:
            calls.hit(name)
            return update(s)

        return body

    async def prep(_s: Shell) -> dict[str, Any]:
        calls.hit("prep")
        return {"prepared": True, "x": 1}

    async def finish(_s: Shell) -> dict[str, Any]:
        calls.hit("finish")
        return {"done": True}

    inner = (
        GraphBuilder(Inner)
        .add_node("s1", step("s1", lambda s: {"x": s.x + 10}))
        .add_node("s2", step("s2", lambda s: {"y": s.x * 2}))
        .add_node("s3", step("s3", lambda s: {"z": s.x + s.y}))
        .add_edge("s1", "s2")
        .add_edge("s2", "s3")
        .add_edge("s3", END)
        .set_entry("s1")
        .compile()
    )
    cp = open_cp(opened, log_dir)
    graph = (
        GraphBuilder(Shell)
        .add_node("prep", prep)
        .add_subgraph_node("sub", inner)
        .add_node("finish", finish)
        .add_edge("prep", "sub")
        .add_edge("sub", "finish")
        .add_edge("finish", END)
        .set_entry("prep")
        .with_checkpointer(cp)
        .compile()
    )
    with pytest.raises(NodeException, match="node 's3' raised RuntimeError"):
        run(graph.invoke(Shell(), invocation_id="sub-1"))
    saved = run(cp.load("sub-1"))
    assert [(p.namespace, p.node_name) for p in saved.completed_positions] == [
        ((), "prep"),
        (("sub",), "s1"),
        (("sub",), "s2"),
    ]
    # the subgraph's own state (the default projection starts it from its defaults)
    assert saved.state == {"x": 10, "y": 20, "z": 0}
    assert saved.parent_states == ({"prepared": True, "x": 1, "y": 0, "z": 0, "done": False},)

    calls.ran.clear()
    calls.fail.clear()
    final = run(graph.invoke(Shell(), resume_invocation="sub-1"))
    assert calls.ran == ["s3", "finish"]
    assert final == Shell(prepared=True, x=10, y=20, z=30, done=True)


# -- fan-out: 1,000 items, failure part-way, resume re-runs only what did not complete -------

FAN_OUT_ITEMS = 1_000
FAIL_ITEM = 640


@pytest.mark.slow
def test_fan_out_fails_part_way_and_resume_runs_only_unfinished_instances(
    log_dir: Path, opened: list[Any]
) -> None:
    calls = Calls()
    fail = {FAIL_ITEM}
    cp = open_cp(opened, log_dir, durability="process")
    items = list(range(FAN_OUT_ITEMS))
    graph = fan_out_graph(cp, squaring(calls, fail))
    with pytest.raises(NodeException, match=f"item {FAIL_ITEM} fails"):
        run(graph.invoke(Outer(items=items), invocation_id="fan-1"))
    cp.sync.close()

    cp = open_cp(opened, log_dir, durability="process")
    saved = run(cp.load("fan-1"))
    done = completed(saved)
    assert saved.fan_out_progress[0].instance_count == FAN_OUT_ITEMS
    assert FAIL_ITEM not in done
    assert 0 < len(done) < FAN_OUT_ITEMS
    assert set(instance_states(saved)) <= {"completed", "in_flight", "not_started"}
    first_run = dict(calls.items)
    assert all(first_run.get(i) == 1 for i in done)

    calls.items.clear()
    fail.clear()
    final = run(
        fan_out_graph(cp, squaring(calls, fail)).invoke(
            Outer(items=items), resume_invocation="fan-1"
        )
    )
    assert set(calls.items) == set(range(FAN_OUT_ITEMS)) - done  # only the unfinished ran
    assert set(calls.items.values()) == {1}
    assert len(final.results) == FAN_OUT_ITEMS  # an append reducer: no duplicates
    assert sorted(final.results) == [i * i for i in items]
    assert cp.sync.verify().ok


# -- collect error policy, and resuming from any point of the history -------------------------

COLLECT_ITEMS = 40
COLLECT_FAILING = {i for i in range(COLLECT_ITEMS) if i % 7 == 3}


def test_collect_policy_records_error_entries_and_resume_rolls_them_forward(
    log_dir: Path, opened: list[Any]
) -> None:
    calls = Calls()
    cp = open_cp(opened, log_dir)
    items = list(range(COLLECT_ITEMS))
    graph = fan_out_graph(
        cp, squaring(calls, COLLECT_FAILING), concurrency=4, error_policy="collect"
    )
    final = run(graph.invoke(Outer(items=items), invocation_id="col-1"))
    ok = [i for i in items if i not in COLLECT_FAILING]
    assert sorted(final.results) == [i * i for i in ok]
    assert sorted(int(e["fan_out_index"]) for e in final.errors) == sorted(COLLECT_FAILING)
    assert {e["category"] for e in final.errors} == {"node_exception"}

    # A mid-run point of the log: an instance-completed save with some errors already recorded.
    mid = next(
        e.record
        for e in cp.sync.history("col-1")
        if e.kind == "fan_out_internal"
        and not e.record.parent_states
        and len(completed(e.record)) >= COLLECT_ITEMS // 2
    )
    (fan_out,) = mid.fan_out_progress
    errors_then = {i for i, p in enumerate(fan_out.instances) if p.result_is_error}
    assert errors_then
    assert all(fan_out.instances[i].state == "completed" for i in errors_then)
    assert all(fan_out.instances[i].result["category"] == "node_exception" for i in errors_then)

    # Resume from that point, saved under a new invocation id ("what if it had crashed here").
    run(cp.save("col-mid", msgspec.structs.replace(mid, invocation_id="col-mid")))
    calls.items.clear()
    resumed = run(graph.invoke(Outer(items=items), resume_invocation="col-mid"))
    assert set(calls.items) == set(items) - completed(mid)
    assert sorted(resumed.results) == [i * i for i in ok]
    assert sorted(int(e["fan_out_index"]) for e in resumed.errors) == sorted(COLLECT_FAILING)


# -- batching: a hard crash loses only the buffered saves --------------------------------------


async def _crash_child(path: str, items: int, flush_every: int, crash_at: int) -> None:
    cp = Checkpointer.open(
        path, durability="process", batching=FanOutInternalSaveBatching(flush_every)
    )

    async def square(s: Item) -> dict[str, int]:
        if s.item == crash_at:
            os._exit(17)  # no flush, no close: the buffered saves die with the process
        return {"out": s.item * s.item}

    graph = fan_out_graph(cp, square, concurrency=1)
    await graph.invoke(Outer(items=list(range(items))), invocation_id="crash-1")


@pytest.mark.parametrize("crash_at", [57, 100], ids=lambda k: f"crash_at={k}")
def test_batching_loses_only_buffered_saves_after_a_hard_crash(
    log_dir: Path, opened: list[Any], crash_at: int
) -> None:
    items, flush_every = 200, 16
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "crash-child",
            str(log_dir),
            str(items),
            str(flush_every),
            str(crash_at),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 17, child.stdout + child.stderr

    cp = open_cp(opened, log_dir, durability="process")
    saved = run(cp.load("crash-1"))
    # Serial instances 0..crash_at-1 completed, each after 2 fan-out saves (inner node, then
    # instance completed); every flush_every-th save flushed the buffer. What survives is the
    # prefix up to the last flush, and exactly that.
    calls_before_crash = 2 * crash_at
    durable_calls = calls_before_crash - calls_before_crash % flush_every
    assert completed(saved) == set(range(durable_calls // 2))
    assert calls_before_crash - durable_calls < flush_every  # the loss window
    assert cp.sync.verify().ok

    calls = Calls()
    final = run(
        fan_out_graph(cp, squaring(calls, set()), concurrency=4).invoke(
            Outer(items=list(range(items))), resume_invocation="crash-1"
        )
    )
    assert set(calls.items) == set(range(durable_calls // 2, items))
    assert sorted(final.results) == [i * i for i in range(items)]


# -- the whole run, replayed from the log after the fact ---------------------------------------


class Recorder:
    """Forwards to a Checkpointer and keeps (method, record) of every save, in call order."""

    supports_state_migration = True

    def __init__(self, inner: Checkpointer) -> None:
        self.inner = inner
        self.saves: list[tuple[str, Any]] = []

    async def save(self, invocation_id: str, record: Any) -> None:
        self.saves.append(("save", record))
        await self.inner.save(invocation_id, record)

    async def save_fan_out_internal(self, invocation_id: str, record: Any) -> None:
        self.saves.append(("fan_out_internal", record))
        await self.inner.save_fan_out_internal(invocation_id, record)

    async def save_fan_out_in_flight_failure(self, invocation_id: str, record: Any) -> None:
        self.saves.append(("fan_out_in_flight_failure", record))
        await self.inner.save_fan_out_in_flight_failure(invocation_id, record)

    async def load(self, invocation_id: str) -> Any:
        return await self.inner.load(invocation_id)

    async def list(self, filter: Any = None) -> Any:
        return await self.inner.list(filter)

    async def delete(self, invocation_id: str) -> None:
        await self.inner.delete(invocation_id)


def plain(record: Any) -> Any:
    """A record (ours or openarmature's) as builtins, states dumped as JSON-mode data."""

    def state(s: Any) -> Any:
        return s.model_dump(mode="json") if hasattr(s, "model_dump") else s

    def pos(p: Any) -> tuple[Any, ...]:
        return (tuple(p.namespace), p.node_name, p.step, p.attempt_index, p.fan_out_index)

    return {
        "ids": (record.invocation_id, record.correlation_id, record.schema_version),
        "state": state(record.state),
        "parents": [state(s) for s in record.parent_states],
        "positions": [pos(p) for p in record.completed_positions],
        "saved_at": record.last_saved_at,
        "fan_out": [
            (
                f.fan_out_node_name,
                tuple(f.namespace),
                f.instance_count,
                [
                    (
                        i.state,
                        i.result,
                        i.result_is_error,
                        [pos(p) for p in i.completed_inner_positions],
                    )
                    for i in f.instances
                ],
                [
                    (tuple(e.namespace), e.fan_out_node_name, e.fan_out_index)
                    for e in f.enclosing_fan_out_lineage
                ],
            )
            for f in record.fan_out_progress
        ],
    }


def test_history_of_the_whole_run_replays_from_the_log(log_dir: Path, opened: list[Any]) -> None:
    cp = open_cp(opened, log_dir)
    recorder = Recorder(cp)
    calls = Calls()
    items = list(range(60))
    failing = {13, 31}
    graph = fan_out_graph(recorder, squaring(calls, failing), concurrency=6, error_policy="collect")
    run(graph.invoke(Outer(items=items), invocation_id="hist-1", correlation_id="hist"))
    cp.sync.close()

    cp = open_cp(opened, log_dir, readonly=True)  # after the fact, from the file alone
    history = list(cp.sync.history("hist-1"))
    # the final save, then per instance: its inner node's save (not for a failing one) and
    # its instance-completed save
    assert len(history) == len(recorder.saves) == 1 + 2 * len(items) - len(failing)
    assert [e.kind for e in history] == [kind for kind, _ in recorder.saves]
    assert [plain(e.record) for e in history] == [plain(r) for _, r in recorder.saves]
    seqs = [e.seq for e in history]
    assert seqs == list(range(1, len(history) + 1))
    for seq in (1, len(history) // 2, len(history)):  # any point, folded from its snapshot
        assert plain(cp.sync.record_at("hist-1", seq)) == plain(recorder.saves[seq - 1][1])
    assert cp.sync.verify().ok


# -- errors: the engine wraps ours as CheckpointSaveFailed --------------------------------------


class Opaque:
    """Not a builtin, dataclass, Struct or Pydantic model: not structurally encodable."""


class Holder(State):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    blob: Any = None


def test_save_errors_reach_the_caller_as_checkpoint_save_failed(
    log_dir: Path, opened: list[Any]
) -> None:
    cp = open_cp(opened, log_dir)

    async def put(_s: Holder) -> dict[str, Any]:
        return {"blob": Opaque()}

    graph = GraphBuilder(Holder).add_node("put", put).add_edge("put", END).set_entry("put")
    compiled = graph.with_checkpointer(cp).compile()
    with pytest.raises(
        CheckpointSaveFailed, match=r"raised EncodingError: cannot encode state"
    ) as e:
        run(compiled.invoke(Holder(), invocation_id="bad-1"))
    assert isinstance(e.value.__cause__, EncodingError)
    assert isinstance(e.value.__cause__, CheckpointError)
    assert run(cp.load("bad-1")) is None  # nothing half-written
    assert cp.sync.verify().ok


# -- state migration: dict states reach the engine's migration registry ------------------------


class TicketV1(State):
    schema_version = "1"
    title: str = ""
    step_one: bool = False
    step_two: bool = False


class TicketV3(State):
    schema_version = "3"
    title: str = ""
    step_one: bool = False
    step_two: bool = False
    priority: str = ""
    owner: str = ""


def ticket_graph(state_cls: type[State], calls: Calls, cp: Any) -> Any:
    async def one(_s: Any) -> dict[str, Any]:
        calls.hit("one")
        return {"step_one": True}

    async def two(_s: Any) -> dict[str, Any]:
        calls.hit("two")
        return {"step_two": True}

    return (
        GraphBuilder(state_cls)
        .add_node("one", one)
        .add_node("two", two)
        .add_edge("one", "two")
        .add_edge("two", END)
        .set_entry("one")
        .with_checkpointer(cp)
    )


def test_state_migration_chain_runs_on_resume(log_dir: Path) -> None:
    calls = Calls(fail={"two"})
    migrated: list[str] = []

    def v1_to_v2(state: Any) -> Any:
        assert isinstance(state, dict)  # the structural form, not a TicketV1
        migrated.append("1->2")
        return {**state, "priority": "normal"}

    def v2_to_v3(state: Any) -> Any:
        migrated.append("2->3")
        return {**state, "owner": "ops"}

    async def scenario() -> None:
        async with OpenArmatureCheckpointer.open(log_dir) as cp:
            graph = ticket_graph(TicketV1, calls, cp).compile()
            with pytest.raises(NodeException):
                await graph.invoke(TicketV1(title="t"), invocation_id="mig-1")
        calls.ran.clear()
        calls.fail.clear()
        async with OpenArmatureCheckpointer.open(log_dir) as cp:  # the next release, V3
            graph = (
                ticket_graph(TicketV3, calls, cp)
                .with_state_migration("1", "2", v1_to_v2)
                .with_state_migration("2", "3", v2_to_v3)
                .compile()
            )
            final = await graph.invoke(TicketV3(), resume_invocation="mig-1")
            assert final == TicketV3(
                title="t", step_one=True, step_two=True, priority="normal", owner="ops"
            )
            new = [s for s in await cp.list() if s.invocation_id != "mig-1"]
            assert (await cp.load(new[0].invocation_id)).schema_version == "3"

    run(scenario())
    assert migrated == ["1->2", "2->3"]
    assert calls.ran == ["two"]


def test_plain_checkpointer_cannot_migrate_records_that_are_not_dataclasses(
    log_dir: Path, opened: list[Any]
) -> None:
    """The engine calls ``dataclasses.replace`` on the loaded record to migrate it; ckptlog's
    msgspec records refuse, which is why OpenArmatureCheckpointer exists (see the docs)."""
    calls = Calls(fail={"two"})
    cp = open_cp(opened, log_dir)
    with pytest.raises(NodeException):
        run(ticket_graph(TicketV1, calls, cp).compile().invoke(TicketV1(), invocation_id="m"))
    calls.fail.clear()
    graph = ticket_graph(TicketV3, calls, cp).with_state_migration("1", "3", dict).compile()
    with pytest.raises(TypeError, match="replace\\(\\) should be called on dataclass instances"):
        run(graph.invoke(TicketV3(), resume_invocation="m"))


# -- eventlog.integrations.openarmature ----------------------------------------------------------


def test_integration_returns_openarmatures_records_with_typed_states(log_dir: Path) -> None:
    async def scenario() -> None:
        async with OpenArmatureCheckpointer.open(log_dir) as cp:
            final = await linear_graph(Calls(), cp).invoke(Linear(), invocation_id="t-1")
            loaded = await cp.load("t-1")
            assert isinstance(loaded, OaRecord)
            assert loaded.state == final  # a Linear again, not a dict
            assert isinstance(loaded.state, Linear)
            summaries = list(await cp.list(OaFilter(correlation_id=loaded.correlation_id)))
            assert all(isinstance(s, OaSummary) for s in summaries)
            assert [s.invocation_id for s in summaries] == ["t-1"]
            assert await cp.load("missing") is None
        async with OpenArmatureCheckpointer.open(log_dir) as cp:  # a new process: no classes
            assert (await cp.load("t-1")).state == final.model_dump(mode="json")

    run(scenario())


def test_checkpointer_for_a_graph_rebuilds_typed_states_in_a_new_process(
    log_dir: Path, opened: list[Any]
) -> None:
    calls = Calls(fail={"b"})
    graph = linear_graph(calls, None)
    cp = checkpointer_for(graph, log_dir, durability="process")
    opened.append(cp)
    assert graph.checkpointer is cp
    with pytest.raises(NodeException):
        run(graph.invoke(Linear(), invocation_id="for-1"))
    cp.close()

    fresh = linear_graph(Calls(), None)
    cp = checkpointer_for(fresh, log_dir, durability="process")
    opened.append(cp)
    loaded = cp.load_sync("for-1")
    assert loaded is not None
    assert loaded.state == Linear(a=1, trail=["a"])
    final = run(fresh.invoke(Linear(), resume_invocation="for-1"))
    assert final == Linear(a=1, b=2, c=3, trail=["a", "b", "c"])


def test_typed_states_follow_depth_and_fall_back_to_dicts() -> None:
    types = StateTypes()
    types.register_graph(fan_out_graph(None, squaring(Calls(), set())))
    outer = Outer(items=[1, 2]).model_dump(mode="json")
    item = Item(item=1, out=1).model_dump(mode="json")
    assert types.rebuild("x", [outer, item], "") == [Outer(items=[1, 2]), Item(item=1, out=1)]
    # a schema_version change: dicts, for the engine's migration registry
    assert types.rebuild("x", [outer, item], "2") is None
    # an unknown outer shape: nothing is rebuilt
    assert types.rebuild("x", [{"other": 1}, item], "") is None
    # a known shape that does not validate at depth 1 stays a dict
    assert types.rebuild("x", [outer, {"item": "NaN", "out": 0}], "") == [
        Outer(items=[1, 2]),
        {"item": "NaN", "out": 0},
    ]

    class Twin(State):  # the same field names as Item at the same depth: ambiguous
        item: int = 0
        out: int = 0

    types.register(Twin, 1)
    assert types.rebuild("x", [outer, item], "") == [Outer(items=[1, 2]), item]

    # ...unless this invocation last saved one of them there
    def saved_twin(inv: str) -> OaRecord:
        return OaRecord(inv, "c", Twin(item=1, out=1), (), (Outer(items=[1, 2]),), 0.0)

    types.remember("x", saved_twin("x"))
    assert types.rebuild("x", [outer, item], "") == [Outer(items=[1, 2]), Twin(item=1, out=1)]

    # the hints are bounded: the least recently saved invocation's are dropped first
    bounded = StateTypes(invocations_max=2)
    bounded.register(Outer, 0)
    bounded.register(Item, 1)
    for inv in ("i1", "i2", "i3"):
        bounded.remember(inv, saved_twin(inv))
    assert bounded.rebuild("i1", [outer, item], "") == [Outer(items=[1, 2]), item]
    assert bounded.rebuild("i3", [outer, item], "")[1] == Twin(item=1, out=1)


def test_integration_options_are_checked() -> None:
    with pytest.raises(CheckpointError, match="invocations_max must be at least 1, got 0"):
        StateTypes(invocations_max=0)
    with pytest.raises(CheckpointError, match=r"must be a FanOutInternalSaveBatching .*got int"):
        OpenArmatureCheckpointer.open("unused", fan_out_internal_save_batching=16)


def test_openarmatures_batching_config_is_accepted(log_dir: Path) -> None:
    cp = OpenArmatureCheckpointer.open(log_dir, fan_out_internal_save_batching=OaBatching(4))
    try:
        assert cp.sync.batching == FanOutInternalSaveBatching(4)
    finally:
        cp.close()


def test_to_openarmature_keeps_every_field(log_dir: Path, opened: list[Any]) -> None:
    cp = open_cp(opened, log_dir)
    items = list(range(10))
    run(
        fan_out_graph(cp, squaring(Calls(), {4}), error_policy="collect").invoke(
            Outer(items=items), invocation_id="c"
        )
    )
    for entry in cp.sync.history("c"):
        assert entry.record is not None
        converted = to_openarmature(entry.record)
        assert isinstance(converted, OaRecord)
        assert plain(converted) == plain(entry.record)


# -- the benchmark at smoke size -------------------------------------------------------------------


def test_openarmature_fanout_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "openarmature_fanout.json"
    stdout = run_module("benchmarks.openarmature_fanout", "--quick", "--out", str(out), timeout=300)
    assert "fan-out over 30 items" in stdout
    assert "ratios (targets at N=5,000" in stdout
    data = msgspec.json.decode(out.read_bytes())
    assert data["quick"] is True
    backends = {r["backend"] for r in data["runs"]}
    assert backends == {
        "ckptlog fsync",
        "ckptlog fsync batch",
        "ckptlog process",
        "ckptlog process batch",
        "sqlite pickle",
        "sqlite json",
        "in-memory",
    }
    for r in data["runs"]:
        assert r["saves"] == 3 * r["instances"] + 1
    assert [r["instances"] for r in data["ratios"]] == [30, 90]


if __name__ == "__main__" and sys.argv[1:2] == ["crash-child"]:
    path, n, flush, crash = sys.argv[2], *map(int, sys.argv[3:6])
    asyncio.run(_crash_child(path, n, flush, crash))
    sys.exit(3)  # not reached: the crash exits with 17
