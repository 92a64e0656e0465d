"""The open-loop scheduler (benchmarks/openloop.py): arrivals keep their timetable when saves
stall, and latency is measured from the intended arrival (no coordinated omission)."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness import Param, Row
from benchmarks.openloop import OpenLoop, open_loop, timetable
from benchmarks.peers.base import Durability, InstanceSink, Peer

RATE = 100.0  # an arrival every 10 ms
STALL_S = 0.03  # each save takes 3x the gap between arrivals


def test_arrivals_keep_their_times_while_every_save_stalls() -> None:
    offsets = timetable(RATE, 0.5)  # 50 arrivals over 0.5 s
    result = open_loop(lambda i: time.sleep(STALL_S), offsets, drain_s=5.0, keep_arrivals=True)
    assert result.offered == len(offsets) == 50
    assert result.served == 50
    # The scheduler enqueued every arrival on time, though the saver fell ever further behind:
    # a scheduler waiting for the saves would enqueue the last arrival ~1 s late (49 x 20 ms).
    # (Bounds leave room for a machine whose every thread waits for a core.)
    lateness = sorted(actual - intended for intended, actual in result.arrivals)
    assert [i for i, _ in result.arrivals] == pytest.approx(offsets)
    assert lateness[len(lateness) // 2] < 0.05, lateness
    assert lateness[-1] < 0.3, lateness
    assert result.arrivals[-1][1] < 0.5 + 0.3  # the last arrival, due at 0.49 s
    assert result.backlog_max >= 25  # by the end most arrivals were waiting
    # Latency runs from the intended arrival: the last save waited for all the others, so it
    # is about 50 * 30 ms - 49 * 10 ms = 1.0 s, not the 30 ms a closed loop would report.
    assert result.latency.max_ns / 1e9 >= 0.9
    assert result.latency.percentile(50) > 0.3
    assert result.service.percentile(50) < 0.06  # each save itself took ~30 ms
    assert result.seconds >= 50 * STALL_S


def test_arrivals_past_the_drain_are_unserved_with_their_wait() -> None:
    offsets = timetable(RATE, 0.2)  # 20 arrivals; at 30 ms a save, ~7 are served in 0.2 s
    result = open_loop(lambda i: time.sleep(STALL_S), offsets, drain_s=0.05)
    assert 0 < result.served < result.offered
    assert result.unserved == result.offered - result.served
    assert result.latency.count == result.offered  # the unserved are counted, not dropped
    assert result.latency.max_ns / 1e9 >= 0.1  # the first unserved waited from ~0.1 s to 0.24 s


def test_a_fast_saver_sees_latency_near_its_service_time() -> None:
    result = open_loop(lambda i: None, timetable(500.0, 1.0), drain_s=1.0)
    assert result.served == result.offered == 500
    # Timed from each arrival, not from the run's start (that would make the p50 ~0.5 s); the
    # bound leaves room for a machine whose threads wait for a core.
    assert result.latency.percentile(50) < 0.1


def test_poisson_arrivals_come_from_the_seed() -> None:
    a = timetable(1000.0, 1.0, "poisson", seed=7)
    assert a == timetable(1000.0, 1.0, "poisson", seed=7)
    assert a != timetable(1000.0, 1.0, "poisson", seed=8)
    assert 850 < len(a) < 1150
    assert all(x < y for x, y in itertools.pairwise(a))
    assert timetable(4.0, 1.0) == [0.0, 0.25, 0.5, 0.75]
    with pytest.raises(ValueError, match="--rate must be positive"):
        timetable(0.0, 1.0)


class SleepySink:
    """A store whose every save stalls for STALL_S (the peer that sleeps)."""

    def __init__(self) -> None:
        self.saved: list[int] = []

    def setup(self, inv: str, n: int) -> None: ...

    def save(self, index: int, result: dict[str, Any]) -> None:
        time.sleep(STALL_S)
        self.saved.append(index)

    def flush(self) -> None: ...

    def probe(self, done: int) -> dict[str, float]:
        return {}

    def close(self) -> None: ...


class SleepyPeer(Peer):
    name = "sleepy"
    family = "user"
    package = "tests"
    durability = Durability("none", "memory only")
    api = "sleep"

    def __init__(self) -> None:
        self.sinks: list[SleepySink] = []

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None: ...

    async def close(self) -> None: ...

    def instance_sink(self, path: Path, batch: int) -> InstanceSink:
        sink = SleepySink()
        self.sinks.append(sink)
        return sink


def test_the_openloop_scenario_reports_queueing_behind_a_peer_that_sleeps(tmp_path: Path) -> None:
    scenario = OpenLoop()
    scenario.rates = (RATE,)
    scenario.seconds = 0.5
    (param,) = scenario.params(quick=True)
    assert param.values["rate"] == RATE
    peer = SleepyPeer()
    sample = asyncio.run(scenario.run(Row(peer, ""), param, tmp_path, 0))
    assert sample.extra["offered"] == 50
    assert sample.extra["offered_rate"] == RATE
    # Arrivals on time despite the stalls (coupled to the saves, the last would be ~1 s late).
    assert sample.extra["scheduler_lag_p50_us"] < 50_000
    assert sample.extra["scheduler_lag_p99_us"] < 400_000
    assert sample.hist is not None
    assert sample.hist.max_ns / 1e9 > 0.8  # ~50 * 30 ms - 49 * 10 ms of queueing
    assert sample.extra["service_p50_us"] < 60_000  # each save itself took ~30 ms
    assert sample.hist.max_ns / 1e3 > 5 * sample.extra["service_p50_us"]
    assert peer.sinks[0].saved == list(range(int(sample.ops)))


def test_load_points_are_fractions_of_each_rows_own_maximum(tmp_path: Path) -> None:
    scenario = OpenLoop()
    scenario.seconds = 0.2
    params = scenario.params(quick=True)
    assert [p.key for p in params] == ["max", "load=0.25", "load=0.5", "load=0.75", "load=0.9"]
    peer = SleepyPeer()
    row = Row(peer, "")
    top = asyncio.run(scenario.run(row, params[0], tmp_path / "max", 0))
    # closed loop: one save at a time, so never faster than one per stall (a loaded machine
    # only makes it slower)
    assert 0 < top.rate <= 1.05 / STALL_S
    half = asyncio.run(scenario.run(row, params[2], tmp_path / "half", 0))
    assert half.extra["offered_rate"] == pytest.approx(top.rate * 0.5)
    with pytest.raises(RuntimeError, match="no closed-loop maximum"):
        asyncio.run(scenario.run(Row(peer, "other"), params[1], tmp_path / "x", 0))
    assert isinstance(params[0], Param)
