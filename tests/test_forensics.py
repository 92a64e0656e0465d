"""The forensic Python API (eventlog.forensics and its CheckpointLog methods).

- history filters, ``record_as_of``, ``diff``, ``replay``, ``scan`` and ``export`` agree with
  the records that were saved (a property test checks that the diff replay computes from each
  frame equals the diff of the records before and after it);
- ``verify`` names every materialized row that disagrees with the fold of its frames;
- tolerant readers name each unreadable seq of a damaged log and resume at the next snapshot;
- a log opened read-only is read while another process writes to it, without blocking it.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from record_strategies import save_sequences
from test_corruption import Raw, damage, flip

from backends.memory import MemoryBackend
from eventlog import forensics
from eventlog.checkpoints import CheckpointLog
from eventlog.codec import HEADER_BYTES
from eventlog.errors import CorruptFrame, ReadOnlyLog
from eventlog.frames import Event
from eventlog.materialized import BY_CORRELATION, FANOUT, HEADS, POSITIONS, SNAPSHOTS, corr_key
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)
from eventlog.testing import make_record, save_kind
from projections.history import diff_records

REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000.0


def rec(
    inv: str,
    step: int,
    *,
    state: Any = None,
    positions: int = 1,
    fan_out: tuple[FanOutInstanceProgress, ...] = (),
    corr: str = "corr",
) -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id=inv,
        correlation_id=corr,
        state={"step": step} if state is None else state,
        completed_positions=tuple(NodePosition((), f"node{i}", i) for i in range(positions)),
        parent_states=(),
        last_saved_at=T0 + step,
        fan_out_progress=(FanOutProgress("work", (), len(fan_out), fan_out),) if fan_out else (),
    )


def fill(cl: CheckpointLog) -> dict[str, list[CheckpointRecord | None]]:
    """A small log with known contents: what was saved, per invocation, seq by seq."""
    saved: dict[str, list[CheckpointRecord | None]] = {"a": [], "b": []}
    insts = [NOT_STARTED] * 4
    for step in range(6):
        if 0 < step <= len(insts):
            insts[step - 1] = FanOutInstanceProgress("completed", step * 10, step == 3)
        r = rec("a", step, state={"step": step, "items": [1, 2, step]}, positions=1 + step // 2,
                fan_out=tuple(insts))  # fmt: skip
        cl.save("a", r)
        saved["a"].append(r)
    for step in range(3):
        r = rec("b", step, corr="other" if step == 2 else "corr")
        cl.save_fan_out_internal("b", r)
        saved["b"].append(r)
    cl.flush()
    cl.delete("b")
    saved["b"].append(None)
    again = rec("b", 10)
    cl.save("b", again)
    saved["b"].append(again)
    cl.log.append("events", Event(name="started", data={"n": 1}, at=T0))
    return saved


@pytest.fixture
def mem() -> Iterator[tuple[CheckpointLog, dict[str, list[CheckpointRecord | None]]]]:
    cl = CheckpointLog.on_backend(MemoryBackend())
    saved = fill(cl)
    yield cl, saved
    cl.close()


# -- history, points in time, diff -------------------------------------------------------------


def test_history_filters(mem: Any) -> None:
    cl, saved = mem
    everything = list(cl.history("a"))
    assert [e.record for e in everything] == saved["a"]
    window = list(cl.history("a", since=T0 + 2, until=T0 + 4))
    assert [e.seq for e in window] == [3, 4]  # since inclusive, until exclusive
    assert [e.kind for e in cl.history("b", kinds=["delete"])] == ["delete"]
    assert [e.seq for e in cl.history("b", kinds="fan_out_internal")] == [1, 2, 3]
    assert list(cl.history("b", kinds=["save", "delete"])) == [
        e for e in cl.history("b") if e.kind in ("save", "delete")
    ]
    with pytest.raises(forensics.InvalidArgument, match=r"unknown history kind\(s\) \['sav'\]"):
        list(cl.history("a", kinds=["sav"]))


def test_record_as_of_and_record_at(mem: Any) -> None:
    cl, saved = mem
    assert forensics.record_as_of(cl, "a", T0 - 1) is None
    for step, r in enumerate(saved["a"]):
        assert forensics.record_as_of(cl, "a", T0 + step) == r
        assert forensics.record_as_of(cl, "a", T0 + step + 0.5) == r
    assert forensics.record_as_of(cl, "b", T0 + 2.5) == saved["b"][2]


def test_diff_is_structured(mem: Any) -> None:
    cl, saved = mem
    d = forensics.diff(cl, "a", 1, 6)
    assert d == diff_records(saved["a"][0], saved["a"][5])
    assert [p.node_name for p in d.positions_added] == ["node1", "node2"]
    assert [(c.path, c.op, c.old, c.new) for c in d.state] == [
        ("state.step", "changed", 0, 5),
        ("state.items[2]", "changed", 0, 5),
    ]
    assert [(i.index, i.old_state, i.new_state, i.new_result) for i in d.instances] == [
        (0, "not_started", "completed", 10),
        (1, "not_started", "completed", 20),
        (2, "not_started", "completed", 30),
        (3, "not_started", "completed", 40),
    ]
    assert [i.result_is_error for i in d.instances] == [False, False, True, False]
    assert forensics.diff(cl, "a", 3, 3).empty
    created = forensics.diff(cl, "a", 0, 1)
    assert (created.existed_before, created.exists_after) == (False, True)
    corr = forensics.diff(cl, "b", 2, 3)
    assert [(c.path, c.old, c.new) for c in corr.fields] == [("correlation_id", "corr", "other")]
    gone = forensics.diff(cl, "b", 3, 4)
    assert (gone.existed_before, gone.exists_after) == (True, False)


def test_diff_errors_say_what_is_valid(mem: Any) -> None:
    cl, _ = mem
    with pytest.raises(
        forensics.InvalidArgument, match=r"seq 7 is outside 'a', whose seqs run 1\.\.6"
    ):
        forensics.diff(cl, "a", 1, 7)
    with pytest.raises(
        forensics.NoSuchInvocation, match=r"no invocation 'zz' in the log .*ls PATH"
    ):
        forensics.diff(cl, "zz", 0, 1)


def test_diff_values_paths_and_types() -> None:
    from projections.history import diff_values  # noqa: PLC0415

    old = {"a": 1, "b": [1, 2], "c": {"x": True}, "odd key": 1.0, "n": float("nan")}
    new = {"a": 1.0, "b": [1], "c": {"x": True, "y": None}, "odd key": 1.0, "n": float("nan")}
    got = [(c.path, c.op) for c in diff_values(old, new, "state")]
    assert got == [
        ("state.a", "changed"),  # 1 -> 1.0: another type, reported
        ("state.b[1]", "removed"),
        ("state.c.y", "added"),
    ]
    assert [(c.path, c.op) for c in diff_values({"k k": 1}, {}, "s")] == [("s['k k']", "removed")]


@given(data=st.data())
def test_replay_diffs_equal_record_diffs(data: st.DataObject) -> None:
    """The per-frame diff (O(changes)) equals the diff of the records before and after."""
    cl = CheckpointLog.on_backend(MemoryBackend())
    try:
        for kind, r in data.draw(save_sequences("inv", max_size=10)):
            if r is None:
                cl.delete("inv")
            else:
                save_kind(cl, kind, r)
        if not cl.log.last_seq("inv"):
            return  # only deletes of an unknown id: nothing was written
        records = [e.record for e in cl.history("inv")]
        steps = list(forensics.replay(cl, "inv"))
        assert [s.record for s in steps] == records
        before = None
        for step in steps:
            note(f"seq {step.seq}")
            assert step.changes == diff_records(before, step.record)
            before = step.record
    finally:
        cl.close()


def test_a_batch_frame_replays_as_one_step_with_each_change_timed() -> None:
    """Buffered save_instance calls commit as one frame (a batch). Replay shows one step whose
    diff equals the diff of the records around it (an index saved twice in the batch shows
    once, from its state before the batch to the later change), each change carries the time
    of the call that made it, and the running counts see only the later change."""
    cl = CheckpointLog.on_backend(
        MemoryBackend(), batching=FanOutInternalSaveBatching(flush_every=100)
    )
    try:
        cl.save("i", rec("i", 0, fan_out=(NOT_STARTED,) * 3))
        calls = [(0, FanOutInstanceProgress("in_flight")),
                 (1, FanOutInstanceProgress("completed", 1)),
                 (0, FanOutInstanceProgress("completed", 2))]  # fmt: skip
        for index, progress in calls:
            cl.save_instance("i", "work", index, progress)
        cl.flush()
        batch = cl.log.read_stream("i", 2, 2)
        frame = next(iter(batch)).frame
        assert len(frame.instance_saved_at) == 3
        first, last = cl.record_at("i", 1), cl.record_at("i", 2)
        steps = list(forensics.replay(cl, "i"))
        assert [s.seq for s in steps] == [1, 2]
        step = steps[1]
        assert step.changes == diff_records(first, last)
        assert [(d.index, d.old_state, d.new_state, d.new_result) for d in
                step.changes.instances] == [(0, "not_started", "completed", 2),
                                            (1, "not_started", "completed", 1)]  # fmt: skip
        times = frame.instance_saved_at
        assert step.instance_saved_at == (times[2], times[1])  # parallel to changes.instances
        assert steps[0].instance_saved_at == ()  # not a batch
        walked = list(forensics.walk(cl.log, "i", counts=True))
        assert isinstance(walked[1], forensics.Step)
        assert walked[1].counts == {"total": 3, "completed": 2, "in_flight": 0, "errors": 0}
        assert walked[1].instance_saves == 3
        assert isinstance(walked[0], forensics.Step)
        assert walked[0].instance_saves is None
    finally:
        cl.close()


def test_replay_from_a_snapshot_diffs_against_the_record_before_it() -> None:
    """A replay (or walk with diffs) starting at a snapshot frame shows what that save changed,
    not the whole record as if it were created there."""
    cl = CheckpointLog.on_backend(MemoryBackend())
    try:
        cl.save("i", rec("i", 0, fan_out=(NOT_STARTED,) * 200))
        for i in range(200):  # unbatched: a frame each, with snapshots along the way
            cl.save_instance("i", "work", i, FanOutInstanceProgress("completed", i))
        walked = list(forensics.walk(cl.log, "i"))
        snaps = [s.seq for s in walked if isinstance(s, forensics.Step) and
                 s.frame_type == "snapshot" and s.seq > 1]  # fmt: skip
        assert snaps
        for seq in snaps:
            step = next(forensics.replay(cl, "i", from_seq=seq, to_seq=seq))
            assert step.changes == diff_records(cl.record_at("i", seq - 1), cl.record_at("i", seq))
            assert [d.index for d in step.changes.instances] == [seq - 2]
    finally:
        cl.close()


def test_replay_range_and_scan(mem: Any) -> None:
    cl, saved = mem
    steps = list(forensics.replay(cl, "a", from_seq=4, to_seq=5))
    assert [s.seq for s in steps] == [4, 5]
    assert [s.record for s in steps] == saved["a"][3:5]
    entries = list(forensics.scan(cl))
    assert [e.global_seq for e in entries] == list(range(1, len(entries) + 1))
    assert {e.invocation_id for e in entries} == {"a", "b", "events"}
    assert [e.kind for e in entries if e.invocation_id == "b"] == [
        "fan_out_internal", "fan_out_internal", "fan_out_internal", "delete", "save",
    ]  # fmt: skip
    assert entries[0].frame == "snapshot"
    assert entries[-1].kind == "event"
    later = [e.global_seq for e in forensics.scan(cl, since_seq=5)]
    assert later == [e.global_seq for e in entries[5:]]


def test_export_formats(mem: Any) -> None:
    cl, saved = mem
    buf = io.BytesIO()
    summary = forensics.export(cl, None, out=buf)
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert summary.lines == len(lines) == 6 + 5 + 1
    a = [x for x in lines if x["invocation_id"] == "a"]
    assert [x["record"]["state"] for x in a] == [r.state for r in saved["a"] if r is not None]
    first = a[0]["record"]["completed_positions"][0]
    assert first == {
        "namespace": [], "node_name": "node0", "step": 0, "attempt_index": 0,
        "fan_out_index": None,
    }  # fmt: skip
    assert [x["kind"] for x in lines if x["invocation_id"] == "b"][3] == "delete"
    assert lines[-1]["content"] == {"type": "event", "name": "started", "data": {"n": 1}, "at": T0}
    frames = io.BytesIO()
    forensics.export(cl, "a", "jsonl-frames", out=frames)
    content = [json.loads(line)["content"] for line in frames.getvalue().splitlines()]
    assert content[0]["type"] == "snapshot"
    assert {c["type"] for c in content[1:]} <= {"delta", "snapshot"}
    with pytest.raises(forensics.InvalidArgument, match=r"export format 'csv' is unknown"):
        forensics.export(cl, "a", "csv", out=io.BytesIO())
    with pytest.raises(forensics.NoSuchInvocation, match=r"no invocation 'nope'"):
        forensics.export(cl, "nope", out=io.BytesIO())


def test_stats_and_invocations(mem: Any) -> None:
    cl, _ = mem
    st = forensics.stats(cl)
    assert (st.frames, st.streams, st.invocations) == (12, 3, 2)
    assert st.largest[0].invocation_id == "a"
    inv = {i.invocation_id: i for i in forensics.invocations(cl, all_streams=True)}
    assert inv["a"].fan_out_instances == 4
    assert (inv["a"].completed_instances, inv["a"].error_instances) == (4, 1)
    assert (inv["events"].kind, inv["events"].deleted) == ("event", False)  # listed with --all
    assert inv["b"].deleted is False
    assert [i.invocation_id for i in forensics.invocations(cl, "corr")] == ["a", "b"]


# -- verify: materialized rows against the fold --------------------------------------------


def _tamper(cl: CheckpointLog, fn: Any) -> None:
    with cl.log.backend.write() as txn:
        fn(txn)


def _sid(cl: CheckpointLog, stream: str) -> bytes:
    with cl.log.backend.read() as txn:
        sid = cl.log.stream_id(txn, stream)
    assert sid is not None
    return sid.to_bytes(8, "big")


def _u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def test_verify_clean(mem: Any) -> None:
    cl, _ = mem
    report = cl.verify()
    assert report.ok, str(report)
    assert (report.frames, report.streams) == (12, 3)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "fanout_row_changed",
            r"fan-out row 'work'\[1\] is completed 999, the fold says completed 20",
        ),
        ("fanout_row_deleted", r"fan-out row 'work'\[2\] missing: the fold says completed"),
        ("position_deleted", r"2 position rows, the fold has 3"),
        ("head_missing", r"head row missing: the fold has a record at seq 6"),
        ("head_seq_wrong", r"head row seq is 5, the fold says 6"),
        ("corr_entry_extra", r"correlation index lists it under \['corr', 'zzz'\]"),
        ("snapshot_mark_wrong", r"snapshot mark at seq 2, but that frame is not a snapshot"),
    ],
)
def test_verify_names_each_materialized_problem(mem: Any, case: str, expected: str) -> None:
    cl, _ = mem
    k = _sid(cl, "a")
    enc = msgspec.msgpack.Encoder()

    def change(txn: Any) -> None:
        if case == "fanout_row_changed":
            txn.put(
                FANOUT, k + _u32(1) + _u32(1), enc.encode(FanOutInstanceProgress("completed", 999))
            )
        elif case == "fanout_row_deleted":
            txn.delete(FANOUT, k + _u32(1) + _u32(2))
        elif case == "position_deleted":
            txn.delete(POSITIONS, k + _u32(2))
        elif case == "head_missing":
            txn.delete(HEADS, k)
        elif case == "head_seq_wrong":
            from eventlog.materialized import _dec_row  # noqa: PLC0415

            row = _dec_row.decode(txn.get(HEADS, k))
            txn.put(HEADS, k, enc.encode(msgspec.structs.replace(row, seq=5)))
        elif case == "corr_entry_extra":
            txn.put(BY_CORRELATION, corr_key("zzz", int.from_bytes(k, "big")), b"")
        elif case == "snapshot_mark_wrong":
            txn.put(SNAPSHOTS, k + (2).to_bytes(8, "big"), b"")

    _tamper(cl, change)
    report = cl.verify()
    projection = [p for p in report.problems if p.kind == "projection"]
    assert projection, str(report)
    assert all(p.stream == "a" for p in projection), str(report)
    assert any(__import__("re").search(expected, p.detail) for p in projection), str(report)


# -- damaged logs: tolerant reading ------------------------------------------------------------


@pytest.fixture
def lmdb_log(tmp_path: Path) -> Path:
    """A closed LMDB log: 'a' with 40 instance saves (snapshots every few frames), and 'b'."""
    path = tmp_path / "log"
    with CheckpointLog.open(path, durability="process") as cl:
        n = 40
        cl.save("a", rec("a", 0, fan_out=(NOT_STARTED,) * n))
        for i in range(n):
            cl.save_instance("a", "work", i, FanOutInstanceProgress("completed", "x" * 40),
                             saved_at=T0 + i + 1)  # fmt: skip
        cl.save("b", rec("b", 0))
    return path


def _snapshots(path: Path, stream: str) -> list[int]:
    with CheckpointLog.open(path, readonly=True) as cl:
        return [s.seq for s in forensics.walk(cl.log, stream) if isinstance(s, forensics.Step)
                and s.frame_type == "snapshot"]  # fmt: skip


@pytest.mark.parametrize("how", ["flipped", "removed"])
def test_tolerant_walk_names_damage_and_resumes(lmdb_log: Path, how: str) -> None:
    snaps = _snapshots(lmdb_log, "a")
    target = next(s for s in range(2, 41) if s + 1 not in snaps and s not in snaps)
    resume = next(s for s in snaps if s > target)

    def change(raw: Raw) -> None:
        if how == "flipped":
            raw.put_envelope("a", target, flip(raw.envelope("a", target), HEADER_BYTES + 2))
        else:
            raw.delete_envelope("a", target)

    damage(lmdb_log, change)
    with CheckpointLog.open(lmdb_log, readonly=True) as cl:
        with pytest.raises(CorruptFrame):
            list(cl.history("a"))
        items = list(forensics.walk(cl.log, "a", tolerant=True))
        bad = [i for i in items if isinstance(i, forensics.Unreadable)]
        assert [(u.seq, u.last_seq, u.problem) for u in bad] == [
            (target, target, "damaged" if how == "flipped" else "missing"),
            (target + 1, resume - 1, "unrebuildable"),
        ]
        assert f"snapshot at seq {resume}" in bad[1].detail
        steps = [i for i in items if isinstance(i, forensics.Step)]
        assert [s.seq for s in steps] == [*range(1, target), *range(resume, 42)]
        resumed = [s.seq for s in steps if s.resumed]
        assert resumed == [resume]
        assert steps[-1].record() == cl.load("a")  # the head is still rebuilt after the damage
        assert [e.seq for e in cl.history("b")] == [1]  # other invocations read as before
        report = cl.verify()
        kinds = {(p.kind, p.seq) for p in report.problems if p.stream == "a"}
        assert ("checksum" if how == "flipped" else "index", target) in kinds, str(report)
        assert not [p for p in report.problems if p.stream == "b"], str(report)


def test_tolerant_export_lists_unreadable(lmdb_log: Path) -> None:
    damage(lmdb_log, lambda raw: raw.delete_envelope("a", 5))
    with CheckpointLog.open(lmdb_log, readonly=True) as cl:
        buf = io.BytesIO()
        summary = forensics.export(cl, "a", out=buf, tolerant=True)
        assert summary.unreadable[0].seq == 5
        lines = [json.loads(x) for x in buf.getvalue().splitlines()]
        assert {"seq": 5, "unreadable": "missing"}.items() <= lines[4].items()


def test_data_file_check_of_a_healthy_log(lmdb_log: Path) -> None:
    check = forensics.data_file_check(lmdb_log)
    assert check is not None
    assert check.page_bytes >= 4096
    assert check.file_bytes >= check.page_bytes * 2
    assert check.txn_id > 0
    assert forensics.data_file_check(lmdb_log / "nowhere") is None


def test_progress_bar_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    piped = io.StringIO()
    bar = forensics.ProgressBar("verify", stream=piped)
    bar(5, 10)
    bar(10, 10)
    bar.close()
    assert piped.getvalue() == ""
    tty = Tty()
    bar = forensics.ProgressBar("verify", stream=tty, interval=0)
    bar(5, 10)
    bar(10, 10)
    bar.close()
    drawn = tty.getvalue()
    assert "verify" in drawn
    assert "5/10" in drawn
    assert "10/10" in drawn
    assert "\n" in drawn.rsplit("10/10", 1)[1]  # closed: the bar's line is ended


# -- read-only while another process writes -----------------------------------------------

WRITER = """
import sys, time
from eventlog import CheckpointLog, CheckpointRecord, NodePosition
path, seconds = sys.argv[1], float(sys.argv[2])
with CheckpointLog.open(path) as cl:
    end, n = time.time() + seconds, 0
    while time.time() < end:
        inv = f"w{n % 5}"
        cl.save(inv, CheckpointRecord(inv, "live", {"n": n}, (NodePosition((), "s", n),), (),
                                      time.time()))
        n += 1
        if n % 20 == 0:
            print(n, time.time(), flush=True)
