"""Forensics on a checkpoint log: history, points in time, diffs, replay, scan, export, an
extended verify, stats and retention by compaction into a new log.

Everything here reads through the backend's read transactions, so it works on a log opened
read-only (``CheckpointLog.open(path, readonly=True)``) while another process writes: LMDB
readers never block the writer. :func:`open_readonly` adds what the command line needs on top:
a check that ``data.mdb`` is not truncated (reading a page past the end of a truncated file
kills the process with SIGBUS), and a zero-filled private copy to read such a file from.

Invariants:
- Nothing here writes to the log it reads. :func:`compact` writes only to DEST, a new log; the
  source is never modified, and DEST appears whole or not at all (a killed compaction leaves
  only a hidden ``.DEST.compacting-*`` sibling; running it again works).
- Strict readers raise :class:`~eventlog.errors.CorruptFrame` at the first damaged frame.
  Tolerant readers (``tolerant=True``) never stop at damage: they yield :class:`Unreadable`
  markers naming each seq they could not read or rebuild, and resume folding at the next
  snapshot or delete (a delta on top of a lost frame cannot be rebuilt).
- A compacted stream starts with a snapshot frame whose :class:`~eventlog.frames.Compacted`
  names the original seq it stands for and that frame's checksum; later frames keep their
  stored payload bytes, so the original chain can be recomputed (:func:`provenance`).
- :func:`verify` reports, never repairs: the core checks (checksums, chains, index) plus every
  materialized row (head, bodies, positions, fan-out rows, correlation index, snapshot marks)
  against the fold of its stream's frames, all read in one consistent read transaction.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Protocol

import msgspec

from backends import lmdb_meta
from backends.base import ReadTxn, WriteTxn
from eventlog.codec import ZERO_CHECKSUM, Compressor, Serializer, read_header, seal
from eventlog.errors import CheckpointError, CorruptFrame, NotALog, UnsupportedFormat
from eventlog.frames import (
    CHECKPOINT_FRAMES,
    Compacted,
    Event,
    Frame,
    InstanceChange,
    Save,
    Snapshot,
    Tombstone,
)
from eventlog.log import (
    LOG,
    META,
    READ_CHUNK_FRAMES,
    STREAM_IDS,
    STREAM_NAMES,
    STREAMS,
    U64,
    U64X2,
    EventLog,
    Problem,
    StoredFrame,
    VerifyReport,
)
from eventlog.materialized import (
    BODIES,
    BY_CORRELATION,
    FANOUT,
    HEADS,
    POSITIONS,
    SNAPSHOTS,
    HeadRow,
    last_snapshot_at_or_before,
    read_row,
    write_save,
    write_snapshot_mark,
)
from eventlog.records import (
    NOT_STARTED,
    SAVE_KINDS,
    CheckpointFilter,
    CheckpointRecord,
    FanOutInstanceProgress,
    HistoryEntry,
    NodePosition,
)
from projections.history import RecordDiff, diff_records, frame_diff, instance_counts, update_counts
from projections.records import Head, apply_inplace, snapshot, to_record

if TYPE_CHECKING:
    from eventlog.checkpoints import CheckpointLog

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called every few thousand frames, and once at the end."""

HISTORY_KINDS: Final = (*SAVE_KINDS, "delete")
EXPORT_FORMATS: Final = ("jsonl", "jsonl-frames")
PROGRESS_EVERY_FRAMES: Final = 4096
COMPACT_BATCH_FRAMES: Final = 4096  # frames per write transaction of the compacted log
COMPACT_BATCH_BYTES: Final = 32 << 20
PROBLEMS_PER_STREAM_MAX: Final = 20  # materialized-row problems listed per stream, then a count
DATA_FILE: Final = "data.mdb"
LMDB_MAGIC: Final = 0xBEEFC0DE

_U32: Final = struct.Struct(">I")
_U16: Final = struct.Struct(">H")
_dec_row = msgspec.msgpack.Decoder(HeadRow)
_dec_pos = msgspec.msgpack.Decoder(NodePosition)
_dec_inst = msgspec.msgpack.Decoder(FanOutInstanceProgress)
_decode_any = msgspec.msgpack.Decoder()


class InvalidArgument(CheckpointError, ValueError):
    """A forensic call got an argument it cannot use (unknown kind, seq past the end, ...)."""


class NoSuchInvocation(CheckpointError, KeyError):
    """The log holds no frames for the invocation asked about."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CompactionError(CheckpointError):
    """Compaction refused to start (DEST not empty, bad policy) or found the source damaged."""


class SourceDamaged(CompactionError):
    """Compaction stopped at a damaged frame of the source (it copies only intact logs)."""


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


def _frame_kind(frame: Any) -> str:
    if isinstance(frame, Tombstone):
        return "delete"
    if isinstance(frame, (Save, Snapshot)):
        return str(frame.kind)
    return _other_name(frame)


def _frame_type(frame: Any) -> str:
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
                sid = log._stream_id(txn, stream)
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
        sf = log._stored(stream, gseq, data, (sid, seq))
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
            sid = log._stream_id(txn, stream)
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
                    item.seq, item.global_seq, frame_saved_at(frame), _frame_kind(frame),
                    _frame_type(frame), item.stored_bytes, item.checksum, frame, None,
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
                    stream, lost, f"the fold resumes at the {_frame_type(frame)} at seq {item.seq}"
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
                item.seq, item.global_seq, frame.saved_at, _frame_kind(frame), _frame_type(frame),
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


# -- the Python API: history, points in time, diffs, replay, scan ------------------------------


def check_kinds(kinds: Iterable[str] | None) -> frozenset[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    chosen = frozenset(kinds)
    unknown = sorted(chosen - set(HISTORY_KINDS))
    if unknown:
        raise InvalidArgument(
            f"unknown history kind(s) {unknown}; expected any of {list(HISTORY_KINDS)}"
        )
    return chosen


def in_window(saved_at: float, since: float | None, until: float | None) -> bool:
    """``since <= saved_at < until`` (either bound may be absent)."""
    return (since is None or saved_at >= since) and (until is None or saved_at < until)


def history(
    cl: CheckpointLog,
    invocation_id: str,
    *,
    since: float | None = None,
    until: float | None = None,
    kinds: Iterable[str] | None = None,
) -> Iterator[HistoryEntry]:
    """Saves and deletes of ``invocation_id`` with ``since <= saved_at < until`` and a kind in
    ``kinds`` (save kinds and ``"delete"``), oldest first, as full records."""
    chosen = check_kinds(kinds)
    for step in walk(cl.log, invocation_id):
        assert isinstance(step, Step)  # strict walks raise instead of yielding Unreadable
        if not step.is_record or not in_window(step.saved_at, since, until):
            continue
        if chosen is not None and step.kind not in chosen:
            continue
        yield HistoryEntry(step.seq, step.saved_at, step.kind, step.record())


def last_seq(cl: CheckpointLog, invocation_id: str) -> int:
    """The newest seq of ``invocation_id``; :class:`NoSuchInvocation` when it has none."""
    seq = cl.log.last_seq(invocation_id)
    if seq == 0:
        raise NoSuchInvocation(
            f"no invocation {invocation_id!r} in the log at {cl.log.backend.location!r}; "
            "list the invocations it holds with `ckptlog ls PATH --all`"
        )
    return seq


def seq_as_of(cl: CheckpointLog, invocation_id: str, timestamp: float) -> int:
    """The newest seq (in commit order) whose frame was saved at or before ``timestamp``;
    0 when none was."""
    found = 0
    for sf in cl.log.read_stream(invocation_id):
        if frame_saved_at(sf.frame) <= timestamp:
            found = sf.seq
    return found


def record_as_of(
    cl: CheckpointLog, invocation_id: str, timestamp: float
) -> CheckpointRecord | None:
    """The record as it stood at ``timestamp``: after the newest save (in commit order)
    stamped at or before it; ``None`` when nothing was saved by then or it was deleted."""
    seq = seq_as_of(cl, invocation_id, timestamp)
    return cl.record_at(invocation_id, seq) if seq else None


def check_seq(cl: CheckpointLog, invocation_id: str, seq: int) -> int:
    """``seq`` if it is 0 (before the first save) up to the stream's last seq."""
    last = last_seq(cl, invocation_id)
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
        raise InvalidArgument(
            f"seq {seq!r} is outside {invocation_id!r}, whose seqs run 1..{last} "
            "(0 means before the first save)"
        )
    return seq


