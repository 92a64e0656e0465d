"""EventLog: streams of frames on a backend, one writer thread, group commit.

Tables (all keys big-endian so byte order is numeric order):
- ``log``: global seq (u64) -> envelope. Appended only; commit order.
- ``streams``: stream id (u64) + stream seq (u64) -> global seq (u64).
- ``stream_ids``: stream key (UTF-8) -> stream id (u64);  ``stream_names``: the inverse.
- ``meta``: ``format`` -> JSON settings (format version, checksum, compression), checked on open.

Invariants:
- Call order is commit order: ``append`` enqueues synchronously, before returning or awaiting,
  and one writer thread commits the queue in order. Everything queued while a commit is in flight
  goes into the next commit (group commit), bounded by ``batch_frames_max``.
- Within a stream, seqs are 1, 2, 3, ... without gaps and every envelope's ``prev`` is the
  checksum of the frame before it; the writer reads the stream's tail inside the write
  transaction, so several processes may append to one log.
- Buffered appends of a stream are always the tail of that stream's queue: a durable append to a
  stream first moves its buffered frames into the commit queue, so the order stays the call order.
- A frame that cannot be encoded, is too large, or whose ``expect_seq`` does not match fails
  alone: nothing of it is written and the other frames of its commit are unaffected.
- A durable append returns only after its commit is on disk (per the backend's durability).
- A commit the storage refuses (``OSError``) drops no buffered frame: they return to their
  buffers in order (see ``_keep_buffered``) and the flushes covering them raise ``FlushFailed``.
- No caller's cancellation stops the writer (futures are resolved only if not done); a
  committer that dies of a bug fails every waiting and later call with ``WriterFailed``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

import msgspec

from backends.base import Backend, Durability, ReadTxn, WriteTxn, current_pid
from eventlog.codec import (
    CHECKSUM_BYTES,
    FORMAT_VERSION,
    HEADER_BYTES,
    ZERO_CHECKSUM,
    Compressor,
    Sealer,
    Serializer,
    open_envelope,
    read_header,
)
from eventlog.errors import (
    BufferedLost,
    CheckpointError,
    CorruptFrame,
    FlushFailed,
    FrameTooLarge,
    InvalidStreamKey,
    LogClosed,
    NotALog,
    ReadOnlyLog,
    SequenceConflict,
    StorageError,
    StorageFull,
    UnsupportedFormat,
    WriterFailed,
)
from eventlog.frames import Event, Frame
from eventlog.layout import CORE_TABLES, LOG, META, STREAM_IDS, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.reports import Problem as Problem  # noqa: PLC0414 - re-exported
from eventlog.reports import Stats as Stats  # noqa: PLC0414
from eventlog.reports import VerifyReport as VerifyReport  # noqa: PLC0414
from eventlog.validate import check_event
from eventlog.verify import verify_log

FRAME_BYTES_MAX: Final = 64 << 20  # 64 MiB per frame, stored size including the header
BATCH_FRAMES_MAX: Final = 4096  # frames in one group commit
READ_CHUNK_FRAMES: Final = 1024  # frames read per read transaction when iterating

F = TypeVar("F")


class Appended(msgspec.Struct, frozen=True):
    """Where an acknowledged frame landed."""

    stream: str
    seq: int
    global_seq: int
    checksum: bytes
    stored_bytes: int


class StoredFrame(msgspec.Struct, Generic[F], frozen=True):
    """A frame read back from the log, checksum verified."""

    stream: str
    seq: int
    global_seq: int
    checksum: bytes
    frame: F
    stored_bytes: int


class Deferred(Protocol):
    """A frame built inside the write transaction, in commit order (see eventlog.checkpoints).

    ``build`` returns the frame to append (or ``None`` to append nothing) and ``appended`` runs
    right after it is appended, in the same transaction. Both may run more than once (the
    transaction is retried after the map grows, or re-run alone after another frame failed).
    """

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> Any: ...

    def appended(self, txn: WriteTxn, done: Appended) -> None: ...


class TxnHooks(Protocol):
    """Told when the writer begins, commits or aborts a transaction holding deferred frames."""

    def begin(self) -> None: ...

    def committed(self) -> None: ...

    def aborted(self) -> None: ...


Effect = Callable[[WriteTxn, "Appended", Any], None]
"""Runs inside the write transaction right after its frame is appended (materialized views).

