"""LangGraph blobs: patches, resolving chains (:class:`BlobReader`), and what a writer remembers
of each channel's last blob (:class:`Memos`, :func:`plan_blob`).

Part of :mod:`eventlog.integrations.langgraph_store` (which re-exports it).
"""

from __future__ import annotations

import collections
import operator
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import zstandard
from zstandard.backend_cffi import ffi as _ffi  # type: ignore[attr-defined]  # see apply_patch
from zstandard.backend_cffi import lib as _lib  # type: ignore[attr-defined]

from backends.base import ReadTxn
from eventlog.errors import CorruptFrame
from eventlog.frames import (
    BLOB_APPEND,
    BLOB_EMPTY,
    BLOB_FULL,
    BLOB_PATCH,
    LgBlob,
    LgCheckpoint,
)
from eventlog.integrations.langgraph_rows import (
    CHAIN_RATIO,
    CHAIN_READ_MAX,
    INLINE_MAX,
    KEYFRAME_EVERY,
    MEMO_BYTES_MAX,
    MEMO_ENTRIES_MAX,
    PATCH_KEYFRAME_EVERY,
    PATCH_MIN_BYTES,
    Serde,
    blob_seq,
    read_frame,
    read_keyframe,
)
from eventlog.layout import U16, U32
from eventlog.log import EventLog
from projections.langgraph import (
    version_key,
)


def patch_base(base: bytes) -> zstandard.ZstdCompressionDict:
    """``base`` as a raw-content dictionary prepared for compression (read-only once built, so
    threads share it): a writer keeps it with its keyframe, so each patch against that
    keyframe skips loading the dictionary (about 100 µs for 64 KiB)."""
    dictionary = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    dictionary.precompute_compress(level=1)
    return dictionary


def make_patch(
    base: bytes, new: bytes, prepared: zstandard.ZstdCompressionDict | None = None
) -> bytes:
    """``new`` as a zstd frame compressed against ``base`` (a raw-content dictionary;
    ``prepared``: :func:`patch_base` of it)."""
    dictionary = prepared if prepared is not None else patch_base(base)
    return zstandard.ZstdCompressor(level=1, dict_data=dictionary).compress(new)


Loads = Callable[[tuple[str, bytes]], Any]
Chain = tuple[tuple[int, LgBlob], ...]  # (seq, blob): a version's blob, then its bases in turn
RESOLVED_BYTES_MAX: Final = 32 << 20  # resolved full bytes a saver keeps (Patches)


class KeyframeView(LgBlob, frozen=True, array_like=True, gc=False):
    """A keyframe in a chain as a view of its ``f`` row's bytes (``data`` empty): what
    :meth:`BlobReader.links` puts in a chain for readers that resolve keyframes
    (``keyframes=True``), so a patch against it is applied to the row as read, copied nowhere.
    Never stored (chains kept in rows are read with ``keyframes=False``)."""

    view: Any = None  # memoryview of the keyframe's bytes


_DCTX = threading.local()  # each thread's zstd decompression context and output buffer
_CONTENT_UNKNOWN: Final = (1 << 64) - 1  # ZSTD_CONTENTSIZE_UNKNOWN; ERROR is one less


def _decoder() -> tuple[Any, Any, int]:
    """This thread's zstd decompression context and output buffer (made once per thread)."""
    got: tuple[Any, Any, int] | None = getattr(_DCTX, "state", None)
    if got is None:
        dctx = _ffi.gc(_lib.ZSTD_createDCtx(), _lib.ZSTD_freeDCtx)
        got = _DCTX.state = (dctx, _ffi.new("char[]", 1 << 17), 1 << 17)
    return got


