"""The records, scripts and checks the checkpointer contract suites share (eventlog.testing),
and the base of the sync contract (the store under test and its fixtures)."""

from __future__ import annotations

import base64
import dataclasses
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest

from eventlog.checkpointer import Checkpointer
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import (
    SeqOutOfRange,
)
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    CheckpointSummary,
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)

NS: tuple[str, ...] = ("graph",)
UNENCODABLE_STATE_PATH = "state.items[3]"
BATCH_EVERY = 3  # flush_every of the batching tests: two buffered saves stay invisible
_AUTO: Any = object()  # make_record's default state: {"at": last_saved_at}


# -- record builders ---------------------------------------------------------------------------


def pos(
    node: str,
    step: int,
    *,
    namespace: tuple[str, ...] = NS,
    attempt: int = 0,
    fan_out_index: int | None = None,
) -> NodePosition:
    return NodePosition(namespace, node, step, attempt, fan_out_index)


def in_flight(*inner: NodePosition) -> FanOutInstanceProgress:
    return FanOutInstanceProgress("in_flight", completed_inner_positions=inner)


def done(result: Any, *inner: NodePosition, error: bool = False) -> FanOutInstanceProgress:
    return FanOutInstanceProgress("completed", result, error, inner)


def fan_out(
    name: str,
    instances: Sequence[FanOutInstanceProgress],
    *,
    namespace: tuple[str, ...] = NS,
    lineage: tuple[EnclosingFanOutInstance, ...] = (),
) -> FanOutProgress:
    return FanOutProgress(name, namespace, len(instances), tuple(instances), lineage)


def make_record(
    invocation_id: str,
    *,
    correlation_id: str = "corr",
    state: Any = _AUTO,
    positions: Sequence[NodePosition] = (),
    parent_states: Sequence[Any] = (),
    at: float = 1.0,
    schema_version: str = "",
    fan_outs: Sequence[FanOutProgress] = (),
) -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id=invocation_id,
        correlation_id=correlation_id,
        state={"at": at} if state is _AUTO else state,
        completed_positions=tuple(positions),
        parent_states=tuple(parent_states),
        last_saved_at=at,
        schema_version=schema_version,
        fan_out_progress=tuple(fan_outs),
    )


def with_instance(
    record: CheckpointRecord, fan_out_index: int, index: int, progress: FanOutInstanceProgress
) -> CheckpointRecord:
    """``record`` with instance ``index`` of its ``fan_out_index``-th fan-out replaced."""
    fos = list(record.fan_out_progress)
    insts = list(fos[fan_out_index].instances)
    insts[index] = progress
    fos[fan_out_index] = msgspec.structs.replace(fos[fan_out_index], instances=tuple(insts))
    return msgspec.structs.replace(record, fan_out_progress=tuple(fos))


def rich_record(invocation_id: str, at: float = 1.0) -> CheckpointRecord:
    """A record using every field: unicode, nested fan-outs with lineage, parent states."""
    outer = fan_out(
        "map_ü",
        [
            done({"r": [1, 2.5, None]}, pos("x", 1, fan_out_index=0)),
            in_flight(pos("x", 1, fan_out_index=1)),
            NOT_STARTED,
        ],
    )
    inner = fan_out(
        "inner",
        [done("boom", error=True), NOT_STARTED],
        namespace=(*NS, "map_ü"),
        lineage=(EnclosingFanOutInstance(NS, "map_ü", 1),),
    )
    return make_record(
        invocation_id,
        correlation_id="corr-🙂",
        state={
            "text": "héllo\x00wörld",
            "n": -(2**63),
            "big": 2**64 - 1,
            "f": -0.0,
            "nested": {"l": [1, [2, {"x": None}]], "b": True},
        },
        positions=[pos("start", 1), pos("map_ü", 2, attempt=1)],
        parent_states=[{"outer": [1, 2]}, None, "p"],
        at=at,
        schema_version="v1",
        fan_outs=[outer, inner],
    )


