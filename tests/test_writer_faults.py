"""The writer survives its callers: cancellation, a dead writer, a full disk (issue 12, parts 2
and 4).

- A caller cancelling an awaited save, flush or load never stops the writer: the next call
  works, a save that returned is in the log, a cancelled one is there whole or not at all.
- Should the writer ever die, every waiting and later call fails at once with ``WriterFailed``
  instead of hanging.
- A flush that fails for lack of space keeps its buffered frames, in order, and the next flush
  commits them; ``close()`` that cannot write them says so with ``BufferedLost``.
"""

from __future__ import annotations

import asyncio
import errno
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from backends.memory import MemoryBackend
from backends.testing import FaultyBackend
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.errors import BufferedLost, FlushFailed, LogClosed, StorageError, WriterFailed
from eventlog.frames import Event, InstanceChange, Snapshot
from eventlog.log import EventLog
from eventlog.records import (
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
)

WAIT_S = 30.0  # a call that takes longer than this has hung (the bug being tested)
ENOSPC = errno.ENOSPC


def _record(inv: str, step: int = 0, fan_out: int = 0) -> CheckpointRecord:
    fos = ()
    if fan_out:
        fos = (
            FanOutProgress(
                "work",
                (),
                fan_out,
                tuple(FanOutInstanceProgress("not_started") for _ in range(fan_out)),
            ),
        )
    return CheckpointRecord(
        invocation_id=inv,
        correlation_id="c",
        state={"step": step},
        completed_positions=(),
        parent_states=(),
        last_saved_at=float(step),
        fan_out_progress=fos,
    )


def _done(i: int) -> FanOutInstanceProgress:
    return FanOutInstanceProgress("completed", result=i)


# -- part 2: cancellation ----------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["fsync", "process"])
def test_cancelled_flush_leaves_the_writer_serving(tmp_path: Path, durability: str) -> None:
    # The reproduction of issue 12 part 2: cancelling an awaited flush() used to kill the
    # writer (InvalidStateError setting the result of the cancelled future), and every later
    # save hung.
    async def main() -> None:
        cp = Checkpointer.open(
            tmp_path / "log",
            durability=durability,
            batching=FanOutInternalSaveBatching(flush_every=100_000),
        )
        try:
            await cp.save("inv", _record("inv", 0, fan_out=2000))
            for i in range(2000):
                await cp.save_instance("inv", "work", i, _done(i))
            t = asyncio.create_task(cp.flush())
            await asyncio.sleep(0)
            t.cancel()
            await asyncio.wait_for(cp.save("other", _record("other", 1)), WAIT_S)
            await asyncio.wait_for(cp.flush(), WAIT_S)
            rec = await cp.load("inv")
            assert rec is not None
            assert [i.result for i in rec.fan_out_progress[0].instances] == list(range(2000))
            assert await cp.load("other") == _record("other", 1)
        finally:
            await cp.aclose()

    asyncio.run(main())


def test_cancelled_submit_future_leaves_the_writer_serving() -> None:
    log = EventLog(MemoryBackend())
    try:
        with log._cond:  # hold the writer back so the future is still pending when cancelled
            fut = log.submit("s", Event(name="x"))
            assert fut.cancel()
        log.flush()
        assert log.append("s", Event(name="y")) is not None
        assert [sf.frame.name for sf in log.read_stream("s")] == ["x", "y"]
    finally:
        log.close()


# -- part 2: a writer that dies fails everyone at once -----------------------------------------


def _ev(i: int) -> Event:
    return Event(name="e", data=i)


