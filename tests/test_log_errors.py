"""EventLog's typed errors (each message pinned) and its append/read API on the LMDB backend.

Every error case also checks that the failed call left the log exactly as it was and that the
log still takes appends afterwards (eventlog.errors: raising never leaves the log half-written).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest

from backends.testing import create_unfolded_lmdb
from eventlog.errors import (
    CheckpointError,
    EncodingError,
    FrameTooLarge,
    InvalidStreamKey,
    LogClosed,
    NotALog,
    UnsupportedFormat,
)
from eventlog.frames import Event
from eventlog.layout import CORE_TABLES
from eventlog.log import Appended, EventLog, SequenceConflict

OpenLog = Callable[..., EventLog]
Snapshot = tuple[list[str], list[tuple[str, int, int, bytes]]]

KEY_BYTES_MAX = 511  # LMDB's default max key size (a log made with the fold reports one less)


def ev(n: int, data: Any = None) -> Event:
    return Event(name=f"e{n}", data=data)


def snapshot(log: EventLog) -> Snapshot:
    """Everything observable about the stored log: stream keys and every frame's place."""
    return log.streams(), [(f.stream, f.seq, f.global_seq, f.checksum) for f in log.scan()]


def seeded(log: EventLog) -> Snapshot:
    """Give a fresh log some content in two streams; returns its snapshot."""
    for i in range(3):
        log.append("s", ev(i))
    log.append("other", ev(9))
    return snapshot(log)


def assert_still_usable(log: EventLog, before: Snapshot) -> None:
    """Unchanged since ``before``, and the next append lands right after what was there."""
    assert snapshot(log) == before
    next_seq = log.last_seq("s") + 1
    done = log.append("s", ev(100))
    assert done is not None
    assert (done.seq, done.global_seq) == (next_seq, len(before[1]) + 1)
    report = log.verify()
    assert report.ok, str(report)


def _raw_meta(path: Path, change: Callable[[dict[str, Any]], dict[str, Any] | bytes]) -> None:
    """Rewrite the ``meta`` format record with raw lmdb (the log must be closed)."""
    env = lmdb.open(str(path), max_dbs=64)
    try:
        meta = env.open_db(b"meta")
        with env.begin(write=True) as txn:
            new = change(json.loads(txn.get(b"format", db=meta)))
            txn.put(b"format", new if isinstance(new, bytes) else json.dumps(new).encode(), db=meta)
    finally:
        env.close()


# -- stream keys -------------------------------------------------------------------------------

APPEND_CALLS: dict[str, Callable[[EventLog, Any], object]] = {
    "append": lambda log, key: log.append(key, ev(1)),
    "buffered": lambda log, key: log.append(key, ev(1), durable=False),
    "append_many": lambda log, key: log.append_many([("s", ev(1)), (key, ev(2))]),
    "submit": lambda log, key: log.submit(key, ev(1)),
    "append_async": lambda log, key: asyncio.run(log.append_async(key, ev(1))),
    "read_stream": lambda log, key: list(log.read_stream(key)),
}


@pytest.mark.parametrize("call", list(APPEND_CALLS))
def test_empty_stream_key(open_log: OpenLog, call: str) -> None:
    log = open_log()
    before = seeded(log)
    with pytest.raises(InvalidStreamKey, match=r"^stream key must be a non-empty string, got ''$"):
        APPEND_CALLS[call](log, "")
    # append_many validated every key before queueing any frame: its good frame is not written.
    assert log.buffered_count() == 0
    assert_still_usable(log, before)


@pytest.mark.parametrize(
    ("key", "type_name"), [(b"s", "bytes"), (7, "int"), (None, "NoneType")], ids=str
)
def test_stream_key_not_a_str(open_log: OpenLog, key: object, type_name: str) -> None:
    log = open_log()
    before = seeded(log)
    for call in APPEND_CALLS.values():
        with pytest.raises(InvalidStreamKey, match=rf"^stream key must be a str, got {type_name}$"):
            call(log, key)
    assert_still_usable(log, before)


