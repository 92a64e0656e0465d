"""Materialized views of checkpoint streams, kept in the same transaction as their frames.

Tables (``sid`` = the stream's u64 id, big-endian):
- ``heads``: sid -> :class:`HeadRow` (small: no state, no positions, no instances);
- ``bodies``: sid + b"s" -> state (msgpack), sid + b"p" -> parent states (msgpack);
- ``positions``: sid + u32 index -> NodePosition;
- ``fanout``: sid + u32 fid + u32 index -> FanOutInstanceProgress (absent = not started);
- ``by_correlation``: u16 length + correlation id (UTF-8) + sid -> b"";
- ``snapshots``: sid + u64 seq -> b"" for every snapshot frame (where ``record_at`` starts).

Invariants:
- After each commit, the rows of a stream equal the fold of its frames (checked by verify).
- Saving one fan-out instance rewrites the head row and one instance row: O(1) bytes, whatever
  the fan-out's size. State rows are rewritten only when the state changed.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import operator
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, NamedTuple

import msgspec

from backends.base import Backend, ReadTxn, WriteTxn
from eventlog.codec import enc_hook
from eventlog.frames import FanOutHeader, Save, Snapshot
from eventlog.layout import STREAM_IDS, U16, U32, U32X2, U64
from eventlog.records import (
    NOT_STARTED,
    CheckpointSummary,
    FanOutInstanceProgress,
    NodePosition,
)
from projections.records import Head, Slot, started_changes

HEADS: Final = "heads"
BODIES: Final = "bodies"
POSITIONS: Final = "positions"
FANOUT: Final = "fanout"
BY_CORRELATION: Final = "by_correlation"
SNAPSHOTS: Final = "snapshots"
TABLES: Final = (HEADS, BODIES, POSITIONS, FANOUT, BY_CORRELATION, SNAPSHOTS)


class HeadRow(msgspec.Struct, frozen=True, array_like=True):
    invocation_id: str
    correlation_id: str
    schema_version: str
    last_saved_at: float
    kind: str
    seq: int
    positions_count: int
    layout: tuple[FanOutHeader, ...]
    next_fid: int
    snapshot_seq: int = 0
    chain_bytes: int = 0  # bytes of frames appended since the last snapshot
    snapshot_bytes: int = 0  # bytes of the last snapshot frame
    # A paged snapshot in progress (eventlog.frames.InstancePage): the seq of its first frame
    # (0: none), and where its next page starts (fan-out id, index).
    paging_since: int = 0
    page_fid: int = 0
    page_next: int = 0


class Book(NamedTuple):
    """A head row's snapshot bookkeeping (the fields after ``next_fid``)."""

    snapshot_seq: int = 0
    chain_bytes: int = 0
    snapshot_bytes: int = 0
    paging_since: int = 0
    page_fid: int = 0
    page_next: int = 0


BookFields = tuple[int, int, int, int, int, int]  # a Book's fields (a Book, or a plain tuple)


def book_of(row: HeadRow | None) -> Book:
    if row is None:
        return Book()
    return Book(
        row.snapshot_seq, row.chain_bytes, row.snapshot_bytes,
        row.paging_since, row.page_fid, row.page_next,
    )  # fmt: skip


def book_after(before: Book, frame: Any, seq: int, stored: int) -> tuple[Book, int]:
    """The bookkeeping after checkpoint frame ``frame`` (stream seq ``seq``, ``stored`` bytes)
    and the seq of the paged snapshot it completes (0: none). The writer and the view's
    rebuild both call it, so their head rows agree byte for byte."""
    if isinstance(frame, Snapshot):
        return Book(seq, 0, stored), 0
    page = getattr(frame, "page", None)
    if page is None:  # the common save: positional, not _replace (a Python-level call)
        snap_seq, chain, snap, since, fid, nxt = before
        return Book(snap_seq, chain + stored, snap, since, fid, nxt), 0
    since = seq - page.back
    if since < 1:  # its first frame is gone (compacted away): a plain save here
        return Book(before.snapshot_seq, before.chain_bytes + stored, before.snapshot_bytes), 0
    chain = stored if page.back == 0 else before.chain_bytes + stored
    if page.last:  # complete: record_at may start at ``since`` from now on
        return Book(seq, 0, chain), since
    return Book(before.snapshot_seq, chain, before.snapshot_bytes, since, page.fid, page.stop), 0