def diff(cl: CheckpointLog, invocation_id: str, seq_a: int, seq_b: int) -> RecordDiff:
    """What changed in ``invocation_id`` from stream seq ``seq_a`` to ``seq_b``."""
    check_seq(cl, invocation_id, seq_a)
    check_seq(cl, invocation_id, seq_b)
    a = cl.record_at(invocation_id, seq_a) if seq_a else None
    b = cl.record_at(invocation_id, seq_b) if seq_b else None
    return diff_records(a, b)


class ReplayStep(msgspec.Struct, frozen=True):
    """One save (or delete) in order: the record after it and what it changed."""

    seq: int
    saved_at: float
    kind: str
    record: CheckpointRecord | None
    changes: RecordDiff
    # For a batch (several save_instance calls in one frame): the time of each change in
    # ``changes.instances``, in the same order; empty for any other frame (see ``saved_at``).
    instance_saved_at: tuple[float, ...] = ()


def replay(
    cl: CheckpointLog, invocation_id: str, *, from_seq: int = 1, to_seq: int | None = None
) -> Iterator[ReplayStep]:
    """Every record of ``invocation_id`` in order, each with the diff its save made."""
    for step in walk(cl.log, invocation_id, from_seq=from_seq, to_seq=to_seq, diffs=True):
        assert isinstance(step, Step)
        if step.diff is None:
            continue  # an application event in the stream: not a record
        yield ReplayStep(
            step.seq, step.saved_at, step.kind, step.record(), step.diff, step.instance_saved_at()
        )


class ScanEntry(msgspec.Struct, frozen=True):
    """One frame of the whole log in commit order (no record: that would need every fold)."""

    global_seq: int
    invocation_id: str
    seq: int
    saved_at: float
    kind: str
    frame: str  # delta | snapshot | tombstone | event
    stored_bytes: int
    checksum: str  # hex
    state_changed: bool
    positions_added: int
    instances_changed: int


def scan_entry(sf: StoredFrame[Any]) -> ScanEntry:
    frame = sf.frame
    if isinstance(frame, Save):
        state_changed = (
            frame.state is not None
            or frame.state_splice is not None
            or frame.parent_states is not None
        )
        positions, instances = len(frame.positions), len(frame.instances)
    elif isinstance(frame, Snapshot):
        state_changed, positions, instances = True, len(frame.positions), len(frame.instances)
    else:
        state_changed, positions, instances = False, 0, 0
    return ScanEntry(
        global_seq=sf.global_seq,
        invocation_id=sf.stream,
        seq=sf.seq,
        saved_at=frame_saved_at(frame),
        kind=_frame_kind(frame),
        frame=_frame_type(frame),
        stored_bytes=sf.stored_bytes,
        checksum=sf.checksum.hex(),
        state_changed=state_changed,
        positions_added=positions,
        instances_changed=instances,
    )


def scan(cl: CheckpointLog, since_seq: int | None = None) -> Iterator[ScanEntry]:
    """Every frame of every invocation with global seq > ``since_seq``, in commit order."""
    for sf in cl.log.scan(since_seq or 0):
        yield scan_entry(sf)


# -- export ------------------------------------------------------------------------------------


class BytesSink(Protocol):
    """Where :func:`export` writes (a binary file, ``sys.stdout.buffer``, ``io.BytesIO``)."""

    def write(self, data: bytes, /) -> int: ...


class ExportSummary(msgspec.Struct):
    invocations: int = 0
    lines: int = 0
    bytes: int = 0
    unreadable: list[Unreadable] = msgspec.field(default_factory=list)