@pytest.mark.parametrize("unfolded", [False, True], ids=["new", "made-before-the-fold"])
def test_stream_key_above_backend_limit(open_log: OpenLog, log_path: Path, unfolded: bool) -> None:
    # A new LMDB log keeps its per-stream tables in the fold (backends/lmdb_fold.py), whose
    # stored keys take a byte: its limit is one under LMDB's; a log made before keeps LMDB's.
    if unfolded:
        create_unfolded_lmdb(log_path, CORE_TABLES)
    limit = KEY_BYTES_MAX if unfolded else KEY_BYTES_MAX - 1
    log = open_log()
    before = seeded(log)
    assert log.backend.max_key_bytes == limit
    # Counted in UTF-8 bytes, not characters: 256 two-byte characters are 512 bytes.
    for key in ("é" * 256, "k" * (limit + 1), "k" * (limit - 1) + "é"):
        with pytest.raises(
            InvalidStreamKey,
            match=rf"^stream key is {len(key.encode())} bytes of UTF-8, above the backend "
            rf"limit of {limit}; use a shorter id \(a UUID or a hash of the long one\)$",
        ):
            log.append(key, ev(1))
    assert_still_usable(log, before)
    # Exactly at the limit is fine, and reads back under the same key.
    longest = "k" * (limit - 2) + "é"
    assert len(longest.encode()) == limit
    done = log.append(longest, ev(2))
    assert done is not None
    assert done.seq == 1
    assert [f.frame for f in log.read_stream(longest)] == [ev(2)]
    assert longest in log.streams()


def test_invalid_stream_key_is_a_value_error() -> None:
    assert issubclass(InvalidStreamKey, ValueError)
    assert issubclass(InvalidStreamKey, CheckpointError)


# -- frames that cannot be written -------------------------------------------------------------

TOO_LARGE = (
    r"^frame for stream 's' is \d+ bytes stored \(\d+ encoded\), "
    r"above frame_bytes_max=1000; "
)


def test_frame_too_large(open_log: OpenLog) -> None:
    log = open_log(frame_bytes_max=1000)
    before = seeded(log)
    noise = random.Random(7).randbytes(2000)  # incompressible: stored size stays above 1000
    with pytest.raises(FrameTooLarge, match=TOO_LARGE + "save smaller states"):
        log.append("s", ev(1, noise))
    assert_still_usable(log, before)


def test_compressible_frame_above_frame_bytes_max(open_log: OpenLog) -> None:
    """A frame whose encoding exceeds ``frame_bytes_max`` but compresses below it: the write
    and read paths must agree on it. Either the append is refused, or it reads back."""
    log = open_log(frame_bytes_max=1000)
    before = seeded(log)
    big = ev(2, "x" * 5000)
    try:
        done = log.append("s", big)
    except FrameTooLarge:
        assert_still_usable(log, before)
        return
    assert done is not None
    assert done.stored_bytes <= 1000
    stored = log.read_frame("s", done.seq)  # an acknowledged frame must never read as corrupt
    assert stored is not None
    assert stored.frame == big
    report = log.verify()
    assert report.ok, str(report)


def test_frame_too_large_buffered_is_raised_by_flush(open_log: OpenLog) -> None:
    log = open_log(frame_bytes_max=1000)
    before = seeded(log)
    noise = random.Random(8).randbytes(2000)
    assert log.append("s", ev(1, noise), durable=False) is None
    with pytest.raises(FrameTooLarge, match=TOO_LARGE):
        log.flush()
    log.flush()  # the failure was delivered once; nothing is left over
    assert_still_usable(log, before)


def test_unencodable_value(open_log: OpenLog) -> None:
    log = open_log()
    before = seeded(log)
    with pytest.raises(
        EncodingError,
        match=r"^cannot encode frame\.data\.bad\[0\] \(a object\): .*; values must be builtins "
        r"\(dict, list, str, int, float, bool, None\), dataclasses or msgspec Structs$",
    ) as exc:
        log.append("s", ev(1, {"ok": 1, "bad": [object()]}))
    assert exc.value.path == "frame.data.bad[0]"
    with pytest.raises(EncodingError, match=r"^cannot encode frame\.data \(a object\)"):
        log.append("fresh", ev(1, object()))
    assert "fresh" not in log.streams()
    assert_still_usable(log, before)


def test_unencodable_value_fails_alone_in_a_group(open_log: OpenLog) -> None:
    log = open_log()
    with pytest.raises(EncodingError, match=r"^cannot encode frame\.data "):
        log.append_many([("g", ev(1)), ("g", ev(2, object())), ("g", ev(3))])
    assert [(f.seq, f.frame) for f in log.read_stream("g")] == [(1, ev(1)), (2, ev(3))]
    assert log.verify().ok