_enc = msgspec.msgpack.Encoder(enc_hook=enc_hook)  # as the caller's checks encode values
NOT_STARTED_ROW: Final = _enc.encode(NOT_STARTED)  # what no row stands for
_dec_row = msgspec.msgpack.Decoder(HeadRow)
_dec_pos = msgspec.msgpack.Decoder(NodePosition)
_dec_inst = msgspec.msgpack.Decoder(FanOutInstanceProgress)
_dec_insts = msgspec.msgpack.Decoder(list[FanOutInstanceProgress])
LOAD_CHUNK_ROWS: Final = 1 << 16  # fan-out rows read and decoded at once by read_instances


def corr_key(correlation_id: str, sid: int) -> bytes:
    raw = correlation_id.encode("utf-8", "surrogatepass")
    return U16.pack(len(raw)) + raw + U64.pack(sid)


def corr_prefix(correlation_id: str) -> bytes:
    raw = correlation_id.encode("utf-8", "surrogatepass")
    return U16.pack(len(raw)) + raw


def decode_row(raw: bytes) -> HeadRow:
    return _dec_row.decode(raw)


def read_row(txn: ReadTxn, sid: int) -> HeadRow | None:
    raw = txn.get(HEADS, U64.pack(sid))
    return None if raw is None else _dec_row.decode(raw)


# What read_head_now reads under a stream id P: its head row, its positions (P + u32) and
# its two bodies (P + "p", P + "s").
_HEAD_SPANS: Final = (
    (HEADS, b"", b"", b"\x00"),
    (POSITIONS, b"", b"", b"\xff" * 5),
    (BODIES, b"", b"p", b"s\x00"),
)


def read_head_now(backend: Backend, name: bytes) -> tuple[int, HeadRow, Head] | None:
    """The stream id, head row and head of the stream whose ``STREAM_IDS`` key is ``name``,
    read as a transaction of its own (:meth:`Backend.get_named_spans_now`: one statement on a
    server, where a read transaction takes six round trips); ``None`` when the stream or its
    head is absent. The head's fan-outs are left empty: their instance rows are read in chunks,
    or lazily, in a read transaction (:func:`read_slots`)."""
    p, spans = backend.get_named_spans_now(STREAM_IDS, name, _HEAD_SPANS)
    if p is None or not spans[0]:
        return None
    heads, positions, bodies = spans
    row = _dec_row.decode(heads[0][1])
    body = dict(bodies)
    positions_ = [_dec_pos.decode(v) for _, v in positions]
    slots = [Slot(hd, []) for hd in row.layout]
    head = _head(row, positions_, body.get(p + b"s"), body.get(p + b"p"), slots)
    return U64.unpack(p)[0], row, head


def read_head(
    txn: ReadTxn, sid: int, row: HeadRow | None = None, lazy_over: int | None = None
) -> tuple[Head, HeadRow] | None:
    """The head of a stream from its rows: O(positions + started instances). ``row``: the
    stream's head row, when the caller read it already in this transaction. ``lazy_over``: a
    fan-out with more instances is left empty (its rows unread; the caller reads them lazily)."""
    if row is None:
        row = read_row(txn, sid)
    return None if row is None else (head_of(txn, sid, row, lazy_over), row)


def head_of(txn: ReadTxn, sid: int, row: HeadRow, lazy_over: int | None) -> Head:
    """:func:`read_head` of a stream whose head row the caller read: ``row``."""
    k = U64.pack(sid)
    positions = [_dec_pos.decode(v) for _, v in txn.scan_prefix(POSITIONS, k)]
    slots = read_slots(txn, sid, row, lazy_over)
    return _head(row, positions, txn.get(BODIES, k + b"s"), txn.get(BODIES, k + b"p"), slots)


def read_slots(txn: ReadTxn, sid: int, row: HeadRow, lazy_over: int | None) -> list[Slot]:
    """The fan-outs of a stream whose head row is ``row``, each with its instances from their
    rows (one with more than ``lazy_over`` left empty: the caller reads it lazily)."""
    return [
        Slot(
            hd,
            []
            if lazy_over is not None and hd.instance_count > lazy_over
            else read_instances(txn, sid, hd),
        )
        for hd in row.layout
    ]


