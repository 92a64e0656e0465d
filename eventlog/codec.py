"""Bytes on disk: serializer (msgspec) -> compressor (zstd) -> envelope (checksum + chain).

Each stage has an exact inverse and a round-trip property test.

Envelope layout (format version 1), all integers big-endian::

    offset size field
         0    1 format version (1)
         1    1 flags: bit 0 = payload zstd-compressed, bit 1 = compressed with a dictionary
         2    2 dictionary id (0 = none)
         4    8 stream id (interned stream key, see eventlog.log)
        12    8 stream seq (1, 2, 3, ... per stream, no gaps)
        20   16 prev: checksum of the previous frame in the same stream (zeros for seq 1)
        36   16 checksum: blake2b-128 over bytes 0..36 (header and prev) and the stored payload
        52    - stored payload (msgspec msgpack, zstd-compressed when flagged)

Invariants:
- ``checksum`` covers the header, the chain link and the payload, so any changed byte, a
  removed frame (its successor's ``prev`` no longer matches) or a reordered frame is detected.
- With a ``chain_key`` the checksum is a keyed blake2b (a MAC): rewriting the log and
  recomputing the chain then needs the key too (tamper evidence, not just corruption evidence).
- Decoding never trusts a header it has not checked: :func:`open_envelope` verifies length,
  version and checksum before anything else reads the payload.
"""

from __future__ import annotations

import datetime
import decimal
import gc
import hashlib
import struct
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

import msgspec
import zstandard

from eventlog.errors import CorruptFrame, EncodingError, UnsupportedFormat
from eventlog.lazy import LazyInstances

FORMAT_VERSION: Final = 1
HEADER: Final = struct.Struct(">BBHQQ16s")  # version, flags, dict id, stream id, seq, prev
CHECKSUM_BYTES: Final = 16
HEADER_BYTES: Final = HEADER.size + CHECKSUM_BYTES  # 52
ZERO_CHECKSUM: Final = bytes(CHECKSUM_BYTES)

FLAG_COMPRESSED: Final = 0x01
FLAG_DICTIONARY: Final = 0x02
KNOWN_FLAGS: Final = FLAG_COMPRESSED | FLAG_DICTIONARY

COMPRESS_THRESHOLD_BYTES: Final = 1024  # below this zstd gains little without a dictionary,
# and its fixed cost (~4-12 µs a frame) is a large part of a small save's CPU (new logs only:
# a log keeps the threshold it was created with, in its meta record)
COMPRESS_LEVEL: Final = 3
FAST_LEVEL: Final = 1  # batch frames of fan-out instance results: smaller and faster than 3

T = TypeVar("T")


class Envelope(msgspec.Struct, frozen=True):
    """A frame as stored: header fields plus the (possibly compressed) payload bytes."""

    version: int
    flags: int
    dict_id: int
    stream_id: int
    seq: int
    prev: bytes
    checksum: bytes
    payload: bytes

    @property
    def compressed(self) -> bool:
        return bool(self.flags & FLAG_COMPRESSED)


def _digest(head: bytes, payload: bytes, key: bytes) -> bytes:
    h = hashlib.blake2b(head, digest_size=CHECKSUM_BYTES, key=key)
    h.update(payload)
    return h.digest()


def seal(
    stream_id: int,
    seq: int,
    prev: bytes,
    payload: bytes,
    *,
    flags: int = 0,
    dict_id: int = 0,
    chain_key: bytes = b"",
) -> tuple[bytes, bytes]:
    """Frame ``payload``; returns ``(envelope bytes, checksum)``."""
    if seq < 1:
        raise ValueError(f"stream seq starts at 1, got {seq}")
    if len(prev) != CHECKSUM_BYTES:
        raise ValueError(f"prev must be {CHECKSUM_BYTES} bytes, got {len(prev)}")
    if flags & ~KNOWN_FLAGS:
        raise ValueError(
            f"flags {flags:#x} include bits no reader accepts (known: {KNOWN_FLAGS:#x})"
        )
    try:
        head = HEADER.pack(FORMAT_VERSION, flags, dict_id, stream_id, seq, prev)
    except struct.error as e:
        raise ValueError(
            f"envelope field out of range (stream id {stream_id}, seq {seq}, flags {flags}, "
            f"dict id {dict_id}): {e}"
        ) from e
    return _finish(_keyed(chain_key), head, payload)


