"""ckptlog: an event-sourced, append-only checkpoint log.

The names a user imports: the log and the checkpointers (``CheckpointLog``, ``Checkpointer``,
``EventLog``), the record types, the verify report types, and ``CheckpointError``, the root
of every error; the other error classes are in :mod:`eventlog.errors`, the forensic result
types in :mod:`eventlog.forensics`.

The record types, ``CheckpointError`` and the reports are imported eagerly (leaf modules); the
log and the checkpointers on first use, so that ``backends`` may import ``eventlog.errors``
without a cycle. Names that were importable from here before issue 23 (every error class, the
forensic result types) still are, for one release, with a ``DeprecationWarning`` naming their
module.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from eventlog.errors import CheckpointError
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
    from eventlog.checkpointer import Checkpointer
    from eventlog.checkpoints import CheckpointLog
    from eventlog.log import EventLog

__all__ = [
    "CheckpointError",
    "CheckpointFilter",
    "CheckpointLog",
    "CheckpointRecord",
    "CheckpointSummary",
    "Checkpointer",
    "EnclosingFanOutInstance",
    "EventLog",
    "FanOutInstanceProgress",
    "FanOutInternalSaveBatching",
    "FanOutProgress",
    "HistoryEntry",
    "NodePosition",
    "Problem",
    "Stats",
    "VerifyReport",
]

_LAZY = {
    "CheckpointLog": "eventlog.checkpoints",
    "Checkpointer": "eventlog.checkpointer",
    "EventLog": "eventlog.log",
}

# Importable from here until the next release, with a DeprecationWarning: name -> module.
MOVED: dict[str, str] = {
    **dict.fromkeys(
        (
            "BufferedLost",
            "CommitOutcomeUnknown",
            "CompactionError",
            "CorruptFrame",
            "DamagedLog",
            "DamagedRow",
            "DamagedRowSkipped",
            "DirNotOurs",
            "EncodingError",
            "FlushFailed",
            "FrameTooLarge",
            "InvalidArgument",
            "InvalidCheckpoint",
            "InvalidConfig",
            "InvalidOption",
            "InvalidPruneStrategy",
            "InvalidRecord",
            "InvalidStreamKey",
            "InvalidType",
            "LogClosed",
            "LogReplaced",
            "MissingExtra",
            "NoSuchInvocation",
            "NotACheckpointFrame",
            "NotALog",
            "ReadOnlyLog",
            "RetryableWrite",
            "SeqOutOfRange",
            "SequenceConflict",
            "SourceDamaged",
            "StorageError",
            "StorageFull",
            "UnknownInvocation",
            "UnsupportedFormat",
            "UnsupportedStream",
            "WriterFailed",
        ),
        "eventlog.errors",
    ),
    **dict.fromkeys(
        (
            "CompactReport",
            "ExportSummary",
            "Invocation",
            "LogStats",
            "Provenance",
            "RecordDiff",
            "ReplayStep",
            "ScanEntry",
        ),
        "eventlog.forensics",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    module = MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'eventlog' has no attribute {name!r}")
    warnings.warn(
        f"eventlog.{name} is deprecated and goes in the next release: import it from {module} "
        f"(from {module} import {name})",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(module), name)
