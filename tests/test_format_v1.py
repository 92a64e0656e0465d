"""A log written by format 1 (before batch frames) opens, reads, verifies, compacts and takes
new saves, batched ones included. The fixture is tests/fixtures/v1-log (made by
tests/fixtures/make_v1_log.py with the ckptlog of that time)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eventlog import CheckpointLog, FanOutInstanceProgress, FanOutInternalSaveBatching, forensics
from eventlog.frames import Event, Save, Snapshot

FIXTURE = Path(__file__).parent / "fixtures" / "v1-log"
N = 40


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    path = tmp_path / "v1-log"
    shutil.copytree(FIXTURE, path)  # opening writes lock.mdb: never into the fixture
    return path


def result(i: int) -> dict[str, object]:
    return {"item": i, "ok": i % 7 != 3, "score": i * 0.5}


def test_a_v1_log_reads_as_written(v1: Path) -> None:
    with CheckpointLog.open(v1, readonly=True) as log:
        head = log.load("run-a")
        assert head is not None
        assert head.state == {"items": N, "blob": "x" * 600}
        instances = head.fan_out_progress[0].instances
        assert [p.result for p in instances] == [result(i) for i in range(N)]
        assert [i for i, p in enumerate(instances) if p.result_is_error] == [3, 10, 17, 24, 31, 38]
        assert head.last_saved_at == 1000.0 + N
        assert log.load("run-b") is None  # deleted
        hist = list(log.history("run-a"))
        # format 1 wrote a frame per buffered save_instance call
        assert [e.seq for e in hist] == list(range(1, N + 2))
        assert log.record_at("run-a", 11) == hist[10].record
        assert log.record_at("run-a", 11).fan_out_progress[0].instances[9].state == "completed"
        assert log.record_at("run-a", 11).fan_out_progress[0].instances[10].state == "not_started"
        frames = [sf.frame for sf in log.log.read_stream("run-a")]
        assert isinstance(frames[0], Snapshot)
        assert all(not f.instance_saved_at for f in frames if isinstance(f, Save))
        assert isinstance(frames[-1], Event)
        assert [k for k, _ in [(e.kind, e) for e in log.history("run-b")]] == [
            "save", "fan_out_internal", "save", "delete"
        ]  # fmt: skip
        assert log.pending_instances("run-a", "work") == []
        assert log.pending_instances("run-a", "work", errors=True) == [3, 10, 17, 24, 31, 38]
        report = log.verify()
        assert report.ok, str(report)


def test_a_v1_log_compacts_and_takes_batched_saves(v1: Path, tmp_path: Path) -> None:
    with CheckpointLog.open(v1) as log:
        before = log.load("run-a")
        forensics.compact(log, tmp_path / "small")
    with CheckpointLog.open(tmp_path / "small") as small:
        assert small.load("run-a") == before
        assert small.verify().ok
    with CheckpointLog.open(
        v1, durability="process", batching=FanOutInternalSaveBatching(flush_every=1000)
    ) as log:
        for i in (3, 10):
            log.save_instance(
                "run-a",
                "work",
                i,
                FanOutInstanceProgress("completed", {"retried": i}),
                saved_at=5000.0 + i,
            )
        log.flush()
        head = log.load("run-a")
        assert head is not None
        assert head.fan_out_progress[0].instances[10].result == {"retried": 10}
        assert log.pending_instances("run-a", "work", errors=True) == [17, 24, 31, 38]
        last = list(log.log.read_stream("run-a"))[-1]
        assert isinstance(last.frame, Save)
        assert last.frame.instance_saved_at == (5003.0, 5010.0)
        report = log.verify()
        assert report.ok, str(report)
