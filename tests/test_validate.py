"""Issue 12, part 1: a wrongly typed field never reaches the log.

Every public save entry point (CheckpointLog, Checkpointer, OpenArmatureCheckpointer, LmdbSaver,
techrevati's LogSaver, apflow's LogCheckpointManager) gets a wrongly typed value in one field;
the call must raise a typed error (a CheckpointError) naming the field, and leave the log as
it was: verifying, the invocation and another one loading as before, ``list()`` working.

An undecodable head row or frame (older versions, bit rot), injected through the backend, must
not take ``list()`` of the other invocations down, and ``delete`` of it must still work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import struct
import warnings
from collections.abc import Hashable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint

from backends.memory import MemoryBackend
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.errors import CheckpointError, DamagedRowSkipped, InvalidRecord
from eventlog.frames import Save
from eventlog.integrations.apflow import LogCheckpointManager
from eventlog.integrations.langgraph import LmdbSaver
from eventlog.integrations.openarmature import OpenArmatureCheckpointer, to_openarmature
from eventlog.integrations.techrevati import LogSaver
from eventlog.materialized import HEADS
from eventlog.records import (
    NOT_STARTED,
    CheckpointFilter,
    CheckpointRecord,
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)

GOOD = CheckpointRecord(
    invocation_id="inv",
    correlation_id="corr",
    state={"n": 1},
    completed_positions=(NodePosition(("sub",), "a", 1), NodePosition((), "b", 2, 1, 3)),
    parent_states=({"p": 1},),
    last_saved_at=100.0,
    schema_version="1",
    fan_out_progress=(
        FanOutProgress(
            "work",
            ("sub",),
            3,
            (
                FanOutInstanceProgress("completed", 1),
                FanOutInstanceProgress("in_flight", None, False, (NodePosition((), "x", 1),)),
                NOT_STARTED,
            ),
            (EnclosingFanOutInstance(("o",), "outer", 0),),
        ),
    ),
)
OTHER = msgspec.structs.replace(GOOD, invocation_id="other", correlation_id="c2")

# -- wrongly typed values, by the type the decoder expects ---------------------------------

_any_text = st.text(max_size=5)
_big_ints = st.integers(min_value=2**63, max_value=2**80) | st.integers(max_value=-(2**63) - 1)
_dates = st.datetimes(max_value=datetime.datetime(2100, 1, 1))
_decimals = st.decimals(allow_nan=False, places=2, max_value=10**6, min_value=-(10**6))
_misc = st.sampled_from([None, b"x", [1], {"k": 1}, object(), (1,), frozenset({1})])
NOT_STR = st.one_of(
    st.integers(), st.floats(), st.booleans(), st.none(), st.binary(max_size=3), _misc
)
NOT_INT = st.one_of(_any_text, st.floats(), st.booleans(), _decimals, _dates, _big_ints, _misc)
NOT_FLOAT = st.one_of(_any_text, st.booleans(), _decimals, _dates, _misc)
NOT_SEQ = st.one_of(
    st.none(), st.integers(), _any_text, st.dictionaries(_any_text, st.integers(), max_size=2)
)
NOT_STATE = st.one_of(
    _any_text.filter(lambda s: s not in ("completed", "in_flight", "not_started")), NOT_STR
)
NOT_BOOL = st.one_of(st.integers(), _any_text, st.floats(), st.none())
NOT_OBJ = st.one_of(st.none(), st.integers(), _any_text, st.dictionaries(_any_text, st.integers()))
BAD: dict[str, st.SearchStrategy[Any]] = {
    "str": NOT_STR,
    "int": NOT_INT,
    "opt_int": NOT_INT.filter(lambda v: v is not None),
    "float": NOT_FLOAT,
    "seq": NOT_SEQ,
    "state": NOT_STATE,
    "bool": NOT_BOOL,
    "obj": NOT_OBJ,
}

Path_ = tuple[Any, ...]


def _position_fields(at: Path_, ns_item: bool) -> list[tuple[Path_, str]]:
    out = [
        (at, "obj"),
        ((*at, "namespace"), "seq"),
        ((*at, "node_name"), "str"),
        ((*at, "step"), "int"),
        ((*at, "attempt_index"), "int"),
        ((*at, "fan_out_index"), "opt_int"),
    ]
    if ns_item:
        out.append(((*at, "namespace", 0), "str"))
    return out


def _lineage_fields(at: Path_) -> list[tuple[Path_, str]]:
    return [
        (at, "obj"),
        ((*at, "namespace"), "seq"),
        ((*at, "namespace", 0), "str"),
        ((*at, "fan_out_node_name"), "str"),
        ((*at, "fan_out_index"), "int"),
    ]


def _instance_fields(at: Path_, inner: bool) -> list[tuple[Path_, str]]:
    out = [
        (at, "obj"),
        ((*at, "state"), "state"),
        ((*at, "result_is_error"), "bool"),
        ((*at, "completed_inner_positions"), "seq"),
    ]
    if inner:
        out += _position_fields((*at, "completed_inner_positions", 0), False)
    return out


FO: Path_ = ("fan_out_progress", 0)
RECORD_FIELDS: list[tuple[Path_, str]] = [
    (("correlation_id",), "str"),
    (("schema_version",), "str"),
    (("last_saved_at",), "float"),
    (("completed_positions",), "seq"),
    (("parent_states",), "seq"),
    (("fan_out_progress",), "seq"),
    *_position_fields(("completed_positions", 0), True),
    *_position_fields(("completed_positions", 1), False),
    (FO, "obj"),
    ((*FO, "fan_out_node_name"), "str"),
    ((*FO, "namespace"), "seq"),
    ((*FO, "namespace", 0), "str"),
    ((*FO, "instance_count"), "int"),
    ((*FO, "instances"), "seq"),
    ((*FO, "enclosing_fan_out_lineage"), "seq"),
    *_lineage_fields((*FO, "enclosing_fan_out_lineage", 0)),
    *_instance_fields((*FO, "instances", 0), False),
    *_instance_fields((*FO, "instances", 1), True),
    *_instance_fields((*FO, "instances", 2), False),
]


def _get(obj: Any, step: Any) -> Any:
    return obj[step] if isinstance(step, int) else getattr(obj, step)


def _set(obj: Any, step: Any, value: Any) -> Any:
    if isinstance(step, int):
        items = list(obj)
        items[step] = value
        return tuple(items)
    if isinstance(obj, msgspec.Struct):
        return msgspec.structs.replace(obj, **{step: value})
    return dataclasses.replace(obj, **{step: value})


def mutate(obj: Any, path: Path_, value: Any) -> Any:
    if not path:
        return value
    return _set(obj, path[0], mutate(_get(obj, path[0]), path[1:], value))


def _advanced(rec: Any, path: Path_) -> Any:
    """``rec`` with the instance ``path`` points into completed with a new result (a change
    of this save): an instance whose state and result are unchanged since the previous save
    is, by the fan-out contract, unchanged, and is neither checked again nor written."""
    if len(path) < 4 or path[:3] != (*FO, "instances"):
        return rec
    inst = _get(_get(_get(rec, FO[0]), FO[1]).instances, path[3])
    inst = _set(_set(inst, "state", "completed"), "result", {"new": 1})
    return mutate(rec, path[:4], inst)


def _field_name(path: Path_) -> str:
    out = "record"
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f".{step}"
    return out


@st.composite
def bad_records(draw: st.DrawFn, openarmature: bool = False) -> tuple[Any, str]:
    """A copy of GOOD (as openarmature's dataclasses or ours) with one wrongly typed field."""
    path, kind = draw(st.sampled_from(RECORD_FIELDS))
    base: Any = to_openarmature(GOOD) if openarmature else GOOD
    base = _advanced(base, path)
    if kind == "int" and path[-1] == "instance_count" and draw(st.booleans()):
        return mutate(base, path, 4), _field_name(path)  # an int, but not len(instances)
    return mutate(base, path, draw(BAD[kind])), _field_name(path)


# -- the log after a rejected call ---------------------------------------------------------


def _assert_untouched(cl: CheckpointLog) -> None:
    cl.flush()
    assert cl.verify().ok
    assert cl.load("inv") == GOOD
    assert cl.load("other") == OTHER
    assert [s.invocation_id for s in cl.list()] == ["inv", "other"]


def _fresh_log(batching: FanOutInternalSaveBatching | None = None) -> CheckpointLog:
    cl = CheckpointLog.on_backend(MemoryBackend(), batching=batching)
    cl.save("inv", GOOD)
    cl.save("other", OTHER)
    return cl


def _raises_naming(call: Any, field: str) -> None:
    with pytest.raises(CheckpointError) as info:
        call()
    assert isinstance(info.value, InvalidRecord), repr(info.value)
    assert field in str(info.value), (field, str(info.value))


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    bad=bad_records(),
    method=st.sampled_from(["save", "save_fan_out_internal", "save_fan_out_in_flight_failure"]),
    forget=st.booleans(),
)
def test_sync_save_rejects_every_wrongly_typed_field(
    log_batched: CheckpointLog, bad: tuple[Any, str], method: str, forget: bool
) -> None:
    record, field = bad
    if forget:
        log_batched._checker.forget("inv")  # as a fresh process would: nothing seen yet
    _raises_naming(lambda: getattr(log_batched, method)("inv", record), field)
    _assert_untouched(log_batched)


