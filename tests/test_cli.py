"""``ckptlog`` run as a user runs it: a subprocess, against a log written by a real run.

The log is made by the demo (``python -m eventlog.demo``: a worker SIGKILLed part-way, then a
resume; its buffered instance saves commit as batch frames, so the demo invocation has only a
few frames) plus a second process that saves, fails and deletes more invocations and saves a
fan-out instance by instance without batching (a frame each: a long history with snapshots and
runs of deltas). Each damaged case copies the log and damages the copy on disk (a corrupted
byte, a removed frame, a truncated ``data.mdb``): ``verify`` names each problem and exits 1;
the other commands print what is readable, name what is not and exit non-zero where they could
not read what was asked. A writer in another process keeps committing while read commands run
(read-only never blocks).

Also runnable as a script: ``python tests/test_cli.py write PATH`` adds the second process's
invocations to the log at PATH.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
DEMO = "fanout-demo-1"
# The demo's frames (flush_every=256, 600 items, killed at item 300): 1 the first save; 2 the
# worker's one committed batch (items 0..255; its saves of 256..299 were still buffered when it
# was killed); 3 the resume's first batch (256..511, written as a snapshot: the deltas since
# seq 1 outweigh it); 4 its last batch (512..599), flushed by 5, the final save.
DEMO_SAVES = 5
WORKER_BATCH, RESUME_BATCH = 2, 3
SWEEP = "sweep-1"  # saved instance by instance, unbatched: a frame per save
SWEEP_ITEMS = 300
SWEEP_SAVES = 1 + SWEEP_ITEMS
EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3


def ckptlog(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "eventlog.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ckptlog: error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


# -- the log: a real run ------------------------------------------------------------------------


def write_more(path: str) -> None:
    """A second job on the same log: a failed invocation, a deleted one, another batch, and a
    fan-out saved instance by instance without batching."""
    import msgspec  # noqa: PLC0415 - only the script needs these

    from eventlog import (  # noqa: PLC0415
        CheckpointLog,
        CheckpointRecord,
        FanOutInstanceProgress,
        FanOutProgress,
        NodePosition,
    )

    t = time.time()
    with CheckpointLog.open(path) as cl:
        fan = FanOutProgress("fetch", (), 3, (FanOutInstanceProgress("not_started"),) * 3)
        base = CheckpointRecord(
            "etl-7", "nightly", {"rows": 0}, (NodePosition((), "extract", 0),), (), t,
            fan_out_progress=(fan,),
        )  # fmt: skip
        cl.save("etl-7", base)
        cl.save_instance("etl-7", "fetch", 0, FanOutInstanceProgress("completed", {"rows": 10}))
        cl.save_instance("etl-7", "fetch", 1, FanOutInstanceProgress("completed", "timeout", True))
        failing = FanOutProgress("fetch", (), 3, (
            FanOutInstanceProgress("completed", {"rows": 10}),
            FanOutInstanceProgress("completed", "timeout", True),
            FanOutInstanceProgress("in_flight"),
        ))  # fmt: skip
        cl.save_fan_out_in_flight_failure(
            "etl-7", msgspec.structs.replace(base, fan_out_progress=(failing,), last_saved_at=t + 1)
        )
        for i, inv in enumerate(("etl-8", "etl-9")):
            cl.save(inv, CheckpointRecord(inv, "nightly", {"rows": i}, (), (), t + i))
        cl.delete("etl-9")
        sweep = FanOutProgress("scan", (), SWEEP_ITEMS, (FanOutInstanceProgress("not_started"),)
                               * SWEEP_ITEMS)  # fmt: skip
        cl.save(SWEEP, CheckpointRecord(SWEEP, "sweep", {"phase": "scan"}, (), (), t,
                                        fan_out_progress=(sweep,)))  # fmt: skip
        for i in range(SWEEP_ITEMS):
            cl.save_instance(SWEEP, "scan", i, FanOutInstanceProgress("completed", i * i))


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "run.ckpt"
    demo = subprocess.run(
        [sys.executable, "-m", "eventlog.demo", "--path", str(path), "--items", "600",
         "--kill-at", "300"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    more = subprocess.run(
        [sys.executable, str(Path(__file__)), "write", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert more.returncode == 0, more.stderr
    return path


@pytest.fixture
def log_copy(real_log: Path, tmp_path: Path) -> Path:
    """A private copy of the real log, to damage."""
    path = tmp_path / "copy.ckpt"
    shutil.copytree(real_log, path)
    return path


# -- help, usage errors, exit codes ------------------------------------------------------------


def test_help_lists_commands_and_exit_codes() -> None:
    proc = ckptlog("--help")
    assert proc.returncode == EXIT_OK
    for cmd in ("ls", "show", "history", "diff", "replay", "export", "verify", "stats",
                "compact", "bench"):  # fmt: skip
        assert re.search(rf"^\s+{cmd}\s", proc.stdout, re.M), cmd
    assert "exit status:" in proc.stdout
    for code, meaning in (("0", "success"), ("1", "verify found problems"), ("2", "usage"),
                          ("3", "PATH is not a ckptlog log")):  # fmt: skip
        assert re.search(rf"^\s+{code}\s+{meaning}", proc.stdout, re.M), meaning


def test_console_script_is_installed(real_log: Path) -> None:
    script = Path(sys.executable).parent / "ckptlog"
    assert script.exists(), "pip install -e . declares the ckptlog console script"
    proc = subprocess.run(
        [str(script), "ls", str(real_log)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == EXIT_OK, proc.stderr
    assert DEMO in proc.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["frob"], EXIT_USAGE, r"invalid choice: 'frob'"),
        (["show"], EXIT_USAGE, r"required: PATH"),
        (["show", "{log}"], EXIT_USAGE, r"give an invocation ID"),
        (["show", "{log}", "nobody"], EXIT_USAGE, r"no invocation 'nobody' in the log"),
        (["show", "{log}", DEMO, "--at", "9999"], EXIT_USAGE, r"seq 9999 is outside"),
        (
            ["show", "{log}", DEMO, "--as-of", "yesterday"],
            EXIT_USAGE,
            r"cannot read 'yesterday' as a time",
        ),
        (["diff", "{log}", DEMO, "1", "x"], EXIT_USAGE, r"seq must be a number or 'latest'"),
        (["history", "{log}", DEMO, "--kind", "oops"], EXIT_USAGE, r"unknown history kind"),
        (["compact", "{log}", "{log}"], EXIT_USAGE, r"DEST is the source log"),
        (["compact", "{log}", "{tmp}/d", "--keep", "last=0"], EXIT_USAGE, r"--keep last=N needs"),
        (["ls", "{tmp}/missing"], EXIT_UNREADABLE, r"no ckptlog log at"),
        (["verify", "{file}"], EXIT_UNREADABLE, r"no ckptlog log at"),
    ],
)
def test_errors_are_one_line_with_the_documented_status(
    real_log: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    (tmp_path / "f.txt").write_text("not a log")
    filled = [a.format(log=real_log, tmp=tmp_path, file=tmp_path / "f.txt") for a in args]
    proc = ckptlog(*filled)
    assert proc.returncode == code, proc.stderr
    assert re.search(message, one_error_line(proc)), proc.stderr
    assert proc.stdout == ""


# -- reading a healthy log ---------------------------------------------------------------------


def columns(line: str) -> list[int]:
    """Start offsets of the whitespace-separated fields of ``line``."""
    return [m.start() for m in re.finditer(r"\S+", line)]


def test_ls_table_json_and_filters(real_log: Path) -> None:
    proc = ckptlog("ls", str(real_log))
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["INVOCATION", "CORRELATION", "SAVES", "LAST", "SAVED", "(UTC)",
                                "KIND", "NODES", "FAN-OUT"]  # fmt: skip
    head = lines[0]
    for line in lines[1:]:  # aligned: each row's KIND starts under the KIND header
        assert line[head.index("KIND") - 1] == " "
    assert "\x1b[" not in proc.stdout  # piped: no colour
    rows = json.loads(ckptlog("ls", str(real_log), "--json").stdout)
    by_id = {r["invocation_id"]: r for r in rows}
    assert set(by_id) == {DEMO, "etl-7", "etl-8", SWEEP}
    assert (by_id[DEMO]["frames"], by_id[SWEEP]["frames"]) == (DEMO_SAVES, SWEEP_SAVES)
    assert (by_id["etl-7"]["completed_instances"], by_id["etl-7"]["error_instances"]) == (2, 1)
    nightly = json.loads(
        ckptlog("ls", str(real_log), "--correlation-id", "nightly", "--json").stdout
    )
    assert sorted(r["invocation_id"] for r in nightly) == ["etl-7", "etl-8"]
    everything = ckptlog("ls", str(real_log), "--all")
    assert re.search(r"^etl-9\s.*deleted", everything.stdout, re.M)


def test_show_latest_at_and_as_of(real_log: Path) -> None:
    latest = ckptlog("show", str(real_log), DEMO)
    assert latest.returncode == EXIT_OK, latest.stderr
    assert re.search(rf"seq\s+{DEMO_SAVES} of {DEMO_SAVES}", latest.stdout)
    assert '"phase": "done"' in latest.stdout
    # The worker committed one batch (items 0..255) before it died; the resume's first batch
    # completed 256..511.
    for seq, done in ((WORKER_BATCH, 256), (RESUME_BATCH, 512)):
        at = ckptlog("show", str(real_log), DEMO, "--at", str(seq), "--json")
        doc = json.loads(at.stdout)
        assert doc["seq"] == seq
        states = [i["state"] for i in doc["record"]["fan_out_progress"][0]["instances"]]
        assert states == ["completed"] * done + ["not_started"] * (600 - done)
    as_of = ckptlog("show", str(real_log), DEMO, "--as-of", str(doc["record"]["last_saved_at"]),
                    "--json")  # fmt: skip
    assert json.loads(as_of.stdout)["seq"] == RESUME_BATCH
    human = ckptlog("show", str(real_log), DEMO, "--at", str(WORKER_BATCH))
    assert re.search(rf"seq\s+{WORKER_BATCH} of {DEMO_SAVES} \(fan_out_internal, delta frame\)",
                     human.stdout)  # fmt: skip
    assert "600 instances: 256 completed, 0 in flight, 344 not started" in human.stdout
    human = ckptlog("show", str(real_log), "etl-7", "--at", "3", "--instances")
    assert "fan-out fetch: 3 instances: 2 completed (1 errors)" in human.stdout
    assert re.search(r"^\s+1\s+completed\s+error: \"timeout\"", human.stdout, re.M)
    before = ckptlog("show", str(real_log), DEMO, "--at", "0")
    assert before.returncode == EXIT_OK
    assert "no record at seq 0" in before.stdout


def test_history_replay_and_diff(real_log: Path) -> None:
    from eventlog.demo import work  # noqa: PLC0415 - the script part needs no eventlog import

    hist = ckptlog("history", str(real_log), DEMO)
    assert hist.returncode == EXIT_OK, hist.stderr
    rows = hist.stdout.splitlines()[1:]
    assert len(rows) == DEMO_SAVES
    assert rows[0].split()[3:5] == ["save", "snapshot"]
    # A batch is one row, saying how many instance saves it commits.
    assert rows[WORKER_BATCH - 1].split()[3:6] == ["fan_out_internal", "x256", "delta"]
    assert rows[WORKER_BATCH - 1].split()[-1] == "256/600"
    assert rows[RESUME_BATCH - 1].split()[3] == "fan_out_internal"
    assert rows[RESUME_BATCH - 1].split()[-1] == "512/600"
    assert rows[3].split()[3:6] == ["fan_out_internal", "x88", "delta"]
    assert rows[-1].split()[3] == "save"
    saves = json.loads(ckptlog("history", str(real_log), DEMO, "--json", "--kind", "save").stdout)
    assert [e["seq"] for e in saves] == [1, DEMO_SAVES]
    t = saves[-1]["saved_at"]
    window = json.loads(ckptlog("history", str(real_log), DEMO, "--json", "--since", str(t)).stdout)
    assert window[-1]["seq"] == DEMO_SAVES
    assert all(e["saved_at"] >= t for e in window)
    # Between the worker's last batch and the resume's first: the resume's 256 instances.
    diff = ckptlog("diff", str(real_log), DEMO, str(WORKER_BATCH), str(RESUME_BATCH))
    assert diff.returncode == EXIT_OK
    lines = diff.stdout.splitlines()
    assert lines[1] == f"  ~ process_items[256]: not_started -> completed  result {work(256)}"
    assert lines[-1] == "  ... 206 more instance changes (--full or --json)"
    pair = json.loads(
        ckptlog("diff", str(real_log), DEMO, str(WORKER_BATCH), str(RESUME_BATCH), "--json").stdout
    )
    assert [i["index"] for i in pair["changes"]["instances"]] == list(range(256, 512))
    doc = json.loads(ckptlog("diff", str(real_log), DEMO, "1", "latest", "--json").stdout)
    changes = doc["changes"]
    assert [p["node_name"] for p in changes["positions_added"]] == ["process_items"]
    assert {c["path"] for c in changes["state"]} == {"state.phase", "state.results"}
    assert changes["fan_outs"][0]["op"] == "removed"
    replay = ckptlog("replay", str(real_log), DEMO, "--from", "2", "--to", "4")
    assert re.findall(r"^seq (\d+) ", replay.stdout, re.M) == ["2", "3", "4"]
    seq = str(RESUME_BATCH)  # a snapshot frame: replayed alone, it still shows what it changed
    alone = ckptlog("replay", str(real_log), DEMO, "--from", seq, "--to", seq).stdout.splitlines()
    assert alone[0].endswith("fan_out_internal x256 (snapshot)")  # the batch it stands for
    # as diff WORKER_BATCH RESUME_BATCH, not "+ record created", each change with its time
    assert [line.split("  ", 2)[2] for line in alone[1:3]] == [x.strip() for x in lines[1:3]]
    steps = [
        json.loads(x)
        for x in ckptlog("replay", str(real_log), "etl-7", "--json").stdout.splitlines()
    ]
    assert [s["kind"] for s in steps] == ["save", "fan_out_internal", "fan_out_internal",
                                          "fan_out_in_flight_failure"]  # fmt: skip
    failed = steps[2]["changes"]["instances"][0]
    assert (failed["index"], failed["result_is_error"], failed["new_result"]) == (
        1,
        True,
        "timeout",
    )
    assert [i["new_state"] for i in steps[3]["changes"]["instances"]] == ["in_flight"]


def test_a_batch_shows_its_size_and_each_change_with_its_time(real_log: Path) -> None:
    """history counts a batch's instance saves; replay (text and JSON) and export give each
    change the time of the save_instance call that made it, not the batch's commit time."""
    from eventlog.cli import fmt_time  # noqa: PLC0415

    hist = json.loads(ckptlog("history", str(real_log), DEMO, "--json").stdout)
    saves = [e["instance_saves"] for e in hist]
    assert (saves[0], saves[WORKER_BATCH - 1], saves[3], saves[-1]) == (None, 256, 88, None)
    etl = json.loads(ckptlog("history", str(real_log), "etl-7", "--json").stdout)
    assert [e["instance_saves"] for e in etl] == [None] * 4  # unbatched: a frame per save

    seq = str(WORKER_BATCH)
    step = json.loads(ckptlog("replay", str(real_log), DEMO, "--from", seq, "--to", seq,
                              "--json").stdout)  # fmt: skip
    assert step["instance_saves"] == 256
    changes = step["changes"]["instances"]
    assert [c["index"] for c in changes] == list(range(256))
    times = [c["saved_at"] for c in changes]
    assert times == sorted(times)
    assert times[-1] == step["saved_at"]  # the batch is stamped with its last change's time
    assert times[0] < times[-1]  # 256 calls do not share one timestamp
    frames = ckptlog("export", str(real_log), DEMO, "--format", "jsonl-frames").stdout
    batch = json.loads(frames.splitlines()[WORKER_BATCH - 1])
    assert batch["seq"] == WORKER_BATCH
    assert batch["content"]["instance_saved_at"] == times  # each change's time, exported
    assert [c["index"] for c in batch["content"]["instances"]] == list(range(256))
    text = ckptlog("replay", str(real_log), DEMO, "--from", seq, "--to", seq, "--full").stdout
    assert text.splitlines()[0].endswith("fan_out_internal x256 (delta)")
    stamped = re.findall(r"^  (\S+Z)  ~ process_items\[(\d+)\]: not_started -> completed",
                         text, re.M)  # fmt: skip
    assert stamped == [(fmt_time(t), str(i)) for i, t in enumerate(times)]

    single = [json.loads(x) for x in ckptlog("replay", str(real_log), "etl-7", "--json")
              .stdout.splitlines()]  # fmt: skip
    assert single[1]["instance_saves"] is None
    assert "saved_at" not in single[1]["changes"]["instances"][0]  # not a batch: the frame's
    plain = ckptlog("replay", str(real_log), "etl-7").stdout
    assert re.search(r"^  ~ fetch\[0\]: not_started -> completed", plain, re.M)


