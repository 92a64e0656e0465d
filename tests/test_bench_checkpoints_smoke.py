"""``python -m benchmarks.checkpoints --quick`` runs, prints its tables and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module


def test_checkpoints_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "checkpoints.json"
    stdout = run_module("benchmarks.checkpoints", "--quick", "--out", str(out), timeout=120)
    for title in ("(a) bytes appended", "(b) load latency", "(c) full-history replay"):
        assert title in stdout
    for row in ("save_instance", "save_fan_out_internal", "load p50", "load p99", "history(inv)"):
        assert row in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    env = data["environment"]
    assert env["durability"] == "process"
    assert env["python"]
    assert env["packages"]["msgspec"]
    assert env["packages"]["lmdb"]
    assert [r["instances"] for r in data["fan_out_save_instance"]] == [100, 10_000]
    assert [r["instances"] for r in data["fan_out_internal_whole_record"]] == [100, 1_000]
    assert all(r["bytes_per_save"] > 0 for r in data["fan_out_save_instance"])
    assert [r["history_saves"] for r in data["load"]] == [100, 5_000]
    assert data["replay"]["records"] == 5_000
    assert set(data["ratios"]) >= {"save_instance_bytes", "load_p50_us", "load_p99_us"}