def test_dead_writer_fails_waiting_and_later_calls_with_writer_failed() -> None:
    log = EventLog(MemoryBackend())
    log.append("s", _ev(0))
    real = log._commit
    entered, go = threading.Event(), threading.Event()
    writer_threads: list[threading.Thread] = []

    def broken(batch: Any) -> None:
        # A bug inside the writer loop, hit in the writer thread only.
        if threading.current_thread() is log._writer:
            writer_threads.append(threading.current_thread())
            entered.set()
            assert go.wait(WAIT_S)
            raise RuntimeError("injected writer bug")
        real(batch)

    log._commit = broken  # type: ignore[method-assign]
    first = log.submit("s", _ev(1))  # the writer takes it and blocks in the injected bug
    assert entered.wait(WAIT_S)
    queued = log.submit("s", _ev(2))  # waits in the queue behind the dying batch
    log.append("s", _ev(3), durable=False)  # buffered: dropped when the writer dies

    async def async_save() -> None:
        await log.append_async("t", _ev(4))  # "fsync": the writer thread commits it

    async def main() -> None:
        task = asyncio.create_task(async_save())
        await asyncio.sleep(0)
        go.set()
        with pytest.raises(WriterFailed):
            await asyncio.wait_for(task, WAIT_S)

    asyncio.run(main())
    for fut in (first, queued):
        with pytest.raises(WriterFailed, match="injected writer bug") as e:
            fut.result(WAIT_S)
        assert isinstance(e.value.__cause__, RuntimeError)
    writer_threads[0].join(WAIT_S)
    assert not writer_threads[0].is_alive()
    # Every later call fails at once, with the same typed error and its cause.
    for call in (
        lambda: log.append("s", _ev(5)),
        lambda: log.append("s", _ev(6), durable=False),
        lambda: log.submit("s", _ev(7)),
        log.flush,
        lambda: asyncio.run(log.append_async("s", _ev(8))),
        lambda: asyncio.run(log.flush_async()),
    ):
        with pytest.raises(WriterFailed, match="1 buffered frame") as e:
            call()
        assert isinstance(e.value.__cause__, RuntimeError)
    # What was acknowledged before the failure is there; nothing half-written.
    with log.backend.read() as txn:
        assert txn.count("log") == 1
    with pytest.raises(WriterFailed):
        log.close()
    assert log.closed


def test_writer_bug_in_a_leading_caller_fails_waiters_instead_of_hanging() -> None:
    # A synchronous append commits in its own thread (it leads): a bug there must not leave
    # the items of its batch waiting forever either.
    log = EventLog(MemoryBackend())

    def broken(batch: Any) -> None:
        raise RuntimeError("injected bug in a leading caller")

    log._commit = broken  # type: ignore[method-assign]
    with pytest.raises(WriterFailed, match="injected bug") as e:
        log.append("s", _ev(1))
    assert isinstance(e.value.__cause__, RuntimeError)
    with pytest.raises(WriterFailed):
        log.append("s", _ev(2))
    with pytest.raises(WriterFailed):
        log.close()


def test_cancelled_waiter_of_a_failed_commit_does_not_kill_the_writer() -> None:
    # A storage failure resolves every waiter with the error, cancelled ones included.
    backend = FaultyBackend(MemoryBackend())
    log = EventLog(backend)
    try:
        with log._cond:
            fut = log.submit("s", _ev(1))
            assert fut.cancel()
            backend.fail_at = {backend.commits + 1}
        log.flush()
        log.append("s", _ev(2))
        assert [sf.frame.data for sf in log.read_stream("s")] == [2]
    finally:
        log.close()


# -- part 4: a flush that fails keeps the buffered frames --------------------------------------

N_INSTANCES = 40


def _checkpoint_log(
    tmp_path: Path, backend_kind: str, **options: Any
) -> tuple[CheckpointLog, FaultyBackend]:
    if backend_kind == "memory":
        inner: Any = MemoryBackend()
    else:
        from backends.lmdb import LmdbBackend  # noqa: PLC0415
        from eventlog.log import CORE_TABLES  # noqa: PLC0415
        from eventlog.materialized import TABLES  # noqa: PLC0415

        inner = LmdbBackend(tmp_path / "log", tables=(*CORE_TABLES, *TABLES))
    backend = FaultyBackend(inner)
    log = CheckpointLog.on_backend(
        backend, batching=FanOutInternalSaveBatching(flush_every=100_000), **options
    )
    return log, backend


def _buffer_instances(log: CheckpointLog, inv: str = "inv") -> None:
    log.save(inv, _record(inv, 0, fan_out=N_INSTANCES))
    for i in range(N_INSTANCES):
        log.save_instance(inv, "work", i, _done(i))
    assert log.log.buffered_count(inv) == N_INSTANCES


