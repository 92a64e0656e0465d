"""Fork: a new invocation that starts from the record as of any save of another.

``CheckpointLog.fork(invocation_id, at=SEQ, new_invocation_id=NEW)`` (and
``Checkpointer.fork``, ``ckptlog fork``) appends one frame, the first of stream ``NEW``: a
snapshot of the record as of seq ``SEQ`` of ``invocation_id`` (its ``invocation_id`` set to
``NEW``), carrying a :class:`~eventlog.frames.ForkOrigin` (source invocation, seq, and the
source frame's envelope checksum). The engine resumes it like any saved invocation
(openarmature: ``invoke(resume_invocation=NEW)``), re-running what that record has not
completed; the source is untouched.

Invariants:
- A fork writes one frame or nothing: the target is checked inside the write transaction
  (its first frame must get seq 1), so a concurrent writer of ``NEW`` makes one of the two
  fail, never both write; every refusal is a :class:`~eventlog.errors.ForkError` (or
  ``UnknownInvocation`` / ``SeqOutOfRange``) raised before anything is appended.
- The origin is checkable forever: frames are never rewritten, so ``verify`` re-reads the
  source frame, compares its checksum and the record it folds to (eventlog.fork_links).
- Only checkpoint streams fork here: a LangGraph thread forks through its saver
  (``update_state`` from a past ``checkpoint_id``, ``copy_thread``); techrevati and apflow
  streams are event stores whose consumers resume from their own head (docs/forensics.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from backends.base import WriteTxn
from eventlog import arguments as args
from eventlog.checkpoint_frames import _Save
from eventlog.errors import ForkTargetExists, NotASave, SeqOutOfRange
from eventlog.fork_links import origin
from eventlog.frames import ForkOrigin, Save, Snapshot, Tombstone

if TYPE_CHECKING:
    from eventlog.checkpoints import CheckpointLog
    from eventlog.frames import CheckpointFrame
    from projections.records import Incoming

__all__ = ["ForkOrigin", "fork", "origin"]


class _Fork(_Save):
    """The first save of the new stream, as a snapshot carrying its origin."""

    __slots__ = ("origin",)

    def __init__(self, owner: CheckpointLog, inc: Incoming, origin: ForkOrigin) -> None:
        super().__init__(owner, inc)
        self.origin = origin

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> CheckpointFrame:
        if seq != 1:
            raise ForkTargetExists(
                f"cannot fork into {stream!r}: it already has {seq - 1} frame(s) in the log "
                "(a fork starts a new invocation); choose a new invocation id"
            )
        frame = super().build(txn, stream, sid, seq)
        if not isinstance(frame, Snapshot):  # the first save of a stream is always a snapshot
            raise TypeError(f"the first frame of {stream!r} was built as {type(frame)}")
        return msgspec.structs.replace(frame, forked=self.origin)


def source_save(cl: CheckpointLog, invocation_id: str, at: int) -> tuple[ForkOrigin, Any]:
    """The origin of a fork of ``invocation_id`` at seq ``at`` and the frame there; refuses a
    seq that is not a save (:class:`NotASave`) or outside the stream (``SeqOutOfRange``)."""
    last = cl._last_seq(invocation_id)  # UnknownInvocation for an id with no frames
    if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= last:
        raise SeqOutOfRange(
            f"cannot fork {invocation_id!r} at seq {at!r}: its seqs run 1..{last}; pass the "
            "seq of one of its saves (`ckptlog history PATH ID` lists them)"
        )
    found = next(iter(cl.log.read_stream(invocation_id, at, at)), None)
    if found is None:  # pragma: no cover - the index said the seq exists
        raise SeqOutOfRange(f"seq {at} of {invocation_id!r} cannot be read")
    frame = found.frame
    if not isinstance(frame, (Save, Snapshot)):
        what = (
            "a delete"
            if isinstance(frame, Tombstone)
            else f"a {type(frame).__name__} frame, not a checkpoint save"
        )
        hint = (
            " (a LangGraph thread forks through its saver: graph.update_state with a past "
            "checkpoint_id, or copy_thread)"
            if type(frame).__name__.startswith("Lg")
            else ""
        )
        raise NotASave(
            f"seq {at} of {invocation_id!r} is {what}: a fork starts from a save's record; "
            f"pick the seq of a save (`ckptlog history PATH {invocation_id}`){hint}"
        )
    return ForkOrigin(invocation_id, at, found.checksum), frame


def fork(cl: CheckpointLog, invocation_id: str, at: int, new_invocation_id: str) -> ForkOrigin:
    """Write the fork (see the module docstring); returns its origin once durable."""
    args.stream_id("invocation_id", invocation_id)
    args.stream_id("new_invocation_id", new_invocation_id)
    if cl.log.last_seq(new_invocation_id):
        raise ForkTargetExists(
            f"cannot fork into {new_invocation_id!r}: the log already holds that invocation "
            "(a fork starts a new one); choose a new invocation id"
        )
    origin_, _ = source_save(cl, invocation_id, at)
    record = cl.record_at(invocation_id, at)
    if record is None:  # pragma: no cover - a save's seq always folds to a record
        raise NotASave(f"seq {at} of {invocation_id!r} holds no record")
    forked = msgspec.structs.replace(record, invocation_id=new_invocation_id)
    inc = cl._incoming(new_invocation_id, forked, "save")
    cl.log.append(new_invocation_id, _Fork(cl, inc, origin_))
    return origin_