@pytest.fixture(scope="module")
def log_batched() -> Iterator[CheckpointLog]:
    cl = _fresh_log(FanOutInternalSaveBatching(flush_every=2))
    yield cl
    cl.close()


@pytest.fixture(scope="module")
def log_plain() -> Iterator[CheckpointLog]:
    cl = _fresh_log()
    yield cl
    cl.close()


@SETTINGS
@given(
    bad=bad_records(),
    method=st.sampled_from(["save", "save_fan_out_internal", "save_fan_out_in_flight_failure"]),
)
def test_async_save_rejects_every_wrongly_typed_field(
    log_plain: CheckpointLog, bad: tuple[Any, str], method: str
) -> None:
    record, field = bad
    cp = Checkpointer(log_plain)
    _raises_naming(lambda: asyncio.run(getattr(cp, method)("inv", record)), field)
    _assert_untouched(log_plain)


@SETTINGS
@given(
    bad=bad_records(openarmature=True),
    method=st.sampled_from(["save", "save_fan_out_internal", "save_fan_out_in_flight_failure"]),
)
def test_openarmature_save_rejects_every_wrongly_typed_field(
    oa_checkpointer: OpenArmatureCheckpointer, bad: tuple[Any, str], method: str
) -> None:
    record, field = bad
    _raises_naming(lambda: asyncio.run(getattr(oa_checkpointer, method)("inv", record)), field)
    _assert_untouched(oa_checkpointer.sync)