def _results(log: CheckpointLog, inv: str = "inv") -> list[Any]:
    rec = log.load(inv)
    assert rec is not None
    return [i.result for i in rec.fan_out_progress[0].instances]


@pytest.mark.parametrize("backend_kind", ["memory", "lmdb"])
def test_failed_flush_keeps_buffered_saves_and_the_next_flush_commits_them(
    tmp_path: Path, backend_kind: str
) -> None:
    # Issue 12 part 4: a flush that failed on a full disk dropped the 40 buffered saves, and
    # a later flush "succeeded" with none of them in the log.
    log, backend = _checkpoint_log(tmp_path, backend_kind)
    try:
        _buffer_instances(log)
        backend.failing = True
        with pytest.raises(FlushFailed, match="disk is full") as e:
            log.flush()
        assert isinstance(e.value, StorageError)
        assert isinstance(e.value, OSError)
        assert e.value.errno == ENOSPC
        assert e.value.kept == N_INSTANCES
        assert f"{N_INSTANCES} buffered frame(s)" in str(e.value)
        assert log.log.buffered_count("inv") == N_INSTANCES  # kept, in memory
        assert _results(log) == [None] * N_INSTANCES  # and not half-written
        with pytest.raises(FlushFailed):
            log.flush()  # still full: still kept
        backend.failing = False
        log.flush()
        assert _results(log) == list(range(N_INSTANCES))
        assert log.log.buffered_count() == 0
        log.flush()  # nothing stale is reported later
        assert log.verify().ok
        # the buffered instance saves commit as one batch frame carrying every change
        assert [h.kind for h in log.history("inv")] == ["save", "fan_out_internal"]
        batch = list(log.log.read_stream("inv"))[-1].frame
        assert [c.index for c in batch.instances] == list(range(N_INSTANCES))
    finally:
        log.close()


def test_failed_nth_commit_of_a_large_flush_keeps_order(tmp_path: Path) -> None:
    # The flush spans several commits (batch_frames_max=8): the 3rd fails. What the first two
    # committed stays; the rest is kept, in order, behind it, and a later flush commits it.
    backend = FaultyBackend(MemoryBackend())
    log = EventLog(backend, batch_frames_max=8)
    try:
        for i in range(N_INSTANCES):
            log.append("a" if i % 3 else "b", _ev(i), durable=False)
        backend.fail_at = {backend.commits + 3}
        with pytest.raises(FlushFailed) as e:
            log.flush()
        assert e.value.kept == N_INSTANCES - 16 == log.buffered_count()
        log.append("a", _ev(100), durable=False)  # buffered after the failure: stays behind
        log.flush()
        expect_a = [i for i in range(N_INSTANCES) if i % 3] + [100]
        assert [sf.frame.data for sf in log.read_stream("a")] == expect_a
        assert [sf.frame.data for sf in log.read_stream("b")] == list(range(0, N_INSTANCES, 3))
        assert log.verify().ok
    finally:
        log.close()


def test_durable_save_on_a_full_disk_fails_typed_and_keeps_the_buffered_saves(
    tmp_path: Path,
) -> None:
    log, backend = _checkpoint_log(tmp_path, "memory")
    try:
        _buffer_instances(log)
        backend.failing = True
        # A durable save first commits the invocation's buffered saves: all fail together.
        with pytest.raises(StorageError, match="disk is full") as e:
            log.save("inv", _record("inv", 1, fan_out=N_INSTANCES))
        assert e.value.errno == ENOSPC
        assert log.log.buffered_count("inv") == N_INSTANCES
        backend.failing = False
        log.save("other", _record("other", 1))  # the log works again at once
        log.flush()
        assert _results(log) == list(range(N_INSTANCES))
        assert log.load("other") == _record("other", 1)
        assert log.verify().ok
    finally:
        log.close()