def apply_patch(
    base: bytes | memoryview, patch: bytes, max_bytes: int, *, scratch: bool = False
) -> bytes | memoryview:
    """``patch`` (a zstd frame made by :func:`make_patch`) applied to ``base``, its keyframe's
    bytes, read as a raw-content dictionary in place (libzstd's ``ZSTD_decompress_usingDict``
    through zstandard's cffi binding: no dictionary object built, no copy of ``base``, one
    decompression context per thread). ``scratch``: the result is a view of this thread's
    decompression buffer (no copy), valid until the thread's next call only. Raises
    ``ValueError`` when it does not apply."""
    ffi, lib = _ffi, _lib
    src = ffi.from_buffer(patch)
    size = lib.ZSTD_getFrameContentSize(src, len(patch))
    if size >= _CONTENT_UNKNOWN - 1:
        raise ValueError("not a zstd frame with its content size")
    if size > max_bytes:
        raise ValueError(f"its content ({size} bytes) exceeds {max_bytes} bytes")
    dctx, out, cap = _decoder()
    if size > cap:
        out, cap = ffi.new("char[]", size), size
        _DCTX.state = (dctx, out, cap)
    dictionary = ffi.from_buffer(base)
    n = lib.ZSTD_decompress_usingDict(dctx, out, size, src, len(patch), dictionary, len(base))
    if lib.ZSTD_isError(n) or n != size:
        why = ffi.string(lib.ZSTD_getErrorName(n)).decode() if lib.ZSTD_isError(n) else "short"
        raise ValueError(why)
    if scratch:
        return memoryview(ffi.buffer(out, n))
    return ffi.unpack(out, n)  # type: ignore[no-any-return]


class Patches:
    """Resolved channel bytes kept across reads by one saver.

    Keyed by ``(sid, seq, channel)``: the bytes a blob stores at a stream seq never change
    (seqs are not reused), so what is kept stays right across transactions. Kept (up to
    ``RESOLVED_BYTES_MAX``, least recently used out): the full bytes of the last full and
    patched blobs written, the newest values read, and the keyframes read from their frames or,
    on a server (``Backend.remote``: a row read is a round trip), from their ``f`` rows (a local
    ``f`` row is read again: a patch applies to the row in place, so keeping it would save one
    row read). A patch is applied by :func:`apply_patch`: nothing is
    built per keyframe, so a read whose keyframe nobody kept costs what a kept one does.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._full: collections.OrderedDict[tuple[int, int, str], tuple[str, bytes]] = (
            collections.OrderedDict()
        )
        self._full_bytes = 0

    def known(self, key: tuple[int, int, str], *, touch: bool = True) -> tuple[str, bytes] | None:
        """The bytes kept at ``key``; ``touch``: a hit counts as a use (least recently used
        first out). A scan (``list``) does not touch: walking a thread newest first would leave
        its newest values the least recently used, the first dropped by the next reads."""
        with self._lock:
            hit = self._full.get(key)
            if hit is not None and touch:
                self._full.move_to_end(key)
            return hit

    def keep(self, key: tuple[int, int, str], full: tuple[str, bytes]) -> None:
        """Keep ``full`` at ``key`` (values over an eighth of the budget are not kept)."""
        weight = len(full[1])
        if weight > RESOLVED_BYTES_MAX // 8:
            return
        with self._lock:
            old = self._full.pop(key, None)
            if old is not None:
                self._full_bytes -= len(old[1])
            self._full[key] = full
            self._full_bytes += weight
            while self._full_bytes > RESOLVED_BYTES_MAX:
                self._full_bytes -= len(self._full.popitem(last=False)[1][1])

    def apply(
        self,
        key: tuple[int, int, str],
        base: bytes | memoryview,
        patch: bytes,
        *,
        scratch: bool = False,
    ) -> bytes | memoryview:
        """``patch`` applied to ``base`` (the bytes of the keyframe at ``key``); ``scratch``:
        as a view valid until this thread's next patch (:func:`apply_patch`)."""
        try:
            return apply_patch(base, patch, self.max_bytes, scratch=scratch)
        except ValueError as e:
            raise CorruptFrame(
                f"a LangGraph blob patch does not apply to its base (seq {key[1]} of stream id "
                f"{key[0]}, channel {key[2]!r}): {e}",
                seq=key[1],
            ) from e