@pytest.fixture(scope="module")
def oa_checkpointer() -> Iterator[OpenArmatureCheckpointer]:
    cp = OpenArmatureCheckpointer.on_backend(MemoryBackend())
    cp.sync.save("inv", GOOD)
    cp.sync.save("other", OTHER)
    yield cp
    cp.close()


# -- save_instance -----------------------------------------------------------------------------

INSTANCE_ARGS: list[tuple[str, Path_, str]] = [
    ("fan_out_node_name", (), "str"),
    ("index", (), "int"),
    ("progress", (), "obj"),
    ("progress", ("state",), "state"),
    ("progress", ("result_is_error",), "bool"),
    ("progress", ("completed_inner_positions",), "seq"),
    *(("progress", p, k) for p, k in _position_fields(("completed_inner_positions", 0), True)),
    ("namespace", (), "seq"),
    ("namespace", (0,), "str"),
    ("lineage", (), "seq"),
    *(("lineage", p, k) for p, k in _lineage_fields((0,))),
    ("saved_at", (), "opt_int"),  # None is allowed: a time of its own; anything not a number
]
GOOD_ARGS: dict[str, Any] = {
    "fan_out_node_name": "work",
    "index": 2,
    "progress": FanOutInstanceProgress("in_flight", None, False, (NodePosition(("s",), "x", 1),)),
    "namespace": ("sub",),
    "lineage": GOOD.fan_out_progress[0].enclosing_fan_out_lineage,
    "saved_at": 200.0,
}


