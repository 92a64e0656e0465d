"""Stores a benchmark user brings with ``--peer tests_module:factory`` (used by
tests/test_bench_harness.py): each factory gets a fresh directory and returns a store."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from eventlog.checkpoints import Checkpointer
from eventlog.records import FanOutInternalSaveBatching


def ckptlog_checkpointer(path: Path) -> Checkpointer:
    """openarmature's Checkpointer protocol (plus save_instance and flush): ckptlog itself."""
    return Checkpointer.open(
        path, durability="process", batching=FanOutInternalSaveBatching(flush_every=256)
    )


ckptlog_checkpointer.durability = "process"  # type: ignore[attr-defined]


class DictCheckpointer:
    """The bare async protocol (save / load / list / delete) on a dict: no save_instance."""

    def __init__(self) -> None:
        self.records: dict[str, Any] = {}

    async def save(self, invocation_id: str, record: Any) -> None:
        self.records[invocation_id] = record

    async def load(self, invocation_id: str) -> Any:
        return self.records.get(invocation_id)

    async def list(self, filter: Any = None) -> list[Any]:
        corr = getattr(filter, "correlation_id", None)
        return [r for r in self.records.values() if corr is None or r.correlation_id == corr]

    async def delete(self, invocation_id: str) -> None:
        self.records.pop(invocation_id, None)


def dict_checkpointer(path: Path) -> DictCheckpointer:
    return DictCheckpointer()


dict_checkpointer.durability = "none"  # type: ignore[attr-defined]


class ClosingSqliteSaver:
    """LangGraph's SqliteSaver on its own connection, closed with the store."""

    def __new__(cls, path: Path) -> Any:
        from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: PLC0415 - bench extra

        conn = sqlite3.connect(str(path / "lg.db"), check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.close = conn.close  # type: ignore[attr-defined]
        return saver


def lg_sqlite_saver(path: Path) -> Any:
    """LangGraph's BaseCheckpointSaver: SqliteSaver (WAL, this SQLite's default synchronous)."""
    return ClosingSqliteSaver(path)


def not_a_store(path: Path) -> object:
    return object()
