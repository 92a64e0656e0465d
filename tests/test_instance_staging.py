"""Buffered ``save_instance`` calls are staged (one list append each, issue 22) and taken into
the log's buffers whenever those are read: call order, the loss window, delete, close, flush
and the frame cuts stay what they were with per-call buffering."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from backends.memory import MemoryBackend
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.errors import LogClosed
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
)

N = 8


def _record(inv: str, instances: tuple[FanOutInstanceProgress, ...] = ()) -> CheckpointRecord:
    fan = FanOutProgress("f", (), N, instances or (NOT_STARTED,) * N)
    return CheckpointRecord(inv, "c", {}, (), (), 1.0, fan_out_progress=(fan,))


def _log(flush_every: int = 1000, **options: object) -> CheckpointLog:
    cl = CheckpointLog.on_backend(
        MemoryBackend(), batching=FanOutInternalSaveBatching(flush_every=flush_every), **options
    )
    cl.save("a", _record("a"))
    cl.save("b", _record("b"))
    return cl


def _done(i: int) -> FanOutInstanceProgress:
    return FanOutInstanceProgress("completed", {"i": i})


def _states(cl: CheckpointLog, inv: str) -> list[str]:
    rec = cl.load(inv)
    assert rec is not None
    return [x.state for x in rec.fan_out_progress[0].instances]


def test_staged_calls_keep_call_order_with_other_buffered_saves() -> None:
    cl = _log()
    cl.save_instance("a", "f", 0, _done(0))
    assert cl._staged  # staged, not yet in the log's buffers
    # a buffered whole-record save after it: instance 0 back to not started wins
    cl.save_fan_out_internal("a", _record("a"))
    cl.save_instance("a", "f", 1, _done(1))
    assert cl.log.buffered_count("a") == 3
    cl.flush()
    assert _states(cl, "a")[:2] == ["not_started", "completed"]
    assert cl.verify().ok


def test_a_durable_save_commits_the_staged_calls_first() -> None:
    cl = _log()
    cl.save_instance("a", "f", 0, _done(0))
    cl.save("a", _record("a", (_done(5),) * N))  # the later save wins everywhere
    assert _states(cl, "a") == ["completed"] * N
    assert [f.frame.kind for f in cl.log.read_stream("a")][-2:] == [
        "fan_out_internal",
        "save",
    ]


def test_interleaved_invocations_become_one_frame_per_run() -> None:
    cl = _log()
    for inv, i in (("a", 0), ("a", 1), ("b", 0), ("a", 2), ("b", 1), ("b", 2)):
        cl.save_instance(inv, "f", i, _done(i))
    assert cl.log.buffered_count("a") == 3
    assert cl.log.buffered_count("b") == 3
    before = {s: cl.log.last_seq(s) for s in "ab"}
    cl.flush()
    assert {s: cl.log.last_seq(s) - before[s] for s in "ab"} == {"a": 2, "b": 2}
    assert _states(cl, "a")[:4] == _states(cl, "b")[:4] == ["completed"] * 3 + ["not_started"]


@pytest.mark.parametrize("staging", [True, False])
def test_staged_calls_are_cut_like_buffered_batches(staging: bool) -> None:
    cl = _log()
    cl._staging = staging  # False: each call buffered by EventLog.buffer_into, as before
    one = len(cl._instance_change("a", "f", 0, _done(0), (), (), None).raw) + 48
    cl.batch_bytes_max = 3 * one  # three changes per frame
    for i in range(N):
        cl.save_instance("a", "f", i, _done(i))
    assert bool(cl._staged) is staging
    before = cl.log.last_seq("a")
    cl.flush()
    assert cl.log.last_seq("a") - before == 3  # 3 + 3 + 2
    assert _states(cl, "a") == ["completed"] * N
    assert cl.verify().ok


def test_flush_every_counts_staged_calls() -> None:
    cl = _log(flush_every=4)
    before = cl.log.last_seq("a")
    for i in range(3):
        cl.save_instance("a", "f", i, _done(i))
    assert cl.log.last_seq("a") == before  # nothing committed: the loss window
    cl.save_instance("a", "f", 3, _done(3))
    assert cl.log.last_seq("a") == before + 1
    assert cl.log.buffered_count() == 0
    assert _states(cl, "a")[:5] == ["completed"] * 4 + ["not_started"]


def test_delete_drops_the_staged_calls() -> None:
    cl = _log()
    cl.save_instance("a", "f", 0, _done(0))
    cl.save_instance("b", "f", 0, _done(0))
    cl.delete("a")
    cl.flush()
    assert cl.load("a") is None
    assert _states(cl, "b")[0] == "completed"


def test_close_commits_the_staged_calls_then_refuses_more(tmp_path: Path) -> None:
    cl = CheckpointLog.open(
        tmp_path / "log", durability="process", batching=FanOutInternalSaveBatching(100)
    )
    cl.save("a", _record("a"))
    cl.save_instance("a", "f", 3, _done(3))
    cl.close()
    with pytest.raises(LogClosed):
        cl.save_instance("a", "f", 4, _done(4))
    with CheckpointLog.open(tmp_path / "log", durability="process") as again:
        assert _states(again, "a")[3:5] == ["completed", "not_started"]


def test_a_flush_interval_buffers_each_call_as_before() -> None:
    cl = _log(flush_interval=60.0)
    cl.save_instance("a", "f", 0, _done(0))
    assert not cl._staged  # the interval's timer watches the buffers: nothing is staged
    assert cl.log.buffered_count("a") == 1
    cl.flush()
    assert _states(cl, "a")[0] == "completed"


def test_async_save_instance_stages_too() -> None:
    async def main() -> list[str]:
        cp = Checkpointer.on_backend(
            MemoryBackend(), batching=FanOutInternalSaveBatching(flush_every=3)
        )
        await cp.save("a", _record("a"))
        for i in range(4):
            await cp.save_instance("a", "f", i, _done(i))
        assert cp.sync.log.buffered_count("a") == 1  # the fourth, after the flush at three
        await cp.flush()
        rec = await cp.load("a")
        assert rec is not None
        return [x.state for x in rec.fan_out_progress[0].instances]

    assert asyncio.run(main())[:5] == ["completed"] * 4 + ["not_started"]


def test_staged_calls_join_the_last_buffered_batch() -> None:
    cl = _log()
    before = cl.log.last_seq("a")
    cl.save_instance("a", "f", 0, _done(0), saved_at=5.0)  # buffered by the log, not staged
    cl.save_instance("a", "f", 1, _done(1))
    assert cl.log.buffered_count("a") == 2  # reading the buffers takes the staged call in
    cl.save_instance("a", "f", 2, _done(2))
    cl.flush()
    assert cl.log.last_seq("a") == before + 1  # one batch frame, as buffering each call makes
    assert _states(cl, "a")[:4] == ["completed"] * 3 + ["not_started"]
    history = list(cl.history("a"))
    assert len(history) == 2  # the save and the batch


@pytest.mark.parametrize(
    ("sizes", "frames"),
    [
        ([1, 1, 1, 1, 1, 1, 1, 1], [3, 3, 2]),  # three small changes per frame
        ([3, 1, 1, 1, 1, 1, 1, 1], [1, 3, 3, 1]),  # the first fills a frame alone
        ([9, 1, 1, 9, 1, 1, 1, 9], [1, 2, 1, 3, 1]),  # one above the cap: a frame of its own
    ],
)
def test_save_instances_frames_are_cut_by_bytes(sizes: list[int], frames: list[int]) -> None:
    """A ``save_instances`` call is cut into frames where the next change would pass
    ``batch_bytes_max``; a change bigger than that is a frame of its own, the first too."""
    cl = _log()
    small = FanOutInstanceProgress("completed", {"i": 0, "pad": ""})
    unit = len(cl._instance_change("a", "f", 0, small, (), (), None).raw) + 48  # a change's size
    items = [
        (i, FanOutInstanceProgress("completed", {"i": i, "pad": "x" * ((k - 1) * unit)}))
        for i, k in enumerate(sizes)
    ]
    one = [len(cl._instance_change("a", "f", i, p, (), (), None).raw) + 48 for i, p in items]
    cl.batch_bytes_max = 3 * min(one)
    built = cl._instance_batches("a", "f", items, (), (), None)
    assert [len(f.changes) for f in built] == frames
    ends = list(itertools.accumulate(frames))
    assert [f.bytes for f in built] == [
        sum(one[e - n : e]) for e, n in zip(ends, frames, strict=True)
    ]
    cl.save_instances("a", "f", items)
    cl.flush()
    assert _states(cl, "a") == ["completed"] * N
    assert cl.verify().ok