@st.composite
def bad_instance_args(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    arg, path, kind = draw(st.sampled_from(INSTANCE_ARGS))
    args = dict(GOOD_ARGS)
    if arg == "saved_at":
        bad = draw(NOT_FLOAT.filter(lambda v: v is not None))
    elif arg == "index" and draw(st.booleans()):
        bad = draw(st.integers(max_value=-1))
    else:
        bad = draw(BAD[kind])
    args[arg] = mutate(args[arg], path, bad)
    return args, arg


@SETTINGS
@given(bad=bad_instance_args(), use_async=st.booleans())
def test_save_instance_rejects_every_wrongly_typed_argument(
    log_batched: CheckpointLog, bad: tuple[dict[str, Any], str], use_async: bool
) -> None:
    args, arg = bad
    name, index, progress = args.pop("fan_out_node_name"), args.pop("index"), args.pop("progress")
    if use_async:
        cp = Checkpointer(log_batched)
        call: Any = lambda: asyncio.run(cp.save_instance("inv", name, index, progress, **args))  # noqa: E731
    else:
        call = lambda: log_batched.save_instance("inv", name, index, progress, **args)  # noqa: E731
    with pytest.raises(InvalidRecord) as info:
        call()
    assert arg in str(info.value)
    _assert_untouched(log_batched)


# -- the reproductions, on LMDB --------------------------------------------------------


def _work(*instances: FanOutInstanceProgress, count: int | None = None) -> Any:
    fo = GOOD.fan_out_progress[0]
    inst = instances or fo.instances
    return (msgspec.structs.replace(fo, instances=inst, instance_count=count or len(inst)),)


REPRODUCTIONS: list[tuple[str, Any, str]] = [
    ("schema_version=2", {"schema_version": 2}, "record.schema_version"),
    (
        "state done",
        {"fan_out_progress": _work(FanOutInstanceProgress("done"), NOT_STARTED, NOT_STARTED)},
        "record.fan_out_progress[0].instances[0].state",
    ),
    (
        "non-str node name",
        {"completed_positions": (NodePosition((), 7, 1),)},  # type: ignore[arg-type]
        "record.completed_positions[0].node_name",
    ),
    (
        "str step",
        {"completed_positions": (NodePosition((), "a", "1"),)},  # type: ignore[arg-type]
        "record.completed_positions[0].step",
    ),
    (
        "int namespace",
        {"completed_positions": (NodePosition((1,), "a", 1),)},  # type: ignore[arg-type]
        "record.completed_positions[0].namespace[0]",
    ),
    (
        "str fan_out_index",
        {"completed_positions": (NodePosition((), "a", 1, 0, "2"),)},  # type: ignore[arg-type]
        "record.completed_positions[0].fan_out_index",
    ),
    (
        "int fan_out_node_name",
        {
            "fan_out_progress": (
                msgspec.structs.replace(GOOD.fan_out_progress[0], fan_out_node_name=5),
            )
        },
        "record.fan_out_progress[0].fan_out_node_name",
    ),
    (
        "str result_is_error",
        {
            "fan_out_progress": _work(
                *GOOD.fan_out_progress[0].instances[:2],
                FanOutInstanceProgress("completed", 2, "yes"),  # type: ignore[arg-type]
            )
        },
        "record.fan_out_progress[0].instances[2].result_is_error",
    ),
    (
        "str lineage index",
        {
            "fan_out_progress": (
                msgspec.structs.replace(
                    GOOD.fan_out_progress[0],
                    enclosing_fan_out_lineage=(EnclosingFanOutInstance((), "o", "1"),),  # type: ignore[arg-type]
                ),
            )
        },
        "record.fan_out_progress[0].enclosing_fan_out_lineage[0].fan_out_index",
    ),
    ("positions of str", {"completed_positions": ("a", "b")}, "record.completed_positions[0]"),
    ("positions None", {"completed_positions": None}, "record.completed_positions"),
    ("parent_states None", {"parent_states": None}, "record.parent_states"),
    ("last_saved_at now", {"last_saved_at": "now"}, "record.last_saved_at"),
    ("instance_count str", {"fan_out_progress": _work(count="1")}, "instance_count"),  # type: ignore[arg-type]
    ("instance_count 5 of 3", {"fan_out_progress": _work(count=5)}, "instance_count is 5"),
    (
        "progress None",
        {"fan_out_progress": _work(None, NOT_STARTED, NOT_STARTED)},  # type: ignore[arg-type]
        "record.fan_out_progress[0].instances[0]",
    ),
    (
        "progress dict",
        {"fan_out_progress": _work({"state": "completed"}, NOT_STARTED, NOT_STARTED)},  # type: ignore[arg-type]
        "record.fan_out_progress[0].instances[0]",
    ),
]


@pytest.fixture
def lmdb_log(tmp_path: Path) -> Iterator[CheckpointLog]:
    cl = CheckpointLog.open(tmp_path / "log", durability="process")
    cl.save("inv", GOOD)
    cl.save("other", OTHER)
    yield cl
    cl.close()


@pytest.mark.parametrize(("fields", "path"), [(f, p) for _, f, p in REPRODUCTIONS],
                         ids=[n for n, _, _ in REPRODUCTIONS])  # fmt: skip
def test_reproduction_rejected_and_log_untouched(
    lmdb_log: CheckpointLog, fields: dict[str, Any], path: str
) -> None:
    record = msgspec.structs.replace(GOOD, **fields)
    with pytest.raises(InvalidRecord, match=path.replace("[", r"\[").replace("]", r"\]")):
        lmdb_log.save("inv", record)
    _assert_untouched(lmdb_log)
    lmdb_log.save("inv", msgspec.structs.replace(GOOD, last_saved_at=101.0))  # still writable
    assert lmdb_log.load("inv") == msgspec.structs.replace(GOOD, last_saved_at=101.0)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"saved_at": datetime.datetime.now()}, "saved_at"),
        ({"saved_at": Decimal("2.5")}, "saved_at"),
        ({"saved_at": "x"}, "saved_at"),
        ({"index": "3"}, "index"),
        ({"index": 1.5}, "index"),
        ({"progress": None}, "progress"),
        ({"progress": {"state": "completed"}}, "progress"),
    ],
)
def test_save_instance_reproduction(
    lmdb_log: CheckpointLog, kwargs: dict[str, Any], name: str
) -> None:
    args = {"index": 0, "progress": FanOutInstanceProgress("completed", result=1)} | kwargs
    index, progress = args.pop("index"), args.pop("progress")
    with pytest.raises(InvalidRecord, match=name):
        lmdb_log.save_instance("inv", "work", index, progress, namespace=("sub",),
                               lineage=GOOD.fan_out_progress[0].enclosing_fan_out_lineage,
                               **args)  # fmt: skip
    _assert_untouched(lmdb_log)


