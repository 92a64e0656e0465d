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
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_smoke import REPO, run_module

import benchmarks.instances as inst
from benchmarks.__main__ import main
from benchmarks.harness import Progress
from benchmarks.instances import result_of, run_cell
from benchmarks.peers import PEER_NAMES, all_peers, peer_from_origin, select
from benchmarks.peers.base import Peer
from benchmarks.peers.ckptlog import CkptlogPeer
from benchmarks.peers.raw import RawLmdbPeer
from benchmarks.peers.rows import JsonlPeer, LmdbRowsPeer, SqliteRowsPeer
from benchmarks.report import compute_targets, write_doc
from benchmarks.scenarios import SCENARIOS, save_op

STATUSES = {"ok", "n/a", "skipped", "error"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """One ``--quick`` run of every scenario and every installed peer, in a subprocess (as
    ``make bench-smoke`` runs it), with its JSON and stdout: 46 s, so its tests are ``long``
    (``make test-long``, which CI runs)."""
    out = tmp_path_factory.mktemp("bench") / "bench.quick.json"
    stdout = run_module("benchmarks", "run", "--quick", "--out", str(out), timeout=300)
    assert not out.with_name(out.name + ".tmp").exists()
    return json.loads(out.read_text(encoding="utf-8")), stdout


@pytest.mark.slow
@pytest.mark.long
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
                    repeats = data["settings"]["repeats"]
                    if name == "openloop":  # one run per load point: its saves are the sample
                        repeats = 1
                    assert len(row["runs"]) == repeats, where
                    assert row["p99_us"] is None or row["p999_us"] >= row["p99_us"], where
                    assert row["rate_min"] <= row["rate_median"] <= row["rate_max"], where
                else:
                    assert row["reason"], where


@pytest.mark.long
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
    # issue 26: the machine's limits on the stores' filesystem, the seed, the exact command
    assert data["limits"]["fdatasync"]["per_s"] > 0
    assert data["limits"]["lmdb_putmulti"]["rows_per_s"] > 0
    assert data["limits"]["mount"] == env["mount"]
    assert data["seed"] == 0
    assert data["command"].startswith("python -m benchmarks run --quick")
    for sc in data["scenarios"].values():
        assert "loadavg_before" in sc
        assert "loadavg_after" in sc


def _row(data: dict[str, Any], scenario: str, key: str, label: str) -> dict[str, Any]:
    (param,) = [p for p in data["scenarios"][scenario]["params"] if p["key"] == key]
    (row,) = [r for r in param["rows"] if r["label"] == label]
    return row  # type: ignore[no-any-return]


@pytest.mark.long
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


@pytest.mark.long
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


@pytest.mark.long
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


@pytest.mark.long
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


@pytest.mark.long
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


# -- the instances scenario, its peers, and --peer -------------------------------------------------

ROW_PEERS = [
    cls(mode) for cls in (SqliteRowsPeer, LmdbRowsPeer, JsonlPeer) for mode in ("fsync", "process")
]


@pytest.mark.parametrize("peer", ROW_PEERS, ids=lambda p: p.name)
def test_row_peers_commit_per_batch_and_read_back_what_they_wrote(
    peer: Peer, tmp_path: Path
) -> None:
    sink = peer.instance_sink(tmp_path, batch=4)
    try:
        sink.setup("job", 10)
        for i in range(10):
            sink.save(i, result_of(i))
        head, hist = sink.rows()  # type: ignore[attr-defined]
        assert (len(head), hist) == (8, 8)  # two batches of 4 committed, 2 rows pending
        sink.flush()
        head, hist = sink.rows()  # type: ignore[attr-defined]
        assert head == {i: result_of(i) for i in range(10)}
        assert hist == 10
        assert sink.probe(10) == {}
        with pytest.raises(AssertionError, match="saved 9"):
            sink.probe(9)
        sink.save(3, {"item": 3, "ok": False})  # a head row is upserted, history appended
        sink.flush()
        head, hist = sink.rows()  # type: ignore[attr-defined]
        assert head[3] == {"item": 3, "ok": False}
        assert (len(head), hist) == (10, 11)
    finally:
        sink.close()


CELL_PEERS = ["ckptlog-process", "ckptlog-fsync", *(p.name for p in ROW_PEERS)]


@pytest.mark.parametrize("name", CELL_PEERS)
def test_an_instances_cell_saves_every_row_and_checks_the_store(name: str, tmp_path: Path) -> None:
    spec = {"peer": name, "n": 600, "batch": 256, "budget_s": 600.0, "path": str(tmp_path / "s")}
    out = asyncio.run(run_cell(spec, peer_from_origin(name)))
    assert out["ops"] == 600
    assert out["partial"] is False
    assert out["bytes_written"] > 0
    assert out["extra"]["peak_rss_bytes"] > 1 << 20
    assert out["extra"]["store_bytes_per_row"] > 0
    if name.startswith("ckptlog"):  # reopened and checked: 600 completed instances
        assert out["extra"]["load_ms"] > 0
        assert out["extra"]["record_at_ms"] > 0
        assert out["extra"]["mid_seq"] >= 1
    else:
        assert set(out["extra"]) == {"peak_rss_bytes", "store_bytes_per_row"}


@pytest.mark.parametrize("name", ["ckptlog-process", "sqlite-rows-process", "jsonl-fsync"])
def test_an_instances_cell_past_its_budget_stops_at_a_batch_and_says_partial(
    name: str, tmp_path: Path
) -> None:
    spec = {"peer": name, "n": 2000, "batch": 256, "budget_s": 0.0, "path": str(tmp_path / "s")}
    out = asyncio.run(run_cell(spec, peer_from_origin(name)))
    assert out["ops"] == 256  # the first batch boundary; the store holds exactly these (probe)
    assert out["partial"] is True


@pytest.mark.long
def test_instances_rows_in_the_smoke_run(quick: tuple[dict[str, Any], str]) -> None:
    data, stdout = quick
    sc = data["scenarios"]["instances"]
    assert sc["metric"] == "rows/s"
    (param,) = sc["params"]
    assert param["values"] == {"n": 1000, "batch": 256, "budget_s": 20.0}
    for mode in ("fsync", "process"):
        ours = _row(data, "instances", "n=1000", f"ckptlog-{mode} · save_instance")
        assert ours["status"] == "ok"
        assert ours["ops_per_run"] == 1000
        assert {"load_ms", "record_at_ms", "peak_rss_bytes"} <= set(ours["extra"])
        for peer in ("sqlite-rows", "lmdb-rows", "jsonl"):
            row = _row(data, "instances", "n=1000", f"{peer}-{mode}")
            assert row["status"] == "ok", row.get("reason")
            assert row["reference"] == f"ckptlog-{mode} · save_instance"
            # the JSON keeps 4 decimals (harness._round): a ratio under 0.05 is only that exact
            assert row["ratio"] == pytest.approx(
                ours["rate_median"] / row["rate_median"], rel=1e-3, abs=5e-5
            )
            assert data["peers"][f"{peer}-{mode}"]["durability"]["kind"] == mode
    assert "synchronous=FULL" in data["peers"]["sqlite-rows-fsync"]["durability"]["detail"]
    assert "synchronous=NORMAL" in data["peers"]["sqlite-rows-process"]["durability"]["detail"]
    na = _row(data, "instances", "n=1000", "oa-sqlite-pickle")
    assert na["status"] == "n/a"
    assert "no per-instance save" in na["reason"]
    assert _row(data, "linear", "state=200", "jsonl-fsync")["status"] == "n/a"
    assert "peak RSS of the run's process" in stdout
    names = {t["name"] for t in data["targets"]}
    for variant in ("save_instance", "save_instances"):
        assert f"instances N=1,000 fsync {variant} vs sqlite-rows" in names
        bulk = _row(data, "instances", "n=1000", f"ckptlog-fsync · {variant}")
        assert bulk["status"] == "ok"
        assert bulk["ops_per_run"] == 1000
        assert {"largest_frame_bytes", "largest_frame_stored_bytes"} <= set(bulk["extra"])


@pytest.mark.long
def test_partial_runs_are_marked_in_tables_and_targets(
    quick: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    data = json.loads(json.dumps(quick[0]))
    row = _row(data, "instances", "n=1000", "ckptlog-fsync · save_instance")
    row["partial_runs"] = 1
    row["runs"][0]["partial"] = True
    text = write_doc(data, tmp_path / "b.md", json_path=tmp_path / "b.json").read_text("utf-8")
    assert f"{row['rate_median']:,.0f}* (=)" in text
    assert "ckptlog-fsync · save_instance (N=1,000): * partial: 1 of 2 runs stopped" in text
    (t,) = [
        t
        for t in compute_targets(data)
        if t["name"] == "instances N=1,000 fsync save_instance vs jsonl"
    ] or [None]
    assert t is None  # jsonl is no target peer
    (t,) = [
        t
        for t in compute_targets(data)
        if t["name"] == "instances N=1,000 fsync save_instance vs lmdb-rows"
    ]
    assert t["note"] == "partial runs (stopped at the budget)"
    big = json.loads(json.dumps(data))  # a partial run is no whole job: its RSS is not judged
    big["scenarios"]["instances"]["params"][0]["values"]["n"] = 1_000_000
    (rss,) = [t for t in compute_targets(big) if t["name"].endswith("fsync peak RSS (GiB)")]
    assert rss["met"] is None
    assert rss["value"] > 0
    (rss,) = [t for t in compute_targets(big) if t["name"].endswith("process peak RSS (GiB)")]
    assert rss["met"] is True


@pytest.mark.slow
@pytest.mark.long
def test_user_peers_run_beside_the_built_in_ones(tmp_path: Path) -> None:
    """--peer with an openarmature Checkpointer (ckptlog's own, stated process), a LangGraph
    BaseCheckpointSaver (durability unstated: fsync) and a bare protocol store without
    save_instance; instances cells run in subprocesses that import the factory module too."""
    out = tmp_path / "bench.json"
    specs = [
        "bench_peer_factories:ckptlog_checkpointer",
        "bench_peer_factories:lg_sqlite_saver",
        "bench_peer_factories:dict_checkpointer",
    ]
    argv = ["run", "--quick", "--scenario", "linear,instances", "--backend", "ckptlog"]
    argv += [a for s in specs for a in ("--peer", s)]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["complete"] is False
    oa, lg, bare = specs
    assert data["peers"][oa]["durability"]["kind"] == "process"
    assert "Checkpointer protocol" in data["peers"][oa]["api"]
    assert data["peers"][lg]["durability"]["kind"] == "fsync"
    assert "not stated" in data["peers"][lg]["durability"]["detail"]
    assert "BaseCheckpointSaver" in data["peers"][lg]["api"]
    assert data["peers"][bare]["durability"]["kind"] == "none"
    for label, ref in (
        (oa, "ckptlog-process"),
        (lg, "ckptlog-fsync"),
        (bare, "ckptlog-process"),
    ):
        row = _row(data, "linear", "state=200", label)
        assert row["status"] == "ok", row.get("reason")
        assert row["reference"] == ref
        assert row["ratio"] is not None
    mine = _row(data, "instances", "n=1000", f"{oa} · save_instance")
    assert mine["status"] == "ok", mine.get("reason")
    assert mine["reference"] == "ckptlog-process · save_instance"
    assert mine["ops_per_run"] == 1000
    assert "load_ms" in mine["extra"]
    writes = _row(data, "instances", "n=1000", f"{lg} · put_writes")
    assert writes["status"] == "ok", writes.get("reason")
    assert writes["reference"] == "ckptlog-fsync · save_instance"
    no_instance = _row(data, "instances", "n=1000", f"{bare} · save_instance")
    assert no_instance["status"] == "n/a"
    assert "no save_instance" in no_instance["reason"]


def test_a_peer_that_is_no_store_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--quick", "--peer", "bench_peer_factories:not_a_store"]) == 2
    err = capsys.readouterr().err
    assert "implements neither openarmature's Checkpointer protocol" in err
    assert "builtins.object" in err
    assert main(["run", "--quick", "--peer", "bench_peer_factories"]) == 2
    assert "--peer expects package.module:factory" in capsys.readouterr().err
    assert main(["run", "--quick", "--peer", "no_such_module_xyz:f"]) == 2
    assert "cannot import 'no_such_module_xyz'" in capsys.readouterr().err
    assert main(["run", "--quick", "--peer", "bench_peer_factories:nope"]) == 2
    assert "has no attribute 'nope'" in capsys.readouterr().err
    assert main(["run", "--quick", "--instances-n", "10,x"]) == 2
    assert "--instances-n expects positive integers" in capsys.readouterr().err
    assert main(["run", "--quick", "--cell-budget", "0"]) == 2
    assert "--cell-budget must be positive, got 0.0" in capsys.readouterr().err


def test_bench_list_and_a_run_work_without_openarmature(tmp_path: Path) -> None:
    """issue 13: `ckptlog bench list` with openarmature not importable; a run of ckptlog falls
    back to ckptlog's own record types."""
    block = "import sys; sys.modules['openarmature'] = None; from eventlog.cli import main; "
    out = tmp_path / "b.json"
    for args in (
        ["bench", "list"],
        ["bench", "run", "--quick", "--scenario", "linear,instances", "--backend", "ckptlog,jsonl",
         "--repeats", "1", "--no-progress", "--out", str(out)],
    ):  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-c", block + f"sys.exit(main({args!r}))"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        if args[1] == "list":
            assert "instances" in proc.stdout
            assert "ckptlog-process    process" in proc.stdout
            assert "oa-sqlite-pickle   n/a      not installed (openarmature" in proc.stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert _row(data, "linear", "state=200", "ckptlog-process")["status"] == "ok"
    assert _row(data, "instances", "n=1000", "jsonl-fsync")["status"] == "ok"


def test_a_full_report_keeps_the_sections_other_scripts_wrote_in_place() -> None:
    """A full run regenerates the page; a section it does not render (an issue's own run, from
    its own JSON) stays, after the section it followed, and a rendered one is replaced."""
    from benchmarks.report import with_kept_sections  # noqa: PLC0415

    old = "# B\n\nintro\n\n## A\nold a\n\n## Mine\nkept\n\n## C\nold c\n\n## Last\nkept too\n"
    page = "# B\n\nnew intro\n\n## A\nnew a\n\n## C\nnew c\n"
    got = with_kept_sections(old, page)
    assert [line for line in got.splitlines() if line.startswith("## ")] == [
        "## A",
        "## Mine",
        "## C",
        "## Last",
    ]
    assert "new a" in got
    assert "old a" not in got
    assert "kept\n" in got
    assert "kept too" in got
    assert "new intro" in got
    assert with_kept_sections(got, page) == got
    assert with_kept_sections("", page).count("## ") == 2


def test_an_instances_run_marks_every_million_even_when_no_batch_ends_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A million is not a multiple of the batch (256): each mark is the first batch end past
    it (the marks were once taken only where both divide, every 4,000,000 rows)."""

    class Sink:
        def save(self, index: int, result: Any) -> None:
            pass

        def flush(self) -> None:
            pass

    monkeypatch.setattr(inst, "MILLION", 1000)
    marks: list[float] = []
    done, _ = inst._rows_sync(Sink(), 3000, 256, 60.0, marks)  # type: ignore[arg-type]
    assert done == 3000
    assert len(marks) == 3  # the start, past 1,000 (at 1,024) and past 2,000 (at 2,048)


def test_limits_beaten_by_the_raw_lmdb_rows_of_their_own_run_are_flagged() -> None:
    """A limit measured while the disk was shared undercounts it: the run's own raw py-lmdb row
    (one synced commit per save) then beats it, and the report says so instead of printing a
    fraction of 20 as if it meant something. A batched (concurrent) row does not count."""
    from benchmarks.report_runs import undercounted_limit  # noqa: PLC0415

    def row(scenario: str, label: str, fraction: float) -> list[str]:
        return [f"`{scenario}`", "p", label, "x", "y", f"**{fraction:.2f}**"]

    fine = [row("linear", "ckptlog-fsync", 0.6), row("linear", "lmdb-raw-fsync", 0.95)]
    assert undercounted_limit(fine) is None
    assert undercounted_limit([*fine, row("concurrent", "lmdb-raw-fsync", 500.0)]) is None
    beaten = [*fine, row("instances", "lmdb-rows-fsync", 3.2)]
    assert undercounted_limit(beaten) == 3.2


def test_a_partial_run_refreshes_the_targets_it_measured_and_says_so(tmp_path: Path) -> None:
    """``--doc`` after a run of some scenarios replaces the Targets rows that run measured
    (marked with its time) and adds the ones the table lacked; the other rows stay, and a line
    under the table names each partial run whose rows are still there (a later run of the
    same rows replaces the earlier one's line)."""
    from benchmarks.report import PARTIAL_MARK, refresh_targets  # noqa: PLC0415

    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\n## Targets\n\n"
        "| target | definition | measured | goal |  |\n|---|---|---:|---:|---|\n"
        "| linear 200 B state | a | 5.13 | >= 5 | met |\n"
        "| instances N=10,000 fsync save_instance vs sqlite-rows | b | 0.70 | >= 1.2 | "
        "**missed** |\n\nA paragraph about the table.\n\n## Environment\n\nkept\n",
        encoding="utf-8",
    )

    def target(name: str, value: float | None, met: bool | None) -> dict[str, Any]:
        return {"name": name, "definition": "d", "value": value, "target": ">= 1.2", "met": met}

    def run(at: str, command: str, targets: list[dict[str, Any]]) -> None:
        payload = {
            "command": command,
            "environment": {"timestamp_utc": at, "git": {"commit": "abcdef0123", "dirty": False}},
            "targets": targets,
        }
        refresh_targets(doc, payload, "benchmarks/results/bench.partial.json")

    inst = "instances N=10,000 fsync save_instance vs sqlite-rows"
    for value in (1.31, 1.25):  # the same rows again: the second run's line replaces the first
        run(
            "2026-11-28T19:50:01+00:00" if value == 1.25 else "2026-11-28T19:40:01+00:00",
            "python -m benchmarks run --scenario instances",
            [
                target(inst, value, True),
                target("instances N=10,000,000 fsync save_instance completes", 1.0, True),
                target("linear 4 KiB state", None, None),  # not measured: left alone
            ],
        )
    run("2026-11-28T20:00:01+00:00", "python -m benchmarks run --scenario linear", [
        target("linear 200 B state", 4.9, False)
    ])  # fmt: skip
    text = doc.read_text(encoding="utf-8")
    at_1950, at_2000 = f"*{PARTIAL_MARK} 2026-11-28 19:50*", f"*{PARTIAL_MARK} 2026-11-28 20:00*"
    assert f"| {inst} | d | 1.25 | >= 1.2 | met · {at_1950} |" in text
    assert f"| linear 200 B state | d | 4.90 | >= 1.2 | **missed** · {at_2000} |" in text
    assert "1.31" not in text
    assert "0.70" not in text
    assert "5.13" not in text
    assert f"| 1.00 | >= 1.2 | met · {at_1950} |" in text  # a row the table lacked
    assert "linear 4 KiB state" not in text
    assert "19:40" not in text  # no row of that run is left: its line is gone
    assert text.count(f"Rows marked {at_1950}") == 1
    assert text.count(f"Rows marked {at_2000}") == 1
    assert (
        "`python -m benchmarks run --scenario instances` (2026-11-28 19:50 UTC on `abcdef0`" in text
    )
    assert text.index("Rows marked") < text.index("A paragraph about the table")
    assert text.endswith("## Environment\n\nkept\n")
