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
import itertools
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar, Final

import msgspec

from backends.base import Backend, Durability, WriteTxn
from eventlog import arguments as args
from eventlog import views
from eventlog.codec import encode_value
from eventlog.errors import (
    DamagedRow,
    DamagedRowSkipped,
    InvalidRecord,
    InvalidStreamKey,
    RetryableWrite,
    SeqOutOfRange,
    UnknownInvocation,
)
from eventlog.frames import (
    CHECKPOINT_FRAMES,
    CheckpointFrame,
    FanOutHeader,
    InstancePage,
    Save,
    Tombstone,
)
from eventlog.layout import LOG, STREAMS, U64, U64X2
from eventlog.log import Appended, DeferredFrame, EventLog, stream_key_bytes
from eventlog.materialized import (
    BODIES,
    BY_CORRELATION,
    HEADS,
    TABLES,
    Book,
    HeadRow,
    book_after,
    book_of,
    change_array,
    corr_prefix,
    decode_row,
    delete_rows,
    encoded,
    last_snapshot_at_or_before,
    load_rows,
    page_at,
    pending_indices,
    read_head,
    read_page,
    read_positions,
    read_row,
    summary,
    write_instance_rows,
    write_instance_saves,
    write_instances,
    write_save,
    write_snapshot_mark,
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
    STATES,
    RecordChecker,
    check_fan_out_key,
    check_instance_items,
    check_instance_save,
    encode_progress,
    fail,
    quick_progress,
)
from projections.records import (
    Head,
    Incoming,
    Slot,
    apply_inplace,
    delta,
    snapshot,
    to_record,
)

SNAPSHOT_FRAMES_MAX: Final = 1024  # record_at folds at most this many frames past a snapshot,
SNAPSHOT_BYTES_PER_FRAME: Final = 64  # or one per this many bytes of it, if that is more: a
# snapshot costs O(its size) to build, so it is paid for by at least size/64 frames (flat per save)
SNAPSHOT_RATIO: Final = 2  # snapshot once the deltas since the last one outweigh it this much
BATCH_CHANGES_MAX: Final = 4096  # buffered save_instance calls joined into one frame, at most
BATCH_BYTES_MAX: Final = 1 << 20  # and their results' bytes (a quarter of frame_bytes_max)
INSTANCE_OVERHEAD_BYTES: Final = 48  # a change's framing besides its result, roughly
HEAD_CACHE_MAX: Final = 4096  # invocations whose head the writer keeps in memory
HEAD_ROWS_CACHED_MAX: Final = 1 << 16  # a bigger head is not kept by save_instance batches
# (they need only its row), so memory does not grow with the fan-out's size
SNAPSHOT_INSTANCES_MAX: Final = 1 << 16  # a head with more instances is snapshotted in pages,
SNAPSHOT_BYTES_MAX: Final = 4 << 20  # as is one whose last snapshot frame was bigger than this
PAGE_ROWS_MAX: Final = 4096  # instance rows per page of a paged snapshot, at most
PAGE_ROWS_MIN: Final = 256  # and at least (a page holds about twice its frame's changes)
PAGE_BYTES_MAX: Final = 1 << 20  # and about this many bytes
INLINE_LOAD_ROWS_MAX: Final = 256  # async load reads at most this many rows (or KiB of state)
# on the event loop; a bigger record loads on a worker thread


class _TooBig:
    """What ``CheckpointLog._load`` returns when the record is too big to load inline."""


TOO_BIG: Final = _TooBig()

U64_LEN = 8
INDEX_END: Final = 2**63  # an index is an int64 (eventlog.validate)
CATCH_UP_FRAMES_MIN: Final = 16  # a stale cached head folds up to this many newer frames,
CATCH_UP_ROWS_PER_FRAME: Final = 4  # or one per this many rows a reload would read, if more


def _snapshot_due(row: HeadRow | None, seq: int) -> bool:
    """Whether the frame at ``seq`` after head row ``row`` starts a snapshot (a snapshot frame,
    or the first page of a paged one; none is due while a paged snapshot is in progress)."""
    if row is None:
        return True
    if row.paging_since:
        return False
    snap = row.snapshot_bytes
    return row.chain_bytes > SNAPSHOT_RATIO * snap or seq - row.snapshot_seq >= max(
        SNAPSHOT_FRAMES_MAX, snap // SNAPSHOT_BYTES_PER_FRAME
    )


