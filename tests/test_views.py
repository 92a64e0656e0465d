"""Materialized views: one definition of "not started", and every view's rows survive
compaction and a rebuild from frames alone (issue 13)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from eventlog import forensics, views
from eventlog.checkpoints import CheckpointLog
from eventlog.frames import Event
from eventlog.integrations.apflow import TABLES as APFLOW_TABLES
from eventlog.integrations.apflow import LogCheckpointManager
from eventlog.integrations.langgraph import LmdbSaver
from eventlog.integrations.langgraph_store import TABLES as LG_TABLES
from eventlog.integrations.techrevati import TABLES as TECHREVATI_TABLES
from eventlog.integrations.techrevati import LogSaver
from eventlog.log import EventLog, VerifyReport
from eventlog.materialized import TABLES as CHECKPOINT_TABLES
from eventlog.records import NOT_STARTED, FanOutInstanceProgress, is_not_started
from eventlog.testing import fan_out, make_record, pos, rich_record


def _not_started_with_positions() -> FanOutInstanceProgress:
    return FanOutInstanceProgress("not_started", completed_inner_positions=(pos("inner", 0),))


def test_not_started_is_one_definition() -> None:
    assert is_not_started(NOT_STARTED)
    assert is_not_started(FanOutInstanceProgress("not_started"))
    assert not is_not_started(_not_started_with_positions())
    assert not is_not_started(FanOutInstanceProgress("in_flight"))


def test_not_started_with_positions_survives_load_record_at_and_verify(tmp_path: Path) -> None:
    inst = _not_started_with_positions()
    rec = make_record("a", fan_outs=[fan_out("f", [inst, NOT_STARTED])])
    with CheckpointLog.open(tmp_path / "log", durability="process") as cl:
        cl.save("a", rec)
        loaded = cl.load("a")
        assert loaded is not None
        assert loaded.fan_out_progress[0].instances == (inst, NOT_STARTED)
        at = cl.record_at("a", 1)
        assert at is not None
        assert at.fan_out_progress[0].instances == (inst, NOT_STARTED)
        report = cl.verify()
        assert report.ok, [str(p) for p in report.problems]


def test_verify_names_what_differs_between_two_not_started_instances(tmp_path: Path) -> None:
    from eventlog.materialized import FANOUT  # noqa: PLC0415

    rec = make_record("a", fan_outs=[fan_out("f", [_not_started_with_positions(), NOT_STARTED])])
    with CheckpointLog.open(tmp_path / "log", durability="process") as cl:
        cl.save("a", rec)
        backend = cl.log.backend
        with backend.read() as txn:
            ((key, _),) = list(txn.scan(FANOUT))

        def tamper(txn: Any) -> None:
            txn.put(FANOUT, key, msgspec.msgpack.encode(FanOutInstanceProgress("not_started")))

        backend.run_write(tamper)
        problems = [p.detail for p in cl.verify().problems]
    assert len(problems) == 1, problems
    got, _, want = problems[0].partition(", the fold says ")
    assert got.split(" is ", 1)[1] != want, problems[0]
    assert "inner positions ()" in got, problems[0]
    assert "NodePosition" in want, problems[0]


# -- every view through compaction and rebuild -------------------------------------------------

KINDS = ("checkpoint", "langgraph", "apflow", "techrevati")
TABLES = {
    "checkpoint": CHECKPOINT_TABLES,
    "langgraph": LG_TABLES,
    "apflow": APFLOW_TABLES,
    "techrevati": TECHREVATI_TABLES,
}


def _lg_put(
    saver: LmdbSaver, last: Any, step: int, values: dict[str, Any], versions: dict[str, Any]
) -> Any:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=step))
    cp["channel_values"] = values
    new = {k: saver.get_next_version(versions.get(k), None) for k in values}
    versions.update(new)
    cp["channel_versions"] = dict(versions)
    meta: Any = {"source": "loop", "step": step, "parents": {}}
    return saver.put(last, cp, meta, new)


def fill(log: EventLog, kind: str) -> None:
    """A history with updates, deletes and saves after a delete, through the integration."""
    if kind == "checkpoint":
        cl = CheckpointLog(log)
        for i in range(6):
            cl.save("inv-a", rich_record("inv-a", at=1.0 + i))
            cl.save("inv-b", make_record("inv-b", at=1.0 + i, state={"i": i, "pad": "x" * 300 * i}))
        log.append("inv-a", Event(name="note", data={"n": 1}, at=9.0))  # an event beside saves
        cl.delete("inv-b")
        cl.save("inv-b", make_record("inv-b", at=20.0, fan_outs=[fan_out("f", [NOT_STARTED])]))
        cl.save("inv-c", make_record("inv-c", at=3.0))
        cl.delete("inv-c")
        log.append("app-events", Event(name="boot", data=None, at=1.0))
    elif kind == "langgraph":
        lg = LmdbSaver(log)
        for thread in ("t1", "t2", "t3"):
            last: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            items: list[Any] = []
            versions: dict[str, Any] = {}
            for step in range(1, 6):
                items = [*items, {"step": step, "text": "y" * 3000}]
                last = _lg_put(lg, last, step, {"items": items, "n": step}, versions)
                lg.put_writes(last, [("n", step), ("items", None)], f"task-{step}")
        lg.delete_thread("t2")
    elif kind == "apflow":
        ap = LogCheckpointManager(log=log)

        async def run() -> None:
            for task in ("a", "b", "c"):
                for i in range(4):
                    await ap.save_checkpoint(task, {"i": i, task: [i]}, f"step{i}", attempt=i)
            await ap.delete_checkpoints("b")
            await ap.save_checkpoint("b", {"again": True})
            await ap.delete_checkpoints("c")

        asyncio.run(run())
    else:
        tr = LogSaver(log)
        for thread in ("x", "y", "z"):
            parent = None
            for i in range(4):
                parent = tr.put(thread, {"i": i}, parent_id=parent, metadata={"m": i}).id
                tr.put_step(thread, f"s{i % 2}", {"i": i})
        tr.delete("y")
        tr.put("y", {"after": "delete"})
        tr.put_step("y", "s9", {"k": 1})
        tr.delete("z")


def answers(log: EventLog, kind: str) -> Any:
    """What the integration's own read API answers."""
    if kind == "checkpoint":
        cl = CheckpointLog(log)
        return cl.list(), [cl.load(i) for i in ("inv-a", "inv-b", "inv-c")]
    if kind == "langgraph":
        lg = LmdbSaver(log)
        out = []
        for thread in ("t1", "t2", "t3"):
            tuples = list(lg.list({"configurable": {"thread_id": thread}}))
            out.append(
                [
                    (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
                    for t in tuples
                ]
            )
            got = lg.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
            out.append(None if got is None else got.checkpoint)
        return out
    if kind == "apflow":
        ap = LogCheckpointManager(log=log)

        async def run() -> Any:
            return [await ap.load_checkpoint(t) for t in ("a", "b", "c", "never")]

        return asyncio.run(run()), [ap.history(t) for t in ("a", "b", "c")]
    tr = LogSaver(log)
    return [
        (tr.get(t), tr.list(t), tr.list_steps(t), tr.get_step(t, "s0"), list(tr.history(t)))
        for t in ("x", "y", "z")
    ]


def own_verify(log: EventLog, kind: str) -> VerifyReport:
    if kind == "checkpoint":
        return CheckpointLog(log).verify()
    if kind == "langgraph":
        return LmdbSaver(log).verify()
    if kind == "apflow":
        return LogCheckpointManager(log=log).verify()
    return LogSaver(log).verify()


def dump(log: EventLog, kinds: tuple[str, ...]) -> dict[str, list[tuple[bytes, bytes]]]:
    with log.backend.read() as txn:
        return {t: list(txn.scan(t)) for k in kinds for t in TABLES[k]}


def _open(path: Path, kinds: tuple[str, ...]) -> EventLog:
    tables = [t for k in kinds for t in TABLES[k]]
    return EventLog.open(path, durability="process", extra_tables=tables)


def _check_rebuild(log: EventLog, kinds: tuple[str, ...]) -> None:
    before = dump(log, kinds)
    assert any(before.values())
    counts = views.rebuild(log)
    assert dump(log, kinds) == before
    assert all(counts[v.name] > 0 for v in views.REGISTRY if v.name in _view_names(kinds))


def _view_names(kinds: tuple[str, ...]) -> set[str]:
    return {"checkpoints" if k == "checkpoint" else k for k in kinds}


@pytest.mark.parametrize("keep", ["all", "heads"])
@pytest.mark.parametrize("kinds", [(k,) for k in KINDS] + [KINDS], ids=[*KINDS, "mixed"])
def test_compact_keeps_every_view_and_rebuild_reproduces_it(
    tmp_path: Path, kinds: tuple[str, ...], keep: str
) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    log = _open(src, kinds)
    try:
        for kind in kinds:
            fill(log, kind)
        want = {kind: answers(log, kind) for kind in kinds}
        for kind in kinds:
            report = own_verify(log, kind)
            assert report.ok, str(report)
        _check_rebuild(log, kinds)
        assert {k: answers(log, k) for k in kinds} == want
    finally:
        log.close()
    with CheckpointLog.open(src, readonly=True) as cl:  # the reproduction: ckptlog compact
        forensics.compact(cl, dest, keep=keep)
    out = _open(dest, kinds)
    try:
        got = {kind: answers(out, kind) for kind in kinds}
        if keep == "heads" and "checkpoint" in kinds:  # history is cut; heads stay
            assert got["checkpoint"] == want["checkpoint"]
        assert got == want
        for kind in kinds:
            report = own_verify(out, kind)
            assert report.ok, str(report)
        _check_rebuild(out, kinds)
    finally:
        out.close()


def test_verify_of_a_checkpoint_log_covers_every_view(tmp_path: Path) -> None:
    """CheckpointLog.verify iterates the registry: a damaged apflow head row is reported."""
    log = _open(tmp_path / "log", KINDS)
    try:
        fill(log, "apflow")
        fill(log, "checkpoint")

        def tamper(txn: Any) -> None:
            key, _ = next(iter(txn.scan(APFLOW_TABLES[0])))
            txn.delete(APFLOW_TABLES[0], key)

        log.backend.run_write(tamper)
        report = CheckpointLog(log).verify()
        assert [p.detail for p in report.problems if "apflow head row is None" in p.detail]
        views.rebuild(log)
        report = CheckpointLog(log).verify()
        assert report.ok, str(report)
    finally:
        log.close()


def test_applying_each_frame_in_order_reproduces_every_view(tmp_path: Path) -> None:
    """View.apply (what compaction runs per copied frame) gives the writer's rows."""
    log = _open(tmp_path / "log", KINDS)
    try:
        for kind in KINDS:
            fill(log, kind)
        before = dump(log, KINDS)
        with log.backend.read() as txn:
            streams = [(name, log.stream_id(txn, name)) for name in log.streams()]
        frames = {name: list(log.read_stream(name)) for name, _ in streams}

        def write(txn: Any) -> None:
            for view in views.REGISTRY:
                for table in view.tables:
                    txn.delete_prefix(table, b"")
            for name, sid in streams:
                assert sid is not None
                owner = views.claiming(name, frames[name][0].frame)
                if owner is None:
                    continue
                for sf in frames[name]:
                    owner.apply(txn, name, sid, sf.seq, sf.frame, sf.stored_bytes)

        log.backend.run_write(write)
        assert dump(log, KINDS) == before
    finally:
        log.close()


def test_open_readonly_never_forks_and_reads_a_truncated_file_from_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library call never forks its caller (issue 13); a short data file is read from a
    zero-filled copy and reported, without a probe."""
    path = tmp_path / "log"
    with CheckpointLog.open(path, durability="process") as cl:
        for i in range(200):
            cl.save(f"inv-{i}", make_record(f"inv-{i}", state={"pad": "p" * 2000}))
    data = path / "data.mdb"
    size = data.stat().st_size
    os.truncate(data, size - 8 * 4096)

    def no_fork() -> int:
        raise AssertionError("open_readonly forked the caller's process")

    monkeypatch.setattr(os, "fork", no_fork)
    with forensics.open_readonly(path) as opened:
        assert [p.kind for p in opened.problems] == ["truncated"]
        report = opened.log.verify()
        assert not report.ok
    assert data.stat().st_size == size - 8 * 4096  # the file itself is never changed