def _head(
    row: HeadRow,
    positions: list[NodePosition],
    state: bytes | None,
    parent_states: bytes | None,
    slots: list[Slot],
) -> Head:
    """The head of a stream from its rows (an absent body: its empty value)."""
    return Head(
        invocation_id=row.invocation_id,
        correlation_id=row.correlation_id,
        schema_version=row.schema_version,
        state=state or b"\xc0",
        parent_states=parent_states or b"\x90",
        positions=positions,
        last_saved_at=row.last_saved_at,
        kind=row.kind,
        slots=slots,
        next_fid=row.next_fid,
        seq=row.seq,
    )


def read_positions(txn: ReadTxn, sid: int) -> list[NodePosition]:
    return [_dec_pos.decode(v) for _, v in txn.scan_prefix(POSITIONS, U64.pack(sid))]


def read_instances(txn: ReadTxn, sid: int, hd: FanOutHeader) -> list[FanOutInstanceProgress]:
    """Every instance of fan-out ``hd`` from its rows (absent: not started), the rows read in
    bulk (:meth:`ReadTxn.prefix_rows`)."""
    instances: list[FanOutInstanceProgress] = [NOT_STARTED] * hd.instance_count
    prefix = U64.pack(sid) + U32.pack(hd.fid)
    start, stop = prefix, prefix + U32.pack(hd.instance_count)
    while True:  # chunks of rows, each decoded by one call (a msgpack array of the values)
        chunk = txn.rows(FANOUT, start, stop, LOAD_CHUNK_ROWS)
        if not chunk:
            return instances
        n = len(chunk)
        first = U32.unpack_from(chunk[0][0], 12)[0]
        last = U32.unpack_from(chunk[-1][0], 12)[0]
        decoded = _dec_insts.decode(_array_header(n) + b"".join(map(_second, chunk)))
        if last - first + 1 == n:  # dense (keys ascend): one slice
            instances[first : last + 1] = decoded
        else:
            for (key, _), x in zip(chunk, decoded, strict=True):
                instances[U32.unpack_from(key, 12)[0]] = x
        if n < LOAD_CHUNK_ROWS:
            return instances
        start = chunk[-1][0] + b"\x00"


def read_instance_range(
    txn: ReadTxn, sid: int, hd: FanOutHeader, first: int, stop: int
) -> list[FanOutInstanceProgress]:
    """Instances ``first..stop-1`` of fan-out ``hd`` from its rows (absent: not started), the
    rows read at once and decoded by one call: what a lazily loaded record reads per chunk."""
    instances: list[FanOutInstanceProgress] = [NOT_STARTED] * (stop - first)
    prefix = U64.pack(sid) + U32.pack(hd.fid)
    chunk = txn.rows(FANOUT, prefix + U32.pack(first), prefix + U32.pack(stop), stop - first)
    if not chunk:
        return instances
    decoded = _dec_insts.decode(_array_header(len(chunk)) + b"".join(map(_second, chunk)))
    lo = U32.unpack_from(chunk[0][0], 12)[0]
    if U32.unpack_from(chunk[-1][0], 12)[0] - lo + 1 == len(chunk):  # dense: one slice
        instances[lo - first : lo - first + len(chunk)] = decoded
    else:
        for (key, _), x in zip(chunk, decoded, strict=True):
            instances[U32.unpack_from(key, 12)[0] - first] = x
    return instances


def head_rows(txn: ReadTxn) -> Iterator[tuple[int, bytes]]:
    """``(sid, undecoded head row)`` of every checkpoint stream with a head, in sid order."""
    for key, raw in txn.scan(HEADS):
        yield U64.unpack(key)[0], raw


def snapshot_marks(txn: ReadTxn) -> int:
    """How many snapshot frames the log's checkpoint streams hold."""
    return txn.count(SNAPSHOTS)


def instance_progress(txn: ReadTxn, sid: int) -> Iterator[FanOutInstanceProgress]:
    """Every started instance of every fan-out of the stream (rows in key order)."""
    for _, raw in txn.scan_prefix(FANOUT, U64.pack(sid)):
        yield _dec_inst.decode(raw)


def load_rows(row: HeadRow) -> int:
    """How many rows rebuilding the head reads at most (positions and fan-out instances)."""
    return row.positions_count + sum(hd.instance_count for hd in row.layout)


