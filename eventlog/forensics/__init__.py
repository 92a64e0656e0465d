"""Forensics on a checkpoint log: history, points in time, diffs, replay, scan, export, an
extended verify, stats and retention by compaction into a new log.

One module per responsibility; every name stays importable from here
(``from eventlog import forensics; forensics.<name>``):

- :mod:`eventlog.walker` (a layer below, since the views read through it too): reading what
  is readable (strict and tolerant readers, the walk folding frames into records);
- :mod:`~eventlog.forensics.queries`: history filters, points in time, diffs, replay, scan;
- :mod:`~eventlog.forensics.export`: JSON Lines export;
- :mod:`~eventlog.forensics.rows`: ``verify``, the core checks plus every view's rows;
- :mod:`~eventlog.forensics.stats`: stats and the invocation listing;
- :mod:`~eventlog.forensics.compaction`: compaction into a new log, provenance;
- :mod:`~eventlog.forensics.opening`: ``open_readonly`` (a truncated data file is read from a
  zero-filled copy; the file-level checks are ``backends.lmdb_salvage``);
- :mod:`~eventlog.forensics.progress`: the terminal progress bar.

Everything reads through :class:`~eventlog.forensics.common.Records` (what a
:class:`~eventlog.checkpoints.CheckpointLog` offers); none of these modules imports
CheckpointLog, and CheckpointLog imports none of them. ``opening`` alone builds one, and is
loaded on first use of :func:`open_readonly` / :class:`Opened` (PEP 562).

Invariants:
- Nothing here writes to the log it reads. :func:`compact` writes only to DEST, a new log; the
  source is never modified, and a failed compaction removes the DEST it created.
- Strict readers raise :class:`~eventlog.errors.CorruptFrame` at the first damaged frame.
  Tolerant readers (``tolerant=True``) never stop at damage: they yield :class:`Unreadable`
  markers naming each seq they could not read or rebuild, and resume folding at the next
  snapshot or delete (a delta on top of a lost frame cannot be rebuilt).
- A compacted stream starts with a snapshot frame whose :class:`~eventlog.frames.Compacted`
  names the original seq it stands for and that frame's checksum; later frames keep their
  stored payload bytes, so the original chain can be recomputed (:func:`provenance`).
- :func:`verify` reports, never repairs.
- No call here forks the caller's process (command-line tools may pass a prober that does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.lmdb_salvage import DATA_FILE, LMDB_MAGIC, DataFileCheck, data_file_check
from eventlog.errors import CompactionError, InvalidArgument, NoSuchInvocation, SourceDamaged
from eventlog.forensics.common import (
    EXPORT_FORMATS,
    HISTORY_KINDS,
    PROGRESS_EVERY_FRAMES,
    Progress,
    Records,
)
from eventlog.forensics.compaction import (
    COMPACT_BATCH_BYTES,
    COMPACT_BATCH_FRAMES,
    CompactReport,
    Policy,
    Provenance,
    check_dest,
    compact,
    policy,
    provenance,
)
from eventlog.forensics.export import (
    BytesSink,
    ExportSummary,
    JsonLines,
    export,
    frame_content,
    json_safe,
    record_content,
)
from eventlog.forensics.progress import ProgressBar, isatty
from eventlog.forensics.queries import (
    ReplayStep,
    ScanEntry,
    check_kinds,
    check_seq,
    diff,
    history,
    in_window,
    last_seq,
    record_as_of,
    replay,
    scan,
    scan_entry,
    seq_as_of,
)
from eventlog.forensics.rows import verify, verify_materialized
from eventlog.forensics.stats import Invocation, LogStats, StreamSize, invocations, stats
from eventlog.streams import plain
from eventlog.walker import (
    RECORD_FRAMES,
    Step,
    Unreadable,
    batch_of,
    frame_kind,
    frame_saved_at,
    frame_type,
    read_frames,
    walk,
)
from projections.history import RecordDiff

if TYPE_CHECKING:
    from eventlog.forensics.opening import Opened, Prober, open_readonly, signal_name

SALVAGE_PARENT: str | None = None
"""Where zero-filled copies go (default: the system temp dir). The CLI points it at a
directory its parent process removes, since a reader that dies of a damaged page cannot."""

_LAZY = ("Opened", "Prober", "open_readonly", "signal_name")


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'eventlog.forensics' has no attribute {name!r}")
    from eventlog.forensics import opening  # noqa: PLC0415 - builds a CheckpointLog

    return getattr(opening, name)


__all__ = [
    "COMPACT_BATCH_BYTES",
    "COMPACT_BATCH_FRAMES",
    "DATA_FILE",
    "EXPORT_FORMATS",
    "HISTORY_KINDS",
    "LMDB_MAGIC",
    "PROGRESS_EVERY_FRAMES",
    "RECORD_FRAMES",
    "SALVAGE_PARENT",
    "BytesSink",
    "CompactReport",
    "CompactionError",
    "DataFileCheck",
    "ExportSummary",
    "InvalidArgument",
    "Invocation",
    "JsonLines",
    "LogStats",
    "NoSuchInvocation",
    "Opened",
    "Policy",
    "Prober",
    "Progress",
    "ProgressBar",
    "Provenance",
    "RecordDiff",
    "Records",
    "ReplayStep",
    "ScanEntry",
    "SourceDamaged",
    "Step",
    "StreamSize",
    "Unreadable",
    "batch_of",
    "check_dest",
    "check_kinds",
    "check_seq",
    "compact",
    "data_file_check",
    "diff",
    "export",
    "frame_content",
    "frame_kind",
    "frame_saved_at",
    "frame_type",
    "history",
    "in_window",
    "invocations",
    "isatty",
    "json_safe",
    "last_seq",
    "open_readonly",
    "plain",
    "policy",
    "provenance",
    "read_frames",
    "record_as_of",
    "record_content",
    "replay",
    "scan",
    "scan_entry",
    "seq_as_of",
    "signal_name",
    "stats",
    "verify",
    "verify_materialized",
    "walk",
]
