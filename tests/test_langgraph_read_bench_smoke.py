"""``python -m benchmarks.langgraph_read --quick`` runs, prints its table and writes its JSON,
on LMDB and (``--pg``) on PostgreSQL. A smoke test (STYLE §11): no timing assertions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_smoke import run_module

from benchmarks.langgraph_read import SECTION_TITLE, markdown, replace_section

OPS = {"get_latest", "get_by_id", "list20", "aget_latest", "alist20", "full_list"}


def check(out: Path, ours: str, theirs: str, backend: str) -> None:
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert data["backend"] == backend
    assert data["environment"]["langgraph_packages"]["langgraph"]
    assert {(r["state"], r["n"]) for r in data["results"]} == {
        (s, n) for s in ("small", "64KiB") for n in (30, 120)
    }
    for r in data["results"]:
        assert set(r["results"]) == {ours, theirs}
        assert set(r["ratios"]) == OPS
        assert all(v > 0 for v in r["ratios"].values())
        assert r["results"][ours]["full_list_items_per_s"] > 0
    assert set(data["flatness"]) == {"small", "64KiB"}


@pytest.mark.slow
def test_langgraph_read_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "langgraph_read.json"
    stdout = run_module("benchmarks.langgraph_read", "--quick", "--out", str(out), timeout=300)
    assert "LangGraph reads, ckptlog vs SqliteSaver" in stdout
    assert "| small | 120 | get_latest |" in stdout
    check(out, "ckptlog", "SqliteSaver", "lmdb")
    section = markdown(json.loads(out.read_text(encoding="utf-8")), None)
    assert section.startswith(SECTION_TITLE)
    assert "| small | `get_tuple` latest |" in section
    page = replace_section("# Benchmarks\n\n## `replay`: x\n\ntext\n", section)
    assert replace_section(page, section) == page  # replaced in place, not appended again


@pytest.mark.slow
@pytest.mark.long
def test_langgraph_read_benchmark_quick_on_postgres(tmp_path: Path) -> None:
    out = tmp_path / "langgraph_read_pg.json"
    stdout = run_module(
        "benchmarks.langgraph_read", "--quick", "--pg", "--out", str(out), timeout=300
    )
    assert "LangGraph reads, ckptlog-pg vs PostgresSaver" in stdout
    check(out, "ckptlog-pg", "PostgresSaver", "postgresql")
