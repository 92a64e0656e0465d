"""LangGraph checkpoint streams on the log: frames in, views kept, blobs read back.

Framework-free: the LangGraph adapter (eventlog.integrations.langgraph) turns calls into the
frames built here. Streams: one per ``(thread_id, checkpoint_ns)``, keyed
``lg:<len(thread_id)>:<thread_id>:<ns>``. Tables (``sid`` = the stream's u64 id, big-endian;
``s16(x)`` = u16 length + UTF-8 of ``x``):

- ``lg_threads``: ``s16(thread_id) + ns`` -> sid, for every stream whose view is not empty;
- ``lg_checkpoints``: sid + checkpoint id -> :class:`projections.langgraph.CkptRow`;
- ``lg_blobs``: sid + ``s16(channel)`` + version key -> u64 seq of the frame holding the blob;
- ``lg_writes``: sid + ``s16(checkpoint id)`` + ``s16(task id)`` + u32 (idx + 2**31) ->
  :class:`projections.langgraph.WriteRow`;
- ``lg_runs``: ``s16(run_id)`` + sid + checkpoint id -> b"";
- ``lg_latest``: ``b"c" + s16(thread_id) + ns`` -> :class:`LatestRow` (the newest checkpoint
  with its channel values resolved: what ``get_tuple`` latest returns but the writes) and
  ``b"w" + s16(thread_id) + ns`` -> :class:`LatestWrites` (the writes stored against it).
  Both are optional: a reader falls back to the other tables when they are absent (logs
  written before them, after a removal or a copy, after ``rebuild``); the next put writes
  them again.

Writing: :func:`plan_blob` picks, in the caller, the cheapest blob for a channel's new version
(full, append of a list's new elements, or zstd patch) from what this process remembers of the
channel's last blob (:class:`Memos`); the frames (:class:`PutFrame`, :class:`WritesFrame`,
:class:`RemoveFrame`, :class:`CopiedFrame`) are built by the log's writer inside the write
transaction, in call order, and update the views in that same transaction.

Invariants:
- :func:`apply_rows` runs in the write transaction that appends the frame (from the frame's
  ``appended`` hook), so the rows always equal :func:`projections.langgraph.fold` of the
  committed frames; :func:`verify_views` checks that for every stream.
- A delta blob's base is checked against the blob index inside the write transaction; when it
  is gone, the value is serialized whole there instead. Duplicate writes (``idx >= 0``) are
  dropped there too, so concurrent duplicates cannot both land.
- Blob values are never copied into the views: a blob is read from the frame that holds it.
  ``BLOB_APPEND`` / ``BLOB_PATCH`` blobs name their base by stream seq, always a smaller one,
  so resolving a chain terminates; chains are at most ``CHAIN_READ_MAX`` long on read. Writers
  take every delta against the channel's keyframe (a full blob) and store a new keyframe after
  ``KEYFRAME_EVERY`` deltas: chains they write are one link long (logs written before keyframes
  chained each delta onto the previous version, up to 256 links; they read unchanged).
- ``lg_latest``, when its ``c`` row is present, is the materialization of the checkpoint with
  the greatest id (written by the put that stores it, in the same transaction, from the
  blobs it holds and the previous row); its ``w`` row, when present and naming the same
  checkpoint, holds exactly that checkpoint's writes. Anything that could make them wrong
  (a removal, a copy, a put of an older id re-storing a version they read) deletes them;
  :func:`verify_views` checks them against the other tables.
- Everything a read needs from a transaction is read there (frames, blob chains); no
  transaction outlives a call. Values are decoded after it (:func:`materialize`), and bytes kept
  across reads (:class:`Patches`) are keyed by stream seq, which never changes meaning.
"""

from __future__ import annotations

import collections
import operator
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import msgspec
import zstandard

from backends.base import Backend, ReadTxn, WriteTxn
from eventlog.errors import CheckpointError, CorruptFrame
from eventlog.frames import (
    BLOB_APPEND,
    BLOB_EMPTY,
    BLOB_FULL,
    BLOB_PATCH,
    LgBlob,
    LgCheckpoint,
    LgRemove,
    LgWrite,
    LgWrites,
)
from eventlog.integrations import langgraph_steps
from eventlog.layout import LOG, STREAM_NAMES, STREAMS, U16, U32, U64, U64X2, s16, utf8
from eventlog.log import Appended, DeferredFrame, EventLog, StoredFrame
from eventlog.reports import Problem
from eventlog.streams import StreamInfo
from projections.langgraph import (
    CkptRow,
    StreamView,
    WriteRow,
    checkpoint_row,
    fold,
    rebase,
    version_key,
)

THREADS: Final = "lg_threads"
CHECKPOINTS: Final = "lg_checkpoints"
BLOBS: Final = "lg_blobs"
WRITES: Final = "lg_writes"
RUNS: Final = "lg_runs"
LATEST: Final = "lg_latest"
TABLES: Final = (THREADS, CHECKPOINTS, BLOBS, WRITES, RUNS, LATEST)
VIEW_TABLES: Final = (CHECKPOINTS, BLOBS, WRITES)  # keyed by sid first

STREAM_PREFIX: Final = "lg:"
CHAIN_READ_MAX: Final = 4096  # a longer chain on read is corruption (logs written before
# keyframes chained up to 256 deltas; now every delta's base is a full blob)
IDX_BIAS: Final = 1 << 31

KEYFRAME_EVERY: Final = 16  # delta blobs (each against the keyframe) before a full one again
CHAIN_RATIO: Final = 2  # ... or once the deltas since the keyframe outweigh it this much
PATCH_MIN_BYTES: Final = 2048  # smaller values are stored in full (a patch would not pay)
MEMO_ENTRIES_MAX: Final = 4096  # (stream, channel) pairs whose last blob this process remembers
MEMO_BYTES_MAX: Final = 64 << 20  # bytes of values (and patch bases) that memos keep alive


class Serde(Protocol):
    """LangGraph's ``SerializerProtocol``, as much of it as the storage uses."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]: ...

    def loads_typed(self, data: tuple[str, bytes]) -> Any: ...


_enc = msgspec.msgpack.Encoder()
_dec_ckpt = msgspec.msgpack.Decoder(CkptRow)
_dec_write = msgspec.msgpack.Decoder(WriteRow)


class LatestRow(msgspec.Struct, frozen=True, array_like=True):
    """The newest checkpoint of a stream, ready to return: its row, body, versions and each
    channel's resolved chain (appends then one full blob; ``()``: the channel has no value)."""

    sid: int
    checkpoint_id: str
    row: CkptRow
    checkpoint_type: str
    checkpoint: bytes
    versions: dict[str, str | int | float]
    values: tuple[tuple[str, tuple[tuple[int, LgBlob], ...]], ...]


