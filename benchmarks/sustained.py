"""Sustained runs (``--duration 15m``): does rows/s hold over a long job?

A burst of seconds cannot show what a long job meets: the map growing, free pages reused,
snapshots taken at their cadence, the page cache filling. With ``--duration D`` the
``instances`` and ``linear`` scenarios run as ``sustained-instances`` and ``sustained-linear``:
one run per row of ``D`` seconds, cut into intervals (a minute from ``D`` = 2 minutes, else a
sixth of ``D``), each reporting its rate, its latency percentiles (one
:class:`~benchmarks.histogram.Histogram` per interval: constant memory however long the run),
the store's size on disk (allocated blocks) and the process's RSS. The row reports the decay
(the last interval's rate over the first's) and what the store grew to.

- ``sustained-instances``: the ``instances`` path, in a fresh subprocess per run (as there):
  fan-outs of ``job_n`` instances back to back (a new invocation each, its N-instance record
  saved when it starts, inside the timed clock: it is part of the job), each instance's result
  saved as it completes and committed every 256 rows. Latency is per batch of 256 rows (the
  commit's stall is the tail a job sees).
- ``sustained-linear``: sequential saves of one invocation (4 KiB state), each durable on return
  per the peer. Inputs are prepared in chunks of 256 outside the timed clock: the rate and the
  duration count time spent saving only.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path
from typing import Any, Literal

from benchmarks.harness import Param, Row, Sample
from benchmarks.histogram import Histogram
from benchmarks.instances import BATCH, NA_BY_FAMILY, result_of
from benchmarks.instances import Instances as _Instances
from benchmarks.peers.base import Peer

JOB_N = 100_000
QUICK_JOB_N = 1000
LINEAR_STATE = 4096
QUICK_LINEAR_STATE = 200
CHUNK = 256  # linear: saves prepared at a time
MARGIN_S = 600.0  # a subprocess may run this long past its duration (set-up, close)


def parse_duration(text: str) -> float:
    """``"15m"``, ``"90s"``, ``"1h"``, ``"2.5m"`` or plain seconds -> seconds (> 0)."""
    t = text.strip().lower()
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(t[-1:])
    number = t[:-1] if scale is not None else t
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"--duration expects a positive time like 15m, 90s or 1h, got {text!r}")
    return seconds


def interval_of(duration_s: float) -> float:
    """A minute from two minutes on, else a sixth of the run (at least 6 points)."""
    return 60.0 if duration_s >= 120 else duration_s / 6


def store_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (sparse files count what they use)."""
    total = 0
    for p in path.rglob("*"):
        try:
            st = p.stat()
        except OSError:
            continue
        if p.is_file():
            total += st.st_blocks * 512
    return total


def rss_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


class Timeline:
    """Per-interval counts and histograms on a clock the caller advances."""

    def __init__(self, path: Path, interval_s: float) -> None:
        self.path = path
        self.interval_s = interval_s
        self.points: list[dict[str, float]] = []
        self.hists: list[Histogram] = []  # one per point: a few KiB each, however long the run
        self.hist = Histogram()
        self.ops = 0  # operations at the current interval's start
        self.start = 0.0  # clock at the current interval's start

    def record(self, seconds: float) -> None:
        self.hist.record(seconds)

    def maybe_cut(self, clock: float, ops: int) -> None:
        """Close the interval if ``clock`` passed its end (``ops``: operations so far)."""
        if clock - self.start >= self.interval_s:
            self.cut(clock, ops)

    def cut(self, clock: float, ops: int, *, last: bool = False) -> None:
        """Close the interval at ``clock``; the ``last`` one, when under half an interval
        long, is folded into the one before (a rate over a sliver would be noise)."""
        if clock - self.start <= 0:
            return
        if last and self.points and clock - self.start < self.interval_s / 2:
            prev = self.points.pop()
            self.hist = self.hists.pop().merge(self.hist)
            self.start, self.ops = prev["t0_s"], self.ops - int(prev["ops"])
        span, done = clock - self.start, ops - self.ops
        s = self.hist.summary_us()
        self.points.append(
            {
                "t0_s": round(self.start, 3),
                "t_s": round(clock, 3),
                "ops": done,
                "rate": round(done / span, 3),
                **{k: s[k] for k in ("p50_us", "p99_us", "p999_us", "max_us")},
                "store_bytes": store_bytes(self.path),
                "rss_bytes": rss_bytes(),
            }
        )
        self.hists.append(self.hist)
        self.hist = Histogram()
        self.ops, self.start = ops, clock

    @property
    def total(self) -> Histogram:
        out = Histogram()
        for h in self.hists:
            out.merge(h)
        return out.merge(self.hist)

    def extra(self) -> dict[str, float]:
        """Decay (last interval's rate / first's) and the final size of the store."""
        out: dict[str, float] = {}
        if self.points:
            first, last = self.points[0]["rate"], self.points[-1]["rate"]
            out["decay"] = last / first if first else 0.0
            out["store_bytes_end"] = self.points[-1]["store_bytes"]
            out["peak_interval_rss_bytes"] = max(p["rss_bytes"] for p in self.points)
            out["intervals"] = len(self.points)
        return out


