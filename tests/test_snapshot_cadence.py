"""When snapshots are written (issue 22): once the frames since the last snapshot outweigh it
``SNAPSHOT_RATIO`` times (or after ``max(SNAPSHOT_FRAMES_MAX, S / 64)`` frames), whole or paged,
and never before. That is also what bounds ``record_at``: from any seq it folds the newest
snapshot complete by then and at most ``SNAPSHOT_RATIO`` times its bytes of frames after it
(plus the frame at the seq itself)."""

from __future__ import annotations

from pathlib import Path

from eventlog.checkpoint_frames import (
    PAGE_ROWS_MIN,
    PAGE_ROWS_PER_CHANGE,
    SNAPSHOT_BYTES_PER_FRAME,
    SNAPSHOT_FRAMES_MAX,
    SNAPSHOT_RATIO,
)
from eventlog.checkpoints import CheckpointLog
from eventlog.frames import Save, Snapshot
from eventlog.materialized import Book, book_after
from eventlog.records import NOT_STARTED, FanOutInstanceProgress, FanOutInternalSaveBatching
from eventlog.testing import assert_history_consistent, fan_out, make_record


def _run(tmp_path: Path, n: int, paged_over: int | None) -> CheckpointLog:
    cl = CheckpointLog.open(
        tmp_path, durability="process", batching=FanOutInternalSaveBatching(flush_every=64)
    )
    if paged_over is not None:
        cl.snapshot_instances_max = paged_over
    cl.save(
        "job",
        make_record(
            "job",
            correlation_id="c",
            state={"s": 1},
            schema_version="1",
            fan_outs=(fan_out("fan", (NOT_STARTED,) * n, namespace=()),),
        ),
    )
    for i in range(n):  # in index order, as a fan-out's results mostly come
        cl.save_instance("job", "fan", i, FanOutInstanceProgress("completed", {"i": i, "r": "x"}))
    cl.flush()
    return cl


def _due(book: Book, seq: int) -> bool:
    limit = max(SNAPSHOT_FRAMES_MAX, book.snapshot_bytes // SNAPSHOT_BYTES_PER_FRAME)
    return (
        book.chain_bytes > SNAPSHOT_RATIO * book.snapshot_bytes or seq - book.snapshot_seq >= limit
    )


def test_whole_snapshots_come_at_the_ratio_and_bound_record_at(tmp_path: Path) -> None:
    n = 6000
    cl = _run(tmp_path, n, None)
    frames = list(cl.log.read_stream("job"))
    assert isinstance(frames[0].frame, Snapshot)
    book, _ = book_after(Book(), frames[0].frame, 1, frames[0].stored_bytes)
    restated = 0
    for sf in frames[1:]:
        # a snapshot exactly when one is due: neither sooner nor later
        assert isinstance(sf.frame, Snapshot) == _due(book, sf.seq), sf.seq
        if isinstance(sf.frame, Snapshot):
            restated += len(sf.frame.instances)
        else:
            # what record_at folds for this seq: the snapshot, at most SNAPSHOT_RATIO times
            # its bytes of frames after it, and this frame
            assert book.chain_bytes <= SNAPSHOT_RATIO * book.snapshot_bytes
        book, _ = book_after(book, sf.frame, sf.seq, sf.stored_bytes)
    assert restated < n  # each row restated less than once on average (1.13x at ratio 2)
    assert_history_consistent(cl, "job")  # record_at at every seq, the worst one included
    report = cl.verify()
    assert report.ok, str(report)
    cl.close()


def test_paged_snapshots_come_at_the_ratio_and_pages_follow_the_saves(tmp_path: Path) -> None:
    n = 8000
    cl = _run(tmp_path, n, 500)
    frames = list(cl.log.read_stream("job"))
    book, _ = book_after(Book(), frames[0].frame, 1, frames[0].stored_bytes)
    completed = 0
    for sf in frames[1:]:
        frame = sf.frame
        assert isinstance(frame, Save)
        page = frame.page
        if book.paging_since:
            assert page is not None  # until the last page
            assert page.back == sf.seq - book.paging_since
        else:  # a paged snapshot starts exactly when one is due
            assert (page is not None) == _due(book, sf.seq), sf.seq
            if page is None:
                assert book.chain_bytes <= SNAPSHOT_RATIO * book.snapshot_bytes
        if page is not None:
            rows_max = max(PAGE_ROWS_MIN, PAGE_ROWS_PER_CHANGE * len(frame.instances))
            assert len(page.instances) <= rows_max
        book, done = book_after(book, frame, sf.seq, sf.stored_bytes)
        completed += done > 0
    assert completed >= 2
    assert_history_consistent(cl, "job")
    report = cl.verify()
    assert report.ok, str(report)
    cl.close()