class LatestWrites(msgspec.Struct, frozen=True, array_like=True):
    """The writes stored against ``checkpoint_id``: ``(task id, task path, write)``."""

    checkpoint_id: str
    writes: tuple[tuple[str, str, LgWrite], ...]


_dec_latest = msgspec.msgpack.Decoder(LatestRow)
_dec_latest_writes = msgspec.msgpack.Decoder(LatestWrites)


# -- keys ------------------------------------------------------------------------------------


_utf8 = utf8
_s16 = s16


def stream_key(thread_id: str, checkpoint_ns: str) -> str:
    return f"{STREAM_PREFIX}{len(thread_id)}:{thread_id}:{checkpoint_ns}"


def parse_stream_key(key: str) -> tuple[str, str] | None:
    """``(thread_id, checkpoint_ns)`` of a LangGraph stream key, ``None`` for other streams."""
    if not key.startswith(STREAM_PREFIX):
        return None
    head, sep, rest = key[len(STREAM_PREFIX) :].partition(":")
    if not sep or not head.isdigit():
        return None
    n = int(head)
    if len(rest) < n + 1 or rest[n] != ":":
        return None
    return rest[:n], rest[n + 1 :]


def thread_prefix(thread_id: str) -> bytes:
    return _s16(thread_id)


def thread_key(thread_id: str, checkpoint_ns: str) -> bytes:
    return _s16(thread_id) + _utf8(checkpoint_ns)


def split_thread_key(key: bytes) -> tuple[str, str]:
    n = U16.unpack_from(key)[0]
    return (
        key[2 : 2 + n].decode("utf-8", "surrogatepass"),
        key[2 + n :].decode("utf-8", "surrogatepass"),
    )


def checkpoint_key(sid: int, checkpoint_id: str) -> bytes:
    return U64.pack(sid) + _utf8(checkpoint_id)


def blob_key(sid: int, channel: str, vkey: bytes) -> bytes:
    return U64.pack(sid) + _s16(channel) + vkey


def writes_prefix(sid: int, checkpoint_id: str) -> bytes:
    return U64.pack(sid) + _s16(checkpoint_id)


def write_key(sid: int, checkpoint_id: str, task_id: str, idx: int) -> bytes:
    return writes_prefix(sid, checkpoint_id) + _s16(task_id) + U32.pack(idx + IDX_BIAS)


def split_write_key(key: bytes) -> tuple[str, str, int]:
    """``(checkpoint id, task id, idx)`` of a ``lg_writes`` key (after the 8-byte sid)."""
    at = 8
    n = U16.unpack_from(key, at)[0]
    cid = key[at + 2 : at + 2 + n].decode("utf-8", "surrogatepass")
    at += 2 + n
    n = U16.unpack_from(key, at)[0]
    task = key[at + 2 : at + 2 + n].decode("utf-8", "surrogatepass")
    at += 2 + n
    return cid, task, U32.unpack_from(key, at)[0] - IDX_BIAS


def latest_key(tkey: bytes) -> bytes:
    return b"c" + tkey


def latest_writes_key(tkey: bytes) -> bytes:
    return b"w" + tkey


def read_latest(
    txn: ReadTxn | Backend, tkey: bytes
) -> tuple[LatestRow, LatestWrites | None] | None:
    """The ``lg_latest`` rows of a stream (one round trip; given a backend, in a transaction of
    their own), ``None`` when its row is absent."""
    keys = [latest_key(tkey), latest_writes_key(tkey)]
    try:
        if isinstance(txn, Backend):
            raw, raw_w = txn.get_many_now(LATEST, keys)
        else:
            raw, raw_w = txn.get_many(LATEST, keys)
    except CheckpointError:  # a log opened read-only that never had the table
        return None
    if raw is None:
        return None
    lw = None if raw_w is None else _dec_latest_writes.decode(raw_w)
    return _dec_latest.decode(raw), lw


def drop_latest(txn: WriteTxn, tkey: bytes) -> None:
    txn.delete(LATEST, latest_key(tkey))
    txn.delete(LATEST, latest_writes_key(tkey))


def run_key(run_id: str, sid: int, checkpoint_id: str) -> bytes:
    return _s16(run_id) + U64.pack(sid) + _utf8(checkpoint_id)


def run_prefix(run_id: str) -> bytes:
    return _s16(run_id)


def split_run_key(key: bytes) -> tuple[int, str]:
    """``(sid, checkpoint id)`` of a ``lg_runs`` key."""
    n = U16.unpack_from(key)[0]
    at = 2 + n
    return U64.unpack_from(key, at)[0], key[at + 8 :].decode("utf-8", "surrogatepass")


# -- rows --------------------------------------------------------------------------------------


def read_checkpoint_row(txn: ReadTxn, sid: int, checkpoint_id: str) -> CkptRow | None:
    raw = txn.get(CHECKPOINTS, checkpoint_key(sid, checkpoint_id))
    return None if raw is None else _dec_ckpt.decode(raw)


def latest_checkpoint(txn: ReadTxn, sid: int) -> tuple[str, CkptRow] | None:
    """The checkpoint with the greatest id (LangGraph ids sort by creation time)."""
    for key, raw in txn.scan_prefix(CHECKPOINTS, U64.pack(sid), reverse=True, limit=1):
        return key[8:].decode("utf-8", "surrogatepass"), _dec_ckpt.decode(raw)
    return None


def checkpoint_rows(
    txn: ReadTxn, sid: int, *, before: str | None = None
) -> Iterator[tuple[str, CkptRow]]:
    """Checkpoints of a stream, newest (greatest id) first, ids below ``before`` when given."""
    start = U64.pack(sid)
    stop = checkpoint_key(sid, before) if before is not None else U64.pack(sid + 1)
    for key, raw in txn.scan(CHECKPOINTS, start, stop, reverse=True):
        yield key[8:].decode("utf-8", "surrogatepass"), _dec_ckpt.decode(raw)


