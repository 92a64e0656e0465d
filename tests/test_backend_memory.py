"""The memory backend against the shared backend contract."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from backends.memory import MemoryBackend
from backends.testing import BackendContract, FaultyBackend


class TestMemoryBackend(BackendContract):
    def make_backend(self, tmp_path: Path, **kw: Any) -> MemoryBackend:
        return MemoryBackend(**kw)

    def test_size_is_zero_and_location_is_memory(self) -> None:
        backend = MemoryBackend()
        backend.run_write(lambda txn: txn.put("a", b"k", b"v" * 1000))
        assert backend.size_bytes() == 0
        assert backend.location == "<memory>"


class TestFaultyBackend(BackendContract):
    """The fault-injecting wrapper, injecting nothing, is a faithful backend."""

    def make_backend(self, tmp_path: Path, **kw: Any) -> FaultyBackend:
        return FaultyBackend(MemoryBackend(**kw))

    def test_failing_commit_rolls_back_and_raises_the_injected_error(self) -> None:
        backend = FaultyBackend(MemoryBackend())
        backend.run_write(lambda txn: txn.put("a", b"k", b"1"))
        backend.fail_at = {2}
        with pytest.raises(OSError, match="No space left") as e:
            backend.run_write(lambda txn: txn.put("a", b"k", b"2"))
        assert e.value.errno == errno.ENOSPC
        backend.failing = True
        with pytest.raises(OSError):
            backend.run_write(lambda txn: txn.put("a", b"k", b"3"))
        backend.failing = False
        with backend.read() as txn:
            assert txn.get("a", b"k") == b"1"  # neither failed commit left anything
        backend.run_write(lambda txn: txn.put("a", b"k", b"4"))
        with backend.read() as txn:
            assert txn.get("a", b"k") == b"4"
        assert (backend.commits, backend.failed) == (4, 2)


def test_a_commit_changing_a_failing_table_fails_others_commit() -> None:
    backend = FaultyBackend(MemoryBackend())
    backend.fail_tables = {"b"}
    backend.run_write(lambda txn: txn.put("a", b"k", b"1"))
    with pytest.raises(OSError, match="No space left"):
        backend.run_write(lambda txn: (txn.put("a", b"k", b"2"), txn.put("b", b"k", b"x")))
    with pytest.raises(OSError):
        backend.run_write(lambda txn: txn.delete_prefix("b", b""))
    with backend.read() as txn:
        assert txn.get("a", b"k") == b"1"
        assert txn.get("b", b"k") is None
    assert (backend.commits, backend.failed) == (3, 2)
