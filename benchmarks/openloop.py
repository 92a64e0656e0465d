"""Open-loop load (``--rate N``): latency at a load a service would run at, not at saturation.

A closed loop (save, then the next save) measures latency only at saturation, and hides every
stall behind it: while one save stalls, the saves that would have arrived meanwhile are never
issued, so they are never timed (coordinated omission). Here a separate scheduler thread issues
arrivals on a fixed timetable (``fixed``: every ``1 / rate`` s; ``poisson``: exponential gaps from
``random.Random(seed)``) into a queue, whatever the saves do; the saver takes them in order and
each save's latency runs from its *intended* arrival time to its return, so the queueing behind a
slow save is counted (wrk2's and pgbench ``--rate``'s method).

Each save is one row committed (an instance store with a batch of 1): a save that returns is
durable per the peer, as a service acknowledging a request would need. The rows are those of
the ``instances`` scenario (ckptlog ``save_instance`` under ``flush_every=1``; the hand-rolled
SQLite, LMDB and JSON Lines stores committing each row).

Without ``--rate``, each row first runs closed-loop for the same time (``max``: its saturated
rate), then open-loop at 25 %, 50 %, 75 % and 90 % of its own maximum: the table of p99 against
offered load. With ``--rate N[,N...]`` every row runs at those absolute rates instead.

A run offers arrivals for ``seconds``; the saver may drain the queue for as long again (at
least 1 s), then abandons what is left: those arrivals are counted ``unserved`` and enter the
latency histogram with their wait so far (a lower bound), never dropped.
"""

from __future__ import annotations

import math
import queue
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from benchmarks.common import process_write_bytes
from benchmarks.harness import Param, Row, Sample
from benchmarks.histogram import Histogram
from benchmarks.instances import NA_BY_FAMILY, result_of
from benchmarks.peers.base import Peer

SECONDS = 10.0
QUICK_SECONDS = 0.5
FRACTIONS = (0.25, 0.5, 0.75, 0.9)
# Instances per fan-out record; a run starts a new fan-out (its record saved inline, as a job
# would) every JOB_N saves. Small on purpose: ckptlog's cost per commit grows with the fan-out's
# N (see the instances scenario), and a batch of 1 pays it at every save.
JOB_N = 10_000
Arrivals = Literal["fixed", "poisson"]
OTHER_ROWS = (
    "the open-loop table compares ckptlog with the hand-rolled SQLite store (a fixed-rate run "
    "takes 10 s per load point); see instances for this store's throughput"
)


def timetable(
    rate: float, seconds: float, arrivals: Arrivals = "fixed", seed: int = 0
) -> list[float]:
    """Intended arrival offsets (s from the start) within ``seconds`` at ``rate`` per second."""
    if rate <= 0:
        raise ValueError(f"--rate must be positive, got {rate}")
    if arrivals == "fixed":
        return [i / rate for i in range(max(1, math.ceil(rate * seconds)))]
    rng = random.Random(seed)
    out, t = [], 0.0
    while t < seconds:
        out.append(t)
        t += rng.expovariate(rate)
    return out


@dataclass
class OpenLoopResult:
    offered: int  # arrivals issued
    served: int
    seconds: float  # from the first intended arrival to the last save's return
    latency: Histogram  # intended arrival -> return (unserved: their wait so far)
    service: Histogram  # save start -> return
    lag: Histogram  # the scheduler's actual enqueue time - the intended time
    backlog_max: int  # the deepest the queue got
    arrivals: list[tuple[float, float]] = field(default_factory=list)  # (intended, actual)

    @property
    def unserved(self) -> int:
        return self.offered - self.served


def open_loop(
    save: Callable[[int], Any],
    offsets: Sequence[float],
    *,
    drain_s: float,
    keep_arrivals: bool = False,
) -> OpenLoopResult:
    """Offer ``save(i)`` at ``start + offsets[i]`` from a scheduler thread; run the saves here.

    The scheduler never waits for a save: it sleeps until each intended time, stamps and
    enqueues the arrival, and moves on. The caller's thread takes arrivals in order and times
    each from its intended time. After the last arrival the saver drains for ``drain_s``, then
    abandons the rest (counted unserved, their wait so far recorded)."""
    q: queue.SimpleQueue[tuple[int, float, float] | None] = queue.SimpleQueue()
    start = time.perf_counter() + 0.005  # the scheduler's thread is up before the first arrival
    depth = [0]

    def schedule() -> None:
        for i, off in enumerate(offsets):
            target = start + off
            wait = target - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            depth[0] += 1
            q.put((i, target, time.perf_counter()))
        q.put(None)

    scheduler = threading.Thread(target=schedule, name="open-loop-scheduler", daemon=True)
    latency, service, lag = Histogram(), Histogram(), Histogram()
    arrivals: list[tuple[float, float]] = []
    backlog_max = served = 0
    give_up = start + (offsets[-1] if offsets else 0.0) + drain_s
    end = start
    # The scheduler needs the GIL to enqueue on time while the saver runs Python code: hand it
    # over every 0.5 ms instead of every 5 ms for the run (its lateness is still measured: lag).
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 0.0005))
    scheduler.start()
    try:
        while True:
            item = q.get()
            if item is None:
                break
            i, target, actual = item
            backlog_max = max(backlog_max, depth[0])
            depth[0] -= 1
            lag.record(actual - target)
            if keep_arrivals:
                arrivals.append((target - start, actual - start))
            a = time.perf_counter()
            if a > give_up:  # abandoned: its wait so far is a lower bound of its latency
                latency.record(a - target)
                continue
            save(i)
            end = time.perf_counter()
            latency.record(end - target)
            service.record(end - a)
            served += 1
    finally:
        scheduler.join()
        sys.setswitchinterval(switch)
    return OpenLoopResult(
        offered=len(offsets),
        served=served,
        seconds=max(end - start, 1e-9),
        latency=latency,
        service=service,
        lag=lag,
        backlog_max=backlog_max,
        arrivals=arrivals,
    )