def write_rows(txn: ReadTxn, sid: int, checkpoint_id: str) -> list[tuple[str, int, WriteRow]]:
    """``(task id, idx, row)`` of every write stored against a checkpoint."""
    out = []
    for key, raw in txn.scan_prefix(WRITES, writes_prefix(sid, checkpoint_id)):
        _, task, idx = split_write_key(key)
        out.append((task, idx, _dec_write.decode(raw)))
    return out


def blob_seq(txn: ReadTxn, sid: int, channel: str, version: str | int | float) -> int | None:
    raw = txn.get(BLOBS, blob_key(sid, channel, version_key(version)))
    return None if raw is None else U64.unpack(raw)[0]


def stream_ids(txn: ReadTxn, thread_id: str | None) -> list[tuple[str, str, int]]:
    """``(thread_id, ns, sid)`` of one thread's streams, or of every thread's (``None``)."""
    rows = (
        txn.scan(THREADS)
        if thread_id is None
        else txn.scan_prefix(THREADS, thread_prefix(thread_id))
    )
    return [(*split_thread_key(k), U64.unpack(v)[0]) for k, v in rows]


def stream_id(txn: ReadTxn, thread_id: str, checkpoint_ns: str) -> int | None:
    raw = txn.get(THREADS, thread_key(thread_id, checkpoint_ns))
    return None if raw is None else U64.unpack(raw)[0]


def stream_name(txn: ReadTxn, sid: int) -> str | None:
    raw = txn.get(STREAM_NAMES, U64.pack(sid))
    return None if raw is None else raw.decode("utf-8", "surrogatepass")


def apply_rows(txn: WriteTxn, sid: int, seq: int, frame: Any, tkey: bytes) -> None:
    """:func:`projections.langgraph.apply` on the tables, in the frame's transaction."""
    k = U64.pack(sid)
    if isinstance(frame, LgCheckpoint):
        ckey = checkpoint_key(sid, frame.checkpoint_id)
        old = txn.get(CHECKPOINTS, ckey)
        if old is not None:
            old_run = _dec_ckpt.decode(old).run_id
            if old_run is not None:
                txn.delete(RUNS, run_key(old_run, sid, frame.checkpoint_id))
        txn.put(CHECKPOINTS, ckey, _enc.encode(checkpoint_row(seq, frame)))
        if frame.run_id is not None:
            txn.put(RUNS, run_key(frame.run_id, sid, frame.checkpoint_id), b"")
        for blob in frame.blobs:
            txn.put(BLOBS, blob_key(sid, blob.channel, version_key(blob.version)), U64.pack(seq))
        txn.put(THREADS, tkey, k)
    elif isinstance(frame, LgWrites):
        for pos, w in enumerate(frame.writes):
            txn.put(
                WRITES,
                write_key(sid, frame.checkpoint_id, frame.task_id, w.idx),
                _enc.encode(WriteRow(seq, pos, frame.task_path)),
            )
        if frame.writes:
            txn.put(THREADS, tkey, k)
    elif isinstance(frame, LgRemove):
        ids = frame.checkpoint_ids
        raw = txn.get(LATEST, latest_key(tkey)) if ids is not None else None
        if raw is None or _dec_latest.decode(raw).checkpoint_id in ids:  # type: ignore[operator]
            drop_latest(txn, tkey)  # the newest checkpoint is removed: readers fall back
        if ids is None:
            for key, raw in list(txn.scan_prefix(CHECKPOINTS, k)):
                run = _dec_ckpt.decode(raw).run_id
                if run is not None:
                    txn.delete(RUNS, run_key(run, sid, key[8:].decode("utf-8", "surrogatepass")))
            txn.delete_prefix(CHECKPOINTS, k)
            txn.delete_prefix(BLOBS, k)
            txn.delete_prefix(WRITES, k)
            txn.delete(THREADS, tkey)
            return
        for cid in set(ids):
            row = read_checkpoint_row(txn, sid, cid)
            if row is not None:
                if row.run_id is not None:
                    txn.delete(RUNS, run_key(row.run_id, sid, cid))
                txn.delete(CHECKPOINTS, checkpoint_key(sid, cid))
            txn.delete_prefix(WRITES, writes_prefix(sid, cid))
        if not any(next(iter(txn.scan_prefix(t, k, limit=1)), None) for t in VIEW_TABLES):
            txn.delete(THREADS, tkey)  # the view is empty, as the fold says


def read_view(txn: ReadTxn, sid: int) -> StreamView:
    """The materialized view of one stream, as :func:`projections.langgraph.fold` shapes it."""
    k = U64.pack(sid)
    view = StreamView()
    for key, raw in txn.scan_prefix(CHECKPOINTS, k):
        view.checkpoints[key[8:].decode("utf-8", "surrogatepass")] = _dec_ckpt.decode(raw)
    for key, raw in txn.scan_prefix(BLOBS, k):
        n = U16.unpack_from(key, 8)[0]
        channel = key[10 : 10 + n].decode("utf-8", "surrogatepass")
        view.blobs[channel, key[10 + n :]] = U64.unpack(raw)[0]
    for key, raw in txn.scan_prefix(WRITES, k):
        view.writes[split_write_key(key)] = _dec_write.decode(raw)
    return view


# -- frames and blobs --------------------------------------------------------------------------


def read_frame(log: EventLog, txn: ReadTxn, sid: int, seq: int) -> Any:
    """The frame at ``seq`` of stream ``sid``, checksum and position verified."""
    gkey = txn.get(STREAMS, U64X2.pack(sid, seq))
    data = None if gkey is None else txn.get(LOG, gkey)
    if data is None:
        raise CorruptFrame(
            f"LangGraph view points at seq {seq} of stream id {sid}, which is not in the log; "
            "run LmdbSaver.verify()",
            seq=seq,
        )
    env, frame = log.decode_envelope(data)
    if (env.stream_id, env.seq) != (sid, seq):
        raise CorruptFrame(
            f"the index says log #{U64.unpack(gkey or bytes(8))[0]} is seq {seq} of stream id "
            f"{sid}, but it holds seq {env.seq} of stream id {env.stream_id}; run verify()",
            seq=seq,
        )
    return frame


def make_patch(base: bytes, new: bytes) -> bytes:
    """``new`` as a zstd frame compressed against ``base`` (a raw-content dictionary)."""
    dictionary = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdCompressor(level=1, dict_data=dictionary).compress(new)


