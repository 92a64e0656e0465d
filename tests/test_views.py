"""Materialized views: one definition of "not started", and every view's rows survive
compaction and a rebuild from frames alone (issue 13)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from eventlog.checkpoints import CheckpointLog
from eventlog.records import NOT_STARTED, FanOutInstanceProgress, is_not_started
from eventlog.testing import fan_out, make_record, pos


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
