"""EventLog: streams of frames on a backend, one writer thread, group commit.

Tables (all keys big-endian so byte order is numeric order):
- ``log``: global seq (u64) -> envelope. Appended only; commit order.
- ``streams``: stream id (u64) + stream seq (u64) -> global seq (u64).
- ``stream_ids``: stream key (UTF-8) -> stream id (u64);  ``stream_names``: the inverse;
  ``meta``: ``format`` -> JSON settings (format version, checksum, compression), checked on open.

Invariants:
- Call order is commit order: ``append`` enqueues synchronously, before returning or awaiting,
  and one writer thread commits the queue in order. Everything queued while a commit is in flight
  goes into the next commit (group commit), bounded by ``batch_frames_max``.
- Within a stream, seqs are 1, 2, 3, ... without gaps and every envelope's ``prev`` is the
  checksum of the frame before it; the writer reads the stream's tail inside the write
  transaction, so several processes may append to one log.
- Buffered appends of a stream are always the tail of that stream's queue: a durable append to a
  stream first moves its buffered frames into the commit queue, so the order stays the call order
  (staged values, ``GroupCommit.stager``, join the buffers first, whenever the buffers are read).
- A frame that cannot be encoded, is too large, or whose ``expect_seq`` does not match fails
  alone: nothing of it is written and the other frames of its commit are unaffected.
- A durable append returns only after its commit is on disk (per the backend's durability).
- A commit the storage refuses (``OSError``) drops no buffered frame: back to their buffers in
  order (``_keep_buffered``, eventlog.commit); the flushes covering them raise ``FlushFailed``.
- No caller's cancellation stops the writer (futures are resolved only if not done); a
  committer that dies of a bug fails every waiting and later call with ``WriterFailed``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, Final, Generic, TypeVar

import msgspec

from backends.base import Backend, Durability, ReadTxn, WriteTxn, current_pid
from eventlog import layout
from eventlog.codec import (
    COMPRESS_THRESHOLD_BYTES,
    FORMAT_VERSION,
    Compressor,
    Sealer,
    Serializer,
    open_envelope,
    read_header,
)
from eventlog.commit import (
    _LED,
    GroupCommit,
    _Item,
    _joined,
    _last_seq,
    _prev_of,
    _Waiter,
)
from eventlog.commit import Appended as Appended  # noqa: PLC0414 - re-exported
from eventlog.commit import Deferred as Deferred  # noqa: PLC0414
from eventlog.commit import DeferredFrame as DeferredFrame  # noqa: PLC0414
from eventlog.commit import Effect as Effect  # noqa: PLC0414
from eventlog.commit import TxnHooks as TxnHooks  # noqa: PLC0414
from eventlog.errors import (
    BufferedLost,
    CheckpointError,
    CorruptFrame,
    LogClosed,
    NotALog,
    UnsupportedFormat,
)
from eventlog.errors import SequenceConflict as SequenceConflict  # noqa: PLC0414
from eventlog.frames import Event, Frame
from eventlog.layout import CORE_TABLES, LOG, META, STREAM_IDS, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.log_open import open_backend as open_backend  # noqa: PLC0414 - re-exported
from eventlog.log_open import stream_key_bytes as stream_key_bytes  # noqa: PLC0414
from eventlog.reports import Problem as Problem  # noqa: PLC0414 - re-exported
from eventlog.reports import Stats as Stats  # noqa: PLC0414
from eventlog.reports import VerifyReport as VerifyReport  # noqa: PLC0414
from eventlog.validate import check_event
from eventlog.verify import verify_log

FRAME_BYTES_MAX: Final = 64 << 20  # 64 MiB per frame, stored size including the header
BATCH_FRAMES_MAX: Final = 4096  # frames in one group commit
READ_CHUNK_FRAMES: Final = 1024  # frames read per read transaction when iterating

F = TypeVar("F")


class StoredFrame(msgspec.Struct, Generic[F], frozen=True):
    """A frame read back from the log, checksum verified."""

    stream: str
    seq: int
    global_seq: int
    checksum: bytes
    frame: F
    stored_bytes: int


class EventLog(GroupCommit):
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
        self._wrote: set[int] = set()  # the streams a commit's attempts appended to
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
            has_frames = raw is None and txn.last_key(LOG) is not None  # (damage: verify's)
        if raw is None:
            if has_frames:
                raise NotALog(
                    f"{self.backend.location!r} holds frames but no format record; it was not "
                    "written by ckptlog (or its meta table was removed)"
                )
            settings: dict[str, Any] = {
                "format_version": max(FORMAT_VERSION, self.backend.layout_version),
                "checksum": "blake2b-128" + ("-keyed" if self._chain_key else ""),
                "compression": "zstd",
                "compress_threshold_bytes": compress_threshold_bytes or COMPRESS_THRESHOLD_BYTES,
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
        if version > layout.META_FORMAT_MAX:
            raise UnsupportedFormat(
                f"{self.backend.location!r} was written in log format {version}, newer than "
                f"the {layout.META_FORMAT_MAX} this ckptlog reads; upgrade ckptlog to open it"
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

    def _admit_locked(self) -> None:
        """Under the lock, before queueing: the log is open, has its writer, and holds no
        staged values (the checks inline: each call is a no-op on the usual append)."""
        if self._failed is not None or self._closed:
            self._check_open()
        if self._writer is None or self._pid != current_pid():
            self._ensure_writer()
        if self.stager is not None:
            self._unstage_locked()

    def _queue_locked(self, it: _Item) -> None:
        """Under the lock: queue durable ``it``, its stream's buffered frames first."""
        buffered = self._buffers.pop(it.stream, None)
        if buffered:
            self._buffered -= sum(b.saves for b in buffered)
            self._queue.extend(buffered)
        self._queue.append(it)

    def _enqueue(self, items: Sequence[_Item], *, durable: bool, lead: bool = False) -> None:
        """Queue (or buffer) items in call order; wake the writer unless the caller leads."""
        with self._mutex:  # (the condition's lock, without Condition.__enter__'s frame)
            self._admit_locked()
            if durable:
                for it in items:
                    self._queue_locked(it)
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
        """Buffer ``value`` for ``stream`` (``append(..., durable=False)``): into the last buffered
        frame if it takes it (``DeferredFrame.add``), else as frame ``make(value)``."""
        with self._mutex:  # the condition's lock, without Condition.__enter__'s Python frame
            if self._failed is not None or self._closed:
                self._check_open()
            self._unstage_locked()
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
        linger: float = 0.0,
    ) -> Appended | None:
        """Append ``frame`` to ``stream``. Durable (default): returns once the commit holding it
        is on disk. Buffered (``durable=False``): returns at once; committed by the next
        :meth:`flush`, durable append to the stream, ``flush_interval`` or :meth:`close`; lost if
        the process dies first. ``expect_seq``: conditional on the seq it gets (optimistic
        concurrency), else :class:`SequenceConflict`. ``linger``: seconds to wait for another
        thread's commit to take it (one flush for both)."""
        item = self._make_item(stream, frame, expect_seq, effect)
        if not durable:
            self._enqueue((item,), durable=False)
            return None
        if linger > 0.0:
            waiter = item.future = _Waiter()
            self._enqueue((item,), durable=True, lead=True)
            if not waiter.wait(linger):
                self._lead()
            result: Appended = waiter.result()
            return result
        # The usual call, in one hold of the lock: queue it (as _enqueue does) and, when no
        # commit runs, take the batch (as _lead does); a caller whose item is in the batch it
        # commits reads its result from the item (nothing to signal: its future is _LED).
        (mutex := self._mutex).acquire()  # (not a with statement: it binds two methods a call)
        try:
            self._admit_locked()
            self._queue_locked(item)
            if self._committing:
                waiter = item.future = _Waiter()
                self._cond.notify()
                batch = None
            else:
                self._committing = True
                batch = self._take_batch_locked()
                waiter = item.future = _LED if batch[-1] is item else _Waiter()
        finally:
            mutex.release()
        if batch is not None:
            self._commit_taken(batch)
        if waiter is _LED:
            res = item.result
            if res.__class__ is not Appended and isinstance(res, BaseException):
                raise res
            return res  # type: ignore[return-value]
        done: Appended = waiter.result()
        return done

    def _lead(self) -> bool:
        """Commit the queue in this (synchronous) caller's thread when no commit is running;
        ``False`` when it did not (a commit was running, or nothing was queued).

        Saves the two thread hand-offs of waking the writer and being woken by it, which
        dominate a lone durable append. Commits stay mutually exclusive (``_committing``), so
        the order and the single-committer invariants hold whichever thread commits.
        """
        with self._mutex:  # (the condition's lock, without Condition.__enter__'s frame)
            if self._committing or not self._queue:
                return False
            self._committing = True
            batch = self._take_batch_locked()
        self._commit_taken(batch)
        return True

    def _commit_taken(self, batch: list[_Item]) -> None:
        """Commit ``batch``, taken off the queue by this caller (``_committing`` set)."""
        try:
            self._commit(batch)
        except BaseException as e:
            self._die(e, batch)  # an internal error: fail every waiter rather than hang one
            if not isinstance(e, Exception):
                raise  # KeyboardInterrupt, SystemExit: still the caller's to see
        finally:  # (not a with statement: nothing below raises with the lock held)
            self._mutex.acquire()
            self._committing = False
            if self._queue:
                self._cond.notify()  # the writer takes what arrived meanwhile
            self._mutex.release()

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
            self._unstage_locked()
            dropped = sum(it.saves for it in self._buffers.pop(stream, []))
            self._buffered -= dropped
            return dropped

    def buffered_count(self, stream: str | None = None) -> int:
        with self._cond:
            self._unstage_locked()
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
            raw = txn.get(STREAM_NAMES, U64.pack(sid))
            name = raw.decode("utf-8", "surrogatepass") if raw is not None else f"<id {sid}>"
        return name

    def decode_envelope(self, data: bytes, *, checksum: bool = True) -> tuple[Any, Any]:
        """``(envelope, frame)`` of stored bytes, checksum verified unless ``checksum=False``
        (a read path that ``verify`` covers: length, version, flags and decoding still are)."""
        env = open_envelope(data, chain_key=self._chain_key, checksum=checksum)
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
                stop = U64X2.pack(sid, to_seq + 1) if to_seq is not None else U64.pack(sid + 1)
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
                for gkey, data in txn.scan(LOG, U64.pack(after + 1), limit=READ_CHUNK_FRAMES):
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
            self._unstage_locked()  # (and starts the writer, which the flush below needs)
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
            self._unstage_locked(final=True)
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