def materialize(
    sid: int,
    chain: Chain,
    loads: Loads,
    patches: Patches,
    *,
    keep_head: bool = False,
    copying: frozenset[str] = frozenset(),
) -> Any:
    """The value a blob chain (from :meth:`BlobReader.chain`) stores: the full bytes, patched
    in turn, then the appended tails. Needs no transaction. With ``keep_head`` keeps the
    patched bytes (the newest value: read again next). ``copying``: the serde types whose
    ``loads`` keeps nothing of the bytes it is given (it builds new objects): a patched value
    of one is decoded from the patch's scratch buffer, not from a copy of it."""
    i = 0
    while chain[i][1].kind == BLOB_APPEND:
        i += 1
    j = i
    while chain[j][1].kind == BLOB_PATCH:
        j += 1
    key_blob = chain[j][1]
    data: bytes | memoryview = key_blob.data
    if j > i:  # a patch against its keyframe (read in place from its f row: a KeyframeView)
        base: bytes | memoryview = key_blob.view if isinstance(key_blob, KeyframeView) else data
        scratch = not keep_head and chain[i][1].type in copying
        for k in range(j - 1, i - 1, -1):  # a chain of patches (logs written before keyframes)
            # only the last one may land in the scratch buffer: each earlier result is the
            # next one's base, which must not be the buffer it is decoded into
            base = patches.apply(
                (sid, chain[k + 1][0], chain[k][1].channel), base, chain[k][1].data,
                scratch=scratch and k == i,
            )  # fmt: skip
        data = base
    if keep_head and j > i:
        patches.keep((sid, chain[i][0], chain[i][1].channel), (chain[i][1].type, bytes(data)))
    # a memoryview only when the serde's type is in ``copying`` (its loads takes any buffer)
    value = loads((chain[i][1].type, data))  # type: ignore[arg-type]
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
    """Reads channel values of one stream inside one read transaction (frames cached).

    Frames are read without checking their checksum (``verify`` checks every frame's): their
    stream and seq, envelope and decoding are checked (:func:`read_frame`)."""

    def __init__(
        self,
        log: EventLog,
        txn: ReadTxn,
        sid: int,
        loads: Loads,
        patches: Patches | None = None,
        *,
        keyframes: bool = True,
        touch: bool = True,
    ) -> None:
        """``keyframes=False``: chains as the frames store them (a patch's keyframe blob from
        its frame, never from its raw ``f`` row, whose blob carries the patch's version).
        ``touch=False``: the kept bytes it finds do not count as used (a scan: ``list``)."""
        self.keyframes = keyframes
        self.touch = touch
        self.remote = log.backend.remote
        self.log = log
        self.txn = txn
        self.sid = sid
        self.loads = loads
        self.patches = patches if patches is not None else Patches(log.frame_bytes_max)
        self._frames: dict[int, Any] = {}
        self._keyframes: dict[tuple[int, str], tuple[str, memoryview]] = {}

    def frame(self, seq: int) -> Any:
        frame = self._frames.get(seq)
        if frame is None:
            frame = read_frame(self.log, self.txn, self.sid, seq, checksum=False)
            self._frames[seq] = frame
        return frame

    def keyframe(self, seq: int, channel: str) -> tuple[str, memoryview] | None:
        """The bytes of the keyframe of ``channel`` at ``seq`` as a view of its ``f`` row (read
        once per transaction, copied once: out of the transaction), ``None`` when it has none
        or the reader reads chains as stored."""
        if not self.keyframes:
            return None
        key = (seq, channel)
        hit = self._keyframes.get(key)
        if hit is None:
            hit = read_keyframe(self.txn, self.sid, seq, channel)
            if hit is not None:
                self._keyframes[key] = hit
        return hit

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
        hit = self.patches.known((self.sid, seq, channel), touch=self.touch)
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
        hit = self.patches.known((self.sid, blob.base, blob.channel), touch=self.touch)
        if hit is not None:  # its bytes are kept: no need to read its frame
            return LgBlob(blob.channel, blob.version, BLOB_FULL, *hit), blob.base
        if blob.kind == BLOB_PATCH:
            row = self.keyframe(blob.base, blob.channel)
            if row is not None:
                typ, view = row
                if self.remote:  # a row read is a round trip (PostgreSQL): keep its bytes
                    data = bytes(view)
                    self.patches.keep((self.sid, blob.base, blob.channel), (typ, data))
                    return LgBlob(blob.channel, blob.version, BLOB_FULL, typ, data), blob.base
                return KeyframeView(blob.channel, blob.version, BLOB_FULL, typ, b"", 0, view), (
                    blob.base
                )
        base = self.blob(blob.base, blob.channel)
        if blob.kind == BLOB_PATCH and base.kind == BLOB_FULL:  # read from its frame: kept
            self.patches.keep((self.sid, blob.base, blob.channel), (base.type, base.data))
        return base, blob.base


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
    patcher: zstandard.ZstdCompressionDict | None = None  # key_full prepared (patch_base),
    # built by the first patch against this keyframe

    def committed(self, seq: int) -> None:
        self.seq = seq
        if self.key_seq == 0:
            self.key_seq = seq