class _HeadFrame(DeferredFrame):
    """A save: builds its frame against the stream head, then updates the head's rows."""

    __slots__ = ("owner", "plan")

    def __init__(self, owner: CheckpointLog) -> None:
        self.owner = owner
        # (row before, the delta frame, the head after (None: built on the row alone),
        # stored as a snapshot)
        self.plan: tuple[HeadRow | None, Save, Head | None, bool] | None = None

    def _delta(self, head: Head | None, stream: str) -> tuple[Save, Head]:
        raise NotImplementedError

    def prefetch(self, sid: int) -> Iterable[tuple[str, bytes]]:
        return ((HEADS, U64.pack(sid)),)

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> CheckpointFrame:
        return self._build_on_head(txn, stream, sid, seq, self.owner._row(txn, stream, sid))

    def _build_on_head(
        self, txn: WriteTxn, stream: str, sid: int, seq: int, row: HeadRow | None
    ) -> CheckpointFrame:
        owner = self.owner
        before_head, before_row = owner._head(txn, stream, sid, seq, row)
        frame, head = self._delta(before_head, stream)
        head.seq = seq
        as_snapshot = _snapshot_due(before_row, seq)
        if before_row is not None and (before_row.paging_since or (
            as_snapshot and owner._paged(before_row)
        )):  # fmt: skip
            layout = tuple(s.header for s in head.slots)
            if not before_row.paging_since:  # the first page restates the rest of the record
                frame = msgspec.structs.replace(
                    frame,
                    correlation_id=head.correlation_id,
                    schema_version=head.schema_version,
                    state=head.state,
                    state_splice=None,
                    parent_states=head.parent_states,
                    positions_from=0,
                    positions=tuple(head.positions),
                )
            frame = owner._with_page(
                txn, sid, seq, before_row, frame, layout, head.next_fid, self.overlay(frame)
            )
            as_snapshot = False
        self.plan = (before_row, frame, head, as_snapshot)
        if not as_snapshot:
            return frame
        full = snapshot(head)
        calls = self._calls(frame)
        if calls is not None:  # save_instance calls: keep them, which the record hides
            full = msgspec.structs.replace(full, batch=calls[0], instance_saved_at=calls[1])
        return full

    def _calls(self, frame: Save) -> tuple[tuple[Any, ...], tuple[float, ...]] | None:
        """The ``save_instance`` calls ``frame`` commits, each with its time (``None``: the
        frame is a whole record's)."""
        return None

    def rows_written(self) -> bool:
        """Whether the delta's instance rows are written apart from ``write_save``."""
        return False

    def overlay(self, frame: Save) -> dict[int, dict[int, bytes]]:
        """The frame's instance changes by fan-out id, index -> encoded progress (the later
        change wins)."""
        out: dict[int, dict[int, bytes]] = {}
        for ch in frame.instances:
            out.setdefault(ch.fid, {})[ch.index] = encoded(ch.progress)
        return out

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        assert self.plan is not None
        before_row, frame, head, as_snapshot = self.plan
        assert head is not None
        sid = self.owner._sid_of(done)
        if as_snapshot:
            write_snapshot_mark(txn, sid, done.seq)
            book = Book(done.seq, 0, done.stored_bytes)
        else:
            assert before_row is not None
            book = _book_after(txn, sid, before_row, frame, done)
        row = write_save(
            txn, sid, before_row, frame, head, book=book, rows_written=self.rows_written()
        )
        self.owner._layout_seen(done.stream, row)
        self.owner._cache_put(done.stream, head)


class _Save(_HeadFrame):
    """A whole record (ours or openarmature's), stored as its delta against the head."""

    __slots__ = ("inc",)

    def __init__(self, owner: CheckpointLog, inc: Incoming) -> None:
        super().__init__(owner)
        self.inc = inc

    def _delta(self, head: Head | None, stream: str) -> tuple[Save, Head]:
        return delta(head, self.inc, stream)


_FanOutKey = tuple[str, tuple[str, ...], tuple[EnclosingFanOutInstance, ...]]


class _InstanceChange(msgspec.Struct, frozen=True, gc=False):
    """One ``save_instance`` call, validated by the caller (its bytes are an estimate of its
    size in a frame)."""

    key: _FanOutKey
    index: int
    progress: FanOutInstanceProgress
    saved_at: float
    raw: bytes  # ``progress`` encoded: its row and its frame entry, encoded once

    @property
    def size(self) -> int:
        return len(self.raw) + INSTANCE_OVERHEAD_BYTES


