"""The Python API over a checkpoint log: history filters, points in time, diffs, replay, scan."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from eventlog import arguments as args
from eventlog.errors import (
    InvalidArgument,
    NoSuchInvocation,
)
from eventlog.forensics.common import (
    Records,
)
from eventlog.frames import (
    Save,
    Snapshot,
)
from eventlog.log import StoredFrame
from eventlog.records import (
    CheckpointRecord,
    HistoryEntry,
)
from eventlog.walker import (
    Step,
    frame_kind,
    frame_saved_at,
    frame_type,
    walk,
)
from projections.history import RecordDiff, diff_records

# -- the Python API: history, points in time, diffs, replay, scan ------------------------------


check_kinds = args.history_kinds  # (CheckpointLog.history checks its kinds the same way)


def in_window(saved_at: float, since: float | None, until: float | None) -> bool:
    """``since <= saved_at < until`` (either bound may be absent)."""
    return (since is None or saved_at >= since) and (until is None or saved_at < until)


def history(
    cl: Records,
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


def last_seq(cl: Records, invocation_id: str) -> int:
    """The newest seq of ``invocation_id``; :class:`NoSuchInvocation` when it has none."""
    seq = cl.log.last_seq(invocation_id)
    if seq == 0:
        raise NoSuchInvocation(
            f"no invocation {invocation_id!r} in the log at {cl.log.backend.location!r}; "
            "list the invocations it holds with `ckptlog ls PATH --all`"
        )
    return seq


def seq_as_of(cl: Records, invocation_id: str, timestamp: float) -> int:
    """The newest seq (in commit order) whose frame was saved at or before ``timestamp``;
    0 when none was."""
    found = 0
    for sf in cl.log.read_stream(invocation_id):
        if frame_saved_at(sf.frame) <= timestamp:
            found = sf.seq
    return found


def record_as_of(cl: Records, invocation_id: str, timestamp: float) -> CheckpointRecord | None:
    """The record as it stood at ``timestamp``: after the newest save (in commit order)
    stamped at or before it; ``None`` when nothing was saved by then or it was deleted."""
    args.stream_id("invocation_id", invocation_id)
    args.timestamp("timestamp", timestamp)
    seq = seq_as_of(cl, invocation_id, timestamp)
    return cl.record_at(invocation_id, seq) if seq else None


def check_seq(cl: Records, invocation_id: str, seq: int) -> int:
    """``seq`` if it is 0 (before the first save) up to the stream's last seq."""
    last = last_seq(cl, invocation_id)
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
        raise InvalidArgument(
            f"seq {seq!r} is outside {invocation_id!r}, whose seqs run 1..{last} "
            "(0 means before the first save)"
        )
    return seq


def diff(cl: Records, invocation_id: str, seq_a: int, seq_b: int) -> RecordDiff:
    """What changed in ``invocation_id`` from stream seq ``seq_a`` to ``seq_b``."""
    args.stream_id("invocation_id", invocation_id)
    args.seq("seq_a", seq_a)
    args.seq("seq_b", seq_b)
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
    cl: Records, invocation_id: str, *, from_seq: int = 1, to_seq: int | None = None
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
        kind=frame_kind(frame),
        frame=frame_type(frame),
        stored_bytes=sf.stored_bytes,
        checksum=sf.checksum.hex(),
        state_changed=state_changed,
        positions_added=positions,
        instances_changed=instances,
    )


def scan(cl: Records, since_seq: int | None = None) -> Iterator[ScanEntry]:
    """Every frame of every invocation with global seq > ``since_seq``, in commit order."""
    for sf in cl.log.scan(since_seq or 0):
        yield scan_entry(sf)
