"""Golden bytes: the exact encoding of frame format version 1.

A failure here is a FORMAT CHANGE, not a test to update: logs already on disk hold these bytes.
Changing what is written needs a new format version (FORMAT_VERSION + 1) and a pure upcaster
that reads the old bytes, and the old literals stay here as read-side goldens. See
docs/frame-format.md ("Evolution rules" and "What the golden tests pin").
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec

from eventlog.codec import (
    CHECKSUM_BYTES,
    FLAG_COMPRESSED,
    FLAG_DICTIONARY,
    FORMAT_VERSION,
    HEADER_BYTES,
    ZERO_CHECKSUM,
    Compressor,
    Serializer,
    open_envelope,
    seal,
)
from eventlog.frames import (
    Compacted,
    Event,
    FanOutHeader,
    ForkOrigin,
    Frame,
    InstanceChange,
    InstancePage,
    Save,
    Snapshot,
    StateSplice,
    Tombstone,
)
from eventlog.records import EnclosingFanOutInstance, FanOutInstanceProgress, NodePosition

SER: Serializer[Event] = Serializer(Event)
FRAME_SER: Serializer[Frame] = Serializer(Frame)

# Tags of the frame kinds whose bytes this file pins. frames.py promises a golden for every
# kind; kinds still being designed (no log holding them has shipped) wait in PENDING_KINDS and
# must move to PINNED_KINDS, with a golden test, before one does.
PINNED_KINDS = {"ev", "sv", "sn", "rm", "lgc", "lgw", "lgr"}  # lg*: test_langgraph_frames.py
PENDING_KINDS: set[str] = set()


def test_every_frame_kind_is_pinned_or_pending() -> None:
    kinds = typing.get_args(Frame) or (Frame,)
    tags = {k.__struct_config__.tag for k in kinds}
    unlisted = tags - PINNED_KINDS - PENDING_KINDS
    assert not unlisted, (
        f"frame kind(s) {sorted(unlisted)} have no golden-bytes test: add one to "
        "tests/test_codec_golden.py (or list the tag in PENDING_KINDS until its fields settle)"
    )


# -- (0) the constants the layout is built from ------------------------------------------------


def test_layout_constants() -> None:
    # A change here is a format change: new format version + upcaster (docs/frame-format.md).
    assert FORMAT_VERSION == 1
    assert HEADER_BYTES == 52
    assert CHECKSUM_BYTES == 16
    assert FLAG_COMPRESSED == 0x01
    assert FLAG_DICTIONARY == 0x02
    assert ZERO_CHECKSUM.hex() == "00" * 16


# -- (1) an Event frame ------------------------------------------------------------------------

GOLDEN_EVENT = Event(name="node.completed", data={"i": 1, "ok": True}, at=1700000000.5)
# A change here is a format change: new format version + upcaster (docs/frame-format.md).
# msgpack array ["ev", "node.completed", {"i": 1, "ok": true}, float64 1700000000.5]
GOLDEN_EVENT_HEX = "94a26576ae6e6f64652e636f6d706c6574656482a16901a26f6bc3cb41d954fc40200000"


def test_event_encoding_is_pinned() -> None:
    assert SER.encode(GOLDEN_EVENT).hex() == GOLDEN_EVENT_HEX


def test_event_golden_bytes_decode() -> None:
    assert SER.decode(bytes.fromhex(GOLDEN_EVENT_HEX)) == GOLDEN_EVENT


def test_event_encodes_the_same_through_the_frame_union() -> None:
    # The log's serializer is built on the whole union; the tag makes Event's bytes the same.
    assert FRAME_SER.encode(GOLDEN_EVENT).hex() == GOLDEN_EVENT_HEX
    assert FRAME_SER.decode(bytes.fromhex(GOLDEN_EVENT_HEX)) == GOLDEN_EVENT


# -- (2) an envelope ---------------------------------------------------------------------------

# A change here is a format change: new format version + upcaster (docs/frame-format.md).
# version 01 | flags 00 | dict id 0000 | stream id u64 7 | seq u64 3 | prev 00..0f
# | checksum blake2b-128 | payload b"payload"
GOLDEN_ENVELOPE_HEX = (
    "01" "00" "0000" "0000000000000007" "0000000000000003"
    "000102030405060708090a0b0c0d0e0f"
    "2de3f357553c2722b272d5cd33bc708e"
    "7061796c6f6164"
)  # fmt: skip
GOLDEN_CHECKSUM_HEX = "2de3f357553c2722b272d5cd33bc708e"
# The same frame sealed with chain_key=b"k" * 32 (keyed blake2b-128, a MAC).
GOLDEN_KEYED_CHECKSUM_HEX = "3fceabc82c4cb52e191744c6659423ff"


def test_envelope_bytes_and_checksum_are_pinned() -> None:
    data, checksum = seal(7, 3, bytes(range(16)), b"payload")
    assert data.hex() == GOLDEN_ENVELOPE_HEX
    assert checksum.hex() == GOLDEN_CHECKSUM_HEX


def test_keyed_checksum_is_pinned() -> None:
    data, checksum = seal(7, 3, bytes(range(16)), b"payload", chain_key=b"k" * 32)
    assert checksum.hex() == GOLDEN_KEYED_CHECKSUM_HEX
    assert data.hex() == GOLDEN_ENVELOPE_HEX.replace(GOLDEN_CHECKSUM_HEX, GOLDEN_KEYED_CHECKSUM_HEX)


def test_envelope_golden_bytes_open() -> None:
    env = open_envelope(bytes.fromhex(GOLDEN_ENVELOPE_HEX))
    assert (env.version, env.flags, env.dict_id) == (1, 0, 0)
    assert (env.stream_id, env.seq, env.prev) == (7, 3, bytes(range(16)))
    assert env.checksum.hex() == GOLDEN_CHECKSUM_HEX
    assert env.payload == b"payload"


# -- (3) a compressed payload ------------------------------------------------------------------

COMPRESSIBLE_EVENT = Event(
    name="node.completed", data={"text": "lorem ipsum " * 64}, at=1700000000.5
)
# A change here is a format change: new format version + upcaster (docs/frame-format.md).
# Header (bytes 0..36) of seal(7, 1, ZERO_CHECKSUM, <zstd payload>, flags=FLAG_COMPRESSED):
# the flags byte (offset 1) is 01 = zstd without a dictionary, dict id 0000.
GOLDEN_COMPRESSED_HEADER_HEX = (
    "01" "01" "0000" "0000000000000007" "0000000000000001"
    "00000000000000000000000000000000"
)  # fmt: skip
# A whole compressed envelope as version 1 wrote it. zstd's output bytes may differ between
# zstd releases (so the write side pins only flags and header), but any zstd must read these.
GOLDEN_COMPRESSED_ENVELOPE_HEX = (
    "010100000000000000000007000000000000000100000000000000000000000000000000437b54dc32827110"
    "373253c00b9ad9c328b52ffd602502d50100140394a26576ae6e6f64652e636f6d706c6574656481a4746578"
    "74da03006c6f72656d20697073756d20cb41d954fc40200000010088f7aa9401"
)


def test_compressed_payload_flags_are_pinned() -> None:
    raw = SER.encode(COMPRESSIBLE_EVENT)
    stored, flags = Compressor(threshold_bytes=512).compress(raw)  # (the golden bytes were
    # pinned with the threshold of the logs made before 1,024 became the default)
    assert flags == 0x01
    assert len(stored) < len(raw)
    data, _ = seal(7, 1, ZERO_CHECKSUM, stored, flags=flags)
    assert data[1] == 0x01
    assert data[:36].hex() == GOLDEN_COMPRESSED_HEADER_HEX


def test_small_payload_is_stored_uncompressed() -> None:
    raw = SER.encode(GOLDEN_EVENT)
    assert Compressor().compress(raw) == (raw, 0)


def test_compressed_golden_envelope_reads_back() -> None:
    data = bytes.fromhex(GOLDEN_COMPRESSED_ENVELOPE_HEX)
    env = open_envelope(data)
    assert env.flags == FLAG_COMPRESSED
    assert data[:36].hex() == GOLDEN_COMPRESSED_HEADER_HEX
    raw = Compressor().decompress(env.payload, env.flags, max_bytes=1 << 20)
    assert SER.decode(raw) == COMPRESSIBLE_EVENT


# -- (4) checkpoint frames: Save, Snapshot, Tombstone -------------------------------------------

_POS = NodePosition(("outer",), "node_a", 3)
_LINEAGE = (EnclosingFanOutInstance(("outer",), "map", 1),)
_DONE = FanOutInstanceProgress("completed", {"r": 1}, False, (_POS,))
_IN_FLIGHT = InstanceChange(0, 0, FanOutInstanceProgress("in_flight"))

# Every field set, format 2's instance_saved_at included.
GOLDEN_SAVE = Save(
    kind="fan_out_internal", saved_at=1700000000.25, correlation_id="corr", schema_version="v2",
    state=b"\x81\xa1a\x01", parent_states=b"\x90", positions_from=1, positions=(_POS,),
    layout=(FanOutHeader(0, "map", ("outer",), 2, _LINEAGE),),
    instances=(InstanceChange(0, 1, _DONE),), state_splice=StateSplice(2, 1, b"xy"),
    instance_saved_at=(1700000000.125,),
    page=InstancePage(
        2, 0, 0, 2, (InstanceChange(0, 1, _DONE),), True,
        (FanOutHeader(0, "map", ("outer",), 2, _LINEAGE),), 1,
    ),
)  # fmt: skip
# A change here is a format change: new format version + upcaster (docs/frame-format.md).
# msgpack array of 14: "sv", kind, saved_at, correlation, schema, state (bin), parent states
# (bin), positions_from, positions, layout, instances, state_splice, instance_saved_at, page
# (back, fid, start, stop, instances, last, layout, next_fid).
GOLDEN_SAVE_HEX = (
    "9ea27376b066616e5f6f75745f696e7465726e616ccb41d954fc40100000a4636f7272a27632c40481a16101"
    "c4019001919591a56f75746572a66e6f64655f610300c0919500a36d617091a56f7574657202919391a56f75"
    "746572a36d6170019193000194a9636f6d706c6574656481a17201c2919591a56f75746572a66e6f64655f61"
    "0300c0930201c402787991cb41d954fc4008000098020000029193000194a9636f6d706c6574656481a17201"
    "c2919591a56f75746572a66e6f64655f610300c0c3919500a36d617091a56f7574657202919391a56f757465"
    "72a36d61700101"
)
# Format 2 (before pages): 13 elements, no ``page``.
GOLDEN_SAVE_V2_HEX = (
    "9da27376b066616e5f6f75745f696e7465726e616ccb41d954fc40100000a4636f7272a27632c40481a16101"
    "c4019001919591a56f75746572a66e6f64655f610300c0919500a36d617091a56f7574657202919391a56f75"
    "746572a36d6170019193000194a9636f6d706c6574656481a17201c2919591a56f75746572a66e6f64655f61"
    "0300c0930201c402787991cb41d954fc40080000"
)
GOLDEN_SNAPSHOT = Snapshot(
    kind="save", saved_at=1700000000.5, invocation_id="inv-1", correlation_id="corr",
    schema_version="", state=b"\xc0", parent_states=b"\x90", positions=(_POS,),
    layout=(FanOutHeader(0, "map", (), 2),), instances=(_IN_FLIGHT,), next_fid=1,
    compacted=Compacted(7, bytes(range(16)), 3, 1700000001.0), batch=(_IN_FLIGHT,),
    instance_saved_at=(1700000000.5,), forked=ForkOrigin("inv-0", 5, bytes(range(16, 32))),
)  # fmt: skip
# A change here is a format change: new format version + upcaster (docs/frame-format.md).
# msgpack array of 16 (array16: dc 00 10): "sn", kind, saved_at, invocation, correlation,
# schema, state, parent states, positions, layout, instances, next_fid, compacted, batch,
# instance_saved_at, forked (invocation, seq, checksum).
GOLDEN_SNAPSHOT_HEX = (
    "dc0010a2736ea473617665cb41d954fc40200000a5696e762d31a4636f7272a0c401c0c40190919591a56f75"
    "746572a66e6f64655f610300c0919500a36d61709002909193000094a9696e5f666c69676874c0c290019407"
    "c410000102030405060708090a0b0c0d0e0f03cb41d954fc404000009193000094a9696e5f666c69676874c0"
    "c29091cb41d954fc4020000093a5696e762d3005c410101112131415161718191a1b1c1d1e1f"
)
# Before forks (15 elements, no ``forked``): what every snapshot written before it holds.
GOLDEN_SNAPSHOT_V3_HEX = (
    "9fa2736ea473617665cb41d954fc40200000a5696e762d31a4636f7272a0c401c0c40190919591a56f757465"
    "72a66e6f64655f610300c0919500a36d61709002909193000094a9696e5f666c69676874c0c290019407c410"
    "000102030405060708090a0b0c0d0e0f03cb41d954fc404000009193000094a9696e5f666c69676874c0c290"
    "91cb41d954fc40200000"
)
GOLDEN_TOMBSTONE = Tombstone(saved_at=1700000002.0)
GOLDEN_TOMBSTONE_HEX = "92a2726dcb41d954fc40800000"  # ["rm", float64 1700000002.0]


def test_checkpoint_frame_encodings_are_pinned() -> None:
    assert FRAME_SER.encode(GOLDEN_SAVE).hex() == GOLDEN_SAVE_HEX
    assert FRAME_SER.encode(GOLDEN_SNAPSHOT).hex() == GOLDEN_SNAPSHOT_HEX
    assert FRAME_SER.encode(GOLDEN_TOMBSTONE).hex() == GOLDEN_TOMBSTONE_HEX


def test_checkpoint_frame_golden_bytes_decode() -> None:
    assert FRAME_SER.decode(bytes.fromhex(GOLDEN_SAVE_HEX)) == GOLDEN_SAVE
    assert FRAME_SER.decode(bytes.fromhex(GOLDEN_SAVE_V2_HEX)) == Save(
        **{**_fields(GOLDEN_SAVE), "page": None}
    )
    assert FRAME_SER.decode(bytes.fromhex(GOLDEN_SNAPSHOT_HEX)) == GOLDEN_SNAPSHOT
    assert FRAME_SER.decode(bytes.fromhex(GOLDEN_SNAPSHOT_V3_HEX)) == Snapshot(
        **{**_fields(GOLDEN_SNAPSHOT), "forked": None}
    )
    assert FRAME_SER.decode(bytes.fromhex(GOLDEN_TOMBSTONE_HEX)) == GOLDEN_TOMBSTONE


def test_format_1_checkpoint_frames_decode_with_defaults() -> None:
    """Format 1 wrote Save without instance_saved_at and Snapshot without compacted, batch and
    instance_saved_at: the shorter arrays decode, the missing fields at their defaults."""
    save_v1 = "9c" + GOLDEN_SAVE_V2_HEX[2 : -len("91cb41d954fc40080000")]
    assert FRAME_SER.decode(bytes.fromhex(save_v1)) == Save(
        **{**_fields(GOLDEN_SAVE), "instance_saved_at": (), "page": None}
    )
    cut = GOLDEN_SNAPSHOT_V3_HEX.index("9407c410")  # where `compacted` starts
    snapshot_v1 = "9c" + GOLDEN_SNAPSHOT_V3_HEX[2:cut]
    assert FRAME_SER.decode(bytes.fromhex(snapshot_v1)) == Snapshot(
        **{
            **_fields(GOLDEN_SNAPSHOT),
            "compacted": None,
            "batch": (),
            "instance_saved_at": (),
            "forked": None,
        }
    )


def _fields(frame: Save | Snapshot) -> dict[str, Any]:
    return msgspec.structs.asdict(frame)
