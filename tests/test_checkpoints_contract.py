"""The checkpointer contract (eventlog.testing) on every backend, sync and async."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from backends.memory import MemoryBackend
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.testing import CheckpointerContract, CheckpointLogContract


class TestCheckpointLogLmdb(CheckpointLogContract):
    persistent = True

    def make_log(self, tmp_path: Path, **kw: Any) -> CheckpointLog:
        return CheckpointLog.open(tmp_path / "log", **kw)


class _ProcessMemory(MemoryBackend):
    """A memory store that outlives ``close()`` within the process, keyed by path, so the
    reopen tests run against the in-memory oracle too (a restart that keeps the process)."""

    stores: ClassVar[dict[Path, _ProcessMemory]] = {}

    def close(self) -> None:
        pass  # the tables stay; the EventLog on top refuses use after its own close()

    @classmethod
    def at(cls, path: Path) -> _ProcessMemory:
        return cls.stores.setdefault(path, cls())


class TestCheckpointLogMemory(CheckpointLogContract):
    persistent = True

    def make_log(self, tmp_path: Path, **kw: Any) -> CheckpointLog:
        return CheckpointLog.on_backend(_ProcessMemory.at(tmp_path), **kw)


class TestCheckpointerLmdb(CheckpointerContract):
    persistent = True

    def make_checkpointer(self, tmp_path: Path, **kw: Any) -> Checkpointer:
        return Checkpointer.open(tmp_path / "log", **kw)


class TestCheckpointerMemory(CheckpointerContract):
    persistent = True

    def make_checkpointer(self, tmp_path: Path, **kw: Any) -> Checkpointer:
        return Checkpointer.on_backend(_ProcessMemory.at(tmp_path), **kw)