def json_safe(value: Any) -> Any:
    """``value`` with every mapping key a string (JSON objects need them)."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, msgspec.Struct):
        return json_safe(msgspec.to_builtins(value))
    return value


class JsonLines:
    """Encodes one JSON object per line; falls back to stringified keys for odd mappings."""

    def __init__(self) -> None:
        self._enc = msgspec.json.Encoder()

    def line(self, obj: Any) -> bytes:
        try:
            return self._enc.encode(obj) + b"\n"
        except (TypeError, ValueError):
            return self._enc.encode(json_safe(obj)) + b"\n"


def plain(value: Any) -> Any:
    """Structs (array-like ones included) as dicts keyed by field name, tuples as lists:
    what a JSON reader expects. Leaves states (already plain data) alone."""
    if isinstance(value, msgspec.Struct):
        return {name: plain(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


class _JPosition(msgspec.Struct):
    """JSON views of the array-like record types: objects keyed by field name."""

    namespace: tuple[str, ...]
    node_name: str
    step: int
    attempt_index: int = 0
    fan_out_index: int | None = None


class _JInstance(msgspec.Struct):
    state: str
    result: Any = None
    result_is_error: bool = False
    completed_inner_positions: tuple[_JPosition, ...] = ()


class _JEnclosing(msgspec.Struct):
    namespace: tuple[str, ...]
    fan_out_node_name: str
    fan_out_index: int


class _JFanOut(msgspec.Struct):
    fan_out_node_name: str
    namespace: tuple[str, ...]
    instance_count: int
    instances: tuple[_JInstance, ...]
    enclosing_fan_out_lineage: tuple[_JEnclosing, ...] = ()


class _JRecord(msgspec.Struct):
    invocation_id: str
    correlation_id: str
    state: Any
    completed_positions: tuple[_JPosition, ...]
    parent_states: tuple[Any, ...]
    last_saved_at: float
    schema_version: str = ""
    fan_out_progress: tuple[_JFanOut, ...] = ()


class _JHeader(msgspec.Struct):
    fid: int
    fan_out_node_name: str
    namespace: tuple[str, ...]
    instance_count: int
    lineage: tuple[_JEnclosing, ...] = ()


class _JChange(msgspec.Struct):
    fid: int
    index: int
    progress: _JInstance


_JSON_FIELDS: Final[dict[str, Any]] = {
    "positions": tuple[_JPosition, ...],
    "layout": tuple[_JHeader, ...],
    "instances": tuple[_JChange, ...],
}


def record_content(record: CheckpointRecord) -> Any:
    """A record as a JSON-ready Struct whose nested records encode as objects (C speed)."""
    return msgspec.convert(record, _JRecord, from_attributes=True)


def frame_content(frame: Any) -> dict[str, Any]:
    """A frame as JSON-ready data, with its msgpack-encoded states decoded."""
    out: dict[str, Any] = {"type": _frame_type(frame)}
    for name in frame.__struct_fields__:
        value = getattr(frame, name)
        if name in ("state", "parent_states") and isinstance(value, bytes):
            out[name] = _decode_any.decode(value)
        elif isinstance(value, bytes):
            out[name] = value.hex()
        elif isinstance(value, Compacted):
            out[name] = {**plain(value), "checksum": value.checksum.hex()}
        elif name in _JSON_FIELDS and value is not None:
            out[name] = msgspec.convert(value, _JSON_FIELDS[name], from_attributes=True)
        else:
            out[name] = plain(value)
    return out


def export(
    cl: CheckpointLog,
    invocation_id: str | None = None,
    fmt: str = "jsonl",
    *,
    out: BytesSink,
    progress: Progress | None = None,
    tolerant: bool = False,
) -> ExportSummary:
    """Write the history of ``invocation_id`` (every invocation when ``None``) as JSON Lines.

    ``fmt="jsonl"``: one line per save with the full record after it. ``fmt="jsonl-frames"``:
    one line per stored frame with what it holds (deltas stay deltas: smaller, lossless).
    Tolerant: unreadable seqs become ``{"unreadable": ...}`` lines and are listed in the
    summary; strict: the first damaged frame raises ``CorruptFrame``.
    """
    if fmt not in EXPORT_FORMATS:
        raise InvalidArgument(f"export format {fmt!r} is unknown; expected one of {EXPORT_FORMATS}")
    streams = [invocation_id] if invocation_id is not None else cl.log.streams()
    if invocation_id is not None:
        last_seq(cl, invocation_id)
    total = sum(cl.log.last_seq(s) for s in streams) if progress is not None else 0
    summary = ExportSummary()
    jl = JsonLines()
    done = 0
    for stream in streams:
        summary.invocations += 1
        for item in walk(cl.log, stream, tolerant=tolerant):
            if isinstance(item, Unreadable):
                summary.unreadable.append(item)
                line = jl.line(
                    {
                        "invocation_id": stream,
                        "seq": item.seq,
                        "last_seq": item.last_seq,
                        "unreadable": item.problem,
                        "detail": item.detail,
                    }
                )
            else:
                done += 1
                line = jl.line(_export_line(item, stream, fmt))
                if progress is not None and done % PROGRESS_EVERY_FRAMES == 0:
                    progress(done, total)
            out.write(line)
            summary.lines += 1
            summary.bytes += len(line)
    if progress is not None:
        progress(done, total)
    return summary


def _export_line(step: Step, stream: str, fmt: str) -> dict[str, Any]:
    line: dict[str, Any] = {
        "invocation_id": stream,
        "seq": step.seq,
        "global_seq": step.global_seq,
        "saved_at": step.saved_at,
        "kind": step.kind,
        "frame": step.frame_type,
        "checksum": step.checksum.hex(),
    }
    if fmt == "jsonl-frames" or not step.is_record:
        line["content"] = frame_content(step.frame)
    else:
        record = step.record()
        line["record"] = record_content(record) if record is not None else None
    return line


# -- verify: the core checks plus every materialized row against the fold ---------------------


def verify(
    cl: CheckpointLog,
    progress: Progress | None = None,
    rows_progress: Progress | None = None,
) -> VerifyReport:
    """The core checks (checksums, chains, seqs, index; ``progress``) plus every materialized
    row against the fold of its stream (``rows_progress``)."""
    try:
        report = cl.log.verify(progress)
    except Exception as e:  # noqa: BLE001 - a damaged B-tree raises the backend's own errors
        report = VerifyReport()
        report.problems.append(
            Problem("storage", f"the log's pages cannot be walked ({type(e).__name__}: {e})")
        )
    try:
        report.problems.extend(verify_materialized(cl, rows_progress))
    except Exception as e:  # noqa: BLE001 - same: report, never crash the verifier
        report.problems.append(
            Problem(
                "storage",
                f"the materialized tables cannot be walked ({type(e).__name__}: {e})",
            )
        )
    return report


class _RowCheck:
    """Compare one stream's materialized rows with the fold of its frames (one read txn)."""

    def __init__(self, txn: ReadTxn, stream: str, sid: int) -> None:
        self.txn = txn
        self.stream = stream
        self.sid = sid
        self.key = U64.pack(sid)
        self.problems: list[Problem] = []
        self.extra = 0

    def add(self, detail: str, seq: int | None = None) -> None:
        if len(self.problems) < PROBLEMS_PER_STREAM_MAX:
            self.problems.append(Problem("projection", detail, self.stream, seq))
        else:
            self.extra += 1

    def finish(self) -> list[Problem]:
        if self.extra:
            self.problems.append(
                Problem("projection", f"... and {self.extra} more row problem(s)", self.stream)
            )
        return self.problems

    def compare(self, head: Head | None, row: HeadRow | None, corr: set[str]) -> None:
        if head is None:
            if row is not None:
                self.add("a head row exists, but the fold says deleted or never saved", row.seq)
            self.leftovers()
            if corr:
                self.add(f"correlation index lists it under {sorted(corr)}, but it has no head")
            return
        if row is None:
            self.add(f"head row missing: the fold has a record at seq {head.seq}", head.seq)
            return
        self.fields(head, row)
        self.bodies(head)
        self.positions(head)
        self.fan_out_rows(head)
        if corr != {head.correlation_id}:
            self.add(
                f"correlation index lists it under {sorted(corr)}, expected "
                f"[{head.correlation_id!r}]"
            )

    def fields(self, head: Head, row: HeadRow) -> None:
        expected = {
            "invocation_id": head.invocation_id,
            "correlation_id": head.correlation_id,
            "schema_version": head.schema_version,
            "kind": head.kind,
            "seq": head.seq,
            "positions_count": len(head.positions),
            "layout": tuple(s.header for s in head.slots),
            "next_fid": head.next_fid,
        }
        for name, want in expected.items():
            got = getattr(row, name)
            if got != want:
                self.add(f"head row {name} is {got!r}, the fold says {want!r}", head.seq)
        if not _same_float(row.last_saved_at, head.last_saved_at):
            self.add(
                f"head row last_saved_at is {row.last_saved_at!r}, the fold says "
                f"{head.last_saved_at!r}",
                head.seq,
            )

    def bodies(self, head: Head) -> None:
        for suffix, name, want in (
            (b"s", "state", head.state),
            (b"p", "parent states", head.parent_states),
        ):
            got = self.txn.get(BODIES, self.key + suffix) or (
                b"\xc0" if suffix == b"s" else b"\x90"
            )
            if got != want:
                self.add(f"materialized {name} differ from the fold's", head.seq)

    def positions(self, head: Head) -> None:
        rows = list(self.txn.scan_prefix(POSITIONS, self.key))
        if len(rows) != len(head.positions):
            self.add(f"{len(rows)} position rows, the fold has {len(head.positions)}", head.seq)
        for (k, v), want in zip(rows, head.positions, strict=False):
            index = _U32.unpack_from(k, 8)[0]
            got = _dec_pos.decode(v)
            if got != want:
                self.add(f"position row {index} is {got!r}, the fold says {want!r}", head.seq)

    def fan_out_rows(self, head: Head) -> None:
        slots = {s.header.fid: s for s in head.slots}
        seen: set[tuple[int, int]] = set()
        for k, v in self.txn.scan_prefix(FANOUT, self.key):
            fid, index = _U32.unpack_from(k, 8)[0], _U32.unpack_from(k, 12)[0]
            slot = slots.get(fid)
            if slot is None or index >= slot.header.instance_count:
                self.add(f"fan-out row (fan-out id {fid}, index {index}) belongs to no fan-out")
                continue
            seen.add((fid, index))
            got = _dec_inst.decode(v)
            want = slot.instances[index]
            if got != want:
                name = slot.header.fan_out_node_name
                self.add(
                    f"fan-out row {name!r}[{index}] is {got.state} "
                    f"{_brief(got.result)}, the fold says {want.state} {_brief(want.result)}",
                    head.seq,
                )
        for fid, slot in slots.items():
            for index, inst in enumerate(slot.instances):
                if inst is not NOT_STARTED and inst != NOT_STARTED and (fid, index) not in seen:
                    name = slot.header.fan_out_node_name
                    self.add(f"fan-out row {name!r}[{index}] missing: the fold says {inst.state}")

    def leftovers(self) -> None:
        for table in (POSITIONS, FANOUT, BODIES):
            for _ in self.txn.scan_prefix(table, self.key, limit=1):
                self.add(f"rows left in {table!r} for a stream with no head")


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _same_float(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))  # an unchanged NaN is no problem


