"""Frame kinds: frozen, tagged, array-like msgspec Structs forming one union.

Evolution rules (docs/frame-format.md): frames are ``array_like``, so fields are only ever
appended at the end, each new field has a default, and no field changes type. A golden-bytes
test (tests/test_codec_golden.py) pins the encoding of every kind.

Checkpoint frames (one stream per invocation):
- :class:`Save` is a delta against the stream's previous record: only what changed.
- :class:`Snapshot` is a full record; one is written when the deltas since the last snapshot
  outweigh it (and at least every ``SNAPSHOT_FRAMES_MAX`` frames), so rebuilding any point of
  history folds a bounded tail, while the bytes a save appends stay independent of fan-out size.
- :class:`Tombstone` records a delete; the history before it stays in the log.
States are stored as msgpack bytes, encoded once by the caller (nested as msgpack bin).
"""

from __future__ import annotations

from typing import Any

import msgspec

from eventlog.records import EnclosingFanOutInstance, FanOutInstanceProgress, NodePosition


class Event(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="ev"):
    """An application event: a name and any structurally encodable data."""

    name: str
    data: Any = None
    at: float = 0.0


class FanOutHeader(msgspec.Struct, frozen=True, array_like=True):
    """A fan-out in a record's ``fan_out_progress``; ``fid`` is its id within the stream."""

    fid: int
    fan_out_node_name: str
    namespace: tuple[str, ...]
    instance_count: int
    lineage: tuple[EnclosingFanOutInstance, ...] = ()


class InstanceChange(msgspec.Struct, frozen=True, array_like=True):
    fid: int
    index: int
    progress: FanOutInstanceProgress


class Save(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="sv"):
    """A save as a delta. ``None`` means unchanged; ``positions_from`` -1 means unchanged."""

    kind: str
    saved_at: float
    correlation_id: str | None = None
    schema_version: str | None = None
    state: bytes | None = None  # msgpack of the state
    parent_states: bytes | None = None
    positions_from: int = -1
    positions: tuple[NodePosition, ...] = ()
    layout: tuple[FanOutHeader, ...] | None = None
    instances: tuple[InstanceChange, ...] = ()


class Snapshot(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="sn"):
    """A full record; fan-out instances are listed sparsely (absent = not started)."""

    kind: str
    saved_at: float
    invocation_id: str
    correlation_id: str
    schema_version: str
    state: bytes
    parent_states: bytes
    positions: tuple[NodePosition, ...]
    layout: tuple[FanOutHeader, ...]
    instances: tuple[InstanceChange, ...]
    next_fid: int


class Tombstone(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="rm"):
    saved_at: float


Frame = Event | Save | Snapshot | Tombstone
CheckpointFrame = Save | Snapshot | Tombstone