It may run more than once (a transaction retried after the map grew), so it must only touch
the transaction it is given.
"""


class _Waiter:
    """A one-shot result slot a blocked thread waits on: a pre-acquired lock the committer
    releases. Cheaper than ``concurrent.futures.Future`` (no condition, no callbacks), which
    matters when hundreds of threads each wait for their commit."""

    __slots__ = ("_lock", "_set", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False
        self.value: Any = None

    def set(self, value: Any) -> None:
        """Set the value once; later calls are ignored (only the committer sets it)."""
        if self._set:
            return
        self._set = True
        self.value = value
        self._lock.release()

    def result(self) -> Any:
        self._lock.acquire()
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


@dataclass(eq=False, slots=True)
class _Item:
    stream: str
    frame: Any
    expect_seq: int | None = None
    effect: Effect | None = None
    future: Future[Appended] | _Waiter | None = None
    aio: tuple[asyncio.AbstractEventLoop, asyncio.Future[Appended]] | None = None
    payload: bytes = b""
    flags: int = 0
    result: Appended | BaseException | int | None = field(default=None, repr=False)
    buffered: bool = False  # appended with durable=False: nobody waits for it
    saves: int = 1  # buffered calls this item carries (more than one once joined: a batch)


def open_backend(
    location: str | os.PathLike[str],
    *,
    tables: Iterable[str],
    durability: Durability | str = "fsync",
    readonly: bool = False,
    map_size_max: int | None = None,
    map_size_initial: int | None = None,
) -> Backend:
    """The backend of a log at ``location``: a ``postgresql://host/db?schema=NAME`` URL
    (``backends.postgres``; the map sizes do not apply) or an LMDB directory."""
    if isinstance(location, str) and location.split("://", 1)[0] in ("postgresql", "postgres"):
        from backends.postgres import PostgresBackend  # noqa: PLC0415 - psycopg optional

        return PostgresBackend(
            location, tables=tables, durability=durability, readonly=readonly, marker_table=META
        )
    from backends.lmdb import (  # noqa: PLC0415 - keep lmdb optional
        MAP_SIZE_INITIAL,
        MAP_SIZE_MAX,
        LmdbBackend,
    )

    return LmdbBackend(
        location,
        tables=tables,
        durability=durability,
        readonly=readonly,
        map_size_initial=map_size_initial or MAP_SIZE_INITIAL,
        map_size_max=map_size_max or MAP_SIZE_MAX,
        marker_table=META,
    )


def _u64(n: int) -> bytes:
    return U64.pack(n)


def stream_key_bytes(stream: str, max_key_bytes: int) -> bytes:
    """Validate a stream key and return its UTF-8 bytes."""
    if not isinstance(stream, str):
        raise InvalidStreamKey(f"stream key must be a str, got {type(stream).__name__}")
    if not stream:
        raise InvalidStreamKey("stream key must be a non-empty string, got ''")
    raw = stream.encode("utf-8", "surrogatepass")
    if len(raw) > max_key_bytes:
        raise InvalidStreamKey(
            f"stream key is {len(raw)} bytes of UTF-8, above the backend limit of "
            f"{max_key_bytes}; use a shorter id (a UUID or a hash of the long one)"
        )
    return raw


class EventLog:
    """An append-only log of frames in named streams. Thread-safe; usable from asyncio."""

    def __init__(
        self,
        backend: Backend,
        *,
        frame_type: Any = Frame,
        frame_bytes_max: int = FRAME_BYTES_MAX,
        batch_frames_max: int = BATCH_FRAMES_MAX,
        compress_threshold_bytes: int | None = None,
        flush_interval: float | None = None,
        chain_key: bytes = b"",
        txn_hooks: TxnHooks | None = None,
    ) -> None:
        self.backend = backend
        self.txn_hooks = txn_hooks
        self.frame_bytes_max = frame_bytes_max
        self.batch_frames_max = batch_frames_max
        self.flush_interval = flush_interval
        self._chain_key = chain_key
        self._sealer = Sealer(chain_key)
        self._serializer: Serializer[Any] = Serializer(frame_type)
        self._settings = self._check_meta(compress_threshold_bytes)
        self._compressor = Compressor(threshold_bytes=self._settings["compress_threshold_bytes"])
        self._max_key = backend.max_key_bytes
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._mutex = threading.RLock()  # the condition's lock (entered directly on hot paths)
        self._cond = threading.Condition(self._mutex)
        self._queue: collections.deque[_Item] = collections.deque()
        self._buffers: dict[str, list[_Item]] = {}
        self._buffered = 0
        self._deferred: list[BaseException] = []
        self._closed = False
        self._stopping = False
        # Why the writer stopped, should it ever (see _die), and the buffered frames it dropped.
        self._failed: BaseException | None = None
        self._failed_lost = 0
        self._committing = False  # a thread (writer or leading caller) is committing
        # The committer's view of the log's end: (seq, checksum) per stream id and the last
        # global seq. Valid while no other process appends; checked at each commit.
        self._tails: dict[int, tuple[int, bytes]] = {}
        self._gseq: int | None = None
        self._commits = 0
        self._log_bytes = 0
        self._frames_appended = 0
        self._last_flush = time.monotonic()
        self._pid = current_pid()
        self._writer: threading.Thread | None = None
        # Event loops where a save committed in the current loop step, and those with a commit
        # scheduled for its end (_lead_on; each touched only from its loop's thread).
        self._stepping: set[asyncio.AbstractEventLoop] = set()
        self._lead_scheduled: set[asyncio.AbstractEventLoop] = set()

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = "fsync",
        readonly: bool = False,
        extra_tables: Iterable[str] = (),
        map_size_max: int | None = None,
        map_size_initial: int | None = None,
        **options: Any,
    ) -> EventLog:
        """Open (or create) the log stored in directory ``path`` on the LMDB backend, or, when
        ``path`` is a ``postgresql://host/db?schema=NAME`` URL, in that schema of a PostgreSQL
        database (``backends.postgres``; the map sizes do not apply there)."""
        from eventlog.open_options import check_open_options, keyword_names  # noqa: PLC0415

        check_open_options(
            f"opening {os.fspath(path)!r}",
            {
                "readonly": readonly,
                "map_size_max": map_size_max,
                "map_size_initial": map_size_initial,
                **options,
            },
            (*keyword_names(cls.__init__), "readonly", "map_size_max", "map_size_initial"),
        )

        backend = open_backend(
            path,
            tables=(*CORE_TABLES, *extra_tables),
            durability=durability,
            readonly=readonly,
            map_size_max=map_size_max,
            map_size_initial=map_size_initial,
        )
        try:
            return cls(backend, **options)
        except BaseException:
            backend.close()
            raise

    def _check_meta(self, compress_threshold_bytes: int | None) -> dict[str, Any]:
        with self.backend.read() as txn:
            raw = txn.get(META, b"format")
            has_frames = txn.last_key(LOG) is not None
        if raw is None:
            if has_frames:
                raise NotALog(
                    f"{self.backend.location!r} holds frames but no format record; it was not "
                    "written by ckptlog (or its meta table was removed)"
                )
            settings: dict[str, Any] = {
                "format_version": FORMAT_VERSION,
                "checksum": "blake2b-128" + ("-keyed" if self._chain_key else ""),
                "compression": "zstd",
                "compress_threshold_bytes": compress_threshold_bytes or 512,
                "created_at": time.time(),
            }
            if not self.backend.readonly:
                encoded = json.dumps(settings, sort_keys=True).encode()

                def init(txn: WriteTxn) -> None:
                    if txn.get(META, b"format") is None:
                        txn.put(META, b"format", encoded)

                self.backend.run_write(init)
                with self.backend.read() as txn:
                    raw = txn.get(META, b"format")
            if raw is None:
                return settings
        try:
            stored: dict[str, Any] = json.loads(raw)
            version = int(stored["format_version"])
        except (ValueError, KeyError, TypeError) as e:
            raise NotALog(f"{self.backend.location!r}: unreadable format record {raw!r}") from e
        if version > FORMAT_VERSION:
            raise UnsupportedFormat(
                f"{self.backend.location!r} was written in log format {version}, newer than "
                f"the {FORMAT_VERSION} this ckptlog reads; upgrade ckptlog to open it"
            )
        if stored.get("checksum", "").endswith("-keyed") != bool(self._chain_key):
            raise CheckpointError(
                f"{self.backend.location!r} uses checksum {stored.get('checksum')!r}; open it "
                "with the same chain_key it was written with"
            )
        return stored

    # -- appending -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._failed is not None:
            raise self._writer_failed()
        if self._closed:
            raise LogClosed(
                f"append after close: the log at {self.backend.location!r} is closed; "
                "open it again to append"
            )

    def _make_item(self, stream: str, frame: Any, expect_seq: int | None, effect: Any) -> _Item:
        if stream not in self._ids:  # a stream that has an id was validated already
            stream_key_bytes(stream, self._max_key)
        if frame.__class__ is Event:  # an application event: its fields are the caller's
            check_event(frame)
        return _Item(stream, frame, expect_seq, effect)

    def _enqueue(self, items: Sequence[_Item], *, durable: bool, lead: bool = False) -> None:
        """Queue (or buffer) items in call order; wake the writer unless the caller leads."""
        with self._cond:
            self._check_open()
            self._ensure_writer()
            if durable:
                for it in items:
                    buffered = self._buffers.pop(it.stream, None)
                    if buffered:
                        self._buffered -= sum(b.saves for b in buffered)
                        self._queue.extend(buffered)
                    self._queue.append(it)
                if not lead or self._committing:
                    self._cond.notify()
            else:
                for it in items:
                    it.buffered = True
                    buf = self._buffers.setdefault(it.stream, [])
                    self._buffered += 1
                    if buf and _joined(buf[-1], it):
                        continue
                    buf.append(it)
                if self.flush_interval is not None:
                    self._cond.notify()

    def buffer_into(self, stream: str, value: Any, make: Callable[[Any], DeferredFrame]) -> None:
        """Buffer ``value`` for ``stream`` (like ``append(..., durable=False)``): into the
        stream's last buffered frame when that frame takes it (``DeferredFrame.add``), else
        as the new frame ``make(value)``. The per-call path of batch frames: no item, no
        frame object and one lock round trip per value."""
        with self._mutex:  # the condition's lock, without Condition.__enter__'s Python frame
            if self._failed is not None or self._closed:
                self._check_open()
            buf = self._buffers.get(stream)
            if buf:
                last = buf[-1]
                frame = last.frame
                if (
                    last.effect is None
                    and last.expect_seq is None
                    and isinstance(frame, DeferredFrame)
                    and frame.add(value)
                ):
                    last.saves += 1
                    self._buffered += 1
                    return
        self._enqueue((self._make_item(stream, make(value), None, None),), durable=False)

    def append(
        self,
        stream: str,
        frame: Any,
        *,
        durable: bool = True,
        expect_seq: int | None = None,
        effect: Effect | None = None,
    ) -> Appended | None:
        """Append ``frame`` to ``stream``.

        Durable (default): returns once the commit holding it is on disk. Buffered
        (``durable=False``): returns at once; the frame is committed by the next :meth:`flush`,
        the next durable append to the same stream, ``flush_interval`` or :meth:`close`, and is
        lost if the process dies first. ``expect_seq`` makes the append conditional on the seq
        it will get (optimistic concurrency): otherwise it fails with :class:`SequenceConflict`.
        """
        item = self._make_item(stream, frame, expect_seq, effect)
        if not durable:
            self._enqueue((item,), durable=False)
            return None
        waiter = item.future = _Waiter()
        self._enqueue((item,), durable=True, lead=True)
        self._lead()
        result: Appended = waiter.result()
        return result

    def _lead(self) -> bool:
        """Commit the queue in this (synchronous) caller's thread when no commit is running;
        ``False`` when it did not (a commit was running, or nothing was queued).

        Saves the two thread hand-offs of waking the writer and being woken by it, which
        dominate a lone durable append. Commits stay mutually exclusive (``_committing``), so
        the order and the single-committer invariants hold whichever thread commits.
        """
        with self._cond:
            if self._committing or not self._queue:
                return False
            self._committing = True
            batch = self._take_batch_locked()
        try:
            self._commit_safely(batch)
        except BaseException as e:
            self._die(e, batch)  # an internal error: fail every waiter rather than hang one
            if not isinstance(e, Exception):
                raise  # KeyboardInterrupt, SystemExit: still the caller's to see
        finally:
            with self._cond:
                self._committing = False
                if self._queue:
                    self._cond.notify()  # the writer takes what arrived meanwhile
        return True

    def append_many(
        self, items: Iterable[tuple[str, Any]], *, durable: bool = True
    ) -> list[Appended] | None:
        """Append several frames in call order; durable ones share one commit when they fit."""
        made = [self._make_item(s, f, None, None) for s, f in items]
        if durable:
            for it in made:
                it.future = Future()
        self._enqueue(made, durable=durable)
        if not durable:
            return None
        return [it.future.result() for it in made if it.future is not None]

    async def append_async(
        self,
        stream: str,
        frame: Any,
        *,
        durable: bool = True,
        expect_seq: int | None = None,
        effect: Effect | None = None,
    ) -> Appended | None:
        """Like :meth:`append`; the coroutine awaits a future the writer resolves (no thread hop).

        The frame is queued before the first ``await``, so concurrent tasks commit in call order.
        """
        item = self._make_item(stream, frame, expect_seq, effect)
        if not durable:
            self._enqueue((item,), durable=False)
            return None
        loop = asyncio.get_running_loop()
        item.aio = (loop, loop.create_future())
        # With "process" durability a commit never waits for the disk, only for the CPU it
        # needs anyway, so a lone save commits on the event loop's thread instead of paying two
        # thread hand-offs. With "fsync" the writer thread commits: the loop never blocks on
        # a flush.
        inline = self.backend.durability == "process"
        self._enqueue((item,), durable=True, lead=inline)
        if inline:
            ready = getattr(loop, "_ready", None)
            if ready is None:  # a loop without asyncio's ready queue (uvloop): public API only
                self._lead_on(loop)
            elif ready:  # other tasks are runnable and may save too: commit after them
                loop.call_soon(self._lead)
            else:
                self._lead()
        return await item.aio[1]

    def _lead_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Group commit on the loop's thread, with the loop's public API only.

        The first save of a loop step commits at once (a lone save waits for nothing) and
        marks the loop busy until the callbacks already runnable have run (``call_soon`` runs
        after them). A save made meanwhile, by another task of the same step, joins one commit
        scheduled for the end of that step, so tasks saving at once share it. asyncio's own
        loops take a cheaper path (their ready queue says whether other tasks may save, so a
        lone save schedules nothing): a hint, never needed for grouping.
        """
        if loop in self._stepping:
            if loop not in self._lead_scheduled:
                self._lead_scheduled.add(loop)
                loop.call_soon(self._scheduled_lead, loop)
            return
        self._stepping.add(loop)
        loop.call_soon(self._stepping.discard, loop)
        self._lead()

    def _scheduled_lead(self, loop: asyncio.AbstractEventLoop) -> None:
        self._lead_scheduled.discard(loop)
        self._lead()

    def submit(
        self,
        stream: str,
        frame: Any,
        *,
        expect_seq: int | None = None,
        effect: Effect | None = None,
    ) -> Future[Appended]:
        """Queue a durable append and return its future without waiting."""
        item = self._make_item(stream, frame, expect_seq, effect)
        item.future = Future()
        self._enqueue((item,), durable=True)
        return item.future

    def discard_buffered(self, stream: str) -> int:
        """Drop the buffered (not yet queued) frames of ``stream``; returns how many."""
        with self._cond:
            dropped = sum(it.saves for it in self._buffers.pop(stream, []))
            self._buffered -= dropped
            return dropped

    def buffered_count(self, stream: str | None = None) -> int:
        with self._cond:
            if stream is None:
                return self._buffered
            return sum(it.saves for it in self._buffers.get(stream, ()))

    def _barrier(self, *, lead: bool = False) -> Future[Appended]:
        """Queue every buffered frame plus a marker; the future resolves once all are committed.

        With ``lead`` the caller commits them itself (:meth:`_lead`) unless a commit is running.
        """
        marker = _Item("", None)
        marker.future = Future()
        with self._cond:
            self._check_open()
            self._ensure_writer()
            self._drain_buffers_locked()
            self._queue.append(marker)
            if not lead or self._committing:
                self._cond.notify()
        return marker.future

    def _drain_buffers_locked(self) -> None:
        for buffered in self._buffers.values():
            self._queue.extend(buffered)
        self._buffers.clear()
        self._buffered = 0

    def flush(self) -> None:
        """Commit everything buffered or queued so far; raise the first deferred failure.

        The calling thread commits (it waits anyway), saving the hand-offs to the writer and
        back; the writer takes over whatever arrives while it commits.
        """
        done = self._barrier(lead=True)
        while not done.done():
            if not self._lead():
                break  # another thread is committing: it, or the writer, will reach the marker
        done.result()
        self._raise_deferred()

    async def flush_async(self) -> None:
        fut = self._barrier()
        await asyncio.wrap_future(fut)
        self._raise_deferred()

    def report_deferred(self, error: BaseException) -> None:
        """Hold ``error`` (a buffered save that failed) for the next :meth:`flush` to raise."""
        with self._cond:
            self._deferred.append(error)

    def _raise_deferred(self) -> None:
        with self._cond:
            errors, self._deferred = self._deferred, []
        if errors:
            first = errors[0]
            if len(errors) > 1:
                first.add_note(f"{len(errors) - 1} more buffered frame(s) failed too")
            raise first

    # -- the writer ----------------------------------------------------------------------------

    def _ensure_writer(self) -> None:
        if self._writer is not None and self._pid == current_pid():
            return  # the writer never exits before close() (see _run)
        self._pid = current_pid()
        self._writer = threading.Thread(
            target=self._run, name=f"ckptlog-writer:{self.backend.location}", daemon=True
        )
        self._writer.start()

    def _take_batch_locked(self) -> list[_Item]:
        n = min(len(self._queue), self.batch_frames_max)
        self._last_flush = time.monotonic()
        return [self._queue.popleft() for _ in range(n)]

    def _commit_safely(self, batch: list[_Item]) -> None:
        try:
            self._commit(batch)
        except BaseException as e:  # noqa: BLE001 - no batch may stop later commits
            for it in batch:
                it.result = e
            self._resolve(batch)

    def _run(self) -> None:
        batch: list[_Item] = []
        try:
            while True:
                with self._cond:
                    while (not self._queue or self._committing) and not self._stopping:
                        timeout = None
                        if self.flush_interval is not None and self._buffered:
                            timeout = self.flush_interval - (time.monotonic() - self._last_flush)
                            if timeout <= 0:
                                self._drain_buffers_locked()
                                if not self._committing:
                                    break
                                timeout = None
                        self._cond.wait(timeout)
                    if self._stopping and (not self._queue or self._committing):
                        if not self._queue:
                            return
                        self._cond.wait()
                        continue
                    self._committing = True
                    batch = self._take_batch_locked()
                try:
                    self._commit_safely(batch)
                finally:
                    with self._cond:
                        self._committing = False
                        self._cond.notify_all()
                batch = []
        except BaseException as e:  # noqa: BLE001 - a bug: fail every waiter, never hang one
            self._die(e, batch)

    def _die(self, cause: BaseException, batch: Sequence[_Item]) -> None:
        """The committer met an error outside any one frame (a bug): stop serving the log.

        Every item of ``batch`` and of the queue fails with :class:`WriterFailed` (chaining
        ``cause``), and so does every later call, so nobody waits for a commit that will never
        come. Buffered frames are dropped; the error says how many.
        """
        with self._cond:
            if self._failed is None:
                self._failed = cause
            items = [*batch, *self._queue]
            self._queue.clear()
            self._failed_lost += self._buffered + sum(it.saves for it in items if it.buffered)
            self._buffers.clear()
            self._buffered = 0
            self._cond.notify_all()
        for it in items:
            if not it.buffered:
                _settle(it, self._writer_failed())

    def _writer_failed(self) -> WriterFailed:
        cause = self._failed
        lost = self._failed_lost
        err = WriterFailed(
            f"the writer of the log at {self.backend.location!r} stopped on an internal error "
            f"({type(cause).__name__}: {cause}), so nothing more can be written through this "
            "EventLog; what was acknowledged before is committed"
            + (f", {lost} buffered frame(s) were dropped unwritten" if lost else "")
            + ". Close it and open the log again (and report the error: it is a bug)"
        )
        err.__cause__ = cause
        return err

    def _prepare(self, item: _Item) -> bool:
        """Encode and compress outside the transaction; ``False`` when the item failed."""
        if isinstance(item.frame, DeferredFrame):
            return True  # built and encoded inside the transaction
        try:
            self._encode(item, item.frame)
        except BaseException as e:  # noqa: BLE001 - delivered to the caller, never swallowed
            item.result = e
            return False
        return True

    def _encode(self, item: _Item, frame: Any) -> None:
        """Encode and compress ``frame`` into ``item``; the encoded and stored sizes are bounded
        by ``frame_bytes_max`` so every acknowledged frame also reads back within it."""
        raw = self._serializer.encode(frame)
        item.payload, item.flags = self._compressor.compress(raw)
        stored = len(item.payload) + HEADER_BYTES
        if max(stored, len(raw) + HEADER_BYTES) > self.frame_bytes_max:
            raise FrameTooLarge(
                f"frame for stream {item.stream!r} is {stored} bytes stored "
                f"({len(raw)} encoded), above frame_bytes_max={self.frame_bytes_max}; "
                "save smaller states (keep large blobs outside the log, store a reference) "
                "or open the log with a larger frame_bytes_max"
            )

    def _run_write(self, items: list[_Item]) -> dict[str, int]:
        hooks = self.txn_hooks

        attempts = 0

        def body(txn: WriteTxn) -> dict[str, int]:
            nonlocal attempts
            attempts += 1
            if attempts > 1:  # a retry: what the aborted attempt cached never committed
                self._tails.clear()
                self._gseq = None
            if hooks is not None:
                hooks.begin()
            return self._write(txn, items)

        pre = None
        if self.backend.remote:
            early = [
                (it.frame, it.stream, sid)
                for it in items
                if isinstance(it.frame, DeferredFrame)
                and it.expect_seq is None  # a frame that may be refused writes nothing first
                and (sid := self._ids.get(it.stream)) is not None
            ]
            if early:

                def pre(txn: WriteTxn) -> None:
                    for frame, stream, sid in early:
                        frame.before_lock(txn, stream, sid)

        try:
            new_ids = self.backend.run_write(body, before_lock=pre)
        except BaseException:
            self._tails.clear()  # they may hold what the aborted transaction appended
            self._gseq = None
            if hooks is not None:
                hooks.aborted()
            raise
        if hooks is not None:
            hooks.committed()
        self._commits += 1
        self._ids.update(new_ids)
        self._names.update({v: k for k, v in new_ids.items()})
        return new_ids

    def _commit(self, batch: list[_Item]) -> None:
        frames = [it for it in batch if it.frame is not None and self._prepare(it)]
        failure: StorageError | None = None  # the storage failed: frames from it were not written
        if frames:
            try:
                self._run_write(frames)
            except Exception as e:  # noqa: BLE001 - delivered to the callers
                if _is_storage_failure(e):
                    failure = _storage_error(e)
                    for it in frames:
                        it.result = failure
                else:
                    # One frame (or its effect) failed the whole transaction: isolate it by
                    # committing the frames one at a time, so each caller gets its own outcome.
                    for it in frames:
                        it.result = None
                    for k, it in enumerate(frames):
                        try:
                            self._run_write([it])
                        except Exception as e1:  # noqa: BLE001 - delivered to the caller
                            if not _is_storage_failure(e1):
                                it.result = e1
                                continue
                            failure = _storage_error(e1)  # the rest would fail too: stop here
                            for rest in frames[k:]:
                                rest.result = failure
                            break
            except BaseException as e:  # noqa: BLE001 - interrupted: every caller hears
                for it in frames:
                    it.result = e
        if failure is not None:
            self._keep_buffered(batch, failure)
        for it in frames:
            res = it.result
            if isinstance(res, int):
                self._log_bytes += res
                self._frames_appended += 1
                it.result = None
            elif isinstance(res, Appended):
                self._log_bytes += res.stored_bytes
                self._frames_appended += 1
        self._resolve(batch)

    def _write(self, txn: WriteTxn, items: list[_Item]) -> dict[str, int]:
        """Append ``items`` in one transaction; returns the stream ids it created or looked
        up (kept once it commits: a stream's id never changes)."""
        w = _TxnWriter(self, txn, items)
        for it in items:
            it.result = None
            sid, fresh = w.stream_id(it.stream)
            tail = w.tail(sid, fresh)
            seq = tail[0] + 1
            if it.expect_seq is not None and it.expect_seq != seq:
                it.result = SequenceConflict(
                    f"stream {it.stream!r} is at seq {tail[0]}, so this append would get seq "
                    f"{seq}, but it expected seq {it.expect_seq}; another writer appended "
                    "(or an earlier frame failed): reload the stream and try again"
                )
                continue
            deferred = it.frame if isinstance(it.frame, DeferredFrame) else None
            if deferred is not None:
                w.write_pending()
                frame = deferred.build(txn, it.stream, sid, seq)
                if frame is None:
                    continue  # nothing to append (e.g. deleting an unknown invocation)
                self._encode(it, frame)  # raising aborts; the batch is then isolated
            if fresh:
                w.register(it.stream, sid)
            gseq, checksum, size = w.add(sid, seq, tail[1], it)
            if deferred is None and it.effect is None and it.future is None and it.aio is None:
                it.result = size  # nobody reads where it landed: only count it
                continue
            done = Appended(it.stream, seq, gseq, checksum, size)
            if deferred is not None or it.effect is not None:
                w.write_pending()
            if deferred is not None:
                deferred.appended(txn, done)
            if it.effect is not None:
                it.effect(txn, done, it.frame)
            it.result = done
        w.write_pending()
        self._gseq = w.gseq
        return {**w.found_ids, **w.new_ids}

    def _keep_buffered(self, batch: list[_Item], failure: StorageError) -> None:
        """After ``failure``: put the buffered frames of ``batch`` that it stopped back in
        their buffers, ahead of what was buffered since, and fail the flushes that covered them.

        Buffered frames still queued behind go back too (a frame must not commit before an
        earlier one of its stream), except in front of a queued durable append of their stream,
        which commits them first as always. Nothing is dropped: the next flush retries.
        """
        kept = [it for it in batch if it.buffered and it.result is failure]
        if not kept:
            return
        first = batch.index(kept[0])
        markers = [it for it in batch[first:] if it.frame is None]
        with self._cond:
            pending: dict[str, list[_Item]] = {}
            for it in kept:
                pending.setdefault(it.stream, []).append(it)
            queue: list[_Item] = []
            for it in self._queue:
                if it.frame is None:
                    markers.append(it)  # a flush queued after the kept frames
                elif it.buffered:
                    pending.setdefault(it.stream, []).append(it)
                else:
                    queue.extend(pending.pop(it.stream, ()))
                    queue.append(it)
            self._queue.clear()
            self._queue.extend(queue)
            for stream, items in pending.items():
                self._buffers[stream] = items + self._buffers.get(stream, [])
                self._buffered += sum(it.saves for it in items)
            n = self._buffered + sum(it.saves for it in queue if it.buffered)
        for it in kept:
            it.result = None  # not a failure of the frame: it waits for the next flush
        error = _flush_failed(failure, n)
        for it in markers:
            it.result = error
        queued = [it for it in markers if it not in batch]
        if queued:
            self._resolve(queued)

    def _resolve(self, batch: list[_Item]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Item]] = {}
        for it in batch:
            res = it.result
            fut = it.future
            if isinstance(fut, _Waiter):
                fut.set(res)
            elif fut is not None:
                _settle_future(fut, res)
            elif it.aio is not None:
                by_loop.setdefault(it.aio[0], []).append(it)
            elif isinstance(res, BaseException):
                with self._cond:
                    self._deferred.append(res)
        running = asyncio._get_running_loop()  # the loop of this thread, if it leads a commit
        for loop, items in by_loop.items():
            if loop is running:
                _resolve_aio(items)  # committed on the loop's own thread: no wake-up needed
                continue
            # RuntimeError: the loop closed while we committed; nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve_aio, items)

    # -- settings other modules read (compaction, verify, forensics) ---------------------------

    @property
    def chain_key(self) -> bytes:
        """The key of the envelopes' chain hash (``b""``: unkeyed); a copy of the log that
        keeps the original checksums must seal with it."""
        return self._chain_key

    @property
    def compressor(self) -> Compressor:
        """How payloads are compressed and decompressed (the log's stored threshold)."""
        return self._compressor

    @property
    def compress_threshold_bytes(self) -> int:
        """Payloads at least this long are compressed (stored in the ``meta`` row)."""
        return int(self._settings["compress_threshold_bytes"])

    # -- reading -------------------------------------------------------------------------------

    def stream_id(self, txn: ReadTxn, stream: str) -> int | None:
        """The u64 id ``stream`` is interned to (the first 8 bytes of every key a view keeps
        for it), read in ``txn``; ``None`` when the stream has no frames."""
        sid = self._ids.get(stream)
        if sid is not None:
            return sid
        raw = txn.get(STREAM_IDS, stream_key_bytes(stream, self._max_key))
        return None if raw is None else U64.unpack(raw)[0]

    def stream_name(self, txn: ReadTxn, sid: int) -> str:
        """The key of stream id ``sid``, read in ``txn`` (cached)."""
        name = self._names.get(sid)
        if name is None:
            raw = txn.get(STREAM_NAMES, _u64(sid))
            name = raw.decode("utf-8", "surrogatepass") if raw is not None else f"<id {sid}>"
        return name

    def decode_envelope(self, data: bytes) -> tuple[Any, Any]:
        """``(envelope, frame)`` of stored bytes, checksum verified."""
        env = open_envelope(data, chain_key=self._chain_key)
        raw = self._compressor.decompress(env.payload, env.flags, max_bytes=self.frame_bytes_max)
        return env, self._serializer.decode(raw)

    def decode_stored(
        self, stream: str, gseq: int, data: bytes, where: tuple[int, int] | None = None
    ) -> StoredFrame[Any]:
        """The frame stored as ``data`` at log #``gseq`` of ``stream``, checksum verified;
        ``where``: the (stream id, seq) the index says it is (checked). Raises
        :class:`~eventlog.errors.CorruptFrame` naming the stream and seq."""
        try:
            env, frame = self.decode_envelope(data)
        except CorruptFrame as e:
            seq = e.seq
            if seq is None:
                with contextlib.suppress(CorruptFrame):
                    seq = read_header(data)[4]
            raise CorruptFrame(
                f"stream {stream!r}, log #{gseq}: {e}", stream=stream, seq=seq
            ) from e
        if where is not None and (env.stream_id, env.seq) != where:
            raise CorruptFrame(
                f"stream {stream!r}, log #{gseq}: the index says it is seq {where[1]} of this "
                f"stream, but the frame there is seq {env.seq} of stream id {env.stream_id} "
                "(frames swapped or moved); run verify()",
                stream=stream,
                seq=where[1],
            )
        return StoredFrame(stream, env.seq, gseq, env.checksum, frame, len(data))

    def last_seq(self, stream: str) -> int:
        """The seq of the newest committed frame of ``stream`` (0 when it has none)."""
        with self.backend.read() as txn:
            sid = self.stream_id(txn, stream)
            return 0 if sid is None else _last_seq(txn, sid)

    def read_stream(
        self, stream: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[StoredFrame[Any]]:
        """Committed frames of ``stream`` with ``from_seq <= seq <= to_seq``, in order."""
        next_seq = max(from_seq, 1)
        while True:
            chunk: list[StoredFrame[Any]] = []
            with self.backend.read() as txn:
                sid = self.stream_id(txn, stream)
                if sid is None:
                    return
                stop = U64X2.pack(sid, to_seq + 1) if to_seq is not None else _u64(sid + 1)
                index = list(
                    txn.scan(STREAMS, U64X2.pack(sid, next_seq), stop, limit=READ_CHUNK_FRAMES)
                )
                frames = txn.get_many(LOG, [gkey for _, gkey in index])
                for (key, gkey), data in zip(index, frames, strict=True):
                    if data is None:
                        seq = U64X2.unpack(key)[1]
                        raise CorruptFrame(
                            f"stream {stream!r} seq {seq}: index points at log "
                            f"#{U64.unpack(gkey)[0]}, which is missing; run verify()",
                            stream=stream,
                            seq=seq,
                        )
                    sf = self.decode_stored(stream, U64.unpack(gkey)[0], data, U64X2.unpack(key))
                    if sf.seq != next_seq or (chunk and _prev_of(data) != chunk[-1].checksum):
                        raise CorruptFrame(
                            f"stream {stream!r}: expected seq {next_seq} chained to the frame "
                            f"before it, found seq {sf.seq}"
                            + (" (frames missing)" if sf.seq > next_seq else "")
                            + "; run verify()",
                            stream=stream,
                            seq=next_seq,
                        )
                    chunk.append(sf)
                    next_seq += 1
            yield from chunk
            if len(chunk) < READ_CHUNK_FRAMES:
                return

    def read_frame(self, stream: str, seq: int) -> StoredFrame[Any] | None:
        for sf in self.read_stream(stream, seq, seq):
            return sf
        return None

    def scan(self, since_global_seq: int = 0) -> Iterator[StoredFrame[Any]]:
        """Every committed frame with global seq > ``since_global_seq``, in commit order."""
        after = since_global_seq
        while True:
            chunk: list[StoredFrame[Any]] = []
            with self.backend.read() as txn:
                for gkey, data in txn.scan(LOG, _u64(after + 1), limit=READ_CHUNK_FRAMES):
                    gseq = U64.unpack(gkey)[0]
                    sid = read_header(data)[3]
                    chunk.append(self.decode_stored(self.stream_name(txn, sid), gseq, data))
            yield from chunk
            if len(chunk) < READ_CHUNK_FRAMES:
                return
            after = chunk[-1].global_seq

    def streams(self) -> list[str]:
        """Every stream key in the log, in key order."""
        with self.backend.read() as txn:
            return [k.decode("utf-8", "surrogatepass") for k, _ in txn.scan(STREAM_IDS)]

    @staticmethod
    def stream_ids(txn: ReadTxn, prefix: str = "") -> list[tuple[str, int]]:
        """``(stream key, stream id)`` of every stream whose key starts with ``prefix``, in
        key order, read in ``txn`` (integrations list their own streams this way)."""
        return [
            (k.decode("utf-8", "surrogatepass"), U64.unpack(v)[0])
            for k, v in txn.scan_prefix(STREAM_IDS, prefix.encode("utf-8", "surrogatepass"))
        ]

    def stats(self) -> Stats:
        with self.backend.read() as txn:
            frames = txn.count(LOG)
            streams = txn.count(STREAM_IDS)
        return Stats(
            frames=frames,
            streams=streams,
            log_bytes=self._log_bytes,
            frames_appended=self._frames_appended,
            commits=self._commits,
            disk_bytes=self.backend.size_bytes(),
            durability=self.backend.durability,
        )

    # -- verify --------------------------------------------------------------------------------

    def verify(self, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Check every checksum, chain link, seq and index entry; report, never repair."""
        self.check_readable("verify")
        return verify_log(self, progress)

    def check_readable(self, what: str) -> None:
        if self._closed:
            raise LogClosed(
                f"{what} after close: the log at {self.backend.location!r} is closed; "
                "open it again to read it"
            )

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit everything buffered, stop the writer, release the backend. Idempotent."""
        with self._cond:
            if self._closed:
                return
        error: BaseException | None = None
        try:
            if self._failed is not None:
                error = self._writer_failed()
            elif self._writer is not None and self._writer.is_alive():
                self.flush()
        except BaseException as e:  # noqa: BLE001 - still close; re-raised below
            error = e
        with self._cond:
            self._closed = True
            self._stopping = True
            lost = {s: sum(it.saves for it in items) for s, items in self._buffers.items() if items}
            self._buffers.clear()
            self._buffered = 0
            self._cond.notify_all()
        if lost:
            dropped = BufferedLost(
                f"close() could not write {sum(lost.values())} buffered frame(s), so they are "
                "lost: "
                + ", ".join(f"{s!r} ({n})" for s, n in sorted(lost.items()))
                + (
                    f". The flush before closing failed: {error}"
                    if error is not None
                    else ": they were buffered while close() ran; flush before closing"
                ),
                lost=lost,
            )
            dropped.errno = getattr(error, "errno", None)
            dropped.__cause__ = error
            error = dropped
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join()
        self.backend.close()
        if error is not None:
            raise error

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> EventLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)


class _TxnWriter:
    """The state of one write transaction of :meth:`EventLog._write`.

    Log and index rows are collected and written with one ``append_many`` / ``put_many``
    each; :meth:`write_pending` runs before any deferred frame or effect, so those always see
    the transaction as it stands.
    """

    def __init__(self, log: EventLog, txn: WriteTxn, items: Sequence[_Item] = ()) -> None:
        self.txn = txn
        self.known = log._ids
        self.tails = log._tails
        self.seal = log._sealer.seal
        self.new_ids: dict[str, int] = {}
        self.found_ids: dict[str, int] = {}  # ids another process gave, read in this txn
        self.next_id: int | None = None
        self.log_rows: list[tuple[bytes, bytes]] = []
        self.index_rows: list[tuple[bytes, bytes]] = []
        # The log's end, read in this transaction (and what append_many checks against: a
        # backend may keep it, as the PostgreSQL one does, sparing a query per commit).
        item: tuple[bytes, bytes] | None = None
        if log.backend.remote:
            # What the deferred frames will read goes out with the first read, and the last
            # frame comes with its key: with the lock, one round trip.
            wanted: dict[str, list[bytes]] = {}
            for it in items:
                sid = self.known.get(it.stream)
                if sid is not None and isinstance(it.frame, DeferredFrame):
                    for table, key in it.frame.prefetch(sid):
                        wanted.setdefault(table, []).append(key)
            for table, keys in wanted.items():
                txn.prefetch(table, keys)
            item = txn.last_item(LOG)
            last = item[0] if item is not None else None
        else:
            last = txn.last_key(LOG)
        found = U64.unpack(last)[0] if last is not None else 0
        if log._gseq != found:  # first commit, or another process appended
            self.tails.clear()
            if item is not None:
                self._tail_of_last(item[1], log.chain_key)
        self.gseq: int = found

    def _tail_of_last(self, envelope: bytes, chain_key: bytes) -> None:
        """The tail of the stream that wrote the log's last frame, from that frame, when its
        checksum holds (otherwise the stream's index is read as usual, and says what is wrong):
        with several writer processes on one stream, as a shared fan-out has, it is usually
        the stream of the next frame, and this spares reading its tail."""
        try:
            env = open_envelope(envelope, chain_key=chain_key)
        except CheckpointError:
            return
        self.tails[env.stream_id] = (env.seq, env.checksum)

    def stream_id(self, stream: str) -> tuple[int, bool]:
        """``(id, fresh)``: a fresh stream's id is recorded only once a frame lands."""
        sid = self.known.get(stream) or self.new_ids.get(stream)
        if sid is not None:
            return sid, False
        raw_id = self.txn.get(STREAM_IDS, stream.encode("utf-8", "surrogatepass"))
        if raw_id is not None:
            found: int = U64.unpack(raw_id)[0]
            self.found_ids[stream] = found
            return found, False
        if self.next_id is None:
            last_id = self.txn.last_key(STREAM_NAMES)
            self.next_id = (U64.unpack(last_id)[0] if last_id is not None else 0) + 1
        return self.next_id, True

    def tail(self, sid: int, fresh: bool) -> tuple[int, bytes]:
        tail = self.tails.get(sid)
        if tail is None:
            tail = (0, ZERO_CHECKSUM) if fresh else _read_tail(self.txn, sid)
            self.tails[sid] = tail
        return tail

    def register(self, stream: str, sid: int) -> None:
        raw_key = stream.encode("utf-8", "surrogatepass")
        self.txn.put(STREAM_IDS, raw_key, U64.pack(sid))
        self.txn.put(STREAM_NAMES, U64.pack(sid), raw_key)
        self.new_ids[stream] = sid
        self.next_id = sid + 1

    def add(self, sid: int, seq: int, prev: bytes, it: _Item) -> tuple[int, bytes, int]:
        """Seal and queue one frame; ``(global seq, checksum, stored bytes)``."""
        envelope, checksum = self.seal(sid, seq, prev, it.payload, it.flags)
        self.gseq = gseq = self.gseq + 1
        gkey = U64.pack(gseq)
        self.log_rows.append((gkey, envelope))
        self.index_rows.append((U64X2.pack(sid, seq), gkey))
        self.tails[sid] = (seq, checksum)
        return gseq, checksum, len(envelope)

    def write_pending(self) -> None:
        if self.log_rows:
            self.txn.append_many(LOG, self.log_rows)
            self.txn.put_many(STREAMS, self.index_rows)
            self.log_rows.clear()
            self.index_rows.clear()


class DeferredFrame:
    """Base class for :class:`Deferred` frames (the writer recognizes them by type)."""

    __slots__ = ()

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> Any:
        raise NotImplementedError

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        raise NotImplementedError

    def prefetch(self, sid: int) -> Iterable[tuple[str, bytes]]:
        """``(table, key)`` rows :meth:`build` will read for stream ``sid`` (a hint: on a
        server they are fetched with the transaction's first read)."""
        return ()

    def before_lock(self, txn: WriteTxn, stream: str, sid: int) -> None:
        """On a server whose writers share a lock, the transaction's writes that need none
        (rows only this frame writes), sent before it is taken; :meth:`build` must then check
        that what they assumed still holds, and raise :class:`RetryableWrite` if not (the
        transaction runs again). Default: nothing."""

    def join(self, later: Any) -> bool:
        """Take ``later`` (the next buffered frame of the same stream) into this one, so both
        commit as one frame (a batch); ``False`` (the default) leaves them two frames."""
        return False

    def add(self, value: Any) -> bool:
        """Take ``value`` (see :meth:`EventLog.buffer_into`) into this buffered frame;
        ``False`` (the default) when it cannot."""
        return False


def _joined(last: _Item, it: _Item) -> bool:
    """Join buffered item ``it`` into ``last``, the stream's last buffered item, when its frame
    accepts it. Only plain buffered frames join: nobody waits on them or reads where they land.
    """
    frame = last.frame
    if (
        not isinstance(frame, DeferredFrame)
        or last.effect is not None
        or it.effect is not None
        or last.expect_seq is not None
        or it.expect_seq is not None
        or not frame.join(it.frame)
    ):
        return False
    last.saves += it.saves
    return True


def _resolve_aio(items: list[_Item]) -> None:
    for it in items:
        assert it.aio is not None
        fut = it.aio[1]
        if fut.done():
            continue  # its task was cancelled: the frame committed (or failed) all the same
        if isinstance(it.result, BaseException):
            fut.set_exception(it.result)
        else:
            fut.set_result(it.result)  # type: ignore[arg-type]


def _settle_future(fut: Future[Appended], res: Any) -> None:
    """Resolve ``fut`` unless its caller cancelled it (a cancelled ``flush_async`` cancels the
    future it wraps, and a :meth:`EventLog.submit` future may be cancelled at any time)."""
    if fut.done():
        return
    try:
        if isinstance(res, BaseException):
            fut.set_exception(res)
        else:
            fut.set_result(res)
    except InvalidStateError:
        pass  # cancelled between the check and the call


def _settle(it: _Item, res: BaseException) -> None:
    """Fail a waiting item from any thread, without :meth:`EventLog._resolve`."""
    it.result = res
    fut = it.future
    if isinstance(fut, _Waiter):
        fut.set(res)
    elif fut is not None:
        _settle_future(fut, res)
    elif it.aio is not None:
        loop = it.aio[0]
        if loop is asyncio._get_running_loop():
            _resolve_aio([it])
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(_resolve_aio, [it])


def _is_storage_failure(e: BaseException) -> bool:
    """An error of the medium (disk full, I/O error), not of the frames being written."""
    return isinstance(e, OSError) and not isinstance(e, ReadOnlyLog)


def _is_disk_full(e: BaseException) -> bool:
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, StorageFull) or getattr(seen, "errno", None) == errno.ENOSPC:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _storage_error(e: Exception) -> StorageError:
    """``e`` as a :class:`StorageError` (a bare ``OSError`` from the backend is wrapped)."""
    if isinstance(e, StorageError):
        return e
    full = _is_disk_full(e)
    err = StorageError(
        f"writing the log failed: {type(e).__name__}: {e}; "
        + (
            "the disk is full: free space, then save again"
            if full
            else "check the medium the log is on, then save again"
        )
    )
    err.errno = getattr(e, "errno", None)
    err.__cause__ = e
    return err