Loads = Callable[[tuple[str, bytes]], Any]
Chain = tuple[tuple[int, LgBlob], ...]  # (seq, blob): a version's blob, then its bases in turn
PATCH_BASES_KEPT: Final = 32  # patch decoders (a keyframe as dictionary) each thread keeps
RESOLVED_BYTES_MAX: Final = 32 << 20  # resolved full bytes a saver keeps (Patches)


class Patches:
    """Resolved channel bytes and patch decoders, kept across reads by one saver.

    Keyed by ``(sid, seq, channel)``: the bytes a blob stores at a stream seq never change
    (seqs are not reused), so what is kept stays right across transactions. Kept: the full
    bytes of the last full and patched blobs written or read (up to ``RESOLVED_BYTES_MAX``:
    the keyframes and latest values of the threads in use), so a read whose base is kept
    decodes neither the base's frame nor the patch; and per thread the decoders of the last
    ``PATCH_BASES_KEPT`` bases (a keyframe is the base of up to ``KEYFRAME_EVERY`` patches).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._local = threading.local()
        self._lock = threading.Lock()
        self._full: collections.OrderedDict[tuple[int, int, str], tuple[str, bytes]] = (
            collections.OrderedDict()
        )
        self._full_bytes = 0

    def known(self, key: tuple[int, int, str]) -> tuple[str, bytes] | None:
        with self._lock:
            hit = self._full.get(key)
            if hit is not None:
                self._full.move_to_end(key)
            return hit

    def keep(self, key: tuple[int, int, str], full: tuple[str, bytes]) -> None:
        if len(full[1]) > RESOLVED_BYTES_MAX // 8:
            return
        with self._lock:
            old = self._full.pop(key, None)
            if old is not None:
                self._full_bytes -= len(old[1])
            self._full[key] = full
            self._full_bytes += len(full[1])
            while self._full_bytes > RESOLVED_BYTES_MAX:
                _, dropped = self._full.popitem(last=False)
                self._full_bytes -= len(dropped[1])

    def apply(self, key: tuple[int, int, str], base: bytes, patch: bytes) -> bytes:
        kept: collections.OrderedDict[tuple[int, int, str], zstandard.ZstdDecompressor] | None
        kept = getattr(self._local, "kept", None)
        if kept is None:
            kept = self._local.kept = collections.OrderedDict()
        dctx = kept.get(key)
        if dctx is None:
            dictionary = zstandard.ZstdCompressionDict(
                base, dict_type=zstandard.DICT_TYPE_RAWCONTENT
            )
            dctx = kept[key] = zstandard.ZstdDecompressor(dict_data=dictionary)
            while len(kept) > PATCH_BASES_KEPT:
                kept.popitem(last=False)
        else:
            kept.move_to_end(key)
        try:
            return dctx.decompress(patch, max_output_size=self.max_bytes)
        except zstandard.ZstdError as e:
            raise CorruptFrame(
                f"a LangGraph blob patch does not apply to its base (seq {key[1]} of stream id "
                f"{key[0]}, channel {key[2]!r}): {e}",
                seq=key[1],
            ) from e


def materialize(sid: int, chain: Chain, loads: Loads, patches: Patches) -> Any:
    """The value a blob chain (from :meth:`BlobReader.chain`) stores: the full bytes, patched
    in turn, then the appended tails. Needs no transaction."""
    i = 0
    while chain[i][1].kind == BLOB_APPEND:
        i += 1
    j = i
    while chain[j][1].kind == BLOB_PATCH:
        j += 1
    data = chain[j][1].data
    for k in range(j - 1, i - 1, -1):
        data = patches.apply((sid, chain[k + 1][0], chain[k][1].channel), data, chain[k][1].data)
    if j > i:
        patches.keep((sid, chain[i][0], chain[i][1].channel), (chain[i][1].type, data))
    value = loads((chain[i][1].type, data))
    if i == 0:
        return value
    if not isinstance(value, list):
        raise CorruptFrame(
            f"channel {chain[0][1].channel!r}: an append chain starts on a "
            f"{type(value).__name__}, not a list",
            seq=chain[i][0],
        )
    for k in range(i - 1, -1, -1):
        value.extend(loads((chain[k][1].type, chain[k][1].data)))
    return value


def kept_chain(sid: int, chain: Chain, patches: Patches) -> Chain:
    """``chain`` (a patch and its keyframe) as the full bytes ``patches`` kept of it, if any."""
    seq, head = chain[0]
    if head.kind == BLOB_PATCH:
        hit = patches.known((sid, seq, head.channel))
        if hit is not None:
            return ((seq, LgBlob(head.channel, head.version, BLOB_FULL, *hit)),)
    return chain


class BlobReader:
    """Reads channel values of one stream inside one read transaction (frames cached)."""

    def __init__(
        self,
        log: EventLog,
        txn: ReadTxn,
        sid: int,
        loads: Loads,
        patches: Patches | None = None,
    ) -> None:
        self.log = log
        self.txn = txn
        self.sid = sid
        self.loads = loads
        self.patches = patches if patches is not None else Patches(log.frame_bytes_max)
        self._frames: dict[int, Any] = {}

    def frame(self, seq: int) -> Any:
        frame = self._frames.get(seq)
        if frame is None:
            frame = read_frame(self.log, self.txn, self.sid, seq)
            self._frames[seq] = frame
        return frame

    def blob(self, seq: int, channel: str) -> LgBlob:
        frame = self.frame(seq)
        if isinstance(frame, LgCheckpoint):
            for b in frame.blobs:
                if b.channel == channel:
                    return b
        raise CorruptFrame(
            f"seq {seq} of stream id {self.sid} holds no blob for channel {channel!r}, but the "
            "blob index or a delta blob says it does; run LmdbSaver.verify()",
            seq=seq,
        )

    def versions(self, seq: int) -> dict[str, str | int | float]:
        """``channel_versions`` of the checkpoint stored at ``seq``."""
        frame = self.frame(seq)
        if not isinstance(frame, LgCheckpoint):
            raise CorruptFrame(
                f"seq {seq} of stream id {self.sid} is indexed as a checkpoint but holds a "
                f"{type(frame).__name__}; run LmdbSaver.verify()",
                seq=seq,
            )
        return frame.versions

    def has_value(self, channel: str, version: str | int | float) -> bool:
        seq = blob_seq(self.txn, self.sid, channel, version)
        return seq is not None and self.blob(seq, channel).kind != BLOB_EMPTY

    def chain(self, channel: str, version: str | int | float) -> Chain | None:
        """The blobs a channel's version is decoded from (read here, decoded by
        :func:`materialize` later), ``None`` when it has no value."""
        seq = blob_seq(self.txn, self.sid, channel, version)
        if seq is None:
            return None
        hit = self.patches.known((self.sid, seq, channel))
        if hit is not None:  # its bytes are kept (written or read before): nothing to resolve
            return ((seq, LgBlob(channel, version, BLOB_FULL, *hit)),)
        blob = self.blob(seq, channel)
        if blob.kind == BLOB_EMPTY:
            return None
        return self.links(blob, seq)

    def links(self, blob: LgBlob, seq: int) -> Chain:
        """``blob`` (at ``seq``) and the bases it is a delta of, down to a full value."""
        links = [(seq, blob)]
        while blob.kind == BLOB_APPEND:
            blob, seq = self._base(blob, seq, len(links))
            links.append((seq, blob))
        if blob.kind not in (BLOB_FULL, BLOB_PATCH):
            raise CorruptFrame(
                f"channel {blob.channel!r} at seq {seq} of stream id {self.sid}: an append "
                f"chain ends on a blob of kind {blob.kind}, not a stored value",
                seq=seq,
            )
        while blob.kind == BLOB_PATCH:
            blob, seq = self._base(blob, seq, len(links))
            links.append((seq, blob))
        if blob.kind != BLOB_FULL:
            raise CorruptFrame(
                f"channel {blob.channel!r} at seq {seq}: a patch chain ends on a blob of kind "
                f"{blob.kind}, not a full value",
                seq=seq,
            )
        return tuple(links)

    def value(self, channel: str, version: str | int | float) -> tuple[bool, Any]:
        """``(True, value)`` of a channel at a version, ``(False, None)`` when it has none."""
        chain = self.chain(channel, version)
        if chain is None:
            return False, None
        return True, materialize(self.sid, chain, self.loads, self.patches)

    def decode(self, blob: LgBlob, seq: int) -> Any:
        """The value ``blob`` (at ``seq``, not empty) stores."""
        return materialize(self.sid, self.links(blob, seq), self.loads, self.patches)

    def _base(self, blob: LgBlob, seq: int, links: int) -> tuple[LgBlob, int]:
        if not 0 < blob.base < seq or links >= CHAIN_READ_MAX:
            raise CorruptFrame(
                f"channel {blob.channel!r} at seq {seq} of stream id {self.sid}: delta base "
                f"{blob.base} is not an earlier frame (or the chain exceeds {CHAIN_READ_MAX})",
                seq=seq,
            )
        hit = self.patches.known((self.sid, blob.base, blob.channel))
        if hit is not None:  # its bytes are kept: no need to read its frame
            return LgBlob(blob.channel, blob.version, BLOB_FULL, *hit), blob.base
        return self.blob(blob.base, blob.channel), blob.base


# -- writing: what this process remembers of each channel's last blob (caller side) ------------


@dataclass(slots=True)
class Memo:
    """What this process last stored for one channel of one stream, and the keyframe (the
    last full blob) that every delta since is taken against."""

    vkey: bytes  # version key of the last blob
    seq: int  # its frame (0 until committed)
    key_vkey: bytes  # version key of the keyframe
    key_seq: int  # its frame (0 until committed)
    elements: tuple[Any, ...] | None  # the last value's elements, while every blob since the
    # keyframe is an append (the list extends the keyframe's)
    key_len: int  # elements of the keyframe's list
    tail: tuple[int, bytes] | None  # msgpack array body (count, bytes) of the elements since
    # the keyframe, when the serde writes msgpack (the next append extends it without encoding)
    key_full: tuple[str, bytes] | None  # the keyframe's serde bytes (patch base), when kept
    links: int  # delta blobs since the keyframe
    delta_bytes: int  # their bytes
    full_bytes: int  # bytes of the keyframe

    def committed(self, seq: int) -> None:
        self.seq = seq
        if self.key_seq == 0:
            self.key_seq = seq


@dataclass(slots=True)
class Pending:
    """A blob planned by the caller; the writer may still turn a delta into a full value."""

    blob: LgBlob
    value: Any
    base_vkey: bytes
    memo: Memo | None
    full: tuple[str, bytes] | None = None  # the value's serde bytes, when serialized whole


def memo_weight(memo: Memo) -> int:
    """Bytes a memo keeps alive: the keyframe's bytes, the tail, and roughly the list."""
    held = len(memo.key_full[1]) if memo.key_full is not None else 0
    held += len(memo.tail[1]) if memo.tail is not None else 0
    if memo.elements is not None:
        held += memo.full_bytes + memo.delta_bytes
    return held


