"""Smoke run of benchmarks/log_append.py at --quick size, so the benchmark cannot rot (STYLE §11).

It checks that the script completes and writes JSON of the expected shape; it asserts nothing
about timings, which depend on the machine.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_smoke import run_module

SCENARIOS = {
    "single",
    "threads16",
    "threads256",
    "async16",
    "async256",
    "buffered1024",
    "format_floor",
    "raw_commit",
    "raw_putmulti",
}
RATIOS = {
    "single_vs_raw_commit",
    "threads256_abs",
    "async256_abs",
    "buffered_vs_raw_putmulti",
}
INFORMATIVE = {"format_floor_vs_raw_putmulti", "buffered_vs_format_floor"}


def test_log_append_quick_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "results" / "log_append.json"
    stdout = run_module("benchmarks.log_append", "--quick", "--json", str(out), timeout=120)
    assert "raw_putmulti" in stdout  # the table was printed
    assert f"wrote {out}" in stdout
    assert not out.with_name(out.name + ".tmp").exists()

    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "log_append"
    assert result["quick"] is True
    env = result["environment"]
    for key in ("platform", "cpu_count", "python", "packages", "durability"):
        assert key in env, key
    assert set(env["packages"]) >= {"msgspec", "lmdb", "zstandard"}
    assert all(env["packages"][p] for p in ("msgspec", "lmdb", "zstandard"))
    assert env["durability"] == "fsync"
    assert result["config"]["repeats"] >= 3
    assert result["config"]["stored_bytes"] == result["config"]["frame_bytes"] + 52

    assert set(result["scenarios"]) == SCENARIOS
    for name, sc in result["scenarios"].items():
        assert sc["median"] > 0, name
        assert sc["min"] <= sc["median"] <= sc["max"], name
        assert len(sc["runs"]) == result["config"]["repeats"], name
        assert set(sc["latency_us"]) == {"p50", "p90", "p99"}, name
    assert set(result["ratios"]) == RATIOS | INFORMATIVE
    for name, r in result["ratios"].items():
        assert {"value", "target", "met", "definition"} <= set(r), name
        assert r["value"] > 0, name
        if name in INFORMATIVE:
            assert r["target"] is None, name
            assert r["met"] is None, name
        else:
            assert isinstance(r["met"], bool), name
