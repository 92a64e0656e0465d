"""``ckptlog`` as an investigator needs it (issue 14): right answers for every kind of stream
(LangGraph threads, techrevati threads, apflow tasks), safe on evidence copies, safe defaults,
escaped output, signals passed on, OS errors mapped to the documented exit codes; and the
investigator's options (history filters, json-patch diffs, did-you-mean, ISO times).

Every log here is written by the real integration (LangGraph's compiled graph on LmdbSaver,
techrevati's saver protocol on LogSaver, apflow's checkpoint manager on LogCheckpointManager);
``ckptlog`` runs as a subprocess, as a user runs it.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import test_cli
from test_cli import DEMO, SWEEP, ckptlog, one_error_line

from eventlog import CheckpointLog, CheckpointRecord, FanOutInstanceProgress, FanOutProgress
from eventlog.frames import Event

REPO = Path(__file__).resolve().parents[1]
real_log = test_cli.real_log  # the module-scoped fixture: a demo run plus a second job
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3


def unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run without root's power to ignore file modes: as root, in a new user
    namespace (``unshare -U``: same uid, no capabilities over the host's files)."""
    return ["unshare", "-U", *argv] if os.geteuid() == 0 else argv


def ckptlog_unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        unprivileged([sys.executable, "-m", "eventlog.cli", *args]),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


# -- logs written by the integrations -----------------------------------------------------------


class _State(TypedDict):
    items: Annotated[list[str], operator.add]
    n: int


def _langgraph_log(path: Path | str) -> None:
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    def plan(s: _State) -> dict[str, Any]:
        return {"items": ["plan"], "n": s["n"] + 1}

    def fetch(s: _State) -> dict[str, Any]:
        return {"items": ["fetch"], "n": s["n"] * 10}

    g = StateGraph(_State)
    g.add_node("plan", plan)
    g.add_node("fetch", fetch)
    g.add_edge(START, "plan")
    g.add_edge("plan", "fetch")
    g.add_edge("fetch", END)
    with LmdbSaver.open(path, durability="process") as saver:
        app = g.compile(checkpointer=saver)
        # durability="sync": each step's put lands before the next step's put_writes, so the
        # frame order the export test reads does not depend on LangGraph's background thread
        sync: Any = "sync"
        app.invoke(
            {"items": [], "n": 1}, {"configurable": {"thread_id": "thread-1"}}, durability=sync
        )
        app.invoke(
            {"items": ["x"], "n": 5}, {"configurable": {"thread_id": "thread-1"}}, durability=sync
        )
        app.invoke(
            {"items": [], "n": 2},
            {"configurable": {"thread_id": "thread-2", "checkpoint_ns": ""}},
            durability=sync,
        )


