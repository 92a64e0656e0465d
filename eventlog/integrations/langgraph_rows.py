"""LangGraph views: table names, keys, and the row and frame readers.

Part of :mod:`eventlog.integrations.langgraph_store` (which re-exports it; the tables and
invariants are described there).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Iterator
from typing import Any, Final, Protocol

import msgspec

from backends.base import Backend, ReadTxn, WriteTxn
from eventlog.errors import CheckpointError, CorruptFrame
from eventlog.frames import (
    BLOB_FULL,
    BLOB_PATCH,
    LgBlob,
    LgCheckpoint,
    LgRemove,
    LgWrite,
    LgWrites,
)
from eventlog.integrations.langgraph_links import (
    LINK_PREFIX,
    LINK_WIDTH,
    link_data,
    link_prefix,
    split_links,
)
from eventlog.layout import LOG, STREAM_NAMES, STREAMS, U16, U32, U64, U64X2, s16, utf8
from eventlog.log import EventLog
from projections.langgraph import (
    CkptRow,
    StreamView,
    WriteRow,
    checkpoint_row,
    version_key,
)

THREADS: Final = "lg_threads"
CHECKPOINTS: Final = "lg_checkpoints"
BLOBS: Final = "lg_blobs"
WRITES: Final = "lg_writes"
RUNS: Final = "lg_runs"
LATEST: Final = "lg_latest"
READS: Final = "lg_reads"
TABLES: Final = (THREADS, CHECKPOINTS, BLOBS, WRITES, RUNS, LATEST, READS)
VIEW_TABLES: Final = (READS, CHECKPOINTS, BLOBS, WRITES)  # keyed by sid first

STREAM_PREFIX: Final = "lg:"
CHAIN_READ_MAX: Final = 4096  # a longer chain on read is corruption (logs written before
# keyframes chained up to 256 deltas; now every delta's base is a full blob)
IDX_BIAS: Final = 1 << 31

KEYFRAME_EVERY: Final = 16  # delta blobs (each against the keyframe) before a full one again
PATCH_KEYFRAME_EVERY: Final = 64  # ... when they are patches: a patch against the keyframe
# grows with the edits since it, not with the value (the byte budget below bounds it), so a
# 64 KiB value edited a little each step pays a keyframe (its frame compressed) every 65 puts
CHAIN_RATIO: Final = 2  # ... or once the deltas since the keyframe outweigh it this much
PATCH_MIN_BYTES: Final = 2048  # smaller values are stored in full (a patch would not pay)
MEMO_ENTRIES_MAX: Final = 4096  # (stream, channel) pairs whose last blob this process remembers
MEMO_BYTES_MAX: Final = 64 << 20  # bytes of values (and patch bases) that memos keep alive
INLINE_MAX: Final = 2048  # a blob this small (its data) is copied into each read row naming it


class Serde(Protocol):
    """LangGraph's ``SerializerProtocol``, as much of it as the storage uses."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]: ...

    def loads_typed(self, data: tuple[str, bytes]) -> Any: ...


_enc = msgspec.msgpack.Encoder()
_dec_ckpt = msgspec.msgpack.Decoder(CkptRow)
_dec_write = msgspec.msgpack.Decoder(WriteRow)


