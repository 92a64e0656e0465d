"""The memory backend against the shared backend contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backends.memory import MemoryBackend
from backends.testing import BackendContract


class TestMemoryBackend(BackendContract):
    def make_backend(self, tmp_path: Path, **kw: Any) -> MemoryBackend:
        return MemoryBackend(**kw)

    def test_size_is_zero_and_location_is_memory(self) -> None:
        backend = MemoryBackend()
        backend.run_write(lambda txn: txn.put("a", b"k", b"v" * 1000))
        assert backend.size_bytes() == 0
        assert backend.location == "<memory>"