def verify_materialized(cl: CheckpointLog, progress: Progress | None = None) -> list[Problem]:
    """Every materialized row against the fold of its stream's frames, in one read txn."""
    log = cl.log
    problems: list[Problem] = []
    with log.backend.read() as txn:
        total = txn.count(LOG)
        names = {
            U64.unpack(k)[0]: v.decode("utf-8", "surrogatepass") for k, v in txn.scan(STREAM_NAMES)
        }
        heads: dict[int, HeadRow | None] = {}
        for k, v in txn.scan(HEADS):
            sid = U64.unpack(k)[0]
            try:
                heads[sid] = _dec_row.decode(v)
            except msgspec.DecodeError as e:
                heads[sid] = None
                problems.append(
                    Problem("projection", f"head row does not decode: {e}", names.get(sid))
                )
        marks: dict[int, set[int]] = {}
        for k, _ in txn.scan(SNAPSHOTS):
            marks.setdefault(U64.unpack_from(k)[0], set()).add(U64.unpack_from(k, 8)[0])
        corr: dict[int, set[str]] = {}
        for k, _ in txn.scan(BY_CORRELATION):
            n = _U16.unpack_from(k)[0]
            corr.setdefault(U64.unpack_from(k, 2 + n)[0], set()).add(
                k[2 : 2 + n].decode("utf-8", "surrogatepass")
            )
        done = 0
        for sid, stream in names.items():
            head, snapshots, failure, frames = _fold_in_txn(log, txn, sid, stream)
            done += frames
            if progress is not None:
                progress(done, total)
            row = heads.pop(sid, None)
            marked = marks.pop(sid, set())
            indexed = corr.pop(sid, set())
            if failure is not None:
                problems.append(failure)
                continue
            check = _RowCheck(txn, stream, sid)
            if head is not None or row is not None or snapshots or marked or indexed:
                check.compare(head, row, indexed)
            for seq in sorted(marked - snapshots):
                check.add(f"snapshot mark at seq {seq}, but that frame is not a snapshot", seq)
            for seq in sorted(snapshots - marked):
                check.add(f"snapshot frame at seq {seq} has no snapshot mark", seq)
            problems.extend(check.finish())
        orphans = [f"a head row for stream id {sid}" for sid in heads]
        orphans += [f"snapshot marks for stream id {sid}" for sid in marks]
        orphans += [
            f"correlation index entries {sorted(c)} for stream id {sid}" for sid, c in corr.items()
        ]
        problems.extend(Problem("projection", f"{o}, which has no frames") for o in orphans)
    return problems


def _fold_in_txn(
    log: EventLog, txn: ReadTxn, sid: int, stream: str
) -> tuple[Head | None, set[int], Problem | None, int]:
    """``(head, snapshot seqs, problem, frames)``: the fold of one stream inside ``txn``."""
    head: Head | None = None
    snapshots: set[int] = set()
    frames = 0
    for key, gkey in txn.scan_prefix(STREAMS, U64.pack(sid)):
        frames += 1
        seq = U64X2.unpack(key)[1]
        data = txn.get(LOG, gkey)
        try:
            if data is None:
                raise CorruptFrame("the frame is missing from the log")
            _, frame = log.decode_envelope(data)
            if not isinstance(frame, RECORD_FRAMES):
                continue
            if isinstance(frame, Snapshot):
                snapshots.add(seq)
            head = apply_inplace(head, frame, seq, stream)
        except (CheckpointError, KeyError, IndexError, TypeError) as e:
            detail = (
                f"the head cannot be rebuilt from the frames: seq {seq} is unreadable or does "
                f"not apply ({e}); the problems above locate the damage"
            )
            return None, snapshots, Problem("projection", detail, stream, seq), frames
    return head, snapshots, None, frames