def test_export_verify_stats(real_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    proc = ckptlog("export", str(real_log), "--out", str(out))
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    st = json.loads(ckptlog("stats", str(real_log), "--json").stdout)
    assert len(lines) == st["frames"]
    assert f"exported {len(lines):,} lines" in proc.stderr
    frames = ckptlog("export", str(real_log), DEMO, "--format", "jsonl-frames")
    first = json.loads(frames.stdout.splitlines()[0])
    assert first["content"]["type"] == "snapshot"
    verify = ckptlog("verify", str(real_log))
    assert verify.returncode == EXIT_OK
    assert re.search(rf"{st['frames']:,} frames in 5 streams: OK", verify.stdout)
    assert json.loads(ckptlog("verify", str(real_log), "--json").stdout)["ok"] is True
    stats = ckptlog("stats", str(real_log))
    assert re.search(r"^live invocations\s+4$", stats.stdout, re.M)
    assert st["invocations"] == 4


def test_compact_writes_a_new_log(real_log: Path, tmp_path: Path) -> None:
    dest = tmp_path / "compact"
    proc = ckptlog("compact", str(real_log), str(dest), "--keep", "last=3")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert re.search(r"kept last_n=3 in [\d.]+ s", proc.stdout)
    assert re.search(r": [\d,]+ frames in \d streams: OK", proc.stdout)
    before = json.loads(ckptlog("ls", str(real_log), "--json").stdout)
    after = json.loads(ckptlog("ls", str(dest), "--json").stdout)
    strip = [{k: v for k, v in r.items() if k != "frames"} for r in before]
    assert [{k: v for k, v in r.items() if k != "frames"} for r in after] == strip
    hist = json.loads(ckptlog("history", str(dest), DEMO, "--json").stdout)
    assert len(hist) == 3
    assert hist[0]["compacted"]["original_seq"] == DEMO_SAVES - 2
    assert hist[1]["instance_saves"] == 88  # a kept batch keeps its payload, times included
    sweep = json.loads(ckptlog("history", str(dest), SWEEP, "--json").stdout)
    assert sweep[0]["compacted"]["original_seq"] == SWEEP_SAVES - 2
    again = ckptlog("compact", str(real_log), str(dest))
    assert again.returncode == EXIT_USAGE
    assert "exists and is not empty" in one_error_line(again)
    heads = ckptlog("compact", str(real_log), str(tmp_path / "heads"), "--keep", "heads", "--json")
    assert json.loads(heads.stdout)["report"]["frames_out"] == 4


def test_bench_subcommand(tmp_path: Path) -> None:
    listed = ckptlog("bench", "list")
    assert listed.returncode == EXIT_OK, listed.stderr
    assert listed.stdout.strip()
    missing = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['benchmarks.__main__'] = None; "
         "from eventlog.cli import main; sys.exit(main(['bench', 'list']))"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert missing.returncode == EXIT_USAGE
    assert "the benchmarks are not available" in one_error_line(missing)


# -- colours and progress on a terminal ---------------------------------------------------------


def run_on_tty(args: list[str], *, stdout_tty: bool, extra_env: dict[str, str]) -> tuple[str, str]:
    """Run ckptlog with stdout or stderr on a pseudo-terminal; ``(stdout, stderr)``."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(extra_env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "eventlog.cli", *args],
        cwd=REPO,
        stdout=follower if stdout_tty else subprocess.PIPE,
        stderr=subprocess.PIPE if stdout_tty else follower,
        env=env,
    )
    os.close(follower)
    tty = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 10)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        tty += chunk
    out, err = proc.communicate(timeout=60)
    piped = err if stdout_tty else out
    os.close(leader)
    text = tty.decode(errors="replace")
    other = piped.decode(errors="replace")
    return (text, other) if stdout_tty else (other, text)


def test_colour_only_on_a_terminal_without_no_color(real_log: Path) -> None:
    args = ["diff", str(real_log), DEMO, "1", "latest"]
    out, _ = run_on_tty(args, stdout_tty=True, extra_env={})
    assert "\x1b[32m+ node process_items" in out
    plain, _ = run_on_tty(args, stdout_tty=True, extra_env={"NO_COLOR": "1"})
    assert "+ node process_items" in plain
    assert "\x1b[" not in plain
    forced = ckptlog(*args, "--color", "always")
    assert "\x1b[31m" in forced.stdout


def test_progress_bar_only_when_stderr_is_a_terminal(real_log: Path) -> None:
    out, err = run_on_tty(["verify", str(real_log)], stdout_tty=False, extra_env={})
    assert "OK" in out
    assert re.search(r"verify .*frames", err)  # rich's bar, drawn on the terminal
    assert "\x1b[" in err
    piped = ckptlog("verify", str(real_log))
    assert "\r" not in piped.stderr
    assert piped.stderr == ""


# -- damaged logs --------------------------------------------------------------------------------


def raw_damage(path: Path, how: str, seq: int, stream: str = SWEEP) -> None:
    """Damage frame ``seq`` of ``stream`` through raw LMDB (tests/test_corruption)."""
    from test_corruption import damage, flip  # noqa: PLC0415 - raw lmdb only for these cases

    from eventlog.codec import HEADER_BYTES  # noqa: PLC0415

    if how == "byte":
        damage(
            path,
            lambda raw: raw.put_envelope(
                stream, seq, flip(raw.envelope(stream, seq), HEADER_BYTES + 3)
            ),
        )
    else:
        damage(path, lambda raw: raw.delete_envelope(stream, seq))


def _delta_before_a_delta(path: Path, at_least: int = 100) -> int:
    """The first seq from ``at_least`` on of the sweep whose frame and the next are deltas, so
    damage there leaves frames that cannot be rebuilt until the next snapshot (where snapshots
    fall is the writer's cadence, not this test's)."""
    hist = json.loads(ckptlog("history", str(path), SWEEP, "--json").stdout)
    frames = {e["seq"]: e["frame"] for e in hist}
    return next(
        s for s in sorted(frames) if s >= at_least and frames[s] == frames.get(s + 1) == "delta"
    )


@pytest.mark.parametrize("how", ["byte", "removed"])
def test_damaged_frame_verify_names_it_others_read_around_it(log_copy: Path, how: str) -> None:
    """Damage inside the long unbatched stream: the frames after it read as unrebuildable up to
    the next snapshot, where the fold resumes; other invocations read as before."""
    seq = _delta_before_a_delta(log_copy)
    raw_damage(log_copy, how, seq)
    path = str(log_copy)
    verify = ckptlog("verify", path)
    assert verify.returncode == EXIT_PROBLEMS
    kind = "checksum" if how == "byte" else "index"
    assert re.search(rf"\[{kind}\] stream '{SWEEP}', seq {seq}, log #\d+:", verify.stdout), (
        verify.stdout
    )
    problems = json.loads(ckptlog("verify", path, "--json").stdout)["problems"]
    assert {(p["kind"], p["stream"], p["seq"]) for p in problems} >= {(kind, SWEEP, seq)}
    assert not [p for p in problems if p["stream"] not in (SWEEP, None)]

    hist = ckptlog("history", path, SWEEP)
    assert hist.returncode == EXIT_PROBLEMS
    problem = "damaged" if how == "byte" else "missing"
    assert re.search(rf"^\s+{seq}\s+!! {problem}$", hist.stdout, re.M), hist.stdout
    # one unrebuildable frame reads "101  !! ...", a run of them "101-110  !! ..."
    run = re.search(rf"^\s*{seq + 1}(?:-(\d+))?\s+!! unrebuildable", hist.stdout, re.M)
    assert run, hist.stdout
    resumed = int(run.group(1) or seq + 1) + 1  # the fold resumes at the next snapshot
    assert re.search(rf"^\s+{resumed}\s.*\ssnapshot\s", hist.stdout, re.M), hist.stdout
    assert re.search(rf"^\s+{SWEEP_SAVES}\s", hist.stdout, re.M)  # read on past the damage
    assert f"ckptlog: unreadable: '{SWEEP}' seq {seq}: {problem}" in hist.stderr

    assert ckptlog("show", path, SWEEP, "--at", str(seq - 1)).returncode == EXIT_OK
    cut = ckptlog("show", path, SWEEP, "--at", str(seq + 1))
    assert cut.returncode == EXIT_PROBLEMS
    assert f"at seq {seq + 1} cannot be read" in one_error_line(cut)
    assert ckptlog("show", path, SWEEP).returncode == EXIT_OK  # the head rows are intact
    assert ckptlog("diff", path, SWEEP, "1", str(seq - 1)).returncode == EXIT_OK
    assert ckptlog("diff", path, SWEEP, "1", str(seq)).returncode == EXIT_PROBLEMS

    export = ckptlog("export", path, SWEEP)
    assert export.returncode == EXIT_PROBLEMS
    marks = [json.loads(x) for x in export.stdout.splitlines() if '"unreadable"' in x]
    assert marks[0]["seq"] == seq
    assert ckptlog("ls", path).returncode == EXIT_OK
    assert ckptlog("history", path, "etl-7").returncode == EXIT_OK  # untouched invocations
    assert ckptlog("history", path, DEMO).returncode == EXIT_OK
    refused = ckptlog("compact", path, str(log_copy.parent / "c"))
    assert refused.returncode == EXIT_PROBLEMS
    assert "source log is damaged" in one_error_line(refused)
    assert not (log_copy.parent / "c").exists()


def test_truncated_file_verify_names_it_others_say_unreadable(log_copy: Path) -> None:
    data = log_copy / "data.mdb"
    size = data.stat().st_size
    # To a quarter: the pages a write-ahead checkpoint kept from reuse lie past the live
    # ones, so half the file can still hold every page these reads need (issue 28).
    os.truncate(data, size // 4)
    verify = ckptlog("verify", str(log_copy))
    assert verify.returncode == EXIT_PROBLEMS, verify.stdout + verify.stderr
    # Whether the log still opens (read from a zero-filled copy) or not, verify names the cut.
    assert re.search(
        r"\[truncated\] log: .*data\.mdb is [\d,]+ bytes, (shorter than|but its last transaction)",
        verify.stdout,
    )
    doc = json.loads(ckptlog("verify", str(log_copy), "--json").stdout)
    assert doc["ok"] is False
    assert doc["problems"][0]["kind"] == "truncated"
    for args in (["ls"], ["history", DEMO], ["show", DEMO], ["export"], ["stats"]):
        proc = ckptlog(args[0], str(log_copy), *args[1:])
        assert proc.returncode in (EXIT_PROBLEMS, EXIT_UNREADABLE), (args, proc.stderr)
        assert re.search(r"damaged|truncated|unreadable", proc.stderr), (args, proc.stderr)
        assert "ckptlog: error: " in proc.stderr or "ckptlog: unreadable: " in proc.stderr
    assert data.stat().st_size == size // 4  # reading never changes the file


@pytest.mark.parametrize("pages", [2, 8, 24])
def test_any_truncation_is_reported_never_a_crash(
    log_copy: Path, tmp_path: Path, pages: int
) -> None:
    """Whatever LMDB meets past the cut (nothing, a bus error, a failed assertion), the user
    gets a report or one error line with a documented status, never a dead process; and the
    zero-filled copies read instead are removed even when a reader dies."""
    data = log_copy / "data.mdb"
    os.truncate(data, data.stat().st_size - pages * 4096)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    verify = ckptlog("verify", str(log_copy), env=env)
    assert verify.returncode in (EXIT_OK, EXIT_PROBLEMS), verify.stdout + verify.stderr
    if verify.returncode == EXIT_PROBLEMS:
        assert re.search(r"\[(truncated|storage|checksum|index|gap|projection)\]", verify.stdout)
    else:  # the cut pages held nothing the log still uses
        assert verify.stdout.rstrip().endswith("OK")
    for args in (["ls"], ["history", DEMO], ["export"]):
        proc = ckptlog(args[0], str(log_copy), *args[1:], env=env)
        assert proc.returncode in (EXIT_OK, EXIT_PROBLEMS, EXIT_UNREADABLE), (args, proc.stderr)
        if proc.returncode == EXIT_UNREADABLE:
            one_error_line(proc)
    assert list(scratch.iterdir()) == []


# -- read-only while a writer runs -------------------------------------------------------------


@pytest.mark.slow
def test_read_commands_never_block_a_running_writer(log_copy: Path, tmp_path: Path) -> None:
    from test_forensics import commits_between, start_writer  # noqa: PLC0415

    proc = start_writer(log_copy, 4.0)
    try:
        t0 = time.time()
        for args in (["verify"], ["ls"], ["stats"], ["history", DEMO], ["export"],
                     ["show", "w1"], ["replay", "etl-7"]):  # fmt: skip
            done = ckptlog(args[0], str(log_copy), *args[1:])
            assert done.returncode == EXIT_OK, (args, done.stdout, done.stderr)
        t1 = time.time()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert commits_between(out, t0, t1) >= 2, "the writer stalled while ckptlog read"
    assert ckptlog("verify", str(log_copy)).returncode == EXIT_OK


def _main(argv: list[str]) -> int:
    if argv[:1] == ["write"] and len(argv) == 2:
        write_more(argv[1])
        return 0
    print("usage: python tests/test_cli.py write PATH", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(_main(sys.argv[1:]))
