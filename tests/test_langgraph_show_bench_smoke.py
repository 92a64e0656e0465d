"""``python -m benchmarks.langgraph_show`` runs on two short threads, prints its table and
writes its JSON. A smoke test (STYLE §11): no timing assertions."""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module


def test_langgraph_show_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "langgraph_show.json"
    stdout = run_module(
        "benchmarks.langgraph_show",
        "--short", "6", "--long", "40", "--repeat", "1", "--json", str(out),
        timeout=300,
    )  # fmt: skip
    assert "cli show --thread (latest)" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["lengths"] == [6, 40]
    ops = {r["op"] for r in data["results"]}
    assert {"cli show --thread --at SEQ", "viewer /api/steps (last page)"} <= ops
    assert all(r["short_ms"] > 0 and r["long_ms"] > 0 for r in data["results"])