def fan_out_script(invocation_id: str) -> list[tuple[str, CheckpointRecord]]:
    """``(save kind, record)`` in call order: fan-outs with nested lineage appearing and
    disappearing, instance counts changing, positions truncated and replaced, fan-outs
    reordered, a wide fan-out, and everything emptied; instances only move forward within
    one fan-out's life (openarmature's contract, see projections.records)."""
    a, fo, c, d = pos("a", 1), pos("fan", 2), pos("c", 3), pos("d", 4)

    def x(i: int, step: int) -> NodePosition:
        return pos("x", step, namespace=(*NS, "outer"), fan_out_index=i)

    def outer(*insts: FanOutInstanceProgress) -> FanOutProgress:
        return fan_out("outer", insts)

    def inner(i: int, *insts: FanOutInstanceProgress) -> FanOutProgress:
        lin = (EnclosingFanOutInstance(NS, "outer", i),)
        return fan_out("inner", insts, namespace=(*NS, "outer"), lineage=lin)

    def leaf(i: int, j: int, *insts: FanOutInstanceProgress) -> FanOutProgress:
        lin = (
            EnclosingFanOutInstance(NS, "outer", i),
            EnclosingFanOutInstance((*NS, "outer"), "inner", j),
        )
        return fan_out("leaf", insts, namespace=(*NS, "outer", "inner"), lineage=lin)

    ns_ = NOT_STARTED
    out: list[tuple[str, CheckpointRecord]] = []

    def step(kind: str, **fields: Any) -> None:
        n = len(out) + 1
        fields.setdefault("state", {"step": n})
        out.append((kind, make_record(invocation_id, at=float(n), **fields)))

    step("save", positions=[a], state={"n": 1})
    step("save", positions=[a, fo], fan_outs=[outer(ns_, ns_, ns_)])
    step("fan_out_internal", positions=[a, fo], fan_outs=[outer(in_flight(x(0, 1)), ns_, ns_)])
    step(
        "fan_out_internal",
        positions=[a, fo],
        fan_outs=[outer(in_flight(x(0, 1), x(0, 2)), in_flight(), ns_), inner(0, in_flight(), ns_)],
    )
    step(
        "fan_out_in_flight_failure",
        positions=[a, fo],
        fan_outs=[
            outer(in_flight(x(0, 1), x(0, 2)), in_flight(), ns_),
            inner(0, in_flight(pos("z", 1)), ns_),
            leaf(0, 0, done(1), ns_),
        ],
    )
    step(  # the leaf fan-out ends; inner instances complete, one with an error
        "fan_out_internal",
        positions=[a, fo],
        fan_outs=[
            outer(done("ok", x(0, 1), x(0, 2)), in_flight(), ns_),
            inner(0, done({"r": [1, 2]}), done("boom", error=True)),
        ],
    )
    step(  # inner of instance 0 ends, inner of instance 1 starts (same name, other lineage)
        "fan_out_internal",
        positions=[a, fo],
        fan_outs=[
            outer(done("ok", x(0, 1), x(0, 2)), in_flight(x(1, 1)), done("bad", error=True)),
            inner(1, ns_, in_flight()),
        ],
    )
    wider = fan_out("outer", [done("ok"), in_flight(), ns_, ns_])
    step("save", positions=[a], fan_outs=[wider, inner(1, ns_, in_flight())])  # 3 -> 4, truncated
    step(  # positions replaced, not appended; parent states appear
        "save",
        positions=[a, c, d],
        state={"n": 2, "l": ["x"]},
        parent_states=[{"p": 1}],
        fan_outs=[wider, inner(1, ns_, in_flight())],
    )
    step(  # the same fan-outs, reordered
        "save",
        positions=[a, c, d],
        state={"n": 2, "l": ["x"]},
        parent_states=[{"p": 1}],
        fan_outs=[inner(1, ns_, in_flight()), wider],
    )
    step(
        "fan_out_internal",
        positions=[a, c, d],
        parent_states=[{"p": 1}],
        fan_outs=[fan_out("wide", [ns_] * 999 + [done(999)])],
    )
    emptied: dict[str, Any] = {
        "positions": [],
        "state": None,
        "parent_states": [{"p": 2}, [3]],
        "schema_version": "v2",
        "correlation_id": "other",
    }
    step("save", **emptied)
    step("save", **emptied)  # equal content, new objects
    step("save", positions=[pos("a", 1)], fan_outs=[outer(ns_, ns_, ns_)])  # re-entered
    return out


@dataclasses.dataclass(frozen=True)
class _DuckPosition:
    namespace: tuple[str, ...]
    node_name: str
    step: int
    attempt_index: int = 0
    fan_out_index: int | None = None


@dataclasses.dataclass(frozen=True)
class _DuckInstance:
    state: str
    result: Any = None
    result_is_error: bool = False
    completed_inner_positions: tuple[_DuckPosition, ...] = ()


@dataclasses.dataclass(frozen=True)
class _DuckLineage:
    namespace: tuple[str, ...]
    fan_out_node_name: str
    fan_out_index: int


@dataclasses.dataclass(frozen=True)
class _DuckFanOut:
    fan_out_node_name: str
    namespace: tuple[str, ...]
    instance_count: int
    instances: tuple[_DuckInstance, ...]
    enclosing_fan_out_lineage: tuple[_DuckLineage, ...] = ()


@dataclasses.dataclass(frozen=True)
class _DuckRecord:
    """openarmature's record shape as plain dataclasses (the engine's records are not ours)."""

    invocation_id: str
    correlation_id: str
    state: Any
    completed_positions: tuple[_DuckPosition, ...]
    parent_states: tuple[Any, ...]
    last_saved_at: float
    schema_version: str = ""
    fan_out_progress: tuple[_DuckFanOut, ...] = ()