def test_an_unchanged_instance_is_not_checked_again_nor_written(lmdb_log: CheckpointLog) -> None:
    """The fan-out contract: an instance whose state and result are those it had in the
    previous save (and that is not in flight) is unchanged. It was checked when it was saved;
    the check skips it (a wide fan-out costs only its changes) and so does the writer, so a
    wrong type in it is never written. A handle that has not seen the previous save (another
    process, after a restart) checks everything."""
    instances = GOOD.fan_out_progress[0].instances
    bad_first = FanOutInstanceProgress("completed", 1, "yes")  # type: ignore[arg-type]
    record = msgspec.structs.replace(
        GOOD, fan_out_progress=_work(bad_first, *instances[1:]), last_saved_at=101.0
    )
    lmdb_log.save("inv", record)  # instance 0: state and result as saved, so unchanged
    assert lmdb_log.load("inv") == msgspec.structs.replace(GOOD, last_saved_at=101.0)
    assert lmdb_log.verify().ok
    lmdb_log._checker.forget("inv")  # as a new process would: nothing seen yet
    with pytest.raises(InvalidRecord, match=r"instances\[0\]\.result_is_error must be a bool"):
        lmdb_log.save("inv", msgspec.structs.replace(record, last_saved_at=102.0))
    assert lmdb_log.load("inv") == msgspec.structs.replace(GOOD, last_saved_at=101.0)