class LatestRow(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The newest checkpoint of a stream, ready to return: its row, body, versions and each
    channel's resolved chain (appends then one full blob; ``()``: the channel has no value)."""

    sid: int
    checkpoint_id: str
    row: CkptRow
    checkpoint_type: str
    checkpoint: bytes
    versions: dict[str, str | int | float]
    values: tuple[tuple[str, tuple[tuple[int, LgBlob], ...]], ...]
    apart: tuple[tuple[int, str], ...] = ()
    """``(seq, channel)`` of the chain links stored without their data (more than
    ``INLINE_MAX`` bytes: a keyframe, a large value, a long delta), which data rows hold
    (:mod:`eventlog.integrations.langgraph_links`, named by the ``k`` row), so no put
    rewrites a large row."""


class LatestWrites(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The writes stored against ``checkpoint_id``: ``(task id, task path, write)``."""

    checkpoint_id: str
    writes: tuple[tuple[str, str, LgWrite], ...]


class ReadRow(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A checkpoint as ``get_tuple`` / ``list`` read it, one row per checkpoint (``lg_reads``):
    its row, body and versions, and per channel that has a blob at its version (an empty one
    too) ``(channel, seq, blob)``: the seq of the frame holding that blob (the blob index's
    entry when the checkpoint was stored) and the blob itself when its data is at most
    ``INLINE_MAX`` bytes (``None``: read it from that frame). A delta names its keyframe."""

    row: CkptRow
    checkpoint_type: str
    checkpoint: bytes
    versions: dict[str, str | int | float]
    values: tuple[tuple[str, int, LgBlob | None], ...]


class LatestHead(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A ``c`` row as a put reads it first: its stream, checkpoint id and ``apart`` links
    decoded, its versions and chains kept as raw msgpack (:func:`latest_versions`,
    :func:`latest_values` decode them when a channel needs them)."""

    sid: int
    checkpoint_id: str
    row: msgspec.Raw
    checkpoint_type: msgspec.Raw
    checkpoint: msgspec.Raw
    versions: msgspec.Raw
    values: msgspec.Raw
    apart: tuple[tuple[int, str], ...] = ()


class _ReadHead(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The first field of a :class:`ReadRow` (a decoder skips the others)."""

    row: CkptRow


_dec_latest = msgspec.msgpack.Decoder(LatestRow)
_dec_read_head = msgspec.msgpack.Decoder(_ReadHead)
_dec_latest_head = msgspec.msgpack.Decoder(LatestHead)
_dec_latest_versions = msgspec.msgpack.Decoder(dict[str, str | int | float])
_dec_latest_values = msgspec.msgpack.Decoder(tuple[tuple[str, tuple[tuple[int, LgBlob], ...]], ...])
_dec_read = msgspec.msgpack.Decoder(ReadRow)
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


# ``s16`` of a channel name, kept (a pure function: a graph has few channels; bounded)
_channel16 = functools.lru_cache(maxsize=1024)(s16)


def blob_key(sid: int, channel: str, vkey: bytes) -> bytes:
    return U64.pack(sid) + _channel16(channel) + vkey


def writes_prefix(sid: int, checkpoint_id: str) -> bytes:
    return U64.pack(sid) + _s16(checkpoint_id)


def task_writes_prefix(sid: int, checkpoint_id: str, task_id: str) -> bytes:
    """The keys of one task's writes to a checkpoint begin with this (then :func:`write_idx`)."""
    return writes_prefix(sid, checkpoint_id) + _s16(task_id)


def write_idx(idx: int) -> bytes:
    return U32.pack(idx + IDX_BIAS)


def write_key(sid: int, checkpoint_id: str, task_id: str, idx: int) -> bytes:
    return task_writes_prefix(sid, checkpoint_id, task_id) + write_idx(idx)


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


def latest_blobs_key(tkey: bytes) -> bytes:
    return b"k" + tkey


def keyframe_prefix(sid: int) -> bytes:
    return b"f" + U64.pack(sid)


def keyframe_key(sid: int, seq: int, channel: str) -> bytes:
    """``lg_latest`` key of the raw bytes of the keyframe of ``channel`` stored at ``seq``."""
    return b"f" + U64X2.pack(sid, seq) + _utf8(channel)


def encode_keyframe(blob: LgBlob) -> bytes:
    return _s16(blob.type) + blob.data


def decode_keyframe(raw: bytes | memoryview) -> tuple[str, memoryview]:
    """``(serde type, bytes)`` of a keyframe row, the bytes a view of ``raw`` (no copy)."""
    n = U16.unpack_from(raw)[0]
    return str(raw[2 : 2 + n], "utf-8", "surrogatepass"), memoryview(raw)[2 + n :]


def read_keyframes_now(
    backend: Backend, sid: int, want: list[tuple[int, str]]
) -> list[tuple[str, memoryview] | None]:
    """:func:`read_keyframe` of each ``(seq, channel)`` of ``want``, in one read of its own (a
    keyframe row never changes while it exists: no snapshot needed; one statement on
    PostgreSQL)."""
    try:
        raws = backend.get_many_now(LATEST, [keyframe_key(sid, seq, ch) for seq, ch in want])
    except CheckpointError:  # a log opened read-only that never had the table
        return [None] * len(want)
    return [None if raw is None else decode_keyframe(raw) for raw in raws]


def read_keyframe(txn: ReadTxn, sid: int, seq: int, channel: str) -> tuple[str, memoryview] | None:
    """The raw bytes a patch's keyframe stores (a view of its ``f`` row, copied out of the
    transaction), ``None`` when it has none (then they are read from its frame).

    A view of the map itself (a ``buffers=True`` LMDB transaction) was measured and not kept:
    the copy is gone, but a cold keyframe's cost moves to the patch's decompression, which
    then reads the same 16 pages from the map (a 64 KiB read by id at 100,000 steps: 48.9 µs
    both ways, one process, interleaved)."""
    try:
        raw = txn.get(LATEST, keyframe_key(sid, seq, channel))
    except CheckpointError:  # a log opened read-only that never had the table
        return None
    return None if raw is None else decode_keyframe(raw)


def patched_keyframes(txn: ReadTxn, sid: int, frame: LgCheckpoint) -> list[LgBlob]:
    """The full blobs of ``frame`` over ``INLINE_MAX`` bytes that replace a patch (the
    parent's read row holds a patch for the channel): the keyframes of patched channels, which
    get an ``f`` row (their bytes uncompressed, so a read of a patch against one decompresses
    no frame)."""
    big = [b for b in frame.blobs if b.kind == BLOB_FULL and len(b.data) > INLINE_MAX]
    if not big or frame.parent_id is None:
        return []
    pr = read_row(txn, sid, frame.parent_id)
    if pr is None:
        return []
    patched = {ch for ch, _, bl in pr.values if bl is not None and bl.kind == BLOB_PATCH}
    return [b for b in big if b.channel in patched]


def decode_latest(raw: bytes) -> LatestRow | None:
    """A ``c`` row as stored (``apart`` links without their data); ``None`` when it does not
    decode as one (then it is treated as absent: readers fall back, the next put rewrites it)."""
    try:
        return _dec_latest.decode(raw)
    except msgspec.DecodeError:
        return None


def decode_latest_head(raw: bytes) -> LatestHead | None:
    """A ``c`` row's :class:`LatestHead`; ``None`` when it does not decode as one."""
    try:
        return _dec_latest_head.decode(raw)
    except msgspec.DecodeError:
        return None


def latest_versions(head: LatestHead) -> dict[str, str | int | float]:
    """The versions of a :class:`LatestHead` (``msgspec.DecodeError`` when they do not
    decode)."""
    return _dec_latest_versions.decode(head.versions)


def latest_values(head: LatestHead) -> tuple[tuple[str, tuple[tuple[int, LgBlob], ...]], ...]:
    """The chains of a :class:`LatestHead` (``msgspec.DecodeError`` when they do not
    decode)."""
    return _dec_latest_values.decode(head.values)


def latest_blobs(rows: list[tuple[bytes, bytes]] | None) -> dict[tuple[int, str], bytes] | None:
    """``(seq, channel) -> data`` of the data rows a read fetched with the ``c`` row."""
    return None if rows is None else link_data(rows)


def hydrate(lr: LatestRow, linked: list[tuple[bytes, bytes]] | None) -> LatestRow | None:
    """``lr`` with its ``apart`` links' data filled in from the data rows ``linked``
    (``apart`` empty), ``None`` when one is missing."""
    if not lr.apart:
        return lr
    kept = latest_blobs(linked)
    if kept is None:
        return None
    apart = set(lr.apart)
    values = []
    for ch, chain in lr.values:
        links = []
        for seq, link in chain:
            b = link
            if (seq, b.channel) in apart:
                data = kept.get((seq, b.channel))
                if data is None:
                    return None
                b = msgspec.structs.replace(b, data=data)
            links.append((seq, b))
        values.append((ch, tuple(links)))
    return msgspec.structs.replace(lr, values=tuple(values), apart=())


def read_latest_parts(
    txn: ReadTxn | Backend, tkey: bytes, skip: Collection[bytes] = ()
) -> tuple[LatestRow, LatestWrites | None, list[tuple[bytes, bytes]]] | None:
    """The ``lg_latest`` rows of a stream as stored: the ``c`` row (its ``apart`` links without
    their data), the ``w`` row, and the data rows the ``k`` row names (``(key, value)``) but
    those keyed in ``skip`` (data the caller holds), in one statement (given a backend, a
    transaction of its own: one round trip); ``None`` when the ``c`` row is absent."""
    keys = [latest_key(tkey), latest_writes_key(tkey)]
    link = latest_blobs_key(tkey)
    try:
        if isinstance(txn, Backend):
            got = txn.get_many_linked_now(LATEST, keys, link, LINK_PREFIX, LINK_WIDTH, skip)
        else:
            got = txn.get_many_linked(LATEST, keys, link, LINK_PREFIX, LINK_WIDTH, skip)
    except CheckpointError:  # a log opened read-only that never had the table
        return None
    (raw, raw_w), linked = got
    lr = None if raw is None else decode_latest(raw)
    if lr is None:
        return None
    return lr, None if raw_w is None else _dec_latest_writes.decode(raw_w), linked


def read_latest(
    txn: ReadTxn | Backend, tkey: bytes
) -> tuple[LatestRow, LatestWrites | None] | None:
    """:func:`read_latest_parts` with the ``c`` row's data filled in from the data rows
    (``None`` also when one is missing)."""
    got = read_latest_parts(txn, tkey)
    lr = None if got is None else hydrate(got[0], got[2])
    return None if lr is None or got is None else (lr, got[1])


def drop_latest(txn: WriteTxn, tkey: bytes) -> None:
    """Drop a stream's ``c``, ``w`` and ``k`` rows and the data rows its ``k`` row names."""
    kkey = latest_blobs_key(tkey)
    for lid in split_links(txn.get(LATEST, kkey)):
        txn.discard(LATEST, LINK_PREFIX + lid)
    txn.discard(LATEST, latest_key(tkey))
    txn.discard(LATEST, latest_writes_key(tkey))
    txn.discard(LATEST, kkey)


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


def _reads_get(txn: ReadTxn, key: bytes) -> bytes | None:
    try:
        return txn.get(READS, key)
    except CheckpointError:  # a log opened read-only that never had the table
        return None


def _reads_scan(
    txn: ReadTxn, start: bytes, stop: bytes, *, reverse: bool = False, limit: int | None = None
) -> Iterator[tuple[bytes, bytes]]:
    try:
        return txn.scan(READS, start, stop, reverse=reverse, limit=limit)
    except CheckpointError:  # a log opened read-only that never had the table
        return iter(())


def row_of_read(raw: bytes) -> CkptRow:
    """The checkpoint row a read row's bytes hold (the rest is skipped, not decoded)."""
    return _dec_read_head.decode(raw).row


def read_checkpoint_row(txn: ReadTxn, sid: int, checkpoint_id: str) -> CkptRow | None:
    """A checkpoint's row: from its read row (how a put stores it), else from its
    ``lg_checkpoints`` row (a checkpoint stored before read rows replaced those)."""
    key = checkpoint_key(sid, checkpoint_id)
    raw = _reads_get(txn, key)
    if raw is not None:
        return row_of_read(raw)
    raw = txn.get(CHECKPOINTS, key)
    return None if raw is None else _dec_ckpt.decode(raw)


def read_row(txn: ReadTxn, sid: int, checkpoint_id: str) -> ReadRow | None:
    """The ``lg_reads`` row of a checkpoint, ``None`` when absent (a checkpoint stored before
    read rows existed: readers fall back to its frame)."""
    raw = _reads_get(txn, checkpoint_key(sid, checkpoint_id))
    return None if raw is None else _dec_read.decode(raw)


def decode_read_row(raw: bytes) -> ReadRow:
    return _dec_read.decode(raw)


def make_read_row(
    txn: ReadTxn,
    sid: int,
    seq: int,
    frame: LgCheckpoint,
    row: CkptRow | None = None,
    mine: dict[str, LgBlob] | None = None,
) -> ReadRow:
    """The read row of ``frame`` (stored at ``seq``, its blobs indexed): its own blobs, and for
    each other channel the blob index's seq, with the blob copied from the parent's read row
    when that names the same frame (else read later from the frame). ``row``, ``mine``:
    ``checkpoint_row(seq, frame)`` and the frame's blobs by channel, when the caller has them."""
    if mine is None:
        mine = {b.channel: b for b in frame.blobs}
    parent: dict[str, tuple[int, LgBlob | None]] | None = None
    values: list[tuple[str, int, LgBlob | None]] = []
    for channel, version in frame.versions.items():
        b = mine.get(channel)
        if b is not None:
            values.append((channel, seq, b if len(b.data) <= INLINE_MAX else None))
            continue
        raw = txn.get(BLOBS, blob_key(sid, channel, version_key(version)))
        if raw is None:
            continue
        at = U64.unpack(raw)[0]
        if parent is None:
            pr = None if frame.parent_id is None else read_row(txn, sid, frame.parent_id)
            parent = {} if pr is None else {ch: (s, bl) for ch, s, bl in pr.values}
        got = parent.get(channel)
        values.append((channel, at, got[1] if got is not None and got[0] == at else None))
    return ReadRow(
        checkpoint_row(seq, frame) if row is None else row, frame.checkpoint_type,
        frame.checkpoint, frame.versions, tuple(values),
    )  # fmt: skip


def latest_checkpoint(txn: ReadTxn, sid: int) -> tuple[str, CkptRow] | None:
    """The checkpoint with the greatest id (LangGraph ids sort by creation time)."""
    start, stop = U64.pack(sid), U64.pack(sid + 1)
    top = next(iter(_reads_scan(txn, start, stop, reverse=True, limit=1)), None)
    old = next(iter(txn.scan(CHECKPOINTS, start, stop, reverse=True, limit=1)), None)
    if old is not None and (top is None or old[0] > top[0]):
        return old[0][8:].decode("utf-8", "surrogatepass"), _dec_ckpt.decode(old[1])
    if top is None:
        return None
    return top[0][8:].decode("utf-8", "surrogatepass"), row_of_read(top[1])


def stream_rows(
    txn: ReadTxn, sid: int, start: bytes, stop: bytes
) -> Iterator[tuple[bytes, bytes | None, bytes | None]]:
    """``(key, read row, lg_checkpoints row)`` of the checkpoints of stream ``sid`` whose keys
    are in ``[start, stop)``, newest first: a checkpoint has a read row, an ``lg_checkpoints``
    row (stored before read rows replaced those) or both (stored between: they agree)."""
    olds = txn.scan(CHECKPOINTS, start, stop, reverse=True)
    old = next(olds, None)
    reads = _reads_scan(txn, start, stop, reverse=True)
    if old is None:  # every checkpoint in the range has its read row only
        for key, raw in reads:
            yield key, raw, None
        return
    new = next(reads, None)
    while new is not None or old is not None:
        if old is None or (new is not None and new[0] > old[0]):
            assert new is not None
            yield new[0], new[1], None
            new = next(reads, None)
        elif new is None or old[0] > new[0]:
            yield old[0], None, old[1]
            old = next(olds, None)
        else:
            yield new[0], new[1], old[1]
            new, old = next(reads, None), next(olds, None)


def checkpoint_rows(
    txn: ReadTxn, sid: int, *, before: str | None = None
) -> Iterator[tuple[str, CkptRow]]:
    """Checkpoints of a stream, newest (greatest id) first, ids below ``before`` when given."""
    start = U64.pack(sid)
    stop = checkpoint_key(sid, before) if before is not None else U64.pack(sid + 1)
    for key, raw, old in stream_rows(txn, sid, start, stop):
        row = row_of_read(raw) if raw is not None else _dec_ckpt.decode(old)  # type: ignore[arg-type]
        yield key[8:].decode("utf-8", "surrogatepass"), row


def write_rows(txn: ReadTxn, sid: int, checkpoint_id: str) -> list[tuple[str, int, WriteRow]]:
    """``(task id, idx, row)`` of every write stored against a checkpoint."""
    return decode_write_rows(txn.prefix_rows(WRITES, writes_prefix(sid, checkpoint_id)))


def decode_write_rows(rows: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, int, WriteRow]]:
    """``(task id, idx, row)`` of ``lg_writes`` rows ``(key, value)``."""
    out = []
    for key, raw in rows:
        _, task, idx = split_write_key(key)
        out.append((task, idx, _dec_write.decode(raw)))
    return out


def read_named(
    backend: Backend, thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> tuple[int, ReadRow | None, list[tuple[str, int, WriteRow]]] | None:
    """A checkpoint's stream id, read row (``None``: absent) and write rows, in one read of
    its own (``Backend.get_named_now``: one statement on PostgreSQL); ``None`` when the thread
    has no such namespace. Raises ``CheckpointError`` when the log lacks one of the tables."""
    p, raw, rows = backend.get_named_now(
        THREADS,
        thread_key(thread_id, checkpoint_ns),
        READS,
        _utf8(checkpoint_id),
        WRITES,
        _s16(checkpoint_id),
    )
    if p is None:
        return None
    rr = None if raw is None else _dec_read.decode(raw)
    return U64.unpack(p)[0], rr, decode_write_rows(rows)


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


def _keep_thread(txn: WriteTxn, tkey: bytes, k: bytes) -> None:
    """``lg_threads`` names the stream (written only when it did not: an unchanged row leaves
    its page clean, one page less for the commit to write)."""
    if txn.get(THREADS, tkey) != k:
        txn.put(THREADS, tkey, k)


def apply_rows(
    txn: WriteTxn, sid: int, seq: int, frame: Any, tkey: bytes, *, newer: bool = False
) -> bool:
    """:func:`projections.langgraph.apply` on the tables, in the frame's transaction. ``True``
    when the frame is a checkpoint and the stream's view was empty before it (its
    ``lg_threads`` entry was absent): then it is the stream's only checkpoint.

    ``newer``: for a checkpoint, the caller read the stream's ``lg_latest`` ``c`` row
    (:func:`newer_than_latest`) and it names this stream and a smaller checkpoint id than the
    frame's, so the checkpoint was never stored (the row names the greatest id stored) and the
    view is not empty: the rows that say so are not read again. For writes, the caller read
    the stream's ``w`` row (present only with a ``c`` row: the view is not empty), so
    ``lg_threads`` is not read."""
    if isinstance(frame, LgCheckpoint):
        return apply_checkpoint(txn, sid, seq, frame, tkey, newer)
    if isinstance(frame, LgWrites):
        prefix, path = task_writes_prefix(sid, frame.checkpoint_id, frame.task_id), frame.task_path
        for pos, w in enumerate(frame.writes):  # (the keys share the prefix: built once)
            txn.put(WRITES, prefix + write_idx(w.idx), _enc.encode(WriteRow(seq, pos, path)))
        if frame.writes and not newer:  # (newer: the caller knows lg_threads names it)
            _keep_thread(txn, tkey, U64.pack(sid))
    elif isinstance(frame, LgRemove):
        _apply_remove(txn, sid, frame, tkey)
    return False


def newer_than_latest(head: LatestHead | None, sid: int, checkpoint_id: str) -> bool:
    """``head`` (the stream's ``c`` row, as stored) names stream ``sid`` and a checkpoint id
    below ``checkpoint_id``: then ``checkpoint_id`` was never stored in the stream (the row
    names its greatest id) and the stream's view is not empty (see :func:`apply_rows`)."""
    return head is not None and head.sid == sid and head.checkpoint_id < checkpoint_id


def apply_checkpoint(
    txn: WriteTxn,
    sid: int,
    seq: int,
    frame: LgCheckpoint,
    tkey: bytes,
    newer: bool = False,
    row: CkptRow | None = None,
    mine: dict[str, LgBlob] | None = None,
) -> bool:
    """The rows of a checkpoint: its read row (it replaced the ``lg_checkpoints`` row, which a
    checkpoint stored again loses), blob index, run index, keyframe rows. ``newer``: see
    :func:`apply_rows` (no row of the checkpoint to replace, ``lg_threads`` names the stream).
    ``row``, ``mine``: see :func:`make_read_row`."""
    k = U64.pack(sid)
    ckey = checkpoint_key(sid, frame.checkpoint_id)
    fresh = False if newer else txn.get(THREADS, tkey) != k
    old_run = None
    if not (fresh or newer):  # the checkpoint may be stored again: its new rows replace the old
        old = txn.get(CHECKPOINTS, ckey)
        if old is not None:  # stored before read rows replaced these: the read row does
            old_run = _dec_ckpt.decode(old).run_id
            txn.delete(CHECKPOINTS, ckey)
        else:
            old = txn.get(READS, ckey)
            if old is not None:
                old_run = row_of_read(old).run_id
    if old_run is not None:
        txn.delete(RUNS, run_key(old_run, sid, frame.checkpoint_id))
    if frame.run_id is not None:
        txn.put(RUNS, run_key(frame.run_id, sid, frame.checkpoint_id), b"")
    at = U64.pack(seq)
    big = False
    for blob in frame.blobs:
        txn.put(BLOBS, blob_key(sid, blob.channel, version_key(blob.version)), at)
        big = big or len(blob.data) > INLINE_MAX
    txn.put(READS, ckey, _enc.encode(make_read_row(txn, sid, seq, frame, row, mine)))
    if big:  # (only a blob over INLINE_MAX may be a patched channel's keyframe)
        for blob in patched_keyframes(txn, sid, frame):
            txn.put(LATEST, keyframe_key(sid, seq, blob.channel), encode_keyframe(blob))
    if fresh:  # lg_threads names the stream (written only when it did not: an unchanged
        txn.put(THREADS, tkey, k)  # row leaves its page clean, one less to write)
    return fresh


def _apply_remove(txn: WriteTxn, sid: int, frame: LgRemove, tkey: bytes) -> None:
    k = U64.pack(sid)
    ids = frame.checkpoint_ids
    raw = txn.get(LATEST, latest_key(tkey)) if ids is not None else None
    lr = None if raw is None else decode_latest(raw)
    if lr is None or lr.checkpoint_id in ids:  # type: ignore[operator]
        drop_latest(txn, tkey)  # the newest checkpoint is removed: readers fall back
    if ids is None:
        for key, rraw, old in list(stream_rows(txn, sid, k, U64.pack(sid + 1))):
            run = (row_of_read(rraw) if rraw is not None else _dec_ckpt.decode(old)).run_id  # type: ignore[arg-type]
            if run is not None:
                txn.delete(RUNS, run_key(run, sid, key[8:].decode("utf-8", "surrogatepass")))
        txn.delete_prefix(CHECKPOINTS, k)
        txn.delete_prefix(READS, k)
        txn.delete_prefix(LATEST, keyframe_prefix(sid))
        txn.delete_prefix(LATEST, link_prefix(sid))
        txn.delete_prefix(BLOBS, k)
        txn.delete_prefix(WRITES, k)
        txn.delete(THREADS, tkey)
        return
    for cid in set(ids):
        stored = read_checkpoint_row(txn, sid, cid)
        if stored is not None:
            if stored.run_id is not None:
                txn.delete(RUNS, run_key(stored.run_id, sid, cid))
            txn.delete(CHECKPOINTS, checkpoint_key(sid, cid))
            txn.delete(READS, checkpoint_key(sid, cid))
        txn.delete_prefix(WRITES, writes_prefix(sid, cid))
    if not any(next(iter(txn.scan_prefix(t, k, limit=1)), None) for t in VIEW_TABLES):
        txn.delete(THREADS, tkey)  # the view is empty, as the fold says


def read_view(txn: ReadTxn, sid: int) -> StreamView:
    """The materialized view of one stream, as :func:`projections.langgraph.fold` shapes it."""
    k = U64.pack(sid)
    view = StreamView()
    rows = list(stream_rows(txn, sid, k, U64.pack(sid + 1)))
    for key, raw, old in reversed(rows):  # oldest first, as the fold adds them
        row = _dec_ckpt.decode(old) if old is not None else row_of_read(raw)  # type: ignore[arg-type]
        view.checkpoints[key[8:].decode("utf-8", "surrogatepass")] = row
    for key, raw in txn.scan_prefix(BLOBS, k):
        n = U16.unpack_from(key, 8)[0]
        channel = key[10 : 10 + n].decode("utf-8", "surrogatepass")
        view.blobs[channel, key[10 + n :]] = U64.unpack(raw)[0]
    for key, raw in txn.scan_prefix(WRITES, k):
        view.writes[split_write_key(key)] = _dec_write.decode(raw)
    return view


# -- frames and blobs --------------------------------------------------------------------------


def read_frame(log: EventLog, txn: ReadTxn, sid: int, seq: int, *, checksum: bool = True) -> Any:
    """The frame at ``seq`` of stream ``sid``, position verified, and its checksum unless
    ``checksum=False`` (LangGraph reads: ``verify`` checks every frame's checksum; a read checks
    the envelope's length, version and flags, its stream and seq, and that its payload
    decompresses and decodes as a frame)."""
    gkey = txn.get(STREAMS, U64X2.pack(sid, seq))
    data = None if gkey is None else txn.get(LOG, gkey)
    if data is None:
        raise CorruptFrame(
            f"LangGraph view points at seq {seq} of stream id {sid}, which is not in the log; "
            "run LmdbSaver.verify()",
            seq=seq,
        )
    env, frame = log.decode_envelope(data, checksum=checksum)
    if (env.stream_id, env.seq) != (sid, seq):
        raise CorruptFrame(
            f"the index says log #{U64.unpack(gkey or bytes(8))[0]} is seq {seq} of stream id "
            f"{sid}, but it holds seq {env.seq} of stream id {env.stream_id}; run verify()",
            seq=seq,
        )
    return frame