def test_async_flush_on_a_full_disk_keeps_the_buffered_saves(tmp_path: Path) -> None:
    log, backend = _checkpoint_log(tmp_path, "memory")
    cp = Checkpointer(log)

    async def main() -> None:
        await cp.save("inv", _record("inv", 0, fan_out=N_INSTANCES))
        for i in range(N_INSTANCES):
            await cp.save_instance("inv", "work", i, _done(i))
        backend.failing = True
        with pytest.raises(FlushFailed, match="disk is full"):
            await cp.flush()
        backend.failing = False
        await cp.flush()

    try:
        asyncio.run(main())
        assert _results(log) == list(range(N_INSTANCES))
    finally:
        log.close()


@pytest.mark.parametrize("backend_kind", ["memory", "lmdb"])
def test_close_that_cannot_flush_says_what_was_lost(tmp_path: Path, backend_kind: str) -> None:
    log, backend = _checkpoint_log(tmp_path, backend_kind)
    _buffer_instances(log)
    log.log.append("ev", _ev(1), durable=False)
    backend.failing = True
    with pytest.raises(
        BufferedLost, match=r"41 buffered frame\(s\).*'ev' \(1\), 'inv' \(40\)"
    ) as e:
        log.close()
    assert e.value.lost == {"inv": N_INSTANCES, "ev": 1}
    assert isinstance(e.value.__cause__, FlushFailed)
    assert log.log.closed
    with pytest.raises(LogClosed):
        log.save("inv", _record("inv", 2))


# -- part 2: cancellation at random moments ----------------------------------------------------

CANCEL_SEEDS = 8
CANCEL_OPS = 40
FAN = 300  # instances: above the 256 rows an async load reads inline, so load("fan") hops
INVS = ("s0", "s1", "s2")


class _Oracle:
    """What was issued, in call order, and whether each call returned or was cancelled."""

    def __init__(self) -> None:
        self.saves: dict[str, list[tuple[CheckpointRecord, bool]]] = {inv: [] for inv in INVS}
        self.instances: dict[int, list[tuple[int, bool]]] = {}

    def check(self, log: CheckpointLog) -> None:
        for inv, issued in self.saves.items():
            # an invocation whose every save was cancelled has no frames: history() raises
            committed = [h.record for h in log.history(inv)] if log.log.last_seq(inv) else []
            _check_subsequence(committed, issued, inv)
        changed: dict[int, list[int]] = {}
        frames = [sf.frame for sf in log.log.read_stream("fan")]
        records = [h.record for h in log.history("fan")]
        for frame, before, after in zip(frames[1:], records[:-1], records[1:], strict=True):
            assert before is not None
            assert after is not None
            # each frame is one whole instance save, or a batch of them in call order
            batch = frame.batch if isinstance(frame, Snapshot) else frame.instances
            if not batch:  # a snapshot of one instance save: the record shows its change
                batch = tuple(
                    InstanceChange(1, i, a)
                    for i, (b, a) in enumerate(
                        zip(
                            before.fan_out_progress[0].instances,
                            after.fan_out_progress[0].instances,
                            strict=True,
                        )
                    )
                    if a != b
                )
                assert len(batch) == 1, batch
            for ch in batch:
                changed.setdefault(ch.index, []).append(ch.progress.result)
        for index in set(changed) | set(self.instances):
            _check_subsequence(changed.get(index, []), self.instances.get(index, []), index)
        assert log.verify().ok


def _check_subsequence(committed: list[Any], issued: list[tuple[Any, bool]], where: Any) -> None:
    """``committed`` is ``issued`` in order, with every call that returned, and cancelled
    ones whole or absent."""
    values = [v for v, _ in issued]
    assert len(set(map(repr, values))) == len(values)
    kept = [v for v in values if v in committed]
    assert committed == kept, (where, committed, values)
    missing = [v for v, returned in issued if returned and v not in committed]
    assert not missing, (where, missing)