@pytest.fixture(scope="module", params=["lmdb", "postgres"])
def logs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A log of each integration, on LMDB and on PostgreSQL (the CLI once failed to read the
    integrations' tables of a PostgreSQL log, and ``verify`` skipped its views)."""
    from pg_schemas import PgSchemas  # noqa: PLC0415

    from eventlog.integrations.apflow import LogCheckpointManager  # noqa: PLC0415
    from eventlog.integrations.techrevati import LogSaver  # noqa: PLC0415

    base = tmp_path_factory.mktemp("integrations")
    schemas = PgSchemas()
    paths: dict[str, Any] = {k: base / k for k in ("lg", "tr", "ap")}
    if request.param == "postgres":
        paths = {k: schemas.url(v) for k, v in paths.items()}
    _langgraph_log(paths["lg"])
    with LogSaver.open(paths["tr"]) as s:
        s.put("th-1", {"x": 1})
        s.put("th-1", {"x": 2, "y": [1]}, metadata={"by": "agent"})
        s.put_step("th-1", "k1", {"z": 3})

    async def apflow() -> None:
        m = LogCheckpointManager.open(paths["ap"])
        await m.save_checkpoint("task-1", {"i": 1}, step_name="fetch")
        await m.save_checkpoint("task-1", {"i": 2}, step_name="parse")
        m.close()

    asyncio.run(apflow())
    yield paths
    schemas.drop_all()


def test_langgraph_thread_show_diff_history_replay_export(logs: dict[str, Any]) -> None:
    lg = str(logs["lg"])
    listed = ckptlog("ls", lg)
    assert listed.returncode == EXIT_OK, listed.stderr
    assert re.search(r"^thread-1\s+-\s+\d+\s+\S+\s+langgraph thread", listed.stdout, re.M)
    assert "no invocations" not in listed.stdout
    rows = {r["invocation_id"]: r for r in json.loads(ckptlog("ls", lg, "--json").stdout)}
    assert rows["lg:8:thread-1:"]["thread_id"] == "thread-1"
    assert rows["lg:8:thread-1:"]["type"] == "langgraph"

    show = ckptlog("show", lg, "thread-1", "--json")
    assert show.returncode == EXIT_OK, show.stderr
    doc = json.loads(show.stdout)
    values = doc["view"]["channel_values"]
    assert values["n"] == 60  # (5 + 1) * 10: the second run's end
    assert values["items"] == ["plan", "fetch", "x", "plan", "fetch"]
    assert doc["node"] == "fetch"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc["saved_at_iso"])
    text = ckptlog("show", lg, "--thread", "thread-1").stdout
    assert "deleted" not in text
    assert '"n": 60' in text
    assert ckptlog("show", lg, "--thread", "thread-1", "--ns", "").stdout == text

    last = doc["last_seq"]
    diff = ckptlog("diff", lg, "thread-1", "1", str(last - 1))
    assert diff.returncode == EXIT_OK, diff.stderr
    assert "(no changes)" not in diff.stdout
    assert re.search(r"^  \+ channel_values\.n: 6$", diff.stdout, re.M), diff.stdout
    patch = json.loads(ckptlog("diff", lg, "thread-1", "1", "latest", "--format",
                               "json-patch").stdout)  # fmt: skip
    assert {"op": "add", "path": "/channel_values/n", "value": 60} in patch

    hist = ckptlog("history", lg, "thread-1")
    assert hist.returncode == EXIT_OK
    made = [line.split()[-2] for line in hist.stdout.splitlines()[1:] if "checkpoint step" in line]
    assert "plan" in made
    assert "fetch" in made
    assert [r["seq"] for r in json.loads(ckptlog("history", lg, "thread-1", "--node", "fetch",
                                                  "--json").stdout)]  # fmt: skip
    replay = ckptlog("replay", lg, "thread-1", "--json")
    steps = [json.loads(x) for x in replay.stdout.splitlines()]
    assert len(steps) == last
    assert any(c["path"] == "channel_values.n" for s in steps for c in s["changes"])

    lines = [json.loads(x) for x in ckptlog("export", lg, "thread-1").stdout.splitlines()]
    types = [x["content"]["type"] for x in lines]
    # the input checkpoint comes first; LangGraph sends a step's writes from its background
    # executor, so where they land among the checkpoints is its choice, not the export's
    assert types[0] == "lg_checkpoint"
    assert set(types) == {"lg_checkpoint", "lg_writes"}
    assert [x["seq"] for x in lines] == list(range(1, len(lines) + 1))
    views = [json.loads(x) for x in ckptlog("export", lg, "thread-1", "--format", "jsonl")
             .stdout.splitlines()]  # fmt: skip
    assert views[-1]["view"]["channel_values"]["n"] == 60