class _Sustained:
    mode: Literal["write", "read"] = "write"
    primary: Literal["rate_median", "p50_us"] = "rate_median"
    higher_is_better = True
    warmup = False
    duration_s = 60.0  # set by --duration

    def repeats(self, param: Param, default: int) -> int:
        return 1  # one long run per row: its intervals are the repeated measure

    def forget(self) -> None:
        """Nothing is cached."""

    def settings(self, quick: bool) -> dict[str, Any]:
        return {p.key: p.values for p in self.params(quick)}

    def params(self, quick: bool) -> list[Param]:
        raise NotImplementedError

    async def build(self, peer: Peer, param: Param, budget_s: float) -> None:
        raise NotImplementedError(f"{type(self).__name__} is a write scenario")

    async def measure(self, row: Row, param: Param, warmup: bool) -> Sample:
        raise NotImplementedError(f"{type(self).__name__} is a write scenario")


class SustainedInstances(_Sustained):
    name = "sustained-instances"
    title = "Sustained per-instance results: rows/s over a long job"
    description = (
        "The instances path for a fixed duration: fan-outs of job_n instances back to back, each "
        "instance's ~60-byte result saved as it completes, committed every 256 rows; rows/s, "
        "latency per batch of 256 rows and the store's size per interval. One fresh subprocess "
        "and store per row."
    )
    metric = "rows/s"

    def params(self, quick: bool) -> list[Param]:
        d = self.duration_s
        values = {
            "duration_s": d,
            "interval_s": interval_of(d),
            "job_n": QUICK_JOB_N if quick else JOB_N,
            "batch": BATCH,
        }
        return [Param(f"duration={d:g}", f"{_fmt_duration(d)}", values)]

    def applicable(self, peer: Peer) -> str | None:
        return _Instances().applicable(peer)

    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample:
        spec = {"peer": row.peer.origin, "path": str(path), **param.values}
        return _subprocess(spec, timeout=param.values["duration_s"] + MARGIN_S)


class SustainedLinear(_Sustained):
    name = "sustained-linear"
    title = "Sustained sequential saves: saves/s over a long run"
    description = (
        "Sequential saves of one invocation for a fixed duration (4 KiB state), each durable on "
        "return per the peer; saves/s, latency per save and the store's size per interval. "
        "Inputs are prepared in chunks of 256 outside the timed clock."
    )
    metric = "saves/s"

    def params(self, quick: bool) -> list[Param]:
        d = self.duration_s
        size = QUICK_LINEAR_STATE if quick else LINEAR_STATE
        values = {"duration_s": d, "interval_s": interval_of(d), "state_bytes": size}
        return [Param(f"duration={d:g}", _fmt_duration(d), values)]

    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample:
        from benchmarks.scenarios import save_op, settle  # noqa: PLC0415 - scenarios imports us

        duration, size = param.values["duration_s"], param.values["state_bytes"]
        peer = row.peer
        await peer.open(path)
        timeline = Timeline(path, param.values["interval_s"])
        clock = 0.0  # time spent saving
        k = 0
        try:
            while clock < duration:
                items = peer.prepare(
                    [save_op("linear", "bench", k + j, size) for j in range(CHUNK)]
                )
                settle()
                for item in items:
                    a = time.perf_counter()
                    await peer.save(item)
                    took = time.perf_counter() - a
                    clock += took
                    k += 1
                    timeline.record(took)
                    timeline.maybe_cut(clock, k)
                    if clock >= duration:
                        break
            timeline.cut(clock, k, last=True)
        finally:
            await peer.close()
        return Sample(
            k, clock, hist=timeline.total, extra=timeline.extra(), timeline=timeline.points
        )


