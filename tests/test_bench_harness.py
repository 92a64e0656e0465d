"""The save-throughput benchmark harness (``python -m benchmarks``) at smoke size.

CI runs every scenario against every installed peer with ``--quick`` so none rots (STYLE §11).
No timing is asserted anywhere: only that every row ran, or says why not, and that the JSON,
tables, ratios and the generated page have their documented shape.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_smoke import run_module

from benchmarks.__main__ import main
from benchmarks.harness import Progress
from benchmarks.peers import PEER_NAMES, all_peers, select
from benchmarks.peers.ckptlog import CkptlogPeer
from benchmarks.peers.raw import RawLmdbPeer
from benchmarks.report import compute_targets, write_doc
from benchmarks.scenarios import SCENARIOS, save_op

STATUSES = {"ok", "n/a", "skipped", "error"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """One ``--quick`` run of every scenario and every installed peer, in a subprocess (as
    ``make bench-smoke`` runs it), with its JSON and stdout."""
    out = tmp_path_factory.mktemp("bench") / "bench.quick.json"
    stdout = run_module("benchmarks", "run", "--quick", "--out", str(out), timeout=300)
    assert not out.with_name(out.name + ".tmp").exists()
    return json.loads(out.read_text(encoding="utf-8")), stdout


def test_every_scenario_runs_every_installed_peer(quick: tuple[dict[str, Any], str]) -> None:
    data, stdout = quick
    assert data["benchmark"] == "bench"
    assert data["quick"] is True
    assert data["complete"] is True
    assert set(data["scenarios"]) == set(SCENARIOS)
    installed = set(data["peers"])
    assert installed | set(data["missing_peers"]) == set(PEER_NAMES)
    assert {"ckptlog-process", "ckptlog-fsync", "oa-sqlite-pickle", "oa-memory"} <= installed
    for name, sc in data["scenarios"].items():
        assert f"== {name}:" in stdout
        for param in sc["params"]:
            peers_seen = {row["peer"] for row in param["rows"]}
            assert peers_seen == installed, (name, param["key"])
            for row in param["rows"]:
                where = (name, param["key"], row["label"])
                assert row["status"] in STATUSES, where
                assert row["status"] != "error", (where, row.get("reason"))
                if row["status"] == "ok":
                    assert row["rate_median"] > 0, where
                    assert len(row["runs"]) == data["settings"]["repeats"], where
                    assert row["rate_min"] <= row["rate_median"] <= row["rate_max"], where
                else:
                    assert row["reason"], where


def test_environment_and_durability_are_recorded(quick: tuple[dict[str, Any], str]) -> None:
    data, _ = quick
    env = data["environment"]
    for key in ("platform", "cpu_count", "python", "packages", "loadavg_1_5_15", "git"):
        assert key in env, key
    assert env["peer_packages"]["openarmature"] == "0.17.0"
    assert data["settings"]["repeats"] >= 2
    for name, peer in data["peers"].items():
        assert peer["durability"]["kind"] in {"fsync", "process", "none"}, name
        assert peer["durability"]["detail"], name
    assert data["peers"]["oa-sqlite-pickle"]["durability"]["kind"] == "process"
    assert "synchronous=NORMAL" in data["peers"]["oa-sqlite-pickle"]["durability"]["detail"]
    assert data["peers"]["ckptlog-fsync"]["durability"]["kind"] == "fsync"
    for sc in data["scenarios"].values():
        assert "loadavg_before" in sc
        assert "loadavg_after" in sc


def _row(data: dict[str, Any], scenario: str, key: str, label: str) -> dict[str, Any]:
    (param,) = [p for p in data["scenarios"][scenario]["params"] if p["key"] == key]
    (row,) = [r for r in param["rows"] if r["label"] == label]
    return row  # type: ignore[no-any-return]


def test_ratios_compare_like_with_like(quick: tuple[dict[str, Any], str]) -> None:
    data, _ = quick
    ours = _row(data, "linear", "state=200", "ckptlog-process")
    assert ours["reference"] == "ckptlog-process"
    assert ours["ratio"] == pytest.approx(1.0)
    sqlite = _row(data, "linear", "state=200", "oa-sqlite-pickle")
    assert sqlite["reference"] == "ckptlog-process"  # WAL + NORMAL vs process, not fsync
    assert sqlite["ratio"] == pytest.approx(ours["rate_median"] / sqlite["rate_median"], rel=1e-3)
    assert sqlite["ratio_bytes"] == pytest.approx(
        sqlite["bytes_per_op"] / ours["bytes_per_op"], rel=1e-3
    )
    memory = _row(data, "fanout", "n=100,batching=0", "oa-memory · save_fan_out_internal")
    assert memory["reference"] == "ckptlog-process · save_fan_out_internal"
    if "lg-sqlite" in data["peers"]:
        assert _row(data, "linear", "state=200", "lg-sqlite")["reference"] == "ckptlog-fsync"
        writes = _row(data, "fanout", "n=100,batching=0", "lg-sqlite · put_writes")
        assert writes["reference"] == "ckptlog-fsync · save_instance"
        assert _row(data, "load", "h=100", "lg-sqlite")["reference"] == "ckptlog-process · sync"


def test_what_a_peer_cannot_express_is_na_with_its_reason(
    quick: tuple[dict[str, Any], str],
) -> None:
    data, _ = quick
    replay = _row(data, "replay", "h=100", "oa-sqlite-pickle")
    assert replay["status"] == "n/a"
    assert "upsert" in replay["reason"]
    batched = _row(data, "fanout", "n=100,batching=8", "oa-sqlite-pickle · save")
    assert batched["status"] == "n/a"
    assert "no save_fan_out_internal" in batched["reason"]
    assert _row(data, "list", "all", "lmdb-raw-process")["status"] == "n/a"
    if "lg-lmdb" in data["peers"]:
        filtered = _row(data, "list", "by_correlation", "lg-lmdb")
        assert filtered["status"] == "n/a"
        assert "ignores its filter" in filtered["reason"]
    if "techrevati-sqlite" in data["peers"]:
        assert _row(data, "list", "all", "techrevati-sqlite")["status"] == "n/a"


def test_report_writes_the_page_with_plots(
    quick: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    """With matplotlib (the bench extra) the page embeds both plots; a machine with the dev
    extras only gets the page without them (the next test pins that message)."""
    data, _ = quick
    doc = write_doc(data, tmp_path / "benchmarks.md", json_path=tmp_path / "bench.json")
    text = doc.read_text(encoding="utf-8")
    for name in SCENARIOS:
        assert f"## `{name}`" in text
    assert "```python" not in text  # docs/*.md python blocks are executed by test_docs
    if importlib.util.find_spec("matplotlib") is None:
        assert "Plots were not generated" in text
        return
    assert "](benchmarks/fanout.png)" in text
    assert "](benchmarks/load.png)" in text
    assert (tmp_path / "benchmarks" / "fanout.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "benchmarks" / "load.png").read_bytes().startswith(b"\x89PNG")


def test_report_without_matplotlib_says_so(
    quick: tuple[dict[str, Any], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, _ = quick
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    doc = write_doc(data, tmp_path / "benchmarks.md", json_path=tmp_path / "bench.json")
    text = doc.read_text(encoding="utf-8")
    assert "Plots were not generated: matplotlib is not installed" in text
    assert ".png)" not in text
    assert not (tmp_path / "benchmarks").exists()


def test_report_command_regenerates_from_json(
    quick: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    data, _ = quick
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(data), encoding="utf-8")
    doc = tmp_path / "out.md"
    assert main(["report", "--json", str(src), "--doc", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8").startswith("# Benchmarks")


def test_targets_are_judged_from_the_rows() -> None:
    def row(label: str, **kw: Any) -> dict[str, Any]:
        return {"label": label, "status": "ok", **kw}

    payload = {
        "scenarios": {
            "linear": {
                "params": [
                    {
                        "key": "state=200",
                        "label": "200 B state",
                        "rows": [row("oa-sqlite-pickle", ratio=6.0)],
                    }
                ]
            },
            "fanout": {
                "params": [
                    {
                        "key": "n=10000,batching=0",
                        "label": "N=10,000",
                        "rows": [
                            row(
                                "oa-sqlite-pickle · save",
                                ratio=8.0,
                                ratio_bytes=45.0,
                                rate_median=40.0,
                            ),
                            row("ckptlog-process · save_instance", rate_median=4000.0),
                        ],
                    }
                ]
            },
            "load": {
                "params": [
                    {
                        "key": f"h={h}",
                        "label": "",
                        "values": {"history": h},
                        "rows": [row("ckptlog-process", p50_us=p)],
                    }
                    for h, p in ((100, 10.0), (100_000, 30.0))
                ]
            },
        }
    }
    got = {t["name"]: t for t in compute_targets(payload)}
    assert got["linear 200 B state"]["met"] is True
    assert got["fanout N=10,000 saves/s"]["met"] is False
    assert got["fanout N=10,000 bytes written"]["met"] is True
    assert got["fanout N=10,000 saves/s, save_instance"]["value"] == pytest.approx(100.0)
    flat = got["load p50 flat (ckptlog-process)"]
    assert flat["value"] == pytest.approx(3.0)
    assert flat["met"] is False
    assert flat["note"] == "history capped at 100,000 saves"


def test_raw_ceiling_writes_exactly_ckptlogs_log_bytes(tmp_path: Path) -> None:
    """The raw peer's captured frames are the envelopes ckptlog stores in its log table."""
    ops = [save_op("inv", "corr", k, 200) for k in range(12)]

    async def go() -> tuple[list[bytes], list[bytes]]:
        ours = CkptlogPeer("process")
        await ours.open(tmp_path / "ours")
        for op in ops:
            await ours.save(op)
        assert ours.cp is not None
        with ours.cp.sync.log.backend.read() as txn:
            stored = [v for _, v in txn.scan("log")]
        await ours.close()
        return stored, RawLmdbPeer("process").prepare(ops)

    stored, captured = asyncio.run(go())
    assert len(stored) == 12
    assert captured == stored