class Pending(msgspec.Struct):
    """A blob planned by the caller; the writer may still turn a delta into a full value.
    (A struct: built in C, two a put.)"""

    blob: LgBlob
    value: Any
    base_vkey: bytes
    memo: Memo | None
    full: tuple[str, bytes] | None = None  # the value's serde bytes, when serialized whole


def memo_weight(memo: Memo) -> int:
    """Bytes a memo keeps alive: the keyframe's bytes (4x more once prepared for patches:
    its copy and match tables), the tail, and roughly the list."""
    held = len(memo.key_full[1]) if memo.key_full is not None else 0
    if memo.patcher is not None:
        held *= 5
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
        if not self._memos:  # (none kept: no lock)
            return None
        with self._lock:
            return self._memos.get((stream, channel))

    def _drop(self, key: tuple[str, str]) -> None:
        dropped = self._memos.pop(key, None)
        if dropped is not None:
            self._bytes -= memo_weight(dropped)

    def put(self, stream: str, channel: str, memo: Memo) -> None:
        self.put_many(stream, ((channel, memo),))

    def put_many(self, stream: str, memos: Iterable[tuple[str, Memo | None]]) -> None:
        """The memos of a put's channels (``None``: no memo), under one lock."""
        with self._lock:
            for channel, memo in memos:
                if memo is None:
                    continue
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


def full_blob(channel: str, version: Any, vkey: bytes | None, value: Any, serde: Serde) -> Pending:
    """The value stored whole. Only a value a delta can be taken against (a list, or one of
    ``PATCH_MIN_BYTES`` or more) gets a memo; its bytes are kept for reads (``Pending.full``)
    when it is such a base or too big to be inlined in read rows: a small scalar is neither
    (the channel's last memo, if any, stays: a delta against it is checked in the write
    transaction as any other). ``vkey``: ``version_key(version)`` (``None``: computed here
    when a memo needs it)."""
    typ, data = serde.dumps_typed(value)
    is_list = type(value) is list
    if not is_list and len(data) < PATCH_MIN_BYTES:
        full = (typ, data) if len(data) > INLINE_MAX else None
        return Pending(LgBlob(channel, version, BLOB_FULL, typ, data), value, b"", None, full)
    if vkey is None:
        vkey = version_key(version)
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
    stored after ``KEYFRAME_EVERY`` appends (``PATCH_KEYFRAME_EVERY`` patches), or once the
    deltas since the keyframe would outweigh it ``CHAIN_RATIO`` times (the cost of cumulative
    deltas stays bounded).
    """
    if channel not in values:
        return Pending(LgBlob(channel, version, BLOB_EMPTY), None, b"", None)
    value = values[channel]
    m = memos.get(stream, channel)
    if m is None or m.seq == 0 or m.key_seq == 0:
        return full_blob(channel, version, None, value, serde)
    vkey = version_key(version)
    if m.links >= (KEYFRAME_EVERY if m.elements is not None else PATCH_KEYFRAME_EVERY):
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
        patcher = m.patcher if m.patcher is not None else patch_base(m.key_full[1])
        patch = make_patch(m.key_full[1], data, patcher)
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
                patcher=patcher,
            )
            blob = LgBlob(channel, version, BLOB_PATCH, typ, patch, m.key_seq)
            return Pending(blob, value, m.key_vkey, memo, (typ, data))
    return planned