# -- stats -------------------------------------------------------------------------------------


class StreamSize(msgspec.Struct, frozen=True):
    invocation_id: str
    frames: int


class LogStats(msgspec.Struct):
    path: str
    frames: int
    streams: int
    invocations: int  # streams with a live head
    streams_without_head: int  # deleted invocations (and application event streams)
    snapshots: int
    data_file_bytes: int
    bytes_per_frame: float
    oldest_saved_at: float | None
    newest_saved_at: float | None
    format: dict[str, Any]
    largest: list[StreamSize]


def stats(cl: CheckpointLog, top: int = 5) -> LogStats:
    """Counts and sizes from the tables (no frame is decoded, so it is fast on any log)."""
    log = cl.log
    with log.backend.read() as txn:
        frames = txn.count(LOG)
        names = [(U64.unpack(k)[0], v) for k, v in txn.scan(STREAM_NAMES)]
        saved = [_dec_row.decode(v).last_saved_at for _, v in txn.scan(HEADS)]
        snapshots = txn.count(SNAPSHOTS)
        sizes = []
        for sid, name in names:
            for key, _ in txn.scan_prefix(STREAMS, U64.pack(sid), reverse=True, limit=1):
                sizes.append(
                    StreamSize(name.decode("utf-8", "surrogatepass"), U64X2.unpack(key)[1])
                )
        raw_meta = txn.get(META, b"format")
    size = log.backend.size_bytes()
    sizes.sort(key=lambda s: (-s.frames, s.invocation_id))
    finite = [t for t in saved if not math.isnan(t)]
    return LogStats(
        path=log.backend.location,
        frames=frames,
        streams=len(names),
        invocations=len(saved),
        streams_without_head=len(names) - len(saved),
        snapshots=snapshots,
        data_file_bytes=size,
        bytes_per_frame=size / frames if frames else 0.0,
        oldest_saved_at=min(finite) if finite else None,
        newest_saved_at=max(finite) if finite else None,
        format=json.loads(raw_meta) if raw_meta else {},
        largest=sizes[:top],
    )


class Invocation(msgspec.Struct, frozen=True):
    """One line of ``ckptlog ls``: a head row (or a stream without one: deleted)."""

    invocation_id: str
    correlation_id: str | None
    frames: int
    last_saved_at: float | None
    kind: str | None
    completed_nodes: int
    fan_out_instances: int
    completed_instances: int
    error_instances: int
    deleted: bool


def invocations(
    cl: CheckpointLog, correlation_id: str | None = None, *, all_streams: bool = False
) -> list[Invocation]:
    """Saved invocations, oldest last save first, with fan-out progress from their rows;
    ``all_streams`` adds the streams without a head (deleted invocations, event streams and
    other integrations' streams), described by their last frame."""
    out: list[Invocation] = []
    flt = CheckpointFilter(correlation_id=correlation_id) if correlation_id is not None else None
    wanted = {s.invocation_id for s in cl.list(flt)}
    with cl.log.backend.read() as txn:
        for k, v in txn.scan(STREAM_NAMES):
            sid = U64.unpack(k)[0]
            name = v.decode("utf-8", "surrogatepass")
            row = _row(txn, sid)
            frames = 0
            for key, _ in txn.scan_prefix(STREAMS, k, reverse=True, limit=1):
                frames = U64X2.unpack(key)[1]
            if row is None:
                if all_streams and correlation_id is None:
                    kind, at = _last_frame(cl.log, txn, sid, frames)
                    deleted = kind == "delete"
                    out.append(Invocation(name, None, frames, at, kind, 0, 0, 0, 0, deleted))
                continue
            if name not in wanted:
                continue
            done = errors = 0
            for _, raw in txn.scan_prefix(FANOUT, k):
                inst = _dec_inst.decode(raw)
                if inst.state == "completed":
                    done += 1
                    errors += inst.result_is_error
            out.append(
                Invocation(
                    name, row.correlation_id, frames, row.last_saved_at, row.kind,
                    row.positions_count, sum(h.instance_count for h in row.layout), done, errors,
                    False,
                )
            )  # fmt: skip
    out.sort(key=lambda i: (i.deleted, _sort_time(i.last_saved_at), i.invocation_id))
    return out


def _last_frame(log: EventLog, txn: ReadTxn, sid: int, seq: int) -> tuple[str, float | None]:
    """``(kind, saved_at)`` of a stream's frame ``seq`` (``unreadable`` when damaged)."""
    gkey = txn.get(STREAMS, U64X2.pack(sid, seq))
    data = txn.get(LOG, gkey) if gkey is not None else None
    try:
        if data is None:
            raise CorruptFrame("missing")
        _, frame = log.decode_envelope(data)
    except CheckpointError:
        return "unreadable", None
    return _frame_kind(frame), frame_saved_at(frame)


def _sort_time(t: float | None) -> float:
    return t if t is not None and not math.isnan(t) else float("-inf")


def _row(txn: ReadTxn, sid: int) -> HeadRow | None:
    raw = txn.get(HEADS, U64.pack(sid))
    return None if raw is None else _dec_row.decode(raw)


# -- compaction --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """What :func:`compact` keeps of each checkpoint stream (heads are always kept)."""

    mode: str  # all | heads | last_n | since
    last_n: int = 0
    since: float = 0.0

    def __str__(self) -> str:
        if self.mode == "last_n":
            return f"last_n={self.last_n}"
        if self.mode == "since":
            return f"since={self.since!r}"
        return self.mode


def policy(
    keep: str | None = None, last_n: int | None = None, since: float | None = None
) -> Policy:
    """Validate ``compact``'s keyword choice: exactly one of keep, last_n, since (or none)."""
    given = [
        name for name, v in (("keep", keep), ("last_n", last_n), ("since", since)) if v is not None
    ]
    if len(given) > 1:
        raise CompactionError(f"pass one of keep=, last_n= or since=, not {' and '.join(given)}")
    if last_n is not None:
        if isinstance(last_n, bool) or not isinstance(last_n, int) or last_n < 1:
            raise CompactionError(
                f"last_n must be an int >= 1 (saves kept per invocation), got {last_n!r}"
            )
        return Policy("last_n", last_n=last_n)
    if since is not None:
        if isinstance(since, bool) or not isinstance(since, (int, float)) or math.isnan(since):
            raise CompactionError(
                f"since must be a timestamp (seconds since the epoch), got {since!r}"
            )
        return Policy("since", since=float(since))
    if keep is None or keep == "all":
        return Policy("all")
    if keep == "heads":
        return Policy("heads")
    raise CompactionError(
        f'keep must be "all" or "heads" (or pass last_n=N or since=TIMESTAMP), got {keep!r}'
    )