def _finish(keyed: Any, head: bytes, payload: bytes) -> tuple[bytes, bytes]:
    """``(envelope, checksum)`` from a packed header: the checksum covers header and payload."""
    h = keyed.copy()  # copying a keyed state is cheaper than keying anew
    h.update(head)
    h.update(payload)
    checksum: bytes = h.digest()
    return head + checksum + payload, checksum


class Sealer:
    """:func:`seal` for a writer that already guarantees its arguments (seq >= 1, a 16-byte
    prev, known flags): the same bytes, without the checks, for the per-frame hot path."""

    __slots__ = ("_keyed", "_pack")

    def __init__(self, chain_key: bytes = b"") -> None:
        self._keyed = _keyed(chain_key)
        self._pack = HEADER.pack

    def seal(
        self, stream_id: int, seq: int, prev: bytes, payload: bytes, flags: int
    ) -> tuple[bytes, bytes]:
        head = self._pack(FORMAT_VERSION, flags, 0, stream_id, seq, prev)
        h = self._keyed.copy()  # (_finish, inline: one call fewer per frame)
        h.update(head)
        h.update(payload)
        checksum: bytes = h.digest()
        return head + checksum + payload, checksum


_KEYED: dict[bytes, Any] = {}


def _keyed(chain_key: bytes) -> Any:
    h = _KEYED.get(chain_key)
    if h is None:
        h = _KEYED[chain_key] = hashlib.blake2b(digest_size=CHECKSUM_BYTES, key=chain_key)
    return h


def read_header(data: bytes) -> tuple[int, int, int, int, int, bytes, bytes]:
    """The header fields without checking the checksum (for locating a damaged frame)."""
    if len(data) < HEADER_BYTES:
        raise CorruptFrame(
            f"envelope is {len(data)} bytes, shorter than the {HEADER_BYTES}-byte header"
        )
    version, flags, dict_id, stream_id, seq, prev = HEADER.unpack_from(data)
    checksum = data[HEADER.size : HEADER_BYTES]
    return version, flags, dict_id, stream_id, seq, prev, checksum


def open_envelope(data: bytes, *, chain_key: bytes = b"", checksum: bool = True) -> Envelope:
    """Parse and check an envelope: length, checksum, then version and flags.

    The checksum is checked first: a damaged version byte is corruption, not a newer format
    (a log written in a newer format is refused when it is opened, from its meta record).
    ``checksum=False`` skips it (a read path whose frames ``verify`` checks: the length,
    version and flags are still checked, and the caller checks the position).
    """
    version, flags, dict_id, stream_id, seq, prev, stored = read_header(data)
    payload = data[HEADER_BYTES:]
    if checksum and _digest(data[: HEADER.size], payload, chain_key) != stored:
        raise CorruptFrame(
            f"frame checksum mismatch at stream id {stream_id} seq {seq}: the stored bytes "
            "changed after they were written; run verify() to list every damaged frame",
            seq=seq,
        )
    if version != FORMAT_VERSION:
        if version > FORMAT_VERSION:
            raise UnsupportedFormat(
                f"frame format version {version} is newer than this ckptlog reads "
                f"({FORMAT_VERSION}); upgrade ckptlog to read this log"
            )
        raise CorruptFrame(f"frame format version {version} is not a known version", seq=seq)
    if flags & ~KNOWN_FLAGS:
        raise CorruptFrame(f"frame flags {flags:#04x} include unknown bits", seq=seq)
    return Envelope(version, flags, dict_id, stream_id, seq, prev, stored, payload)


