"""One device flush per durable commit (issue 28), seen with strace; the segment's recovery.

A durable save appends a redo record to ``wal.ckptlog`` and fdatasyncs it, then commits LMDB
without sync (``backends/lmdb_wal.py``): exactly one ``fdatasync``/``fsync`` per save that is
not a checkpoint (one in 64 at most, or after 2 MiB of new pages: two flushes) and no write
through an ``O_DSYNC`` descriptor. Recovery is proven on the power-loss simulator
(``tests/test_power_loss.py``); here: a log whose process was killed re-applies its records
at the next open, a torn record ends the replay, and a log of the previous format (no
segment) opens and gets one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backends import lmdb_wal
from eventlog import CheckpointRecord, NodePosition
from eventlog.checkpoints import CheckpointLog

ROOT = Path(__file__).resolve().parent.parent
SAVES = 60

CHILD = """
import os, sys, time
from eventlog import CheckpointRecord, NodePosition
from eventlog.checkpoints import CheckpointLog

def rec(i, size):
    return CheckpointRecord("inv", "c", {"i": i, "pad": "x" * size},
                            (NodePosition((), "n", i),), (), 1.0 + i)

size = int(sys.argv[3])
with CheckpointLog.open(sys.argv[1]) as log:
    log.save("inv", rec(0, size))  # the first commit of a process is a checkpoint
    os.access("/ckptlog-strace-start", os.F_OK)
    for i in range(1, int(sys.argv[2]) + 1):
        log.save("inv", rec(i, size))
    os.access("/ckptlog-strace-stop", os.F_OK)
"""


def rec(i: int) -> CheckpointRecord:
    return CheckpointRecord(
        "inv", "c", {"i": i}, (NodePosition((), "n", i),), (), 1.0 + i
    )  # fmt: skip


@pytest.mark.parametrize("state_bytes", [200, 4096])
def test_a_durable_save_makes_one_device_flush_and_no_dsync_write(
    tmp_path: Path, state_bytes: int
) -> None:
    if shutil.which("strace") is None:
        pytest.fail("this test needs strace (Debian: strace)")
    trace = tmp_path / "trace"
    subprocess.run(
        ["strace", "-f", "-o", str(trace), "-e",
         "trace=openat,fsync,fdatasync,pwrite64,pwritev,write,writev,faccessat,faccessat2,"
         "access,close,sync_file_range",
         sys.executable, "-c", CHILD, str(tmp_path / "log"), str(SAVES), str(state_bytes)],
        check=True, cwd=ROOT, capture_output=True,
    )  # fmt: skip
    lines = trace.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "ckptlog-strace-start" in line)
    stop = next(i for i, line in enumerate(lines) if "ckptlog-strace-stop" in line)
    dsync_fds: set[tuple[str, str]] = set()  # (pid, fd) open with O_DSYNC or O_SYNC now
    dsync_writes: list[str] = []
    for i, line in enumerate(lines[:stop]):
        opened = re.match(r"(\d+)\s+openat\(.*\)\s+=\s+(\d+)", line)
        closed = re.match(r"(\d+)\s+close\((\d+)\)", line)
        wrote = re.match(r"(\d+)\s+(pwrite64|pwritev|write|writev)\((\d+),", line)
        if opened:
            key = (opened.group(1), opened.group(2))
            if re.search(r"O_(D)?SYNC", line):
                dsync_fds.add(key)
            else:
                dsync_fds.discard(key)
        elif closed:
            dsync_fds.discard((closed.group(1), closed.group(2)))
        elif wrote and i > start and (wrote.group(1), wrote.group(3)) in dsync_fds:
            dsync_writes.append(line)
    phase = lines[start:stop]
    flushes = [line for line in phase if re.search(r"\b(fsync|fdatasync)\(", line)]
    # A checkpoint (LMDB synced, then the segment's header) every RECORDS_MAX commits or
    # GROWTH_MAX_BYTES of new pages takes the place of a record: two flushes instead of one.
    checkpoints = [line for line in phase if re.search(r'pwrite64\(\d+, "CKWH', line)]
    assert len(flushes) == SAVES + len(checkpoints), flushes[:5]
    assert len(checkpoints) <= SAVES // 8
    assert dsync_writes == []
    # Early write-out of the data file's pages (past its two meta pages), no wait, no flush.
    writeback = [line for line in phase if "sync_file_range(" in line]
    assert len(writeback) >= SAVES // lmdb_wal.WRITEBACK_EVERY - len(checkpoints) - 1
    for line in writeback:
        assert re.search(r"sync_file_range\(\d+, 8192, 0, SYNC_FILE_RANGE_WRITE\) = 0", line)


PROCESS_CHILD = """
import os, sys
from eventlog import CheckpointRecord, NodePosition
from eventlog.checkpoints import CheckpointLog

def rec(i):
    return CheckpointRecord("inv", "c", {"i": i}, (NodePosition((), "n", i),), (), 1.0 + i)