def test_the_writer_checks_what_it_writes(lmdb_log: CheckpointLog) -> None:
    """Second line: an instance the caller's check skipped as unchanged but the writer sees as
    changed (its base differs: here, the head was rebuilt from the rows) is checked by the
    writer before it is written."""
    instances = GOOD.fan_out_progress[0].instances
    bad = FanOutInstanceProgress("completed", 1, "yes")  # type: ignore[arg-type]
    record = msgspec.structs.replace(GOOD, fan_out_progress=_work(bad, *instances[1:]))
    lmdb_log._cache.clear()  # the writer rebuilds its head from the rows: no previous tuple
    with pytest.raises(InvalidRecord, match=r"instances\[0\]\.result_is_error"):
        lmdb_log.save("inv", record)
    _assert_untouched(lmdb_log)


def test_a_dict_as_the_record(lmdb_log: CheckpointLog) -> None:
    with pytest.raises(InvalidRecord, match="record must be a CheckpointRecord"):
        lmdb_log.save("inv", msgspec.structs.asdict(GOOD))
    _assert_untouched(lmdb_log)


# -- integrations with their own frames --------------------------------------------------------


def _lg_conf(thread: str, cid: str | None = None) -> Any:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def _lg_ckpt(cid: str) -> Any:
    cp = empty_checkpoint()
    cp["id"] = cid
    cp["channel_values"] = {"a": 1}
    cp["channel_versions"] = {"a": "1"}
    return cp


@pytest.fixture(scope="module")
def lg_saver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LmdbSaver]:
    s = LmdbSaver.open(tmp_path_factory.mktemp("lg") / "lg", durability="process")
    s.put(_lg_conf("t"), _lg_ckpt("1"), {}, {"a": "1"})
    s.put(_lg_conf("u"), _lg_ckpt("1"), {}, {"a": "1"})
    yield s
    s.close()


@SETTINGS
@given(
    where=st.sampled_from(
        [
            "id",
            "new_versions key",
            "new_versions value",
            "channel_versions",
            "writes channel",
            "task_path",
        ]
    ),
    bad=NOT_STR.filter(lambda v: v is not None),
    use_async=st.booleans(),
)
def test_langgraph_rejects_wrongly_typed_values(
    lg_saver: LmdbSaver, where: str, bad: Any, use_async: bool
) -> None:
    before = lg_saver.log.stats().frames
    cp = _lg_ckpt("2")
    new: dict[Any, Any] = {"a": "2"}
    if where == "id":
        cp["id"] = bad
    elif where == "new_versions key":
        try:
            new = {bad: "2"}
        except TypeError:  # unhashable: not a possible key
            new = {"a": [bad]}
    elif where == "new_versions value":
        if isinstance(bad, (str, int, float)) and not isinstance(bad, bool):
            bad = [bad]
        new = {"a": bad}
    elif where == "channel_versions":
        if isinstance(bad, (str, int, float)) and not isinstance(bad, bool):
            bad = [bad]
        cp["channel_versions"] = {"a": bad}
    with pytest.raises(CheckpointError):
        _lg_call(lg_saver, where, bad, cp, new, use_async)
    assert lg_saver.log.stats().frames == before
    assert lg_saver.log.verify().ok
    for thread in ("t", "u"):
        got = lg_saver.get_tuple(_lg_conf(thread))
        assert got is not None
        assert got.checkpoint["id"] == "1"
    assert len(list(lg_saver.list(None))) == 2