def test_verify_checks_the_langgraph_views_of_a_postgresql_log(
    pg_schemas: Any, tmp_path: Path
) -> None:
    """``ckptlog verify`` of a PostgreSQL log folds a LangGraph thread's frames and compares
    its view rows, as on LMDB: a changed ``lg_blobs`` row is reported (exit 1). It used to
    leave the views out (the opened log did not have their tables) and answer OK."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    with LmdbSaver.open(url, durability="process") as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for step in range(3):
            cp: Any = {"v": 4, "id": f"{step:032d}", "ts": "2026-11-29T00:00:00+00:00",
                       "channel_values": {"n": step}, "channel_versions": {"n": step + 1},
                       "versions_seen": {}}  # fmt: skip
            config = saver.put(config, cp, {"step": step}, {"n": step + 1})
    clean = ckptlog("verify", url)
    assert clean.returncode == EXIT_OK, clean.stdout + clean.stderr
    schema = url.split("schema=", 1)[1]
    with psycopg.connect(pg_schemas.base_url, autocommit=True) as conn:
        table = sql.Identifier(schema, "lg_blobs")
        first = sql.SQL("(SELECT k FROM {} ORDER BY k LIMIT 1)").format(table)
        changed = conn.execute(
            sql.SQL("UPDATE {} SET v = %s WHERE k = {}").format(table, first), (bytes(8),)
        ).rowcount
    assert changed == 1
    damaged = ckptlog("verify", url)
    assert damaged.returncode == EXIT_PROBLEMS, damaged.stdout + damaged.stderr
    assert "[projection]" in damaged.stdout
    assert "lg blobs rows differ from the fold" in damaged.stdout


def test_techrevati_and_apflow_streams(logs: dict[str, Any]) -> None:
    tr, ap = str(logs["tr"]), str(logs["ap"])
    assert re.search(r"techrevati:th-1\s.*techrevati thread", ckptlog("ls", tr).stdout)
    doc = json.loads(ckptlog("show", tr, "th-1", "--json").stdout)
    assert doc["view"]["checkpoint"]["state"] == {"x": 2, "y": [1]}
    assert doc["view"]["checkpoint"]["metadata"] == {"by": "agent"}
    assert doc["view"]["steps"]["k1"]["state"] == {"z": 3}
    at1 = json.loads(ckptlog("show", tr, "techrevati:th-1", "--at", "1", "--json").stdout)
    assert at1["view"]["checkpoint"]["state"] == {"x": 1}
    diff = ckptlog("diff", tr, "th-1", "1", "2").stdout
    assert "~ checkpoint.state.x: 1 -> 2" in diff
    assert "deleted" not in ckptlog("show", tr, "th-1").stdout

    assert re.search(r"apflow:task-1\s.*apflow task", ckptlog("ls", ap).stdout)
    doc = json.loads(ckptlog("show", ap, "task-1", "--json").stdout)
    assert (doc["view"]["data"], doc["view"]["step_name"], doc["node"]) == ({"i": 2}, "parse",
                                                                            "parse")  # fmt: skip
    assert "~ data.i: 1 -> 2" in ckptlog("diff", ap, "task-1", "1", "2").stdout
    hist = json.loads(ckptlog("history", ap, "task-1", "--json").stdout)
    assert [h["node"] for h in hist] == ["fetch", "parse"]


def test_a_stream_of_application_events_is_refused_not_called_deleted(tmp_path: Path) -> None:
    path = tmp_path / "events"
    with CheckpointLog.open(path) as cl:
        cl.log.append("audit-1", Event(name="login", data={"user": "a"}, at=1.0))
        cl.log.flush()
    proc = ckptlog("show", str(path), "audit-1")
    assert proc.returncode == EXIT_USAGE
    assert "holds no checkpoint record" in one_error_line(proc)
    hist = ckptlog("history", str(path), "audit-1")
    assert hist.returncode == EXIT_OK
    assert "event" in hist.stdout


def test_unknown_id_suggests_close_ones(logs: dict[str, Any], real_log: Path) -> None:
    proc = ckptlog("show", str(real_log), "fanout-demo1")
    assert proc.returncode == EXIT_USAGE
    assert f"did you mean '{DEMO}'" in one_error_line(proc)
    lg = ckptlog("history", str(logs["lg"]), "--thread", "thread-3")
    assert lg.returncode == EXIT_USAGE
    assert "no LangGraph thread 'thread-3'" in one_error_line(lg)
    assert "did you mean" in one_error_line(lg)


# -- 1. export: a safe default ------------------------------------------------------------------


def test_export_defaults_to_frames_and_warns_before_a_huge_records_export(
    real_log: Path,
) -> None:
    st = json.loads(ckptlog("stats", str(real_log), "--json").stdout)
    default = ckptlog("export", str(real_log))
    assert default.returncode == EXIT_OK, default.stderr
    lines = [json.loads(x) for x in default.stdout.splitlines()]
    assert len(lines) == st["frames"]
    assert all("content" in x and "record" not in x for x in lines)  # frames, not records
    assert len(default.stdout) < 20 * st["data_file_bytes"]
    assert "warning" not in default.stderr

    # The filters narrow a whole-record export.
    narrowed = ckptlog("export", str(real_log), SWEEP, "--format", "jsonl", "--from", "10",
                       "--to", "12")  # fmt: skip
    got = [json.loads(x) for x in narrowed.stdout.splitlines()]
    assert [x["seq"] for x in got] == [10, 11, 12]
    assert got[0]["record"]["fan_out_progress"][0]["instances"][8]["state"] == "completed"
    kinds = ckptlog("export", str(real_log), "etl-7", "--kind", "fan_out_in_flight_failure")
    assert [json.loads(x)["seq"] for x in kinds.stdout.splitlines()] == [4]
    refused = ckptlog("export", str(real_log), "--json")
    assert refused.returncode == EXIT_USAGE
    assert "--json has no meaning here" in one_error_line(refused)
    loose = ckptlog("export", str(real_log), "--from", "3")
    assert loose.returncode == EXIT_USAGE


def test_a_whole_record_export_far_larger_than_the_log_warns(tmp_path: Path) -> None:
    """Whole records after every save: O(saves x record). A 2,000-instance sweep (2,001 saves of
    a 2,000-instance record) is some 30 times its log, far past the factor whatever the data
    file's size (the shared demo log sits near it, so its size decided); a small one is not."""
    path = tmp_path / "sweep.ckpt"
    items = 2000
    with CheckpointLog.open(path) as cl:
        sweep = FanOutProgress("scan", (), items, (FanOutInstanceProgress("not_started"),) * items)
        cl.save("big", CheckpointRecord("big", "sweep", {}, (), (), 1.0, fan_out_progress=(sweep,)))
        for i in range(items):
            cl.save_instance("big", "scan", i, FanOutInstanceProgress("completed", i * i))
        cl.save("small", CheckpointRecord("small", "nightly", {"rows": 1}, (), (), 2.0))
    warning = "ckptlog: warning: --format jsonl writes the whole record after every save"
    records = ckptlog("export", str(path), "big", "--format", "jsonl")
    assert records.returncode == EXIT_OK, records.stderr
    assert warning in records.stderr
    assert len(records.stdout.splitlines()) == items + 1
    small = ckptlog("export", str(path), "small", "--format", "jsonl")
    assert small.returncode == EXIT_OK, small.stderr
    assert warning not in small.stderr