def summary(row: HeadRow) -> CheckpointSummary:
    return CheckpointSummary(
        row.invocation_id, row.correlation_id, row.last_saved_at, row.positions_count
    )


def write_save(
    txn: WriteTxn,
    sid: int,
    before: HeadRow | None,
    delta: Save,
    head: Head,
    *,
    book: BookFields,
    rows_written: bool = False,
    memo: dict[int, tuple[bytes, HeadRow]] | None = None,
) -> HeadRow:
    """Apply ``delta`` (which took the stream from ``before`` to ``head``) to the rows, with
    snapshot bookkeeping ``book`` (``rows_written``: its instance rows are written already, by
    :func:`write_instances`). ``memo``: gets ``sid -> (the head row's bytes, the row)``."""
    k = U64.pack(sid)
    if delta.state is not None or delta.state_splice is not None:
        txn.put(BODIES, k + b"s", head.state)
    if delta.parent_states is not None:
        txn.put(BODIES, k + b"p", head.parent_states)
    start = delta.positions_from
    if start >= 0:
        positions = delta.positions
        if len(positions) == 1:  # the usual save: one position more (one call)
            txn.put(POSITIONS, k + U32.pack(start), _enc.encode(positions[0]))
        else:
            txn.put_many(
                POSITIONS,
                [(k + U32.pack(i), _enc.encode(p)) for i, p in enumerate(positions, start)],
            )  # overwrites rows below the old count in place
        new_count = start + len(positions)
        if before is not None and new_count < before.positions_count:
            for i in range(new_count, before.positions_count):
                txn.delete(POSITIONS, k + U32.pack(i))
    if delta.layout is not None and before is not None:
        kept = {hd.fid for hd in delta.layout}
        for hd in before.layout:
            if hd.fid not in kept:
                txn.delete_prefix(FANOUT, k + U32.pack(hd.fid))
    if delta.instances and not rows_written:
        _write_instances(txn, k, delta.instances)
    correlation = head.correlation_id
    if before is None or before.correlation_id != correlation:
        if before is not None:
            txn.delete(BY_CORRELATION, corr_key(before.correlation_id, sid))
        txn.put(BY_CORRELATION, corr_key(correlation, sid), b"")
    slots = head.slots
    row = HeadRow(  # positional: keywords cost a Struct ~1k instructions more
        head.invocation_id, correlation, head.schema_version, head.last_saved_at,
        head.kind, head.seq, len(head.positions),
        tuple([s.header for s in slots]) if slots else (), head.next_fid, *book,
    )  # fmt: skip
    raw = _enc.encode(row)
    txn.put(HEADS, k, raw)
    if memo is not None:
        memo[sid] = (raw, row)
    return row


def write_instances(txn: WriteTxn, sid: int, instances: Iterable[Any]) -> None:
    """The instance rows of changes ``instances`` (``InstanceChange``-shaped: fid, index,
    progress), in order."""
    _write_instances(txn, U64.pack(sid), instances)


def _write_instances(txn: WriteTxn, k: bytes, instances: Iterable[Any]) -> None:
    rows: list[tuple[bytes, bytes]] = []
    pack, encode, raw_type = U32X2.pack, _enc.encode, msgspec.Raw
    for ch in instances:
        key = k + pack(ch.fid, ch.index)
        p: Any = ch.progress  # a batch carries each instance encoded already (msgspec.Raw)
        value = p if p.__class__ is bytes else bytes(p) if p.__class__ is raw_type else encode(p)
        if value == NOT_STARTED_ROW:  # absent = not started (is_not_started, as bytes)
            if rows:  # keep the order: an index may change more than once in a batch
                txn.put_many(FANOUT, rows)
                rows = []
            txn.delete(FANOUT, key)
        else:
            rows.append((key, value))
    if rows:
        txn.put_many(FANOUT, rows)


