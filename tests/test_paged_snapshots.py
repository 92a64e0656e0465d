"""Paged snapshots (issue 22): a fan-out too big for one snapshot frame is snapshotted in pages
riding on later saves, so no frame grows with the fan-out's size. The full 10,000,000-instance
run is the ``instances`` benchmark scenario (``python -m benchmarks.instances --huge``)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from eventlog import forensics, views
from eventlog.checkpoints import (
    BATCH_BYTES_MAX,
    PAGE_BYTES_MAX,
    SNAPSHOT_INSTANCES_MAX,
    CheckpointLog,
)
from eventlog.frames import Save, Snapshot
from eventlog.layout import LOG
from eventlog.materialized import SNAPSHOTS, TABLES
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
)


def _job(n: int) -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id="job", correlation_id="c", state={"s": 1}, completed_positions=(),
        parent_states=(), last_saved_at=1.0, schema_version="1",
        fan_out_progress=(FanOutProgress("fan", (), n, (NOT_STARTED,) * n),),
    )  # fmt: skip


def test_the_largest_frame_stays_bounded_with_default_options(tmp_path: Path) -> None:
    """Past ``SNAPSHOT_INSTANCES_MAX`` instances, with default options: every frame stays
    below a page plus a batch however many instances the record holds (a whole snapshot of
    this record would be several times that), and the writer keeps no head of it."""
    n = SNAPSHOT_INSTANCES_MAX * 5 // 2
    cl = CheckpointLog.open(
        tmp_path, durability="process", batching=FanOutInternalSaveBatching(flush_every=1024)
    )
    cl.save("job", _job(n))
    pad = "r" * 48
    for i in range(n):
        cl.save_instance("job", "fan", i, FanOutInstanceProgress("completed", {"i": i, "p": pad}))
    cl.flush()
    assert "job" not in cl._cache
    largest = rows = 0
    paged = 0
    for sf in cl.log.read_stream("job"):
        frame = sf.frame
        assert not isinstance(frame, Snapshot) or sf.seq == 1  # only the first, while small
        largest = max(largest, len(msgspec.msgpack.encode(frame)))
        if isinstance(frame, Save) and frame.page is not None and frame.page.last:
            paged += 1
    with cl.log.backend.read() as txn:
        rows = sum(len(v) for _, v in txn.scan("fanout"))
        marks = [v for _, v in txn.scan(SNAPSHOTS) if v]
    assert paged >= 1
    assert len(marks) == paged
    assert largest <= PAGE_BYTES_MAX + BATCH_BYTES_MAX + (64 << 10)
    assert rows > 3 * largest  # one snapshot of the record would not have fit this bound
    record = cl.load("job")
    assert record is not None
    assert record.fan_out_progress[0].instances[n - 1].result == {"i": n - 1, "p": pad}
    last = cl.log.last_seq("job")
    assert cl.record_at("job", last) == record
    report = cl.verify()
    assert report.ok, str(report)
    cl.close()


def test_rebuild_and_compaction_reproduce_paged_rows(tmp_path: Path) -> None:
    """The head row's paging bookkeeping and the paged snapshot marks are a fold of the frames:
    a rebuild writes them byte for byte, and a compacted copy verifies."""
    cl = CheckpointLog.open(
        tmp_path / "a", durability="process", batching=FanOutInternalSaveBatching(flush_every=50)
    )
    cl.snapshot_instances_max = cl.head_rows_cached_max = 64
    cl.page_rows_max = 100
    n = 2000
    cl.save("job", _job(n))
    for i in range(n):
        cl.save_instance("job", "fan", (i * 7) % n, FanOutInstanceProgress("completed", i))
    cl.flush()
    with cl.log.backend.read() as txn:
        before = {t: list(txn.scan(t)) for t in TABLES}
        assert any(v for _, v in txn.scan(SNAPSHOTS))
    views.rebuild(cl.log)
    with cl.log.backend.read() as txn:
        assert {t: list(txn.scan(t)) for t in TABLES} == before
    forensics.compact(cl, tmp_path / "b")
    out = CheckpointLog.open(tmp_path / "b", readonly=True)
    assert out.load("job") == cl.load("job")
    checked = out.verify()
    assert checked.ok, str(checked)
    with out.log.backend.read() as txn:
        assert txn.count(LOG) > 0
    out.close()
    cl.close()