# -- closed log --------------------------------------------------------------------------------

CLOSED = r"^append after close: the log at '.*' is closed; open it again to append$"


def test_append_after_close(open_log: OpenLog) -> None:
    log = open_log()
    before = seeded(log)
    log.close()
    log.close()  # idempotent
    assert log.closed
    calls: list[Callable[[], object]] = [
        lambda: log.append("s", ev(1)),
        lambda: log.append("s", ev(1), durable=False),
        lambda: log.append_many([("s", ev(1))]),
        lambda: log.submit("s", ev(1)),
        lambda: asyncio.run(log.append_async("s", ev(1))),
        log.flush,
    ]
    for call in calls:
        with pytest.raises(LogClosed, match=CLOSED):
            call()
    with pytest.raises(LogClosed, match=r"is closed; open it again"):
        list(log.read_stream("s"))
    assert_still_usable(open_log(), before)


# -- paths that are not logs -------------------------------------------------------------------


def test_open_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"not a log")
    with pytest.raises(
        NotALog,
        match=r"^'.*/file' is a file, but a ckptlog log is a directory holding data\.mdb; "
        r"pass the directory",
    ):
        EventLog.open(path)
    assert path.read_bytes() == b"not a log"


def test_open_foreign_directory(tmp_path: Path) -> None:
    path = tmp_path / "dir"
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    with pytest.raises(
        NotALog,
        match=r"^'.*/dir' is a non-empty directory without data\.mdb, so not a ckptlog log; "
        r"pass a new path or an existing log$",
    ):
        EventLog.open(path)
    assert sorted(p.name for p in path.iterdir()) == ["notes.txt"]  # created nothing


