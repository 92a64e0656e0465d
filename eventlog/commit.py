"""The writer of an EventLog (eventlog.log): its commit queue, one writer thread, group commit.

:class:`GroupCommit` is the base class of :class:`~eventlog.log.EventLog` holding the commit
machinery: the writer thread, taking a batch off the queue, encoding, one write transaction per
batch (:class:`_TxnWriter`), isolating a frame that fails, keeping buffered frames the storage
refused, and resolving every waiter (threads, futures, event loops). The invariants are listed
in eventlog.log; the attributes it declares are set by ``EventLog.__init__``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from backends.base import Backend, ReadTxn, WriteTxn, current_pid
from eventlog.codec import (
    CHECKSUM_BYTES,
    ENCODE_ERRORS,
    HEADER_BYTES,
    ZERO_CHECKSUM,
    Compressor,
    Sealer,
    Serializer,
    open_envelope,
    read_header,
)
from eventlog.commit_errors import _flush_failed, _is_storage_failure, _storage_error
from eventlog.errors import (
    CheckpointError,
    CorruptFrame,
    FrameTooLarge,
    SequenceConflict,
    StorageError,
    WriterFailed,
)
from eventlog.layout import LOG, STREAM_IDS, STREAM_NAMES, STREAMS, U64, U64X2


class Appended(msgspec.Struct, frozen=True):
    """Where an acknowledged frame landed."""

    stream: str
    seq: int
    global_seq: int
    checksum: bytes
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
    """A one-shot result slot a blocked thread waits on (a pre-acquired lock the committer
    releases): cheaper than a ``concurrent.futures.Future`` when hundreds of threads wait."""

    __slots__ = ("_lock", "_set", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False
        self.value: Any = None

    def set(self, value: Any) -> None:
        """Set the value once; later calls are ignored (only the committer sets it)."""
        if not self._set:
            self._set, self.value = True, value
            self._lock.release()

    def wait(self, timeout: float) -> bool:
        """``True`` once the value is set, ``False`` after ``timeout`` seconds without it."""
        if not self._lock.acquire(timeout=timeout):
            return False
        self._lock.release()
        return True

    def result(self) -> Any:
        self._lock.acquire()
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


class _Led(_Waiter):
    """The future of an item whose caller commits the batch holding it (``EventLog.append``,
    leading): it reads the item's result once the commit returns, so nothing is signalled."""

    __slots__ = ()

    def __init__(self) -> None:
        self._set = True

    def set(self, value: Any) -> None:
        pass


_LED = _Led()


class _Item(msgspec.Struct, eq=False):  # (a Struct: built in C, ~20 bytecodes less than a
    # dataclass's __init__ a save; eq=False: items compare by identity, as `in batch` needs)
    stream: str
    frame: Any
    expect_seq: int | None = None
    effect: Effect | None = None
    future: Future[Appended] | _Waiter | None = None
    aio: tuple[asyncio.AbstractEventLoop, asyncio.Future[Appended]] | None = None
    payload: bytes = b""
    flags: int = 0
    result: Appended | BaseException | int | None = None
    buffered: bool = False  # appended with durable=False: nobody waits for it
    saves: int = 1  # buffered calls this item carries (more than one once joined: a batch)