def _lg_call(saver: LmdbSaver, where: str, bad: Any, cp: Any, new: Any, use_async: bool) -> None:
    if where in ("writes channel", "task_path"):
        writes = [(bad, 1)] if where == "writes channel" else [("a", 1)]
        path = bad if where == "task_path" else ""
        cfg = _lg_conf("t", "1")
        if use_async:
            asyncio.run(saver.aput_writes(cfg, writes, "task", path))
        else:
            saver.put_writes(cfg, writes, "task", path)
    elif use_async:
        asyncio.run(saver.aput(_lg_conf("t"), cp, {}, new))
    else:
        saver.put(_lg_conf("t"), cp, {}, new)


@pytest.fixture(scope="module")
def tr_saver() -> Iterator[LogSaver]:
    s = LogSaver.on_backend(MemoryBackend())
    s.put("t", {"a": 1})
    s.put("u", {"a": 1})
    yield s
    s.close()


@SETTINGS
@given(
    where=st.sampled_from(
        [
            "thread_id",
            "state",
            "state key",
            "parent_id",
            "metadata",
            "step thread_id",
            "step_key",
            "step state",
        ]
    ),
    bad=NOT_STR.filter(lambda v: v is not None),
)
def test_techrevati_rejects_wrongly_typed_values(tr_saver: LogSaver, where: str, bad: Any) -> None:
    before = tr_saver.log.stats().frames
    mapping_bad = bad if bad and not isinstance(bad, dict) else [bad]  # falsy metadata: {}
    key = bad if isinstance(bad, Hashable) else 1
    calls: dict[str, Any] = {
        "thread_id": lambda: tr_saver.put(bad, {"a": 2}),
        "state": lambda: tr_saver.put("t", mapping_bad),
        "state key": lambda: tr_saver.put("t", {key: 1}),
        "parent_id": lambda: tr_saver.put("t", {"a": 2}, parent_id=bad),
        "metadata": lambda: tr_saver.put("t", {"a": 2}, metadata=mapping_bad),
        "step thread_id": lambda: tr_saver.put_step(bad, "k", {"a": 2}),
        "step_key": lambda: tr_saver.put_step("t", bad, {"a": 2}),
        "step state": lambda: tr_saver.put_step("t", "k", mapping_bad),
    }
    with pytest.raises(CheckpointError):
        calls[where]()
    assert tr_saver.log.stats().frames == before
    assert tr_saver.verify().ok
    assert tr_saver.get("t") is not None
    assert tr_saver.get("u") is not None
    assert len(tr_saver.list("t")) == 1


@pytest.fixture(scope="module")
def apflow() -> Iterator[LogCheckpointManager]:
    m = LogCheckpointManager.on_backend(MemoryBackend())
    asyncio.run(m.save_checkpoint("t", {"a": 1}))
    asyncio.run(m.save_checkpoint("u", {"a": 1}))
    yield m
    m.close()


@SETTINGS
@given(
    where=st.sampled_from(["task_id", "data", "step_name", "attempt"]),
    bad=NOT_INT.filter(lambda v: v is not None),
)
def test_apflow_rejects_wrongly_typed_values(
    apflow: LogCheckpointManager, where: str, bad: Any
) -> None:
    before = apflow.log.stats().frames
    args: dict[str, Any] = {"task_id": "t", "data": {"a": 2}, "step_name": "s", "attempt": 1}
    if where == "data":
        bad = [bad] if not isinstance(bad, dict) else {"k": object()}
    elif where in ("task_id", "step_name") and isinstance(bad, str):
        bad = b"x" if where == "step_name" else ""  # a str is a valid id / step name
    args[where] = bad
    with pytest.raises(CheckpointError):
        asyncio.run(apflow.save_checkpoint(**args))
    assert apflow.log.stats().frames == before
    assert apflow.verify().ok
    assert asyncio.run(apflow.load_checkpoint("t")) == {"a": 1}
    assert asyncio.run(apflow.load_checkpoint("u")) == {"a": 1}


# -- an undecodable head row or frame already in the log ---------------------------------------