def test_open_foreign_lmdb_environment(tmp_path: Path) -> None:
    path = tmp_path / "env"
    env = lmdb.open(str(path), max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v", db=env.open_db(b"other", txn=txn))
    env.close()
    with pytest.raises(
        NotALog, match=r"without a 'meta' table \(it holds other\): either not a ckptlog"
    ):
        EventLog.open(path)
    env = lmdb.open(str(path), max_dbs=4)
    try:
        with env.begin() as txn:
            names = sorted(bytes(k) for k, _ in txn.cursor())
            assert names == [b"other"]  # no tables were added to someone else's environment
    finally:
        env.close()


def test_open_garbage_data_file(tmp_path: Path) -> None:
    path = tmp_path / "garbage"
    path.mkdir()
    (path / "data.mdb").write_bytes(random.Random(3).randbytes(64 << 10))
    with pytest.raises(NotALog, match=r"not a readable LMDB environment"):
        EventLog.open(path)


@pytest.fixture
def closed_log(open_log: OpenLog, log_path: Path) -> Snapshot:
    """A log with content, closed (so raw lmdb may open it); returns its snapshot."""
    log = open_log()
    before = seeded(log)
    log.close()
    return before


def test_open_newer_format(open_log: OpenLog, log_path: Path, closed_log: Snapshot) -> None:
    original: dict[str, Any] = {}
    seen: list[dict[str, Any]] = []

    def to_99(rec: dict[str, Any]) -> dict[str, Any]:
        original.update(rec)
        return {**rec, "format_version": 99}

    _raw_meta(log_path, to_99)
    for readonly in (False, True):
        with pytest.raises(
            UnsupportedFormat,
            match=r"^'.*' was written in log format 99, newer than the 2 this ckptlog reads; "
            r"upgrade ckptlog to open it$",
        ):
            EventLog.open(log_path, readonly=readonly)
    # The failed opens released the environment (raw lmdb may open it) and left the record
    # as it was (not "upgraded", not replaced by a fresh one).
    _raw_meta(log_path, lambda rec: seen.append(rec) or rec)
    assert seen == [{**original, "format_version": 99}]
    _raw_meta(log_path, lambda rec: original)
    assert_still_usable(open_log(), closed_log)


def test_open_unreadable_format_record(log_path: Path, closed_log: Snapshot) -> None:
    _raw_meta(log_path, lambda rec: b"{not json")
    with pytest.raises(NotALog, match=r"unreadable format record b'\{not json'"):
        EventLog.open(log_path)


# -- optimistic concurrency --------------------------------------------------------------------


def test_expect_seq_mismatch(open_log: OpenLog) -> None:
    log = open_log()
    before = seeded(log)
    with pytest.raises(
        SequenceConflict,
        match=r"^stream 's' is at seq 3, so this append would get seq 4, but it expected seq 6; "
        r"another writer appended \(or an earlier frame failed\): reload the stream and try again$",
    ):
        log.append("s", ev(1), expect_seq=6)
    assert issubclass(SequenceConflict, CheckpointError)
    assert_still_usable(log, before)
    done = log.append("s", ev(2), expect_seq=5)
    assert done is not None
    assert done.seq == 5


def test_expect_seq_mismatch_on_new_stream_creates_nothing(open_log: OpenLog) -> None:
    log = open_log()
    before = seeded(log)
    with pytest.raises(SequenceConflict, match=r"^stream 'new' is at seq 0, .* expected seq 2"):
        log.append("new", ev(1), expect_seq=2)
    # "nothing of it is written": not even the stream's key (streams(), stats().streams).
    assert log.stats().streams == 2
    assert_still_usable(log, before)


# -- buffered appends --------------------------------------------------------------------------


def test_buffered_append_and_flush(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(3):
        assert log.append("b", ev(i), durable=False) is None
    assert (log.buffered_count(), log.buffered_count("b"), log.buffered_count("x")) == (3, 3, 0)
    assert log.last_seq("b") == 0
    assert list(log.read_stream("b")) == []
    log.flush()
    assert log.buffered_count() == 0
    assert [(f.seq, f.frame) for f in log.read_stream("b")] == [(i + 1, ev(i)) for i in range(3)]


def test_flush_from_many_threads_commits_every_frame_in_order(open_log: OpenLog) -> None:
    # flush() commits in the calling thread unless a commit is running: with eight threads
    # buffering and flushing at once, flushes lead, wait for another leader or for the writer,
    # and every one returns only once its own frames are committed.
    log = open_log(batch_frames_max=64)  # several commits per flush
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for round_ in range(5):
                for i in range(100):
                    log.append(f"t{t}", ev(round_ * 100 + i), durable=False)
                log.flush()
                assert log.last_seq(f"t{t}") == (round_ + 1) * 100
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    for t in range(8):
        assert [f.frame for f in log.read_stream(f"t{t}")] == [ev(i) for i in range(500)]
    assert log.verify().ok


def test_durable_append_commits_the_streams_buffered_frames_first(open_log: OpenLog) -> None:
    log = open_log()
    log.append("b", ev(1), durable=False)
    log.append("c", ev(2), durable=False)
    done = log.append("b", ev(3))
    assert done is not None
    assert done.seq == 2  # call order within the stream
    assert log.buffered_count() == 1  # "c" is still buffered: only "b" was pulled in
    assert [f.frame for f in log.read_stream("b")] == [ev(1), ev(3)]


def test_discard_buffered(open_log: OpenLog) -> None:
    log = open_log()
    before = seeded(log)
    for i in range(4):
        log.append("d", ev(i), durable=False)
    log.append("s", ev(50), durable=False)
    assert log.discard_buffered("d") == 4
    assert log.discard_buffered("d") == 0
    assert log.buffered_count() == 1
    log.flush()
    assert "d" not in log.streams()
    assert [f.frame for f in log.read_stream("s", 4)] == [ev(50)]
    assert snapshot(log)[1][: len(before[1])] == before[1]


def test_flush_interval_commits_buffered_frames(open_log: OpenLog) -> None:
    log = open_log(flush_interval=0.02)
    log.append("b", ev(1), durable=False)
    deadline = time.monotonic() + 5
    while log.last_seq("b") == 0:
        assert time.monotonic() < deadline, "flush_interval never committed the frame"
        time.sleep(0.005)
    assert log.buffered_count() == 0


def test_close_commits_buffered_frames(open_log: OpenLog) -> None:
    log = open_log()
    log.append("b", ev(1), durable=False)
    log.close()
    assert [f.frame for f in open_log().read_stream("b")] == [ev(1)]


# -- asyncio -----------------------------------------------------------------------------------


def test_append_async(open_log: OpenLog) -> None:
    log = open_log()

    async def main() -> list[Appended | None]:
        calls = [log.append_async(f"a{i % 2}", ev(i)) for i in range(20)]
        results = await asyncio.gather(*calls)
        assert await log.append_async("a0", ev(99), durable=False) is None
        await log.flush_async()
        with pytest.raises(EncodingError, match=r"^cannot encode frame\.data "):
            await log.append_async("a0", ev(100, object()))
        return results

    results = asyncio.run(main())
    # Queued before the first await, so seqs follow call order within each stream.
    assert [(r.stream, r.seq) for r in results if r] == [
        (f"a{i % 2}", i // 2 + 1) for i in range(20)
    ]
    assert [r.global_seq for r in results if r] == list(range(1, 21))
    assert [f.frame for f in log.read_stream("a0")] == [ev(i) for i in range(0, 20, 2)] + [ev(99)]


@pytest.mark.parametrize("durability", ["process", "fsync"])
def test_concurrent_async_appends_share_commits(open_log: OpenLog, durability: str) -> None:
    # "process": a save commits on the loop's thread, one loop step later when other tasks
    # are runnable, so tasks saving at once share a commit; "fsync": the writer groups them.
    log = open_log(durability=durability)

    async def saver(i: int) -> Appended | None:
        await asyncio.sleep(0)  # every task is runnable before any of them appends
        return await log.append_async(f"c{i}", ev(i))

    async def main() -> list[Appended | None]:
        return await asyncio.gather(*(saver(i) for i in range(64)))

    before = log.stats().commits
    results = asyncio.run(main())
    assert sorted(r.global_seq for r in results if r) == list(range(1, 65))
    assert log.stats().commits - before <= 8, "64 concurrent saves should share a few commits"
    assert all(log.last_seq(f"c{i}") == 1 for i in range(64))


def test_a_lone_async_append_in_process_mode_commits_at_once(open_log: OpenLog) -> None:
    log = open_log(durability="process")

    async def main() -> None:
        for i in range(5):
            done = await log.append_async("solo", ev(i))
            assert done is not None
            assert done.seq == i + 1

    asyncio.run(main())
    assert log.stats().commits == 5


# -- concurrency, reads, stats -----------------------------------------------------------------


def test_durable_appends_from_16_threads(open_log: OpenLog) -> None:
    log = open_log()
    threads_n, per_thread, streams = 16, 25, ("t0", "t1", "t2", "t3")
    start = threading.Barrier(threads_n)
    results: dict[int, list[tuple[Appended, Event]]] = {}
    errors: list[BaseException] = []

    def work(t: int) -> None:
        rng = random.Random(t)
        mine: list[tuple[Appended, Event]] = []
        try:
            start.wait()
            for i in range(per_thread):
                frame = ev(i, {"thread": t})
                done = log.append(rng.choice(streams), frame)
                assert done is not None
                mine.append((done, frame))
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)
        results[t] = mine

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    every = [pair for mine in results.values() for pair in mine]
    assert sorted(d.global_seq for d, _ in every) == list(range(1, threads_n * per_thread + 1))
    for stream in streams:
        seqs = sorted(d.seq for d, _ in every if d.stream == stream)
        assert seqs == list(range(1, len(seqs) + 1)), stream
        assert log.last_seq(stream) == len(seqs)
    for mine in results.values():  # one thread's appends to a stream land in its call order
        for stream in streams:
            own = [d.seq for d, _ in mine if d.stream == stream]
            assert own == sorted(own)
    stored = {(f.stream, f.seq): (f.checksum, f.frame) for f in log.scan()}
    assert stored == {(d.stream, d.seq): (d.checksum, frame) for d, frame in every}
    assert log.verify().ok


def test_read_stream_from_the_middle(open_log: OpenLog) -> None:
    log = open_log()
    n = 2500  # more than two read chunks (READ_CHUNK_FRAMES = 1024)
    log.append_many([("big", ev(i)) for i in range(1, n + 1)])
    log.append("small", ev(0))
    assert [f.seq for f in log.read_stream("big", 1000)] == list(range(1000, n + 1))
    assert [f.seq for f in log.read_stream("big", 1020, 2100)] == list(range(1020, 2101))
    assert [f.frame for f in log.read_stream("big", 7, 9)] == [ev(7), ev(8), ev(9)]
    assert [f.seq for f in log.read_stream("big", 0, 2)] == [1, 2]
    assert list(log.read_stream("big", n + 1)) == []
    assert list(log.read_stream("unknown")) == []
    frame = log.read_frame("big", 1234)
    assert frame is not None
    assert (frame.stream, frame.seq, frame.frame) == ("big", 1234, ev(1234))
    assert log.read_frame("big", n + 1) is None
    assert (log.last_seq("big"), log.last_seq("small"), log.last_seq("unknown")) == (n, 1, 0)


def test_scan_in_commit_order(open_log: OpenLog) -> None:
    log = open_log()
    rng = random.Random(11)
    order: list[tuple[str, int]] = []
    for i in range(1300):  # crosses a read chunk
        stream = rng.choice(("x", "y", "z"))
        if i % 100 == 0:
            log.append_many([(stream, ev(i)), ("z", ev(i))])
            order += [(stream, i), ("z", i)]
        else:
            log.append(stream, ev(i), durable=i % 7 == 0)
            order.append((stream, i))
    log.flush()
    # Buffered frames of a stream keep their place in the stream, not across streams; compare
    # per stream, plus the global seqs being 1..N in scan order.
    scanned = list(log.scan())
    assert [f.global_seq for f in scanned] == list(range(1, len(order) + 1))
    for stream in ("x", "y", "z"):
        mine = [f for f in scanned if f.stream == stream]
        assert [f.frame.name for f in mine] == [f"e{i}" for s, i in order if s == stream]
        assert [f.seq for f in mine] == list(range(1, len(mine) + 1))
    assert [f.global_seq for f in log.scan(since_global_seq=1000)] == list(
        range(1001, len(order) + 1)
    )
    assert list(log.scan(since_global_seq=len(order))) == []


def test_scan_in_call_order_for_durable_appends(open_log: OpenLog) -> None:
    log = open_log()
    order = [("p" if i % 3 else "q", i) for i in range(40)]
    for stream, i in order:
        log.append(stream, ev(i))
    assert [(f.stream, f.frame) for f in log.scan()] == [(s, ev(i)) for s, i in order]


def test_stats(open_log: OpenLog, log_path: Path) -> None:
    log = open_log()
    assert log.stats().frames == 0
    done = [log.append(f"s{i % 3}", ev(i)) for i in range(10)]
    done += log.append_many([("s0", ev(10)), ("s9", ev(11))]) or []
    stats = log.stats()
    assert (stats.frames, stats.streams, stats.frames_appended) == (12, 4, 12)
    assert stats.log_bytes == sum(d.stored_bytes for d in done if d)
    assert 1 <= stats.commits <= 11  # the append_many pair shares one commit
    assert stats.durability == "fsync"
    assert stats.disk_bytes > 0
    log.close()
    reopened = open_log(durability="process").stats()
    # Per-object counters start again; the stored counts do not.
    assert (reopened.frames, reopened.streams) == (12, 4)
    assert (reopened.frames_appended, reopened.commits, reopened.log_bytes) == (0, 0, 0)
    assert reopened.durability == "process"


def test_reopen_sees_everything(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(30):
        log.append(f"r{i % 4}", ev(i, {"i": i, "blob": "z" * (i * 40)}), durable=i % 2 == 0)
    log.close()
    before = snapshot(log := open_log())
    frames = [(f.stream, f.seq, f.frame) for f in log.scan()]
    assert len(frames) == 30
    assert sorted(before[0]) == ["r0", "r1", "r2", "r3"]
    log.close()
    again = open_log()
    assert snapshot(again) == before
    assert [(f.stream, f.seq, f.frame) for f in again.scan()] == frames
    # Appends continue each stream's seq and chain where the previous process left off.
    done = again.append("r1", ev(30))
    assert done is not None
    assert (done.seq, done.global_seq) == (9, 31)
    assert again.verify().ok


def test_a_log_being_created_by_another_process_is_not_refused(tmp_path: Path) -> None:
    """Another process created some of our tables but not yet ``meta``: that is our log in the
    making, not a foreign environment (two writers creating one new log at once)."""
    path = tmp_path / "log"
    path.mkdir()
    env = lmdb.open(str(path), max_dbs=64)
    for name in (b"log", b"streams", b"stream_ids"):
        env.open_db(name)
    env.close()
    with EventLog.open(path) as log:
        log.append("s", Event(name="first"))
        assert log.verify().ok