class Memos:
    """LRU of memos, bounded in entries and in the bytes they keep alive."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memos: collections.OrderedDict[tuple[str, str], Memo] = collections.OrderedDict()
        self._bytes = 0

    def get(self, stream: str, channel: str) -> Memo | None:
        with self._lock:
            return self._memos.get((stream, channel))

    def _drop(self, key: tuple[str, str]) -> None:
        dropped = self._memos.pop(key, None)
        if dropped is not None:
            self._bytes -= memo_weight(dropped)

    def put(self, stream: str, channel: str, memo: Memo) -> None:
        with self._lock:
            self._drop((stream, channel))
            self._memos[stream, channel] = memo
            self._bytes += memo_weight(memo)
            while self._memos and (
                len(self._memos) > MEMO_ENTRIES_MAX or self._bytes > MEMO_BYTES_MAX
            ):
                self._drop(next(iter(self._memos)))

    def forget(self, streams: set[str]) -> None:
        with self._lock:
            for key in [k for k in self._memos if k[0] in streams]:
                self._drop(key)


def msgpack_array(data: bytes) -> tuple[int, bytes] | None:
    """``(count, body)`` of a msgpack array's bytes (its elements' encodings, concatenated)."""
    if not data:
        return None
    b = data[0]
    if 0x90 <= b <= 0x9F:
        return b & 0x0F, data[1:]
    if b == 0xDC and len(data) >= 3:
        return U16.unpack_from(data, 1)[0], data[3:]
    if b == 0xDD and len(data) >= 5:
        return U32.unpack_from(data, 1)[0], data[5:]
    return None


def msgpack_array_header(count: int) -> bytes:
    if count < 16:
        return bytes((0x90 | count,))
    if count < 1 << 16:
        return b"\xdc" + U16.pack(count)
    return b"\xdd" + U32.pack(count)


def full_blob(channel: str, version: Any, vkey: bytes, value: Any, serde: Serde) -> Pending:
    typ, data = serde.dumps_typed(value)
    is_list = type(value) is list
    memo = Memo(
        vkey=vkey,
        seq=0,
        key_vkey=vkey,
        key_seq=0,
        elements=tuple(value) if is_list else None,
        key_len=len(value) if is_list else 0,
        tail=(0, b"") if is_list and typ == "msgpack" else None,
        key_full=(typ, data) if len(data) <= MEMO_BYTES_MAX // 4 else None,
        links=0,
        delta_bytes=0,
        full_bytes=len(data),
    )
    return Pending(LgBlob(channel, version, BLOB_FULL, typ, data), value, b"", memo, (typ, data))


def _tail_bytes(
    m: Memo, value: list[Any], serde: Serde
) -> tuple[str, bytes, tuple[int, bytes] | None]:
    """The serde bytes of ``value``'s elements after the keyframe's (and their msgpack body):
    the memo's tail extended by the new elements' encodings, or serialized afresh."""
    assert m.elements is not None
    new = value[len(m.elements) :]
    if m.tail is not None:
        typ, data = serde.dumps_typed(new)
        arr = msgpack_array(data) if typ == "msgpack" else None
        if arr is not None and arr[0] == len(new):
            count, body = m.tail[0] + arr[0], m.tail[1] + arr[1]
            return "msgpack", msgpack_array_header(count) + body, (count, body)
    typ, data = serde.dumps_typed(value[m.key_len :])
    return typ, data, msgpack_array(data) if typ == "msgpack" else None


def plan_blob(
    memos: Memos,
    stream: str,
    channel: str,
    version: Any,
    values: Mapping[str, Any],
    serde: Serde,
    appends: bool,
) -> Pending:
    """The cheapest blob for ``channel``'s new version (serialized once, through ``serde``).

    A delta is always taken against the keyframe (the channel's last full blob), never
    against another delta, so any version reads from at most two frames; a new keyframe is
    stored after ``KEYFRAME_EVERY`` deltas, or once the deltas since the keyframe would
    outweigh it ``CHAIN_RATIO`` times (the cost of cumulative deltas stays bounded).
    """
    vkey = version_key(version)
    if channel not in values:
        return Pending(LgBlob(channel, version, BLOB_EMPTY), None, b"", None)
    value = values[channel]
    m = memos.get(stream, channel)
    if m is None or m.seq == 0 or m.key_seq == 0 or m.links >= KEYFRAME_EVERY:
        return full_blob(channel, version, vkey, value, serde)
    budget = CHAIN_RATIO * m.full_bytes - m.delta_bytes
    elements = m.elements
    if (
        appends
        and elements is not None
        and type(value) is list
        and len(value) >= len(elements)
        and all(map(operator.is_, value, elements))
    ):
        typ, data, tail = _tail_bytes(m, value, serde)
        if len(data) <= budget:
            memo = Memo(
                vkey=vkey,
                seq=0,
                key_vkey=m.key_vkey,
                key_seq=m.key_seq,
                elements=tuple(value),
                key_len=m.key_len,
                tail=tail,
                key_full=m.key_full,
                links=m.links + 1,
                delta_bytes=m.delta_bytes + len(data),
                full_bytes=m.full_bytes,
            )
            blob = LgBlob(channel, version, BLOB_APPEND, typ, data, m.key_seq)
            return Pending(blob, value, m.key_vkey, memo)
    planned = full_blob(channel, version, vkey, value, serde)
    typ, data = planned.blob.type, planned.blob.data
    if m.key_full is not None and m.key_full[0] == typ and len(data) >= PATCH_MIN_BYTES:
        patch = make_patch(m.key_full[1], data)
        if 2 * len(patch) <= len(data) and len(patch) <= budget:
            memo = Memo(
                vkey=vkey,
                seq=0,
                key_vkey=m.key_vkey,
                key_seq=m.key_seq,
                elements=None,  # an append must extend the keyframe's list: not after a patch
                key_len=0,
                tail=None,
                key_full=m.key_full,
                links=m.links + 1,
                delta_bytes=m.delta_bytes + len(patch),
                full_bytes=m.full_bytes,
            )
            blob = LgBlob(channel, version, BLOB_PATCH, typ, patch, m.key_seq)
            return Pending(blob, value, m.key_vkey, memo, (typ, data))
    return planned


# -- writing: frames built in the write transaction -------------------------------------------


class ViewFrame(DeferredFrame):
    """A frame whose views are updated by :func:`apply_rows` in the same transaction."""

    def __init__(self, tkey: bytes) -> None:
        self.tkey = tkey
        self.sid = 0
        self.frame: Any = None

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        apply_rows(txn, self.sid, done.seq, self.frame, self.tkey)


class PutFrame(ViewFrame):
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
        self.memos: list[tuple[str, Memo | None]] = []
        self.fulls: list[tuple[str, tuple[str, bytes]]] = []  # channels stored whole or patched

    def prefetch(self, sid: int) -> Iterable[tuple[str, bytes]]:
        for planned in self.pending:
            blob = planned.blob
            if blob.kind in (BLOB_APPEND, BLOB_PATCH):
                yield BLOBS, blob_key(sid, blob.channel, planned.base_vkey)
        yield CHECKPOINTS, checkpoint_key(sid, self.head.checkpoint_id)  # for apply_rows
        yield LATEST, latest_key(self.tkey)
        yield LATEST, latest_writes_key(self.tkey)

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        super().appended(txn, done)
        log, sid = self.log, self.sid
        if log is None or not isinstance(self.frame, LgCheckpoint):
            drop_latest(txn, self.tkey)
            return

        def reader() -> BlobReader:  # keeps nothing: chains as stored, as verify reads them
            return BlobReader(log, txn, sid, _no_loads, Patches(log.frame_bytes_max))

        keep_latest(txn, self.frame, sid, self.tkey, done.seq, reader)

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> LgCheckpoint:
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


def keep_latest(
    txn: WriteTxn,
    frame: LgCheckpoint,
    sid: int,
    tkey: bytes,
    seq: int,
    make_reader: Callable[[], BlobReader],
) -> None:
    """Update ``lg_latest`` for the checkpoint ``frame`` just stored at ``seq`` (its rows are
    applied). Each channel's chain (the blobs :meth:`BlobReader.chain` reads: a full value, or
    a delta and its keyframe) comes from the frame's own blob and the previous row's keyframe,
    from the previous row when unchanged, and failing those from the blob index through
    ``make_reader()`` (after a fallback). Drops the rows when it cannot read what it needs.
    The writer, ``rebuild`` and compaction run it alike (with the frames each can read)."""
    cid = frame.checkpoint_id
    raw = txn.get(LATEST, latest_key(tkey))
    prev = None if raw is None else _dec_latest.decode(raw)
    if prev is not None and cid < prev.checkpoint_id:
        # An older checkpoint: the newest one is unchanged, unless this put re-stored a
        # channel version that it reads.
        if any(
            b.channel in prev.versions
            and version_key(prev.versions[b.channel]) == version_key(b.version)
            for b in frame.blobs
        ):
            drop_latest(txn, tkey)
        return
    if prev is None:
        top = latest_checkpoint(txn, sid)
        if top is None or top[0] != cid:
            return  # not the newest: the rows stay absent (readers fall back)
    mine = {b.channel: b for b in frame.blobs}
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
    except CheckpointError:  # a frame it would read is damaged: readers fall back (and fail)
        drop_latest(txn, tkey)
        return
    row = checkpoint_row(seq, frame)
    latest = LatestRow(
        sid, cid, row, frame.checkpoint_type, frame.checkpoint, dict(frame.versions),
        tuple(values),
    )  # fmt: skip
    txn.put(LATEST, latest_key(tkey), _enc.encode(latest))
    if next(iter(txn.scan_prefix(WRITES, writes_prefix(sid, cid), limit=1)), None) is None:
        txn.put(LATEST, latest_writes_key(tkey), _enc.encode(LatestWrites(cid, ())))
    else:  # writes stored before (a re-put): readers read them from the write rows
        txn.delete(LATEST, latest_writes_key(tkey))


def _known_chain(
    channel: str,
    version: str | int | float,
    b: LgBlob | None,
    seq: int,
    prev: LatestRow | None,
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

    def prefetch(self, sid: int) -> Iterable[tuple[str, bytes]]:
        f = self.planned
        return [
            *(
                (WRITES, write_key(sid, f.checkpoint_id, f.task_id, w.idx))
                for w in f.writes
                if w.idx >= 0
            ),
            (LATEST, latest_writes_key(self.tkey)),
        ]

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> LgWrites | None:
        f = self.planned
        keep = tuple(
            w
            for w in f.writes
            if w.idx < 0
            or txn.get(WRITES, write_key(sid, f.checkpoint_id, f.task_id, w.idx)) is None
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
        super().appended(txn, done)
        if isinstance(self.frame, LgWrites):
            keep_latest_writes(txn, self.tkey, self.frame)


def keep_latest_writes(txn: WriteTxn, tkey: bytes, frame: LgWrites) -> None:
    """Add the writes of ``frame`` (its rows applied) to the ``lg_latest`` writes row when they
    belong to its checkpoint (an upsert, as the write rows are)."""
    raw = txn.get(LATEST, latest_writes_key(tkey))
    if raw is None:
        return
    lw = _dec_latest_writes.decode(raw)
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
                if txn.get(CHECKPOINTS, checkpoint_key(sid, cid)) is not None
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
                return BlobReader(log, txn, sid, _no_loads, Patches(log.frame_bytes_max))

            keep_latest(txn, frame, sid, self.tkey, done.seq, reader)


# -- verify ------------------------------------------------------------------------------------


def verify_views(log: EventLog) -> list[Problem]:
    """Every LangGraph stream's rows against the fold of its frames; the run index too."""
    problems: list[Problem] = []
    folded: dict[int, tuple[str, StreamView]] = {}
    with log.backend.read() as txn:
        names = {
            U64.unpack(k)[0]: v.decode("utf-8", "surrogatepass") for k, v in txn.scan(STREAM_NAMES)
        }
    for sid, name in names.items():
        if parse_stream_key(name) is None:
            continue
        try:
            view = fold((sf.seq, sf.frame) for sf in log.read_stream(name))
        except CorruptFrame as e:
            problems.append(Problem("projection", f"cannot fold: {e}", stream=name))
            continue
        folded[sid] = (name, view)
    with log.backend.read() as txn:
        for sid, (name, view) in folded.items():
            parsed = parse_stream_key(name)
            assert parsed is not None
            rows = read_view(txn, sid)
            for part in ("checkpoints", "blobs", "writes"):
                want, got = getattr(view, part), getattr(rows, part)
                if want != got:
                    missing = len(set(want) - set(got))
                    extra = len(set(got) - set(want))
                    problems.append(
                        Problem(
                            "projection",
                            f"lg {part} rows differ from the fold of the stream "
                            f"({missing} missing, {extra} extra, "
                            f"{sum(1 for k in set(want) & set(got) if want[k] != got[k])} changed)",
                            stream=name,
                        )
                    )
            problems += _verify_latest(log, txn, sid, thread_key(*parsed), view, name)
            entry = stream_id(txn, *parsed)
            if (entry == sid) == view.empty:
                problems.append(
                    Problem(
                        "projection",
                        f"lg_threads entry is {'present' if entry else 'absent'} but the stream "
                        f"view is {'empty' if view.empty else 'not empty'}",
                        stream=name,
                    )
                )
        want_runs = {
            run_key(run, sid, cid) for sid, (_, v) in folded.items() for run, cid in v.runs()
        }
        got_runs = {k for k, _ in txn.scan(RUNS)}
        if want_runs != got_runs:
            problems.append(
                Problem(
                    "projection",
                    f"lg_runs index differs from the fold: {len(want_runs - got_runs)} missing, "
                    f"{len(got_runs - want_runs)} extra",
                )
            )
        for tid, ns, sid in stream_ids(txn, None):
            if sid not in folded:
                problems.append(
                    Problem(
                        "projection",
                        f"lg_threads names stream id {sid} for ({tid!r}, {ns!r}), which is not "
                        "a LangGraph stream of this log",
                    )
                )
    return problems