class Compressor:
    """zstd above a size threshold.

    :meth:`compress` is for one thread at a time (an EventLog's committer, whichever thread
    commits: commits are mutually exclusive). :meth:`decompress` may be called from any number
    of threads at once: each thread gets its own zstd context (a shared one gave spurious
    ``CorruptFrame`` errors, or crashed the process, when readers decompressed concurrently).
    """

    def __init__(
        self, *, threshold_bytes: int = COMPRESS_THRESHOLD_BYTES, level: int = COMPRESS_LEVEL
    ) -> None:
        self.threshold_bytes = threshold_bytes
        self.level = level
        self._c = zstandard.ZstdCompressor(level=level)
        self._fast = zstandard.ZstdCompressor(level=min(level, FAST_LEVEL))
        self._local = threading.local()  # a ZstdDecompressor per reading thread

    def compress(self, raw: bytes, fast: bool = False) -> tuple[bytes, int]:
        """``(stored bytes, flags)``: compressed only when above the threshold and smaller
        (``fast``: at :data:`FAST_LEVEL`)."""
        if len(raw) < self.threshold_bytes:
            return raw, 0
        packed: bytes = (self._fast if fast else self._c).compress(raw)
        if len(packed) >= len(raw):
            return raw, 0
        return packed, FLAG_COMPRESSED

    def decompress(self, stored: bytes, flags: int, *, max_bytes: int) -> bytes:
        if not flags & FLAG_COMPRESSED:
            return stored
        if flags & FLAG_DICTIONARY:
            raise UnsupportedFormat("dictionary-compressed frames are not written by this version")
        try:
            # zstd ignores max_output_size when the frame header states the content size (as
            # ours do), so the bound is checked against the header first: a damaged size field
            # must not make a reader allocate gigabytes.
            size = zstandard.frame_content_size(stored)
            if size > max_bytes:
                raise CorruptFrame(
                    f"compressed payload claims {size} bytes, above the {max_bytes}-byte frame "
                    "limit; the frame is damaged (or the log was opened with a smaller "
                    "frame_bytes_max than it was written with)"
                )
            d = getattr(self._local, "d", None)
            if d is None:
                d = self._local.d = zstandard.ZstdDecompressor()
            raw: bytes = d.decompress(stored, max_output_size=max_bytes)
        except zstandard.ZstdError as e:
            raise CorruptFrame(f"zstd could not decompress the payload: {e}") from e
        if len(raw) > max_bytes:
            raise CorruptFrame(f"payload decompressed to {len(raw)} bytes, above {max_bytes}")
        return raw


def enc_hook(obj: Any) -> Any:
    """Structural encoding of types msgspec does not know: Pydantic models, sets."""
    dump = getattr(obj, "model_dump", None)
    if dump is not None and callable(dump):
        return dump(mode="json")
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if isinstance(obj, LazyInstances):  # a loaded record's big fan-out: as the tuple
        return obj.materialize()
    raise NotImplementedError(f"objects of type {type(obj).__name__} are not supported")


