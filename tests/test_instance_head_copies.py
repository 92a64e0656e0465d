"""The writer's cached head keeps its own copies of the instances a ``save_instance`` /
``save_instances`` batch sets (decoded from the bytes stored), never the caller's objects: a
result the caller changes after the call changes neither what is stored nor what the head
compares a later whole-record save against (the change in that save is written)."""

from __future__ import annotations

from typing import Any

import pytest

from backends.memory import MemoryBackend
from eventlog.checkpoints import CheckpointLog
from eventlog.records import NOT_STARTED, FanOutInstanceProgress, FanOutInternalSaveBatching
from eventlog.testing import NS, done, fan_out, make_record
from eventlog.validate import decoded_progresses, encode_progress

INV = "job"


def _record(at: float, a: list[FanOutInstanceProgress], b: list[FanOutInstanceProgress]) -> Any:
    return make_record(INV, at=at, fan_outs=[fan_out("a", a), fan_out("b", b)])


def _log(batched: bool) -> CheckpointLog:
    batching = FanOutInternalSaveBatching(flush_every=3) if batched else None
    return CheckpointLog.on_backend(MemoryBackend(), batching=batching)


def _results(log: CheckpointLog, fan: int) -> list[Any]:
    rec = log.load(INV)
    assert rec is not None
    return [p.result for p in rec.fan_out_progress[fan].instances]


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("call", ["save_instance", "save_instances", "two fan-outs"])
def test_result_changed_after_the_call(batched: bool, call: str) -> None:
    log = _log(batched)
    log.save(INV, _record(1.0, [NOT_STARTED] * 4, [NOT_STARTED] * 2))
    r0, r1 = {"n": 0, "tags": "x"}, {"n": 1}
    if call == "save_instance":
        log.save_instance(INV, "a", 0, done(r0), namespace=NS)
        log.save_instance(INV, "a", 1, done(r1), namespace=NS)
    elif call == "save_instances":
        log.save_instances(INV, "a", [(0, done(r0)), (1, done(r1))], namespace=NS)
    else:  # one batch of two fan-outs (the writer's per-change path)
        log.save_instance(INV, "a", 0, done(r0), namespace=NS)
        log.save_instance(INV, "b", 1, done({"b": 1}), namespace=NS)
        log.save_instance(INV, "a", 1, done(r1), namespace=NS)
    log.flush()
    seq = log._last_seq(INV)
    r0["n"] = 100  # the caller reuses its result objects
    r0["tags"] = "changed"
    r1.clear()
    assert _results(log, 0)[:2] == [{"n": 0, "tags": "x"}, {"n": 1}]
    # a later whole-record save holding the changed objects: the change is a change
    later = _record(2.0, [done(r0), done(r1), NOT_STARTED, NOT_STARTED], [NOT_STARTED] * 2)
    log.save(INV, later)
    assert _results(log, 0)[:2] == [{"n": 100, "tags": "changed"}, {}]
    at = log.record_at(INV, seq)
    assert at is not None
    assert [p.result for p in at.fan_out_progress[0].instances[:2]] == [
        {"n": 0, "tags": "x"},
        {"n": 1},
    ]
    assert log.verify().ok
    log.close()


def test_changed_results_stay_out_of_snapshots() -> None:
    """Many batches (snapshots among them) whose callers change every result right after the
    call: every record, snapshot-based or not, holds the values of the calls."""
    log = _log(True)
    n = 64
    log.save(INV, _record(1.0, [NOT_STARTED] * n, [NOT_STARTED] * 2))
    expected: list[Any] = [None] * n
    middle: tuple[int, list[Any]] | None = None
    for round_ in range(40):
        for i in range(n):
            result = {"round": round_, "i": i}
            log.save_instance(INV, "a", i, done(result), namespace=NS)
            expected[i] = dict(result)
            result["round"] = -1  # changed after the call
        log.flush()
        if round_ == 20:
            middle = (log._last_seq(INV), list(expected))
    assert _results(log, 0) == expected
    assert middle is not None
    at = log.record_at(INV, middle[0])
    assert at is not None
    assert [p.result for p in at.fan_out_progress[0].instances] == middle[1]
    report = log.verify()
    assert report.ok, report
    log.close()


def test_decoded_progresses_are_equal_copies() -> None:
    progs = [
        done({"a": [1, 2], "b": {"c": None}}),
        FanOutInstanceProgress("in_flight"),
        NOT_STARTED,
    ]
    raws = [encode_progress(p, i) for i, p in enumerate(progs)]
    copies = decoded_progresses(raws)
    assert copies == progs
    assert all(c is not p for c, p in zip(copies, progs, strict=True))
    assert copies[0].result is not progs[0].result


def test_result_changed_after_the_call_with_another_writer(tmp_path: Any) -> None:
    """The cached head is caught up with another writer's frames (a fold writes its slots):
    the batch's instances become the head's own copies first."""
    ours = CheckpointLog.open(tmp_path, durability="process")
    theirs = CheckpointLog.open(tmp_path, durability="process")
    try:
        ours.save(INV, _record(1.0, [NOT_STARTED] * 4, [NOT_STARTED] * 2))
        r0 = {"n": 0}
        ours.save_instance(INV, "a", 0, done(r0), namespace=NS)
        theirs.save_instance(INV, "a", 2, done({"n": 2}), namespace=NS)
        r0["n"] = 100
        assert _results(ours, 0) == [{"n": 0}, None, {"n": 2}, None]
        later = [done(r0), NOT_STARTED, done({"n": 2}), NOT_STARTED]
        ours.save(INV, _record(2.0, later, [NOT_STARTED] * 2))  # caught up, then compared
        assert _results(theirs, 0) == [{"n": 100}, None, {"n": 2}, None]
        assert ours.verify().ok
    finally:
        theirs.close()
        ours.close()
