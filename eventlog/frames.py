"""Frame kinds: frozen, tagged, array-like msgspec Structs forming one union.

Evolution rules (docs/frame-format.md): frames are ``array_like``, so fields are only ever
appended at the end, each new field has a default, and no field changes type. A golden-bytes
test (tests/test_codec_golden.py) pins the encoding of every kind, and a small log written by
format 1 (tests/fixtures/v1-log) must keep opening, reading and verifying.

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


class FanOutHeader(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A fan-out in a record's ``fan_out_progress``; ``fid`` is its id within the stream."""

    fid: int
    fan_out_node_name: str
    namespace: tuple[str, ...]
    instance_count: int
    lineage: tuple[EnclosingFanOutInstance, ...] = ()


class StateSplice(msgspec.Struct, frozen=True, array_like=True):
    """A new state as an edit of the previous one's bytes: the first ``keep_head`` bytes and the
    last ``keep_tail`` bytes of the previous state, with ``middle`` between them.

    A save whose state changed in one place (a counter, a cursor, an appended item) then
    stores only that place, whatever the state's size; see ``projections.records.splice_of``.
    """

    keep_head: int
    keep_tail: int
    middle: bytes


class InstanceChange(msgspec.Struct, frozen=True, array_like=True):
    fid: int
    index: int
    progress: FanOutInstanceProgress


class InstancePage(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A page of a paged snapshot: the instances ``start <= index < stop`` of fan-out ``fid``
    as the record holds them after the frame carrying the page (listed sparsely: absent = not
    started). The fold applies it after the frame's own changes.

    A record with more fan-out instances than one frame should hold is snapshotted in pages
    riding on consecutive saves: the first (``back == 0``) restates every other field of the
    record, with the fan-out ``layout`` and ``next_fid`` here, and each later page is ``back``
    frames after it; the one with ``last`` set completes it. Folding from the first frame
    through the last then gives the record exactly (every instance is either restated by its
    page or changed after it), so ``record_at`` starts there once the snapshot is complete.
    """

    back: int  # frames back to the paged snapshot's first frame (0: this frame)
    fid: int
    start: int
    stop: int
    instances: tuple[InstanceChange, ...] = ()
    last: bool = False
    layout: tuple[FanOutHeader, ...] | None = None  # the first page only
    next_fid: int = 0  # the first page only


class Save(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="sv"):
    """A save as a delta. ``None`` means unchanged; ``positions_from`` -1 means unchanged.

    A changed state is in ``state`` (whole) or in ``state_splice`` (an edit of the previous
    state's bytes), never both.
    """

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
    state_splice: StateSplice | None = None
    # Format 2: when one frame carries several buffered ``save_instance`` calls (a batch), the
    # time of each, parallel to ``instances``; empty = every change was saved at ``saved_at``.
    instance_saved_at: tuple[float, ...] = ()
    # Format 3: a page of a paged snapshot (:class:`InstancePage`), for records whose fan-outs
    # are too big for one snapshot frame; ``None`` on every other save.
    page: InstancePage | None = None


class Compacted(msgspec.Struct, frozen=True, array_like=True):
    """Where a compacted stream starts: the original frame its first snapshot stands for.

    The snapshot holds the record as of original stream seq ``seq``, whose envelope checksum
    in the original log was ``checksum`` (stream id ``stream_id`` there). Original frames
    ``1..seq`` are not copied; the frames after ``seq`` follow with their stored payloads
    unchanged, renumbered from 2, so the original chain can be recomputed from this one.
    """

    seq: int
    checksum: bytes
    stream_id: int
    compacted_at: float


class ForkOrigin(msgspec.Struct, frozen=True, array_like=True):
    """Where a forked invocation starts: the record as of stream seq ``seq`` of invocation
    ``invocation_id``, whose frame's envelope checksum is ``checksum`` (in this log). Set only
    on the first frame of a stream written by ``CheckpointLog.fork``; ``verify`` checks that
    the source frame exists with that checksum and that the record matches."""

    invocation_id: str
    seq: int
    checksum: bytes


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
    compacted: Compacted | None = None  # set only on the first frame of a compacted stream
    # Set when the save this snapshot stands for was a batch of ``save_instance`` calls: their
    # changes in call order, with the time of each (as in ``Save``), which the full record no
    # longer shows. The fold ignores them: ``instances`` already holds their outcome.
    batch: tuple[InstanceChange, ...] = ()
    instance_saved_at: tuple[float, ...] = ()
    # Set only on the first frame of a forked invocation (``CheckpointLog.fork``).
    forked: ForkOrigin | None = None


class Tombstone(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="rm"):
    saved_at: float


CheckpointFrame = Save | Snapshot | Tombstone
CHECKPOINT_FRAMES = (Save, Snapshot, Tombstone)
"""What the checkpoint-record fold reads; other frames in an invocation's stream (application
events appended beside the saves) are shown by forensics and skipped by every fold."""


# -- LangGraph checkpoint streams (eventlog.integrations.langgraph) ----------------------------
# One stream per (thread_id, checkpoint_ns). Values are LangGraph serde output (``type`` tag +
# bytes from ``serde.dumps_typed``), stored opaque: the log never interprets them.

BLOB_FULL = 0  # ``data`` is the whole value
BLOB_EMPTY = 1  # the channel has this version but no value
BLOB_APPEND = 2  # the list at frame ``base`` (same channel) + the list ``data`` decodes to
BLOB_PATCH = 3  # ``data`` is a zstd patch: dictionary = the full bytes of the blob at ``base``


class LgBlob(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A channel's value at one version; ``base`` is a seq of this stream (0: none)."""

    channel: str
    version: str | int | float
    kind: int
    type: str = ""
    data: bytes = b""
    base: int = 0


class LgWrite(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One pending write; ``idx`` < 0 for special channels (LangGraph's WRITES_IDX_MAP)."""

    idx: int
    channel: str
    type: str
    data: bytes


class LgCheckpoint(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="lgc"):
    """A checkpoint, plus the blobs of the channels whose version changed (``new_versions``).

    ``checkpoint`` is the serde of the checkpoint without ``channel_values`` and
    ``channel_versions``; the versions are kept as plain data in ``versions`` (so a compactor
    can tell which blobs a checkpoint needs), and ``run_id`` is copied out of the metadata.
    """

    checkpoint_id: str
    parent_id: str | None
    checkpoint_type: str
    checkpoint: bytes
    versions: dict[str, str | int | float]
    metadata_type: str
    metadata: bytes
    run_id: str | None
    blobs: tuple[LgBlob, ...]
    saved_at: float


class LgWrites(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="lgw"):
    """The writes of one task (one ``put_writes`` call) against ``checkpoint_id``."""

    checkpoint_id: str
    task_id: str
    task_path: str
    writes: tuple[LgWrite, ...]
    saved_at: float


class LgRemove(msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag="lgr"):
    """Checkpoints removed with their writes (``None``: everything of the stream, blobs too).

    ``reason``: ``delete_thread``, ``delete_for_runs``, ``prune_keep_latest``,
    ``prune_delete``, ``copy_thread`` or ``compaction`` (the last two drop again checkpoints
    that a copy replayed only for their blobs). The removed frames stay in the log until
    compaction reclaims them.
    """

    checkpoint_ids: tuple[str, ...] | None
    reason: str
    saved_at: float


LangGraphFrame = LgCheckpoint | LgWrites | LgRemove

# The union every log decodes with: one typed decoder reads any stream of any integration.
Frame = Event | Save | Snapshot | Tombstone | LgCheckpoint | LgWrites | LgRemove
