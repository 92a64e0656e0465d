"""Reading what is readable: frames of a stream (strict or tolerant), and the walk that
folds them into records, marking what it could not read or rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from backends.base import ReadTxn
from eventlog.codec import ZERO_CHECKSUM, read_header
from eventlog.errors import (
    CheckpointError,
    CorruptFrame,
    UnsupportedFormat,
)
from eventlog.frames import (
    CHECKPOINT_FRAMES,
    Compacted,
    Event,
    ForkOrigin,
    InstanceChange,
    Save,
    Snapshot,
    Tombstone,
)
from eventlog.layout import LOG, STREAMS, U64, U64X2
from eventlog.log import READ_CHUNK_FRAMES, EventLog, StoredFrame
from eventlog.materialized import (
    SNAPSHOTS,
    last_snapshot_at_or_before,
)
from eventlog.records import (
    CheckpointRecord,
)
from projections.history import RecordDiff, frame_diff, instance_counts, update_counts
from projections.records import Head, apply_inplace, to_record

# -- reading what is readable ------------------------------------------------------------------


class Unreadable(msgspec.Struct, frozen=True):
    """Seqs ``seq..last_seq`` of ``stream`` that could not be read or rebuilt, and why.

    ``problem``: ``damaged`` (checksum, header or decode failed), ``missing`` (removed from
    the log or the index), ``chain`` (the frame reads, but does not chain to the one before:
    something before it was replaced; it is still folded), ``unrebuildable`` (a delta on top
    of a lost frame), ``storage`` (the backend could not read the pages holding it).
    """

    stream: str
    seq: int
    last_seq: int
    problem: str
    detail: str
    global_seq: int | None = None

    @property
    def breaks_fold(self) -> bool:
        return self.problem != "chain"

    def __str__(self) -> str:
        seqs = (
            f"seq {self.seq}" if self.seq == self.last_seq else f"seqs {self.seq}..{self.last_seq}"
        )
        return f"{self.stream!r} {seqs}: {self.problem}: {self.detail}"


RECORD_FRAMES: Final = CHECKPOINT_FRAMES  # what the checkpoint-record fold reads


def frame_saved_at(frame: Any) -> float:
    if isinstance(frame, Event):
        return float(frame.at)
    return float(getattr(frame, "saved_at", 0.0))


def _other_name(frame: Any) -> str:
    """``event``, or the frame class in snake case (``LgCheckpoint`` -> ``lg_checkpoint``)."""
    name = type(frame).__name__
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))


def frame_kind(frame: Any) -> str:
    if isinstance(frame, Tombstone):
        return "delete"
    if isinstance(frame, (Save, Snapshot)):
        return str(frame.kind)
    return _other_name(frame)


def frame_type(frame: Any) -> str:
    if isinstance(frame, Save):
        return "delta"
    if isinstance(frame, Snapshot):
        return "snapshot"
    if isinstance(frame, Tombstone):
        return "tombstone"
    return _other_name(frame)  # an application event, another integration's frame


def read_frames(
    log: EventLog, stream: str, from_seq: int = 1, to_seq: int | None = None
) -> Iterator[StoredFrame[Any] | Unreadable]:
    """Like ``EventLog.read_stream``, but yields :class:`Unreadable` for what cannot be read
    (and carries on) instead of raising at the first damaged frame."""
    next_seq = max(from_seq, 1)
    prev_sum: bytes | None = ZERO_CHECKSUM if next_seq == 1 else None
    while to_seq is None or next_seq <= to_seq:
        chunk: list[StoredFrame[Any] | Unreadable] = []
        read = 0
        try:
            with log.backend.read() as txn:
                sid = log.stream_id(txn, stream)
                if sid is None:
                    return
                stop = U64X2.pack(sid, to_seq + 1) if to_seq is not None else U64.pack(sid + 1)
                for key, gkey in txn.scan(
                    STREAMS, U64X2.pack(sid, next_seq), stop, limit=READ_CHUNK_FRAMES
                ):
                    read += 1
                    seq = U64X2.unpack(key)[1]
                    gseq = U64.unpack(gkey)[0]
                    if seq > next_seq:
                        detail = "no index entry (frames removed from the log and its index)"
                        chunk.append(Unreadable(stream, next_seq, seq - 1, "missing", detail))
                        prev_sum = None
                    prev_sum = _read_one(log, txn, stream, sid, seq, gseq, prev_sum, chunk)
                    next_seq = seq + 1
        except Exception as e:  # noqa: BLE001 - a damaged B-tree raises the backend's own errors
            yield from chunk
            last = to_seq if to_seq is not None else _last_seq_or(log, stream, next_seq)
            detail = f"the storage pages holding them cannot be read ({type(e).__name__}: {e})"
            yield Unreadable(stream, next_seq, max(last, next_seq), "storage", detail)
            return
        yield from chunk
        if read < READ_CHUNK_FRAMES:
            return


def _last_seq_or(log: EventLog, stream: str, default: int) -> int:
    try:
        return log.last_seq(stream)
    except Exception:  # noqa: BLE001 - only a better bound for a message about damage
        return default


def _read_one(
    log: EventLog,
    txn: ReadTxn,
    stream: str,
    sid: int,
    seq: int,
    gseq: int,
    prev_sum: bytes | None,
    out: list[StoredFrame[Any] | Unreadable],
) -> bytes | None:
    """Read one indexed frame into ``out``; returns its checksum (``None`` when unreadable)."""
    data = txn.get(LOG, U64.pack(gseq))
    if data is None:
        detail = f"the index points at log #{gseq}, which is not in the log (removed?)"
        out.append(Unreadable(stream, seq, seq, "missing", detail, gseq))
        return None
    try:
        sf = log.decode_stored(stream, gseq, data, (sid, seq))
    except (CorruptFrame, UnsupportedFormat) as e:
        out.append(Unreadable(stream, seq, seq, "damaged", str(e), gseq))
        return None
    if prev_sum is not None and read_header(data)[5] != prev_sum:
        detail = (
            "the frame reads, but its prev link does not match the frame before it: a frame "
            "before it was replaced or edited"
        )
        out.append(Unreadable(stream, seq, seq, "chain", detail, gseq))
    out.append(sf)
    return sf.checksum


@dataclass
class Step:
    """One frame of a stream folded: the head after it (a live object, changed by the next
    step: read what you need before advancing), and optionally counts and the diff it made."""

    seq: int
    global_seq: int
    saved_at: float
    kind: str  # a save kind, "delete" or "event"
    frame_type: str  # delta | snapshot | tombstone | event
    stored_bytes: int
    checksum: bytes
    frame: Any
    head: Head | None
    counts: dict[str, int] = field(default_factory=dict)
    diff: RecordDiff | None = None
    resumed: bool = False  # the first record rebuilt after unreadable frames (diff unknown)

    @property
    def is_record(self) -> bool:
        """A checkpoint-record frame (save, snapshot, delete), not an event or other kind."""
        return isinstance(self.frame, RECORD_FRAMES)

    @property
    def compacted(self) -> Compacted | None:
        return self.frame.compacted if isinstance(self.frame, Snapshot) else None

    @property
    def forked(self) -> ForkOrigin | None:
        """Where the stream was forked from (set on a fork's first frame only)."""
        return self.frame.forked if isinstance(self.frame, Snapshot) else None

    def record(self) -> CheckpointRecord | None:
        return None if self.head is None else to_record(self.head)

    @property
    def instance_saves(self) -> int | None:
        """How many ``save_instance`` calls the frame commits when it is a batch of them
        (``Save.instance_saved_at`` set); ``None`` for any other frame."""
        changes, _ = batch_of(self.frame)
        return len(changes) if changes else None

    def instance_saved_at(self) -> tuple[float, ...]:
        """For a batch, the time of the change behind each of ``diff.instances`` (in the same
        order; an instance changed twice in the batch takes the later time); ``()`` for any
        other frame or without a diff. Reads the live head: call it before advancing."""
        changes, times = batch_of(self.frame)
        if self.diff is None or self.head is None or not changes:
            return ()
        names = {s.header.fid: s.header for s in self.head.slots}
        when: dict[tuple[str, tuple[str, ...], Any, int], float] = {}
        for ch, t in zip(changes, times, strict=True):
            h = names[ch.fid]
            when[(h.fan_out_node_name, h.namespace, h.lineage, ch.index)] = t
        keys = ((d.fan_out, d.namespace, d.lineage, d.index) for d in self.diff.instances)
        return tuple(when[k] for k in keys)


def batch_of(frame: Any) -> tuple[tuple[InstanceChange, ...], tuple[float, ...]]:
    """The ``save_instance`` calls a frame commits as a batch, with the time of each (a
    ``Save`` with ``instance_saved_at``, or a ``Snapshot`` written for one: its ``batch``);
    ``((), ())`` for any other frame."""
    if isinstance(frame, Save) and frame.instance_saved_at:
        return frame.instances, frame.instance_saved_at
    if isinstance(frame, Snapshot) and frame.batch:
        return frame.batch, frame.instance_saved_at
    return (), ()


def walk(
    log: EventLog,
    stream: str,
    *,
    from_seq: int = 1,
    to_seq: int | None = None,
    tolerant: bool = False,
    diffs: bool = False,
    counts: bool = False,
) -> Iterator[Step | Unreadable]:
    """Fold ``stream`` and yield a :class:`Step` per frame with ``from_seq <= seq <= to_seq``.

    Folding starts at the newest snapshot at or before ``from_seq`` (before it, with
    ``diffs``: the diff a snapshot makes needs the record before it). Strict (default): a
    damaged frame raises ``CorruptFrame``. Tolerant: see :class:`Unreadable`.
    """
    start = 1
    if from_seq > 1:
        with log.backend.read() as txn:
            sid = log.stream_id(txn, stream)
            if sid is None:
                return
            if _has_table(log, SNAPSHOTS):
                start = last_snapshot_at_or_before(txn, sid, from_seq - 1 if diffs else from_seq)
    source: Iterable[StoredFrame[Any] | Unreadable] = (
        read_frames(log, stream, start, to_seq)
        if tolerant
        else log.read_stream(stream, start, to_seq)
    )
    head: Head | None = None
    cnt = instance_counts(None)
    lost: list[int] | None = None  # [first, last] seqs that cannot be rebuilt, after a loss
    resumed = False
    for item in source:
        if isinstance(item, Unreadable):
            if item.breaks_fold:
                if lost is not None and lost[0] <= lost[1] and lost[1] >= from_seq:
                    yield _unrebuildable(stream, lost, f"more damage follows at seq {item.seq}")
                lost = [item.last_seq + 1, item.last_seq]
                head = None
            if item.last_seq >= from_seq:
                yield item
            continue
        frame = item.frame
        if not isinstance(frame, RECORD_FRAMES):
            # Application events and other integrations' frames: shown, never folded.
            if item.seq >= from_seq:
                yield Step(
                    item.seq, item.global_seq, frame_saved_at(frame), frame_kind(frame),
                    frame_type(frame), item.stored_bytes, item.checksum, frame, None,
                )  # fmt: skip
            continue
        if item.seq == start and start > 1 and not isinstance(frame, Snapshot):
            # A snapshot mark that points at no snapshot (verify reports it): fold from seq 1.
            yield from _refold(log, stream, from_seq, to_seq, tolerant, diffs, counts)
            return
        if lost is not None:
            if not isinstance(frame, (Snapshot, Tombstone)):
                lost[1] = item.seq
                continue
            if lost[0] <= lost[1] and lost[1] >= from_seq:
                yield _unrebuildable(
                    stream, lost, f"the fold resumes at the {frame_type(frame)} at seq {item.seq}"
                )
            lost = None
            resumed = True
        visible = item.seq >= from_seq
        # After a loss the diff against the lost record is unknown: Step.resumed says so.
        diff = (
            frame_diff(head, frame, item.seq, stream) if diffs and visible and not resumed else None
        )
        recount = counts and not update_counts(cnt, head, frame)
        head = apply_inplace(head, frame, item.seq, stream)
        if recount:
            cnt = instance_counts(head)
        if visible:
            yield Step(
                item.seq, item.global_seq, frame.saved_at, frame_kind(frame), frame_type(frame),
                item.stored_bytes, item.checksum, frame, head, dict(cnt) if counts else {}, diff,
                resumed,
            )  # fmt: skip
        resumed = False
    if lost is not None and lost[0] <= lost[1] and lost[1] >= from_seq:
        until = "no snapshot or delete follows" + (f" by seq {to_seq}" if to_seq else "")
        yield _unrebuildable(stream, lost, until)


def _refold(
    log: EventLog,
    stream: str,
    from_seq: int,
    to_seq: int | None,
    tolerant: bool,
    diffs: bool,
    counts: bool,
) -> Iterator[Step | Unreadable]:
    """Fold from seq 1, yielding only from ``from_seq`` (used when a snapshot mark is wrong)."""
    for item in walk(log, stream, to_seq=to_seq, tolerant=tolerant, diffs=diffs, counts=counts):
        if isinstance(item, Unreadable):
            if item.last_seq >= from_seq:
                yield item
        elif item.seq >= from_seq:
            yield item


def _unrebuildable(stream: str, lost: list[int], until: str) -> Unreadable:
    detail = (
        f"delta frames on top of the unreadable seq {lost[0] - 1}: their records cannot be "
        f"rebuilt ({until})"
    )
    return Unreadable(stream, lost[0], lost[1], "unrebuildable", detail)


def _has_table(log: EventLog, table: str) -> bool:
    try:
        with log.backend.read() as txn:
            txn.last_key(table)
    except CheckpointError:
        return False
    return True