class GroupCommit:
    """The commit machinery of :class:`~eventlog.log.EventLog` (its base class)."""

    backend: Backend
    txn_hooks: TxnHooks | None
    frame_bytes_max: int
    batch_frames_max: int
    flush_interval: float | None
    _sealer: Sealer
    _serializer: Serializer[Any]
    _compressor: Compressor
    _ids: dict[str, int]
    _names: dict[int, str]
    _cond: threading.Condition
    _queue: collections.deque[_Item]
    _buffers: dict[str, list[_Item]]
    _buffered: int
    _deferred: list[BaseException]
    _stopping: bool
    _failed: BaseException | None
    _failed_lost: int
    _committing: bool
    _tails: dict[int, tuple[int, bytes]]
    _wrote: set[int]  # streams whose tails this commit's attempts set (_TxnWriter.add)
    _gseq: int | None
    # The serial of the transaction that last wrote _gseq (WriteTxn.serial): while the next
    # one's follows it, nothing was committed in between and the log's end need not be read.
    _serial: int | None = None
    # The items the committing thread's transaction writes, and how many times it ran.
    _writing: list[_Item]
    _attempts = 0
    _commits: int
    _log_bytes: int
    _frames_appended: int
    _last_flush: float
    _pid: int
    _writer: threading.Thread | None
    # Values a composition module stages outside the buffers (CheckpointLog's save_instance
    # calls: one list append each); called with the lock held before the buffers are read,
    # it hands them over as buffered frames ``(stream, frame, saves)``, in call order (frame
    # ``None``: the saves were added to the stream's last buffered frame, which it is given
    # through the second argument); its first argument is ``True`` once the log closes or
    # fails: it stages nothing after that.
    stager: Callable[[bool, Callable[[str], Any]], list[tuple[str, Any, int]]] | None = None

    if TYPE_CHECKING:

        @property
        def chain_key(self) -> bytes: ...

    def _unstage_locked(self, final: bool = False) -> None:
        """Take the staged values into the buffers (see :attr:`stager`), after what is there."""
        if self.stager is None:
            return
        for stream, frame, saves in self.stager(final, self._last_buffered):
            buf = self._buffers.setdefault(stream, [])
            if frame is None:
                buf[-1].saves += saves
            else:
                buf.append(_Item(stream, frame, buffered=True, saves=saves))
            self._buffered += saves
        if not final and self._buffered:
            self._ensure_writer()  # as buffering does: close() flushes only with a writer

    def _last_buffered(self, stream: str) -> Any:
        """The last buffered frame of ``stream`` when later values may join it
        (:meth:`DeferredFrame.add`), else ``None``."""
        buf = self._buffers.get(stream)
        last = buf[-1] if buf else None
        if last is None or last.effect is not None or last.expect_seq is not None:
            return None
        return last.frame if isinstance(last.frame, DeferredFrame) else None

    def _drain_buffers_locked(self) -> None:
        self._unstage_locked()
        for buffered in self._buffers.values():
            self._queue.extend(buffered)
        self._buffers.clear()
        self._buffered = 0

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
        queue = self._queue
        if self.flush_interval is not None:  # (the only reader of the time of the last flush)
            self._last_flush = time.monotonic()
        if len(queue) <= self.batch_frames_max:  # all of it (the usual case)
            batch = list(queue)
            queue.clear()
            return batch
        return [queue.popleft() for _ in range(self.batch_frames_max)]

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
                    self._commit(batch)
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
            self._unstage_locked(final=True)
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
        cause, lost = self._failed, self._failed_lost
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
        """Encode and compress outside the transaction (a frame that is not deferred: a
        ``DeferredFrame`` is built and encoded inside it); ``False`` when the item failed."""
        try:
            self._encode(item, item.frame)
        except BaseException as e:  # noqa: BLE001 - delivered to the caller, never swallowed
            item.result = e
            return False
        return True

    def _encode(self, item: _Item, frame: Any, fast: bool = False) -> None:
        """Encode and compress ``frame`` into ``item``; the encoded and stored sizes are bounded
        by ``frame_bytes_max`` so every acknowledged frame also reads back within it."""
        ser = self._serializer
        try:  # (the encoder's own method: its wrapper runs only to name what failed)
            raw = ser.encode_fast(frame)
        except ENCODE_ERRORS:
            raw = ser.encode(frame)  # raises EncodingError, naming the path
        item.payload, item.flags = self._compressor.compress(raw, fast)
        stored, limit = len(item.payload) + HEADER_BYTES, self.frame_bytes_max
        if stored > limit or len(raw) + HEADER_BYTES > limit:
            raise FrameTooLarge(
                f"frame for stream {item.stream!r} is {stored} bytes stored "
                f"({len(raw)} encoded), above frame_bytes_max={self.frame_bytes_max}; "
                "save smaller states (keep large blobs outside the log, store a reference) "
                "or open the log with a larger frame_bytes_max"
            )

    def _run_write(self, items: list[_Item]) -> dict[str, int]:
        hooks = self.txn_hooks
        self._writing, self._attempts = items, 0  # (for _write: a bound method, no closure)
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
            new_ids, txn = self.backend.run_write(self._write, before_lock=pre)
            if moved := txn.moved():  # the backend numbered the log's rows: so do the results
                self._gseq = None if self._gseq is None else self._gseq + moved
                for it in items:
                    if isinstance(res := it.result, Appended):
                        it.result = msgspec.structs.replace(res, global_seq=res.global_seq + moved)
        except BaseException:
            self._tails.clear()  # they may hold what the aborted transaction appended
            self._gseq = None
            if hooks is not None:
                hooks.aborted()
            raise
        if hooks is not None:
            hooks.committed()
        self._commits += 1
        if new_ids:
            self._ids.update(new_ids)
            self._names.update({v: k for k, v in new_ids.items()})
        return new_ids

    def _commit(self, batch: list[_Item]) -> None:
        try:  # (resolving its waiters; an error outside any one frame fails them all)
            frames = [
                it
                for it in batch
                if it.frame is not None
                and (isinstance(it.frame, DeferredFrame) or self._prepare(it))
            ]
            failure: StorageError | None = None  # the storage failed: its frames were not written
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
                        # committing the frames one at a time (each caller gets its own outcome).
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
                cls = res.__class__  # (exact classes: results are never subclasses of these)
                if cls is Appended:
                    self._log_bytes += res.stored_bytes  # type: ignore[union-attr]
                    self._frames_appended += 1
                elif cls is int:
                    self._log_bytes += res  # type: ignore[operator]
                    self._frames_appended += 1
                    it.result = None
            self._resolve(batch)
        except BaseException as e:  # noqa: BLE001 - no batch may stop later commits
            for it in batch:
                it.result = e
            self._resolve(batch)

    def _write(self, txn: WriteTxn) -> tuple[dict[str, int], WriteTxn]:
        """Append the items of :meth:`_run_write` in one transaction; returns the stream ids it
        created or looked up (kept once it commits: ids never change) and ``txn`` (its moved())."""
        items = self._writing
        self._attempts += 1
        if self._attempts > 1:  # a retry: what the aborted attempt cached never committed,
            self._gseq = None  # the tails it set among it (_TxnWriter drops them: _wrote)
        else:
            self._wrote.clear()
        if self.txn_hooks is not None:
            self.txn_hooks.begin()
        w = _TxnWriter(self, txn, items)
        known, tails = w.known, w.tails
        for it in items:
            it.result = None
            stream, effect = it.stream, it.effect
            known_sid = known.get(stream)  # (w.stream_id, w.tail inline for a known stream)
            sid, fresh = (known_sid, False) if known_sid else w.stream_id(stream)
            tail = tails.get(sid) or w.tail(sid, fresh)
            seq = tail[0] + 1
            if it.expect_seq is not None and it.expect_seq != seq and sid not in w.pending_sids:
                tail = tails[sid] = _read_tail(txn, sid)  # a kept tail may be stale: read it
            if it.expect_seq is not None and it.expect_seq != (seq := tail[0] + 1):
                it.result = SequenceConflict(
                    f"stream {stream!r} is at seq {tail[0]}, so this append would get seq "
                    f"{seq}, but it expected seq {it.expect_seq}; another writer appended "
                    "(or an earlier frame failed): reload the stream and try again"
                )
                continue
            deferred = it.frame if isinstance(it.frame, DeferredFrame) else None
            if deferred is not None:
                if w.log_rows and (not deferred.own_stream_reads or sid in w.pending_sids):
                    w.write_pending()
                frame = deferred.build(txn, stream, sid, seq)
                if frame is None:
                    continue  # nothing to append (e.g. deleting an unknown invocation)
                self._encode(it, frame, deferred.fast_compress)  # raising aborts the batch
            if fresh:
                w.register(stream, sid)
            gseq, checksum, size = w.add(sid, seq, tail[1], it)
            if deferred is None and effect is None and it.future is None and it.aio is None:
                it.result = size  # nobody reads where it landed: only count it
                continue
            done = Appended(stream, seq, gseq, checksum, size)
            if effect is not None or (deferred is not None and not deferred.own_stream_reads):
                w.write_pending()
            if deferred is not None:
                deferred.appended(txn, done)
            if effect is not None:
                effect(txn, done, it.frame)
            it.result = done
        if w.log_rows:
            w.write_pending()
        self._gseq, self._serial = w.gseq, w.serial
        if w.new_ids or w.found_ids:
            return {**w.found_ids, **w.new_ids}, txn
        return {}, txn

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
        by_loop: dict[asyncio.AbstractEventLoop, list[_Item]] | None = None  # (made when needed)
        for it in batch:
            fut = it.future
            if fut is _LED:
                continue  # its caller reads it.result
            res = it.result
            if isinstance(fut, _Waiter):
                fut.set(res)
            elif fut is not None:
                _settle_future(fut, res)
            elif it.aio is not None:
                (by_loop := by_loop or {}).setdefault(it.aio[0], []).append(it)
            elif isinstance(res, BaseException):
                with self._cond:
                    self._deferred.append(res)
        if by_loop is None:
            return
        running = asyncio._get_running_loop()  # the loop of this thread, if it leads a commit
        for loop, items in by_loop.items():
            if loop is running:
                _resolve_aio(items)  # committed on the loop's own thread: no wake-up needed
                continue
            # RuntimeError: the loop closed while we committed; nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve_aio, items)


