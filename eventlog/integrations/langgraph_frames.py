"""LangGraph write path: the frames built in the write transaction (:class:`PutFrame`,
:class:`WritesFrame`, :class:`RemoveFrame`, :class:`CopiedFrame`) and ``lg_latest`` upkeep.

Part of :mod:`eventlog.integrations.langgraph_store` (which re-exports it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from backends.base import WriteTxn, prefix_end
from eventlog.errors import CheckpointError
from eventlog.frames import (
    BLOB_APPEND,
    BLOB_EMPTY,
    BLOB_FULL,
    BLOB_PATCH,
    LgBlob,
    LgCheckpoint,
    LgRemove,
    LgWrites,
)
from eventlog.integrations.langgraph_blobs import (
    BlobReader,
    Chain,
    Memo,
    Patches,
    Pending,
    full_blob,
)
from eventlog.integrations.langgraph_links import (
    LINK_PREFIX,
    encode_link_data,
    encode_links,
    link_id,
    old_latest_blobs,
    split_links,
)
from eventlog.integrations.langgraph_rows import (
    BLOBS,
    CHECKPOINTS,
    INLINE_MAX,
    LATEST,
    READS,
    THREADS,
    WRITES,
    LatestHead,
    LatestWrites,
    Serde,
    _dec_latest_writes,
    _enc,
    apply_checkpoint,
    apply_rows,
    blob_key,
    checkpoint_key,
    decode_latest_head,
    drop_latest,
    latest_blobs_key,
    latest_checkpoint,
    latest_key,
    latest_values,
    latest_versions,
    latest_writes_key,
    newer_than_latest,
    write_key,
    writes_prefix,
)
from eventlog.layout import U64
from eventlog.log import Appended, DeferredFrame, EventLog
from projections.langgraph import (
    CkptRow,
    checkpoint_row,
    rebase,
    version_key,
)

# -- writing: frames built in the write transaction -------------------------------------------


class ViewFrame(DeferredFrame):
    """A frame whose views are updated by :func:`apply_rows` in the same transaction."""

    def __init__(self, tkey: bytes) -> None:
        self.tkey = tkey
        self.sid = 0
        self.frame: Any = None
        self.fresh = False  # apply_rows: a checkpoint, the stream's first (its view was empty)

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        self.fresh = apply_rows(txn, self.sid, done.seq, self.frame, self.tkey)


class PutFrame(ViewFrame):
    fast_compress = True  # zstd's fastest level: a put's frame is small (durable_ir: -4k)

    def __init__(
        self,
        tkey: bytes,
        head: LgCheckpoint,
        pending: list[Pending],
        serde: Serde,
        log: EventLog | None = None,
    ) -> None:
        """``log``: where keeping ``lg_latest`` reads a channel it cannot take from the put or
        the previous row (without it the put drops the stream's latest rows)."""
        super().__init__(tkey)
        self.head = head
        self.pending = pending
        self.serde = serde
        self.log = log
        # A delta checks its base in the write transaction (build may store it whole): without
        # one the frame is ``head`` as planned (its blobs are the planned ones).
        self.deltas = False
        # the memos to keep once committed, and the channels stored whole or patched
        self.memos: list[tuple[str, Memo | None]] = []
        self.fulls: list[tuple[str, tuple[str, bytes]]] = []
        for p in pending:
            blob = p.blob
            if blob.kind in (BLOB_APPEND, BLOB_PATCH):
                self.deltas = True
            if p.memo is not None:
                self.memos.append((blob.channel, p.memo))
            if p.full is not None:
                self.fulls.append((blob.channel, p.full))

    def prefetch(self, sid: int) -> Iterable[tuple[str, bytes]]:
        for planned in self.pending:
            blob = planned.blob
            if blob.kind in (BLOB_APPEND, BLOB_PATCH):
                yield BLOBS, blob_key(sid, blob.channel, planned.base_vkey)
        ckey = checkpoint_key(sid, self.head.checkpoint_id)
        yield CHECKPOINTS, ckey  # apply_rows: a checkpoint stored again replaces its rows
        yield READS, ckey
        yield THREADS, self.tkey
        mine = {p.blob.channel for p in self.pending}
        for channel, version in self.head.versions.items():  # make_read_row reads these
            if channel not in mine:
                yield BLOBS, blob_key(sid, channel, version_key(version))
        big = any(
            p.blob.kind == BLOB_FULL and len(p.blob.data) > INLINE_MAX for p in self.pending
        )  # apply_rows reads the parent's row to tell a patched channel's keyframe
        if self.head.parent_id is not None and (big or len(mine) < len(self.head.versions)):
            yield READS, checkpoint_key(sid, self.head.parent_id)
        yield LATEST, latest_key(self.tkey)
        yield LATEST, latest_writes_key(self.tkey)
        yield LATEST, latest_blobs_key(self.tkey)

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        log, sid, frame, tkey = self.log, self.sid, self.frame, self.tkey
        if log is None or not isinstance(frame, LgCheckpoint):
            super().appended(txn, done)
            drop_latest(txn, tkey)
            return
        # The c row first (apply_rows leaves it alone): a checkpoint newer than the one it
        # names is new to the stream, so apply_rows reads none of its rows (newer_than_latest).
        head = latest_head(txn, tkey)
        newer = newer_than_latest(head, sid, frame.checkpoint_id)
        seq = done.seq
        row = checkpoint_row(seq, frame)  # (the read row and the c row share it)
        mine = {b.channel: b for b in frame.blobs}
        fresh = self.fresh = apply_checkpoint(txn, sid, seq, frame, tkey, newer, row, mine)

        def reader() -> BlobReader:  # keeps nothing: chains as stored, as verify reads them
            return BlobReader(
                log, txn, sid, _no_loads, Patches(log.frame_bytes_max), keyframes=False
            )

        keep_latest(txn, frame, sid, tkey, seq, reader, fresh=fresh, head=head, row=row, mine=mine)

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> LgCheckpoint:
        if not self.deltas:
            self.sid, self.frame = sid, self.head
            return self.head
        blobs: list[LgBlob] = []
        memos: list[tuple[str, Memo | None]] = []
        fulls: list[tuple[str, tuple[str, bytes]]] = []
        for planned in self.pending:
            p, blob = planned, planned.blob
            if blob.kind in (BLOB_APPEND, BLOB_PATCH) and txn.get(
                BLOBS, blob_key(sid, blob.channel, p.base_vkey)
            ) != U64.pack(blob.base):
                # The base is gone (thread deleted, version re-put): store the value in full.
                p = full_blob(
                    blob.channel, blob.version, version_key(blob.version), p.value, self.serde
                )
            blobs.append(p.blob)
            memos.append((p.blob.channel, p.memo))
            if p.full is not None:
                fulls.append((p.blob.channel, p.full))
        frame = msgspec.structs.replace(self.head, blobs=tuple(blobs))
        self.sid, self.memos, self.fulls, self.frame = sid, memos, fulls, frame
        return frame


class _Prev:
    """The previous ``c`` row as :func:`keep_latest` reads it: its checkpoint id and ``apart``
    links decoded, its versions and chains only when a channel needs them (a put whose every
    channel is stored whole needs neither)."""

    __slots__ = ("_head", "_values", "_versions", "apart", "checkpoint_id")

    def __init__(self, head: LatestHead) -> None:
        self._head = head
        self.checkpoint_id = head.checkpoint_id
        self.apart = head.apart
        self._versions: dict[str, str | int | float] | None = None
        self._values: tuple[tuple[str, Chain], ...] | None = None

    @property
    def versions(self) -> dict[str, str | int | float]:
        if self._versions is None:
            self._versions = latest_versions(self._head)
        return self._versions

    @property
    def values(self) -> tuple[tuple[str, Chain], ...]:
        if self._values is None:
            self._values = latest_values(self._head)
        return self._values


def latest_head(txn: WriteTxn, tkey: bytes) -> LatestHead | None:
    """The stream's ``c`` row as a put reads it (``None``: absent, or it does not decode)."""
    raw = txn.get(LATEST, latest_key(tkey))
    return None if raw is None else decode_latest_head(raw)


_UNREAD: Any = object()


def keep_latest(
    txn: WriteTxn,
    frame: LgCheckpoint,
    sid: int,
    tkey: bytes,
    seq: int,
    make_reader: Callable[[], BlobReader],
    *,
    fresh: bool = False,
    head: LatestHead | None = _UNREAD,
    row: CkptRow | None = None,
    mine: dict[str, LgBlob] | None = None,
) -> None:
    """Update ``lg_latest`` for the checkpoint ``frame`` just stored at ``seq`` (its rows are
    applied; ``fresh``: :func:`apply_rows` found the stream's view empty before it, so it is
    the stream's only checkpoint). Each channel's chain (the blobs :meth:`BlobReader.chain`
    reads: a full value, or a delta and its keyframe) comes from the frame's own blob and the
    previous row's keyframe, from the previous row when unchanged, and failing those from the
    blob index through ``make_reader()`` (after a fallback). Drops the rows when it cannot read
    what it needs. The writer, ``rebuild`` and compaction run it alike (with the frames each
    can read).

    The previous row is decoded as far as the put needs it (:class:`_Prev`); a row that does
    not decode counts as absent. ``head``: that row as the caller read it in this transaction
    (:func:`latest_head`, after nothing wrote it), else it is read here. ``row``, ``mine``:
    ``checkpoint_row(seq, frame)`` and the frame's blobs by channel, when the caller has them."""
    if head is _UNREAD:
        head = latest_head(txn, tkey)
    if mine is None:
        mine = {b.channel: b for b in frame.blobs}
    if row is None:
        row = checkpoint_row(seq, frame)
    try:
        _keep_latest(txn, frame, sid, tkey, seq, make_reader, head, fresh, row, mine)
    except msgspec.DecodeError:  # raised before anything is written
        _keep_latest(txn, frame, sid, tkey, seq, make_reader, None, fresh, row, mine)


def _keep_latest(
    txn: WriteTxn,
    frame: LgCheckpoint,
    sid: int,
    tkey: bytes,
    seq: int,
    make_reader: Callable[[], BlobReader],
    head: LatestHead | None,
    fresh: bool,
    row: CkptRow,
    mine: dict[str, LgBlob],
) -> None:
    cid = frame.checkpoint_id
    if head is not None and cid < head.checkpoint_id:
        newest = _Prev(head).versions
        # An older checkpoint: the newest one is unchanged, unless this put re-stored a
        # channel version that it reads.
        if any(
            b.channel in newest and version_key(newest[b.channel]) == version_key(b.version)
            for b in frame.blobs
        ):
            drop_latest(txn, tkey)
        return
    if head is None and not fresh:
        top = latest_checkpoint(txn, sid)
        if top is None or top[0] != cid:
            return  # not the newest: the rows stay absent (readers fall back)
    split = None if head is not None and head.apart else _stored_whole(frame, mine, seq)
    if split is None:  # (the previous row is decoded further only here)
        prev = None if head is None else _Prev(head)
        reader: BlobReader | None = None
        values: list[tuple[str, Chain]] = []
        try:
            for channel, version in frame.versions.items():
                chain = _known_chain(channel, version, mine.get(channel), seq, prev)
                if chain is None:
                    if reader is None:
                        reader = make_reader()
                    chain = reader.chain(channel, version) or ()
                values.append((channel, chain))
        except CheckpointError:  # a frame it would read is damaged: readers fall back
            drop_latest(txn, tkey)
            return
        split = _split_apart(txn, tkey, sid, seq, values, prev)
        if split is None:  # a kept keyframe's data is gone from the k row: readers fall back
            drop_latest(txn, tkey)
            return
    # Encoded as the tuple of a LatestRow's fields (the same msgpack array, no struct built).
    latest = (
        sid, cid, row, frame.checkpoint_type, frame.checkpoint,
        frame.versions, split[0], split[1],
    )  # fmt: skip
    txn.put(LATEST, latest_key(tkey), _enc.encode(latest))
    prefix = writes_prefix(sid, cid)  # ends in UTF-8: never all 0xff, so it has an end
    if not txn.rows(WRITES, prefix, prefix_end(prefix) or prefix, 1):
        txn.put(LATEST, latest_writes_key(tkey), _enc.encode((cid, ())))  # LatestWrites
    else:  # writes stored before (a re-put): readers read them from the write rows
        txn.delete(LATEST, latest_writes_key(tkey))


def _stored_whole(
    frame: LgCheckpoint, mine: dict[str, LgBlob], seq: int
) -> tuple[tuple[tuple[str, Chain], ...], tuple[tuple[int, str], ...]] | None:
    """The chains of ``frame`` (at ``seq``) when it stores every channel of its versions
    whole and inline, or empty (a small state's put: nothing else is read), else ``None``."""
    values: list[tuple[str, Chain]] = []
    for channel in frame.versions:
        b = mine.get(channel)
        if b is None:
            return None
        if b.kind == BLOB_FULL and len(b.data) <= INLINE_MAX:
            values.append((channel, ((seq, b),)))
        elif b.kind == BLOB_EMPTY:
            values.append((channel, ()))
        else:
            return None
    return tuple(values), ()


def _split_apart(
    txn: WriteTxn,
    tkey: bytes,
    sid: int,
    at: int,
    values: list[tuple[str, Chain]],
    prev: _Prev | None,
) -> tuple[tuple[tuple[str, Chain], ...], tuple[tuple[int, str], ...]] | None:
    """``values`` with the data of links over ``INLINE_MAX`` bytes taken out, and those links
    (``apart``). Writes a data row for each that has none yet (a link of this put, at ``at``,
    or one a fallback read) and the ``k`` link row naming them when they changed: only small
    rows are ever rewritten (:mod:`eventlog.integrations.langgraph_links`). ``None`` when data
    it needs is not at hand (then the rows are dropped: readers fall back)."""
    was = prev.apart if prev is not None else ()
    carried = set(was)
    fresh: dict[tuple[int, str], bytes] = {}
    apart: list[tuple[int, str]] = []
    out: list[tuple[str, Chain]] = []
    for ch, chain in values:
        links = []
        for seq, link in chain:
            key = (seq, link.channel)
            b = link
            if len(b.data) > INLINE_MAX:
                fresh[key] = b.data
                b = msgspec.structs.replace(b, data=b"")
            elif not (key in carried and not b.data):
                links.append((seq, b))
                continue
            if key not in apart:
                apart.append(key)
            links.append((seq, b))
        out.append((ch, tuple(links)))
    kkey = latest_blobs_key(tkey)
    # no c row, no k row: drop_latest deletes them together (a first put reads no more)
    raw_k = None if prev is None else txn.get(LATEST, kkey)
    named = set(split_links(raw_k))
    ids = [link_id(sid, seq, ch) for seq, ch in apart]
    old: dict[tuple[int, str], bytes] | None = None
    new: list[tuple[int, str, bytes, bytes]] = []
    for (seq, ch), lid in zip(apart, ids, strict=True):
        if lid in named:
            continue  # its data row is there (a link row names only rows that are)
        data = fresh.get((seq, ch))
        if data is None:  # carried over from a row written before data rows: its k row
            if old is None:
                old = old_latest_blobs(raw_k) or {}
            data = old.get((seq, ch))
            if data is None:
                return None  # (before writing anything: no data row is left unnamed)
        new.append((seq, ch, lid, data))
    for seq, ch, lid, data in new:
        dkey = LINK_PREFIX + lid
        if seq == at or txn.get(LATEST, dkey) is None:  # rows of this put's seq are new
            txn.put(LATEST, dkey, encode_link_data(ch, data))
    row = encode_links(ids)
    if raw_k != row and (raw_k is not None or ids):
        txn.put(LATEST, kkey, row)  # (an empty one rather than a delete: no round trip)
        for lid in named.difference(ids):  # no longer the newest checkpoint's: gone
            txn.discard(LATEST, LINK_PREFIX + lid)
    return tuple(out), tuple(apart)


def _known_chain(
    channel: str,
    version: str | int | float,
    b: LgBlob | None,
    seq: int,
    prev: _Prev | None,
) -> Chain | None:
    """A channel's chain from the put's own blob (``b``, at ``seq``: a full value, or a delta
    whose keyframe ends the previous row's chain) or the previous latest row, ``None`` when
    neither has it (then the blob index is read)."""
    if b is not None:
        if b.kind == BLOB_EMPTY:
            return ()
        if b.kind == BLOB_FULL:
            return ((seq, b),)
        if prev is not None and b.kind in (BLOB_APPEND, BLOB_PATCH):
            for ch, base in prev.values:
                if ch == channel and base and base[-1][0] == b.base:
                    return ((seq, b), base[-1])
        return None
    if prev is None or channel not in prev.versions:
        return None
    if version_key(prev.versions[channel]) != version_key(version):
        return None
    for ch, chain in prev.values:
        if ch == channel:
            return chain
    return None


def _no_loads(data: tuple[str, bytes]) -> Any:
    raise AssertionError("keep_latest resolves bytes only")


class WritesFrame(ViewFrame):
    def __init__(self, tkey: bytes, frame: LgWrites) -> None:
        super().__init__(tkey)
        self.planned = frame
        self.latest: LatestWrites | None = None  # the w row, as build read it

    def prefetch(self, sid: int) -> Iterable[tuple[str, bytes]]:
        f = self.planned
        return [
            *(
                (WRITES, write_key(sid, f.checkpoint_id, f.task_id, w.idx))
                for w in f.writes
                if w.idx >= 0
            ),
            (LATEST, latest_writes_key(self.tkey)),
            (THREADS, self.tkey),
        ]

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> LgWrites | None:
        f = self.planned
        raw = txn.get(LATEST, latest_writes_key(self.tkey))
        lw = self.latest = None if raw is None else _dec_latest_writes.decode(raw)
        if lw is not None and lw.checkpoint_id == f.checkpoint_id:
            # the w row holds exactly the checkpoint's writes: no write row to read
            task = f.task_id
            stored = {w.idx for t, _, w in lw.writes if t == task}
            keep = tuple([w for w in f.writes if w.idx < 0 or w.idx not in stored])
        else:
            keep = tuple(
                [
                    w
                    for w in f.writes
                    if w.idx < 0
                    or txn.get(WRITES, write_key(sid, f.checkpoint_id, f.task_id, w.idx)) is None
                ]
            )
        if not keep:
            return None  # every write is already stored: nothing to append
        self.sid = sid
        frame = (
            f
            if len(keep) == len(f.writes)
            else LgWrites(
                checkpoint_id=f.checkpoint_id,
                task_id=f.task_id,
                task_path=f.task_path,
                writes=keep,
                saved_at=f.saved_at,
            )
        )
        self.frame = frame
        return frame

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        frame, lw = self.frame, self.latest
        if not isinstance(frame, LgWrites):
            super().appended(txn, done)
            return
        # build read the w row (nothing wrote it since): present, lg_threads names the stream
        apply_rows(txn, self.sid, done.seq, frame, self.tkey, newer=lw is not None)
        keep_latest_writes(txn, self.tkey, frame, lw)


def keep_latest_writes(
    txn: WriteTxn, tkey: bytes, frame: LgWrites, lw: LatestWrites | None = _UNREAD
) -> None:
    """Add the writes of ``frame`` (its rows applied) to the ``lg_latest`` writes row when they
    belong to its checkpoint (an upsert, as the write rows are). ``lw``: that row as the caller
    read it in this transaction (``None``: absent), else it is read here."""
    if lw is _UNREAD:
        raw = txn.get(LATEST, latest_writes_key(tkey))
        lw = None if raw is None else _dec_latest_writes.decode(raw)
    if lw is None:
        return
    if lw.checkpoint_id != frame.checkpoint_id:
        return
    kept = {(task, w.idx): (task, path, w) for task, path, w in lw.writes}
    for w in frame.writes:
        kept[frame.task_id, w.idx] = (frame.task_id, frame.task_path, w)
    out = LatestWrites(lw.checkpoint_id, tuple(kept.values()))
    txn.put(LATEST, latest_writes_key(tkey), _enc.encode(out))


class RemoveFrame(ViewFrame):
    def __init__(self, tkey: bytes, ids: tuple[str, ...] | None, reason: str) -> None:
        super().__init__(tkey)
        self.ids = ids
        self.reason = reason

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> LgRemove | None:
        ids = self.ids
        if ids is None:
            if txn.get(THREADS, self.tkey) is None:
                return None  # nothing stored: a no-op, nothing logged
        else:
            ids = tuple(
                cid
                for cid in ids
                if txn.get(READS, checkpoint_key(sid, cid)) is not None
                or txn.get(CHECKPOINTS, checkpoint_key(sid, cid)) is not None
                or next(iter(txn.scan_prefix(WRITES, writes_prefix(sid, cid), limit=1)), None)
            )
            if not ids:
                return None
        frame = LgRemove(checkpoint_ids=ids, reason=self.reason, saved_at=time.time())
        self.sid, self.frame = sid, frame
        return frame


class CopiedFrame(ViewFrame):
    """A frame of another stream (or log) appended here, its delta bases renamed through
    ``seqs`` (source seq -> seq here), which it extends once appended. ``copy_thread`` uses it;
    so can a compactor (see :func:`projections.langgraph.compaction_plan`)."""

    def __init__(
        self,
        tkey: bytes,
        frame: Any,
        src_seq: int,
        seqs: dict[int, int],
        log: EventLog | None = None,
    ) -> None:
        super().__init__(tkey)
        self.src = frame
        self.src_seq = src_seq
        self.seqs = seqs
        self.log = log

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> Any:
        try:
            frame = rebase(self.src, self.seqs)
        except KeyError as e:
            raise CheckpointError(
                f"copy to {stream!r}: a delta base (seq {e.args[0]} of the source) was not "
                "copied before the frame that needs it; copy the whole live stream, in order"
            ) from e
        self.sid, self.frame = sid, frame
        return frame

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        self.seqs[self.src_seq] = done.seq
        super().appended(txn, done)
        frame, log, sid = self.frame, self.log, self.sid
        if isinstance(frame, LgWrites):
            keep_latest_writes(txn, self.tkey, frame)
        elif isinstance(frame, LgCheckpoint):
            if log is None:
                drop_latest(txn, self.tkey)
                return

            def reader() -> BlobReader:
                return BlobReader(
                    log, txn, sid, _no_loads, Patches(log.frame_bytes_max), keyframes=False
                )

            keep_latest(txn, frame, sid, self.tkey, done.seq, reader, fresh=self.fresh)