def write_instance_saves(
    txn: WriteTxn,
    sid: int,
    before: HeadRow,
    delta: Save,
    *,
    seq: int,
    book: Book,
    rows_written: bool = False,
) -> HeadRow:
    """Apply ``delta``, a frame of instance changes only (which leaves every field of the
    head row but its time, kind, seq and chain alone), to the rows: O(changes), with no
    :class:`Head` at hand. Writes what :func:`write_save` would for the same frame
    (``rows_written``: its instance rows are written already, by :func:`write_instances`)."""
    k = U64.pack(sid)
    if not rows_written:
        _write_instances(txn, k, delta.instances)
    row = msgspec.structs.replace(
        before,
        last_saved_at=delta.saved_at,
        kind=delta.kind,
        seq=seq,
        snapshot_seq=book.snapshot_seq,
        chain_bytes=book.chain_bytes,
        snapshot_bytes=book.snapshot_bytes,
        paging_since=book.paging_since,
        page_fid=book.page_fid,
        page_next=book.page_next,
    )
    txn.put(HEADS, k, _enc.encode(row))
    return row


def full_save(head: Head) -> Save:
    """A delta from nothing to ``head``: every row of it gets written."""
    return Save(
        kind=head.kind,
        saved_at=head.last_saved_at,
        correlation_id=head.correlation_id,
        schema_version=head.schema_version,
        state=head.state,
        parent_states=head.parent_states,
        positions_from=0,
        positions=tuple(head.positions),
        instances=started_changes(head.slots),
    )


def write_snapshot_mark(txn: WriteTxn, sid: int, seq: int, completed: int = 0) -> None:
    """Mark a snapshot starting at ``seq``: a snapshot frame (``completed`` 0), or a paged
    snapshot whose last page is at seq ``completed`` (the mark is written then)."""
    txn.put(SNAPSHOTS, U64.pack(sid) + U64.pack(seq), U64.pack(completed) if completed else b"")


def last_snapshot_at_or_before(txn: ReadTxn, sid: int, seq: int) -> int:
    """The seq where folding for the record at ``seq`` starts: the newest snapshot ``<= seq``
    complete by ``seq`` (1 when none: fold from the start)."""
    k = U64.pack(sid)
    for key, v in txn.scan(SNAPSHOTS, k, k + U64.pack(seq + 1), reverse=True, limit=2):
        if not v or U64.unpack(v)[0] <= seq:
            found: int = U64.unpack_from(key, 8)[0]
            return found
    return 1


def page_at(layout: Iterable[FanOutHeader], fid: int, start: int) -> tuple[int, int] | None:
    """Where a paged snapshot's page after ``(fid, start)`` begins in ``layout`` (fan-outs in
    fid order), or ``None``: every instance is paged."""
    for hd in sorted(layout, key=lambda h: h.fid):
        if hd.fid == fid and start < hd.instance_count:
            return fid, start
        if hd.fid > fid and hd.instance_count > 0:
            return hd.fid, 0
    return None


def read_page(
    txn: ReadTxn,
    sid: int,
    hd: FanOutHeader,
    start: int,
    overlay: dict[int, bytes],
    rows_max: int,
    bytes_max: int,
) -> tuple[int, int, bytes]:
    """``(stop, rows, raw)``: the instance rows of fan-out ``hd`` from index ``start`` (at most
    ``rows_max`` rows or about ``bytes_max`` bytes; ``stop``: the first index not covered)
    with ``overlay`` (a frame's changes not yet in the rows, index -> encoded progress) laid
    over them, not-started instances left out, as the msgpack array of ``InstanceChange``s an
    :class:`~eventlog.frames.InstancePage` holds (``raw``; ``rows`` entries). Assembled from
    the rows' bytes at C speed (no instance is decoded or encoded)."""
    prefix = U64.pack(sid) + U32.pack(hd.fid)
    count = hd.instance_count
    pairs = txn.rows(FANOUT, prefix + U32.pack(start), prefix + U32.pack(count), rows_max)
    stop = count
    keys: Sequence[bytes] = ()
    values: Sequence[bytes] = ()
    if pairs:
        keys, values = zip(*pairs, strict=True)  # (the rows as two tuples, at C speed)
    del pairs
    if sum(map(len, values)) > bytes_max:  # (accumulated only when cut: rarely)
        cut = bisect.bisect_left(list(itertools.accumulate(map(len, values))), bytes_max) + 1
        keys, values = keys[:cut], values[:cut]
        stop = U32.unpack_from(keys[-1], 12)[0] + 1
    elif len(keys) >= rows_max:
        stop = U32.unpack_from(keys[-1], 12)[0] + 1
    indices = list(map(_first, _ROW_INDEX.iter_unpack(b"".join(keys))))
    laid = (  # (the frame's changes are seldom in the page: two C-speed bounds first)
        {i: v for i, v in overlay.items() if start <= i < stop}
        if overlay and max(overlay) >= start and min(overlay) < stop
        else None
    )
    if laid:
        rows = dict(zip(indices, values, strict=True))
        rows.update(laid)
        merged = sorted((i, v) for i, v in rows.items() if v != NOT_STARTED_ROW)
        indices, values = [i for i, _ in merged], [v for _, v in merged]
    return stop, len(indices), change_array(hd.fid, indices, values)