def _fmt_duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _subprocess(spec: dict[str, Any], *, timeout: float) -> Sample:
    import subprocess  # noqa: PLC0415

    from benchmarks.instances import _child_env  # noqa: PLC0415

    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.sustained", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_child_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"the sustained run ran past {timeout:.0f} s") from e
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"the sustained run failed (exit {proc.returncode}): {last}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return Sample(
        out["ops"],
        out["seconds"],
        bytes_written=out["bytes_written"],
        extra=out["extra"],
        hist=Histogram.from_json(out["hist"]),
        timeline=out["timeline"],
    )


def run_instances(spec: dict[str, Any], peer: Peer) -> dict[str, Any]:
    """One sustained instances run in this process (the subprocess's body)."""
    from benchmarks.common import process_write_bytes  # noqa: PLC0415

    if type(peer).instance_sink is Peer.instance_sink:
        raise ValueError(NA_BY_FAMILY.get(peer.family, f"{peer.name} has no per-instance store"))
    path = Path(spec["path"])
    duration, job_n, batch = float(spec["duration_s"]), int(spec["job_n"]), int(spec["batch"])
    sink = peer.instance_sink(path, batch)
    if not callable(getattr(sink, "save", None)) or _is_async(sink.save):
        raise ValueError("sustained-instances runs the built-in (synchronous) per-instance stores")
    timeline = Timeline(path, float(spec["interval_s"]))
    gc.collect()
    w0 = process_write_bytes()
    done = jobs = 0
    setup_s = 0.0
    t0 = time.perf_counter()
    clock = 0.0
    try:
        while clock < duration:
            a = time.perf_counter()
            sink.setup(f"job-{jobs:06d}", job_n)
            setup_s += time.perf_counter() - a
            jobs += 1
            save = sink.save
            for start in range(0, job_n, batch):
                a = time.perf_counter()
                for i in range(start, min(start + batch, job_n)):
                    save(i, result_of(i))
                now = time.perf_counter()
                timeline.record(now - a)
                done += min(batch, job_n - start)
                clock = now - t0
                timeline.maybe_cut(clock, done)
                if clock >= duration:
                    break
        sink.flush()
        clock = time.perf_counter() - t0
        timeline.cut(clock, done, last=True)
        written = process_write_bytes()
    finally:
        sink.close()
    extra = timeline.extra()
    extra.update({"jobs": jobs, "setup_s": setup_s, "store_bytes_end": store_bytes(path)})
    return {
        "ops": done,
        "seconds": clock,
        "bytes_written": None if w0 is None or written is None else written - w0,
        "extra": extra,
        "hist": timeline.total.to_json(),
        "timeline": timeline.points,
    }


def _is_async(fn: Any) -> bool:
    import inspect  # noqa: PLC0415

    return inspect.iscoroutinefunction(fn)


SUSTAINED: dict[str, Any] = {"instances": SustainedInstances(), "linear": SustainedLinear()}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.sustained RUN_JSON", file=sys.stderr)
        return 2
    from benchmarks.peers import peer_from_origin  # noqa: PLC0415 - the child's import

    spec = json.loads(args[0])
    out = run_instances(spec, peer_from_origin(spec["peer"]))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