async def _cancelling_run(cp: Checkpointer, rng: random.Random, oracle: _Oracle) -> None:
    values = iter(range(1, 1_000_000))
    for _ in range(CANCEL_OPS):
        op = rng.choice(("save", "save", "save_instance", "save_instance", "flush", "load"))
        note: Any = None
        if op == "save":
            inv = rng.choice(INVS)
            rec = _record(inv, next(values))
            coro: Any = cp.save(inv, rec)
            note = oracle.saves[inv]
        elif op == "save_instance":
            index, value = rng.randrange(FAN), next(values)
            coro = cp.save_instance("fan", "work", index, _done(value))
            note = oracle.instances.setdefault(index, [])
        elif op == "flush":
            coro = cp.flush()
        else:
            coro = cp.load(rng.choice(("fan", *INVS)))
        task = asyncio.create_task(coro)
        if rng.random() < 0.25:
            await asyncio.sleep(rng.random() / 500)  # a moment inside the commit, maybe
        else:
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=WAIT_S)
        assert done, f"{op} hung after being cancelled"
        returned = not task.cancelled()
        if returned:
            task.result()  # no error other than the cancellation
        if op == "save":
            note.append((rec, returned))
        elif op == "save_instance":
            note.append((value, returned))
    # The next save works.
    await asyncio.wait_for(cp.save("s0", _record("s0", next(values))), WAIT_S)
    oracle.saves["s0"].append((_record("s0", next(values) - 1), True))


@pytest.mark.parametrize("durability", ["fsync", "process"])
@pytest.mark.parametrize("seed", range(CANCEL_SEEDS))
def test_cancelling_calls_at_random_moments(tmp_path: Path, durability: str, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "log"
    oracle = _Oracle()
    cancel_close = seed % 2 == 1

    def open_cp() -> Checkpointer:
        return Checkpointer.open(
            path, durability=durability, batching=FanOutInternalSaveBatching(flush_every=5)
        )

    async def main() -> Checkpointer:
        cp = open_cp()
        await cp.save("fan", _record("fan", 0, fan_out=FAN))
        await _cancelling_run(cp, rng, oracle)
        if cancel_close:
            # close() in a worker thread, cancelled at a random moment: it still commits
            # what was buffered (asyncio.run waits for the thread before returning).
            task = asyncio.create_task(cp.aclose())
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.wait({task}, timeout=WAIT_S)
        else:
            await asyncio.wait_for(cp.flush(), WAIT_S)
            oracle.check(cp.sync)
            await cp.aclose()
        return cp

    cp = asyncio.run(main())
    if not cp.sync.log.closed:
        cp.sync.close()  # aclose() was cancelled before it started: the log is still open
    with CheckpointLog.open(path, durability=durability) as log:
        oracle.check(log)  # what close() committed, reopened
        log.save("s1", _record("s1", 10**7))
        assert log.load("s1") == _record("s1", 10**7)


def test_lmdb_disk_full_is_a_storage_error_carrying_enospc() -> None:
    # What a real full disk raises in LMDB (DiskError) reaches callers as a StorageError with
    # errno ENOSPC, so a failed flush says "the disk is full".
    import lmdb  # noqa: PLC0415

    from backends.lmdb_errors import translate  # noqa: PLC0415

    err = translate(lmdb.DiskError("mdb_txn_commit: No space left on device"), "writing 'p'")
    assert isinstance(err, StorageError)
    assert err.errno == ENOSPC
    assert "the disk is full" in str(err)


def test_save_instance_whose_batch_flush_fails_is_kept_with_the_batch(tmp_path: Path) -> None:
    # Under flush_every=N the N-th buffered save flushes: on a full disk that save raises
    # FlushFailed, but it and the ones before it stay buffered and commit with the next flush.
    backend = FaultyBackend(MemoryBackend())
    log = CheckpointLog.on_backend(backend, batching=FanOutInternalSaveBatching(flush_every=10))
    try:
        log.save("inv", _record("inv", 0, fan_out=N_INSTANCES))
        backend.failing = True
        for i in range(9):
            log.save_instance("inv", "work", i, _done(i))
        with pytest.raises(FlushFailed) as e:
            log.save_instance("inv", "work", 9, _done(9))
        assert e.value.kept == 10 == log.log.buffered_count("inv")
        backend.failing = False
        for i in range(10, 20):
            log.save_instance("inv", "work", i, _done(i))  # the 20th flushes all 20
        assert _results(log) == [*range(20), *[None] * (N_INSTANCES - 20)]
        assert log.verify().ok
    finally:
        log.close()