def closed_loop(save: Callable[[int], Any], seconds: float) -> tuple[int, float, Histogram]:
    """Saves back to back for ``seconds``: how many, the time taken, their latencies."""
    hist = Histogram()
    done = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    now = t0
    while now < deadline:
        a = time.perf_counter()
        save(done)
        now = time.perf_counter()
        hist.record(now - a)
        done += 1
    return done, now - t0, hist


class _RowSaver:
    """Row ``i`` saved and committed; a new fan-out record every ``JOB_N`` rows (untimed
    set-up happens before the run for the first)."""

    def __init__(self, sink: Any, job_n: int) -> None:
        self.sink = sink
        self.job_n = job_n
        self.jobs = 0

    def setup(self) -> None:
        self.sink.setup(f"job-{self.jobs:04d}", self.job_n)
        self.jobs += 1

    def __call__(self, i: int) -> None:
        index = i % self.job_n
        if index == 0 and i:
            self.setup()
        self.sink.save(index, result_of(index))
        self.sink.flush()  # a no-op after a batch of 1 committed; kept for --peer stores


class OpenLoop:
    name = "openloop"
    title = "Open-loop load: latency at a fixed offered rate"
    description = (
        "Saves offered at a fixed rate by a separate scheduler thread (no coordinated omission: "
        "a slow save does not slow the arrivals, and latency runs from each save's intended "
        "arrival). Each save is one row committed: the instances stores with a batch of 1. "
        "Without --rate: each row's closed-loop maximum first, then 25/50/75/90 % of it."
    )
    mode: Literal["write", "read"] = "write"
    metric = "saves/s served"
    primary: Literal["rate_median", "p50_us"] = "rate_median"
    higher_is_better = True
    warmup = False

    def __init__(self) -> None:
        self.rates: tuple[float, ...] | None = None  # --rate
        self.arrivals: Arrivals = "fixed"
        self.seed = 0
        self.seconds: float | None = None
        self._max: dict[str, float] = {}

    def duration(self, quick: bool) -> float:
        return self.seconds or (QUICK_SECONDS if quick else SECONDS)

    def params(self, quick: bool) -> list[Param]:
        s = self.duration(quick)
        common = {"seconds": s, "arrivals": self.arrivals, "seed": self.seed}
        if self.rates:
            return [Param(f"rate={r:g}", f"{r:,.0f}/s", {"rate": r, **common}) for r in self.rates]
        out = [Param("max", "closed-loop max", {"fraction": None, **common})]
        out += [
            Param(f"load={f:g}", f"{f:.0%} of max", {"fraction": f, **common}) for f in FRACTIONS
        ]
        return out

    def settings(self, quick: bool) -> dict[str, Any]:
        return {p.key: p.values for p in self.params(quick)}

    def repeats(self, param: Param, default: int) -> int:
        return 1  # one run per point: its thousands of saves are the sample

    def applicable(self, peer: Peer) -> str | None:
        if type(peer).instance_sink is Peer.instance_sink:
            return NA_BY_FAMILY.get(peer.family, f"{peer.name} has no per-instance store")
        if peer.family == "rows" and not peer.name.startswith("sqlite-rows"):
            return OTHER_ROWS
        return None

    def forget(self) -> None:
        """The maxima are kept for the following load points (cleared per run by the CLI)."""

    def reset(self) -> None:
        self._max.clear()

    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample:
        v = param.values
        seconds = float(v["seconds"])
        sink = row.peer.instance_sink(path, 1)
        saver = _RowSaver(sink, JOB_N)
        try:
            saver.setup()
            w0 = process_write_bytes()
            if "rate" not in v and v["fraction"] is None:
                done, took, hist = closed_loop(saver, seconds)
                self._max[row.label] = done / took
                written = _written(w0)
                return Sample(done, took, bytes_written=written, hist=hist)
            if "rate" in v:
                rate = float(v["rate"])
            else:
                top = self._max.get(row.label)
                if top is None:
                    raise RuntimeError(f"no closed-loop maximum measured for {row.label}")
                rate = top * float(v["fraction"])
            offsets = timetable(rate, seconds, v["arrivals"], int(v["seed"]))
            r = open_loop(saver, offsets, drain_s=max(1.0, seconds))
            written = _written(w0)
        finally:
            sink.close()
        service = r.service.summary_us()
        lag = r.lag.summary_us()
        extra = {
            "offered_rate": rate,
            "offered": r.offered,
            "unserved": r.unserved,
            "backlog_max": r.backlog_max,
            "service_p50_us": service["p50_us"] or 0.0,
            "service_p99_us": service["p99_us"] or 0.0,
            "scheduler_lag_p50_us": lag["p50_us"] or 0.0,
            "scheduler_lag_p99_us": lag["p99_us"] or 0.0,
            "scheduler_lag_max_us": lag["max_us"] or 0.0,
        }
        return Sample(r.served, r.seconds, bytes_written=written, hist=r.latency, extra=extra)


def _written(before: int | None) -> int | None:
    after = process_write_bytes()
    return None if before is None or after is None else after - before


OPENLOOP = OpenLoop()
