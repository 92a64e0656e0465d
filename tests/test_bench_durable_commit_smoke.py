"""``python -m benchmarks.durable_commit --quick`` runs, prints its tables and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module


def test_durable_commit_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "durable_commit.json"
    stdout = run_module("benchmarks.durable_commit", "--quick", "--out", str(out), timeout=300)
    assert "durable commits" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    for size in (200, 4096):
        assert data["ratios"][f"save fsync / raw lmdb {size} B"] > 0
        assert data["ratios"][f"save fsync / sqlite FULL {size} B"] > 0
    assert data["ratios"]["langgraph put: SqliteSaver / LmdbSaver"] > 0
    assert data["medians"]["async 100 concurrent saves fsync (saves/s)"] > 0
