"""The writer's head cache of a CheckpointLog (eventlog.checkpoints).

The deferred frames (eventlog.checkpoint_frames) build each save against the stream's head:
:class:`HeadCache` keeps the heads the writer thread last built (touched only by that thread),
reads a head row inside the write transaction, brings a stale cached head up to date, and
pages big snapshots; :class:`_Hooks` drops what a transaction that did not commit touched.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import msgspec

from backends.base import WriteTxn
from eventlog.checkpoint_frames import (
    CATCH_UP_FRAMES_MIN,
    CATCH_UP_ROWS_PER_FRAME,
    HEAD_CACHE_MAX,
    PAGE_ROWS_MIN,
    PAGE_ROWS_PER_CHANGE,
    _InstanceSaves,
    own_instances,
)
from eventlog.checkpoint_frames import (
    SNAPSHOT_FRAMES_MAX as SNAPSHOT_FRAMES_MAX,  # noqa: PLC0414 - re-exported
)
from eventlog.errors import (
    DamagedRow,
)
from eventlog.frames import (
    FanOutHeader,
    InstancePage,
    Save,
)
from eventlog.layout import LOG, STREAMS, U64, U64X2
from eventlog.log import Appended, EventLog
from eventlog.materialized import (
    HEADS,
    HeadRow,
    decode_row,
    load_rows,
    page_at,
    read_head,
    read_page,
)
from projections.records import (
    Head,
    apply_inplace,
)

if TYPE_CHECKING:
    from eventlog.checkpoint_frames import _InstanceSaves


class _Hooks:
    """Keeps the writer's head cache consistent with what actually committed."""

    __slots__ = ("owner",)

    def __init__(self, owner: HeadCache) -> None:
        self.owner = owner

    def begin(self) -> None:
        # Entries still marked touched belong to an attempt that never committed (the backend
        # retried the transaction): their heads were changed in place, so drop them.
        owner = self.owner
        if owner._touched or owner._rejected:  # (else nothing to drop: the usual commit)
            self.aborted()

    def committed(self) -> None:
        owner = self.owner
        owner._touched.clear()
        if not owner._rejected:
            return
        batches, owner._rejected = owner._rejected, []
        for batch in batches:  # changes left out of committed batches: the next flush says so
            for error in batch.rejected:
                owner.log.report_deferred(error)

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


class HeadCache:
    """The writer-thread helpers of :class:`~eventlog.checkpoints.CheckpointLog` (its base
    class): the attributes below are set by its ``__init__``."""

    log: EventLog
    _cache: collections.OrderedDict[str, Head]
    _touched: set[str]
    _sids: dict[str, int]
    _layouts: dict[str, tuple[FanOutHeader, ...]]
    # sid -> (bytes, row): the head row a save last wrote (write_save), so that reading it back
    # decodes only bytes that differ (a row another process wrote, or a damaged one)
    _row_memo: dict[int, tuple[bytes, HeadRow]]
    _rejected: list[_InstanceSaves]
    snapshot_instances_max: int
    snapshot_bytes_max: int
    page_rows_max: int
    page_bytes_max: int

    def _sid_of(self, done: Appended) -> int:
        return self._sids[done.stream]

    def _row(self, txn: WriteTxn, stream: str, sid: int) -> HeadRow | None:
        """The stream's head row, read in the write transaction that is about to change it."""
        self._sids[stream] = sid
        self._touched.add(stream)
        raw = txn.get(HEADS, U64.pack(sid))
        if raw is None:
            row = None
        elif (memo := self._row_memo.get(sid)) is not None and memo[0] == raw:
            row = memo[1]  # the bytes this row was encoded to: no decode
        else:
            if memo is not None:
                del self._row_memo[sid]
            try:
                row = decode_row(raw)
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
        head = self._cache.pop(stream, None)  # re-inserted (most recent) once appended
        if head is not None and head.seq == row.seq == seq - 1:
            return head, row  # current: the usual save
        if head is not None and head.seq < row.seq == seq - 1:
            for slot in head.slots:
                own_instances(slot)  # (before the fold writes them)
            head = self._catch_up(txn, stream, sid, head, row)
        if head is None or head.seq != row.seq or row.seq != seq - 1:
            loaded = read_head(txn, sid, row)
            assert loaded is not None
            head = loaded[0]
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
        # Pages follow the saves: a page of PAGE_ROWS_PER_CHANGE times the frame's changes
        # (at least PAGE_ROWS_MIN) keeps paging a fixed share of each save's cost, whatever N.
        changed = sum(map(len, overlays.values()))
        rows_max = min(self.page_rows_max, max(PAGE_ROWS_MIN, PAGE_ROWS_PER_CHANGE * changed))
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