# -- 3. evidence copies ---------------------------------------------------------------------------


def _evidence(real_log: Path, tmp_path: Path, *, lock: bool) -> Path:
    copy = tmp_path / ("with-lock" if lock else "no-lock")
    shutil.copytree(real_log, copy)
    if not lock:
        (copy / "lock.mdb").unlink()
    for f in copy.iterdir():
        f.chmod(0o444)
    copy.chmod(0o555)
    return copy


def _restore(copy: Path) -> None:
    copy.chmod(0o755)


def test_read_only_evidence_opens_and_nothing_is_written_to_it(
    real_log: Path,
    tmp_path: Path,
) -> None:
    for lock in (True, False):
        copy = _evidence(real_log, tmp_path, lock=lock)
        before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in copy.iterdir()}
        try:
            for args in (["verify"], ["ls"], ["history", DEMO], ["show", SWEEP], ["stats"]):
                proc = ckptlog_unprivileged(args[0], str(copy), *args[1:])
                assert proc.returncode == EXIT_OK, (lock, args, proc.stdout, proc.stderr)
                assert "truncated" not in proc.stdout + proc.stderr
            verify = ckptlog_unprivileged("verify", str(copy))
            assert verify.stdout.rstrip().endswith(": OK"), verify.stdout
            after = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in copy.iterdir()}
            assert after == before  # no lock.mdb created, nothing touched
        finally:
            _restore(copy)


