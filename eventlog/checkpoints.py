"""CheckpointLog (sync, thread-safe) and Checkpointer (async): checkpoint records on the log.

One stream per invocation. A save becomes a delta frame (or, when the deltas since the last
snapshot outweigh a snapshot, a full snapshot frame), built by the writer thread inside the
write transaction, in call order, against the stream's current head; the head's rows are
updated in that same transaction (eventlog.materialized).

Semantics (openarmature spec §10, 0.17):
- ``save`` is durable on return and first commits the invocation's buffered fan-out saves.
- With ``FanOutInternalSaveBatching(flush_every=N)``, fan-out internal saves are buffered and
  everything buffered is flushed when N have accumulated (the count resets at each flush);
  in-flight-failure saves are buffered without counting. Buffered saves are invisible to
  ``load`` and lost if the process dies: the loss window is at most N fan-out internal saves
  (plus in-flight-failure saves) per checkpointer, or ``flush_interval`` seconds if set. A
  flush the storage refuses raises ``FlushFailed`` and keeps them for the next flush (also when
  the flush was triggered by a buffered save: that save is kept too); ``close()`` that cannot
  write them raises ``BufferedLost``.
- ``delete`` drops the invocation's buffered saves and logs a tombstone; unknown ids: no-op.

Invariants:
- The head cache is touched only by the writer thread; a transaction that aborts drops the
  cache entries it touched, so the next save rebuilds them from the committed rows.
- Before the delta is built, the head's seq is checked against the stream's tail; a head that
  is stale (another process appended) is brought up to date by folding the frames appended
  since (read in the same transaction), or reloaded from the rows when those are many.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import importlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from backends.base import Backend, Durability
from eventlog import arguments as args
from eventlog import views
from eventlog.checkpoint_frames import (
    BATCH_BYTES_MAX,
    HEAD_CACHE_MAX,
    HEAD_ROWS_CACHED_MAX,
    INDEX_END,
    INLINE_LOAD_ROWS_MAX,
    PAGE_BYTES_MAX,
    PAGE_ROWS_MAX,
    SNAPSHOT_BYTES_MAX,
    SNAPSHOT_INSTANCES_MAX,
    TOO_BIG,
    U64_LEN,
    _Columns,
    _Delete,
    _FanOutKey,
    _InstanceChange,
    _InstanceSaves,
    _no_columns,
    _Save,
    _TooBig,
    call_frames,
    check_in_head,
    staged_frames,
)
from eventlog.checkpoint_frames import (
    SNAPSHOT_FRAMES_MAX as SNAPSHOT_FRAMES_MAX,  # noqa: PLC0414 - re-exported
)
from eventlog.checkpoint_heads import HeadCache, _Hooks, damaged_row
from eventlog.codec import encode_value
from eventlog.errors import (
    DamagedRowSkipped,
    InvalidRecord,
    InvalidStreamKey,
    SeqOutOfRange,
    UnknownInvocation,
)
from eventlog.frames import CHECKPOINT_FRAMES, FanOutHeader, ForkOrigin, Tombstone
from eventlog.layout import U64
from eventlog.lazy_load import lazy_record, materialized
from eventlog.log import EventLog, stream_key_bytes
from eventlog.materialized import (
    BY_CORRELATION,
    HEADS,
    LOAD_CHUNK_ROWS,
    TABLES,
    HeadRow,
    corr_prefix,
    decode_row,
    head_of,
    last_snapshot_at_or_before,
    load_rows,
    pending_indices,
    read_head_now,
    read_row,
    read_slots,
    summary,
)
from eventlog.open_options import check_batching
from eventlog.records import (
    NOT_STARTED,
    CheckpointFilter,
    CheckpointRecord,
    CheckpointSummary,
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    HistoryEntry,
    instance_from,
    lineage_from,
)
from eventlog.reports import Stats, VerifyReport
from eventlog.validate import (
    QUICK_ERRORS,
    STATES,
    RecordChecker,
    _progress_encoder,
    check_fan_out_key,
    check_instance_items,
    check_instance_save,
    encode_progress,
    fail,
    plain_result,
    quick_progress,
)
from projections.records import Head, Incoming, apply_inplace, to_record

_encode_progress = _progress_encoder.encode
_NO_POSITIONS: tuple[Any, ...] = ()  # the empty tuple (one object in CPython)
_NO_PARENTS = encode_value(())  # the parent states of a record with none (msgpack [])


class CheckpointLog(HeadCache):
    """Checkpoint records on an :class:`EventLog`. Thread-safe; every method is synchronous."""

    supports_state_migration: ClassVar[bool] = True

    def __init__(
        self,
        log: EventLog,
        *,
        batching: FanOutInternalSaveBatching | None = None,
    ) -> None:
        check_batching("CheckpointLog", batching)
        self.log = log
        self.batching = batching
        self._flush_every = batching.flush_every if batching is not None else 0
        self._pending_lock = threading.Lock()
        self._pending = 0
        # Writer-thread state (see module invariants).
        self._cache: collections.OrderedDict[str, Head] = collections.OrderedDict()
        self._touched: set[str] = set()
        self._sids: dict[str, int] = {}
        # the fan-out layout of each stream's head row as last read or written (a hint: a
        # batch writes its instance rows before the writers' lock by it, and checks it after)
        self._layouts: dict[str, tuple[FanOutHeader, ...]] = {}
        self._row_memo: dict[int, tuple[bytes, HeadRow]] = {}  # sid -> a head row written
        self._checker = RecordChecker(HEAD_CACHE_MAX)  # caller threads (thread-safe)
        self._rejected: list[_InstanceSaves] = []  # committed batches that left changes out
        # save_instance's checks, done once for a run of calls passing the same objects (each
        # a single attribute, replaced whole, so threads never see half of one)
        self._last_stream: object = None
        self._last_key: tuple[Any, Any, Any, _FanOutKey] = (None, None, None, ("", (), ()))
        self.batch_bytes_max = min(BATCH_BYTES_MAX, log.frame_bytes_max // 4)
        # Paged snapshots: a head with more instances than this (or whose last snapshot was
        # bigger) is snapshotted in pages of at most these many rows / bytes, one per frame.
        self.snapshot_instances_max = SNAPSHOT_INSTANCES_MAX
        self.snapshot_bytes_max = min(SNAPSHOT_BYTES_MAX, log.frame_bytes_max // 4)
        self.page_rows_max = PAGE_ROWS_MAX
        self.page_bytes_max = min(PAGE_BYTES_MAX, log.frame_bytes_max // 4)
        self.head_rows_cached_max = HEAD_ROWS_CACHED_MAX
        # load: a fan-out with more instances comes back lazily (chunks of these many rows)
        self.lazy_instances_over, self.lazy_chunk_rows = SNAPSHOT_INSTANCES_MAX, LOAD_CHUNK_ROWS
        # Buffered save_instance calls, staged: one append under _pending_lock each (with the
        # count toward flush_every); the log takes them into its buffers as batch frames,
        # in call order, before it reads its buffers (GroupCommit.stager). Off under a
        # flush_interval (whose timer watches the buffers) and once the log closes or fails.
        self._cols: _Columns = _no_columns()  # the staged calls by column (keys, indices, ...)
        self._staged = self._cols[1]  # their indices: empty when nothing is staged
        self._runs: list[tuple[str, int]] = []  # (stream, first staged change) of each run
        self._staged_stream: object = None  # the stream of the last run
        self._staging = self._flush_every > 0 and log.flush_interval is None
        log.stager = self._unstage if self._staging else None  # (nothing is ever staged)
        log.txn_hooks = _Hooks(self)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = "fsync",
        batching: FanOutInternalSaveBatching | None = None,
        readonly: bool = False,
        **options: Any,
    ) -> CheckpointLog:
        """Open (or create) the checkpoint log in directory ``path``."""
        check_batching(f"opening {os.fspath(path)!r}", batching)
        log = EventLog.open(
            path, durability=durability, readonly=readonly, extra_tables=TABLES, **options
        )
        return cls(log, batching=batching)

    @classmethod
    def on_backend(
        cls, backend: Backend, *, batching: FanOutInternalSaveBatching | None = None, **options: Any
    ) -> CheckpointLog:
        """A checkpoint log on any backend (e.g. ``backends.memory.MemoryBackend()``)."""
        return cls(EventLog(backend, **options), batching=batching)

    # -- saving --------------------------------------------------------------------------------

    def _incoming(self, invocation_id: str, record: Any, kind: str) -> Incoming:
        if not isinstance(invocation_id, str) or not invocation_id:
            raise InvalidStreamKey(f"invocation_id must be a non-empty str, got {invocation_id!r}")
        log = self.log
        if invocation_id not in log._ids:  # a stream with an id was validated already
            stream_key_bytes(invocation_id, log.backend.max_key_bytes)
        if record.__class__ is not CheckpointRecord and (  # (ours: no tuple isinstance)
            record is None or isinstance(record, (dict, list, tuple, str, bytes))
        ):
            fail("record", "a CheckpointRecord (or an object with its attributes)", record)
        if (fans := getattr(record, "fan_out_progress", None)).__class__ is tuple and fans:
            record = materialized(record)  # a loaded record's lazy instances, as tuples
        rec_id = getattr(record, "invocation_id", None)
        if rec_id != invocation_id:
            raise InvalidRecord(
                f"record.invocation_id is {rec_id!r} but the save is for {invocation_id!r}; "
                "pass the record under its own invocation id"
            )
        seen = self._checker.check(invocation_id, record)  # every other field, strictly, by type
        parents = record.parent_states
        return Incoming(  # (kind, record, state, parent_states, seen)
            kind,
            record,
            encode_value(record.state, "state"),
            _NO_PARENTS
            if parents.__class__ is tuple and not parents  # the usual record: none
            else encode_value(tuple(parents), "parent_states"),
            seen,
        )

    def save(self, invocation_id: str, record: Any) -> None:
        """Durably save ``record`` (ours or openarmature's); commits buffered saves first."""
        inc = self._incoming(invocation_id, record, "save")
        self.log.append(invocation_id, _Save(self, inc))

    def save_fan_out_internal(self, invocation_id: str, record: Any) -> None:
        """A fan-out instance internal save: buffered under batching, else like :meth:`save`."""
        inc = self._incoming(invocation_id, record, "fan_out_internal")
        if self._flush_every <= 0:
            self.log.append(invocation_id, _Save(self, inc))
            return
        self.log.append(invocation_id, _Save(self, inc), durable=False)
        if self._count_pending():
            self.log.flush()

    def save_instance(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        index: int,
        progress: Any,
        *,
        namespace: tuple[str, ...] = (),
        lineage: tuple[EnclosingFanOutInstance, ...] = (),
        saved_at: float | None = None,
    ) -> None:
        """Save one fan-out instance's progress: O(1) whatever the fan-out's size.

        The fan-out must be in the invocation's head (saved through a record's
        ``fan_out_progress``). Buffered like :meth:`save_fan_out_internal` under batching.
        """
        cached = self._last_key
        if (  # the common call, checked and staged inline (the same checks as below)
            progress.__class__ is FanOutInstanceProgress
            and index.__class__ is int
            and 0 <= index < INDEX_END
            and invocation_id is self._last_stream
            and saved_at is None
            and cached[0] is fan_out_node_name
            and cached[1] is namespace
            and cached[2] is lineage
            and self._staging
            and progress.state.__class__ is str
            and progress.state in STATES
            and progress.result_is_error.__class__ is bool
            and progress.completed_inner_positions is _NO_POSITIONS
        ):
            try:  # quick_progress, inline
                raw = _encode_progress(progress)
                if not plain_result(progress.result):  # a scalar, or str keys, scalar values
                    raw = quick_progress(progress)  # the exact test (a typed decode)
            except QUICK_ERRORS:  # the slow path below decides
                raw = None
            if raw is not None:
                now = time.time()
                (lock := self._pending_lock).acquire()
                try:  # _stage, inline (by column: no object per call)
                    if staged := self._staging:
                        keys, indices, progs, times, raws = self._cols
                        if invocation_id is not self._staged_stream:
                            self._runs.append((invocation_id, len(indices)))
                            self._staged_stream = invocation_id
                        keys.append(cached[3])
                        indices.append(index)
                        progs.append(progress)
                        times.append(now)
                        raws.append(raw)
                        self._pending += 1
                        if self._pending < self._flush_every:
                            return
                        self._pending = 0
                finally:
                    lock.release()
                if staged or self._stage(
                    invocation_id, _InstanceChange(cached[3], index, progress, now, raw)
                ):
                    self.log.flush()
                return
        change = self._instance_change(
            invocation_id, fan_out_node_name, index, progress, namespace, lineage, saved_at
        )
        if self._flush_every <= 0:
            self.log.append(invocation_id, _InstanceSaves(self, change))
            return
        if self._stage(invocation_id, change):
            self.log.flush()

    def _stage(self, invocation_id: str, change: _InstanceChange) -> bool:
        """Buffer one validated ``save_instance`` call; ``True`` when a flush is due."""
        with self._pending_lock:
            if self._staging:
                if invocation_id is not self._staged_stream:
                    self._runs.append((invocation_id, len(self._staged)))
                    self._staged_stream = invocation_id
                change.stage_into(self._cols)
                self._pending += 1
                if self._pending < self._flush_every:
                    return False
                self._pending = 0
                return True
        new_batch = functools.partial(_InstanceSaves, self)
        self.log.buffer_into(invocation_id, change, new_batch)  # raises if closed
        return self._count_pending()

    def _unstage(self, final: bool, last: Callable[[str], Any]) -> list[tuple[str, Any, int]]:
        """The staged calls as batch frames ``(stream, frame, saves)`` in call order (the
        log's :attr:`~eventlog.commit.GroupCommit.stager`, under its lock, on every enqueue:
        an empty stage answers without the pending lock, as another thread's stage races it)."""
        if not final and not self._staged:
            return []
        with self._pending_lock:
            staged, runs = self._cols, self._runs
            if final:
                self._staging = False
            if not self._staged:
                return []
            self._cols, self._runs, self._staged_stream = _no_columns(), [], None
            self._staged = self._cols[1]
        return staged_frames(self, staged, runs, last)

    def _instance_change(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        index: int,
        progress: Any,
        namespace: tuple[str, ...],
        lineage: tuple[EnclosingFanOutInstance, ...],
        saved_at: float | None,
    ) -> _InstanceChange:
        """Validate one ``save_instance`` call. The invocation id and the fan-out's name,
        namespace and lineage are checked once for a run of calls passing the same objects
        (as a loop over a fan-out's items does); each call's index and progress are checked."""
        cached = self._last_key
        if (  # the common call, checked inline (the same checks, the same outcome)
            progress.__class__ is FanOutInstanceProgress
            and index.__class__ is int
            and 0 <= index < INDEX_END
            and invocation_id is self._last_stream
            and saved_at is None
            and cached[0] is fan_out_node_name
            and cached[1] is namespace
            and cached[2] is lineage
            and progress.state.__class__ is str
            and progress.state in STATES
            and progress.result_is_error.__class__ is bool
            and progress.completed_inner_positions is _NO_POSITIONS
            and (raw := quick_progress(progress)) is not None
        ):
            return _InstanceChange(cached[3], index, progress, time.time(), raw)
        key = self._fan_out_key(invocation_id, fan_out_node_name, namespace, lineage)
        check_instance_save(index, progress, saved_at)
        conv = progress if progress.__class__ is FanOutInstanceProgress else instance_from(progress)
        raw = encode_progress(conv, index)
        return _InstanceChange(
            key, index, conv, time.time() if saved_at is None else float(saved_at), raw
        )

    def _fan_out_key(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        namespace: tuple[str, ...],
        lineage: tuple[EnclosingFanOutInstance, ...],
    ) -> _FanOutKey:
        """The fan-out a ``save_instance`` call names, checked (once for a run of calls
        passing the same immutable objects)."""
        if invocation_id is not self._last_stream:
            stream_key_bytes(invocation_id, self.log.backend.max_key_bytes)
            self._last_stream = invocation_id
        cached = self._last_key
        if (
            cached[0] is not fan_out_node_name
            or cached[1] is not namespace
            or cached[2] is not lineage
        ):
            check_fan_out_key(fan_out_node_name, namespace, lineage)
            key = (fan_out_node_name, tuple(namespace), lineage_from(lineage))
            cached = (fan_out_node_name, namespace, lineage, key)
            if (
                namespace.__class__ is tuple
                and lineage.__class__ is tuple
                and all(x.__class__ is EnclosingFanOutInstance for x in lineage)
            ):  # immutable all the way down: the same objects next time mean the same key
                self._last_key = cached
        return cached[3]

    def save_instances(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        items: Iterable[tuple[int, Any]],
        *,
        namespace: tuple[str, ...] = (),
        lineage: tuple[EnclosingFanOutInstance, ...] = (),
        saved_at: float | None = None,
    ) -> None:
        """Save many instances of one fan-out at once: ``items`` yields ``(index, progress)``
        pairs (an index may repeat: the later wins). O(items), whatever the fan-out's size.

        Every item is checked before anything is queued: a bad one raises what
        :meth:`save_instance` would, naming the item, and nothing of the call is saved; so
        does an index outside the fan-out or a fan-out the head lacks. The call is one batch
        (frames of up to ``BATCH_CHANGES_MAX`` changes, committed together): durable on return
        without batching; under batching buffered like as many ``save_instance`` calls.
        """
        frames = self._instance_batches(
            invocation_id, fan_out_node_name, items, namespace, lineage, saved_at
        )
        if not frames:
            return
        log = self.log
        if self._flush_every <= 0:
            for frame in frames[:-1]:
                log.append(invocation_id, frame, durable=False)
            log.append(invocation_id, frames[-1])  # commits the call's frames with it
            return
        for frame in frames:
            log.append(invocation_id, frame, durable=False)
        if self._count_pending(sum(f.count for f in frames)):
            log.flush()

    def _instance_batches(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        items: Iterable[tuple[int, Any]],
        namespace: tuple[str, ...],
        lineage: tuple[EnclosingFanOutInstance, ...],
        saved_at: float | None,
    ) -> list[_InstanceSaves]:
        """A ``save_instances`` call checked whole (nothing queued yet), as its frames."""
        if isinstance(items, (str, bytes, dict)):
            fail("items", "an iterable of (index, FanOutInstanceProgress) pairs", items)
        try:
            listed = list(items)
        except TypeError:
            fail("items", "an iterable of (index, FanOutInstanceProgress) pairs", items)
        key = self._fan_out_key(invocation_id, fan_out_node_name, namespace, lineage)
        check_instance_save(0, NOT_STARTED, saved_at)
        indices, progs, raws = check_instance_items(listed)
        if not indices:
            return []
        check_in_head(self.log, invocation_id, key, indices)
        at = time.time() if saved_at is None else float(saved_at)
        return call_frames(self, key, indices, progs, at, raws)

    def save_fan_out_in_flight_failure(self, invocation_id: str, record: Any) -> None:
        """Buffered without counting toward ``flush_every`` under batching, else durable."""
        inc = self._incoming(invocation_id, record, "fan_out_in_flight_failure")
        self.log.append(invocation_id, _Save(self, inc), durable=self._flush_every <= 0)

    def _count_pending(self, saves: int = 1) -> bool:
        """Count buffered saves; ``True`` when the buffer is due for a flush."""
        with self._pending_lock:
            self._pending += saves
            if self._pending >= self._flush_every:
                self._pending = 0
                return True
            return False

    def _reset_pending(self) -> None:
        with self._pending_lock:
            self._pending = 0

    def flush(self) -> None:
        """Commit every buffered save now."""
        self._reset_pending()
        self.log.flush()

    def _delete_frame(self, invocation_id: str) -> _Delete:
        """Validate, drop the invocation's buffered saves, and build its tombstone."""
        stream_key_bytes(invocation_id, self.log.backend.max_key_bytes)
        self.log.discard_buffered(invocation_id)
        return _Delete(self, time.time())

    def delete(self, invocation_id: str) -> None:
        """Forget ``invocation_id`` (a tombstone is logged; its history stays for audit)."""
        args.stream_id("invocation_id", invocation_id)
        self.log.append(invocation_id, self._delete_frame(invocation_id))

    # -- reading -------------------------------------------------------------------------------

    def load(self, invocation_id: str) -> CheckpointRecord | None:
        """The latest committed record of ``invocation_id``, or ``None``."""
        args.stream_id("invocation_id", invocation_id)
        record = self._load(invocation_id, None)
        assert not isinstance(record, _TooBig)  # only with a bound
        return record

    async def load_async(self, invocation_id: str) -> CheckpointRecord | None:
        """:meth:`load` for a coroutine: a small record loads on the loop's thread (cheaper than
        a thread hop), a big one (positions, instances, state) on a worker thread."""
        args.stream_id("invocation_id", invocation_id)
        record = self._load(invocation_id, INLINE_LOAD_ROWS_MAX)
        if isinstance(record, _TooBig):
            return await asyncio.to_thread(self.load, invocation_id)
        return record

    def _load(self, invocation_id: str, rows_max: int | None) -> CheckpointRecord | _TooBig | None:
        """:meth:`load`, or :data:`TOO_BIG` (nothing decoded) when rebuilding the head would
        read more than ``rows_max`` rows or state bytes over ``rows_max`` KiB."""
        try:
            return self._load_rows(invocation_id, rows_max)
        except msgspec.DecodeError as e:
            raise damaged_row(invocation_id, e, "loading it") from e

    def _load_rows(
        self, invocation_id: str, rows_max: int | None
    ) -> CheckpointRecord | _TooBig | None:
        backend, now = self.log.backend, None
        if backend.remote:  # one statement, where a read transaction takes six round trips
            now = read_head_now(backend, stream_key_bytes(invocation_id, backend.max_key_bytes))
            if now is None:
                return None
            if rows_max is not None and load_rows(now[1]) > rows_max:
                return TOO_BIG
        if now is None or now[1].layout:  # (fan-outs: their rows, in chunks)
            with backend.read() as txn:
                got = self.log.stream_id(txn, invocation_id) if now is None else now[0]
                got_row = None if got is None else read_row(txn, got)
                if got is None or got_row is None:
                    return None
                if rows_max is not None and load_rows(got_row) > rows_max:
                    return TOO_BIG
                lazy = self.lazy_instances_over
                if now is not None and got_row == now[1]:  # unchanged since: its fan-outs only
                    now[2].slots = read_slots(txn, got, got_row, lazy)
                else:
                    now = got, got_row, head_of(txn, got, got_row, lazy)
        sid, row, head = now
        if rows_max is not None and len(head.state) + len(head.parent_states) > rows_max * 1024:
            return TOO_BIG  # decoding would hold the event loop: the caller hops to a thread
        big = any(hd.instance_count > self.lazy_instances_over for hd in row.layout)
        rec = to_record(head)
        return lazy_record(self, rec, sid, row.seq, row.layout) if big else rec

    def pending_instances(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        *,
        namespace: tuple[str, ...] = (),
        lineage: tuple[EnclosingFanOutInstance, ...] = (),
        errors: bool = False,
    ) -> list[int] | None:
        """Indices of a fan-out's instances still to run in the latest committed record: not
        started or in flight (and, with ``errors``, completed with an error result), ascending.

        What a resumed job asks first. It reads the fan-out's row keys and the state at the
        start of each row without decoding instances or building the record, so it costs one
        key scan plus a list as long as what is left. ``None`` when nothing is saved for
        ``invocation_id``; :class:`InvalidRecord` when its head has no such fan-out.
        """
        args.stream_id("invocation_id", invocation_id)
        args.stream_id("fan_out_node_name", fan_out_node_name)
        args.strings("namespace", namespace)
        key = (fan_out_node_name, tuple(namespace), lineage_from(lineage))
        with self.log.backend.read() as txn:
            sid = self.log.stream_id(txn, invocation_id)
            try:
                row = None if sid is None else read_row(txn, sid)
            except msgspec.DecodeError as e:
                raise damaged_row(invocation_id, e, "reading its fan-outs") from e
            if sid is None or row is None:
                return None
            for hd in row.layout:
                if (hd.fan_out_node_name, hd.namespace, hd.lineage) == key:
                    return pending_indices(txn, sid, hd.fid, hd.instance_count, errors=errors)
        names = sorted({(hd.fan_out_node_name, hd.namespace) for hd in row.layout})
        raise InvalidRecord(
            f"pending_instances for {invocation_id!r}: the head has no fan-out "
            f"{fan_out_node_name!r} in namespace {tuple(namespace)!r} (with that lineage); it "
            f"has {names or 'none'}"
        )

    def list(self, filter: CheckpointFilter | None = None) -> list[CheckpointSummary]:
        """Summaries of saved invocations (by correlation id through its index), oldest first.

        An invocation whose head row does not decode (an older version's bug, bit rot) is
        skipped with a :class:`~eventlog.errors.DamagedRowSkipped` warning naming it: one
        damaged invocation never hides the others. ``verify()`` reports it; ``delete()`` works.
        """
        args.checkpoint_filter(filter)
        rows: list[HeadRow] = []
        damaged: list[int] = []
        with self.log.backend.read() as txn:
            corr = filter.correlation_id if filter is not None else None
            raws: Iterable[tuple[int, bytes | None]]
            if corr is None:
                raws = ((int.from_bytes(k, "big"), v) for k, v in txn.scan(HEADS))
            else:
                raws = (
                    (sid, txn.get(HEADS, U64.pack(sid)))
                    for sid in (
                        int.from_bytes(key[-U64_LEN:], "big")
                        for key, _ in txn.scan_prefix(BY_CORRELATION, corr_prefix(corr))
                    )
                )
            for sid, raw in raws:
                if raw is None:
                    continue
                try:
                    rows.append(decode_row(raw))
                except msgspec.DecodeError:
                    damaged.append(sid)
            names = [self.log.stream_name(txn, sid) for sid in damaged]
        for name in names:
            warnings.warn(
                f"list() skipped invocation {name!r}: its head row does not decode (written "
                "by an older version, or damaged); run verify() for details, delete() it or "
                "restore the log from a backup",
                DamagedRowSkipped,
                stacklevel=2,
            )
        rows.sort(key=lambda r: (r.last_saved_at, r.invocation_id))
        return [summary(r) for r in rows]

    def history(
        self,
        invocation_id: str,
        *,
        since: float | None = None,
        until: float | None = None,
        kinds: Iterable[str] | None = None,
    ) -> Iterator[HistoryEntry]:
        """Every save and delete of ``invocation_id``, oldest first, as full records.

        ``since <= saved_at < until`` and ``kinds`` (save kinds and ``"delete"``) filter what
        is yielded; the fold still reads the whole stream.
        """
        args.stream_id("invocation_id", invocation_id)
        args.timestamp("since", since, optional=True)
        args.timestamp("until", until, optional=True)
        args.strings("kinds", [kinds] if isinstance(kinds, str) else kinds, optional=True)
        chosen = args.history_kinds(kinds)
        self._last_seq(invocation_id)  # an unknown id raises, never reads as no history
        head: Head | None = None
        for sf in self.log.read_stream(invocation_id):
            frame = sf.frame
            if not isinstance(frame, CHECKPOINT_FRAMES):
                continue  # an event appended beside the saves: not part of the record
            head = apply_inplace(head, frame, sf.seq, invocation_id)
            kind = "delete" if isinstance(frame, Tombstone) else frame.kind
            if (since is not None and frame.saved_at < since) or (
                until is not None and frame.saved_at >= until
            ):
                continue
            if chosen is not None and kind not in chosen:
                continue
            yield HistoryEntry(
                sf.seq, frame.saved_at, kind, None if head is None else to_record(head)
            )

    def fork(self, invocation_id: str, *, at: int, new_invocation_id: str) -> ForkOrigin:
        """Start invocation ``new_invocation_id`` from the record as of save ``at`` of
        ``invocation_id`` (durable on return; eventlog.fork). Its first frame carries the
        origin (source, seq, the source frame's checksum), which ``verify`` checks. Raises
        ``UnknownInvocation``, ``SeqOutOfRange``, :class:`NotASave` (``at`` is a delete or an
        event) or :class:`ForkTargetExists`; nothing is written then."""
        from eventlog.fork import fork  # noqa: PLC0415 - fork builds on this class

        return fork(self, invocation_id, at, new_invocation_id)

    def _last_seq(self, invocation_id: str) -> int:
        """The newest seq of ``invocation_id``; :class:`UnknownInvocation` when it has none."""
        last = self.log.last_seq(invocation_id)
        if last == 0:
            raise UnknownInvocation(
                f"no invocation {invocation_id!r} in the log at {self.log.backend.location!r}; "
                "check the id (list() names the saved ones)"
            )
        return last

    def record_at(self, invocation_id: str, seq: int) -> CheckpointRecord | None:
        """The record as of stream seq ``seq`` (``None`` if deleted then, or ``seq`` is 0: before
        the first save). :class:`UnknownInvocation` for an id with no frames,
        :class:`SeqOutOfRange` for a seq outside ``0..last_seq``."""
        args.stream_id("invocation_id", invocation_id)
        args.seq("seq", seq)
        last = self._last_seq(invocation_id)
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
            raise SeqOutOfRange(
                f"seq {seq!r} is outside {invocation_id!r}, whose seqs run 1..{last} (0 means "
                "before the first save); pass a seq in that range"
            )
        if seq == 0:
            return None  # before the first frame nothing was saved
        with self.log.backend.read() as txn:
            sid = self.log.stream_id(txn, invocation_id)
            if sid is None:
                return None
            start = last_snapshot_at_or_before(txn, sid, seq)
        head: Head | None = None
        for sf in self.log.read_stream(invocation_id, start, seq):
            if isinstance(sf.frame, CHECKPOINT_FRAMES):
                head = apply_inplace(head, sf.frame, sf.seq, invocation_id)
        return None if head is None else to_record(head)

    def verify(
        self,
        progress: Callable[[int, int], None] | None = None,
        rows_progress: Callable[[int, int], None] | None = None,
    ) -> VerifyReport:
        """The log's checks (checksums, chains, seqs, index) plus: every materialized row
        (head, state, positions, fan-out rows, indexes) equals the fold of its frames."""
        self.log.check_readable("verify")  # (views.verify_log reports errors as problems)
        return views.verify_log(self.log, progress, rows_progress)

    # The forensic queries moved to eventlog.forensics (forensics.diff(log, ...), ...): these
    # names resolve there, with a DeprecationWarning, for one release (see __getattr__).
    _MOVED: ClassVar[frozenset[str]] = frozenset(
        ("record_as_of", "diff", "replay", "scan", "export", "compact")
    )

    def __getattr__(self, name: str) -> Any:
        if name not in CheckpointLog._MOVED:
            raise AttributeError(f"'CheckpointLog' object has no attribute {name!r}")
        warnings.warn(
            f"CheckpointLog.{name}() is deprecated and goes in the next release: call "
            f"eventlog.forensics.{name}(log, ...) instead (same arguments after the log)",
            DeprecationWarning,
            stacklevel=2,
        )
        # Resolved by name at call time: the checkpoint log never imports the forensics that
        # read it (forensics.open_readonly builds a CheckpointLog).
        function = getattr(importlib.import_module("eventlog.forensics"), name)
        return functools.partial(function, self)

    def stats(self) -> Stats:
        return self.log.stats()

    def close(self) -> None:
        self.log.close()

    def __enter__(self) -> CheckpointLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:
    from eventlog.checkpointer import Checkpointer as Checkpointer  # noqa: PLC0414


def __getattr__(name: str) -> Any:
    """``Checkpointer`` is defined in eventlog.checkpointer (which imports this module) and
    still imports from here, loaded on first use (PEP 562)."""
    if name == "Checkpointer":
        from eventlog.checkpointer import Checkpointer  # noqa: PLC0415

        return Checkpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