def _flush_failed(failure: StorageError, kept: int) -> FlushFailed:
    what = "the disk is full" if _is_disk_full(failure) else "the storage failed"
    err = FlushFailed(
        f"flush failed: {what} ({failure}). The {kept} buffered frame(s) it was to commit are "
        "kept in memory, in order: the next flush() or close() (or a durable save of their "
        "stream) writes them. Free space and flush again; they are lost if the process dies "
        "first",
        kept=kept,
    )
    err.errno = failure.errno
    err.__cause__ = failure
    return err


def _prev_of(envelope: bytes) -> bytes:
    return read_header(envelope)[5]


def _last_seq(txn: ReadTxn, sid: int) -> int:
    for key, _ in txn.scan(STREAMS, _u64(sid), _u64(sid + 1), reverse=True, limit=1):
        seq: int = U64X2.unpack(key)[1]
        return seq
    return 0


def _read_tail(txn: ReadTxn, sid: int) -> tuple[int, bytes]:
    """``(last seq, its checksum)`` of a stream, read inside the transaction."""
    for key, gkey in txn.scan(STREAMS, _u64(sid), _u64(sid + 1), reverse=True, limit=1):
        data = txn.get(LOG, gkey)
        seq = U64X2.unpack(key)[1]
        if data is None or len(data) < HEADER_BYTES:
            raise CorruptFrame(
                f"stream id {sid} seq {seq}: its frame is missing or truncated, so the chain "
                "cannot be extended; run verify()",
                seq=seq,
            )
        checksum = bytes(data[HEADER_BYTES - CHECKSUM_BYTES : HEADER_BYTES])
        return seq, checksum
    return 0, ZERO_CHECKSUM