@dataclasses.dataclass
class _DataclassState:
    name: str
    items: list[int]
    inner: dict[str, Any]


class _StructState(msgspec.Struct):
    name: str
    values: list[float]


def incompressible(seed: int, raw_bytes: int) -> str:
    """Incompressible text: a snapshot holding it stays large, so deltas stay cheaper."""
    return base64.b64encode(random.Random(seed).randbytes(raw_bytes)).decode()


def summary_of(record: CheckpointRecord) -> CheckpointSummary:
    return CheckpointSummary(
        record.invocation_id,
        record.correlation_id,
        record.last_saved_at,
        len(record.completed_positions),
    )


def assert_tuples(record: CheckpointRecord) -> None:
    """Every sequence of a loaded record is a tuple (openarmature's types), states aside."""
    assert type(record.completed_positions) is tuple
    assert type(record.parent_states) is tuple
    assert type(record.fan_out_progress) is tuple
    for p in record.completed_positions:
        assert type(p.namespace) is tuple
    for fo in record.fan_out_progress:
        assert type(fo.namespace) is tuple
        assert type(fo.instances) is tuple
        assert type(fo.enclosing_fan_out_lineage) is tuple
        for lin in fo.enclosing_fan_out_lineage:
            assert type(lin.namespace) is tuple
        for inst in fo.instances:
            assert type(inst.completed_inner_positions) is tuple


def assert_history_consistent(cl: CheckpointLog, invocation_id: str) -> None:
    """``record_at`` at every seq (and one past the end) equals ``history()``; the log verifies."""
    hist = list(cl.history(invocation_id))
    assert [e.seq for e in hist] == list(range(1, len(hist) + 1))
    for e in hist:
        assert cl.record_at(invocation_id, e.seq) == e.record, f"record_at seq {e.seq}"
    if hist:
        with pytest.raises(SeqOutOfRange):  # past the end is an error, not the latest record
            cl.record_at(invocation_id, len(hist) + 5)
        with pytest.raises(SeqOutOfRange):
            cl.record_at(invocation_id, -1)
        assert cl.record_at(invocation_id, 0) is None  # before the first save
        assert cl.load(invocation_id) == hist[-1].record
    report = cl.verify()
    assert report.ok, str(report)


def save_kind(cl: CheckpointLog, kind: str, record: CheckpointRecord) -> None:
    if kind == "save":
        cl.save(record.invocation_id, record)
    elif kind == "fan_out_internal":
        cl.save_fan_out_internal(record.invocation_id, record)
    elif kind == "fan_out_in_flight_failure":
        cl.save_fan_out_in_flight_failure(record.invocation_id, record)
    else:
        raise ValueError(f"unknown save kind {kind!r}")


async def asave_kind(cp: Checkpointer, kind: str, record: CheckpointRecord) -> None:
    if kind == "save":
        await cp.save(record.invocation_id, record)
    elif kind == "fan_out_internal":
        await cp.save_fan_out_internal(record.invocation_id, record)
    elif kind == "fan_out_in_flight_failure":
        await cp.save_fan_out_in_flight_failure(record.invocation_id, record)
    else:
        raise ValueError(f"unknown save kind {kind!r}")


# -- the sync contract -------------------------------------------------------------------------

Opener = Callable[..., CheckpointLog]


class LogContractBase:
    """What the parts of :class:`~eventlog.testing.CheckpointLogContract` share: the store
    under test (``make_log``, ``persistent``) and its fixtures."""

    persistent: ClassVar[bool]
    """``True`` when ``make_log`` on the same ``tmp_path`` after ``close()`` sees the data."""

    def make_log(self, tmp_path: Path, **kw: Any) -> CheckpointLog:
        """A checkpoint log stored under ``tmp_path``; ``kw`` may hold ``batching=...``."""
        raise NotImplementedError("subclasses of CheckpointLogContract implement make_log")

    @pytest.fixture
    def opener(self, tmp_path: Path) -> Iterator[Opener]:
        """``opener(**kw)`` opens the store at ``tmp_path``; all are closed at teardown."""
        opened: list[CheckpointLog] = []

        def _open(**kw: Any) -> CheckpointLog:
            cl = self.make_log(tmp_path, **kw)
            opened.append(cl)
            return cl

        yield _open
        for cl in reversed(opened):
            cl.close()

    @pytest.fixture
    def cl(self, opener: Opener) -> CheckpointLog:
        return opener()

    @pytest.fixture
    def batched(self, opener: Opener) -> CheckpointLog:
        return opener(batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))

    def _require_persistent(self) -> None:
        if not self.persistent:
            pytest.skip("the store is not persistent: nothing survives close()")
