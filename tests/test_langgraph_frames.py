"""Golden bytes of the LangGraph frame kinds (``lgc``, ``lgw``, ``lgr``; eventlog/frames.py).

A failure here is a FORMAT CHANGE, not a test to update: logs already on disk hold these bytes
(docs/frame-format.md, "Evolution rules"). New fields go at the end, with defaults.
"""

from __future__ import annotations

import typing

import pytest

from eventlog.codec import Serializer
from eventlog.frames import (
    BLOB_APPEND,
    BLOB_EMPTY,
    BLOB_FULL,
    BLOB_PATCH,
    Frame,
    LangGraphFrame,
    LgBlob,
    LgCheckpoint,
    LgRemove,
    LgWrite,
    LgWrites,
)
from eventlog.integrations.langgraph import LOG_FRAME_TYPE

SER: Serializer[typing.Any] = Serializer(LOG_FRAME_TYPE)
ONLY_LG: Serializer[typing.Any] = Serializer(LangGraphFrame)

GOLDEN_CHECKPOINT = LgCheckpoint(
    checkpoint_id="1ef-01",
    parent_id="1ef-00",
    checkpoint_type="msgpack",
    checkpoint=b"\x81\xa1v\x04",
    versions={"messages": 2, "n": "00000000000000000000000000000002.1f"},
    metadata_type="msgpack",
    metadata=b"\x81\xa4step\x01",
    run_id="run-1",
    blobs=(
        LgBlob("messages", 2, BLOB_APPEND, "msgpack", b"\x91\x01", 3),
        LgBlob("n", "00000000000000000000000000000002.1f", BLOB_FULL, "msgpack", b"\x05"),
        LgBlob("branch:to:x", 1.5, BLOB_EMPTY),
    ),
    saved_at=1700000000.5,
)
# A change here is a format change. msgpack array of 11: "lgc", id, parent, type, bytes,
# versions map, metadata type, bytes, run id, blobs (arrays of 6), float64 saved_at.
GOLDEN_CHECKPOINT_HEX = (
    "9ba36c6763a63165662d3031a63165662d3030a76d73677061636bc40481a1760482a86d6573736167657302"
    "a16ed92330303030303030303030303030303030303030303030303030303030303030322e3166a76d736770"
    "61636bc40781a47374657001a572756e2d319396a86d657373616765730202a76d73677061636bc402910103"
    "96a16ed92330303030303030303030303030303030303030303030303030303030303030322e316600a76d73"
    "677061636bc401050096ab6272616e63683a746f3a78cb3ff800000000000001a0c40000cb41d954fc402000"
    "00"
)

GOLDEN_WRITES = LgWrites(
    checkpoint_id="1ef-01",
    task_id="task-a",
    task_path="~__pregel_pull, x",
    writes=(
        LgWrite(0, "messages", "msgpack", b"\x91\x01"),
        LgWrite(-1, "__error__", "msgpack", b"\xa2no"),
    ),
    saved_at=1700000000.5,
)
GOLDEN_WRITES_HEX = (
    "96a36c6777a63165662d3031a67461736b2d61b17e5f5f70726567656c5f70756c6c2c207892940"
    "0a86d65737361676573a76d73677061636bc402910194ffa95f5f6572726f725f5fa76d73677061636bc403"
    "a26e6fcb41d954fc40200000"
)

GOLDEN_REMOVE_IDS = LgRemove(
    checkpoint_ids=("1ef-00",), reason="prune_keep_latest", saved_at=1700000000.5
)
GOLDEN_REMOVE_IDS_HEX = (
    "94a36c677291a63165662d3030b17072756e655f6b6565705f6c6174657374cb41d954fc40200000"
)
GOLDEN_REMOVE_ALL = LgRemove(checkpoint_ids=None, reason="delete_thread", saved_at=1700000000.5)
GOLDEN_REMOVE_ALL_HEX = "94a36c6772c0ad64656c6574655f746872656164cb41d954fc40200000"

GOLDENS = [
    pytest.param(GOLDEN_CHECKPOINT, GOLDEN_CHECKPOINT_HEX, id="lgc"),
    pytest.param(GOLDEN_WRITES, GOLDEN_WRITES_HEX, id="lgw"),
    pytest.param(GOLDEN_REMOVE_IDS, GOLDEN_REMOVE_IDS_HEX, id="lgr-ids"),
    pytest.param(GOLDEN_REMOVE_ALL, GOLDEN_REMOVE_ALL_HEX, id="lgr-all"),
]


@pytest.mark.parametrize(("frame", "golden"), GOLDENS)
def test_encoding_is_pinned(frame: typing.Any, golden: str) -> None:
    assert SER.encode(frame).hex() == golden
    assert ONLY_LG.encode(frame).hex() == golden


@pytest.mark.parametrize(("frame", "golden"), GOLDENS)
def test_golden_bytes_decode(frame: typing.Any, golden: str) -> None:
    assert SER.decode(bytes.fromhex(golden)) == frame
    assert ONLY_LG.decode(bytes.fromhex(golden)) == frame


def test_every_langgraph_kind_has_a_golden_and_a_fresh_tag() -> None:
    lg_tags = {k.__struct_config__.tag for k in typing.get_args(LangGraphFrame)}
    all_kinds = typing.get_args(Frame)
    all_tags = [k.__struct_config__.tag for k in all_kinds]
    pinned = {g.values[0].__struct_config__.tag for g in GOLDENS}
    assert lg_tags == pinned == {"lgc", "lgw", "lgr"}
    assert lg_tags <= set(all_tags), "every log decodes LangGraph frames through Frame"
    assert len(all_tags) == len(set(all_tags)), "two frame kinds share a tag"


def test_blob_kinds_are_pinned() -> None:
    # Stored in every blob: renumbering them would change what old logs mean.
    assert (BLOB_FULL, BLOB_EMPTY, BLOB_APPEND, BLOB_PATCH) == (0, 1, 2, 3)


def test_versions_keep_their_type() -> None:
    # 1, 1.0 and "1" are different LangGraph versions (and different blob keys).
    frame = LgCheckpoint(
        checkpoint_id="c",
        parent_id=None,
        checkpoint_type="msgpack",
        checkpoint=b"",
        versions={"a": 1, "b": 1.0, "c": "1"},
        metadata_type="msgpack",
        metadata=b"",
        run_id=None,
        blobs=(),
        saved_at=0.0,
    )
    back = SER.decode(SER.encode(frame))
    assert [type(v) for v in back.versions.values()] == [int, float, str]