def test_wrong_chain_key_is_named_not_called_tampering(tmp_path: Path) -> None:
    path = tmp_path / "keyed"
    key, wrong = tmp_path / "key", tmp_path / "wrong"
    key.write_bytes(b"the-right-chain-key")
    wrong.write_bytes(b"some-other-chain-key")
    with CheckpointLog.open(path, chain_key=key.read_bytes()) as cl:
        for i in range(3):
            cl.save("a", CheckpointRecord("a", "c", {"i": i}, (), (), float(i)))
    ok = ckptlog("verify", str(path), "--chain-key-file", str(key))
    assert ok.returncode == EXIT_OK, ok.stdout
    bad = ckptlog("verify", str(path), "--chain-key-file", str(wrong))
    assert bad.returncode == EXIT_PROBLEMS
    assert "wrong chain key" in bad.stdout
    assert "checksum mismatch" not in bad.stdout
    assert "changed after" not in bad.stdout
    doc = json.loads(ckptlog("verify", str(path), "--chain-key-file", str(wrong), "--json").stdout)
    assert [p["kind"] for p in doc["problems"]] == ["chain-key"]
    none = ckptlog("verify", str(path))
    assert none.returncode == EXIT_USAGE
    assert "--chain-key-file" in one_error_line(none)


# -- 5. signals reach the forked worker ----------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_sigterm_stops_the_worker_too_with_the_documented_status(
    real_log: Path,
) -> None:
    # The worker blocks writing into a pipe nobody reads: it is still running when the
    # parent gets SIGTERM (what `timeout` and CI send).
    proc = subprocess.Popen(
        [sys.executable, "-m", "eventlog.cli", "export", str(real_log), "--format", "jsonl"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not _children(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert workers, "the command runs in a forked worker"
        time.sleep(0.5)  # let it fill the pipe and block
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, raw = proc.communicate(timeout=30)  # drains and closes both pipes
    err = raw.decode()
    assert code == 128 + signal.SIGTERM, err
    assert "ckptlog: error: stopped by SIGTERM" in err
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists(), "the worker outlived the command"


# -- 6. escaped, aligned output ------------------------------------------------------------------


def test_ids_with_control_and_wide_characters_are_escaped_and_aligned(tmp_path: Path) -> None:
    path = tmp_path / "odd"
    ids = ["evil\x1b[2J", "two\nlines", "宽字符的调用", "plain"]
    with CheckpointLog.open(path) as cl:
        for i, inv in enumerate(ids):
            fan = FanOutProgress("fetch\x1b[31m", (), 1, (FanOutInstanceProgress("not_started"),))
            cl.save(inv, CheckpointRecord(inv, f"c\r{i}", {"k\x1b": "v\x9b"}, (), (), 1.0 + i,
                                          fan_out_progress=(fan,)))  # fmt: skip
    proc = ckptlog("ls", str(path))
    assert proc.returncode == EXIT_OK
    assert "\x1b" not in proc.stdout
    assert "\r" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 + len(ids)  # a newline in an id does not split a row
    assert any(line.startswith("evil\\x1b[2J ") for line in lines)
    assert any(line.startswith("two\\nlines ") for line in lines)
    from rich.cells import cell_len  # noqa: PLC0415

    # SAVES is right-aligned under its header, in terminal cells (wide characters take two).
    saves_end = cell_len(lines[0][: lines[0].index("SAVES") + len("SAVES")])
    ends = {cell_len(line[: line.index(" 1 ") + 2]) for line in lines[1:]}
    assert ends == {saves_end}, lines
    for inv in ids:
        for args in (["show", inv, "--full"], ["history", inv], ["replay", inv],
                     ["diff", inv, "0", "1"]):  # fmt: skip
            out = ckptlog(args[0], str(path), *args[1:])
            assert out.returncode == EXIT_OK, (args, out.stderr)
            assert "\x1b" not in out.stdout, (args, out.stdout)
            assert "\x9b" not in out.stdout, (args, out.stdout)
    assert "evil\\x1b[2J" in ckptlog("show", str(path), ids[0]).stdout


# -- 7. compact: OS errors map to documented codes -------------------------------------------------


def test_compact_dest_errors_are_usage_errors_and_create_nothing(
    real_log: Path,
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "dest"
    proc = ckptlog("compact", str(real_log), str(missing))
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert "does not exist" in one_error_line(proc)
    assert not (tmp_path / "no").exists()  # no parent created silently
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        ro = ckptlog_unprivileged("compact", str(real_log), str(locked / "dest"))
    finally:
        locked.chmod(0o755)
    assert ro.returncode == EXIT_USAGE, ro.stdout + ro.stderr
    line = one_error_line(ro)
    assert "internal error" not in line
    assert "not writable" in line
    assert list(locked.iterdir()) == []
    url = "postgresql://postgres@127.0.0.1:5432/test?schema=never_made"
    pg = ckptlog("compact", str(real_log), url)  # a URL is not a directory: say what to do
    assert pg.returncode == EXIT_USAGE, pg.stdout + pg.stderr
    assert "compact to a directory, then `ckptlog copy DIR URL`" in one_error_line(pg)


# -- investigators' options ----------------------------------------------------------------------


def test_history_limit_tail_reverse_node_and_min_gap(real_log: Path) -> None:
    def seqs(*args: str) -> list[int]:
        proc = ckptlog("history", str(real_log), SWEEP, "--json", *args)
        assert proc.returncode == EXIT_OK, proc.stderr
        return [r["seq"] for r in json.loads(proc.stdout)]

    every = seqs()
    assert seqs("-n", "3") == every[:3]
    assert seqs("--tail", "2") == every[-2:]
    assert seqs("--reverse", "--limit", "2") == every[::-1][:2]
    assert seqs("--node", "scan") == every[1:]  # each instance save completes a 'scan'
    rows = json.loads(ckptlog("history", str(real_log), SWEEP, "--json").stdout)
    longest = max(rows[1:], key=lambda r: r["gap"])
    assert longest["seq"] in seqs("--min-gap", str(longest["gap"]))
    assert all(r["saved_at_iso"].endswith("Z") for r in rows)
    text = ckptlog("history", str(real_log), SWEEP, "-n", "2").stdout.splitlines()
    assert len(text) == 3
    assert text[0].split()[:2] == ["SEQ", "SAVED"]
    assert text[2].split()[-2:] == ["scan", "1/300"]  # NODE, FAN-OUT DONE


def test_show_instances_by_state_and_diff_full_and_json_patch(real_log: Path) -> None:
    errors = ckptlog("show", str(real_log), "etl-7", "--at", "3", "--state", "error")
    assert re.search(r"^\s+1\s+completed\s+error: \"timeout\"", errors.stdout, re.M)
    assert not re.search(r"^\s+0\s+completed", errors.stdout, re.M)
    full = ckptlog("diff", str(real_log), DEMO, "1", "latest", "--full").stdout
    results = next(x for x in full.splitlines() if "state.results" in x)
    assert not results.endswith("...")  # the whole value
    assert len(results) > 1000
    patch = json.loads(ckptlog("diff", str(real_log), "etl-7", "2", "3", "--format",
                               "json-patch").stdout)  # fmt: skip
    assert patch[1:] == [
        {"op": "replace", "path": "/fan_out_progress/0/instances/1/state", "value": "completed"},
        {"op": "replace", "path": "/fan_out_progress/0/instances/1/result", "value": "timeout"},
        {"op": "replace", "path": "/fan_out_progress/0/instances/1/result_is_error", "value": True},
    ]
    for inv, a, b in (("etl-7", "1", "4"), (DEMO, "1", "latest"), (SWEEP, "0", "7")):
        ops = json.loads(ckptlog("diff", str(real_log), inv, a, b, "--format",
                                 "json-patch").stdout)  # fmt: skip
        before = _record(real_log, inv, a)
        assert apply_patch(before, ops) == _record(real_log, inv, b), inv


def _record(log: Path, inv: str, seq: str) -> Any:
    if seq == "0":
        return None
    return json.loads(ckptlog("show", str(log), inv, "--at", seq, "--json").stdout)["record"]


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 add/remove/replace (what ``diff --format json-patch`` emits), for checking."""
    for op in ops:
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        if not keys:
            doc = op.get("value")
            continue
        parent = doc
        for k in keys[:-1]:
            parent = parent[int(k)] if isinstance(parent, list) else parent[k]
        last: Any = int(keys[-1]) if isinstance(parent, list) else keys[-1]
        if op["op"] == "remove":
            del parent[last]
        elif op["op"] == "add" and isinstance(parent, list):
            parent.insert(last, op["value"])
        else:
            parent[last] = op["value"]
    return doc


def test_version_and_bench_help() -> None:
    version = ckptlog("--version")
    assert version.returncode == EXIT_OK
    assert re.match(r"ckptlog \S+", version.stdout)
    bench = ckptlog("bench", "--help")
    assert bench.returncode == EXIT_OK, bench.stderr
    assert "benchmarks" in bench.stdout.lower()


def test_history_changed_finds_the_first_seq_that_changed_a_path(
    real_log: Path, logs: dict[str, Any]
) -> None:
    def seqs(log: Path, inv: str, *args: str) -> list[int]:
        proc = ckptlog("history", str(log), inv, "--json", *args)
        assert proc.returncode == EXIT_OK, proc.stderr
        return [r["seq"] for r in json.loads(proc.stdout)]

    # state.results appears with the final save; the first save's state has no such key.
    assert seqs(real_log, DEMO, "--changed", "state.results") == [5]
    assert seqs(real_log, DEMO, "--changed", "state.results[3]") == [5]
    assert seqs(real_log, DEMO, "--changed", "state.phase") == [1, 5]
    assert seqs(real_log, SWEEP, "--changed", "scan[42]") == [1 + 43]  # its instance save
    assert seqs(real_log, "etl-7", "--changed", "fetch[1]", "-n", "1") == [3]
    lg = seqs(logs["lg"], "thread-1", "--changed", "channel_values.n")
    assert lg
    first = json.loads(ckptlog("show", str(logs["lg"]), "thread-1", "--at", str(lg[0]),
                               "--json").stdout)  # fmt: skip
    assert "n" in first["view"]["channel_values"]
    before = json.loads(ckptlog("show", str(logs["lg"]), "thread-1", "--at", str(lg[0] - 1),
                                "--json").stdout)  # fmt: skip
    assert "n" not in ((before["view"] or {}).get("channel_values") or {})


def test_search_across_invocations_for_a_value_or_an_id(
    real_log: Path, logs: dict[str, Any]
) -> None:
    from eventlog.demo import work  # noqa: PLC0415

    hits = json.loads(ckptlog("search", str(real_log), "timeout", "--json").stdout)
    assert [(h["invocation_id"], h["seq"]) for h in hits] == [("etl-7", 3)]
    assert hits[0]["match"] == 'instances[0].progress.result = "timeout"'
    value = str(work(256))  # saved by the resume's first batch, then in the final state
    found = json.loads(ckptlog("search", str(real_log), value, "--json").stdout)
    assert [(h["invocation_id"], h["seq"]) for h in found] == [(DEMO, 3), (DEMO, 5)]
    first = json.loads(ckptlog("search", str(real_log), value, "--first", "--json").stdout)
    assert [h["seq"] for h in first] == [3]
    corr = ckptlog("search", str(real_log), "nightly")
    assert re.search(r"^etl-7\s+\d+\s+\S+\s+invocation\s+correlation id$", corr.stdout, re.M)
    lg = json.loads(ckptlog("search", str(logs["lg"]), "fetch", "--json").stdout)
    assert any(h["match"].startswith("channel_values.items[") for h in lg)
    ap = json.loads(ckptlog("search", str(logs["ap"]), "parse", "--json").stdout)
    assert [(h["invocation_id"], h["seq"]) for h in ap] == [("apflow:task-1", 2)]
    none = ckptlog("search", str(real_log), "no-such-value-anywhere")
    assert none.returncode == EXIT_OK
    assert "no frame holds" in none.stdout