def change_array(fid: int, indices: list[int], raws: Sequence[bytes]) -> bytes:
    """The msgpack array of ``InstanceChange(fid, index, progress)`` for each index and
    encoded progress, assembled from the bytes at C speed."""
    n = len(indices)
    parts = [b"\x93" + _enc.encode(fid)] * (3 * n)  # each entry's head, then by slices (no
    parts[1::3] = list(map(_enc.encode, indices))  # tuple per change): its index and progress
    parts[2::3] = raws
    return _array_header(n) + b"".join(parts)


def change_entries(fid: int, indices: list[int], raws: list[bytes]) -> list[bytes]:
    """Each ``InstanceChange(fid, index, progress)`` of :func:`change_array`, encoded alone
    (``b"".join`` of them, after the array header, is :func:`change_array`), at C speed."""
    # (one join of (head, index, progress) each: zip reuses its tuple, and each entry is
    # allocated once, where two concatenations made an intermediate; ~0.5k instructions a row)
    parts = zip(itertools.repeat(b"\x93" + _enc.encode(fid)), map(_enc.encode, indices), raws)
    return list(map(b"".join, parts))


def started_array(slots: Iterable[Slot]) -> bytes:
    """The msgpack array that :func:`~projections.records.started_changes` of ``slots``
    encodes to, joined at C speed from each instance's entry cached beside its slot
    (:attr:`Slot.entries`, kept by :func:`cached_change_array`): an instance not cached as that
    very object is encoded (and cached) first, so a snapshot encodes only what changed since
    the last one other than by a batch. A not-started instance is left out by its bytes (one
    equal to ``NOT_STARTED`` encodes as ``NOT_STARTED_ROW``)."""
    parts: list[bytes] = []
    total = 0
    for s in slots:
        insts, objs, entries = s.instances, s.objs, s.entries
        n = len(insts)
        if objs is None or entries is None or len(objs) != n or len(entries) != n:
            s.objs = objs = [NOT_STARTED] * n
            s.entries = entries = [b""] * n
            s.synced = False
        if not s.synced and any(map(operator.is_not, insts, objs)):
            stale = list(itertools.compress(range(n), map(operator.is_not, insts, objs)))
            fresh = list(map(insts.__getitem__, stale))
            raws = list(map(_enc.encode, fresh))
            new = change_entries(s.header.fid, stale, raws)
            _set_entries(objs, entries, stale, fresh, raws, new)
        s.synced = True  # (no scan while only cached batches change it: Slot.synced)
        parts.append(b"".join(entries))
        total += n - entries.count(b"")
    return _array_header(total) + b"".join(parts)


def cached_change_array(
    slot: Slot, indices: list[int], progs: list[Any], raws: list[bytes]
) -> bytes:
    """:func:`change_array` of ``progs``, just set at ``indices`` of ``slot`` in order (the
    later wins) and encoded as ``raws``; their entries are kept for :func:`started_array`
    when the slot has its cache."""
    objs, entries = slot.objs, slot.entries
    if objs is None or entries is None:
        return change_array(slot.header.fid, indices, raws)
    new = change_entries(slot.header.fid, indices, raws)
    _set_entries(objs, entries, indices, progs, raws, new)
    return _array_header(len(new)) + b"".join(new)


def _set_entries(
    objs: list[Any],
    entries: list[bytes],
    indices: list[int],
    progs: list[Any],
    raws: list[bytes],
    new: list[bytes],
) -> None:
    """``entries[i]``, ``objs[i]`` = ``new[k]`` (empty: not started), ``progs[k]`` for each
    ``i = indices[k]``, in order (``new`` is built whole first: the pairs stay true)."""
    if NOT_STARTED_ROW in raws:
        new = [b"" if r == NOT_STARTED_ROW else e for e, r in zip(new, raws, strict=True)]
    scatter(entries, indices, new)
    scatter(objs, indices, progs)


