"""The deferred frames of the checkpoint write path (eventlog.checkpoints).

Each save, batch of instance saves and delete is a :class:`~eventlog.log.DeferredFrame` that the
writer thread builds inside the write transaction, in call order, against the stream's head
(cached by its :class:`~eventlog.checkpoints.CheckpointLog`), then books into the head's rows
(eventlog.materialized). The tuning constants of the write path live here too.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

import msgspec

from backends.base import WriteTxn
from eventlog.errors import (
    InvalidRecord,
    RetryableWrite,
)
from eventlog.frames import (
    CheckpointFrame,
    FanOutHeader,
    Save,
    Tombstone,
)
from eventlog.layout import U64
from eventlog.log import Appended, DeferredFrame, EventLog
from eventlog.materialized import (
    BODIES,
    HEADS,
    Book,
    BookFields,
    HeadRow,
    book_after,
    book_of,
    cached_change_array,
    change_array,
    delete_rows,
    encoded,
    load_rows,
    read_positions,
    read_row,
    scatter,
    started_array,
    write_instance_rows,
    write_instance_saves,
    write_instances,
    write_save,
    write_snapshot_mark,
)
from eventlog.records import (
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
)
from eventlog.validate import decoded_progresses
from projections.records import (
    Head,
    Incoming,
    Slot,
    delta,
    snapshot,
)

if TYPE_CHECKING:
    from eventlog.checkpoints import CheckpointLog

SNAPSHOT_FRAMES_MAX: Final = 1024  # record_at folds at most this many frames past a snapshot,
SNAPSHOT_BYTES_PER_FRAME: Final = 64  # or one per this many bytes of it, if that is more: a
# snapshot costs O(its size) to build, so it is paid for by at least size/64 frames (flat per save)
SNAPSHOT_RATIO: Final = 4  # snapshot once the deltas since the last one outweigh it this much
# (4, not 2: half the restating per save, issue 22; record_at folds up to 4x the snapshot's bytes)
BATCH_CHANGES_MAX: Final = 4096  # buffered save_instance calls joined into one frame, at most
BATCH_BYTES_MAX: Final = 1 << 20  # and their results' bytes (a quarter of frame_bytes_max)
INSTANCE_OVERHEAD_BYTES: Final = 48  # a change's framing besides its result, roughly
HEAD_CACHE_MAX: Final = 4096  # invocations whose head the writer keeps in memory
HEAD_ROWS_CACHED_MAX: Final = 1 << 16  # a bigger head is not kept by save_instance batches
# (they need only its row), so memory does not grow with the fan-out's size
SNAPSHOT_INSTANCES_MAX: Final = 1 << 16  # a head with more instances is snapshotted in pages,
SNAPSHOT_BYTES_MAX: Final = 4 << 20  # as is one whose last snapshot frame was bigger than this
PAGE_ROWS_MAX: Final = 4096  # instance rows per page of a paged snapshot, at most
PAGE_ROWS_MIN: Final = 256  # and at least
PAGE_ROWS_PER_CHANGE: Final = 2  # otherwise a page holds this many rows per change of its frame
# (more than 1, so that paging overtakes a fan-out saved in index order: at 1 it never did)
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
        if self.__class__ is _Save:  # a whole record's save (_Save._delta, inline)
            if before_head is not None:
                for slot in before_head.slots:
                    own_instances(slot)  # compared with the record's: our copies
            frame, head = delta(before_head, self.inc, stream)
        else:
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
        calls = self._calls(frame)
        return snapshot(  # its instances from the bytes cached beside the head's slots
            head,
            msgspec.Raw(started_array(head.slots)),
            # save_instance calls: keep them, which the record hides
            () if calls is None else calls[0],
            () if calls is None else calls[1],
        )

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
        owner = self.owner
        stream = done.stream
        sid = owner._sids[stream]  # (_sid_of, inline)
        book: BookFields
        if as_snapshot:
            write_snapshot_mark(txn, sid, done.seq)
            book = (done.seq, 0, done.stored_bytes, 0, 0, 0)  # (Book(...), as a plain tuple)
        else:
            assert before_row is not None
            if frame.page is None and not before_row.paging_since:  # a plain save: book_after's
                # first case, inline (the save path of every record, fan-outs or not), as a
                # plain tuple (a Book is built by a Python-level __new__)
                book = (
                    before_row.snapshot_seq, before_row.chain_bytes + done.stored_bytes,
                    before_row.snapshot_bytes, 0, before_row.page_fid, before_row.page_next,
                )  # fmt: skip
            else:
                book = _book_after(txn, sid, before_row, frame, done)
        row = write_save(
            txn, sid, before_row, frame, head, book=book,
            rows_written=self.__class__ is not _Save and self.rows_written(),
            memo=(memo := owner._row_memo),
        )  # fmt: skip
        if len(memo) > HEAD_CACHE_MAX:  # (a memo: an entry dropped is decoded again)
            del memo[next(iter(memo))]
        if head.slots or before_row is None or before_row.layout:  # (else _row saw it: ())
            owner._layout_seen(stream, row)
        owner._cache_put(stream, head)


class _Save(_HeadFrame):
    """A whole record (ours or openarmature's), stored as its delta against the head."""

    __slots__ = ("inc",)
    own_stream_reads = True  # build and appended read the stream's own rows only

    def __init__(self, owner: CheckpointLog, inc: Incoming) -> None:
        self.owner = owner  # (_HeadFrame.__init__, inline: one per save)
        self.plan = None
        self.inc = inc

    def _delta(self, head: Head | None, stream: str) -> tuple[Save, Head]:
        return delta(head, self.inc, stream)


_FanOutKey = tuple[str, tuple[str, ...], tuple[EnclosingFanOutInstance, ...]]
_raw_of = operator.attrgetter("raw")  # of an _InstanceChange, at C speed
_key_of = operator.attrgetter("key")
_index_of = operator.attrgetter("index")
_saved_at_of = operator.attrgetter("saved_at")
_progress_of = operator.attrgetter("progress")
_first = operator.itemgetter(0)


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

    def stage_into(self, cols: _Columns) -> None:
        """Append its fields to ``cols``, a column each."""
        keys, indices, progs, times, raws = cols
        keys.append(self.key)
        indices.append(self.index)
        progs.append(self.progress)
        times.append(self.saved_at)
        raws.append(self.raw)


# A run of changes column by column: keys, indices, progresses, times, encoded progresses (a
# staged run or a save_instances call: no object per change)
_Columns = tuple[list[_FanOutKey], list[int], list[Any], list[float], list[bytes]]
_Headers = dict[_FanOutKey, FanOutHeader]  # a layout's fan-outs by key


def _no_columns() -> _Columns:
    return [], [], [], [], []


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

    __slots__ = ("_changes", "bytes", "cols", "early", "mixed", "rejected", "rows", "strict")
    fast_compress = True  # results of fan-out instances: zstd level 1 is smaller and faster

    def __init__(self, owner: CheckpointLog, change: _InstanceChange) -> None:
        super().__init__(owner)
        self._changes = [change]
        self.cols: _Columns | None = None  # the changes by column, until asked for as objects
        self.bytes = change.size
        self.rejected: list[InvalidRecord] = []
        self.early: tuple[FanOutHeader, ...] | None = None  # the layout rows were written by
        self.strict = False  # a save_instances call's: all of it or nothing, takes no others
        self.mixed = False  # changes of more than one fan-out key
        # (fid, indices, encoded progresses) of a frame built at C speed: its rows
        self.rows: tuple[int, list[int], list[bytes]] | None = None

    @classmethod
    def of_columns(
        cls, owner: CheckpointLog, cols: _Columns, size: int, *, strict: bool
    ) -> _InstanceSaves:
        """A frame of changes given by column (``size``: their sizes, summed); ``strict``: one
        of a ``save_instances`` call (one key), refused whole if the head refuses any of its
        changes and never joined with others."""
        batch = cls.__new__(cls)
        batch.owner, batch.plan, batch.cols, batch._changes = owner, None, cols, []
        batch.bytes, batch.rejected, batch.early, batch.rows = size, [], None, None
        batch.strict = strict
        keys = cols[0]
        batch.mixed = not strict and keys.count(keys[0]) != len(keys)  # (equal keys: one fan-out)
        return batch

    @property
    def changes(self) -> list[_InstanceChange]:
        """The changes in call order, as objects (made from the columns the first time)."""
        cols = self.cols
        if cols is not None:
            self._changes = list(map(_InstanceChange, *cols))
            self.cols = None
        return self._changes

    @property
    def count(self) -> int:
        """How many changes the batch holds."""
        return len(self._changes) if self.cols is None else len(self.cols[1])

    def _columns(self) -> _Columns:
        cols = self.cols
        if cols is not None:
            return cols
        batch = self._changes
        return (
            list(map(_key_of, batch)),
            list(map(_index_of, batch)),
            list(map(_progress_of, batch)),
            list(map(_saved_at_of, batch)),
            list(map(_raw_of, batch)),
        )

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
        one = None if self.mixed else self._in_one_fan_out(headers)
        if one is not None:  # one fan-out (the usual batch): at C speed
            fan, (_, indices, _, _, raws) = one
            write_instance_rows(txn, sid, fan.fid, indices, raws)
            self.early = layout
            return
        rows = [  # the changes the layout takes (build refuses the others under the lock)
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
            and later.count == 1
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

    def _in_one_fan_out(self, headers: _Headers) -> tuple[FanOutHeader, _Columns] | None:
        """A batch's one fan-out and its columns, if ``headers`` has it and takes every index."""
        cols = self.cols if self.cols is not None else self._columns()
        hd = headers.get(cols[0][0])
        if hd is None or min(cols[1]) < 0 or max(cols[1]) >= hd.instance_count:
            return None
        return hd, cols

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
        one = None if self.mixed else self._in_one_fan_out(headers)
        if one is not None:  # one fan-out (the usual batch): at C speed
            fan, (_, indices, progs, times, raws) = one
            if slots is not None:
                slot = slots[fan.fid]  # in call order (the later wins), at C speed
                scatter(slot.instances, indices, progs)
                slot.src = None
                array = cached_change_array(slot, indices, progs, raws)
                lend(slot, indices, raws)
            else:
                array = change_array(fan.fid, indices, raws)
            self.rows = (fan.fid, indices, raws)
            return Save(
                kind="fan_out_internal",
                saved_at=times[-1],
                instances=msgspec.Raw(array),  # type: ignore[arg-type]
                instance_saved_at=tuple(times) if len(times) > 1 else (),
            )
        changes: list[Any] = []  # _RawChange: each progress encoded once, by the caller
        times = []
        if slots is not None:
            for slot in slots.values():
                own_instances(slot)  # (before they are written other than by a batch)
        for ch in self.changes:
            hd = headers.get(ch.key)
            if hd is None or not 0 <= ch.index < hd.instance_count:
                rejected.append(_instance_error(stream, found, ch, hd))
                continue
            if slots is not None:
                slot = slots[hd.fid]
                slot.instances[ch.index] = decoded_progresses([ch.raw])[0]  # (see lend)
                slot.src = None
                slot.synced = False
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


def lend(slot: Slot, indices: list[int], raws: list[bytes]) -> None:
    """Note that a cached batch set ``slot.instances`` at ``indices`` to the callers' objects
    (encoded as ``raws``): :func:`own_instances` replaces them with copies before the head is
    used other than by batches (a whole-record save compares its instances with them; a
    result changed by its caller after the call would compare equal, and the change would be
    lost). Decoding each batch's instances right away costs about 5k instructions a row
    (a 60-byte result), more than the rest of the writer's work on it; so it waits, and a
    head only batches change never pays it. At most about one decode per instance is kept
    pending: past that the slot is made its own at once."""
    borrowed = slot.borrowed
    borrowed.append((indices, raws))
    if sum(map(len, map(_first, borrowed))) > len(slot.instances):
        own_instances(slot)


def own_instances(slot: Slot) -> None:
    """Replace the instances cached batches set to the callers' objects (:func:`lend`) with
    copies decoded from the bytes stored, in order; their cached entries stay true (the
    copies encode as the bytes they were made from, and stand beside them in ``objs``)."""
    if not slot.borrowed:
        return
    borrowed, slot.borrowed = slot.borrowed, []
    objs, insts = slot.objs, slot.instances
    for indices, raws in borrowed:  # in order: the later wins
        owned = decoded_progresses(raws)
        if objs is not None:  # an entry stands for instances[i] while it is objs[i]
            same = list(
                map(operator.is_, map(insts.__getitem__, indices), map(objs.__getitem__, indices))
            )
            if all(same):
                scatter(objs, indices, owned)
            else:
                kept = list(itertools.compress(indices, same))
                scatter(objs, kept, list(itertools.compress(owned, same)))
        scatter(insts, indices, owned)


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


def staged_frames(
    owner: CheckpointLog,
    staged: _Columns,
    runs: list[tuple[str, int]],
    last: Callable[[str], Any],
) -> list[tuple[str, Any, int]]:
    """Staged ``save_instance`` calls, by column (``runs``: each stream's first change in
    them), as buffered batch frames ``(stream, frame, saves)`` in call order, cut as buffering
    each call would cut them (:meth:`_InstanceSaves.add`: the first join the stream's last
    buffered frame, ``last(stream)``, while it takes them; frame ``None``), at C speed."""
    out: list[tuple[str, Any, int]] = []
    n = len(staged[1])
    cut = [start for _, start in runs[1:]] + [n]
    for (stream, begin), end in zip(runs, cut, strict=True):
        into, first = last(stream), begin
        if into is not None:  # rare: a call buffered by buffer_into, or a run taken earlier
            keys, indices, progs, times, raws = staged
            while first < end and into.add(
                _InstanceChange(
                    keys[first], indices[first], progs[first], times[first], raws[first]
                )
            ):
                first += 1
            if first > begin:
                out.append((stream, None, first - begin))
        cols = staged if first == 0 and end == n else _slice(staged, first, end)
        m = end - first
        for start, stop, size in _cuts(owner, cols[4]):
            part = cols if stop - start == m else _slice(cols, start, stop)
            batch = _InstanceSaves.of_columns(owner, part, size, strict=False)
            out.append((stream, batch, stop - start))
    return out


def _slice(cols: _Columns, start: int, stop: int) -> _Columns:
    keys, indices, progs, times, raws = cols
    return (
        keys[start:stop],
        indices[start:stop],
        progs[start:stop],
        times[start:stop],
        raws[start:stop],
    )


def _cuts(owner: CheckpointLog, raws: list[bytes]) -> list[tuple[int, int, int]]:
    """``(start, stop, bytes)`` of each frame changes of encoded progresses ``raws`` make, cut
    at C speed where adding a change would pass ``BATCH_CHANGES_MAX`` changes or
    ``batch_bytes_max`` bytes (sizes as :meth:`_InstanceSaves.add` counts them; a change bigger
    than that alone is a frame of its own): one sum when they all fit in one frame (the usual
    batch)."""
    n = len(raws)
    total = sum(map(len, raws)) + n * INSTANCE_OVERHEAD_BYTES
    if n <= BATCH_CHANGES_MAX and total <= owner.batch_bytes_max:
        return [(0, n, total)] if n else []
    sizes = map(len, raws)
    ends = list(
        itertools.accumulate(map(operator.add, sizes, itertools.repeat(INSTANCE_OVERHEAD_BYTES)))
    )
    out: list[tuple[int, int, int]] = []
    start, base = 0, 0
    while start < n:
        stop = bisect.bisect_right(
            ends, base + owner.batch_bytes_max, start + 1, min(n, start + BATCH_CHANGES_MAX)
        )
        out.append((start, stop, ends[stop - 1] - base))
        start, base = stop, ends[stop - 1]
    return out


def call_frames(
    owner: CheckpointLog,
    key: _FanOutKey,
    indices: list[int],
    progs: list[Any],
    at: float,
    raws: list[bytes],
) -> list[_InstanceSaves]:
    """A ``save_instances`` call's changes (of fan-out ``key``, at time ``at``) as its frames,
    cut at C speed where adding a change would pass ``BATCH_CHANGES_MAX`` changes or
    ``batch_bytes_max`` bytes (a change bigger than that alone is a frame of its own)."""
    n = len(indices)
    cols: _Columns = ([key] * n, indices, progs, [at] * n, raws)
    cuts = _cuts(owner, raws)
    if len(cuts) == 1:  # the whole call: no copy
        return [_InstanceSaves.of_columns(owner, cols, cuts[0][2], strict=True)]
    return [
        _InstanceSaves.of_columns(owner, _slice(cols, a, b), size, strict=True)
        for a, b, size in cuts
    ]


def check_in_head(log: EventLog, invocation_id: str, key: _FanOutKey, indices: list[int]) -> None:
    """Refuse a call naming a fan-out the committed head lacks, or an index outside it,
    before anything is queued (unless saves of the invocation are buffered, which may add
    it: the writer then refuses the whole call's frames instead)."""
    if log.buffered_count(invocation_id):
        return
    with log.backend.read() as txn:
        sid = log.stream_id(txn, invocation_id)
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
