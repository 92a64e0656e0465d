"""Saves that make the LMDB map grow mid-commit: the retried transaction must not reuse
anything the aborted attempt changed (head cache, stream tails)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from eventlog.checkpoints import CheckpointLog
from eventlog.records import (
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)


@pytest.mark.parametrize("seed", [1, 2])
def test_checkpoint_saves_across_map_growth(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    n = 200
    path = tmp_path / "log"
    cl = CheckpointLog.open(
        path,
        durability="process",
        batching=FanOutInternalSaveBatching(flush_every=64),
        map_size_initial=1 << 20,
    )
    start_size = cl.log.backend.map_size  # type: ignore[attr-defined]
    fan = FanOutProgress("fan", (), n, (FanOutInstanceProgress("not_started"),) * n)
    first = CheckpointRecord(
        "inv", "c", {"blob": "x"}, (NodePosition((), "a", 1),), (), 1.0, fan_out_progress=(fan,)
    )
    cl.save("inv", first)
    expected: dict[int, FanOutInstanceProgress] = {}
    for i in rng.sample(range(n), n):
        progress = FanOutInstanceProgress(
            "completed", result={"i": i, "pad": rng.randbytes(3000).hex()}
        )
        expected[i] = progress
        cl.save_instance("inv", "fan", i, progress, saved_at=time.time())
    final_state = {"blob": rng.randbytes(20_000).hex()}
    cl.flush()  # the final record is built from the committed head, so commit it all first
    last = cl.load("inv")
    assert last is not None
    cl.save(
        "inv",
        CheckpointRecord(
            "inv",
            "c",
            final_state,
            last.completed_positions,
            (),
            time.time(),
            fan_out_progress=last.fan_out_progress,
        ),
    )
    assert cl.log.backend.map_size > start_size  # type: ignore[attr-defined]
    loaded = cl.load("inv")
    assert loaded is not None
    assert loaded.state == final_state
    assert loaded.fan_out_progress[0].instances == tuple(expected[i] for i in range(n))
    report = cl.verify()
    assert report.ok, str(report)
    cl.close()
