"""``python -m benchmarks.export_parquet --quick`` and ``python -m benchmarks.tail_lag
--quick`` run, print their tables and write their JSON (issue 25).

Smoke tests (STYLE §11): no timing assertions, only that the benchmarks still work and that
what they count is whole (every table written, every tailed frame seen once, in order).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_smoke import run_module


@pytest.mark.slow
def test_export_parquet_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "export_parquet.json"
    stdout = run_module("benchmarks.export_parquet", "--quick", "--out", str(out), timeout=300)
    assert "Parquet export of 20,009 frames" in stdout
    assert "export --format parquet" in stdout
    assert "parquet / jsonl-frames time" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert data["frames"] == 20_009
    rows = data["rounds"][0]["parquet"]["rows"]
    assert rows["saves"] == rows["frames"] == 20_009
    assert rows["instances"] == 2_000
    assert data["rounds"][0]["jsonl"]["lines"] == 20_009
    assert data["environment"]["loadavg_1_5_15"] is not None


@pytest.mark.slow
@pytest.mark.long
def test_tail_lag_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "tail_lag.json"
    stdout = run_module("benchmarks.tail_lag", "--quick", "--out", str(out), timeout=300)
    assert "ckptlog tail: commit -> line" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    for engine in ("lmdb", "postgresql"):
        lag = data["results"][engine]["lag"]
        assert lag["lines"] == lag["frames"] == 100
        assert lag["in_order_once"] is True
        assert lag["exit_status"] == 0
