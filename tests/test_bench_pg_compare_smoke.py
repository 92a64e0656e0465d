"""``python -m benchmarks.pg_compare --quick`` runs against the real server, prints its tables,
writes its JSON and drops every schema it made.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from bench_smoke import run_module
from pg_schemas import PG_URL

from benchmarks.pg_compare import carry_over
from benchmarks.pg_report import SECTION_TITLE, carried, markdown, replace_section


@pytest.mark.slow
@pytest.mark.long
def test_pg_compare_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "pg_compare.json"
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## `replay`: Full-history replay\n\ntext\n", encoding="utf-8")
    stdout = run_module(
        "benchmarks.pg_compare", "--quick", "--out", str(out), "--doc", str(doc), timeout=180
    )
    for title in ("1. LangGraph saves", "2. Storage of a 50-step", "3. Per-instance saves"):
        assert title in stdout
    assert "4. One 2,000-instance job" in stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert data["packages"]["langgraph-checkpoint-postgres"]
    assert data["server"]["server_version"]
    assert data["environment"]["git"]
    assert [(r["doc_bytes"], r["durability"]) for r in data["linear"]["rows"]] == [
        (0, "fsync"),
        (0, "process"),
        (4096, "fsync"),
        (4096, "process"),
    ]
    assert all(r["ours_median"] > 0 and r["theirs_median"] > 0 for r in data["linear"]["rows"])
    assert data["growth"]["steps"] == 50
    assert data["growth"]["ours"]["growth"] > 0
    assert data["growth"]["theirs"]["growth"] > 0
    for row in data["instances"]["rows"]:
        assert set(row["medians"]) == {"ours", "executemany", "copy"}
        assert row["ratio_vs_best"]["median_of_ratios"] > 0
    assert [r["workers"] for r in data["workers"]["rows"]] == [1, 4, 8]
    assert all(0 <= r["lock_wait_share"] <= 1 for r in data["workers"]["rows"])
    assert all(0 <= r["held_across_share"] <= 1 for r in data["workers"]["rows"])
    own = data["workers"]["own_fan_outs"]
    assert own["workers"] == 8
    assert own["inst_per_s"] > 0
    assert "8 (a fan-out each)" in stdout
    # every store had a schema of its own, and none is left behind
    made = data["schemas_created_and_dropped"]
    assert len(made) == len(set(made)) >= 10
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", (made,)
        ).fetchall()
    assert left == []
    # --doc appended the section to the page; a rerun replaces it in place, up to the next heading
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\n## `replay`: Full-history replay\n\ntext\n\n")
    assert text.index(SECTION_TITLE) > text.index("## `replay`")
    assert "Targets:" in text
    later = text + "\n## Later\n\nmore\n"
    again = replace_section(later, markdown(data, "x.json"))
    assert again.count(SECTION_TITLE) == 1
    assert again.startswith("# Benchmarks\n\n## `replay`")
    assert again.endswith("\n## Later\n\nmore\n")


def test_a_run_of_some_parts_carries_the_others_over_from_the_stored_run(tmp_path: Path) -> None:
    """``pg_compare --only instances,workers`` keeps the stored run's other parts, each marked
    with the run it came from, and the page says so; a full run carries nothing over."""
    out = tmp_path / "pg_compare.json"
    old = {
        "command": "python -m benchmarks.pg_compare --doc",
        "environment": {"timestamp_utc": "2026-11-27T10:00:00Z", "git": {"commit": "0123456789ab"}},
        "loadavg_before": [5.0, 5.0, 5.0],
        "loadavg_after": [6.0, 6.0, 6.0],
        "linear": {"rows": [], "target_min": 1.0},
        "growth": {"steps": 1000},
        "workers": {"rows": ["old"]},
    }
    out.write_text(json.dumps(old), encoding="utf-8")
    payload: dict[str, object] = {"workers": {"rows": ["new"]}}
    carry_over(payload, out, ["instances", "workers"])
    assert payload["workers"] == {"rows": ["new"]}
    assert "instances" not in payload  # the stored run had none
    for name in ("linear", "growth"):
        src = payload[name]["carried_from"]  # type: ignore[index]
        assert src["commit"] == "0123456789"
        assert src["timestamp_utc"] == "2026-11-27T10:00:00Z"
    sentence = carried(payload)
    assert "Part 1 was not run here" in sentence
    assert "Part 2 was not run here" in sentence
    assert "Part 4" not in sentence
    full: dict[str, object] = {}
    carry_over(full, out, ["linear", "growth", "instances", "workers"])
    assert full == {}


@pytest.mark.parametrize("row", ["ours", "copy"])
def test_pg_instances_ir_child_runs_its_job_and_drops_its_schema(row: str) -> None:
    """What ``benchmarks.pg_instances_ir`` runs under callgrind (valgrind is not needed to
    check that its job runs): the instances saved, and no schema of it left behind."""
    from benchmarks.pg_compare import PREFIX  # noqa: PLC0415
    from benchmarks.pg_instances_ir import child  # noqa: PLC0415

    child(row, 600)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
            (f"{PREFIX}ir_{row}_",),
        ).fetchall()
    assert left == []