class CompactReport(msgspec.Struct):
    source: str
    dest: str
    policy: str
    streams_in: int = 0
    streams_out: int = 0
    frames_in: int = 0
    frames_out: int = 0
    source_bytes: int = 0
    dest_bytes: int = 0
    seconds: float = 0.0


@dataclass
class _Src:
    """Compaction state of one source stream."""

    name: str
    last: int  # the stream's last seq in the source
    record_last: int = 0  # the seq of its head row (its last save): events may follow it
    start: int = 0  # the first seq kept (0: not decided yet)
    events: bool = False  # an application-event stream: copied whole
    dropped: bool = False
    tail: tuple[int, bytes] = (0, ZERO_CHECKSUM)  # the source chain so far
    last_snapshot: int = 1  # newest source snapshot seq seen: where folds start
    dest_sid: int = 0
    dest_seq: int = 0
    dest_prev: bytes = ZERO_CHECKSUM
    snapshot_seq: int = 0  # newest dest snapshot seq
    snapshot_bytes: int = 0
    chain_bytes: int = 0


@dataclass
class _Out:
    """A frame for the compacted log, sealed before its write transaction runs."""

    src: _Src
    envelope: bytes
    seq: int
    new_stream: bool
    snapshot: bool
    head: Head | None = None  # set on a stream's last frame: its materialized rows


class _Compactor:
    def __init__(self, source: CheckpointLog, dest: CheckpointLog, pol: Policy) -> None:
        self.src = source.log
        self.dest = dest.log
        self.policy = pol
        self.chain_key = self.src._chain_key
        self.serializer: Serializer[Any] = Serializer(Frame)
        self.compressor = Compressor(
            threshold_bytes=int(self.dest._settings["compress_threshold_bytes"])
        )
        self.streams: dict[int, _Src] = {}
        self.next_sid = 1
        self.next_gseq = 1
        self.batch: list[_Out] = []
        self.batch_bytes = 0
        self.now = time.time()
        self.report_frames = 0

    def plan(self) -> int:
        """Each stream's length, and the global seq the copy stops at, in one snapshot."""
        with self.src.backend.read() as txn:
            last = txn.last_key(LOG)
            for k, v in txn.scan(STREAM_NAMES):
                sid = U64.unpack(k)[0]
                n = 0
                for key, _ in txn.scan_prefix(STREAMS, k, reverse=True, limit=1):
                    n = U64X2.unpack(key)[1]
                row = read_row(txn, sid)
                self.streams[sid] = _Src(
                    v.decode("utf-8", "surrogatepass"), n, n if row is None else row.seq
                )
        return U64.unpack(last)[0] if last is not None else 0

    def run(self, progress: Progress | None) -> int:
        end = self.plan()
        after = 0
        while after < end:
            with self.src.backend.read() as txn:
                chunk = list(
                    txn.scan(LOG, U64.pack(after + 1), U64.pack(end + 1), limit=READ_CHUNK_FRAMES)
                )
            if not chunk:
                break
            for gkey, data in chunk:
                self.frame(U64.unpack(gkey)[0], data)
            after = U64.unpack(chunk[-1][0])[0]
            if progress is not None:
                progress(after, end)
        self.flush()
        return end

    def frame(self, gseq: int, data: bytes) -> None:
        try:
            env, frame = self.src.decode_envelope(data)
        except CheckpointError as e:
            raise SourceDamaged(
                f"the source log is damaged at log #{gseq} ({e}); compaction copies only an "
                "intact log: run `ckptlog verify` on it"
            ) from e
        s = self.streams.get(env.stream_id)
        if s is None or env.seq != s.tail[0] + 1 or env.prev != s.tail[1]:
            where = f"stream {s.name!r}" if s is not None else f"stream id {env.stream_id}"
            raise SourceDamaged(
                f"the source log is damaged at log #{gseq}: {where} seq {env.seq} does not "
                "follow the frame before it; run `ckptlog verify` on it"
            )
        s.tail = (env.seq, env.checksum)
        seq = env.seq
        if seq == 1:
            if not isinstance(frame, (*RECORD_FRAMES, Event)):
                raise CompactionError(
                    f"stream {s.name!r} holds {_frame_kind(frame)} frames, written by another "
                    "integration that keeps its own materialized tables, which compaction here "
                    "would not rebuild; use that integration's own retention for this log"
                )
            s.events = isinstance(frame, Event)
        if isinstance(frame, Snapshot):
            s.last_snapshot = seq
        if s.dropped or seq > s.last:
            return
        if s.events:
            self.copy(s, env.payload, env.flags, env.dict_id, snapshot=False)
            return
        if s.start <= 0:
            if not self.starts_here(s, seq, frame):
                return
            if not isinstance(frame, (Save, Snapshot)):
                if seq == s.record_last:
                    s.dropped = True  # nothing left but a delete: the invocation is gone
                else:
                    s.start = -1  # keep from the next frame
                return
            s.start = seq
            head = self.fold(s, seq)
            if head is None:
                raise SourceDamaged(f"stream {s.name!r} has no record at seq {seq} to keep")
            marked = msgspec.structs.replace(
                snapshot(head),
                compacted=Compacted(seq, env.checksum, env.stream_id, self.now),
            )
            raw = self.serializer.encode(marked)
            payload, flags = self.compressor.compress(raw)
            self.copy(
                s, payload, flags, 0, snapshot=True, head=head if seq == s.record_last else None
            )
            return
        last = self.fold(s, seq) if seq == s.record_last else None
        self.copy(
            s, env.payload, env.flags, env.dict_id, snapshot=isinstance(frame, Snapshot), head=last
        )

    def starts_here(self, s: _Src, seq: int, frame: Any) -> bool:
        if s.start == -1 or seq == s.record_last:
            return True
        mode = self.policy.mode
        if mode == "all":
            return True
        if mode == "heads":
            return False
        if mode == "last_n":
            return seq >= s.record_last - self.policy.last_n + 1
        return frame_saved_at(frame) >= self.policy.since

    def fold(self, s: _Src, seq: int) -> Head | None:
        """The source record at ``seq`` (``None``: deleted), folded from the newest snapshot
        at or before it."""
        head: Head | None = None
        for sf in self.src.read_stream(s.name, s.last_snapshot, seq):
            if isinstance(sf.frame, CHECKPOINT_FRAMES):  # events beside the saves: skipped
                head = apply_inplace(head, sf.frame, sf.seq, s.name)
        return head

    def copy(
        self,
        s: _Src,
        payload: bytes,
        flags: int,
        dict_id: int,
        *,
        snapshot: bool,
        head: Head | None = None,
    ) -> None:
        new_stream = s.dest_sid == 0
        if new_stream:
            s.dest_sid = self.next_sid
            self.next_sid += 1
        s.dest_seq += 1
        envelope, checksum = seal(
            s.dest_sid, s.dest_seq, s.dest_prev, payload, flags=flags, dict_id=dict_id,
            chain_key=self.chain_key,
        )  # fmt: skip
        if len(envelope) > self.dest.frame_bytes_max:
            raise CompactionError(
                f"stream {s.name!r}: the compacted frame is {len(envelope)} bytes, above "
                f"frame_bytes_max={self.dest.frame_bytes_max}"
            )
        s.dest_prev = checksum
        if snapshot:
            s.snapshot_seq, s.snapshot_bytes, s.chain_bytes = s.dest_seq, len(envelope), 0
        else:
            s.chain_bytes += len(envelope)
        if head is not None:
            head.seq = s.dest_seq
        self.batch.append(_Out(s, envelope, s.dest_seq, new_stream, snapshot, head))
        self.batch_bytes += len(envelope)
        if len(self.batch) >= COMPACT_BATCH_FRAMES or self.batch_bytes >= COMPACT_BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        batch, first = self.batch, self.next_gseq
        rows = [
            (o.src.dest_sid, o.head, o.src.snapshot_seq, o.src.chain_bytes, o.src.snapshot_bytes)
            for o in batch
            if o.head is not None
        ]

        def write(txn: WriteTxn) -> None:
            for gseq, o in enumerate(batch, first):
                sid = U64.pack(o.src.dest_sid)
                if o.new_stream:
                    key = o.src.name.encode("utf-8", "surrogatepass")
                    txn.put(STREAM_IDS, key, sid)
                    txn.put(STREAM_NAMES, sid, key)
                txn.append(LOG, U64.pack(gseq), o.envelope)
                txn.put(STREAMS, U64X2.pack(o.src.dest_sid, o.seq), U64.pack(gseq))
                if o.snapshot and not o.src.events:
                    write_snapshot_mark(txn, o.src.dest_sid, o.seq)
            for dest_sid, head, snap_seq, chain, snap_bytes in rows:
                assert head is not None
                write_save(
                    txn, dest_sid, None, _full_save(head), head,
                    snapshot_seq=snap_seq, chain_bytes=chain, snapshot_bytes=snap_bytes,
                )  # fmt: skip

        self.dest.backend.run_write(write)
        self.next_gseq += len(batch)
        self.report_frames += len(batch)
        self.batch, self.batch_bytes = [], 0


