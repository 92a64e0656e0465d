"""LangGraph checkpoint streams as a pure fold: frames -> the rows a reader needs.

One stream holds one ``(thread_id, checkpoint_ns)`` of a LangGraph thread (see
eventlog.integrations.langgraph). Folding its frames in seq order gives a :class:`StreamView`:

- ``checkpoints``: checkpoint id -> :class:`CkptRow` (the seq of its ``LgCheckpoint`` frame,
  its parent id, run id and serialized metadata, so ``list`` filters without reading frames);
- ``blobs``: (channel, version key) -> seq of the newest frame storing that channel version;
- ``writes``: (checkpoint id, task id, idx) -> :class:`WriteRow` (seq and position of the write
  in its ``LgWrites`` frame, and the task path that orders it).

Invariants:
- ``apply`` is the only rule: the materialized tables (eventlog.integrations.langgraph_store)
  apply the same rule inside the write transaction, and ``verify`` checks that they equal
  this fold for every stream.
- A frame only holds what its writer accepted (duplicate writes for ``idx >= 0`` are dropped
  before the frame is built), so folding is an upsert: a later frame wins.
- A re-put checkpoint id replaces its row (and keeps its writes), as LangGraph's savers do.
- ``LgRemove`` with ids drops those checkpoints and their writes but keeps blobs (another
  checkpoint or a delta blob may still refer to them); without ids it empties the view.
- A delta blob's base is an earlier frame whose blob the index named when it was written, so
  nothing after a whole-stream ``LgRemove`` refers to a frame before it; :func:`compaction_plan`
  says which frames readers can still reach (the rest is reclaimable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from eventlog.frames import BLOB_APPEND, BLOB_PATCH, LgBlob, LgCheckpoint, LgRemove, LgWrites

_version_enc = msgspec.msgpack.Encoder()


class CkptRow(msgspec.Struct, frozen=True, array_like=True, gc=False):
    seq: int
    parent_id: str | None
    run_id: str | None
    metadata_type: str
    metadata: bytes


class WriteRow(msgspec.Struct, frozen=True, array_like=True, gc=False):
    seq: int
    pos: int
    task_path: str


def version_key(version: str | int | float) -> bytes:
    """A channel version as key bytes: msgpack, so ``1``, ``1.0`` and ``"1"`` stay distinct."""
    return _version_enc.encode(version)


@dataclass
class StreamView:
    checkpoints: dict[str, CkptRow] = field(default_factory=dict)
    blobs: dict[tuple[str, bytes], int] = field(default_factory=dict)
    writes: dict[tuple[str, str, int], WriteRow] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.checkpoints or self.blobs or self.writes)

    def runs(self) -> set[tuple[str, str]]:
        """``(run id, checkpoint id)`` of every checkpoint that has a run id."""
        return {(r.run_id, cid) for cid, r in self.checkpoints.items() if r.run_id is not None}


def checkpoint_row(seq: int, frame: LgCheckpoint) -> CkptRow:
    return CkptRow(seq, frame.parent_id, frame.run_id, frame.metadata_type, frame.metadata)


def apply(view: StreamView, seq: int, frame: Any) -> None:
    """Fold one frame (at stream seq ``seq``) into ``view``; other kinds are ignored."""
    if isinstance(frame, LgCheckpoint):
        view.checkpoints[frame.checkpoint_id] = checkpoint_row(seq, frame)
        for blob in frame.blobs:
            view.blobs[blob.channel, version_key(blob.version)] = seq
    elif isinstance(frame, LgWrites):
        for pos, w in enumerate(frame.writes):
            view.writes[frame.checkpoint_id, frame.task_id, w.idx] = WriteRow(
                seq, pos, frame.task_path
            )
    elif isinstance(frame, LgRemove):
        if frame.checkpoint_ids is None:
            view.checkpoints.clear()
            view.blobs.clear()
            view.writes.clear()
            return
        removed = set(frame.checkpoint_ids)
        for cid in removed:
            view.checkpoints.pop(cid, None)
        for key in [k for k in view.writes if k[0] in removed]:
            del view.writes[key]


def fold(frames: Iterable[tuple[int, Any]]) -> StreamView:
    """The view of a stream from its ``(seq, frame)`` pairs, in seq order."""
    view = StreamView()
    for seq, frame in frames:
        apply(view, seq, frame)
    return view


class CompactionPlan(msgspec.Struct, frozen=True):
    """What a compacted copy of a stream keeps: ``keep`` (seqs, ascending), and the checkpoint
    ids that a trailing ``LgRemove`` must drop again (frames kept only for their blobs)."""

    keep: tuple[int, ...]
    remove_ids: tuple[str, ...]


def _blob_in(frame: Any, channel: str) -> LgBlob | None:
    if isinstance(frame, LgCheckpoint):
        for blob in frame.blobs:
            if blob.channel == channel:
                return blob
    return None


def compaction_plan(frames: Sequence[tuple[int, Any]]) -> CompactionPlan:
    """The frames a stream's readers can still reach, from its ``(seq, frame)`` pairs.

    Live: the frame of every checkpoint in the view; for each of its channel versions, the
    frame the blob index names and, through ``base``, every frame its delta chain reads; every
    frame a write row points at. Everything else (removed checkpoints, superseded blobs and
    writes, the ``LgRemove`` frames) is garbage. Replaying the kept frames in order (with
    :func:`rebase` for the new seqs) and then removing ``remove_ids`` gives the same view for
    every live key (:func:`fold`).
    """
    by_seq = dict(frames)
    view = fold(frames)
    keep: set[int] = set()
    seen: set[tuple[int, str]] = set()
    for row in view.checkpoints.values():
        keep.add(row.seq)
        head = by_seq[row.seq]
        if not isinstance(head, LgCheckpoint):
            continue
        for channel, version in head.versions.items():
            seq = view.blobs.get((channel, version_key(version)))
            while seq is not None and (seq, channel) not in seen:
                seen.add((seq, channel))
                keep.add(seq)
                blob = _blob_in(by_seq.get(seq), channel)
                delta = blob is not None and blob.kind in (BLOB_APPEND, BLOB_PATCH)
                seq = blob.base if delta and blob is not None else None
    keep.update(w.seq for w in view.writes.values())
    kept = fold((seq, by_seq[seq]) for seq in sorted(keep))
    resurrected = tuple(sorted(set(kept.checkpoints) - set(view.checkpoints)))
    return CompactionPlan(tuple(sorted(keep)), resurrected)


def rebase(frame: Any, seqs: Mapping[int, int]) -> Any:
    """``frame`` with its delta bases renamed through ``seqs`` (old seq -> new seq).

    Raises ``KeyError`` naming the base when it is not in ``seqs`` (it was not copied first).
    """
    if not isinstance(frame, LgCheckpoint) or not any(b.base for b in frame.blobs):
        return frame
    blobs = tuple(
        msgspec.structs.replace(b, base=seqs[b.base]) if b.base else b for b in frame.blobs
    )
    return msgspec.structs.replace(frame, blobs=blobs)
