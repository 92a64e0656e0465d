"""``python -m benchmarks.save_cpu --quick`` runs, prints its table and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module


def test_save_cpu_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "save_cpu.json"
    stdout = run_module("benchmarks.save_cpu", "--quick", "--json", str(out), timeout=120)
    assert "Caller-side CPU per save" in stdout
    for shape in ("linear 200 B", "linear 4096 B", "1,000 small dicts", "1,536 floats"):
        assert shape in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert data["environment"]["packages"]["msgspec"]
    linear = [r for r in data["rows"] if r["shape"].startswith("linear")]
    assert [r["shape"] for r in linear] == ["linear 200 B", "linear 4096 B"]
    for row in linear:
        for key in ("lossless", "validate", "caller", "save"):
            assert row[f"{key}_before"] > 0
            assert row[f"{key}_after"] > 0