def _full_save(head: Head) -> Save:
    """A delta from nothing to ``head``: every row of it gets written."""
    return Save(
        kind=head.kind,
        saved_at=head.last_saved_at,
        correlation_id=head.correlation_id,
        schema_version=head.schema_version,
        state=head.state,
        parent_states=head.parent_states,
        positions_from=0,
        positions=tuple(head.positions),
        instances=tuple(
            InstanceChange(s.header.fid, i, p)
            for s in head.slots
            for i, p in enumerate(s.instances)
            if p != NOT_STARTED
        ),
    )


def check_dest(dest: str | os.PathLike[str], source_location: str) -> Path:
    path = Path(dest)
    if os.path.realpath(path) == os.path.realpath(source_location):
        raise CompactionError("DEST is the source log; compact writes a new log elsewhere")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise CompactionError(
            f"DEST {str(path)!r} exists and is not empty; compact writes a new log: pass a "
            "path that does not exist yet (or an empty directory)"
        )
    return path


def compact(
    cl: CheckpointLog,
    dest: str | os.PathLike[str],
    *,
    keep: str | None = None,
    last_n: int | None = None,
    since: float | None = None,
    progress: Progress | None = None,
) -> CompactReport:
    """Copy the log into a new log at ``dest``, keeping of each invocation's history:

    - ``keep="all"`` (the default): everything;
    - ``keep="heads"``: only the current record;
    - ``last_n=N``: the last N saves (a delete counts as one);
    - ``since=T``: the saves stamped at or after T, and at least the current record.

    Deleted invocations with nothing kept are dropped; application-event streams are copied
    whole. Each kept invocation starts with a snapshot of its first kept save that names the
    original seq and checksum it stands for; the saves after it keep their stored bytes.
    Heads are re-materialized, so ``load``/``list``/``verify`` work on the new log at once.
    The source is only read; DEST appears whole (built under a hidden name, then renamed).
    """
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415 - checkpoints imports us

    pol = policy(keep, last_n, since)
    path = check_dest(dest, cl.log.backend.location)
    # Built under a hidden sibling name and renamed into place whole, so a compaction that
    # is killed leaves DEST as it was (absent or empty) and running it again just works.
    building = path.parent / f".{path.name}.compacting-{os.getpid()}-{time.monotonic_ns()}"
    started = time.perf_counter()
    report = CompactReport(cl.log.backend.location, str(path), str(pol))
    try:
        out = CheckpointLog.open(
            building,
            durability="process",
            chain_key=cl.log._chain_key,
            compress_threshold_bytes=int(cl.log._settings["compress_threshold_bytes"]),
            frame_bytes_max=cl.log.frame_bytes_max,
        )
        try:
            work = _Compactor(cl, out, pol)
            report.frames_in = work.run(progress)
            out.log.backend.sync()
            report.streams_in = len(work.streams)
            report.streams_out = work.next_sid - 1
            report.frames_out = work.report_frames
            report.dest_bytes = out.log.backend.size_bytes()
        finally:
            out.close()
        check_dest(dest, cl.log.backend.location)  # still absent or empty
        os.replace(building, path)  # (an empty directory is replaced)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    report.source_bytes = cl.log.backend.size_bytes()
    report.seconds = time.perf_counter() - started
    return report


class Provenance(msgspec.Struct, frozen=True):
    """A frame of a compacted stream and the original frame it stands for."""

    seq: int
    original_seq: int
    original_checksum: bytes


