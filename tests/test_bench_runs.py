"""The run-level parts of the benchmark harness: the machine's limits, sustained runs
(``--duration``), open-loop runs (``--rate``), ``compare``, and the page sections they write
(a partial run replaces only its own sections)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench_smoke import run_module

from benchmarks.__main__ import main
from benchmarks.compare import comparison
from benchmarks.limits import HEADLINE, headline, matching_limit, measure
from benchmarks.report import write_doc
from benchmarks.report_runs import replace_section
from benchmarks.sustained import Timeline, interval_of, parse_duration


def test_limits_are_measured_on_the_given_directorys_filesystem(tmp_path: Path) -> None:
    limits = measure(tmp_path, quick=True, seed=3, seconds=0.05)
    for name in HEADLINE:
        assert headline(limits, name), name
        assert limits[name]["latency_samples"] >= 1, name
        assert limits[name]["p50_us"] <= limits[name]["p99_us"] <= limits[name]["max_us"], name
    assert limits["lmdb_putmulti"]["rows_per_commit"] == 256
    assert limits["mount"]["mount_point"]
    assert limits["mount"]["options"]
    assert not list(tmp_path.iterdir())  # its files are gone


def test_fsync_rows_are_matched_with_the_limit_of_their_commit_shape() -> None:
    assert matching_limit("linear") == "lmdb_commit"
    assert matching_limit("instances") == "lmdb_putmulti"
    assert matching_limit("fanout", {"batching": 0}) == "lmdb_commit"
    assert matching_limit("fanout", {"batching": 32}) == "lmdb_putmulti"
    assert matching_limit("load") is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900.0), ("90s", 90.0), ("1h", 3600.0), ("2.5m", 150.0), ("7", 7.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0m", "-1s", "fifteen", "15x"])
def test_bad_durations_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="positive time like 15m"):
        parse_duration(text)


def test_a_timeline_cuts_intervals_and_folds_a_short_last_one(tmp_path: Path) -> None:
    assert interval_of(900) == 60
    assert interval_of(3) == 0.5
    t = Timeline(tmp_path, 1.0)
    ops = 0
    for step in range(1, 31):  # 3 s at 10 ops per 0.1 s, then a 0.1 s sliver
        ops += 10
        t.record(0.001)
        t.maybe_cut(step / 10, ops)
    t.record(0.5)
    t.cut(3.1, ops + 5, last=True)
    assert [p["ops"] for p in t.points] == [100, 100, 105]
    assert t.points[-1]["t0_s"] == 2.0
    assert t.points[-1]["rate"] == pytest.approx(105 / 1.1, rel=1e-3)
    assert t.total.count == 31
    assert t.total.max_ns == 500_000_000
    assert t.extra()["decay"] == pytest.approx((105 / 1.1) / 100, rel=1e-3)


def _payload(limits: dict[str, float], rows: list[tuple[str, str, float]]) -> dict[str, Any]:
    entry = {
        "lmdb_commit": {"per_s": limits["commit"]},
        "lmdb_putmulti": {"rows_per_s": limits.get("putmulti", 1.0)},
        "cpu": {"per_s": limits["cpu"]},
    }
    return {
        "benchmark": "bench",
        "limits": entry,
        "scenarios": {
            "linear": {
                "metric": "saves/s",
                "primary": "rate_median",
                "higher_is_better": True,
                "params": [
                    {
                        "key": "state=200",
                        "label": "200 B state",
                        "values": {},
                        "rows": [
                            {"label": label, "durability": d, "status": "ok", "rate_median": v}
                            for label, d, v in rows
                        ],
                    }
                ],
            }
        },
    }


def test_compare_normalises_fsync_rows_by_the_disk_and_others_by_the_cpu() -> None:
    a = _payload({"commit": 1000, "cpu": 50_000}, [("f", "fsync", 500), ("p", "process", 10_000)])
    # B's disk commits twice as fast and its CPU is half as fast.
    b = _payload({"commit": 2000, "cpu": 25_000}, [("f", "fsync", 1000), ("p", "process", 6000)])
    result = comparison(a, b)
    by_row = {r["row"]: r for r in result["rows"]}
    assert by_row["f"]["b_over_a"] == pytest.approx(2.0)
    assert by_row["f"]["normalised"] == pytest.approx(1.0)  # all of it is the disk
    assert by_row["f"]["limit"] == "lmdb_commit"
    assert by_row["p"]["b_over_a"] == pytest.approx(0.6)
    assert by_row["p"]["normalised"] == pytest.approx(1.2)  # better, given a slower CPU
    assert by_row["p"]["limit"] == "cpu"
    (commit,) = [x for x in result["limits"] if x["limit"] == "lmdb_commit"]
    assert commit["b_over_a"] == pytest.approx(2.0)


def test_compare_command_rejects_what_is_not_a_run(tmp_path: Path) -> None:
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"benchmark": "log_append"}), encoding="utf-8")
    assert main(["compare", str(other), str(other)]) == 2
    assert main(["compare", str(tmp_path / "missing.json"), str(other)]) == 2


def test_a_section_is_replaced_in_place_or_added_before_a_marker() -> None:
    page = "# T\n\n## `a`: one\n\nold a\n\n## `b`: two\n\nb text\n\n## PostgreSQL\n\npg\n"
    new = replace_section(page, "## `a`", "## `a`: one\n\nnew a\n", ("## PostgreSQL",))
    assert new == "# T\n\n## `a`: one\n\nnew a\n\n## `b`: two\n\nb text\n\n## PostgreSQL\n\npg\n"
    added = replace_section(new, "## `c`", "## `c`: three\n\nc\n", ("## PostgreSQL",))
    assert added.index("## `c`") < added.index("## PostgreSQL")
    assert added.index("## `b`") < added.index("## `c`")
    last = replace_section(page, "## `b`", "## `b`: two\n\nb2\n", ())
    assert "b2" in last
    assert "b text" not in last
    assert "## PostgreSQL\n\npg" in last


@pytest.mark.slow
def test_sustained_open_loop_and_compare_runs_end_to_end(tmp_path: Path) -> None:
    """Every new option at a tiny size, as `make bench-smoke` runs them; a partial run's
    --doc replaces its sections only."""
    sustained, rate = tmp_path / "sustained.json", tmp_path / "rate.json"
    backends = "ckptlog-process,sqlite-rows-process"
    out = run_module(
        "benchmarks", "run", "--quick", "--duration", "1s", "--backend", backends,
        "--limits-seconds", "0.05", "--no-progress", "--out", str(sustained), timeout=300,
    )  # fmt: skip
    assert "== limits: this machine" in out
    assert "sustained-instances" in out
    data = json.loads(sustained.read_text(encoding="utf-8"))
    assert data["seed"] == 0
    assert data["complete"] is False
    assert "--duration 1s" in data["command"]
    assert data["limits"]["lmdb_commit"]["per_s"] > 0
    assert data["limits_end"]["lmdb_commit"]["per_s"] > 0
    assert data["environment"]["mount"]["options"]
    assert set(data["scenarios"]) == {"sustained-instances", "sustained-linear"}
    for name, sc in data["scenarios"].items():
        for row in sc["params"][0]["rows"]:
            if row["status"] != "ok":
                assert name == "sustained-linear"  # the row stores only take instances
                assert row["peer"] == "sqlite-rows-process"
                continue
            assert len(row["runs"]) == 1
            timeline = row["runs"][0]["timeline"]
            assert len(timeline) >= 5, (name, row["label"])
            assert sum(p["ops"] for p in timeline) == row["runs"][0]["ops"]
            assert row["extra"]["decay"] > 0
            assert row["extra"]["store_bytes_end"] > 0
            assert row["p999_us"] >= row["p99_us"] >= row["p50_us"] > 0

    out = run_module(
        "benchmarks", "run", "--quick", "--scenario", "openloop", "--rate", "150,300",
        "--arrivals", "poisson", "--seed", "7", "--load-seconds", "0.3", "--limits-seconds",
        "0.05", "--backend", backends, "--no-progress", "--out", str(rate), timeout=300,
    )  # fmt: skip
    assert "p99 at 150/s" in out
    data = json.loads(rate.read_text(encoding="utf-8"))
    assert data["seed"] == 7
    (p150, p300) = data["scenarios"]["openloop"]["params"]
    assert p150["values"] == {"rate": 150.0, "seconds": 0.3, "arrivals": "poisson", "seed": 7}
    for row in p300["rows"]:
        assert row["status"] == "ok", row
        assert row["extra"]["offered_rate"] == 300.0
        assert row["extra"]["offered"] > 0
        assert row["p99_us"] is not None

    out = run_module("benchmarks", "compare", str(sustained), str(rate), timeout=60)
    assert "== machine limits ==" in out
    assert "no row was measured in both runs" in out
    out = run_module("benchmarks", "compare", str(rate), str(rate), timeout=60)
    assert "== openloop" in out

    # --doc of a partial run onto an existing page: its sections replaced, the rest untouched.
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\n## `linear`: kept\n\nkeep me\n\n## PostgreSQL: last\n\npg\n",
        encoding="utf-8",
    )
    write_doc(json.loads(sustained.read_text(encoding="utf-8")), doc, json_path=sustained)
    write_doc(json.loads(rate.read_text(encoding="utf-8")), doc, json_path=rate)
    text = doc.read_text(encoding="utf-8")
    assert "## `linear`: kept\n\nkeep me\n" in text
    assert text.rstrip().endswith("## PostgreSQL: last\n\npg")
    for heading in ("## `limits`", "## `sustained-instances`", "## `openloop`"):
        assert text.count(heading) == 1, heading
    assert text.index("## `limits`") < text.index("## `linear`")
    assert "p99 at 150/s" in text


def test_a_run_from_before_the_limits_is_set_against_its_own_raw_lmdb_rows() -> None:
    """The published figures predate the limits: each fsync row is shown against the raw
    py-lmdb row measured interleaved with it (what `lmdb_commit` measures)."""
    from benchmarks.report_runs import in_run_fractions  # noqa: PLC0415

    payload = _payload(
        {"commit": 1.0, "cpu": 1.0},
        [("ckptlog-fsync", "fsync", 2000), ("lmdb-raw-fsync", "fsync", 5000), ("p", "process", 9)],
    )
    (row,) = in_run_fractions(payload)
    assert row[2] == "ckptlog-fsync"
    assert row[-1] == "**0.40**"
    assert "`lmdb-raw-fsync` (200 B state)" in row[-2]