def expected_latest(
    log: EventLog, txn: ReadTxn, sid: int, view: StreamView
) -> tuple[LatestRow, LatestWrites] | None:
    """The ``lg_latest`` rows a stream whose view is ``view`` may hold (from its other
    tables and frames), ``None`` when it has no checkpoint."""
    if not view.checkpoints:
        return None
    cid = max(view.checkpoints)
    row = view.checkpoints[cid]
    reader = BlobReader(log, txn, sid, _no_loads, Patches(log.frame_bytes_max))
    frame = reader.frame(row.seq)
    if not isinstance(frame, LgCheckpoint):
        raise CorruptFrame(f"seq {row.seq} is indexed as a checkpoint", seq=row.seq)
    values = []
    for channel, version in frame.versions.items():
        values.append((channel, reader.chain(channel, version) or ()))
    writes = []
    for (wcid, task, _), w in sorted(view.writes.items()):
        if wcid == cid:
            wf = reader.frame(w.seq)
            writes.append((task, w.task_path, wf.writes[w.pos]))
    latest = LatestRow(
        sid, cid, row, frame.checkpoint_type, frame.checkpoint, dict(frame.versions),
        tuple(values),
    )  # fmt: skip
    return latest, LatestWrites(cid, tuple(writes))


def _verify_latest(
    log: EventLog, txn: ReadTxn, sid: int, tkey: bytes, view: StreamView, name: str
) -> list[Problem]:
    """A stream's ``lg_latest`` rows, when present, against what its other tables say."""
    got = read_latest(txn, tkey)
    if got is None:
        try:
            stray = txn.get(LATEST, latest_writes_key(tkey))
        except CheckpointError:
            return []
        if stray is None:
            return []
        return [
            Problem("projection", "lg_latest has a writes row but no checkpoint row", stream=name)
        ]
    try:
        want = expected_latest(log, txn, sid, view)
    except CheckpointError as e:
        return [Problem("projection", f"cannot check lg_latest: {e}", stream=name)]
    lr, lw = got
    if want is None or lr != want[0]:
        return [
            Problem(
                "projection",
                "lg_latest row differs from the newest checkpoint of the stream "
                f"(row: {lr.checkpoint_id!r}, newest: {want[0].checkpoint_id if want else None!r})",
                stream=name,
            )
        ]
    if lw is not None and lw.checkpoint_id == lr.checkpoint_id:
        key = operator.itemgetter(0, 1)
        mine = sorted(((t, w.idx, p, w) for t, p, w in lw.writes), key=key)
        theirs = sorted(((t, w.idx, p, w) for t, p, w in want[1].writes), key=key)
        if mine != theirs:
            return [
                Problem(
                    "projection",
                    f"lg_latest writes differ from the write rows of {lr.checkpoint_id!r} "
                    f"({len(mine)} kept, {len(theirs)} stored)",
                    stream=name,
                )
            ]
    return []


