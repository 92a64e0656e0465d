"""``python -m benchmarks.group_commit_ab`` runs, alternating two checkouts, and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works (here the
"other" checkout is this one).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module

ROOT = Path(__file__).resolve().parent.parent


def test_group_commit_ab_runs_both_trees(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    stdout = run_module(
        "benchmarks.group_commit_ab", "--other", str(ROOT), "--rounds", "2", "--saves", "20",
        "--out", str(out), timeout=300,
    )  # fmt: skip
    assert "concurrent async saves" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["rates"]) == {"this", "other"}
    assert all(len(v) == 2 and min(v) > 0 for v in data["rates"].values())
    assert all(v > 0 for v in data["cpu_medians"].values())
    assert data["ratio_of_medians"] > 0
