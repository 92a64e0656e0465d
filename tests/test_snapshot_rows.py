"""A snapshot frame's instances are assembled from the fan-out rows with the frame's own
changes laid over them (``materialized.snapshot_instances``): the same bytes as encoding the
head's instances (``projections.records.started_changes``), whatever led to the head (whole
record saves adding, changing and dropping fan-outs, instances back to not started, batches
of ``save_instance`` calls repeating an index, ``save_instances``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

import eventlog.checkpoint_frames as cf
from backends.memory import MemoryBackend
from eventlog.checkpoints import CheckpointLog
from eventlog.materialized import _enc
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
)
from projections.records import Head, snapshot, started_changes


def _record(fans: tuple[FanOutProgress, ...], state: dict[str, Any]) -> CheckpointRecord:
    return CheckpointRecord("job", "c", state, (), (), 1.0, fan_out_progress=fans)


def _done(i: int, **more: Any) -> FanOutInstanceProgress:
    return FanOutInstanceProgress("completed", {"i": i, **more})


def _saves(cl: CheckpointLog) -> None:
    a = [NOT_STARTED] * 12
    a[3] = _done(3)
    a[7] = FanOutInstanceProgress("in_flight")
    b = [NOT_STARTED] * 5
    cl.save("job", _record((FanOutProgress("a", (), 12, tuple(a)),), {"k": 1}))
    for i in (0, 1, 1, 11, 3):
        cl.save_instance("job", "a", i, _done(i, again=i == 1))
    cl.flush()
    a[0], a[1], a[11] = _done(0), _done(1, again=True), _done(11)
    a[3] = NOT_STARTED  # back to not started: its row goes, the snapshot leaves it out
    b[4] = FanOutInstanceProgress("completed", "x", result_is_error=True)
    fans = (FanOutProgress("a", (), 12, tuple(a)), FanOutProgress("b", (), 5, tuple(b)))
    cl.save("job", _record(fans, {"k": 2}))  # a new fan-out, changes in the old one
    cl.save_instances("job", "b", [(0, _done(0)), (2, _done(2)), (0, _done(0, last=True))])
    cl.save_instance("job", "a", 5, _done(5))
    cl.save_instance("job", "b", 1, _done(1))  # a batch mixing two fan-outs
    cl.save_instance("job", "a", 5, NOT_STARTED)
    cl.flush()
    cl.save("job", _record((FanOutProgress("b", (), 5, tuple(b)),), {"k": 3}))  # "a" dropped
    cl.save_instance("job", "b", 3, _done(3))
    cl.flush()


@pytest.mark.parametrize("where", ["memory", "lmdb"])
def test_snapshot_instances_are_the_heads_encoding(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cf, "SNAPSHOT_RATIO", 0)  # every frame a snapshot
    built: list[bytes] = []
    real = snapshot  # what checkpoint_frames calls

    def checked(head: Head, instances: Any = None) -> Any:
        assert isinstance(instances, msgspec.Raw)
        assert bytes(instances) == _enc.encode(started_changes(head.slots))
        built.append(bytes(instances))
        return real(head, instances)

    monkeypatch.setattr(cf, "snapshot", checked)
    batching = FanOutInternalSaveBatching(flush_every=100)
    if where == "memory":
        cl = CheckpointLog.on_backend(MemoryBackend(), batching=batching)
    else:
        cl = CheckpointLog.open(tmp_path / "log", durability="process", batching=batching)
    try:
        _saves(cl)
        assert len(set(built)) >= 4  # distinct snapshots, each checked
        rec = cl.load("job")
        assert rec is not None
        (fan,) = rec.fan_out_progress
        # the last whole record put "b" 0..2 back to not started; 3 was saved after it
        assert [x.state for x in fan.instances] == ["not_started"] * 3 + ["completed"] * 2
        assert fan.instances[3].result == {"i": 3}
        assert fan.instances[4].result_is_error
        last = cl.log.last_seq("job")
        for seq in range(1, last + 1):  # each snapshot reads back as the record it stands for
            at = cl.record_at("job", seq)
            assert at is not None
        assert cl.verify().ok
    finally:
        cl.close()