# -- the view (eventlog.views.View) ------------------------------------------------------------


class _NoFrames(BlobReader):
    """The blob index of a transaction without the frames (a view applying frames has no log
    to decode them): a chain it would read ends ``keep_latest`` (the rows stay absent)."""

    def __init__(self, txn: ReadTxn, sid: int) -> None:
        self.txn, self.sid, self.loads = txn, sid, _no_loads
        self.patches = Patches(0)

    def frame(self, seq: int) -> Any:
        raise CorruptFrame(f"seq {seq}: applying a frame reads no other frame", seq=seq)


class LangGraphView:
    """LangGraph's materialized view: checkpoints, blob and write indexes, threads and runs of
    every ``lg:`` stream, kept by :func:`apply_rows` (the same function the writer runs)."""

    name: Final = "langgraph"
    tables: Final = TABLES

    def claims(self, stream: str, first: Any) -> bool:
        return parse_stream_key(stream) is not None and isinstance(
            first, (LgCheckpoint, LgWrites, LgRemove)
        )

    def apply(
        self, txn: WriteTxn, stream: str, sid: int, seq: int, frame: Any, stored_bytes: int
    ) -> None:
        parsed = parse_stream_key(stream)
        if parsed is None:
            raise CorruptFrame(f"{stream!r} is not a LangGraph stream key", stream=stream)
        tkey = thread_key(*parsed)
        apply_rows(txn, sid, seq, frame, tkey)
        if isinstance(frame, LgCheckpoint):
            keep_latest(txn, frame, sid, tkey, seq, lambda: _NoFrames(txn, sid))
        elif isinstance(frame, LgWrites):
            keep_latest_writes(txn, tkey, frame)

    def rebuild_stream(
        self, txn: WriteTxn, stream: str, sid: int, frames: Iterable[StoredFrame[Any]]
    ) -> None:
        for sf in frames:
            self.apply(txn, stream, sid, sf.seq, sf.frame, sf.stored_bytes)

    def verify(
        self, log: EventLog, progress: Callable[[int, int], None] | None = None
    ) -> list[Problem]:
        return verify_views(log)

    def describe(self, stream: str) -> StreamInfo | None:
        parsed = parse_stream_key(stream)
        if parsed is None:
            return None
        thread, ns = parsed
        return StreamInfo(
            stream, self.name, "langgraph thread", thread if not ns else f"{thread} ns={ns}",
            aliases=(thread,) if not ns else (),
            labels={"thread_id": thread, "checkpoint_ns": ns, "namespace": ns},
        )  # fmt: skip

    def steps(self, log: EventLog, stream: str, *, diffs: bool = False) -> Iterator[Any]:
        return langgraph_steps.steps(log, stream, BlobReader)

    def steps_from(
        self, log: EventLog, stream: str, from_seq: int, to_seq: int | None = None
    ) -> Iterator[Any]:
        """:meth:`steps` from ``from_seq`` (to ``to_seq``), read from the rows at a cost
        independent of the frames before it (langgraph_steps.steps_from)."""
        return langgraph_steps.steps_from(log, stream, from_seq, BlobReader, ROWS, to_seq)


ROWS: Final = langgraph_steps.Rows(TABLES, read_checkpoint_row, write_rows, blob_seq)
"""The row readers :func:`langgraph_steps.steps_from` reads a step at a seq with."""

VIEW: Final = LangGraphView()
