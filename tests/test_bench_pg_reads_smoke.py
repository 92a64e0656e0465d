"""``python -m benchmarks.pg_reads --quick`` runs against the real server, prints its table,
writes its JSON and drops every schema it made.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works and that
the round trips it reports are the ones ckptlog's reads are built to make.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from bench_smoke import run_module
from pg_schemas import PG_URL


@pytest.mark.slow
def test_pg_reads_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "pg_reads.json"
    stdout = run_module("benchmarks.pg_reads", "--quick", "--out", str(out), timeout=180)
    assert "PostgreSQL reads" in stdout
    reads = json.loads(out.read_text(encoding="utf-8"))["reads"]
    trips = {name: r["round_trips"] for name, r in reads.items()}
    assert trips == {
        "CheckpointLog.load": 1,
        "apflow load_checkpoint": 2,
        "techrevati get": 2,
        "techrevati get_step": 3,
        "LangGraph get_tuple latest": 1,
        "LangGraph get_tuple by id": 1,
        "PostgresSaver get_tuple latest": None,
        "floor: one SELECT by key": None,
    }
    assert all(r["p50_us"] > 0 for r in reads.values())
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench_reads_%'"
        ).fetchall()
    assert left == []
