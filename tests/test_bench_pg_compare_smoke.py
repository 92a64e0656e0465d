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

from benchmarks.pg_report import SECTION_TITLE, markdown, replace_section


@pytest.mark.slow
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


def test_a_run_of_some_sections_keeps_the_others_from_the_json_it_replaces(
    tmp_path: Path,
) -> None:
    """``--only`` keeps the sections it did not run from the previous JSON, marked with the
    run they came from, and the page says so; a section it ran is not carried over."""
    from benchmarks.pg_compare import carry_over  # noqa: PLC0415

    prev = tmp_path / "pg_compare.json"
    prev.write_text(
        json.dumps(
            {
                "command": "python -m benchmarks.pg_compare --doc",
                "environment": {"timestamp_utc": "then", "git": {"commit": "abcdef0123456789"}},
                "loadavg_before": [1.0, 1.0, 1.0],
                "growth": {"ratio_growth": 2.9},
                "workers": {"rows": "old"},
            }
        ),
        encoding="utf-8",
    )
    payload: dict[str, object] = {"growth": {"ratio_growth": 0.2}}
    carry_over(payload, prev, ["linear", "growth"])
    assert payload["growth"] == {"ratio_growth": 0.2}
    assert payload["workers"] == {
        "carried_from": {
            "command": "python -m benchmarks.pg_compare --doc",
            "timestamp_utc": "then",
            "commit": "abcdef0123",
            "loadavg_before": [1.0, 1.0, 1.0],
        },
        "rows": "old",
    }
    assert "instances" not in payload  # not in the previous run either
    whole: dict[str, object] = {}
    carry_over(whole, prev, ["linear", "growth", "instances", "workers"])
    assert whole == {}  # a full run carries nothing over