def _sid(cl: CheckpointLog, inv: str) -> int:
    with cl.log.backend.read() as txn:
        sid = cl.log.stream_id(txn, inv)
    assert sid is not None
    return sid


def _damage_head_row(cl: CheckpointLog, inv: str, raw: bytes) -> None:
    key = struct.pack(">Q", _sid(cl, inv))
    cl.log.backend.run_write(lambda txn: txn.put(HEADS, key, raw))


BAD_ROWS = [
    b"\xc1garbage",  # not msgpack
    # what the old save path wrote: a head row with schema_version an int
    msgspec.msgpack.encode(["inv", "corr", 2, 1.0, "save", 1, 0, [], 1, 1, 0, 0]),
]


@pytest.mark.parametrize("raw", BAD_ROWS, ids=["garbage", "int schema_version"])
def test_list_skips_an_undecodable_head_row_with_a_typed_warning(
    lmdb_log: CheckpointLog, raw: bytes
) -> None:
    _damage_head_row(lmdb_log, "inv", raw)
    with pytest.warns(DamagedRowSkipped, match="'inv'"):
        assert [s.invocation_id for s in lmdb_log.list()] == ["other"]
    with pytest.warns(DamagedRowSkipped):
        assert lmdb_log.list(CheckpointFilter(correlation_id="corr")) == []
    assert lmdb_log.load("other") == OTHER
    assert not lmdb_log.verify().ok  # the damage is reported, not hidden


@pytest.mark.parametrize("raw", BAD_ROWS, ids=["garbage", "int schema_version"])
def test_delete_of_an_invocation_whose_head_row_does_not_decode(
    lmdb_log: CheckpointLog, raw: bytes
) -> None:
    _damage_head_row(lmdb_log, "inv", raw)
    lmdb_log.delete("inv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [s.invocation_id for s in lmdb_log.list()] == ["other"]
    assert lmdb_log.list(CheckpointFilter(correlation_id="corr")) == []
    assert lmdb_log.load("inv") is None
    assert lmdb_log.verify().ok  # the rows are gone; the frames fold to the tombstone
    lmdb_log.save("inv", GOOD)  # and the id can be used again
    assert lmdb_log.load("inv") == GOOD


def test_an_undecodable_frame_does_not_break_list_or_delete(lmdb_log: CheckpointLog) -> None:
    # A frame whose payload does not decode (as the old save path wrote them), appended
    # through the raw log, so its envelope and chain are valid.
    lmdb_log.log.append("inv", Save(kind="save", saved_at=1.0, schema_version=2))  # type: ignore[arg-type]
    assert not lmdb_log.verify().ok
    assert [s.invocation_id for s in lmdb_log.list()] == ["inv", "other"]
    lmdb_log.delete("inv")
    assert [s.invocation_id for s in lmdb_log.list()] == ["other"]
    assert lmdb_log.load("inv") is None
    assert lmdb_log.load("other") == OTHER


@pytest.mark.parametrize(
    ("state", "bad"),
    [
        ({"n": 2**70}, "an int over 64 bits"),
        ({"t": datetime.datetime(2026, 1, 1)}, "a datetime (comes back a str)"),
    ],
)
def test_a_dict_state_that_does_not_encode_is_refused_as_before(
    tmp_path: Path, state: dict[str, Any], bad: str
) -> None:
    """A dict state that cannot be encoded (or that would come back changed) is refused with
    EncodingError naming ``state``, nothing is written, and the next save of the invocation
    works (a guard for any faster encoding of the common dict of scalars)."""
    from eventlog.errors import EncodingError  # noqa: PLC0415

    log = CheckpointLog.open(tmp_path / "log", durability="process")
    try:
        with pytest.raises(EncodingError) as info:
            log.save("inv", CheckpointRecord("inv", "c", state, (), (), 1.0))
        assert info.value.path.startswith("state"), bad
        assert log.load("inv") is None
        log.save("inv", CheckpointRecord("inv", "c", {"n": 1}, (), (), 2.0))
        loaded = log.load("inv")
        assert loaded is not None
        assert loaded.state == {"n": 1}
    finally:
        log.close()