with CheckpointLog.open(sys.argv[1]) as log:  # made at "fsync": the log has a segment
    log.save("inv", rec(0))
with CheckpointLog.open(sys.argv[1], durability="process") as log:
    log.save("inv", rec(1))
    os.access("/ckptlog-strace-start", os.F_OK)
    for i in range(2, int(sys.argv[2]) + 2):
        log.save("inv", rec(i))
    os.access("/ckptlog-strace-stop", os.F_OK)
"""


def test_process_saves_on_a_log_with_a_segment_start_their_pages_writing_early(
    tmp_path: Path,
) -> None:
    """"process" commits on a log with a segment keep the pin, so each writes new pages that
    the next checkpoint must sync: as a durable commit's, they start going to the device every
    WRITEBACK_EVERY commits (sync_file_range, no wait, no flush), so the checkpoint finds few
    left; and a process commit flushes nothing itself."""
    if shutil.which("strace") is None:
        pytest.fail("this test needs strace (Debian: strace)")
    trace = tmp_path / "trace"
    saves = 4 * lmdb_wal.WRITEBACK_EVERY
    subprocess.run(
        ["strace", "-f", "-o", str(trace), "-e",
         "trace=fsync,fdatasync,msync,sync_file_range,faccessat,faccessat2,access",
         sys.executable, "-c", PROCESS_CHILD, str(tmp_path / "log"), str(saves)],
        check=True, cwd=ROOT, capture_output=True,
    )  # fmt: skip
    lines = trace.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "ckptlog-strace-start" in line)
    stop = next(i for i, line in enumerate(lines) if "ckptlog-strace-stop" in line)
    phase = lines[start:stop]
    assert [line for line in phase if re.search(r"\b(fsync|fdatasync|msync)\(", line)] == []
    writeback = [line for line in phase if "sync_file_range(" in line]
    assert len(writeback) >= saves // lmdb_wal.WRITEBACK_EVERY - 1, writeback
    for line in writeback:
        assert re.search(r"sync_file_range\(\d+, 8192, 0, SYNC_FILE_RANGE_WRITE\) = 0", line)


def test_records_of_a_killed_process_are_there_at_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "log"
    code = (
        "import os, sys\n"
        "from eventlog import CheckpointRecord, NodePosition\n"
        "from eventlog.checkpoints import CheckpointLog\n"
        "log = CheckpointLog.open(sys.argv[1])\n"
        "for i in range(40):\n"
        "    log.save('inv', CheckpointRecord('inv', 'c', {'i': i}, "
        "(NodePosition((), 'n', i),), (), 1.0 + i))\n"
        "os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, check=False)
    assert proc.returncode == -9
    fd = os.open(path / lmdb_wal.SEGMENT_FILE, os.O_RDONLY)
    try:
        header = lmdb_wal.read_header(fd)
        assert header is not None
        assert lmdb_wal.read_records(fd, header)  # saves since the last checkpoint, to re-apply
    finally:
        os.close(fd)
    with CheckpointLog.open(path) as log:
        assert log.verify().ok
        loaded = log.load("inv")
        assert loaded is not None
        assert loaded.state == {"i": 39}
        assert len(list(log.history("inv"))) == 40


def test_replay_stops_at_a_torn_record(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with CheckpointLog.open(path) as log:
        log.save("inv", rec(0))
    fd = os.open(path / lmdb_wal.SEGMENT_FILE, os.O_RDWR)
    try:
        header = lmdb_wal.read_header(fd)
        assert header is not None
        ops: list[tuple[str, bytes, bytes | None]] = [("meta", b"zz-test", b"1")]
        good = lmdb_wal.record_bytes(header.generation, header.checkpoint + 1, ops)
        torn = lmdb_wal.record_bytes(header.generation, header.checkpoint + 2, ops)
        os.pwrite(fd, good + torn[:-1] + b"\xff", header.records_at)
        got = lmdb_wal.read_records(fd, header)
        assert [r.txn_id for r in got] == [header.checkpoint + 1]
    finally:
        os.close(fd)


def test_a_log_of_the_previous_format_opens_and_gets_a_segment(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with CheckpointLog.open(path) as log:
        for i in range(5):
            log.save("inv", rec(i))
    (path / lmdb_wal.SEGMENT_FILE).unlink()  # what today's format has: data.mdb, lock.mdb
    with CheckpointLog.open(path) as log:
        assert log.verify().ok
        log.save("inv", rec(5))
        log.save("inv", rec(6))
    assert (path / lmdb_wal.SEGMENT_FILE).exists()
    with CheckpointLog.open(path) as log:
        assert len(list(log.history("inv"))) == 7


def test_several_writer_processes_share_the_segment(tmp_path: Path) -> None:
    path = tmp_path / "log"
    code = (
        "import sys\n"
        "from eventlog import CheckpointRecord, NodePosition\n"
        "from eventlog.checkpoints import CheckpointLog\n"
        "w = sys.argv[2]\n"
        "with CheckpointLog.open(sys.argv[1]) as log:\n"
        "    for i in range(150):\n"
        "        log.save('inv-' + w, CheckpointRecord('inv-' + w, 'c', {'i': i}, "
        "(NodePosition((), 'n', i),), (), 1.0 + i))\n"
    )
    with CheckpointLog.open(path) as log:
        log.save("inv", rec(0))
    started = time.monotonic()
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path), str(w)], cwd=ROOT)
        for w in range(3)
    ]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    assert time.monotonic() - started < 120
    with CheckpointLog.open(path) as log:
        assert log.verify().ok
        for w in range(3):
            assert len(list(log.history(f"inv-{w}"))) == 150


def test_used_bytes_counts_pages_in_use_not_the_free_ones_the_pin_keeps(tmp_path: Path) -> None:
    with CheckpointLog.open(tmp_path / "log") as log:
        pad = "x" * 4096
        for i in range(60):  # one invocation rewritten: the file grows by pages freed since
            log.save("inv", CheckpointRecord(
                "inv", "c", {"i": i, "pad": pad}, (NodePosition((), "n", i),), (), 1.0 + i
            ))  # fmt: skip
        backend = log.log.backend
        used, size = backend.used_bytes(), backend.size_bytes()
        assert 0 < used < size // 2, (used, size)
        with backend.read() as txn:
            frames = txn.count("log")
        assert frames == 60
        assert used >= 60 * 90  # every frame is in a page in use


def test_process_saves_on_a_log_with_a_segment_reuse_pages(tmp_path: Path) -> None:
    """A log made at "fsync" (the default) has a segment and its pin; written at "process"
    after, its commits are checkpointed every PROCESS_COMMITS_MAX, so LMDB reuses the pages
    freed before each and the data file stops growing with the number of saves. (It grew by
    every page of every commit before: ~40 KB a save here, 1 GB at 30,000 saves.)"""
    path = tmp_path / "log"
    period = lmdb_wal.PROCESS_COMMITS_MAX

    def rec(i: int) -> CheckpointRecord:
        return CheckpointRecord("inv", "c", {"i": i}, (NodePosition((), "n", i),), (), 1.0 + i)

    with CheckpointLog.open(path) as log:
        log.save("inv", rec(0))
    sizes = []
    n = 0
    with CheckpointLog.open(path, durability="process") as log:
        for _ in range(6):
            for _ in range(period):
                n += 1
                log.save("inv", rec(n))
            sizes.append((path / "data.mdb").stat().st_size)
        got = log.load("inv")
        assert got is not None
        assert got.state == {"i": n}
    # past the third period the pages of the one before are reused: the file holds the live
    # pages and two periods' (unbounded, three more periods added ~3 * period * 40 KB)
    assert sizes[-1] - sizes[2] < 8 << 20, sizes
    assert sizes[-1] < period * 100_000, sizes
    with CheckpointLog.open(path, readonly=True) as log:
        assert log.verify().ok


def test_links_and_size_read_without_timestamps_match_fstat(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 12345)
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        assert lmdb_wal.links_and_size(fd) == (st.st_nlink, st.st_size) == (1, 12345)
        os.link(path, tmp_path / "g")
        assert lmdb_wal.links_and_size(fd) == (2, 12345)
        os.unlink(path)
        os.unlink(tmp_path / "g")
        assert lmdb_wal.links_and_size(fd) == (0, 12345)  # what the writers' check refuses
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        lmdb_wal.links_and_size(fd)


@pytest.mark.parametrize("durability", ["fsync", "process"])
def test_a_writer_reads_the_log_end_again_after_any_other_commit(
    tmp_path: Path, durability: str
) -> None:
    """A writer skips reading the log's end only while its transaction's serial follows its
    own last commit's (WriteTxn.serial): a commit by another writer, or any other write
    transaction, in between makes it read the end again."""
    from eventlog.frames import Event  # noqa: PLC0415
    from eventlog.log import EventLog  # noqa: PLC0415

    ev = Event(name="x", data=b"y", at=1.0)
    a = EventLog.open(tmp_path / "log", durability=durability)
    b = EventLog.open(tmp_path / "log", durability=durability)  # another writer, same env
    try:
        for i in range(6):
            done = (a if i % 3 else b).append("s", ev)
            assert done is not None
            assert (done.seq, done.global_seq) == (i + 1, i + 1)
        a.backend.run_write(lambda txn: txn.put("meta", b"other", b"1"))  # no frame of it
        done = a.append("s", ev)
        assert done is not None
        assert (done.seq, done.global_seq) == (7, 7)
        done = b.append("t", ev)
        assert done is not None
        assert (done.seq, done.global_seq) == (1, 8)
        assert a.verify().ok
    finally:
        b.close()
        a.close()
