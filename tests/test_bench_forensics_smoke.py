"""``python -m benchmarks.forensics --quick`` runs, prints its tables and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_smoke import run_module


@pytest.mark.slow
@pytest.mark.long
def test_forensics_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "forensics.json"
    stdout = run_module("benchmarks.forensics", "--quick", "--out", str(out), timeout=120)
    assert "(a) throughput on a log of 20,000 frames" in stdout
    assert "(b) show --at latency at the end of a 5,000-save history" in stdout
    for row in ("verify: checksums, chains, index", "export jsonl-frames", "compact keep=heads"):
        assert row in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert data["environment"]["durability"] == "process"
    wide = data["wide"]
    assert wide["frames"] == 20_000
    assert all(v > 0 for v in wide["frames_per_second"].values())
    assert [s["history"] for s in data["show_at"]] == ["records", "fan_out"]
    assert all(s["last_seq"] >= 5_000 for s in data["show_at"])