def _key_path(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def _find_unencodable(value: Any, path: str, enc: msgspec.msgpack.Encoder) -> tuple[str, str]:
    """The path and type name of the first part of ``value`` that does not encode."""
    if isinstance(value, dict):
        for k, v in value.items():
            try:
                enc.encode(v)
            except (TypeError, ValueError, OverflowError, NotImplementedError):
                return _find_unencodable(v, _key_path(path, k), enc)
        return path, type(value).__name__
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            try:
                enc.encode(v)
            except (TypeError, ValueError, OverflowError, NotImplementedError):
                return _find_unencodable(v, f"{path}[{i}]", enc)
        return path, type(value).__name__
    fields = (
        getattr(value, "__struct_fields__", None)
        or getattr(value, "__dataclass_fields__", None)
        or _pydantic_fields(value)
    )
    if fields and not isinstance(value, type):
        for name in fields:
            try:
                enc.encode(getattr(value, name))
            except (TypeError, ValueError, OverflowError, NotImplementedError):
                return _find_unencodable(getattr(value, name), f"{path}.{name}", enc)
    return path, type(value).__name__


def _pydantic_fields(value: Any) -> Any:
    """A Pydantic model's field names (read from its class), else None."""
    if isinstance(value, type) or not callable(getattr(value, "model_dump", None)):
        return None
    return getattr(type(value), "model_fields", None)


_value_encoder = msgspec.msgpack.Encoder(enc_hook=enc_hook)


LOSSY_TYPES: Final = (
    datetime.date,  # a naive datetime too (an aware one is kept: a msgpack timestamp)
    datetime.time,
    datetime.timedelta,
    decimal.Decimal,
    uuid.UUID,
    set,
    frozenset,
)
"""Values msgpack would hand back as another type (a str, a list): refused, not changed.
Tuples are kept as lists (a sequence, as in JSON); dataclasses, msgspec Structs and Pydantic
models as dicts of their fields (their structural form, which the frameworks validate back)."""


def _find_lossy(value: Any, path: str) -> tuple[str, Any] | None:
    """The path and value of the first :data:`LOSSY_TYPES` value in plain containers."""
    if isinstance(value, LOSSY_TYPES):
        aware = isinstance(value, datetime.datetime) and value.tzinfo is not None
        if not aware:  # an aware datetime is a msgpack timestamp: the same instant comes back
            return path, value
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, LOSSY_TYPES):
                return f"{path} key {k!r}", k
            found = _find_lossy(v, _key_path(path, k))
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _find_lossy(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


_PLAIN: Final = frozenset({dict, list, tuple, str, int, float, bool, type(None), bytes})
_LEAF: Final = frozenset({str, int, bool, type(None)})
_SCALAR: Final = _PLAIN - {dict, list, tuple}  # plain values that hold no others
_NUMBER: Final = frozenset({float, int})


class _Leaves(msgspec.Struct, array_like=True):
    """``msgspec.convert`` target that accepts a list of str, int, bool and None (subclasses
    included: msgspec dispatches on the C type) and refuses anything else: a float (it would
    take a Decimal for one), a container, a :data:`LOSSY_TYPES` value. A Struct, so msgspec
    reads the type once, not at every call (a bare ``list[...]`` costs ~1.8 us a call)."""

    items: list[str | int | bool | None]


class _Numbers(msgspec.Struct, array_like=True):
    """The same for a list of numbers: int (and subclasses), float, bool and None are kept as
    they are, a Decimal becomes a float (the one lossy value it takes), anything else (a
    float subclass included) is refused."""

    items: list[int | float | bool | None]


_LEAF_RUN_MIN: Final = 32  # below this the type scan is as cheap as a convert call
_plain_encoder: Final = msgspec.msgpack.Encoder()  # no enc_hook: refuses what it does not know


def _all_leaves(level: list[Any]) -> bool:
    """True when every item of ``level`` is a str, int, bool, None or float, proven in C:
    one ``msgspec.convert`` (~3 ns an item, against ~12 for ``map(type)`` and a set); for a
    level of numbers, equal encodings of the converted and the given items (a Decimal encodes
    as a str, the float it was converted to as a float); and no item an instance of a
    garbage-collected class (``gc.get_referents`` is empty: no enum member or other subclass
    instance with a ``__dict__``, none that could claim another class through ``__class__``,
    which the walk's ``isinstance`` believes; a str or int subclass with ``__slots__ = ()``
    still could, but msgspec encodes none: :func:`encode_value` refuses it before this check,
    unless it also poses as a Pydantic model; a level of numbers is encoded here without
    hooks). False when it cannot prove it: the caller then checks the level by type. A
    refusal raises (~2 us), so it is tried only on long levels (``_LEAF_RUN_MIN``) that start
    and end with a leaf."""
    first, last = type(level[0]), type(level[-1])
    try:
        if first in _LEAF and last in _LEAF:
            msgspec.convert((level,), _Leaves, strict=True)
        elif first in _NUMBER and last in _NUMBER:
            numbers = msgspec.convert((level,), _Numbers, strict=True).items
            if _plain_encoder.encode(numbers) != _plain_encoder.encode(level):
                return False  # (a Decimal was taken for a float)
        else:
            return False
    except Exception:  # noqa: BLE001 - a failure only means "not proven": the exact checks decide
        return False
    return not gc.get_referents(*level)


def check_lossless(value: Any, path: str) -> None:
    """Refuse a value that would not come back as it went in (a datetime as a str, a set as
    a list): :class:`EncodingError` naming its path. A state of plain containers and scalars
    is cleared level by level at C speed (``gc.get_referents``; a long level of str, int,
    bool and None, or of numbers, by one ``msgspec.convert``, others by their types through
    ``map``); anything else is walked in Python, down plain containers only."""
    if (  # a dict of scalars (the usual state): its keys and values, one type scan each
        value.__class__ is dict
        and _SCALAR.issuperset(map(type, value.values()))
        and _SCALAR.issuperset(map(type, value))
    ):
        return
    level = [value]
    while level:
        if len(level) >= _LEAF_RUN_MIN and _all_leaves(level):
            return  # leaves only: nothing below, nothing lossy
        if not _PLAIN.issuperset(map(type, level)):
            break
        level = gc.get_referents(*level)
    else:
        return
    found = _find_lossy(value, path)
    if found is None:
        return
    where, bad = found
    raise EncodingError(
        f"cannot keep {where} (a {type(bad).__name__}, {bad!r}): msgpack would give it back as "
        f"a {'list' if isinstance(bad, (set, frozenset)) else 'str'}, silently another type; "
        "store it in a form that comes back as it is (an ISO 8601 str for a time, a str for "
        "a Decimal or UUID, a sorted list for a set) and convert it when you load",
        path=where,
    )


def too_deep(path: str, error: RecursionError) -> EncodingError:
    """A value nested deeper than the encoder's recursion limit, or one that contains itself."""
    return EncodingError(
        f"cannot encode {path}: expected a value nested less than about "
        f"{sys.getrecursionlimit()} levels deep, found a deeper one or one that contains "
        f"itself ({error}); nothing was saved: flatten it, or break the cycle",
        path=path,
    )


def encode_value(value: Any, path: str = "state") -> bytes:
    """msgpack bytes of a state value; :class:`EncodingError` naming the path when impossible,
    or when a value would come back as another type (:data:`LOSSY_TYPES`)."""
    try:
        data = _value_encoder.encode(value)
    except RecursionError as e:
        raise too_deep(path, e) from None
    except (TypeError, ValueError, OverflowError, NotImplementedError) as e:
        where, type_name = _find_unencodable(value, path, _value_encoder)
        raise EncodingError(
            f"cannot encode {where} (a {type_name}): {e}; states must be builtins "
            "(dict, list, str, int, float, bool, None), dataclasses, msgspec Structs or "
            "Pydantic models: convert it, or store a reference to it instead",
            path=where,
        ) from e
    check_lossless(value, path)
    return data


ENCODE_ERRORS: Final = (RecursionError, TypeError, ValueError, OverflowError, NotImplementedError)
"""What :meth:`Serializer.encode` turns into :class:`EncodingError`."""


class Serializer(Generic[T]):
    """One msgspec msgpack ``Encoder`` and one typed ``Decoder``, built once."""

    def __init__(self, type_: Any) -> None:
        self._enc = msgspec.msgpack.Encoder(enc_hook=enc_hook)
        self._dec: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(type_)
        # The encoder's own method, for a hot path that calls :meth:`encode` only when it
        # raises (one of ENCODE_ERRORS), to get the error naming the path.
        self.encode_fast: Callable[[Any], bytes] = self._enc.encode

    def encode(self, value: T) -> bytes:
        try:
            return self._enc.encode(value)
        except RecursionError as e:
            raise too_deep("frame", e) from None
        except (TypeError, ValueError, OverflowError, NotImplementedError) as e:
            where, type_name = _find_unencodable(value, "frame", self._enc)
            raise EncodingError(
                f"cannot encode {where} (a {type_name}): {e}; values must be builtins "
                "(dict, list, str, int, float, bool, None), dataclasses or msgspec Structs",
                path=where,
            ) from e

    def decode(self, raw: bytes) -> T:
        try:
            return self._dec.decode(raw)
        except msgspec.DecodeError as e:
            raise CorruptFrame(f"payload does not decode as a frame: {e}") from e
