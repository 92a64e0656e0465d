"""The shared checkpointer contract suite: every checkpoint store passes it unchanged.

Subclass :class:`CheckpointLogContract` (sync) or :class:`CheckpointerContract` (async) in a
``Test*`` class and implement ``make_log`` / ``make_checkpointer``; pytest then runs every
``test_*`` method here against that store. The methods pin the semantics listed in
:mod:`eventlog.checkpoints` (openarmature spec §10, 0.17), so a store is done when it passes them.

Invariants the suite relies on:
- ``make_log(tmp_path, **kw)`` / ``make_checkpointer(tmp_path, **kw)`` accept
  ``batching=FanOutInternalSaveBatching(...)`` and return an empty store the first time; called
  again with the same ``tmp_path`` after ``close()`` they reopen the same store when the class
  says ``persistent = True`` (reopen tests are skipped otherwise).
- Each test opens one store at a time per ``tmp_path`` (LMDB refuses a second environment on the
  same path in one process) and closes every store it opened, even when it fails.
- States saved here are JSON-like (dict/list/str/int/float/bool/None), because tuples in a state
  come back as lists; every sequence *of the record* comes back as a tuple.
- Random inputs come from ``random.Random(seed)`` with the seed in the test (STYLE §10).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest

from eventlog import forensics
from eventlog.checkpoint_frames import HEAD_CACHE_MAX, INLINE_LOAD_ROWS_MAX
from eventlog.checkpointer import Checkpointer
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import (
    EncodingError,
    InvalidRecord,
    InvalidStreamKey,
    SeqOutOfRange,
    UnknownInvocation,
)
from eventlog.frames import Event, Save
from eventlog.records import (
    NOT_STARTED,
    CheckpointFilter,
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


class CheckpointLogContract:
    """The :class:`CheckpointLog` contract, as tests. Not collected by itself (no ``Test``)."""

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

    # -- save / load ---------------------------------------------------------------------------

    def test_save_load_round_trip(self, cl: CheckpointLog) -> None:
        rec = rich_record("inv-1")
        cl.save("inv-1", rec)
        loaded = cl.load("inv-1")
        assert loaded == rec
        assert loaded is not None
        assert_tuples(loaded)
        assert loaded.state["big"] == 2**64 - 1

    def test_load_of_unknown_is_none(self, cl: CheckpointLog) -> None:
        assert cl.load("nobody") is None
        with pytest.raises(UnknownInvocation, match="no invocation 'nobody'"):
            cl.record_at("nobody", 1)
        with pytest.raises(UnknownInvocation, match="no invocation 'nobody'"):
            list(cl.history("nobody"))
        assert cl.list() == []
        cl.save("a", make_record("a"))
        assert cl.load("nobody") is None

    def test_save_replaces_the_head(self, cl: CheckpointLog) -> None:
        first = rich_record("a", at=1.0)
        second = make_record("a", state={"v": 2}, positions=[pos("b", 5)], at=2.0)
        cl.save("a", first)
        cl.save("a", second)
        assert cl.load("a") == second
        cl.save("a", first)  # going back to an earlier record is a change like any other
        assert cl.load("a") == first

    def test_state_is_captured_at_call_time(self, cl: CheckpointLog) -> None:
        state: dict[str, Any] = {"items": [1]}
        cl.save("a", make_record("a", state=state))
        state["items"].append(2)
        loaded = cl.load("a")
        assert loaded is not None
        assert loaded.state == {"items": [1]}

    def test_invocations_are_independent(self, cl: CheckpointLog) -> None:
        recs = {f"inv-{i}": make_record(f"inv-{i}", state={"i": i}, at=float(i)) for i in range(5)}
        for k, r in recs.items():
            cl.save(k, r)
        cl.delete("inv-2")
        for k, r in recs.items():
            assert cl.load(k) == (None if k == "inv-2" else r)

    def test_duck_typed_records_are_accepted(self, cl: CheckpointLog) -> None:
        p = _DuckPosition(NS, "n", 1)
        duck = _DuckRecord(
            "d",
            "c",
            {"k": "v"},
            (p,),
            ({"parent": 1},),
            3.5,
            "v9",
            (
                _DuckFanOut(
                    "f",
                    NS,
                    2,
                    (
                        _DuckInstance("completed", {"r": 1}, False, (p,)),
                        _DuckInstance("not_started"),
                    ),
                    (_DuckLineage(NS, "outer", 0),),
                ),
            ),
        )
        ours = make_record(
            "d",
            correlation_id="c",
            state={"k": "v"},
            positions=[pos("n", 1)],
            parent_states=[{"parent": 1}],
            at=3.5,
            schema_version="v9",
            fan_outs=[
                fan_out(
                    "f",
                    [done({"r": 1}, pos("n", 1)), NOT_STARTED],
                    lineage=(EnclosingFanOutInstance(NS, "outer", 0),),
                )
            ],
        )
        cl.save("d", duck)
        assert cl.load("d") == ours
        cl.save_fan_out_internal("d", dataclasses.replace(duck, last_saved_at=4.0))
        assert cl.load("d") == msgspec.structs.replace(ours, last_saved_at=4.0)

    # -- list ----------------------------------------------------------------------------------

    def test_list_summaries_oldest_first_and_by_correlation(self, cl: CheckpointLog) -> None:
        recs = [
            make_record("c", correlation_id="x", at=3.0, positions=[pos("a", 1)]),
            make_record("a", correlation_id="y", at=1.0),
            make_record("b", correlation_id="x", at=2.0, positions=[pos("a", 1), pos("b", 2)]),
            make_record("d", correlation_id="x\x00y", at=4.0),
        ]
        for r in recs:
            cl.save(r.invocation_id, r)
        by_age = sorted(recs, key=lambda r: r.last_saved_at)
        assert cl.list() == [summary_of(r) for r in by_age]
        assert cl.list(None) == cl.list(CheckpointFilter())
        assert cl.list(CheckpointFilter(correlation_id="x")) == [
            summary_of(recs[2]),
            summary_of(recs[0]),
        ]
        assert cl.list(CheckpointFilter(correlation_id="x\x00y")) == [summary_of(recs[3])]
        assert cl.list(CheckpointFilter(correlation_id="nope")) == []
        assert cl.list(CheckpointFilter(correlation_id="")) == []

    def test_list_follows_changes_of_the_head(self, cl: CheckpointLog) -> None:
        cl.save("a", make_record("a", correlation_id="x", at=1.0))
        cl.save("b", make_record("b", correlation_id="x", at=2.0))
        moved = make_record("a", correlation_id="y", at=3.0, positions=[pos("n", 1)] * 3)
        cl.save("a", moved)  # a new correlation id and a newer time
        b = make_record("b", correlation_id="x", at=2.0)
        assert cl.list() == [summary_of(b), summary_of(moved)]
        assert cl.list(CheckpointFilter(correlation_id="x")) == [summary_of(b)]
        assert cl.list(CheckpointFilter(correlation_id="y")) == [summary_of(moved)]
        cl.delete("a")
        assert cl.list() == [summary_of(b)]
        assert cl.list(CheckpointFilter(correlation_id="y")) == []

    # -- delete --------------------------------------------------------------------------------

    def test_delete_of_unknown_id_is_a_no_op(self, cl: CheckpointLog) -> None:
        cl.delete("ghost")
        assert cl.load("ghost") is None
        with pytest.raises(UnknownInvocation):  # a no-op writes no frame
            list(cl.history("ghost"))
        cl.save("a", make_record("a"))
        cl.delete("a")
        cl.delete("a")  # already deleted: nothing more is logged
        assert [e.kind for e in cl.history("a")] == ["save", "delete"]
        assert cl.stats().frames == 2

    def test_delete_hides_the_head_but_keeps_history(self, cl: CheckpointLog) -> None:
        r1 = make_record("a", at=1.0)
        r2 = rich_record("a", at=2.0)
        cl.save("a", r1)
        cl.save("a", r2)
        before = time.time()
        cl.delete("a")
        after = time.time()
        assert cl.load("a") is None
        assert cl.list() == []
        hist = list(cl.history("a"))
        assert [(e.seq, e.kind, e.record) for e in hist] == [
            (1, "save", r1),
            (2, "save", r2),
            (3, "delete", None),
        ]
        assert before - 1 <= hist[2].saved_at <= after + 1
        assert cl.record_at("a", 2) == r2
        assert cl.record_at("a", 3) is None
        assert_history_consistent(cl, "a")

    def test_saving_again_after_delete(self, cl: CheckpointLog) -> None:
        cl.save("a", rich_record("a", at=1.0))
        cl.delete("a")
        again = make_record("a", correlation_id="new", at=5.0, positions=[pos("z", 1)])
        cl.save("a", again)
        assert cl.load("a") == again
        assert cl.list() == [summary_of(again)]
        assert cl.list(CheckpointFilter(correlation_id="corr-🙂")) == []
        assert [e.kind for e in cl.history("a")] == ["save", "delete", "save"]
        assert cl.record_at("a", 3) == again
        assert_history_consistent(cl, "a")

    # -- invalid input -------------------------------------------------------------------------

    @pytest.mark.parametrize("kind", ["save", "fan_out_internal", "fan_out_in_flight_failure"])
    def test_mismatched_invocation_id_is_invalid_record(
        self, batched: CheckpointLog, kind: str
    ) -> None:
        method = {
            "save": batched.save,
            "fan_out_internal": batched.save_fan_out_internal,
            "fan_out_in_flight_failure": batched.save_fan_out_in_flight_failure,
        }[kind]
        with pytest.raises(InvalidRecord) as info:
            method("a", make_record("b"))
        assert str(info.value) == (
            "record.invocation_id is 'b' but the save is for 'a'; "
            "pass the record under its own invocation id"
        )
        batched.flush()
        assert batched.load("a") is None
        with pytest.raises(UnknownInvocation):  # nothing was written
            list(batched.history("a"))
        assert batched.stats().frames == 0

    def test_invalid_invocation_ids_are_rejected(self, cl: CheckpointLog) -> None:
        with pytest.raises(InvalidStreamKey):
            cl.save("", make_record(""))
        too_long = "x" * (cl.log.backend.max_key_bytes + 1)
        with pytest.raises(InvalidStreamKey):
            cl.save(too_long, make_record(too_long))
        with pytest.raises(InvalidStreamKey):
            cl.delete("")
        assert cl.stats().frames == 0

    def test_unencodable_state_is_encoding_error_with_path(self, cl: CheckpointLog) -> None:
        good = make_record("a", state={"items": [1, 2, 3]})
        cl.save("a", good)
        bad = make_record("a", state={"items": [1, 2, 3, object()]}, at=2.0)
        for method in (cl.save, cl.save_fan_out_internal, cl.save_fan_out_in_flight_failure):
            with pytest.raises(EncodingError) as info:
                method("a", bad)
            assert info.value.path == UNENCODABLE_STATE_PATH
            assert UNENCODABLE_STATE_PATH in str(info.value)
        with pytest.raises(EncodingError) as info:
            cl.save("a", make_record("a", parent_states=[{}, {"y": object()}]))
        assert info.value.path == "parent_states[1].y"
        assert cl.load("a") == good
        assert [e.kind for e in cl.history("a")] == ["save"]
        later = make_record("a", state={"items": [4]}, at=3.0)
        cl.save("a", later)  # still usable
        assert cl.load("a") == later
        assert_history_consistent(cl, "a")

    def test_pydantic_state_loads_as_plain_data(self, cl: CheckpointLog) -> None:
        try:
            from pydantic import BaseModel  # noqa: PLC0415 - an optional (dev) dependency
        except ImportError:  # pragma: no cover
            pytest.skip("pydantic is not installed")

        class Inner(BaseModel):
            tags: tuple[str, ...]
            weight: float

        class State(BaseModel):
            name: str
            inner: Inner
            items: list[Inner]
            maybe: int | None = None

        model = State(name="ü", inner=Inner(tags=("a",), weight=0.5), items=[])
        cl.save("p", make_record("p", state=model, parent_states=[model]))
        loaded = cl.load("p")
        assert loaded is not None
        dumped = model.model_dump(mode="json")
        assert loaded.state == dumped
        assert loaded.parent_states == (dumped,)
        assert type(loaded.state) is dict
        assert State.model_validate(loaded.state) == model

    def test_unencodable_field_inside_a_pydantic_model_is_named(self, cl: CheckpointLog) -> None:
        try:
            from pydantic import BaseModel, ConfigDict  # noqa: PLC0415 - a dev dependency
        except ImportError:  # pragma: no cover
            pytest.skip("pydantic is not installed")

        class Blob:
            pass

        class Inner(BaseModel):
            model_config = ConfigDict(arbitrary_types_allowed=True)
            ok: int
            blob: Blob

        class State(BaseModel):
            model_config = ConfigDict(arbitrary_types_allowed=True)
            name: str
            inner: Inner

        bad = State(name="x", inner=Inner(ok=1, blob=Blob()))
        with pytest.raises(EncodingError) as info:
            cl.save("p", make_record("p", state={"model": bad}))
        assert info.value.path == "state.model.inner.blob"
        assert "cannot encode state.model.inner.blob (a Blob)" in str(info.value)
        assert cl.load("p") is None

    def test_dataclass_and_struct_state_load_as_plain_data(self, cl: CheckpointLog) -> None:
        state = _DataclassState("n", [1, 2], {"s": _StructState("x", [0.5])})
        cl.save("d", make_record("d", state=state))
        loaded = cl.load("d")
        assert loaded is not None
        assert loaded.state == {
            "name": "n",
            "items": [1, 2],
            "inner": {"s": {"name": "x", "values": [0.5]}},
        }
        assert type(loaded.state) is dict

    # -- batching ------------------------------------------------------------------------------

    def test_batched_fan_out_saves_flush_every_n(self, batched: CheckpointLog) -> None:
        base = make_record("a", at=0.5)
        batched.save("a", base)
        recs = [make_record("a", state={"i": i}, at=float(i)) for i in range(1, 4)]
        batched.save_fan_out_internal("a", recs[0])
        batched.save_fan_out_internal("a", recs[1])
        assert batched.load("a") == base
        assert len(list(batched.history("a"))) == 1
        batched.save_fan_out_internal("a", recs[2])  # the third: everything is committed
        assert batched.load("a") == recs[2]
        assert [e.record for e in batched.history("a")] == [base, *recs]
        assert_history_consistent(batched, "a")

    def test_buffered_saves_are_invisible_to_load_and_list(self, batched: CheckpointLog) -> None:
        batched.save_fan_out_internal("new", make_record("new"))
        assert batched.load("new") is None
        assert batched.list() == []
        with pytest.raises(UnknownInvocation):  # not committed: no frame to read yet
            batched.record_at("new", 1)
        batched.flush()
        assert batched.list() == [summary_of(make_record("new"))]

    def test_in_flight_failure_saves_do_not_count(self, batched: CheckpointLog) -> None:
        recs = [make_record("a", state={"i": i}, at=float(i)) for i in range(6)]
        batched.save_fan_out_internal("a", recs[0])
        batched.save_fan_out_in_flight_failure("a", recs[1])
        batched.save_fan_out_in_flight_failure("a", recs[2])
        batched.save_fan_out_internal("a", recs[3])
        batched.save_fan_out_in_flight_failure("a", recs[4])
        assert batched.load("a") is None  # four buffered saves, but only two count
        batched.save_fan_out_internal("a", recs[5])
        assert batched.load("a") == recs[5]
        kinds = [e.kind for e in batched.history("a")]
        assert kinds == [
            "fan_out_internal",
            "fan_out_in_flight_failure",
            "fan_out_in_flight_failure",
            "fan_out_internal",
            "fan_out_in_flight_failure",
            "fan_out_internal",
        ]
        assert [e.record for e in batched.history("a")] == recs

    def test_save_commits_the_invocations_buffered_saves_first(
        self, batched: CheckpointLog
    ) -> None:
        a1 = make_record("a", state={"i": 1}, at=1.0)
        a2 = make_record("a", state={"i": 2}, at=2.0)
        b1 = make_record("b", state={"i": 1}, at=1.5)
        batched.save_fan_out_internal("a", a1)
        batched.save_fan_out_in_flight_failure("a", a2)
        batched.save_fan_out_in_flight_failure("b", b1)
        final = make_record("a", state={"i": 3}, at=3.0)
        batched.save("a", final)
        assert [(e.kind, e.record) for e in batched.history("a")] == [
            ("fan_out_internal", a1),
            ("fan_out_in_flight_failure", a2),
            ("save", final),
        ]
        assert batched.load("a") == final
        assert batched.load("b") is None  # another invocation's buffer stays buffered
        batched.flush()
        assert batched.load("b") == b1

    def test_flush_commits_everything(self, batched: CheckpointLog) -> None:
        a = make_record("a", at=1.0)
        b = make_record("b", at=2.0)
        batched.save_fan_out_internal("a", a)
        batched.save_fan_out_in_flight_failure("b", b)
        assert batched.list() == []
        batched.flush()
        assert batched.load("a") == a
        assert batched.load("b") == b
        assert batched.list() == [summary_of(a), summary_of(b)]
        batched.flush()  # nothing buffered: a no-op
        assert batched.stats().frames == 2

    def test_flush_resets_the_count(self, batched: CheckpointLog) -> None:
        recs = [make_record("a", state={"i": i}, at=float(i)) for i in range(5)]
        batched.save_fan_out_internal("a", recs[0])
        batched.save_fan_out_internal("a", recs[1])
        batched.flush()
        batched.save_fan_out_internal("a", recs[2])
        batched.save_fan_out_internal("a", recs[3])
        assert batched.load("a") == recs[1]  # two since the flush: still buffered
        batched.save_fan_out_internal("a", recs[4])
        assert batched.load("a") == recs[4]

    def test_delete_drops_the_invocations_buffered_saves(self, batched: CheckpointLog) -> None:
        first = make_record("a", at=1.0)
        batched.save("a", first)
        batched.save_fan_out_internal("a", make_record("a", at=2.0))
        batched.save_fan_out_in_flight_failure("a", make_record("a", at=3.0))
        other = make_record("b", at=4.0)
        batched.save_fan_out_in_flight_failure("b", other)
        batched.delete("a")
        batched.flush()
        assert batched.load("a") is None
        assert [e.kind for e in batched.history("a")] == ["save", "delete"]
        assert batched.load("b") == other

    @pytest.mark.parametrize("flush_every", [None, 0, -1, 1])
    def test_without_batching_fan_out_saves_are_durable(
        self, opener: Opener, flush_every: int | None
    ) -> None:
        kw: dict[str, Any] = {}
        if flush_every is not None:
            kw["batching"] = FanOutInternalSaveBatching(flush_every=flush_every)
        cl = opener(**kw)
        r1 = make_record("a", at=1.0)
        cl.save_fan_out_internal("a", r1)
        assert cl.load("a") == r1
        r2 = make_record("a", at=2.0, state={"failed": True})
        cl.save_fan_out_in_flight_failure("a", r2)
        if flush_every == 1:
            assert cl.load("a") == r1  # batching on: in-flight failures wait for a flush
            cl.flush()
        assert cl.load("a") == r2

    def test_close_commits_buffered_saves(self, opener: Opener) -> None:
        self._require_persistent()
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))
        r = make_record("a", at=1.0)
        cl.save_fan_out_internal("a", r)
        cl.save_fan_out_in_flight_failure("b", make_record("b"))
        cl.close()
        cl = opener()
        assert cl.load("a") == r
        assert cl.load("b") == make_record("b")

    # -- reopen --------------------------------------------------------------------------------

    def test_delete_after_reopen(self, opener: Opener) -> None:
        """The first call on an invocation after reopening may be a delete (nothing cached)."""
        self._require_persistent()
        cl = opener()
        cl.save("a", make_record("a"))
        cl.save("b", make_record("b"))
        cl.close()
        cl = opener()
        cl.delete("a")
        assert cl.load("a") is None
        assert cl.load("b") == make_record("b")
        assert [e.kind for e in cl.history("a")] == ["save", "delete"]
        cl.save("a", make_record("a", at=2.0))
        assert cl.load("a") == make_record("a", at=2.0)
        assert_history_consistent(cl, "a")

    def test_reopen_keeps_everything(self, opener: Opener) -> None:
        self._require_persistent()
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))
        for kind, rec in fan_out_script("fan"):
            save_kind(cl, kind, rec)
        cl.save("gone", rich_record("gone"))
        cl.delete("gone")
        cl.save("x", rich_record("x", at=7.0))
        cl.flush()
        expected = {
            "loads": {k: cl.load(k) for k in ("fan", "gone", "x")},
            "list": cl.list(),
            "history": {k: list(cl.history(k)) for k in ("fan", "gone", "x")},
        }
        cl.close()
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))
        assert {k: cl.load(k) for k in ("fan", "gone", "x")} == expected["loads"]
        assert cl.list() == expected["list"]
        assert {k: list(cl.history(k)) for k in ("fan", "gone", "x")} == expected["history"]
        # The reopened log continues the streams (its head cache starts empty).
        for kind, rec in fan_out_script("fan"):
            save_kind(cl, kind, rec)
            if kind == "save":
                assert cl.load("fan") == rec
        cl.flush()
        assert_history_consistent(cl, "fan")
        assert_history_consistent(cl, "gone")

    # -- history and record_at -----------------------------------------------------------------

    def test_events_beside_the_saves_are_skipped_by_every_fold(self, cl: CheckpointLog) -> None:
        # Application events may share an invocation's stream; the record ignores them.
        first, second = make_record("a", at=1.0), make_record("a", state={"n": 2}, at=3.0)
        cl.save("a", first)
        cl.log.append("a", Event(name="node.completed", data={"node": "x"}, at=2.0))
        cl.save("a", second)
        cl.log.append("a", Event(name="run.paused", at=4.0))
        assert cl.load("a") == second
        assert [(e.seq, e.kind, e.record) for e in cl.history("a")] == [
            (1, "save", first),
            (3, "save", second),
        ]
        assert [e.seq for e in cl.history("a", kinds=["save"])] == [1, 3]
        assert [cl.record_at("a", seq) for seq in range(1, 5)] == [first, first, second, second]
        assert forensics.diff(cl, "a", 1, 2).empty  # the event changed nothing
        report = cl.verify()
        assert report.ok, str(report)
        only_events = "events-only"
        cl.log.append(only_events, Event(name="x"))
        assert list(cl.history(only_events)) == []
        assert cl.record_at(only_events, 1) is None
        assert cl.load(only_events) is None

    def test_history_kinds_and_seqs(self, batched: CheckpointLog) -> None:
        script = [
            ("save", make_record("a", at=1.0)),
            ("fan_out_internal", make_record("a", at=2.0)),
            ("fan_out_in_flight_failure", make_record("a", at=3.0)),
            ("save", make_record("a", at=4.0)),
        ]
        for kind, rec in script:
            save_kind(batched, kind, rec)
        batched.delete("a")
        batched.save("a", make_record("a", at=6.0))
        hist = list(batched.history("a"))
        assert [(e.seq, e.kind) for e in hist] == [
            (1, "save"),
            (2, "fan_out_internal"),
            (3, "fan_out_in_flight_failure"),
            (4, "save"),
            (5, "delete"),
            (6, "save"),
        ]
        assert [e.saved_at for e in hist[:4]] == [1.0, 2.0, 3.0, 4.0]
        assert hist[5].saved_at == 6.0
        assert [e.record for e in hist[:4]] == [r for _, r in script]
        assert_history_consistent(batched, "a")

    def test_fan_out_progressions_load_equals_last_save(self, cl: CheckpointLog) -> None:
        script = fan_out_script("fan")
        for i, (kind, rec) in enumerate(script):
            save_kind(cl, kind, rec)
            assert cl.load("fan") == rec, f"after step {i + 1} ({kind})"
            loaded = cl.load("fan")
            assert loaded is not None
            assert_tuples(loaded)
        hist = list(cl.history("fan"))
        assert [(e.kind, e.record) for e in hist] == script
        assert_history_consistent(cl, "fan")

    def test_fan_out_progressions_with_batching(self, batched: CheckpointLog) -> None:
        script = fan_out_script("fan")
        for kind, rec in script:
            save_kind(batched, kind, rec)
            if kind == "save":
                assert batched.load("fan") == rec
        batched.flush()
        assert batched.load("fan") == script[-1][1]
        assert [(e.kind, e.record) for e in batched.history("fan")] == script
        assert_history_consistent(batched, "fan")

    def test_record_at_across_ratio_snapshots_and_deletes(self, cl: CheckpointLog) -> None:
        rng = random.Random(20240501)
        items: list[int] = []
        for i in range(1, 301):
            items.append(rng.randrange(-(2**63), 2**63))
            positions = [pos("n", k) for k in range(rng.randrange(0, 6))]
            cl.save(
                "grow",
                make_record("grow", state={"items": list(items)}, at=float(i), positions=positions),
            )
            if i == 150:
                cl.delete("grow")
        hist = list(cl.history("grow"))
        assert len(hist) == 301
        assert hist[150].kind == "delete"
        assert_history_consistent(cl, "grow")

    # -- save_instance -------------------------------------------------------------------------

    def test_save_instance_updates_one_instance(self, cl: CheckpointLog) -> None:
        lin = (EnclosingFanOutInstance(NS, "outer", 1),)
        base = make_record(
            "a",
            fan_outs=[
                fan_out("outer", [NOT_STARTED] * 5),
                fan_out("inner", [NOT_STARTED] * 2, namespace=(*NS, "outer"), lineage=lin),
            ],
        )
        cl.save("a", base)
        cl.save_instance("a", "outer", 3, in_flight(pos("x", 1)), namespace=NS, saved_at=2.0)
        expected = msgspec.structs.replace(
            with_instance(base, 0, 3, in_flight(pos("x", 1))), last_saved_at=2.0
        )
        assert cl.load("a") == expected
        cl.save_instance(
            "a", "inner", 1, done({"r": 1}), namespace=(*NS, "outer"), lineage=lin, saved_at=3.0
        )
        expected = msgspec.structs.replace(
            with_instance(expected, 1, 1, done({"r": 1})), last_saved_at=3.0
        )
        assert cl.load("a") == expected
        assert [e.kind for e in cl.history("a")] == ["save", "fan_out_internal", "fan_out_internal"]
        # A whole-record save afterwards is compared with the head, not with its own past.
        cl.save("a", base)
        assert cl.load("a") == base
        assert_history_consistent(cl, "a")

    def test_save_instance_needs_the_fan_out_in_the_head(self, cl: CheckpointLog) -> None:
        with pytest.raises(InvalidRecord):
            cl.save_instance("a", "outer", 0, done(1), namespace=NS)
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 2)])
        cl.save("a", base)
        with pytest.raises(InvalidRecord):
            cl.save_instance("a", "other", 0, done(1), namespace=NS)
        with pytest.raises(InvalidRecord):
            cl.save_instance("a", "outer", 2, done(1), namespace=NS)
        with pytest.raises(InvalidRecord):
            cl.save_instance("a", "outer", -1, done(1), namespace=NS)
        with pytest.raises(EncodingError) as info:
            cl.save_instance("a", "outer", 1, done(object()), namespace=NS)
        assert info.value.path == "instances[1].result"
        assert cl.load("a") == base
        assert [e.kind for e in cl.history("a")] == ["save"]
        assert_history_consistent(cl, "a")

    def test_save_instance_is_batched_like_fan_out_internal(self, batched: CheckpointLog) -> None:
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 3)])
        batched.save("a", base)
        batched.save_instance("a", "outer", 0, done(0), namespace=NS, saved_at=2.0)
        batched.save_fan_out_internal("a", with_instance(base, 0, 1, done(1)))
        assert batched.load("a") == base
        batched.save_instance("a", "outer", 2, done(2), namespace=NS, saved_at=4.0)
        expected = with_instance(with_instance(base, 0, 1, done(1)), 0, 2, done(2))
        assert batched.load("a") == msgspec.structs.replace(expected, last_saved_at=4.0)
        assert_history_consistent(batched, "a")

    def test_buffered_instance_saves_commit_as_one_frame(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 6)])
        cl.save("a", base)
        expected = base
        for i, at in ((4, 2.0), (1, 3.0), (4, 4.0), (0, 5.0)):
            progress = in_flight(pos("x", i)) if at == 2.0 else done({"i": i, "at": at})
            cl.save_instance("a", "outer", i, progress, namespace=NS, saved_at=at)
            expected = msgspec.structs.replace(
                with_instance(expected, 0, i, progress), last_saved_at=at
            )
        assert cl.log.buffered_count("a") == 4  # four saves, however they are framed
        cl.flush()
        assert cl.load("a") == expected
        frames = [sf.frame for sf in cl.log.read_stream("a")]
        assert len(frames) == 2  # the record, then one frame for the four buffered calls
        batch = frames[1]
        assert [(c.index, c.progress.state) for c in batch.instances] == [
            (4, "in_flight"), (1, "completed"), (4, "completed"), (0, "completed")
        ]  # fmt: skip
        assert batch.instance_saved_at == (2.0, 3.0, 4.0, 5.0)
        assert [e.kind for e in cl.history("a")] == ["save", "fan_out_internal"]
        assert cl.record_at("a", 2) == expected
        assert_history_consistent(cl, "a")
        report = cl.verify()
        assert report.ok, str(report)

    def test_save_instances_saves_a_call_as_one_batch(self, opener: Opener) -> None:
        cl = opener()
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 6)])
        cl.save("a", base)
        items = [
            (4, in_flight(pos("x", 4))),
            (1, done({"i": 1})),
            (4, done([4, 4.5])),
            (0, done(0)),
        ]
        cl.save_instances("a", "outer", iter(items), namespace=NS, saved_at=2.0)
        expected = base
        for i, progress in items:
            expected = with_instance(expected, 0, i, progress)
        assert cl.load("a") == msgspec.structs.replace(expected, last_saved_at=2.0)
        frames = [sf.frame for sf in cl.log.read_stream("a")]
        assert len(frames) == 2  # durable on return, as one frame
        assert [c.index for c in frames[1].instances] == [4, 1, 4, 0]
        cl.save_instances("a", "outer", [], namespace=NS)  # nothing: nothing logged
        assert len(list(cl.log.read_stream("a"))) == 2
        assert_history_consistent(cl, "a")

    def test_save_instances_checks_the_whole_call_first(self, opener: Opener) -> None:
        """A bad item (its index and field named) or an index or fan-out the head lacks: the
        call raises what save_instance would, and nothing of it is saved."""
        cl = opener()
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 4)])
        cl.save("a", base)
        good = [(0, done(0)), (1, done(1))]
        bad_state = FanOutInstanceProgress(state="finished")  # type: ignore[arg-type]
        cases: list[tuple[Any, type[Exception], str]] = [
            ([*good, (2, bad_state)], InvalidRecord, r"items\[2\] \(index 2\).*progress\.state"),
            ([*good, (-1, done(2))], InvalidRecord, r"items\[2\] \(index -1\).*index"),
            ([*good, (True, done(2))], InvalidRecord, r"items\[2\]"),
            ([*good, (2, done(object()))], EncodingError, r"instances\[2\]\.result"),
            ([*good, (3, done({1, 2}))], EncodingError, r"instances\[3\]\.result"),
            ([*good, (2,)], InvalidRecord, r"items\[2\]"),
            ([*good, (9, done(9))], InvalidRecord, r"items\[2\] has index 9, outside"),
            ("not items", InvalidRecord, r"items"),
        ]
        for items, error, match in cases:
            with pytest.raises(error, match=match):
                cl.save_instances("a", "outer", items, namespace=NS)
        with pytest.raises(InvalidRecord, match="no fan-out 'other'"):
            cl.save_instances("a", "other", good, namespace=NS)
        with pytest.raises(InvalidRecord, match="nothing is saved"):
            cl.save_instances("b", "outer", good, namespace=NS)
        assert cl.load("a") == base
        assert [e.kind for e in cl.history("a")] == ["save"]
        batched = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        batched.save_fan_out_internal("a", base)  # buffered: the head check is the writer's
        batched.save_instances("a", "outer", [(0, done(0)), (7, done(7))], namespace=NS)
        with pytest.raises(InvalidRecord, match="none of this call's 2 changes"):
            batched.flush()
        assert batched.load("a") == base
        assert_history_consistent(batched, "a")

    def test_save_instances_is_batched_by_item_count(self, batched: CheckpointLog) -> None:
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * BATCH_EVERY * 2)])
        batched.save("a", base)
        batched.save_instances(
            "a", "outer", [(i, done(i)) for i in range(BATCH_EVERY - 1)], namespace=NS
        )
        assert batched.load("a") == base  # buffered
        batched.save_instances(
            "a", "outer", [(BATCH_EVERY - 1, done(-1))], namespace=NS, saved_at=5.0
        )
        record = batched.load("a")  # the count reached flush_every: flushed
        assert record is not None
        assert record.fan_out_progress[0].instances[BATCH_EVERY - 1] == done(-1)
        assert record.last_saved_at == 5.0
        assert_history_consistent(batched, "a")

    def test_paged_snapshots_keep_every_frame_small(self, opener: Opener) -> None:
        """A head with more instances than one snapshot frame should hold is snapshotted in
        pages riding on later saves (small thresholds here stand in for the defaults, which
        need ~100,000 instances): no frame holds the whole fan-out, the writer keeps no head
        of it in memory, and record_at, history, load, verify and a rebuild all agree."""
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=40))
        cl.snapshot_instances_max = cl.head_rows_cached_max = 100
        cl.page_rows_max = 150
        n = 3000
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * n)])
        cl.save("a", base)
        rng = random.Random(20261126)
        for i in range(n):
            cl.save_instance("a", "outer", i, done({"i": i, "pad": "x" * 20}), namespace=NS)
            if i % 5 == 0:
                j = rng.randrange(n)
                cl.save_instance("a", "outer", j, in_flight(pos("x", i)), namespace=NS)
            if i == 1700:  # a whole-record save in the middle of it all
                cl.flush()
                current = cl.load("a")
                assert current is not None
                cl.save("a", msgspec.structs.replace(current, state={"half": True}))
        cl.flush()
        assert "a" not in cl._cache  # the writer holds no head of a fan-out this size
        frames = [sf.frame for sf in cl.log.read_stream("a")]
        pages = [f.page for f in frames if isinstance(f, Save) and f.page is not None]
        assert sum(1 for p in pages if p.last) >= 2  # paged snapshots completed
        assert max(len(p.instances) for p in pages) <= cl.page_rows_max + 40 + 8
        assert max(len(getattr(f, "instances", ())) for f in frames) < n // 4
        assert_history_consistent(cl, "a")
        report = cl.verify()
        assert report.ok, str(report)

    def test_a_refused_instance_save_leaves_the_rest_of_its_batch(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 3)])
        cl.save("a", base)
        cl.save_instance("a", "outer", 0, done(0), namespace=NS, saved_at=2.0)
        cl.save_instance("a", "outer", 7, done(7), namespace=NS, saved_at=3.0)  # no index 7
        cl.save_instance("a", "nope", 1, done(1), namespace=NS, saved_at=4.0)  # no such fan-out
        cl.save_instance("a", "outer", 2, done(2), namespace=NS, saved_at=5.0)
        with pytest.raises(InvalidRecord, match="index 7") as info:
            cl.flush()
        assert any("1 more buffered" in n for n in getattr(info.value, "__notes__", []))
        expected = with_instance(with_instance(base, 0, 0, done(0)), 0, 2, done(2))
        assert cl.load("a") == msgspec.structs.replace(expected, last_saved_at=5.0)
        cl.flush()  # reported once
        assert_history_consistent(cl, "a")
        report = cl.verify()
        assert report.ok, str(report)

    def test_save_instance_reads_a_reused_namespace_list_afresh(self, opener: Opener) -> None:
        """The fan-out key is cached only for immutable arguments: a list mutated between
        calls names another fan-out."""
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        other = (*NS, "deeper")
        base = make_record(
            "a",
            fan_outs=[
                fan_out("outer", [NOT_STARTED] * 2),
                fan_out("outer", [NOT_STARTED] * 2, namespace=other),
            ],
        )
        cl.save("a", base)
        ns = list(NS)
        cl.save_instance("a", "outer", 0, done("first"), namespace=ns, saved_at=2.0)  # type: ignore[arg-type]
        ns.append("deeper")
        cl.save_instance("a", "outer", 1, done("second"), namespace=ns, saved_at=3.0)  # type: ignore[arg-type]
        cl.flush()
        expected = with_instance(with_instance(base, 0, 0, done("first")), 1, 1, done("second"))
        assert cl.load("a") == msgspec.structs.replace(expected, last_saved_at=3.0)

    def test_pending_instances(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        assert cl.pending_instances("a", "outer", namespace=NS) is None
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 8)])
        cl.save("a", base)
        assert cl.pending_instances("a", "outer", namespace=NS) == list(range(8))
        cl.save_instance("a", "outer", 0, done(0), namespace=NS)
        cl.save_instance("a", "outer", 3, in_flight(pos("x", 1)), namespace=NS)
        cl.save_instance("a", "outer", 5, done("boom", error=True), namespace=NS)
        cl.save_instance("a", "outer", 7, done(7), namespace=NS)
        assert cl.pending_instances("a", "outer", namespace=NS) == list(range(8))  # buffered
        cl.flush()
        assert cl.pending_instances("a", "outer", namespace=NS) == [1, 2, 3, 4, 6]
        assert cl.pending_instances("a", "outer", namespace=NS, errors=True) == [1, 2, 3, 4, 5, 6]
        head = cl.load("a")
        assert head is not None
        assert [
            i for i, p in enumerate(head.fan_out_progress[0].instances) if p.state != "completed"
        ] == cl.pending_instances("a", "outer", namespace=NS)
        with pytest.raises(InvalidRecord, match="no fan-out 'other'"):
            cl.pending_instances("a", "other", namespace=NS)

    def test_record_at_before_the_first_seq_is_none(self, cl: CheckpointLog) -> None:
        cl.save("a", make_record("a"))
        assert cl.record_at("a", 0) is None

    @pytest.mark.parametrize("seq", [-1, -2, -(2**70), 2, 999])
    def test_record_at_outside_the_stream_raises(self, cl: CheckpointLog, seq: object) -> None:
        """The API answers as the CLI does: a seq the stream does not have is an error, never
        ``None`` (before the first save) or the latest record."""
        cl.save("a", make_record("a"))
        with pytest.raises(SeqOutOfRange, match=r"outside 'a', whose seqs run 1\.\.1"):
            cl.record_at("a", seq)  # type: ignore[arg-type]

    @pytest.mark.parametrize("seq", [True, "1", None, 1.0])
    def test_record_at_of_a_seq_that_is_no_int_raises(self, cl: CheckpointLog, seq: object) -> None:
        cl.save("a", make_record("a"))
        with pytest.raises(InvalidRecord, match=r"seq must be an int"):
            cl.record_at("a", seq)  # type: ignore[arg-type]

    def test_saves_from_many_threads(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=5))
        n_threads = 8
        calls: dict[str, list[tuple[str, CheckpointRecord]]] = {
            inv: [] for inv in ["shared", *(f"t{t}" for t in range(n_threads))]
        }
        shared_lock = threading.Lock()  # the shared invocation's call order is the lock order
        kinds = ["save", "fan_out_internal", "fan_out_in_flight_failure"]

        def worker(t: int) -> None:
            rng = random.Random(t)
            for i in range(40):
                inv = f"t{t}" if i % 4 else "shared"
                kind = rng.choice(kinds)
                rec = make_record(inv, state={"t": t, "i": i}, at=float(i))
                if inv == "shared":
                    with shared_lock:
                        calls[inv].append((kind, rec))
                        save_kind(cl, kind, rec)
                else:
                    calls[inv].append((kind, rec))
                    save_kind(cl, kind, rec)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=60)
        cl.flush()
        for inv, expected in calls.items():
            assert [(e.kind, e.record) for e in cl.history(inv)] == expected, inv
            assert cl.load(inv) == expected[-1][1]
        report = cl.verify()
        assert report.ok, str(report)

    def test_more_invocations_than_the_head_cache(self, opener: Opener) -> None:
        """Heads evicted from the writer's cache are rebuilt from the materialized rows."""
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        n = HEAD_CACHE_MAX + 100
        base = {i: make_record(f"i{i}", positions=[pos("a", 1)], at=1.0) for i in range(n)}
        for rec in base.values():
            cl.save_fan_out_internal(rec.invocation_id, rec)
        cl.flush()
        later = {
            i: make_record(f"i{i}", positions=[pos("a", 1), pos("b", i)], at=2.0)
            for i in range(0, n, 7)
        }
        for rec in later.values():
            cl.save_fan_out_internal(rec.invocation_id, rec)
        cl.flush()
        for i in range(n):
            assert cl.load(f"i{i}") == later.get(i, base[i])
        assert len(cl.list()) == n
        report = cl.verify()
        assert report.ok, str(report)

    # -- verify --------------------------------------------------------------------------------

    def test_verify_after_a_mixed_workload(self, batched: CheckpointLog) -> None:
        rng = random.Random(99)
        for i in range(200):
            inv = f"inv-{rng.randrange(8)}"
            op = rng.random()
            if op < 0.1:
                batched.delete(inv)
            elif op < 0.15:
                batched.flush()
            else:
                kind = rng.choice(["save", "fan_out_internal", "fan_out_in_flight_failure"])
                rec = make_record(
                    inv,
                    state={"i": i},
                    at=float(i),
                    positions=[pos("n", k) for k in range(rng.randrange(4))],
                )
                save_kind(batched, kind, rec)
        batched.flush()
        report = batched.verify()
        assert report.ok, str(report)
        for inv in {f"inv-{k}" for k in range(8)}:
            assert_history_consistent(batched, inv)