print("done", n, flush=True)
"""


def start_writer(path: Path, seconds: float) -> subprocess.Popen[str]:
    """A process saving durably to ``path`` for ``seconds``; prints ``count time`` as it goes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(seconds)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # it is writing
    return proc


def commits_between(out: str, t0: float, t1: float) -> int:
    """How many of the writer's progress lines were printed between ``t0`` and ``t1``."""
    times = [float(line.split()[1]) for line in out.splitlines() if not line.startswith("done")]
    return sum(1 for t in times if t0 < t < t1)


def test_readonly_reads_while_another_process_writes(tmp_path: Path) -> None:
    path = tmp_path / "live"
    with CheckpointLog.open(path) as cl:
        cl.save("w0", rec("w0", 0))
    proc = start_writer(path, 3.0)
    try:
        with CheckpointLog.open(path, readonly=True) as ro:
            with pytest.raises(ReadOnlyLog, match=r"opened read-only; open it writable"):
                ro.save("x", rec("x", 0))
            t0 = time.time()
            while time.time() < t0 + 1.5:
                # verify holds one read transaction for its whole walk: the writer goes on.
                report = ro.verify()
                assert report.ok, str(report)
                list(ro.history("w0"))
                forensics.export(ro, None, out=io.BytesIO())
            t1 = time.time()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert out.strip().splitlines()[-1].startswith("done")
    assert commits_between(out, t0, t1) >= 2, "the writer made no progress during the reads"
    with CheckpointLog.open(path, readonly=True) as ro:
        assert ro.verify().ok


def test_the_forensic_methods_of_checkpoint_log_are_deprecated(tmp_path: Path) -> None:
    """Issue 23: CheckpointLog's forensic pass-throughs moved to eventlog.forensics; the old
    names keep working for one release, with a DeprecationWarning naming the new call."""
    with CheckpointLog.open(tmp_path / "log", durability="process") as cl:
        cl.save("a", make_record("a", state={"n": 1}))
        cl.save("a", make_record("a", state={"n": 2}))
        with pytest.warns(DeprecationWarning, match=r"call eventlog\.forensics\.diff\(log"):
            old = cl.diff("a", 1, 2)
        assert old == forensics.diff(cl, "a", 1, 2)
        for name in ("record_as_of", "replay", "scan", "export", "compact"):
            with pytest.warns(DeprecationWarning, match=f"CheckpointLog.{name}"):
                getattr(cl, name)
        with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
            cl.nonesuch  # the attribute lookup is the test