def test_bad_arguments_exit_2_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--scenario", "nope"]) == 2
    assert "unknown scenario(s) ['nope']" in capsys.readouterr().err
    assert main(["run", "--backend", "postgres"]) == 2
    assert "unknown backend 'postgres'" in capsys.readouterr().err
    assert main(["run", "--quick", "--repeats", "0"]) == 2
    assert "--repeats must be at least 1, got 0" in capsys.readouterr().err
    assert main(["report", "--json", "/nonexistent/bench.json"]) == 2
    assert "no results at /nonexistent/bench.json" in capsys.readouterr().err
    assert main(["run", "--quick", "--frobnicate"]) == 2  # argparse's usage error, returned
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err
    assert main(["--help"]) == 0


def test_backend_selection_by_name_and_family() -> None:
    assert select([]) == PEER_NAMES
    assert select(["openarmature"]) == ("oa-sqlite-pickle", "oa-sqlite-json", "oa-memory")
    assert select(["ckptlog,lmdb-raw-fsync"]) == (
        "ckptlog-process",
        "ckptlog-fsync",
        "lmdb-raw-fsync",
    )
    peers, missing = all_peers(("oa-memory",))
    assert [p.name for p in peers] == ["oa-memory"]
    assert missing == {}


def test_list_command_names_peers_and_durability(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in SCENARIOS:
        assert name in out
    assert "ckptlog-process    process" in out


def test_progress_bar_writes_to_its_stream_only_when_enabled() -> None:
    stream = io.StringIO()
    bar = Progress(4, enabled=True, stream=stream)
    bar.step("linear 200 B", "ckptlog-process run 1/2")
    bar.step("linear 200 B", "ckptlog-fsync run 1/2")
    bar.advance_to(4, "fanout N=100")
    assert stream.getvalue().splitlines() == [
        "[ 25% 0m00s] linear 200 B",
        "[100% 0m00s] fanout N=100",
    ]
    quiet = io.StringIO()
    Progress(4, enabled=False, stream=quiet).step("x", "y")
    assert quiet.getvalue() == ""
