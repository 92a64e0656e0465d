"""``python -m benchmarks.lazy_load`` at a small N runs, prints its table and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module


def test_lazy_load_benchmark_small(tmp_path: Path) -> None:
    out = tmp_path / "lazy_load.json"
    stdout = run_module(
        "benchmarks.lazy_load", "--n", "70000", "--rounds", "1", "--out", str(out), timeout=120
    )
    assert "| lazy |" in stdout
    assert "| eager |" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["n"] == 70_000
    assert set(data["medians"]) == {"lazy", "eager"}
    assert data["medians"]["lazy"]["iterate_s"] > 0
