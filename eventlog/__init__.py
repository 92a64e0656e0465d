"""ckptlog: an event-sourced, append-only checkpoint log.

The record types, every exception (``eventlog.errors``) and the verify reports
(``eventlog.reports``) are imported eagerly (leaf modules); the log, the checkpointers and the
forensic result types are imported on first use, so that ``backends`` may import
``eventlog.errors`` without a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eventlog.errors import (
    BufferedLost,
    CheckpointError,
    CommitOutcomeUnknown,
    CompactionError,
    CorruptFrame,
    DamagedLog,
    DamagedRow,
    DamagedRowSkipped,
    DirNotOurs,
    EncodingError,
    FlushFailed,
    FrameTooLarge,
    InvalidArgument,
    InvalidCheckpoint,
    InvalidConfig,
    InvalidOption,
    InvalidPruneStrategy,
    InvalidRecord,
    InvalidStreamKey,
    InvalidType,
    LogClosed,
    LogReplaced,
    NoSuchInvocation,
    NotACheckpointFrame,
    NotALog,
    ReadOnlyLog,
    RetryableWrite,
    SeqOutOfRange,
    SequenceConflict,
    SourceDamaged,
    StorageError,
    StorageFull,
    UnknownInvocation,
    UnsupportedFormat,
    UnsupportedStream,
    WriterFailed,
)
from eventlog.records import (
    CheckpointFilter,
    CheckpointRecord,
    CheckpointSummary,
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    HistoryEntry,
    NodePosition,
)
from eventlog.reports import Problem, Stats, VerifyReport

if TYPE_CHECKING:
    from eventlog.checkpoints import Checkpointer, CheckpointLog
    from eventlog.forensics import (
        CompactReport,
        ExportSummary,
        Invocation,
        LogStats,
        Provenance,
        ReplayStep,
        ScanEntry,
    )
    from eventlog.log import EventLog
    from projections.history import RecordDiff

__all__ = [
    "BufferedLost",
    "CheckpointError",
    "CheckpointFilter",
    "CheckpointLog",
    "CheckpointRecord",
    "CheckpointSummary",
    "Checkpointer",
    "CommitOutcomeUnknown",
    "CompactReport",
    "CompactionError",
    "CorruptFrame",
    "DamagedLog",
    "DamagedRow",
    "DamagedRowSkipped",
    "DirNotOurs",
    "EnclosingFanOutInstance",
    "EncodingError",
    "EventLog",
    "ExportSummary",
    "FanOutInstanceProgress",
    "FanOutInternalSaveBatching",
    "FanOutProgress",
    "FlushFailed",
    "FrameTooLarge",
    "HistoryEntry",
    "InvalidArgument",
    "InvalidCheckpoint",
    "InvalidConfig",
    "InvalidOption",
    "InvalidPruneStrategy",
    "InvalidRecord",
    "InvalidStreamKey",
    "InvalidType",
    "Invocation",
    "LogClosed",
    "LogReplaced",
    "LogStats",
    "NoSuchInvocation",
    "NodePosition",
    "NotACheckpointFrame",
    "NotALog",
    "Problem",
    "Provenance",
    "ReadOnlyLog",
    "RecordDiff",
    "ReplayStep",
    "RetryableWrite",
    "ScanEntry",
    "SeqOutOfRange",
    "SequenceConflict",
    "SourceDamaged",
    "Stats",
    "StorageError",
    "StorageFull",
    "UnknownInvocation",
    "UnsupportedFormat",
    "UnsupportedStream",
    "VerifyReport",
    "WriterFailed",
]

_LAZY = {
    "CheckpointLog": "eventlog.checkpoints",
    "Checkpointer": "eventlog.checkpoints",
    "EventLog": "eventlog.log",
    "CompactReport": "eventlog.forensics",
    "ExportSummary": "eventlog.forensics",
    "Invocation": "eventlog.forensics",
    "LogStats": "eventlog.forensics",
    "Provenance": "eventlog.forensics",
    "ReplayStep": "eventlog.forensics",
    "ScanEntry": "eventlog.forensics",
    "RecordDiff": "projections.history",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eventlog' has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    return getattr(importlib.import_module(module), name)
