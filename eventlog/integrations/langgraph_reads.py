"""The read side of :class:`eventlog.integrations.langgraph.CkptlogSaver`: ``get_tuple``, ``list``,
``get_delta_channel_history`` (and their async forms), and the config helpers both sides use.

:class:`SaverReads` is the saver's base class; it reads ``self.log``, ``self.serde`` and
``self._patches``, which :class:`~eventlog.integrations.langgraph.CkptlogSaver` sets. Split from
``langgraph.py`` by pure moves (issue #23: no module over ~800 lines).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, Final

import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from backends.base import ReadTxn, prefix_end
from eventlog.errors import CheckpointError, CorruptFrame
from eventlog.frames import (
    BLOB_EMPTY,
    BLOB_FULL,
    BLOB_PATCH,
    LgBlob,
    LgCheckpoint,
    LgWrite,
    LgWrites,
)
from eventlog.integrations.langgraph_config import _config, _configurable, _ids
from eventlog.integrations.langgraph_rows import read_keyframes_now
from eventlog.integrations.langgraph_store import (
    WRITES,
    BlobReader,
    Chain,
    LatestRow,
    LatestWrites,
    Patches,
    ReadRow,
    checkpoint_key,
    checkpoint_rows,
    decode_read_row,
    kept_chain,
    latest_blobs,
    latest_checkpoint,
    link_key,
    materialize,
    read_checkpoint_row,
    read_latest_parts,
    read_named,
    read_row,
    row_of_read,
    split_write_key,
    stream_id,
    stream_ids,
    stream_rows,
    thread_key,
    write_rows,
    writes_prefix,
)
from eventlog.layout import U64
from eventlog.log import EventLog
from projections.langgraph import CkptRow, WriteRow

_dec_ckpt_row = msgspec.msgpack.Decoder(CkptRow)
_dec_write_row = msgspec.msgpack.Decoder(WriteRow)

LIST_CHUNK: Final = 64  # tuples built per worker-thread hop in ``alist``
HELD_THREADS_MAX: Final = 4096  # threads whose skippable data rows a saver remembers
# LangGraph's own serde decodes msgpack into new objects (ormsgpack copies what it builds; its
# ext payloads come as new bytes): a patched msgpack value is decoded from the patch's scratch
# buffer. Any other serde (or a subclass that decodes otherwise) gets a copy.
_JSONPLUS_LOADS: Final = JsonPlusSerializer.loads_typed
_MSGPACK: Final = frozenset({"msgpack"})
_NONE: Final[frozenset[str]] = frozenset()


class _Read(msgspec.Struct, frozen=True, gc=False):
    """A checkpoint tuple's parts as read in a transaction, not yet decoded (not tracked by the
    cyclic GC: it refers to no object that refers back to it; a page of ``list`` makes 64)."""

    key: tuple[str, str, int]
    cid: str
    row: CkptRow
    checkpoint_type: str
    checkpoint: bytes
    versions: Mapping[str, str | int | float]
    chains: list[tuple[str, Chain]]
    writes: list[tuple[str, LgWrite]]
    latest: bool = False  # from lg_latest: its patched values are kept (read again next)


def _chunk_writes(
    txn: ReadTxn, sid: int, cids: list[str]
) -> dict[str, list[tuple[str, int, WriteRow]]] | None:
    """The write rows of checkpoints ``cids`` of a stream by checkpoint id, in one range scan
    when their ids have one length (then their keys are contiguous in id order; LangGraph's
    ids do), else ``None`` (each is read by its prefix)."""
    if not cids or len({len(c) for c in cids}) != 1:
        return None
    lo, hi = min(cids), max(cids)
    wanted = set(cids)
    out: dict[str, list[tuple[str, int, WriteRow]]] = {}
    stop = prefix_end(writes_prefix(sid, hi))
    for k, raw in txn.scan(WRITES, writes_prefix(sid, lo), stop):
        cid, task, idx = split_write_key(k)
        if cid in wanted:
            out.setdefault(cid, []).append((task, idx, _dec_write_row.decode(raw)))
    return out


def _keyframes_needed(rr: ReadRow, sid: int, patches: Patches) -> list[tuple[int, str]] | None:
    """``(seq, channel)`` of the keyframes ``rr`` 's values need that the saver does not keep;
    ``None`` when a value needs a transaction anyway (stored apart from its read row, or an
    append, whose base is read). Values stored inline whole (or empty), or whose resolved bytes
    the saver keeps, need nothing."""
    want: list[tuple[int, str]] = []
    for ch, seq, inline in rr.values:
        if inline is not None and inline.kind in (BLOB_FULL, BLOB_EMPTY):
            continue
        if inline is not None and inline.kind != BLOB_PATCH:  # an append: its base is read
            return None
        if patches.known((sid, seq, ch), touch=False) is not None:
            continue
        if inline is None or not 0 < inline.base < seq:
            return None
        if patches.known((sid, inline.base, ch), touch=False) is None:  # its keyframe
            want.append((inline.base, ch))
    return want


def _resolved(rr: ReadRow, sid: int, patches: Patches) -> bool:
    """Whether ``rr`` 's values need no transaction: each stored inline whole (or empty), its
    resolved bytes kept by the saver, or an inline patch whose keyframe the saver kept."""
    return _keyframes_needed(rr, sid, patches) == []


def _kept(patches: Patches, key: tuple[int, int, str], cid: str) -> tuple[str, bytes]:
    """The bytes ``patches`` keeps at ``key`` (:func:`_resolved` found them)."""
    hit = patches.known(key)
    if hit is None:  # dropped since _resolved looked: read it the general way
        raise CorruptFrame(f"checkpoint {cid!r}: a kept keyframe was dropped", seq=key[1])
    return hit


def _in(reader: BlobReader | None, cid: str) -> BlobReader:
    """``reader``, which a read row that needs frames must have been given."""
    if reader is None:
        raise CheckpointError(
            f"checkpoint {cid!r}: its read row needs a transaction, but was read without one; "
            "this is a bug in ckptlog: report it"
        )
    return reader


class SaverReads(BaseCheckpointSaver[str]):
    """Reading LangGraph checkpoints from the log (the base of ``CkptlogSaver``)."""

    log: EventLog
    _patches: Patches
    _held_links: dict[bytes, tuple[bytes, ...]]  # tkey -> data rows a latest read may skip

    # -- reading -------------------------------------------------------------------------------

    def _from_row(
        self,
        key: tuple[str, str, int],
        cid: str,
        rr: ReadRow,
        reader: BlobReader | None,
        wrows: list[tuple[str, int, WriteRow]] | None = None,
    ) -> _Read:
        """What the tuple of checkpoint ``cid`` is built from, from its read row (no frame read
        for a value stored inline or kept by the saver; else the frame of its blob and, for a
        delta, of its keyframe) and its writes, in ``reader`` 's transaction (``None``: no
        transaction, when :func:`_resolved` says none is needed and ``wrows`` is empty)."""
        sid, patches = key[2], self._patches
        touch = True if reader is None else reader.touch
        chains: list[tuple[str, Chain]] = []
        for ch, seq, inline in rr.values:
            blob = inline
            if blob is None or blob.kind == BLOB_PATCH:
                hit = patches.known((sid, seq, ch), touch=touch)
                if hit is not None:  # its resolved bytes are kept: no frame read
                    chains.append((ch, ((seq, LgBlob(ch, 0, BLOB_FULL, *hit)),)))
                    continue
                if blob is None:
                    blob = _in(reader, cid).blob(seq, ch)
            kind = blob.kind
            if kind == BLOB_FULL:
                chains.append((ch, ((seq, blob),)))
            elif reader is None and kind == BLOB_PATCH:  # its keyframe kept (_resolved)
                typ, data = _kept(patches, (sid, blob.base, ch), cid)
                base = LgBlob(ch, blob.version, BLOB_FULL, typ, data)
                chains.append((ch, ((seq, blob), (blob.base, base))))
            elif kind != BLOB_EMPTY:
                chains.append((ch, _in(reader, cid).links(blob, seq)))
        return _Read(
            key, cid, rr.row, rr.checkpoint_type, rr.checkpoint, rr.versions, chains,
            [] if wrows == [] else self._writes(_in(reader, cid), cid, wrows),
        )  # fmt: skip

    def _read(
        self,
        key: tuple[str, str, int],
        cid: str,
        row: CkptRow | None,
        reader: BlobReader,
        rr: ReadRow | None = None,
    ) -> _Read | None:
        """What the tuple of checkpoint ``cid`` is built from, read in ``reader`` 's transaction:
        its read row (:meth:`_from_row`), or for a checkpoint stored before read rows its frame,
        each channel's blob chain, its writes. A reader shared by the tuples of a stream
        (``list``) reads each keyframe once for all of them. ``None``: no such checkpoint."""
        if rr is None:
            rr = read_row(reader.txn, key[2], cid)
        if rr is not None:
            return self._from_row(key, cid, rr, reader)
        if row is None:
            row = read_checkpoint_row(reader.txn, key[2], cid)
            if row is None:
                return None
        tid = key[0]
        frame = reader.frame(row.seq)
        if not isinstance(frame, LgCheckpoint) or frame.checkpoint_id != cid:
            raise CorruptFrame(
                f"checkpoint {cid!r} of thread {tid!r}: its index points at seq {row.seq}, "
                "which holds another frame; run LmdbSaver.verify()",
                seq=row.seq,
            )
        chains = []
        for channel, version in frame.versions.items():
            chain = reader.chain(channel, version)
            if chain is not None:
                chains.append((channel, chain))
        return _Read(
            key, cid, row, frame.checkpoint_type, frame.checkpoint, frame.versions, chains,
            self._writes(reader, cid),
        )  # fmt: skip

    def _build(self, read: _Read, serde: SerializerProtocol) -> CheckpointTuple:
        """The tuple, decoded outside the transaction (so ``list`` holds raw bytes only)."""
        tid, ns, sid = read.key
        row, loads = read.row, serde.loads_typed
        body = loads((read.checkpoint_type, read.checkpoint))
        if body.get("id", read.cid) != read.cid:
            raise CorruptFrame(
                f"checkpoint {read.cid!r} of thread {tid!r}: its read row (lg_reads) holds "
                f"checkpoint {body.get('id')!r}; run LmdbSaver.verify()",
                seq=row.seq,
            )
        body["channel_versions"] = dict(read.versions)
        copying = _MSGPACK if type(serde).loads_typed is _JSONPLUS_LOADS else _NONE
        values = {}
        for ch, chain in read.chains:
            head = chain[0][1]
            if len(chain) == 1 and head.kind == BLOB_FULL:  # a value stored whole
                values[ch] = loads((head.type, head.data))
            else:
                values[ch] = materialize(
                    sid, chain, loads, self._patches, keep_head=read.latest, copying=copying
                )
        body["channel_values"] = values
        checkpoint: Checkpoint = body
        return CheckpointTuple(  # positional: the namedtuple's keyword form costs more
            _config(tid, ns, read.cid),
            checkpoint,
            loads((row.metadata_type, row.metadata)),
            None if row.parent_id is None else _config(tid, ns, row.parent_id),
            [(task, w.channel, loads((w.type, w.data))) for task, w in read.writes],
        )

    @staticmethod
    def _writes(
        reader: BlobReader, cid: str, rows: list[tuple[str, int, WriteRow]] | None = None
    ) -> list[tuple[str, LgWrite]]:
        """The writes stored against ``cid`` (their rows, when read already), in
        ``writes_sort_key`` order."""
        if rows is None:
            rows = write_rows(reader.txn, reader.sid, cid)
        if not rows:
            return []
        rows.sort(key=lambda r: writes_sort_key(r[2].task_path, r[0], r[1]))
        out: list[tuple[str, LgWrite]] = []
        for task, idx, row in rows:
            frame = reader.frame(row.seq)
            if (
                not isinstance(frame, LgWrites)
                or row.pos >= len(frame.writes)
                or frame.writes[row.pos].idx != idx
                or frame.task_id != task
            ):
                raise CorruptFrame(
                    f"write ({task!r}, {idx}) of checkpoint {cid!r}: its index points at seq "
                    f"{row.seq} position {row.pos}, which holds another write; run verify()",
                    seq=row.seq,
                )
            out.append((task, frame.writes[row.pos]))
        return out

    def _pending_writes(
        self,
        reader: BlobReader,
        serde: SerializerProtocol,
        cid: str,
        channels: set[str] | None,
    ) -> list[PendingWrite]:
        """The writes stored against ``cid`` in ``writes_sort_key`` order (of ``channels``)."""
        return [
            (task, w.channel, serde.loads_typed((w.type, w.data)))
            for task, w in self._writes(reader, cid)
            if channels is None or w.channel in channels
        ]

    def _reader(
        self, txn: ReadTxn, sid: int, serde: SerializerProtocol, *, touch: bool = True
    ) -> BlobReader:
        return BlobReader(self.log, txn, sid, serde.loads_typed, self._patches, touch=touch)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``checkpoint_id`` (else the newest one) of the namespace."""
        tid, ns, cid = _ids(config, "get_tuple")
        serde = self.serde
        if cid is None:  # its rows alone, in one statement (one round trip on PostgreSQL)
            tkey = thread_key(tid, ns)
            skip = self._held_links.get(tkey, ())
            latest_read = self._latest_now(tid, ns, tkey, skip)
            if latest_read is None and skip:  # a skipped data row was needed after all
                latest_read = self._latest_now(tid, ns, tkey, ())
            if latest_read is not None:
                return self._build(latest_read, serde)
        elif self.log.backend.remote:  # by id on a server: one statement, then maybe a read
            done, tup = self._get_named(tid, ns, cid, serde)
            if done:
                return tup
        with self.log.backend.read() as txn:
            if cid is None:
                fast = self._read_latest(txn, tid, ns)
                if fast is not None:
                    return self._build(fast, serde)
            sid = stream_id(txn, tid, ns)
            if sid is None:
                return None
            row: CkptRow | None = None
            if cid is None:
                latest = latest_checkpoint(txn, sid)
                if latest is None:
                    return None
                cid, row = latest
            read = self._read((tid, ns, sid), cid, row, self._reader(txn, sid, serde))
        return None if read is None else self._build(read, serde)

    def _keep_keyframes(self, sid: int, rr: ReadRow) -> None:
        """Keep the keyframes ``rr`` 's inline patches need and the saver does not hold, read
        in one statement outside a transaction (a keyframe row never changes while it exists),
        so that the read needs no transaction: one round trip where a read transaction takes
        three. Nothing is read when a value needs the transaction anyway; one absent (removed
        meanwhile) is left to the transaction's read."""
        want = _keyframes_needed(rr, sid, self._patches)
        if not want:
            return
        for (base, ch), row in zip(
            want, read_keyframes_now(self.log.backend, sid, want), strict=True
        ):
            if row is not None:
                self._patches.keep((sid, base, ch), (row[0], bytes(row[1])))

    def _latest_now(self, tid: str, ns: str, tkey: bytes, skip: Collection[bytes]) -> _Read | None:
        """The newest checkpoint from its ``lg_latest`` rows read in one statement, leaving
        out the data rows keyed in ``skip``; ``None``: read it another way."""
        got = read_latest_parts(self.log.backend, tkey, skip)
        if got is None or got[1] is None or got[1].checkpoint_id != got[0].checkpoint_id:
            return None
        return self._latest_read(tid, ns, tkey, got[0], self._kept_writes(got[1]), got[2])

    def _get_named(
        self, tid: str, ns: str, cid: str, serde: SerializerProtocol
    ) -> tuple[bool, CheckpointTuple | None]:
        """``get_tuple`` by id from :func:`read_named` (stream id, read row and write rows in
        one statement), then, only when a value or a write needs a frame or a keyframe row not
        kept, one read transaction for those. ``(False, None)``: read it the general way (a
        checkpoint without a read row, a log without the tables, or rows gone between the two
        reads: a concurrent delete, which the general way reads consistently)."""
        try:
            named = read_named(self.log.backend, tid, ns, cid)
        except CheckpointError:
            return False, None
        if named is None:
            return True, None  # no such thread and namespace
        sid, rr, wrows = named
        if rr is None:
            return False, None
        key = (tid, ns, sid)
        if not wrows:
            self._keep_keyframes(sid, rr)
        if not wrows and _resolved(rr, sid, self._patches):
            try:
                read = self._from_row(key, cid, rr, None, [])
            except CorruptFrame:  # a kept keyframe dropped meanwhile (another thread's reads)
                return False, None
            return True, self._build(read, serde)
        try:
            with self.log.backend.read() as txn:
                read = self._from_row(key, cid, rr, self._reader(txn, sid, serde), wrows)
        except CorruptFrame:
            return False, None
        return True, self._build(read, serde)

    def _read_latest(self, txn: ReadTxn, tid: str, ns: str) -> _Read | None:
        """The newest checkpoint from its ``lg_latest`` rows (one read, no frame decoded when
        its writes are kept too); ``None`` when the stream has none (then the other tables)."""
        tkey = thread_key(tid, ns)
        got = read_latest_parts(txn, tkey)
        if got is None:
            return None
        lr, lw, raw_k = got
        if lw is not None and lw.checkpoint_id == lr.checkpoint_id:
            return self._latest_read(tid, ns, tkey, lr, self._kept_writes(lw), raw_k)
        reader = self._reader(txn, lr.sid, self.serde)
        return self._latest_read(tid, ns, tkey, lr, self._writes(reader, lr.checkpoint_id), raw_k)

    @staticmethod
    def _kept_writes(lw: LatestWrites) -> list[tuple[str, LgWrite]]:
        writes = sorted(lw.writes, key=lambda w: writes_sort_key(w[1], w[0], w[2].idx))
        return [(task, w) for task, _, w in writes]

    def _latest_read(
        self,
        tid: str,
        ns: str,
        tkey: bytes,
        lr: LatestRow,
        pending: list[tuple[str, LgWrite]],
        raw_k: list[tuple[bytes, bytes]] | None,
    ) -> _Read | None:
        """The read of the ``lg_latest`` rows: each chain as the saver kept its bytes, else
        with its ``apart`` links' data from the data rows read with it (decoded only then);
        ``None`` when one is missing (then the other tables)."""
        apart = set(lr.apart)
        kept: dict[tuple[int, str], bytes] | None = None
        chains: list[tuple[str, Chain]] = []
        held: list[bytes] = []  # data rows of links this read did not need
        for ch, c in lr.values:
            if not c:
                continue
            chain = kept_chain(lr.sid, c, self._patches)
            if chain is not c and apart:
                held += [
                    link_key(lr.sid, seq, b.channel) for seq, b in c if (seq, b.channel) in apart
                ]
            elif chain is c and apart and any((seq, b.channel) in apart for seq, b in c):
                if kept is None:
                    kept = latest_blobs(raw_k)
                    if kept is None:
                        return None
                filled = []
                for seq, link in c:
                    if (seq, link.channel) in apart:
                        data = kept.get((seq, link.channel))
                        if data is None:
                            return None
                        link = msgspec.structs.replace(link, data=data)  # noqa: PLW2901
                    filled.append((seq, link))
                chain = tuple(filled)
            chains.append((ch, chain))
        self._hold_links(tkey, held)
        return _Read(
            (tid, ns, lr.sid), lr.checkpoint_id, lr.row, lr.checkpoint_type, lr.checkpoint,
            lr.versions, chains, pending, latest=True,
        )  # fmt: skip

    def _hold_links(self, tkey: bytes, held: list[bytes]) -> None:
        """Remember the data rows the last latest read of ``tkey`` did not need (its values
        were kept): the next one leaves them out of its statement (a 64 KiB keyframe not
        copied, on PostgreSQL not detoasted and sent). The next put keeps the new head's value
        (so the keyframe under it is not needed either); when a skipped row is needed after
        all (the head is no longer kept: evicted, or written by another process), the read is
        made again without skipping and the memo is replaced."""
        links = self._held_links
        if held:
            if len(links) >= HELD_THREADS_MAX and tkey not in links:
                links.clear()
            links[tkey] = tuple(held)
        else:
            links.pop(tkey, None)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    def _list_keys(
        self,
        txn: ReadTxn,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> list[tuple[tuple[str, str, int], str, CkptRow]]:
        """Which checkpoints ``list`` yields, newest first: ``((thread, ns, sid), id, row)``."""
        if limit is not None and limit <= 0:
            return []
        only_id: str | None = None
        thread: str | None = None
        ns: str | None = None
        conf = _configurable(config, "list")
        if conf.get("thread_id") is not None:
            thread, _, only_id = _ids(config, "list")
        if conf.get("checkpoint_ns") is not None:
            ns = str(conf["checkpoint_ns"])
        before_id = None
        if before is not None:
            before_id = (before.get("configurable") or {}).get("checkpoint_id") or None
        serde = self.serde
        found: list[tuple[tuple[str, str, int], str, CkptRow]] = []
        streams = [s for s in stream_ids(txn, thread) if ns is None or s[1] == ns]
        for s in streams:
            taken = 0
            for cid, row in checkpoint_rows(txn, s[2], before=before_id):
                if only_id is not None and cid != only_id:
                    continue
                if filter:
                    md = serde.loads_typed((row.metadata_type, row.metadata))
                    if not all(md.get(k) == v for k, v in filter.items()):
                        continue
                found.append((s, cid, row))
                taken += 1
                if limit is not None and taken >= limit:
                    break  # no later row of this stream can make the cut
        if len(streams) > 1:
            found.sort(key=lambda f: f[1], reverse=True)
        return found if limit is None else found[:limit]

    def _reads(
        self, txn: ReadTxn, keys: Sequence[tuple[tuple[str, str, int], str, CkptRow | None]]
    ) -> list[_Read]:
        """The reads of ``keys`` in ``txn``; a ``None`` row is read again (skipped if gone)."""
        serde = self.serde
        out: list[_Read] = []
        readers: dict[int, BlobReader] = {}
        for key, cid, known in keys:
            reader = readers.get(key[2])
            if reader is None:
                reader = readers[key[2]] = self._reader(txn, key[2], serde, touch=False)
            read = self._read(key, cid, known, reader)
            if read is not None:  # else removed since it was listed
                out.append(read)
        return out

    def _list_first(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> tuple[list[tuple[tuple[str, str, int], str, CkptRow]], list[_Read]]:
        """Every key ``list`` yields, and the reads of the first chunk, in one transaction."""
        with self.log.backend.read() as txn:
            keys = self._list_keys(txn, config, filter, before, limit)
            return keys, self._reads(txn, keys[:LIST_CHUNK])

    def _load_many(self, keys: Sequence[tuple[tuple[str, str, int], str, CkptRow]]) -> list[_Read]:
        """Reads of a later chunk (a new transaction: rows are read again)."""
        with self.log.backend.read() as txn:
            return self._reads(txn, [(key, cid, None) for key, cid, _ in keys])

    def _built(self, reads: Sequence[_Read]) -> list[CheckpointTuple]:
        serde = self.serde
        return [self._build(read, serde) for read in reads]

    def _chunk_built(
        self, keys: Sequence[tuple[tuple[str, str, int], str, CkptRow]]
    ) -> list[CheckpointTuple]:
        return self._built(self._load_many(keys))

    @staticmethod
    def _one_stream(
        config: RunnableConfig | None, before: RunnableConfig | None
    ) -> tuple[str, str, str | None, str | None] | None:
        """``(thread, ns, only id, before id)`` when ``list`` reads one stream (a config naming
        the thread and its namespace), which it walks in chunks without listing its keys first
        (``None``: several streams, merged by id)."""
        conf = _configurable(config, "list")
        if conf.get("thread_id") is None or conf.get("checkpoint_ns") is None:
            return None
        tid, _, only = _ids(config, "list")
        at = None if before is None else (before.get("configurable") or {}).get("checkpoint_id")
        return tid, str(conf["checkpoint_ns"]), only, at or None

    def _chunk(
        self,
        tid: str,
        ns: str,
        before: str | None,
        only: str | None,
        filter: dict[str, Any] | None,
        n: int,
    ) -> tuple[list[_Read], str | None]:
        """Up to ``n`` reads of one stream, newest first below ``before``, in one transaction,
        and where the next chunk starts (``None``: the stream is done). Per chunk: one scan of
        its read rows (and one of its ``lg_checkpoints`` rows, which only checkpoints stored
        before read rows replaced them have), one range scan of their writes (a round trip
        each on PostgreSQL)."""
        serde = self.serde
        out: list[_Read] = []
        with self.log.backend.read() as txn:
            sid = stream_id(txn, tid, ns)
            if sid is None:
                return out, None
            if only is not None:
                if before is not None and only >= before:
                    return out, None
                start, stop = checkpoint_key(sid, only), checkpoint_key(sid, only) + b"\x00"
            else:
                start = U64.pack(sid)
                stop = checkpoint_key(sid, before) if before is not None else U64.pack(sid + 1)
            key = (tid, ns, sid)
            reader = self._reader(txn, sid, serde, touch=False)  # a scan: kept bytes stay old
            scan = stream_rows(txn, sid, start, stop)
            last: str | None = None
            while len(out) < n:
                want = n - len(out) if not filter else LIST_CHUNK
                batch = list(islice(scan, want))
                if not batch:
                    return out, None
                picked: list[tuple[str, bytes | None, bytes | None]] = []
                for k, rraw, craw in batch:
                    cid = k[8:].decode("utf-8", "surrogatepass")
                    if filter:
                        row = row_of_read(rraw) if rraw is not None else _dec_ckpt_row.decode(craw)  # type: ignore[arg-type]
                        md = serde.loads_typed((row.metadata_type, row.metadata))
                        if not all(md.get(f) == v for f, v in filter.items()):
                            continue
                    picked.append((cid, rraw, craw))
                last = batch[-1][0][8:].decode("utf-8", "surrogatepass")
                if len(batch) < want:
                    last = None  # the stream is done
                wrows = _chunk_writes(txn, sid, [cid for cid, _, _ in picked])
                for cid, rraw, craw in picked:
                    w = wrows.get(cid, []) if wrows is not None else None
                    if rraw is not None:
                        out.append(self._from_row(key, cid, decode_read_row(rraw), reader, w))
                    else:  # stored before read rows
                        read = self._read(key, cid, _dec_ckpt_row.decode(craw), reader)  # type: ignore[arg-type]
                        if read is not None:
                            out.append(read)
                if last is None:
                    break
            return out, last

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first. ``config=None``: every thread; a config without
        ``checkpoint_ns``: every namespace of the thread; ``filter`` matches metadata.

        Read ``LIST_CHUNK`` checkpoints per transaction, each decoded as it is yielded."""
        serde = self.serde
        if limit is not None and limit <= 0:
            return
        one = self._one_stream(config, before)
        if one is not None:
            tid, ns, only, at = one
            left = limit
            while True:
                n = LIST_CHUNK if left is None else min(left, LIST_CHUNK)
                reads, at = self._chunk(tid, ns, at, only, filter, n)
                for read in reads:
                    yield self._build(read, serde)
                if left is not None:
                    left -= len(reads)
                if at is None or (left is not None and left <= 0):
                    return
        keys, reads = self._list_first(config, filter, before, limit)
        for read in reads:
            yield self._build(read, serde)
        for i in range(LIST_CHUNK, len(keys), LIST_CHUNK):
            for read in self._load_many(keys[i : i + LIST_CHUNK]):
                yield self._build(read, serde)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        one = self._one_stream(config, before)
        if one is not None:
            tid, ns, only, at = one
            left = limit
            while True:
                n = LIST_CHUNK if left is None else min(left, LIST_CHUNK)
                reads, at = await asyncio.to_thread(self._chunk, tid, ns, at, only, filter, n)
                for tup in await asyncio.to_thread(self._built, reads):
                    yield tup
                if left is not None:
                    left -= len(reads)
                if at is None or (left is not None and left <= 0):
                    return
        keys, reads = await asyncio.to_thread(self._list_first, config, filter, before, limit)
        for tup in await asyncio.to_thread(self._built, reads):
            yield tup
        for i in range(LIST_CHUNK, len(keys), LIST_CHUNK):
            for tup in await asyncio.to_thread(self._chunk_built, keys[i : i + LIST_CHUNK]):
                yield tup

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The writes of ``channels`` along the parent chain and their seeds, in one read
        transaction (the base class calls ``get_tuple`` per ancestor, loading every channel)."""
        if not channels:
            return {}
        tid, ns, cid = _ids(config, "get_delta_channel_history")
        serde = self.serde
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        with self.log.backend.read() as txn:
            sid = stream_id(txn, tid, ns)
            target = None
            if sid is not None:
                if cid is None:
                    latest = latest_checkpoint(txn, sid)
                    target = None if latest is None else latest[1]
                else:
                    target = read_checkpoint_row(txn, sid, cid)
            if sid is not None and target is not None:
                reader = self._reader(txn, sid, serde)
                seen: set[str] = set()
                parent = target.parent_id
                while remaining and parent is not None and parent not in seen:
                    seen.add(parent)
                    row = read_checkpoint_row(txn, sid, parent)
                    if row is None:
                        break
                    versions = reader.versions(row.seq)
                    here: dict[str, Any] = {}
                    for ch in remaining:
                        if ch in versions:
                            found, value = reader.value(ch, versions[ch])
                            if found:
                                here[ch] = value
                    writes = self._pending_writes(reader, serde, parent, remaining)
                    for w in reversed(writes):
                        collected[w[1]].append(w)
                    seeds.update(here)
                    remaining -= here.keys()
                    parent = row.parent_id
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            result[ch] = entry
        return result

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )
