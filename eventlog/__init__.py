"""ckptlog: an event-sourced, append-only checkpoint log.

The record types and errors are imported eagerly (leaf modules); the log and checkpointers are
imported on first use, so that ``backends`` may import ``eventlog.errors`` without a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eventlog.errors import CheckpointError, InvalidRecord
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

if TYPE_CHECKING:
    from eventlog.checkpoints import Checkpointer, CheckpointLog
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
    "InvalidRecord",
    "NodePosition",
]

_LAZY = {
    "CheckpointLog": "eventlog.checkpoints",
    "Checkpointer": "eventlog.checkpoints",
    "EventLog": "eventlog.log",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eventlog' has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    return getattr(importlib.import_module(module), name)
