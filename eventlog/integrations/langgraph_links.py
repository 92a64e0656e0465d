"""The data rows of ``lg_latest``: the bytes of the newest checkpoint's large chain links.

Part of :mod:`eventlog.integrations.langgraph_store` (which re-exports it). A ``c`` row
(:class:`~eventlog.integrations.langgraph_rows.LatestRow`) holds each channel's chain with the
data of links over ``INLINE_MAX`` bytes left out (its ``apart``). Their data lives in rows
written once and never rewritten (issue #27: a row rewritten with a growing value left a dead
TOAST copy of it on PostgreSQL at every put, 148 MB over 1,000 steps of a growing list):

- a **data row** per link, ``b"d" + u64 sid + u64 seq + 8-byte digest of the channel`` ->
  ``s16(channel) + codec byte + bytes`` (zstd when that is smaller): the data of the blob that
  frame ``seq`` of the stream stores for the channel, immutable as the frame is; written
  once, when the link is first kept apart, and deleted once, when the link row stops naming
  it (a new keyframe, the next delta), with the ``c`` row or with the thread;
- the **link row**, ``b"k" + s16(thread_id) + ns`` -> a zero byte, then the 24 bytes after
  the ``b"d"`` of each data row the ``c`` row's ``apart`` names: small, rewritten when
  ``apart`` changes. A reader fetches the ``c`` and ``w`` rows and the data rows the link row
  names in one statement (:meth:`backends.base.ReadTxn.get_many_linked`: a join on
  PostgreSQL, one round trip).

Invariant: the data rows of a stream are those its link row names (both are written in one
transaction; a deletion is queued with the other writes, ``WriteTxn.discard``, so on
PostgreSQL it costs no round trip; what it leaves behind is a dead row the server's vacuum
reclaims, once, where a rewritten growing row left one per put). Logs written before these
rows kept the data itself in the ``k`` row (:class:`LatestBlobs`, whose first byte is never
zero): read as naming no row, so readers fall back until the next put moves the data into
data rows.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from typing import Final

import msgspec
import zstandard

from eventlog.layout import U16, U64, U64X2, s16, utf8

LINK_PREFIX: Final = b"d"
LINK_WIDTH: Final = 24  # u64 sid + u64 seq + 8-byte channel digest
LINKS_MARK: Final = b"\x00"  # first byte of a link row (LatestBlobs msgpack starts 0x91)
RAW: Final = 0
ZSTD: Final = 1
ZSTD_LEVEL: Final = 1
LINK_BYTES_MAX: Final = 1 << 31  # a data row claiming more is damaged


class LatestBlobs(msgspec.Struct, frozen=True, array_like=True):
    """The ``k`` row of logs written before data rows: the data of a latest row's ``apart``
    links, ``(seq, channel, data)``, in their order (read once, by the next put)."""

    blobs: tuple[tuple[int, str, bytes], ...]


_dec_latest_blobs = msgspec.msgpack.Decoder(LatestBlobs)
_local = threading.local()


def link_id(sid: int, seq: int, channel: str) -> bytes:
    """The 24 bytes naming the data row of ``channel``'s link stored at ``seq``."""
    return U64X2.pack(sid, seq) + hashlib.blake2b(utf8(channel), digest_size=8).digest()


def link_key(sid: int, seq: int, channel: str) -> bytes:
    return LINK_PREFIX + link_id(sid, seq, channel)


def link_prefix(sid: int) -> bytes:
    """Every data row of stream ``sid``."""
    return LINK_PREFIX + U64.pack(sid)


def encode_links(ids: list[bytes]) -> bytes:
    """A link row naming the data rows of ``ids`` (:func:`link_id`)."""
    return LINKS_MARK + b"".join(ids)


def split_links(raw: bytes | None) -> list[bytes]:
    """The ids a link row names (none when ``raw`` is absent or not a link row)."""
    if not raw or raw[:1] != LINKS_MARK:
        return []
    return [raw[i : i + LINK_WIDTH] for i in range(1, len(raw) - LINK_WIDTH + 1, LINK_WIDTH)]


def encode_link_data(channel: str, data: bytes) -> bytes:
    c = getattr(_local, "c", None)
    if c is None:
        c = _local.c = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    packed: bytes = c.compress(data)
    if len(packed) < len(data):
        return s16(channel) + bytes((ZSTD,)) + packed
    return s16(channel) + bytes((RAW,)) + data


def decode_link_data(raw: bytes) -> tuple[str, bytes] | None:
    """``(channel, data)`` of a data row, ``None`` when it does not decode (then readers fall
    back to the other tables)."""
    try:
        n = U16.unpack_from(raw)[0]
        channel = raw[2 : 2 + n].decode("utf-8", "surrogatepass")
        codec, body = raw[2 + n], raw[3 + n :]
        if codec == RAW:
            return channel, body
        if codec != ZSTD or zstandard.frame_content_size(body) > LINK_BYTES_MAX:
            return None
        d = getattr(_local, "d", None)
        if d is None:
            d = _local.d = zstandard.ZstdDecompressor()
        data: bytes = d.decompress(body)
    except (IndexError, UnicodeDecodeError, ValueError, struct.error, zstandard.ZstdError):
        return None
    return channel, data


def link_data(rows: list[tuple[bytes, bytes]]) -> dict[tuple[int, str], bytes]:
    """``(seq, channel) -> data`` of the data rows ``rows`` (``(key, value)``, as
    :meth:`~backends.base.ReadTxn.get_many_linked` returns them); a row that does not decode,
    or whose channel is not its key's, is left out."""
    out: dict[tuple[int, str], bytes] = {}
    for key, raw in rows:
        got = decode_link_data(raw)
        if got is None or len(key) != 1 + LINK_WIDTH:
            continue
        sid, seq = U64X2.unpack_from(key, 1)
        channel, data = got
        if link_key(sid, seq, channel) == key:
            out[seq, channel] = data
    return out


def old_latest_blobs(raw: bytes | None) -> dict[tuple[int, str], bytes] | None:
    """The data a ``k`` row written before data rows holds, ``None`` when it is not one."""
    if not raw or raw[:1] == LINKS_MARK:
        return None
    try:
        return {(s, ch): d for s, ch, d in _dec_latest_blobs.decode(raw).blobs}
    except msgspec.DecodeError:
        return None