# -- the async contract ------------------------------------------------------------------------

Body = Callable[[Checkpointer], Awaitable[None]]


class CheckpointerContract:
    """The async :class:`Checkpointer` contract (openarmature's protocol), as tests.

    Each test runs its coroutine with ``asyncio.run`` (no pytest-asyncio needed).
    """

    persistent: ClassVar[bool]
    """``True`` when ``make_checkpointer`` on the same ``tmp_path`` after close sees the data."""

    def make_checkpointer(self, tmp_path: Path, **kw: Any) -> Checkpointer:
        """A checkpointer stored under ``tmp_path``; ``kw`` may hold ``batching=...``."""
        raise NotImplementedError("subclasses of CheckpointerContract implement make_checkpointer")

    def run(self, tmp_path: Path, body: Body, **kw: Any) -> None:
        """Open a checkpointer, run ``body`` on it in a fresh event loop, always close it."""

        async def main() -> None:
            cp = self.make_checkpointer(tmp_path, **kw)
            try:
                await body(cp)
            finally:
                await cp.aclose()

        asyncio.run(main())

    def test_protocol_surface(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            assert cp.supports_state_migration is True
            for name in (
                "save",
                "save_fan_out_internal",
                "save_fan_out_in_flight_failure",
                "load",
                "list",
                "delete",
            ):
                assert asyncio.iscoroutinefunction(getattr(cp, name)), name

        self.run(tmp_path, body)

    def test_save_load_round_trip_and_replace(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            assert await cp.load("a") is None
            rec = rich_record("a")
            await cp.save("a", rec)
            loaded = await cp.load("a")
            assert loaded == rec
            assert loaded is not None
            assert_tuples(loaded)
            newer = make_record("a", at=2.0, positions=[pos("q", 1)])
            await cp.save("a", newer)
            assert await cp.load("a") == newer

        self.run(tmp_path, body)

    def test_load_inline_when_small_on_a_thread_when_big(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A small record loads on the loop's thread; a wide fan-out or a large state takes a
        # worker thread (the loop is never held for long). Both equal the synchronous load.
        hops: list[Any] = []
        real = asyncio.to_thread

        async def counting(fn: Any, *args: Any, **kwargs: Any) -> Any:
            hops.append(fn)
            return await real(fn, *args, **kwargs)

        monkeypatch.setattr(asyncio, "to_thread", counting)
        small = make_record("small", positions=[pos("a", 1)])
        wide = make_record(
            "wide", fan_outs=[fan_out("f", [done(i) for i in range(10)] + [NOT_STARTED] * 300)]
        )
        big = make_record("big", state={"blob": "x" * (INLINE_LOAD_ROWS_MAX * 1024 + 1)})

        async def body(cp: Checkpointer) -> None:
            for rec in (small, wide, big):
                await cp.save(rec.invocation_id, rec)
            hops.clear()
            assert await cp.load("small") == small
            assert await cp.load("missing") is None
            assert hops == []
            assert await cp.load("wide") == wide
            assert await cp.load("big") == big
            assert len(hops) == 2
            for rec in (small, wide, big):
                assert cp.sync.load(rec.invocation_id) == rec

        self.run(tmp_path, body)

    def test_list_and_filter(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            recs = [
                make_record("b", correlation_id="x", at=2.0, positions=[pos("a", 1)]),
                make_record("a", correlation_id="y", at=1.0),
                make_record("c", correlation_id="x", at=3.0),
            ]
            for r in recs:
                await cp.save(r.invocation_id, r)
            assert await cp.list() == [summary_of(recs[i]) for i in (1, 0, 2)]
            assert await cp.list(CheckpointFilter(correlation_id="x")) == [
                summary_of(recs[0]),
                summary_of(recs[2]),
            ]
            assert await cp.list(CheckpointFilter(correlation_id="z")) == []

        self.run(tmp_path, body)

    def test_delete(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            await cp.delete("ghost")  # unknown: a no-op
            r = make_record("a")
            await cp.save("a", r)
            await cp.delete("a")
            assert await cp.load("a") is None
            assert await cp.list() == []
            assert [(e.kind, e.record) for e in cp.sync.history("a")] == [
                ("save", r),
                ("delete", None),
            ]
            again = make_record("a", at=3.0)
            await cp.save("a", again)
            assert await cp.load("a") == again
            with pytest.raises(UnknownInvocation):  # the no-op wrote nothing
                list(cp.sync.history("ghost"))

        self.run(tmp_path, body)

    def test_invalid_records(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            with pytest.raises(InvalidRecord) as info:
                await cp.save("a", make_record("b"))
            assert str(info.value) == (
                "record.invocation_id is 'b' but the save is for 'a'; "
                "pass the record under its own invocation id"
            )
            good = make_record("a")
            await cp.save("a", good)
            with pytest.raises(EncodingError) as enc:
                await cp.save_fan_out_internal(
                    "a", make_record("a", state={"items": [1, 2, 3, object()]})
                )
            assert enc.value.path == UNENCODABLE_STATE_PATH
            assert await cp.load("a") == good
            assert cp.sync.stats().frames == 1
            later = make_record("a", at=2.0)
            await cp.save("a", later)
            assert await cp.load("a") == later

        self.run(tmp_path, body)

    def test_batching(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            recs = [make_record("a", state={"i": i}, at=float(i)) for i in range(8)]
            await cp.save_fan_out_internal("a", recs[0])
            await cp.save_fan_out_in_flight_failure("a", recs[1])
            await cp.save_fan_out_internal("a", recs[2])
            assert await cp.load("a") is None
            await cp.save_fan_out_internal("a", recs[3])
            assert await cp.load("a") == recs[3]
            await cp.save_fan_out_internal("a", recs[4])
            await cp.save_fan_out_internal("b", make_record("b"))
            await cp.save("a", recs[5])  # commits a's buffered save first, not b's
            assert [e.record for e in cp.sync.history("a")] == recs[:6]
            assert await cp.load("b") is None
            await cp.save_fan_out_in_flight_failure("a", recs[6])
            await cp.flush()
            assert await cp.load("a") == recs[6]
            assert await cp.load("b") == make_record("b")

        self.run(tmp_path, body, batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))

    def test_without_batching_fan_out_saves_are_durable(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            r1 = make_record("a", at=1.0)
            await cp.save_fan_out_internal("a", r1)
            assert await cp.load("a") == r1
            r2 = make_record("a", at=2.0)
            await cp.save_fan_out_in_flight_failure("a", r2)
            assert await cp.load("a") == r2

        self.run(tmp_path, body)

    def test_fan_out_progressions(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            script = fan_out_script("fan")
            for kind, rec in script:
                await asave_kind(cp, kind, rec)
                assert await cp.load("fan") == rec
            assert [(e.kind, e.record) for e in cp.sync.history("fan")] == script
            assert_history_consistent(cp.sync, "fan")

        self.run(tmp_path, body)

    def test_reopen_keeps_everything(self, tmp_path: Path) -> None:
        if not self.persistent:
            pytest.skip("the store is not persistent: nothing survives close()")
        kept: dict[str, Any] = {}

        async def first(cp: Checkpointer) -> None:
            for kind, rec in fan_out_script("fan"):
                await asave_kind(cp, kind, rec)
            await cp.flush()  # the count restarts: the next fan-out save stays buffered
            await cp.save_fan_out_internal("buffered", make_record("buffered"))
            assert await cp.load("buffered") is None
            kept["load"] = await cp.load("fan")
            kept["list"] = await cp.list()

        async def second(cp: Checkpointer) -> None:
            assert await cp.load("fan") == kept["load"]
            assert await cp.load("buffered") == make_record("buffered")  # aclose flushed it
            assert await cp.list() == sorted(
                [*kept["list"], summary_of(make_record("buffered"))],
                key=lambda s: (s.last_saved_at, s.invocation_id),
            )
            assert_history_consistent(cp.sync, "fan")

        batching = FanOutInternalSaveBatching(flush_every=BATCH_EVERY)
        self.run(tmp_path, first, batching=batching)
        self.run(tmp_path, second, batching=batching)

    def test_concurrent_saves_on_many_invocations(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            async def one(i: int) -> None:
                inv = f"inv-{i:03d}"
                await cp.save(inv, make_record(inv, correlation_id=f"c{i % 3}", at=float(i)))
                await cp.save_fan_out_internal(
                    inv,
                    make_record(
                        inv, correlation_id=f"c{i % 3}", at=float(i) + 0.5, positions=[pos("n", i)]
                    ),
                )

            await asyncio.gather(*(one(i) for i in range(200)))
            expected = [
                make_record(
                    f"inv-{i:03d}",
                    correlation_id=f"c{i % 3}",
                    at=float(i) + 0.5,
                    positions=[pos("n", i)],
                )
                for i in range(200)
            ]
            loads = await asyncio.gather(*(cp.load(r.invocation_id) for r in expected))
            assert loads == expected
            assert await cp.list() == [summary_of(r) for r in expected]
            assert await cp.list(CheckpointFilter(correlation_id="c1")) == [
                summary_of(r) for r in expected if r.correlation_id == "c1"
            ]
            report = cp.sync.verify()
            assert report.ok, str(report)

        self.run(tmp_path, body)

    def test_concurrent_saves_on_one_invocation_last_call_wins(self, tmp_path: Path) -> None:
        rng = random.Random(100)

        async def body(cp: Checkpointer) -> None:
            recs = [
                make_record(
                    "one",
                    state={"i": i},
                    at=float(rng.randrange(1000)),
                    positions=[pos("n", k) for k in range(rng.randrange(5))],
                    fan_outs=[fan_out("f", [done(i)] * rng.randrange(1, 4))],
                )
                for i in range(100)
            ]
            calls: list[int] = []

            async def one(i: int) -> None:
                calls.append(i)  # recorded right before the call, with no await in between
                await cp.save("one", recs[i])

            order = list(range(100))
            rng.shuffle(order)
            await asyncio.gather(*(one(i) for i in order))
            assert await cp.load("one") == recs[calls[-1]]
            assert [e.record for e in cp.sync.history("one")] == [recs[i] for i in calls]
            assert_history_consistent(cp.sync, "one")

        self.run(tmp_path, body)

    def test_concurrent_batched_saves_on_one_invocation(self, tmp_path: Path) -> None:
        rng = random.Random(101)

        async def body(cp: Checkpointer) -> None:
            kinds = ["save", "fan_out_internal", "fan_out_in_flight_failure"]
            script = [
                (rng.choice(kinds), make_record("one", state={"i": i}, at=float(i)))
                for i in range(100)
            ]
            calls: list[int] = []

            async def one(i: int) -> None:
                calls.append(i)
                await asave_kind(cp, *script[i])

            await asyncio.gather(*(one(i) for i in range(100)))
            await cp.flush()
            assert await cp.load("one") == script[calls[-1]][1]
            assert [(e.kind, e.record) for e in cp.sync.history("one")] == [
                script[i] for i in calls
            ]

        self.run(tmp_path, body, batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))

    def test_concurrent_saves_and_deletes_on_one_invocation(self, tmp_path: Path) -> None:
        rng = random.Random(102)

        async def body(cp: Checkpointer) -> None:
            ops: list[CheckpointRecord | None] = [
                None if rng.random() < 0.2 else make_record("one", state={"i": i}, at=float(i))
                for i in range(60)
            ]
            calls: list[int] = []

            async def one(i: int) -> None:
                calls.append(i)
                rec = ops[i]
                if rec is None:
                    await cp.delete("one")
                else:
                    await cp.save("one", rec)

            await asyncio.gather(*(one(i) for i in range(60)))
            expected: list[tuple[str, CheckpointRecord | None]] = []
            live = False
            for i in calls:  # a delete of nothing is not logged
                rec = ops[i]
                if rec is not None or live:
                    expected.append(("save" if rec is not None else "delete", rec))
                live = rec is not None
            assert [(e.kind, e.record) for e in cp.sync.history("one")] == expected
            assert await cp.load("one") == ops[calls[-1]]
            assert_history_consistent(cp.sync, "one")

        self.run(tmp_path, body)

    def test_a_failing_save_fails_alone_in_its_group_commit(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            base = make_record("a", fan_outs=[fan_out("f", [NOT_STARTED] * 2)])
            await cp.save("a", base)
            r1 = make_record("a", at=2.0, fan_outs=[fan_out("f", [in_flight(), NOT_STARTED])])
            r2 = make_record("a", at=3.0, fan_outs=[fan_out("f", [in_flight(), done(1)])])
            results = await asyncio.gather(
                cp.save("a", r1),
                cp.save_instance("a", "f", 5, done(0), namespace=NS),  # no instance 5
                cp.save("b", make_record("b")),
                cp.save("a", r2),
                return_exceptions=True,
            )
            assert results[0] is None
            assert isinstance(results[1], InvalidRecord)
            assert list(results[2:]) == [None, None]
            assert [e.record for e in cp.sync.history("a")] == [base, r1, r2]
            assert await cp.load("b") == make_record("b")
            assert_history_consistent(cp.sync, "a")

        self.run(tmp_path, body)

    def test_save_instances_async(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            base = make_record("a", fan_outs=[fan_out("f", [NOT_STARTED] * 5)])
            await cp.save("a", base)
            with pytest.raises(InvalidRecord, match=r"items\[1\]"):
                await cp.save_instances("a", "f", [(0, done(0)), (-3, done(1))], namespace=NS)
            assert await cp.load("a") == base
            await cp.save_instances("a", "f", [(3, done(3)), (0, done(0))], namespace=NS)
            await cp.flush()
            expected = with_instance(with_instance(base, 0, 3, done(3)), 0, 0, done(0))
            record = await cp.load("a")
            assert record is not None
            assert record.fan_out_progress == expected.fan_out_progress
            assert_history_consistent(cp.sync, "a")

        self.run(tmp_path, body)
        self.run(tmp_path / "batched", body, batching=FanOutInternalSaveBatching(flush_every=1000))

    def test_delete_after_reopen(self, tmp_path: Path) -> None:
        if not self.persistent:
            pytest.skip("the store is not persistent: nothing survives close()")

        async def first(cp: Checkpointer) -> None:
            await cp.save("a", make_record("a"))

        async def second(cp: Checkpointer) -> None:
            await cp.delete("a")
            assert await cp.load("a") is None
            assert [e.kind for e in cp.sync.history("a")] == ["save", "delete"]

        self.run(tmp_path, first)
        self.run(tmp_path, second)
