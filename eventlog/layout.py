"""The storage layout shared between modules: the core tables and the packing of their keys.

Core tables (every log has them; eventlog.log writes them):

- ``log``: global seq (u64) -> envelope, appended in commit order;
- ``streams``: stream id (u64) + stream seq (u64) -> global seq (u64);
- ``stream_ids`` / ``stream_names``: stream key (UTF-8) / stream id (u64) -> the other one;
- ``meta``: ``b"format"`` -> JSON settings.

Every other table belongs to one materialized view (eventlog.views), which alone packs and
parses its keys; those keys start with the stream id (:func:`sid_key`) or with a
length-prefixed string (:func:`s16`), packed by the helpers here. Integers in keys are
big-endian, so keys sort as the numbers do.

Invariants:
- These formats are stored: changing one is a format change (docs/frame-format.md).
- Nothing here reads or writes a transaction; it only packs and parses bytes.
"""

from __future__ import annotations

import struct
from typing import Final

LOG: Final = "log"
STREAMS: Final = "streams"
STREAM_IDS: Final = "stream_ids"
STREAM_NAMES: Final = "stream_names"
META: Final = "meta"
CORE_TABLES: Final = (LOG, STREAMS, STREAM_IDS, STREAM_NAMES, META)
# The ``meta`` format record's ``format_version``: the frame format (eventlog.codec's
# FORMAT_VERSION, 1) or the backend's storage layout (Backend.layout_version: 2 for an LMDB
# log with folded tables), whichever is higher; a log above META_FORMAT_MAX is refused at open.
META_FORMAT_MAX: Final = 2

U64: Final = struct.Struct(">Q")
U64X2: Final = struct.Struct(">QQ")
U32: Final = struct.Struct(">I")
U32X2: Final = struct.Struct(">II")
U16: Final = struct.Struct(">H")


def sid_key(sid: int) -> bytes:
    """A stream id as a key (or key prefix): 8 bytes, big-endian. Also a global seq's key."""
    return U64.pack(sid)


def read_u64(raw: bytes, offset: int = 0) -> int:
    """The u64 at ``offset`` of a key or value."""
    n: int = U64.unpack_from(raw, offset)[0]
    return n


def index_key(sid: int, seq: int) -> bytes:
    """A ``streams`` key: where seq ``seq`` of stream ``sid`` is in the log."""
    return U64X2.pack(sid, seq)


def split_index_key(key: bytes) -> tuple[int, int]:
    """``(stream id, seq)`` of a ``streams`` key."""
    sid, seq = U64X2.unpack(key)
    return sid, seq


def utf8(text: str) -> bytes:
    """Text as stored in keys: UTF-8, lone surrogates passed through (Python allows them)."""
    return text.encode("utf-8", "surrogatepass")


def from_utf8(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogatepass")


def s16(text: str) -> bytes:
    """A string inside a key: u16 length, then its UTF-8 (so a key can hold several)."""
    raw = utf8(text)
    return U16.pack(len(raw)) + raw
