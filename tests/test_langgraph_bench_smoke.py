"""``python -m benchmarks.langgraph_growth --quick`` runs, prints its table and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_langgraph_growth_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "langgraph_growth.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.langgraph_growth", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "a thread appending one message per step" in proc.stdout
    assert "bytes on disk, ours / SQLite" in proc.stdout
    assert "(c) the run's puts replayed" in proc.stdout
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