class _TxnWriter:
    """The state of one write transaction of :meth:`EventLog._write`.

    Log and index rows are collected and written with one ``append_indexed`` call;
    :meth:`write_pending` runs before any deferred frame or effect (one that reads only
    its stream's rows: when that stream has some pending), so those see the transaction.
    """

    __slots__ = ("found_ids", "gseq", "index_rows", "known", "log_rows", "new_ids", "next_id",
                 "pending_sids", "seal", "serial", "tails", "txn", "wrote")  # fmt: skip

    def __init__(self, log: GroupCommit, txn: WriteTxn, items: Sequence[_Item] = ()) -> None:
        self.txn, self.known, self.seal = txn, log._ids, log._sealer.seal
        self.tails, self.wrote = log._tails, log._wrote  # (wrote: the streams it appended to)
        self.new_ids: dict[str, int] = {}
        self.found_ids: dict[str, int] = {}  # ids another process gave, read in this txn
        self.next_id: int | None = None
        self.log_rows: list[tuple[bytes, bytes]] = []
        self.index_rows: list[tuple[bytes, bytes]] = []
        self.pending_sids: set[int] = set()  # the streams of log_rows
        # The log's end, read in this transaction (and what append_many checks against: a
        # backend may keep it, as the PostgreSQL one does, sparing a query per commit).
        item: tuple[bytes, bytes] | None = None
        self.serial = serial = txn.serial()
        prev, gseq = log._serial, log._gseq
        if prev is not None and serial == prev + 1 and gseq is not None:
            self.gseq: int = gseq  # nothing was committed since this log's last commit
            return
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
        if log._gseq != found:  # first commit, or another process appended: kept tails go
            if not log.backend.tails_checked:
                self.tails.clear()
            else:  # the backend checks them: only those of the streams written, and a retry's
                for sid in [*(self.known.get(it.stream, 0) for it in items), *self.wrote]:
                    self.tails.pop(sid, None)
            if item is not None:
                self._tail_of_last(item[1], log.chain_key)
        self.gseq = found

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
        self.pending_sids.add(sid)
        self.wrote.add(sid)
        self.tails[sid] = (seq, checksum)
        return gseq, checksum, len(envelope)

    def write_pending(self) -> None:
        if self.log_rows:
            self.txn.append_indexed(LOG, self.log_rows, STREAMS, self.index_rows)
            self.log_rows.clear()
            self.index_rows.clear()
            self.pending_sids.clear()


class DeferredFrame:
    """Base class for :class:`Deferred` frames (the writer recognizes them by type)."""

    __slots__ = ()
    fast_compress = False  # compressed at zstd's fastest level (eventlog.codec.FAST_LEVEL)
    own_stream_reads = False  # True: build and appended read no log or index row but their
    # stream's, so the writer writes the rows pending only for a stream that has some there

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


def _prev_of(envelope: bytes) -> bytes:
    return read_header(envelope)[5]


def _last_seq(txn: ReadTxn, sid: int) -> int:
    for key, _ in txn.scan(STREAMS, U64.pack(sid), U64.pack(sid + 1), reverse=True, limit=1):
        seq: int = U64X2.unpack(key)[1]
        return seq
    return 0


def _read_tail(txn: ReadTxn, sid: int) -> tuple[int, bytes]:
    """``(last seq, its checksum)`` of a stream, read inside the transaction."""
    for key, gkey in txn.scan(STREAMS, U64.pack(sid), U64.pack(sid + 1), reverse=True, limit=1):
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
