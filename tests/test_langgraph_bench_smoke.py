"""``python -m benchmarks.langgraph_growth --quick`` runs, prints its table and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module


def test_langgraph_growth_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "langgraph_growth.json"
    stdout = run_module("benchmarks.langgraph_growth", "--quick", "--out", str(out), timeout=300)
    assert "a thread appending one message per step" in stdout
    assert "bytes on disk, ours / SQLite" in stdout
    assert "(c) the run's puts replayed" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert data["steps"] == 50
    assert data["environment"]["python"]
    assert data["environment"]["langgraph_packages"]["langgraph"]
    rows = {(r["saver"], r["durability"]): r for r in data["results"]}
    assert set(rows) == {
        ("LmdbSaver", "fsync"),
        ("LmdbSaver", "process"),
        ("SqliteSaver", "sqlite default"),
    }
    for r in rows.values():
        assert r["puts"] >= r["steps"]
        assert r["disk_bytes"] > 0
        assert r["put_early_ms"]["p50"] > 0
        assert r["put_late_ms"]["p50"] > 0
    assert [r["saver"] for r in data["interleaved"]] == ["LmdbSaver", "SqliteSaver"]
    assert all(r["put_late_over_early"] > 0 for r in data["interleaved"])
    assert set(data["ratios"]) >= {
        "disk_bytes_ours_over_sqlite",
        "put_late_over_early_ours",
        "put_late_over_early_ours_process",
        "put_late_over_early_ours_interleaved",
    }