def provenance(cl: CheckpointLog, invocation_id: str) -> list[Provenance]:
    """For a compacted stream, the original seq and checksum of each frame, recomputed from
    the stored payloads and the first snapshot's :class:`Compacted`; ``[]`` for a stream
    that was not compacted. Compare them with the original log (or a checksum published
    from it) to prove the kept history is the original's, byte for byte."""
    out: list[Provenance] = []
    origin: Compacted | None = None
    prev = b""
    with cl.log.backend.read() as txn:
        sid = cl.log._stream_id(txn, invocation_id)
        if sid is None:
            return out
        for key, gkey in txn.scan_prefix(STREAMS, U64.pack(sid)):
            seq = U64X2.unpack(key)[1]
            data = txn.get(LOG, gkey)
            if data is None:
                raise CorruptFrame(f"stream {invocation_id!r} seq {seq} is missing; run verify")
            env, frame = cl.log.decode_envelope(data)
            if seq == 1:
                origin = frame.compacted if isinstance(frame, Snapshot) else None
                if origin is None:
                    return out
                prev = origin.checksum
                out.append(Provenance(1, origin.seq, origin.checksum))
                continue
            assert origin is not None
            original_seq = origin.seq + seq - 1
            _, prev = seal(
                origin.stream_id, original_seq, prev, env.payload, flags=env.flags,
                dict_id=env.dict_id, chain_key=cl.log._chain_key,
            )  # fmt: skip
            out.append(Provenance(seq, original_seq, prev))
    return out


# -- opening a log for reading, safely ---------------------------------------------------------


class DataFileCheck(msgspec.Struct, frozen=True):
    """What the newest LMDB meta page of ``data.mdb`` says, against the file's real size."""

    path: str
    file_bytes: int
    used_bytes: int  # (last page + 1) x page size: the file must be at least this long
    page_bytes: int
    txn_id: int

    @property
    def short(self) -> bool:
        return self.file_bytes < self.used_bytes


def data_file_check(path: str | os.PathLike[str]) -> DataFileCheck | None:
    """Read the LMDB meta pages of ``path/data.mdb`` (no LMDB call: plain file reads).

    ``None`` when there is no such file or it does not start with LMDB meta pages (opening
    it then fails with LMDB's own message). Layout (LMDB 0.9, 64-bit, native byte order):
    each meta page is a 16-byte page header followed by ``MDB_meta``; the page size is the
    free-list database's ``md_pad`` (offset 40), ``mm_last_pg`` is at 136, ``mm_txnid`` at 144.
    """
    file = Path(path) / DATA_FILE
    try:
        with open(file, "rb") as f:
            first = f.read(160)
            size = os.fstat(f.fileno()).st_size
            if len(first) < 160:
                return None
            order = _byte_order(first)
            if order is None:
                return None
            page = struct.unpack_from(order + "I", first, 40)[0]
            if page < 512 or page & (page - 1):
                return None
            f.seek(page)
            second = f.read(160)
    except OSError:
        return None
    metas = [first] + ([second] if len(second) == 160 and _byte_order(second) == order else [])
    best = max(
        (struct.unpack_from(order + "QQ", m, 136) for m in metas), key=lambda lt: lt[1]
    )  # (last page, txn id) of the newest meta
    return DataFileCheck(str(file), size, (best[0] + 1) * page, page, best[1])


def _byte_order(meta_page: bytes) -> str | None:
    for order in ("<", ">"):
        magic, version = struct.unpack_from(order + "II", meta_page, 16)
        if magic == LMDB_MAGIC and version == 1:
            return order
    return None


class Opened:
    """A checkpoint log opened read-only for forensics, with storage-level problems found
    on the way (a truncated ``data.mdb`` is read from a zero-filled private copy)."""

    def __init__(self, log: CheckpointLog, problems: list[Problem], copy_dir: str | None) -> None:
        self.log = log
        self.problems = problems
        self._copy_dir = copy_dir

    def close(self) -> None:
        try:
            self.log.close()
        finally:
            if self._copy_dir is not None:
                shutil.rmtree(self._copy_dir, ignore_errors=True)

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_readonly(path: str | os.PathLike[str], *, probe: bool = True, **options: Any) -> Opened:
    """Open the log at ``path`` read-only, never crashing on a truncated ``data.mdb``.

    When the file is shorter than its newest LMDB transaction says (which the library
    refuses with :class:`~eventlog.errors.DamagedLog` rather than map it), the log is read
    from a private copy whose missing tail is zero-filled, so every reader sees damaged pages
    as errors (reported) rather than dying of SIGBUS. ``probe`` is accepted and ignored.
    """
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415

    location = os.fspath(path)
    if not Path(location).is_dir():
        raise NotALog(
            f"no ckptlog log at {location!r}: expected a directory holding {DATA_FILE}; "
            "check the path"
        )
    check = data_file_check(location)
    problems: list[Problem] = []
    copy_dir: str | None = None
    state = lmdb_meta.read_state(os.path.join(location, DATA_FILE), lock=False)
    if check is not None and state is not None and state.truncated() is not None:
        # A used page lies past the end: the library refuses to map it (DamagedLog).
        missing = check.used_bytes - check.file_bytes
        problems.append(
            Problem(
                "truncated",
                f"{check.path} is {check.file_bytes:,} bytes, but its last transaction "
                f"(txn {check.txn_id}) uses {check.used_bytes:,}: the last "
                f"{missing:,} bytes ({-(-missing // check.page_bytes)} pages) are missing; "
                "read from a copy with them zero-filled: what they held is reported "
                "unreadable. Restore the file from a backup",
            )
        )
        copy_dir = _zero_filled_copy(check)
    try:
        log = CheckpointLog.open(copy_dir or location, readonly=True, **options)
    except BaseException:
        if copy_dir is not None:
            shutil.rmtree(copy_dir, ignore_errors=True)
        raise
    return Opened(log, problems, copy_dir)


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


SALVAGE_PARENT: str | None = None
"""Where zero-filled copies go (default: the system temp dir). The CLI points it at a
directory its parent process removes, since a reader that dies of a damaged page cannot."""


def _zero_filled_copy(check: DataFileCheck) -> str:
    directory = tempfile.mkdtemp(prefix="ckptlog-salvage-", dir=SALVAGE_PARENT)
    target = os.path.join(directory, DATA_FILE)
    shutil.copyfile(check.path, target)
    os.truncate(target, check.used_bytes)  # the missing tail reads as zeros (sparse)
    return directory


# -- progress ----------------------------------------------------------------------------------


class ProgressBar:
    """A one-line bar redrawn in place on a terminal (``stream``, stderr by default);
    silent when the stream is not a TTY, so pipes and logs get no control characters."""

    def __init__(
        self,
        label: str,
        *,
        unit: str = "frames",
        stream: IO[str] | None = None,
        interval: float = 0.1,
    ) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = isatty(self.stream)
        self.interval = interval
        self._last = 0.0
        self._drawn = False
        self._started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.interval:
            return
        self._last = now
        width = 30
        filled = width * done // total if total else width
        rate = done / (now - self._started) if now > self._started else 0.0
        pct = 100 * done // total if total else 100
        self.stream.write(
            f"\r{self.label:<8} [{'#' * filled}{'.' * (width - filled)}] "
            f"{done:,}/{total:,} {self.unit} {pct:3d}%  {rate:,.0f}/s"
        )
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
