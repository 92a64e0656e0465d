"""Fork (issue 25): ``CheckpointLog.fork`` / ``Checkpointer.fork`` / ``ckptlog fork``, the link
``verify`` checks, how ``history``, ``show``, ``export`` and the viewer show it, and
``ckptlog diff PATH A@SEQ B@SEQ``; on LMDB and PostgreSQL, and in a log mixing every kind of
stream (a LangGraph thread, a techrevati thread, an apflow task and events refuse a fork with
the reason; they fork their own way, tests/test_fork_resume.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from viewer_logs import build_mixed

from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.errors import (
    CheckpointError,
    ForkTargetExists,
    NotASave,
    SeqOutOfRange,
    UnknownInvocation,
)
from eventlog.fork import _Fork
from eventlog.frames import Event, ForkOrigin
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutProgress,
    NodePosition,
)

REPO = Path(__file__).resolve().parents[1]
ITEMS = 12


def record(inv: str, step: int) -> CheckpointRecord:
    """Step ``step`` of a small run: ``step`` nodes done, the first ``step`` items of a
    fan-out completed."""
    instances = tuple(
        FanOutInstanceProgress("completed", {"sq": i * i}) if i < step else NOT_STARTED
        for i in range(ITEMS)
    )
    return CheckpointRecord(
        invocation_id=inv,
        correlation_id="corr-1",
        state={"step": step, "seen": list(range(step))},
        completed_positions=tuple(NodePosition((), f"n{i}", i) for i in range(step)),
        parent_states=(),
        last_saved_at=1_750_000_000.0 + step,
        fan_out_progress=(FanOutProgress("work", (), ITEMS, instances),),
    )


def write_run(cl: CheckpointLog, inv: str = "run-1", saves: int = 8) -> None:
    for step in range(1, saves + 1):
        cl.save(inv, record(inv, step))


@pytest.fixture(params=["lmdb", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "lmdb":
        yield str(tmp_path / "log")
        return
    schemas = request.getfixturevalue("pg_schemas")
    yield schemas.url(tmp_path / "fork")


def ckptlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventlog.cli", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def same_run(a: CheckpointRecord | None, b: CheckpointRecord | None) -> bool:
    assert a is not None
    assert b is not None
    return msgspec.structs.replace(a, invocation_id="") == msgspec.structs.replace(
        b, invocation_id=""
    )


# -- the library -------------------------------------------------------------------------------


def test_fork_starts_a_new_invocation_from_any_save(where: str) -> None:
    with CheckpointLog.open(where) as cl:
        write_run(cl)
        frames_before = cl.stats().frames
        origin = cl.fork("run-1", at=3, new_invocation_id="run-1b")
        history = list(cl.history("run-1"))
        assert origin == ForkOrigin("run-1", 3, origin.checksum)
        # the fork's record is the source's as of seq 3, under its own id
        forked = cl.load("run-1b")
        assert forked is not None
        assert forked.invocation_id == "run-1b"
        assert same_run(forked, cl.record_at("run-1", 3))
        assert forked.state == {"step": 3, "seen": [0, 1, 2]}
        # one frame written, the source untouched
        assert cl.stats().frames == frames_before + 1
        assert [e.seq for e in history] == list(range(1, 9))
        assert cl.log.last_seq("run-1b") == 1
        # it goes on like any invocation, and both verify
        cl.save("run-1b", record("run-1b", 5))
        cl.save_instance("run-1b", "work", 11, FanOutInstanceProgress("completed", {"sq": 121}))
        cl.flush()
        assert cl.pending_instances("run-1b", "work") == list(range(5, 11))
        report = cl.verify()
        assert report.ok, report.problems
        # the origin's checksum is the source frame's
        found = next(iter(cl.log.read_stream("run-1", 3, 3)))
        assert found.checksum == origin.checksum
    with CheckpointLog.open(where, readonly=True) as cl:  # durable: there after a reopen
        again = cl.load("run-1b")
        assert again is not None
        assert again.state == record("run-1b", 5).state
        assert cl.pending_instances("run-1b", "work") == list(range(5, 11))


def test_a_fork_of_a_fork_and_of_the_latest_save(where: str) -> None:
    with CheckpointLog.open(where) as cl:
        write_run(cl, saves=4)
        cl.fork("run-1", at=4, new_invocation_id="b")
        cl.fork("b", at=1, new_invocation_id="c")
        assert same_run(cl.load("c"), cl.load("run-1"))
        assert cl.verify().ok


def test_refusals_are_typed_and_write_nothing(where: str) -> None:
    with CheckpointLog.open(where) as cl:
        write_run(cl, saves=3)
        cl.save("gone", record("gone", 1))
        cl.delete("gone")
        cl.log.append("run-1", Event(name="note", data={"x": 1}))  # an event beside the saves
        frames = cl.stats().frames
        with pytest.raises(UnknownInvocation, match="no invocation 'nope'"):
            cl.fork("nope", at=1, new_invocation_id="x")
        for seq in (0, 5, -1):
            with pytest.raises(SeqOutOfRange, match=r"seqs run 1\.\.4"):
                cl.fork("run-1", at=seq, new_invocation_id="x")
        with pytest.raises(NotASave, match="seq 4 of 'run-1' is a Event frame"):
            cl.fork("run-1", at=4, new_invocation_id="x")
        with pytest.raises(NotASave, match="seq 2 of 'gone' is a delete"):
            cl.fork("gone", at=2, new_invocation_id="x")
        with pytest.raises(ForkTargetExists, match="already holds that invocation"):
            cl.fork("run-1", at=1, new_invocation_id="run-1")
        with pytest.raises(ForkTargetExists):  # a deleted invocation keeps its history
            cl.fork("run-1", at=1, new_invocation_id="gone")
        with pytest.raises(CheckpointError):
            cl.fork("run-1", at=1, new_invocation_id="")
        assert cl.stats().frames == frames
        assert cl.log.last_seq("x") == 0
        assert cl.verify().ok


def test_the_target_is_checked_inside_the_write_transaction(tmp_path: Path) -> None:
    """A writer that saves the new id between fork's check and its append: the fork fails
    (it would otherwise land as seq 2 of someone else's stream)."""
    with CheckpointLog.open(tmp_path / "log") as cl:
        write_run(cl, saves=2)
        cl.save("late", record("late", 1))
        inc = cl._incoming("late", record("late", 2), "save")
        with pytest.raises(ForkTargetExists, match="already has 1 frame"):
            cl.log.append("late", _Fork(cl, inc, ForkOrigin("run-1", 2, b"\0" * 16)))
        assert cl.log.last_seq("late") == 1
        assert cl.verify().ok


def test_async_fork(where: str) -> None:
    async def go() -> None:
        cp = Checkpointer.open(where)
        try:
            for step in range(1, 4):
                await cp.save("a", record("a", step))
            origin = await cp.fork("a", at=2, new_invocation_id="a2")
            assert origin.seq == 2
            assert same_run(await cp.load("a2"), record("a2", 2))
            with pytest.raises(ForkTargetExists):
                await cp.fork("a", at=2, new_invocation_id="a2")
        finally:
            await cp.aclose()

    asyncio.run(go())


# -- verify checks the link --------------------------------------------------------------------


def forge(cl: CheckpointLog, new: str, rec: CheckpointRecord, origin: ForkOrigin) -> None:
    """A fork frame written with a link of our choosing (what a tampered log would hold)."""
    inc = cl._incoming(new, rec, "save")
    cl.log.append(new, _Fork(cl, inc, origin))


def test_verify_reports_a_broken_link(where: str) -> None:
    with CheckpointLog.open(where) as cl:
        write_run(cl, saves=4)
        good = cl.fork("run-1", at=2, new_invocation_id="ok")
        forge(cl, "bad-sum", record("bad-sum", 2), ForkOrigin("run-1", 2, b"\x01" * 16))
        forge(cl, "no-source", record("no-source", 2), ForkOrigin("ghost", 2, good.checksum))
        forge(cl, "no-seq", record("no-seq", 2), ForkOrigin("run-1", 9, good.checksum))
        forge(cl, "other-record", record("other-record", 3), good)
        problems = {p.stream: p for p in cl.verify().problems}
    assert set(problems) == {"bad-sum", "no-source", "no-seq", "other-record"}
    assert all(p.kind == "fork" for p in problems.values())
    assert "the source was rewritten" in problems["bad-sum"].detail
    assert "no such invocation" in problems["no-source"].detail
    assert "seqs run 1..4" in problems["no-seq"].detail
    assert "differs from the record of 'run-1' seq 2" in problems["other-record"].detail


# -- the command line and the viewer -----------------------------------------------------------


@pytest.fixture
def forked_log(tmp_path: Path) -> Path:
    path = tmp_path / "log"
    with CheckpointLog.open(path) as cl:
        write_run(cl)
    return path


def test_ckptlog_fork_writes_one_frame_and_says_so(forked_log: Path) -> None:
    p = str(forked_log)
    assert "WRITES to PATH" in ckptlog("fork", "--help").stdout
    done = ckptlog("fork", p, "run-1", "--at", "5", "--as", "retry-1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("forked run-1@5 as retry-1 (source frame checksum ")
    again = ckptlog("fork", p, "run-1", "--at", "5", "--as", "retry-1", "--json")
    assert again.returncode == 2
    assert "cannot fork into 'retry-1'" in again.stderr
    not_a_log = ckptlog(
        "fork", str(forked_log.parent / "nothing"), "run-1", "--at", "1", "--as", "x"
    )
    assert not_a_log.returncode == 3
    assert not (forked_log.parent / "nothing").exists()  # a fork never creates a log
    bad_seq = ckptlog("fork", p, "run-1", "--at", "99", "--as", "x")
    assert bad_seq.returncode == 2
    assert "seqs run 1..8" in bad_seq.stderr
    with CheckpointLog.open(forked_log, readonly=True) as cl:
        assert same_run(cl.load("retry-1"), cl.record_at("run-1", 5))
        assert cl.verify().ok
    verify = ckptlog("verify", p)
    assert verify.returncode == 0, verify.stdout


def test_history_show_export_and_the_viewer_show_the_origin(forked_log: Path) -> None:
    p = str(forked_log)
    fork = json.loads(ckptlog("fork", p, "run-1", "--at", "5", "--as", "r2", "--json").stdout)
    checksum = fork["forked_from"]["checksum"]
    origin = {"invocation_id": "run-1", "seq": 5, "checksum": checksum}
    assert "save (fork of run-1@5)" in ckptlog("history", p, "r2").stdout
    (row,) = json.loads(ckptlog("history", p, "r2", "--json").stdout)
    assert row["forked_from"] == origin
    assert f"forked from run-1@5 (checksum {checksum[:16]})" in ckptlog("show", p, "r2").stdout
    assert json.loads(ckptlog("show", p, "r2", "--json").stdout)["forked_from"] == origin
    assert "forked_from" not in json.loads(ckptlog("show", p, "run-1", "--json").stdout)
    for fmt in ("jsonl", "jsonl-frames"):
        lines = ckptlog("export", p, "r2", "--format", fmt).stdout.splitlines()
        assert json.loads(lines[0])["forked_from"] == origin
    everything = [json.loads(line) for line in ckptlog("export", p).stdout.splitlines()]
    assert [d.get("forked_from") for d in everything].count(origin) == 1
    history_of_source = ckptlog("history", p, "run-1", "--json").stdout
    assert json.loads(history_of_source)[4]["checksum"] == checksum

    from eventlog.viewer.api import Viewer  # noqa: PLC0415

    viewer = Viewer(p)
    try:
        with viewer.session():
            assert viewer.record("r2", 1)["forked_from"] == origin
            assert viewer.record("run-1", 5)["forked_from"] is None
            (step,) = viewer.steps("r2", 0, 10)["rows"]
            assert step["label"] == "save (fork of run-1@5)"
    finally:
        viewer.close()


def test_diff_an_original_and_its_fork(forked_log: Path) -> None:
    p = str(forked_log)
    ckptlog("fork", p, "run-1", "--at", "3", "--as", "r3")
    with CheckpointLog.open(forked_log) as cl:
        cl.save("r3", msgspec.structs.replace(record("r3", 4), state={"step": 4, "alt": True}))
    same = ckptlog("diff", p, "run-1@3", "r3@1")
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines() == ["run-1@3 -> r3@1", "  (no changes)"]
    text = ckptlog("diff", p, "run-1@4", "r3@latest").stdout
    assert text.splitlines()[0] == "run-1@4 -> r3@2"
    assert "state.alt" in text
    assert "state.seen" in text
    doc = json.loads(ckptlog("diff", p, "run-1@latest", "r3@2", "--json").stdout)
    assert doc["from"] == "run-1@8"
    assert doc["to"] == "r3@2"
    paths = {c["path"] for c in doc["changes"]["state"]}
    assert "state.alt" in paths
    assert doc["changes"]["fields"] == []  # the ids differ by design: not a change
    patch = json.loads(ckptlog("diff", p, "run-1@3", "r3@2", "--format", "json-patch").stdout)
    assert {"op": "add", "path": "/state/alt", "value": True} in patch
    # the forms that were there keep working
    assert ckptlog("diff", p, "run-1", "1", "3").stdout.startswith("run-1: seq 1 -> seq 3")
    assert ckptlog("diff", p, "run-1", "1").returncode == 2  # one seq: a usage error
    unknown = ckptlog("diff", p, "run-1@1", "nope@1")
    assert unknown.returncode == 2
    assert "no invocation 'nope'" in unknown.stderr
    beyond = ckptlog("diff", p, "run-1@1", "r3@7")
    assert beyond.returncode == 2
    assert "seqs run 1..2" in beyond.stderr


# -- a log holding every kind of stream --------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mixed") / "log"
    build_mixed(path, instances=300)
    return path


def test_fork_in_a_mixed_log(mixed: Path, tmp_path: Path) -> None:
    import shutil  # noqa: PLC0415

    path = tmp_path / "log"
    shutil.copytree(mixed, path)
    with CheckpointLog.open(path) as cl:
        streams = cl.log.streams()
        lg = next(s for s in streams if "lg-thread" in s)
        tr = next(s for s in streams if "tr-1" in s)
        ap = next(s for s in streams if "task-1" in s)
        mid = next(e.seq for e in cl.history("job-1") if e.kind == "fan_out_internal")
        cl.fork("job-1", at=mid, new_invocation_id="job-1-retry")
        assert same_run(cl.load("job-1-retry"), cl.record_at("job-1", mid))
        for stream, why in (
            (lg, "LgCheckpoint frame, not a checkpoint save.*update_state"),
            (tr, "not a checkpoint save"),
            (ap, "not a checkpoint save"),
            ("events:app", "Event frame"),
        ):
            with pytest.raises(NotASave, match=why):
                cl.fork(stream, at=1, new_invocation_id=f"{stream}-fork")
        report = cl.verify()
        assert report.ok, report.problems
    p = str(path)
    assert ckptlog("verify", p).returncode == 0
    diff = ckptlog("diff", p, f"job-1@{mid}", "job-1-retry@1")
    assert diff.stdout.splitlines()[1:] == ["  (no changes)"], diff.stdout
    # the A@SEQ form reads any kind of stream through its view (here two LangGraph steps)
    lg_diff = ckptlog("diff", p, "lg-thread@2", "lg-thread@3", "--json")
    assert lg_diff.returncode == 0, lg_diff.stderr
    assert json.loads(lg_diff.stdout)["from"].endswith("@2")
    assert "fork of job-1@" in ckptlog("history", p, "job-1-retry").stdout
    # and two streams of the integrations without forks of their own, through their views
    tr = json.loads(ckptlog("diff", p, "tr-1@2", "tr-2@1", "--json").stdout)
    assert tr["from"] == "techrevati:tr-1@2"
    assert {"path": "checkpoint.state.other", "op": "added", "old": None, "new": True} in (
        tr["changes"]
    )
    ap_diff = json.loads(ckptlog("diff", p, "task-1@1", "task-2@1", "--json").stdout)
    assert ap_diff["to"] == "apflow:task-2@1"
    assert {c["path"] for c in ap_diff["changes"]} >= {"step_name", "data.fresh"}


def test_the_command_line_forks_on_postgresql(tmp_path: Path, pg_schemas: Any) -> None:
    url = pg_schemas.url(tmp_path / "cli")
    with CheckpointLog.open(url) as cl:
        write_run(cl, saves=4)
    done = ckptlog("fork", url, "run-1", "--at", "2", "--as", "run-1b")
    assert done.returncode == 0, done.stderr
    assert ckptlog("verify", url).returncode == 0
    same = ckptlog("diff", url, "run-1@2", "run-1b@1", "--json")
    assert json.loads(same.stdout)["changes"]["state"] == []
    assert "fork of run-1@2" in ckptlog("history", url, "run-1b").stdout
    with CheckpointLog.open(url, readonly=True) as cl:
        assert same_run(cl.load("run-1b"), cl.record_at("run-1", 2))


def test_a_compacted_log_keeps_the_fork_and_verifies(tmp_path: Path) -> None:
    """Compaction writes each kept invocation's first frame as a compacted snapshot: the
    fork's record is kept, its link (seqs of the original log) stays in the original."""
    from eventlog import forensics  # noqa: PLC0415

    with CheckpointLog.open(tmp_path / "log") as cl:
        write_run(cl)
        cl.fork("run-1", at=4, new_invocation_id="b")
        forensics.compact(cl, tmp_path / "small", last_n=2)
    with CheckpointLog.open(tmp_path / "small", readonly=True) as small:
        report = small.verify()
        assert report.ok, report.problems
        assert same_run(small.load("b"), record("b", 4))


def test_a_fork_in_a_keyed_log_verifies(tmp_path: Path) -> None:
    key = b"k" * 32
    with CheckpointLog.open(tmp_path / "log", chain_key=key) as cl:
        write_run(cl, saves=3)
        cl.fork("run-1", at=2, new_invocation_id="b")
        forge(cl, "bad", record("bad", 2), ForkOrigin("run-1", 2, b"\x02" * 16))
        problems = cl.verify().problems
    assert [(p.kind, p.stream) for p in problems] == [("fork", "bad")]
