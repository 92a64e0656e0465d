"""Round-trip and rejection properties of every stage in eventlog/codec.py.

Stages: Serializer (msgspec) -> Compressor (zstd) -> seal/open_envelope (checksum + chain).
Each stage must be the exact inverse of itself, and open_envelope must refuse any byte it did
not write (STYLE §3, §6). Hypothesis reproduces its own failures (STYLE §10).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eventlog.codec import (
    CHECKSUM_BYTES,
    COMPRESS_THRESHOLD_BYTES,
    FLAG_COMPRESSED,
    FLAG_DICTIONARY,
    FORMAT_VERSION,
    HEADER,
    HEADER_BYTES,
    KNOWN_FLAGS,
    ZERO_CHECKSUM,
    Compressor,
    Envelope,
    Sealer,
    Serializer,
    open_envelope,
    read_header,
    seal,
)
from eventlog.errors import CorruptFrame, EncodingError, UnsupportedFormat
from eventlog.frames import Event

U64_MAX = 2**64 - 1
MSGPACK_INT_MIN = -(2**63)  # msgpack int range: int64 below zero, uint64 above

# -- strategies -------------------------------------------------------------------------------

msgpack_ints = st.integers(min_value=MSGPACK_INT_MIN, max_value=U64_MAX)
finite_floats = st.floats(allow_nan=False)  # NaN != NaN would make equality meaningless
scalars = st.none() | st.booleans() | msgpack_ints | finite_floats | st.text()
# bool keys would collide with 1/0 in a dict, so keys are str or int only.
keys = st.text() | msgpack_ints
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)
events = st.builds(
    Event,
    name=st.text(),
    data=json_like,
    at=finite_floats,
)

stream_ids = st.integers(min_value=0, max_value=U64_MAX)
seqs = st.integers(min_value=1, max_value=U64_MAX)
checksums = st.binary(min_size=CHECKSUM_BYTES, max_size=CHECKSUM_BYTES)
payloads = st.binary(max_size=2048)
flag_values = st.integers(min_value=0, max_value=KNOWN_FLAGS)
dict_ids = st.integers(min_value=0, max_value=2**16 - 1)
chain_keys = st.binary(max_size=64)  # b"" = unkeyed; blake2b keys are at most 64 bytes
# Random bytes rarely compress; repeated chunks exercise the compressed branch too.
compressible = st.builds(
    lambda chunk, n: chunk * n,
    st.binary(min_size=1, max_size=64),
    st.integers(min_value=1, max_value=200),
)
raw_bytes = st.binary(max_size=4096) | compressible
thresholds = st.integers(min_value=0, max_value=4096)


def typed(value: Any) -> Any:
    """``value`` with every scalar tagged by its type, so ``1 == 1.0 == True`` cannot hide."""
    if isinstance(value, dict):
        return ("dict", {typed(k): typed(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return ("list", [typed(v) for v in value])
    return (type(value).__name__, value)


# -- Serializer --------------------------------------------------------------------------------

SER: Serializer[Event] = Serializer(Event)


@given(events)
def test_serializer_round_trips_any_event(ev: Event) -> None:
    raw = SER.encode(ev)
    back = SER.decode(raw)
    assert back == ev
    assert typed(back.data) == typed(ev.data)
    assert type(back.at) is float
    assert SER.encode(back) == raw  # deterministic: the re-encoding is byte-identical


@given(events)
def test_serializer_is_array_like_and_tagged(ev: Event) -> None:
    # array_like + tag: ["ev", name, data, at]; the tag comes first so a union can dispatch.
    assert msgspec.msgpack.decode(SER.encode(ev))[:2] == ["ev", ev.name]


@given(st.one_of(st.integers(max_value=MSGPACK_INT_MIN - 1), st.integers(min_value=U64_MAX + 1)))
def test_serializer_rejects_ints_outside_msgpack_range(n: int) -> None:
    with pytest.raises(
        EncodingError, match=r"^cannot encode frame\.data\.n \(a int\): can't serialize ints"
    ) as info:
        SER.encode(Event(name="x", data={"n": n}))
    assert info.value.path == "frame.data.n"


def test_serializer_rejects_unencodable_objects_with_a_hint() -> None:
    with pytest.raises(
        EncodingError,
        match=r"^cannot encode frame\.data\[0\]\.x \(a object\): objects of type object "
        r"are not supported; values must be builtins \(dict, list",
    ) as info:
        SER.encode(Event(name="x", data=[{"x": object()}]))
    assert info.value.path == "frame.data[0].x"


def test_serializer_rejects_lone_surrogates() -> None:
    with pytest.raises(
        EncodingError, match=r"^cannot encode frame\.name \(a str\): .*surrogates not allowed"
    ):
        SER.encode(Event(name="\ud800"))


@given(events, st.data())
def test_serializer_rejects_every_truncation(ev: Event, data: st.DataObject) -> None:
    raw = SER.encode(ev)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1), label="cut")
    with pytest.raises(CorruptFrame, match=r"payload does not decode as a frame"):
        SER.decode(raw[:cut])


@given(events, st.binary(min_size=1, max_size=8))
def test_serializer_rejects_trailing_bytes(ev: Event, extra: bytes) -> None:
    with pytest.raises(CorruptFrame, match=r"payload does not decode as a frame"):
        SER.decode(SER.encode(ev) + extra)


def test_serializer_rejects_another_tag_and_shape() -> None:
    with pytest.raises(CorruptFrame, match=r"payload does not decode as a frame: .*Invalid value"):
        SER.decode(msgspec.msgpack.encode(["zz", "x", None, 0.0]))
    with pytest.raises(CorruptFrame, match=r"payload does not decode as a frame: Expected `array`"):
        SER.decode(msgspec.msgpack.encode({"name": "x"}))


# -- Compressor --------------------------------------------------------------------------------


@given(raw_bytes, thresholds, st.sampled_from([1, 3, 9]))
def test_compressor_round_trips_and_never_grows(raw: bytes, threshold: int, level: int) -> None:
    c = Compressor(threshold_bytes=threshold, level=level)
    stored, flags = c.compress(raw)
    assert flags in (0, FLAG_COMPRESSED)
    assert len(stored) <= len(raw)
    if len(raw) < threshold:
        assert (stored, flags) == (raw, 0)
    if flags == 0:
        assert stored == raw
    else:
        assert len(stored) < len(raw)
        assert len(raw) >= threshold
    assert c.decompress(stored, flags, max_bytes=max(len(raw), 1)) == raw
    # A separate instance (readers build their own) decodes the same bytes.
    assert Compressor().decompress(stored, flags, max_bytes=max(len(raw), 1)) == raw


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=0, max_value=100))
def test_compressor_compresses_repetitive_input_above_default_threshold(
    chunk: bytes, extra: int
) -> None:
    size = COMPRESS_THRESHOLD_BYTES + 88
    raw = chunk * (size // len(chunk) + 1 + extra)  # above the threshold, at most 64 distinct
    stored, flags = Compressor().compress(raw)
    assert flags == FLAG_COMPRESSED
    assert len(stored) < len(raw)


@given(st.binary(max_size=COMPRESS_THRESHOLD_BYTES - 1))
def test_compressor_leaves_input_below_default_threshold_alone(raw: bytes) -> None:
    assert Compressor().compress(raw) == (raw, 0)


def test_compressor_refuses_dictionary_frames() -> None:
    with pytest.raises(UnsupportedFormat, match=r"dictionary-compressed frames are not written"):
        Compressor().decompress(b"x", FLAG_COMPRESSED | FLAG_DICTIONARY, max_bytes=100)


@given(st.binary(max_size=64))
def test_compressor_rejects_garbage_as_corrupt(garbage: bytes) -> None:
    assume(not garbage.startswith(b"\x28\xb5\x2f\xfd"))  # zstd magic: could be a valid frame
    with pytest.raises(CorruptFrame, match=r"zstd could not decompress the payload"):
        Compressor().decompress(garbage, FLAG_COMPRESSED, max_bytes=1 << 20)


def test_compressor_rejects_output_above_max_bytes_without_content_size() -> None:
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(b"a" * 10_000)
    with pytest.raises(CorruptFrame, match=r"zstd could not decompress the payload"):
        Compressor().decompress(packed, FLAG_COMPRESSED, max_bytes=1_000)


def test_compressor_bounds_output_by_max_bytes() -> None:
    stored, flags = Compressor().compress(b"a" * 100_000)
    assert flags == FLAG_COMPRESSED
    with pytest.raises(CorruptFrame, match="claims 100000 bytes, above the 1000-byte frame limit"):
        Compressor().decompress(stored, flags, max_bytes=1_000)


# -- envelope ----------------------------------------------------------------------------------


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(stream_ids, seqs, checksums, payloads, flag_values, dict_ids, chain_keys)
def test_seal_open_round_trip(
    stream_id: int,
    seq: int,
    prev: bytes,
    payload: bytes,
    flags: int,
    dict_id: int,
    chain_key: bytes,
) -> None:
    data, checksum = seal(
        stream_id, seq, prev, payload, flags=flags, dict_id=dict_id, chain_key=chain_key
    )
    assert len(data) == HEADER_BYTES + len(payload)
    assert len(checksum) == CHECKSUM_BYTES
    assert data[HEADER_BYTES:] == payload
    assert data[HEADER.size : HEADER_BYTES] == checksum
    env = open_envelope(data, chain_key=chain_key)
    assert env == Envelope(FORMAT_VERSION, flags, dict_id, stream_id, seq, prev, checksum, payload)
    assert env.compressed == bool(flags & FLAG_COMPRESSED)
    assert read_header(data) == (FORMAT_VERSION, flags, dict_id, stream_id, seq, prev, checksum)


@given(stream_ids, seqs, checksums, payloads, chain_keys)
def test_seal_is_deterministic_and_checksum_depends_on_payload(
    stream_id: int, seq: int, prev: bytes, payload: bytes, chain_key: bytes
) -> None:
    a = seal(stream_id, seq, prev, payload, chain_key=chain_key)
    assert seal(stream_id, seq, prev, payload, chain_key=chain_key) == a
    b = seal(stream_id, seq, prev, payload + b"\x00", chain_key=chain_key)
    assert a[1] != b[1]


def _sealed(draw: st.DrawFn) -> tuple[bytes, bytes]:
    chain_key = draw(chain_keys, label="chain_key")
    data, _ = seal(
        draw(stream_ids, label="stream_id"),
        draw(seqs, label="seq"),
        draw(checksums, label="prev"),
        draw(st.binary(max_size=256), label="payload"),
        flags=draw(flag_values, label="flags"),
        dict_id=draw(dict_ids, label="dict_id"),
        chain_key=chain_key,
    )
    return data, chain_key


sealed = st.composite(_sealed)()


@given(sealed, st.data())
def test_any_single_byte_change_is_detected(
    sealed_and_key: tuple[bytes, bytes], data: st.DataObject
) -> None:
    envelope, chain_key = sealed_and_key
    pos = data.draw(st.integers(min_value=0, max_value=len(envelope) - 1), label="position")
    new = data.draw(st.integers(min_value=0, max_value=255).filter(lambda b: b != envelope[pos]))
    tampered = bytearray(envelope)
    tampered[pos] = new
    # The checksum is checked first: a damaged version or flags byte is corruption.
    with pytest.raises(CorruptFrame, match=r"frame checksum mismatch at stream id \d+ seq \d+"):
        open_envelope(bytes(tampered), chain_key=chain_key)


def _resealed(envelope: bytes, offset: int, value: int) -> bytes:
    """``envelope`` with one header byte changed and a checksum recomputed to match."""
    head = bytearray(envelope[:36])
    head[offset] = value
    payload = envelope[52:]
    h = hashlib.blake2b(bytes(head), digest_size=16)
    h.update(payload)
    return bytes(head) + h.digest() + payload


def test_a_newer_frame_version_is_unsupported_not_corrupt() -> None:
    envelope, _ = seal(1, 1, bytes(16), b"x")
    with pytest.raises(UnsupportedFormat, match=r"frame format version 2 is newer"):
        open_envelope(_resealed(envelope, 0, FORMAT_VERSION + 1))
    with pytest.raises(CorruptFrame, match=r"frame format version 0 is not a known"):
        open_envelope(_resealed(envelope, 0, 0))
    with pytest.raises(CorruptFrame, match=r"frame flags 0x80 include unknown bits"):
        open_envelope(_resealed(envelope, 1, 0x80))


@given(sealed, st.data())
def test_truncation_and_extension_are_detected(
    sealed_and_key: tuple[bytes, bytes], data: st.DataObject
) -> None:
    envelope, chain_key = sealed_and_key
    cut = data.draw(st.integers(min_value=0, max_value=len(envelope) - 1), label="cut")
    if cut < HEADER_BYTES:
        match = rf"envelope is {cut} bytes, shorter than the {HEADER_BYTES}-byte header"
    else:
        match = r"frame checksum mismatch"
    with pytest.raises(CorruptFrame, match=match):
        open_envelope(envelope[:cut], chain_key=chain_key)
    extra = data.draw(st.binary(min_size=1, max_size=8), label="extra")
    with pytest.raises(CorruptFrame, match=r"frame checksum mismatch"):
        open_envelope(envelope + extra, chain_key=chain_key)


@given(sealed, chain_keys)
def test_wrong_chain_key_is_detected(sealed_and_key: tuple[bytes, bytes], other: bytes) -> None:
    envelope, chain_key = sealed_and_key
    assume(other != chain_key)
    with pytest.raises(CorruptFrame, match=r"frame checksum mismatch"):
        open_envelope(envelope, chain_key=other)


@pytest.mark.parametrize("size", [0, 1, HEADER_BYTES - 1])
def test_short_input_fails_clearly(size: int) -> None:
    with pytest.raises(
        CorruptFrame, match=rf"^envelope is {size} bytes, shorter than the 52-byte header$"
    ):
        open_envelope(bytes(size))
    with pytest.raises(CorruptFrame, match=rf"^envelope is {size} bytes"):
        read_header(bytes(size))


def test_checksum_mismatch_names_the_seq_and_what_to_do() -> None:
    data, _ = seal(7, 3, ZERO_CHECKSUM, b"payload")
    with pytest.raises(CorruptFrame, match=r"stream id 7 seq 3: .*run verify\(\)") as info:
        open_envelope(data[:-1] + b"X")
    assert info.value.seq == 3


def test_seal_rejects_bad_seq_and_prev() -> None:
    with pytest.raises(ValueError, match=r"stream seq starts at 1, got 0"):
        seal(1, 0, ZERO_CHECKSUM, b"")
    with pytest.raises(ValueError, match=r"prev must be 16 bytes, got 15"):
        seal(1, 1, bytes(15), b"")


# -- the whole pipeline ------------------------------------------------------------------------


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(events, thresholds, stream_ids, seqs, checksums, chain_keys)
def test_pipeline_round_trips(
    ev: Event, threshold: int, stream_id: int, seq: int, prev: bytes, chain_key: bytes
) -> None:
    comp = Compressor(threshold_bytes=threshold)
    raw = SER.encode(ev)
    stored, flags = comp.compress(raw)
    data, checksum = seal(stream_id, seq, prev, stored, flags=flags, chain_key=chain_key)
    env = open_envelope(data, chain_key=chain_key)
    assert env.checksum == checksum
    back = SER.decode(Compressor().decompress(env.payload, env.flags, max_bytes=len(raw)))
    assert back == ev
    assert typed(back.data) == typed(ev.data)


def test_seal_refuses_what_no_reader_accepts() -> None:
    with pytest.raises(ValueError, match=r"flags 0x4 include bits no reader accepts"):
        seal(1, 1, bytes(16), b"x", flags=4)
    with pytest.raises(ValueError, match=r"envelope field out of range \(stream id -1"):
        seal(-1, 1, bytes(16), b"x")
    with pytest.raises(ValueError, match=r"out of range .*seq 18446744073709551616"):
        seal(1, 2**64, bytes(16), b"x")


@given(
    st.integers(min_value=1, max_value=U64_MAX),
    st.integers(min_value=1, max_value=U64_MAX),
    st.binary(min_size=CHECKSUM_BYTES, max_size=CHECKSUM_BYTES),
    st.binary(max_size=300),
    st.sampled_from([0, FLAG_COMPRESSED]),
    st.sampled_from([b"", b"k" * 32]),
)
def test_sealer_writes_the_bytes_seal_writes(
    sid: int, seq: int, prev: bytes, payload: bytes, flags: int, key: bytes
) -> None:
    # The writer's unchecked hot path must be byte-for-byte the checked, pinned seal().
    assert Sealer(key).seal(sid, seq, prev, payload, flags) == seal(
        sid, seq, prev, payload, flags=flags, chain_key=key
    )


def test_threads_decompress_one_logs_frames_at_once(tmp_path: Path) -> None:
    """Regression: readers of one EventLog shared a zstd context, so concurrent reads of
    compressed frames raised CorruptFrame (or crashed the process)."""
    import threading  # noqa: PLC0415

    from eventlog.frames import Event  # noqa: PLC0415
    from eventlog.log import EventLog  # noqa: PLC0415

    path = tmp_path / "log"
    with EventLog.open(path, durability="process") as log:
        for i in range(8):
            log.append("s", Event(name="big", data=[f"item {j} {i}" for j in range(40_000)]))
    errors: list[BaseException] = []
    with EventLog.open(path, readonly=True) as log:

        def reader() -> None:
            try:
                for _ in range(4):
                    assert sum(1 for _ in log.read_stream("s")) == 8
            except BaseException as e:  # noqa: BLE001 - collected for the assertion below
                errors.append(e)

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