def scatter(target: list[Any], indices: list[int], values: list[Any]) -> None:
    """``target[indices[k]] = values[k]`` for each ``k`` in order, at C speed (through
    ``operator.setitem``: cheaper per item than the list's bound ``__setitem__``)."""
    collections.deque(map(operator.setitem, itertools.repeat(target), indices, values), 0)


# A fan-out row's key: sid, fid (the batch's 12-byte prefix, packed once), index. Packing the
# constant prefix as bytes spares converting sid and fid again per row (~0.26k instructions)
_ROW_KEY: Final = struct.Struct(">12sI")
_ROW_INDEX: Final = struct.Struct(">12xI")  # its index alone


def write_instance_rows(
    txn: WriteTxn, sid: int, fid: int, indices: list[int], raws: list[bytes]
) -> None:
    """The rows of changes ``(fid, index, encoded progress)`` in order (the later wins), at C
    speed; a change back to not started deletes its row."""
    if NOT_STARTED_ROW in raws:
        _write_instances(txn, U64.pack(sid), map(_RowChange, itertools.repeat(fid), indices, raws))
        return
    keys = map(_ROW_KEY.pack, itertools.repeat(U64.pack(sid) + U32.pack(fid)), indices)
    rows = list(zip(keys, raws, strict=False))
    built = getattr(txn.__class__, "put_built", None)  # our keys: LMDB skips their checks (a
    if built is None:  # wrapper's class, as a test's recorder, has none: it sees put_many)
        txn.put_many(FANOUT, rows)
    else:
        built(txn, FANOUT, rows)


class _RowChange(msgspec.Struct, frozen=True, gc=False):
    fid: int
    index: int
    progress: bytes


_first: Final = operator.itemgetter(0)  # of a (key, value) row: at C speed
_second: Final = operator.itemgetter(1)
_third: Final = operator.itemgetter(2)


def _array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` elements."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def encoded(progress: Any) -> bytes:
    """An instance's row bytes (``progress`` is a ``FanOutInstanceProgress`` or, in a batch,
    already encoded as ``msgspec.Raw``)."""
    return bytes(progress) if progress.__class__ is msgspec.Raw else _enc.encode(progress)


_COMPLETED: Final = b"\xa9completed"  # an instance row's state, right after the array header


def pending_indices(txn: ReadTxn, sid: int, fid: int, count: int, *, errors: bool) -> list[int]:
    """Indices of fan-out ``fid`` (``count`` instances) not completed in the rows, ascending;
    with ``errors``, completed ones whose result is an error too.

    Reads keys and the first bytes of each started instance's row: no instance is decoded
    (except completed ones when ``errors``), so a mostly finished fan-out of any size costs
    one key scan and a list as long as what is left to run.
    """
    prefix = U64.pack(sid) + U32.pack(fid)
    out: list[int] = []
    expect = 0
    for key, v in txn.scan_prefix(FANOUT, prefix):
        i: int = U32.unpack_from(key, 12)[0]
        if i > expect:
            out.extend(range(expect, i))  # absent rows: not started
        if v[1:11] != _COMPLETED or (errors and _dec_inst.decode(v).result_is_error):
            out.append(i)
        expect = i + 1
    out.extend(range(expect, count))
    return out


def delete_rows(txn: WriteTxn, sid: int, row: HeadRow | None) -> None:
    """Remove every materialized row of a stream (its frames stay in the log). ``row`` None:
    the head row does not decode, so the correlation index is searched for the stream's key
    (O(invocations), only for a damaged row)."""
    k = U64.pack(sid)
    txn.delete_prefix(POSITIONS, k)
    txn.delete_prefix(FANOUT, k)
    txn.delete(BODIES, k + b"s")
    txn.delete(BODIES, k + b"p")
    if row is not None:
        txn.delete(BY_CORRELATION, corr_key(row.correlation_id, sid))
    else:
        stale = [key for key, _ in txn.scan(BY_CORRELATION) if key.endswith(k)]
        for key in stale:
            if U16.unpack_from(key)[0] + 2 + len(k) == len(key):
                txn.delete(BY_CORRELATION, key)
    txn.delete(HEADS, k)