class _RawChange(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Encodes exactly as an :class:`InstanceChange` whose progress is already msgpack bytes
    (decoders read it back as an ``InstanceChange``)."""

    fid: int
    index: int
    progress: msgspec.Raw


class _InstanceSaves(_HeadFrame):
    """Fan-out instance progress without rebuilding the record: O(changes), whatever the
    fan-out's size.

    One ``save_instance`` call, or several buffered calls of one invocation joined in call
    order (:meth:`join`): a batch is one frame (one envelope, one chain link, one index row,
    one head-row update) whose ``instances`` list every change, with ``instance_saved_at``
    giving the time of each. A change the head cannot take (no such fan-out, index out of
    range) is left out of the frame and reported as an :class:`InvalidRecord` by the next
    ``flush()``, so it never takes the rest of its batch down with it.
    """

    __slots__ = ("bytes", "changes", "early", "mixed", "rejected", "rows", "strict")

    def __init__(self, owner: CheckpointLog, change: _InstanceChange) -> None:
        super().__init__(owner)
        self.changes = [change]
        self.bytes = change.size
        self.rejected: list[InvalidRecord] = []
        self.early: tuple[FanOutHeader, ...] | None = None  # the layout rows were written by
        self.strict = False  # a save_instances call's: all of it or nothing, takes no others
        self.mixed = False  # changes of more than one fan-out key
        # (fid, indices, encoded progresses) of a frame built at C speed: its rows
        self.rows: tuple[int, list[int], list[bytes]] | None = None

    @classmethod
    def of_call(cls, owner: CheckpointLog, changes: list[_InstanceChange]) -> _InstanceSaves:
        """One frame of a ``save_instances`` call: refused whole if the head refuses any of
        its changes, and never joined with other calls."""
        batch = cls(owner, changes[0])
        batch.changes = changes
        batch.bytes = sum(len(ch.raw) for ch in changes) + INSTANCE_OVERHEAD_BYTES * len(changes)
        batch.strict = True
        return batch  # one key: the call's

    def _calls(self, frame: Save) -> tuple[tuple[Any, ...], tuple[float, ...]] | None:
        return frame.instances, frame.instance_saved_at or (frame.saved_at,)

    def before_lock(self, txn: WriteTxn, stream: str, sid: int) -> None:
        """The batch's instance rows, keyed by the layout last seen, before the writers' lock
        (the rows are this batch's own: other writers of the fan-out write other instances).
        :meth:`build` checks the layout under the lock."""
        self.early = None
        layout = self.owner._layouts.get(stream)
        if layout is None:
            return
        headers = _headers(layout)
        rows = [
            _RawChange(hd.fid, ch.index, msgspec.Raw(ch.raw))
            for ch in self.changes
            if (hd := headers.get(ch.key)) is not None and 0 <= ch.index < hd.instance_count
        ]
        if rows:
            write_instances(txn, sid, rows)
            self.early = layout

    def join(self, later: Any) -> bool:
        return (
            type(later) is _InstanceSaves
            and not later.strict
            and len(later.changes) == 1
            and self.add(later.changes[0])
        )

    def add(self, value: Any) -> bool:
        if self.strict:
            return False
        changes = self.changes
        size = self.bytes + len(value.raw) + INSTANCE_OVERHEAD_BYTES
        if len(changes) >= BATCH_CHANGES_MAX or size > self.owner.batch_bytes_max:
            return False
        if value.key is not changes[0].key:
            self.mixed = True
        changes.append(value)
        self.bytes = size
        return True

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> CheckpointFrame:
        """Against the head row alone when the writer's cached head is not current (another
        process appended, as when several share a fan-out) and no snapshot is due: the row's
        fan-out layout is all a batch of changes needs, so nothing is caught up or reloaded
        (O(changes), not O(instances) or O(what the others appended)). The frame is the same
        either way."""
        owner = self.owner
        row = owner._row(txn, stream, sid)
        if self.early is not None and (row is None or row.layout != self.early):
            raise RetryableWrite(
                f"the fan-out layout of {stream!r} changed after this batch's instance rows "
                "were written by it (another writer saved the whole record); writing it again"
            )
        cached = owner._cache.get(stream)
        if row is None or (
            (
                (cached is not None and cached.seq == row.seq == seq - 1)
                or (_snapshot_due(row, seq) and not owner._paged(row))
            )
            and load_rows(row) <= owner.head_rows_cached_max
        ):
            return self._build_on_head(txn, stream, sid, seq, row)
        # Stale, or too big to keep in memory: the next save that needs the head reloads it.
        owner._cache.pop(stream, None)
        frame = self._frame(stream, True, _headers(row.layout), None)
        if row.paging_since or _snapshot_due(row, seq):
            if not row.paging_since:  # the first page restates the rest of the record
                k = U64.pack(sid)
                frame = msgspec.structs.replace(
                    frame,
                    correlation_id=row.correlation_id,
                    schema_version=row.schema_version,
                    state=txn.get(BODIES, k + b"s") or b"\xc0",
                    parent_states=txn.get(BODIES, k + b"p") or b"\x90",
                    positions_from=0,
                    positions=tuple(read_positions(txn, sid)),
                )
            frame = owner._with_page(
                txn, sid, seq, row, frame, row.layout, row.next_fid, self.overlay(frame)
            )
        self.plan = (row, frame, None, False)
        return frame

    def _delta(self, head: Head | None, stream: str) -> tuple[Save, Head]:
        headers: dict[_FanOutKey, FanOutHeader] = {}
        slots: dict[int, Slot] = {}
        if head is not None:
            for slot in reversed(head.slots):  # the first fan-out with the key wins
                h = slot.header
                headers[(h.fan_out_node_name, h.namespace, h.lineage)] = h
                slots[h.fid] = slot
        frame = self._frame(stream, head is not None, headers, slots)
        assert head is not None
        head.last_saved_at = frame.saved_at
        head.kind = frame.kind
        return frame, head

    def _frame(
        self,
        stream: str,
        found: bool,
        headers: dict[_FanOutKey, FanOutHeader],
        slots: dict[int, Slot] | None,
    ) -> Save:
        """The frame of the changes the layout takes (the rest go to ``rejected``), each also
        applied to ``slots`` (the writer's head) when given."""
        self.rejected = rejected = []
        self.rows = None
        batch = self.changes
        key = batch[0].key
        hd = headers.get(key)
        if hd is not None and not self.mixed:  # one fan-out (the usual batch): at C speed
            indices = [ch.index for ch in batch]
            if min(indices) >= 0 and max(indices) < hd.instance_count:
                raws = [ch.raw for ch in batch]
                times = [ch.saved_at for ch in batch]
                if slots is not None:
                    slot = slots[hd.fid]
                    insts = slot.instances
                    for ch in batch:
                        insts[ch.index] = ch.progress
                    slot.src = None
                self.rows = (hd.fid, indices, raws)
                return Save(
                    kind="fan_out_internal",
                    saved_at=times[-1],
                    instances=msgspec.Raw(change_array(hd.fid, indices, raws)),  # type: ignore[arg-type]
                    instance_saved_at=tuple(times) if len(times) > 1 else (),
                )
        changes: list[Any] = []  # _RawChange: each progress encoded once, by the caller
        times = []
        for ch in self.changes:
            hd = headers.get(ch.key)
            if hd is None or not 0 <= ch.index < hd.instance_count:
                rejected.append(_instance_error(stream, found, ch, hd))
                continue
            if slots is not None:
                slot = slots[hd.fid]
                slot.instances[ch.index] = ch.progress
                slot.src = None
            changes.append(_RawChange(hd.fid, ch.index, msgspec.Raw(ch.raw)))
            times.append(ch.saved_at)
        if rejected and self.strict:  # a save_instances call: nothing of it is written
            self.rejected = []
            raise InvalidRecord(
                f"{rejected[0]} (save_instances: none of this call's {len(self.changes)} "
                "changes was saved)"
            )
        if not changes:
            first = rejected[0]
            if len(rejected) > 1:
                first.add_note(f"{len(rejected) - 1} more save_instance call(s) were refused")
            self.rejected = []
            raise first
        return Save(
            kind="fan_out_internal",
            saved_at=times[-1],
            instances=tuple(changes),
            instance_saved_at=tuple(times) if len(times) > 1 else (),
        )

    def rows_written(self) -> bool:
        return self.early is not None or self.rows is not None

    def overlay(self, frame: Save) -> dict[int, dict[int, bytes]]:
        if self.rows is None:
            return super().overlay(frame)
        fid, indices, raws = self.rows
        return {fid: dict(zip(indices, raws, strict=True))}

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        assert self.plan is not None
        before_row, frame, head, _ = self.plan
        if self.rows is not None and self.early is None:
            fid, indices, raws = self.rows
            write_instance_rows(txn, self.owner._sid_of(done), fid, indices, raws)
        if head is None:  # built against the row alone: no head to cache
            assert before_row is not None
            sid = self.owner._sid_of(done)
            write_instance_saves(
                txn,
                sid,
                before_row,
                frame,
                seq=done.seq,
                book=_book_after(txn, sid, before_row, frame, done),
                rows_written=self.rows_written(),
            )
        else:
            super().appended(txn, done)
        if self.rejected:
            self.owner._rejected.append(self)


def _book_after(txn: WriteTxn, sid: int, before: HeadRow, frame: Save, done: Appended) -> Book:
    """The head row's bookkeeping after ``frame``; marks a paged snapshot it completes."""
    book, completed = book_after(book_of(before), frame, done.seq, done.stored_bytes)
    if completed:
        write_snapshot_mark(txn, sid, completed, done.seq)
    return book


def _headers(layout: Iterable[FanOutHeader]) -> dict[_FanOutKey, FanOutHeader]:
    """Each fan-out of a layout by its key; the first fan-out with a key wins."""
    return {(h.fan_out_node_name, h.namespace, h.lineage): h for h in reversed(tuple(layout))}


def _instance_error(
    stream: str, found: bool, ch: _InstanceChange, header: FanOutHeader | None
) -> InvalidRecord:
    name, namespace, _ = ch.key
    if not found:
        return InvalidRecord(
            f"save_instance for {stream!r}: nothing is saved for this invocation; save a "
            "record whose fan_out_progress holds the fan-out first"
        )
    if header is None:
        return InvalidRecord(
            f"save_instance for {stream!r}: the head has no fan-out {name!r} in namespace "
            f"{namespace!r}; save a record whose fan_out_progress holds it first"
        )
    return InvalidRecord(
        f"save_instance for {stream!r}: index {ch.index} is outside fan-out {name!r} "
        f"of {header.instance_count} instances"
    )


class _Delete(DeferredFrame):
    __slots__ = ("damaged", "owner", "row", "saved_at")

    def __init__(self, owner: CheckpointLog, saved_at: float) -> None:
        self.owner = owner
        self.saved_at = saved_at
        self.row: HeadRow | None = None
        self.damaged = False

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> Tombstone | None:
        self.owner._sids[stream] = sid
        try:
            self.row = read_row(txn, sid)
        except msgspec.DecodeError:
            self.damaged = True  # an undecodable head row: delete must still work
        if self.row is None and not self.damaged:
            return None  # nothing saved (or already deleted): a no-op, nothing logged
        return Tombstone(saved_at=self.saved_at)

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        assert self.row is not None or self.damaged
        delete_rows(txn, self.owner._sid_of(done), self.row)
        self.owner._cache_drop(done.stream)


class _Hooks:
    """Keeps the writer's head cache consistent with what actually committed."""

    def __init__(self, owner: CheckpointLog) -> None:
        self.owner = owner

    def begin(self) -> None:
        # Entries still marked touched belong to an attempt that never committed (the backend
        # retried the transaction): their heads were changed in place, so drop them.
        self.aborted()

    def committed(self) -> None:
        self.owner._touched.clear()
        batches, self.owner._rejected = self.owner._rejected, []
        for batch in batches:  # changes left out of committed batches: the next flush says so
            for error in batch.rejected:
                self.owner.log.report_deferred(error)

    def aborted(self) -> None:
        for stream in self.owner._touched:
            self.owner._cache.pop(stream, None)
        self.owner._touched.clear()
        self.owner._rejected.clear()


def damaged_row(invocation_id: str, error: Exception, doing: str) -> DamagedRow:
    return DamagedRow(
        f"{invocation_id!r}: its materialized head row does not decode ({error}), so "
        f"{doing} failed; expected a row this version wrote. The frames are intact: "
        "record_at()/history() still read them, verify() reports the damage, and delete() "
        "removes the invocation (or restore the log from a backup)"
    )


class CheckpointLog:
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

    # -- writer-thread helpers -----------------------------------------------------------------

    def _sid_of(self, done: Appended) -> int:
        return self._sids[done.stream]

    def _row(self, txn: WriteTxn, stream: str, sid: int) -> HeadRow | None:
        """The stream's head row, read in the write transaction that is about to change it."""
        self._sids[stream] = sid
        self._touched.add(stream)
        try:
            row = read_row(txn, sid)
        except msgspec.DecodeError as e:
            raise damaged_row(stream, e, "saving to it") from e
        self._layout_seen(stream, row)
        return row

    def _layout_seen(self, stream: str, row: HeadRow | None) -> None:
        layouts = self._layouts
        if row is None:
            layouts.pop(stream, None)
            return
        layouts[stream] = row.layout
        if len(layouts) > HEAD_CACHE_MAX:
            del layouts[next(iter(layouts))]

    def _head(
        self, txn: WriteTxn, stream: str, sid: int, seq: int, row: HeadRow | None
    ) -> tuple[Head | None, HeadRow | None]:
        """The head before the frame at ``seq``, given its row (:meth:`_row`)."""
        if row is None:
            self._cache.pop(stream, None)
            return None, None
        head = self._cache.get(stream)
        if head is not None and head.seq < row.seq == seq - 1:
            head = self._catch_up(txn, stream, sid, head, row)
        if head is None or head.seq != row.seq or row.seq != seq - 1:
            loaded = read_head(txn, sid, row)
            assert loaded is not None
            head = loaded[0]
        self._cache.pop(stream, None)  # re-inserted (most recent) once appended
        return head, row

    def _catch_up(
        self, txn: WriteTxn, stream: str, sid: int, head: Head, row: HeadRow
    ) -> Head | None:
        """``head`` brought from its seq to ``row.seq`` by folding the frames another process
        appended since (read in this transaction), when they are fewer than the rows a reload
        would read; ``None``: reload instead (too many, or a snapshot or tombstone among them).

        With several writer processes on one invocation (a shared fan-out) the cached head is
        stale at almost every commit; reloading it costs O(instances) each time, this costs
        O(frames appended since)."""
        behind = row.seq - head.seq
        if behind > max(CATCH_UP_FRAMES_MIN, load_rows(row) // CATCH_UP_ROWS_PER_FRAME):
            return None
        start, stop = U64X2.pack(sid, head.seq + 1), U64X2.pack(sid, row.seq + 1)
        index = list(txn.scan(STREAMS, start, stop))
        if len(index) != behind:
            return None  # the index disagrees with the head row: let the reload find out
        caught: Head | None = head
        for (key, gkey), data in zip(index, txn.get_many(LOG, [g for _, g in index]), strict=True):
            if data is None:
                return None
            frame = self.log.decode_stored(stream, U64.unpack(gkey)[0], data).frame
            if not isinstance(frame, Save) or caught is None:
                return None
            caught = apply_inplace(caught, frame, U64X2.unpack(key)[1], stream)
        if caught is not None:  # the caller's tuples it last saw no longer describe it
            caught.pos_src = None
            for slot in caught.slots:
                slot.src = None
        return caught

    def _cache_put(self, stream: str, head: Head) -> None:
        self._cache[stream] = head
        self._cache.move_to_end(stream)
        while len(self._cache) > HEAD_CACHE_MAX:
            self._cache.popitem(last=False)

    def _cache_drop(self, stream: str) -> None:
        self._cache.pop(stream, None)

    def _paged(self, row: HeadRow) -> bool:
        """Whether a snapshot of this head is written in pages (too many instances, or a
        last snapshot too big, for one frame)."""
        return (
            sum(hd.instance_count for hd in row.layout) > self.snapshot_instances_max
            or row.snapshot_bytes > self.snapshot_bytes_max
        )

    def _with_page(
        self,
        txn: WriteTxn,
        sid: int,
        seq: int,
        row: HeadRow,
        frame: Save,
        layout: tuple[FanOutHeader, ...],
        next_fid: int,
        overlays: dict[int, dict[int, bytes]],
    ) -> Save:
        """``frame`` carrying the next page of the paged snapshot in progress in ``row`` (or
        its first page, when none is: then the rest of ``frame`` restates the record): the
        instances as they stand after ``frame``, read from the rows with ``frame``'s own
        changes laid over them."""
        first = not row.paging_since
        at = page_at(layout, 0, 0) if first else page_at(layout, row.page_fid, row.page_next)
        back = 0 if first else seq - row.paging_since
        extra: dict[str, Any] = {"layout": layout, "next_fid": next_fid} if first else {}
        if at is None:  # nothing (left) to page: an empty last page completes it
            return msgspec.structs.replace(
                frame, page=InstancePage(back, 0, 0, 0, (), True, **extra)
            )
        fid, start = at
        hd = next(h for h in layout if h.fid == fid)
        overlay = overlays.get(fid, {})
        # Pages follow the saves: a page of about twice the frame's changes (at least
        # PAGE_ROWS_MIN) keeps paging a fixed share of each save's cost, whatever N.
        changed = sum(map(len, overlays.values()))
        rows_max = min(self.page_rows_max, max(PAGE_ROWS_MIN, 2 * changed))
        stop, _, raw = read_page(txn, sid, hd, start, overlay, rows_max, self.page_bytes_max)
        page = InstancePage(
            back,
            fid,
            start,
            stop,
            msgspec.Raw(raw),  # type: ignore[arg-type]  # encodes as the InstanceChange array
            page_at(layout, fid, stop) is None,
            **extra,
        )
        return msgspec.structs.replace(frame, page=page)

    # -- saving --------------------------------------------------------------------------------

    def _incoming(self, invocation_id: str, record: Any, kind: str) -> Incoming:
        if not isinstance(invocation_id, str) or not invocation_id:
            raise InvalidStreamKey(f"invocation_id must be a non-empty str, got {invocation_id!r}")
        stream_key_bytes(invocation_id, self.log.backend.max_key_bytes)
        if record is None or isinstance(record, (dict, list, tuple, str, bytes)):
            fail("record", "a CheckpointRecord (or an object with its attributes)", record)
        rec_id = getattr(record, "invocation_id", None)
        if rec_id != invocation_id:
            raise InvalidRecord(
                f"record.invocation_id is {rec_id!r} but the save is for {invocation_id!r}; "
                "pass the record under its own invocation id"
            )
        seen = self._checker.check(invocation_id, record)  # every other field, strictly, by type
        return Incoming(
            kind=kind,
            record=record,
            state=encode_value(record.state, "state"),
            parent_states=encode_value(tuple(record.parent_states), "parent_states"),
            seen=seen,
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
        change = self._instance_change(
            invocation_id, fan_out_node_name, index, progress, namespace, lineage, saved_at
        )
        if self._flush_every <= 0:
            self.log.append(invocation_id, _InstanceSaves(self, change))
            return
        self.log.buffer_into(invocation_id, change, self._new_batch)
        if self._count_pending():
            self.log.flush()

    def _new_batch(self, change: _InstanceChange) -> _InstanceSaves:
        return _InstanceSaves(self, change)

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
        if (
            progress.__class__ is FanOutInstanceProgress
            and index.__class__ is int
            and 0 <= index < INDEX_END
            and invocation_id is self._last_stream
            and saved_at is None
        ):  # the common call, checked inline (the same checks, the same outcome)
            cached = self._last_key
            state = progress.state
            inner = progress.completed_inner_positions
            if (
                cached[0] is fan_out_node_name
                and cached[1] is namespace
                and cached[2] is lineage
                and state.__class__ is str
                and state in STATES
                and progress.result_is_error.__class__ is bool
                and inner.__class__ is tuple
                and not inner
            ):
                raw = quick_progress(progress)
                if raw is not None:
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
        if self._count_pending(sum(len(f.changes) for f in frames)):
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
        self._check_in_head(invocation_id, key, indices)
        at = time.time() if saved_at is None else float(saved_at)
        changes = list(
            map(_InstanceChange, itertools.repeat(key), indices, progs, itertools.repeat(at), raws)
        )
        frames: list[_InstanceSaves] = []
        start, size = 0, 0
        for k, raw in enumerate(raws):
            size += len(raw) + INSTANCE_OVERHEAD_BYTES
            if k - start >= BATCH_CHANGES_MAX or size > self.batch_bytes_max:
                frames.append(_InstanceSaves.of_call(self, changes[start:k]))
                start, size = k, len(raw) + INSTANCE_OVERHEAD_BYTES
        frames.append(_InstanceSaves.of_call(self, changes[start:]))
        return frames

    def _check_in_head(self, invocation_id: str, key: _FanOutKey, indices: list[int]) -> None:
        """Refuse a call naming a fan-out the committed head lacks, or an index outside it,
        before anything is queued (unless saves of the invocation are buffered, which may add
        it: the writer then refuses the whole call's frames instead)."""
        if self.log.buffered_count(invocation_id):
            return
        with self.log.backend.read() as txn:
            sid = self.log.stream_id(txn, invocation_id)
            try:
                row = None if sid is None else read_row(txn, sid)
            except msgspec.DecodeError:
                return  # the writer says what is wrong with it
        header = None if row is None else _headers(row.layout).get(key)
        name, namespace, _ = key
        if row is None:
            raise InvalidRecord(
                f"save_instances for {invocation_id!r}: nothing is saved for this invocation; "
                "save a record whose fan_out_progress holds the fan-out first (nothing of this "
                "call was saved)"
            )
        if header is None:
            raise InvalidRecord(
                f"save_instances for {invocation_id!r}: the head has no fan-out {name!r} in "
                f"namespace {namespace!r}; save a record whose fan_out_progress holds it first "
                "(nothing of this call was saved)"
            )
        if max(indices) >= header.instance_count:
            k = next(k for k, i in enumerate(indices) if i >= header.instance_count)
            raise InvalidRecord(
                f"save_instances for {invocation_id!r}: items[{k}] has index {indices[k]}, "
                f"outside fan-out {name!r} of {header.instance_count} instances (nothing of "
                "this call was saved)"
            )

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
        """:meth:`load` for a coroutine. A small record loads on the event loop's thread (the
        read costs less than a thread hop); one with many positions or fan-out instances, or
        a large state, loads on a worker thread, so the loop is never held for long."""
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
        with self.log.backend.read() as txn:
            sid = self.log.stream_id(txn, invocation_id)
            if sid is None:
                return None
            row = read_row(txn, sid)
            if row is None:
                return None
            if rows_max is not None and load_rows(row) > rows_max:
                return TOO_BIG
            loaded = read_head(txn, sid, row)
        assert loaded is not None
        head = loaded[0]
        if rows_max is not None and len(head.state) + len(head.parent_states) > rows_max * 1024:
            return TOO_BIG  # decoding would hold the event loop: the caller hops to a thread
        return to_record(head)

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


class Checkpointer:
    """openarmature's ``Checkpointer`` protocol on a :class:`CheckpointLog`.

    Saves are queued before the coroutine's first ``await`` (call order is commit order) and
    awaited through a future the writer resolves: no thread-pool hop per save. Reads run in a
    worker thread so the event loop never waits on the disk.
    """

    supports_state_migration: ClassVar[bool] = True

    def __init__(self, log: CheckpointLog) -> None:
        self.sync = log

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = "fsync",
        batching: FanOutInternalSaveBatching | None = None,
        fan_out_internal_save_batching: FanOutInternalSaveBatching | None = None,
        **options: Any,
    ) -> Checkpointer:
        return cls(
            CheckpointLog.open(
                path,
                durability=durability,
                batching=batching or fan_out_internal_save_batching,
                **options,
            )
        )

    @classmethod
    def on_backend(cls, backend: Backend, **options: Any) -> Checkpointer:
        return cls(CheckpointLog.on_backend(backend, **options))

    async def save(self, invocation_id: str, record: Any) -> None:
        cl = self.sync
        inc = cl._incoming(invocation_id, record, "save")
        await cl.log.append_async(invocation_id, _Save(cl, inc))

    async def save_fan_out_internal(self, invocation_id: str, record: Any) -> None:
        cl = self.sync
        inc = cl._incoming(invocation_id, record, "fan_out_internal")
        if cl._flush_every <= 0:
            await cl.log.append_async(invocation_id, _Save(cl, inc))
            return
        await cl.log.append_async(invocation_id, _Save(cl, inc), durable=False)
        if cl._count_pending():
            await cl.log.flush_async()

    async def save_fan_out_in_flight_failure(self, invocation_id: str, record: Any) -> None:
        cl = self.sync
        inc = cl._incoming(invocation_id, record, "fan_out_in_flight_failure")
        durable = cl._flush_every <= 0
        await cl.log.append_async(invocation_id, _Save(cl, inc), durable=durable)

    async def save_instance(
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
        """Async :meth:`CheckpointLog.save_instance`."""
        cl = self.sync
        change = cl._instance_change(
            invocation_id, fan_out_node_name, index, progress, namespace, lineage, saved_at
        )
        if cl._flush_every <= 0:
            await cl.log.append_async(invocation_id, _InstanceSaves(cl, change))
            return
        cl.log.buffer_into(invocation_id, change, cl._new_batch)
        if cl._count_pending():
            await cl.log.flush_async()

    async def save_instances(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        items: Iterable[tuple[int, Any]],
        *,
        namespace: tuple[str, ...] = (),
        lineage: tuple[EnclosingFanOutInstance, ...] = (),
        saved_at: float | None = None,
    ) -> None:
        """Async :meth:`CheckpointLog.save_instances` (checked and queued before the first
        ``await``)."""
        cl = self.sync
        frames = cl._instance_batches(
            invocation_id, fan_out_node_name, items, namespace, lineage, saved_at
        )
        if not frames:
            return
        log = cl.log
        if cl._flush_every <= 0:
            for frame in frames[:-1]:
                log.append(invocation_id, frame, durable=False)
            await log.append_async(invocation_id, frames[-1])
            return
        for frame in frames:
            log.append(invocation_id, frame, durable=False)
        if cl._count_pending(sum(len(f.changes) for f in frames)):
            await log.flush_async()

    async def load(self, invocation_id: str) -> CheckpointRecord | None:
        return await self.sync.load_async(invocation_id)

    async def pending_instances(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        *,
        namespace: tuple[str, ...] = (),
        lineage: tuple[EnclosingFanOutInstance, ...] = (),
        errors: bool = False,
    ) -> list[int] | None:
        """Async :meth:`CheckpointLog.pending_instances` (on a worker thread: it scans)."""
        return await asyncio.to_thread(
            self.sync.pending_instances,
            invocation_id,
            fan_out_node_name,
            namespace=namespace,
            lineage=lineage,
            errors=errors,
        )

    async def list(self, filter: CheckpointFilter | None = None) -> list[CheckpointSummary]:
        return await asyncio.to_thread(self.sync.list, filter)

    async def delete(self, invocation_id: str) -> None:
        cl = self.sync
        await cl.log.append_async(invocation_id, cl._delete_frame(invocation_id))

    async def flush(self) -> None:
        self.sync._reset_pending()
        await self.sync.log.flush_async()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> Checkpointer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
