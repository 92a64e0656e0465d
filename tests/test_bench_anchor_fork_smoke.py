"""``python -m benchmarks.anchor_fork --quick`` runs, prints its table and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module


def test_anchor_fork_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "anchor_fork.json"
    stdout = run_module("benchmarks.anchor_fork", "--quick", "--json", str(out), timeout=120)
    assert "Fork and head on" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert set(data["seconds"]) == {
        "verify", "fork links", "find forks (peek)", "find forks (decode)", "head take",
        "head check", "fork",
    }  # fmt: skip
    assert all(s > 0 for s in data["seconds"].values())
    assert data["environment"]["loadavg_1_5_15"]
