"""Head ``load`` of one big fan-out, lazy (issue 22) against eager, in one process.

``python -m benchmarks.lazy_load [--n N] [--log PATH] [--rounds R] [--eager-rounds E] [--out PATH]``

Builds (or reuses, ``--log``) a log whose one invocation ``job`` holds a fan-out of N instances,
every one completed with a ~20-byte result (``save`` of the N-instance record, then
``save_instances`` per 4,096), with ``durability="process"``. Then, on a freshly opened log
each time, interleaved: ``load`` with the default lazy threshold (the record's instances a
``LazyInstances``), and ``load`` with the threshold raised above N (every instance decoded, as
before issue 22's lazy load). Timed: ``load``; the first access of one instance (index 0.77 N:
one chunk read); a full iteration counting completed instances (lazy rounds only; the eager
load has done that work already). The eager rounds are the expensive ones (at 10,000,000:
tens of seconds and 3+ GB), hence ``--eager-rounds``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from eventlog.checkpoints import CheckpointLog
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutProgress,
)

RESULTS = Path(__file__).parent / "results" / "lazy_load.json"
BULK = 4096


def build(path: Path, n: int) -> float:
    """The N-instance log at ``path``; seconds it took."""
    t0 = time.perf_counter()
    cl = CheckpointLog.open(path, durability="process")
    fan = FanOutProgress("work", (), n, (NOT_STARTED,) * n)
    cl.save(
        "job",
        CheckpointRecord(
            invocation_id="job", correlation_id="bench", state={"q": 1}, completed_positions=(),
            parent_states=(), last_saved_at=time.time(), schema_version="1",
            fan_out_progress=(fan,),
        ),
    )  # fmt: skip
    del fan
    for s in range(0, n, BULK):
        stop = min(n, s + BULK)
        items = [(i, FanOutInstanceProgress("completed", {"i": i, "ok": True})) for i in range(s, stop)]  # fmt: skip  # noqa: E501
        cl.save_instances("job", "work", items)
    cl.flush()
    cl.close()
    return time.perf_counter() - t0


def one(path: Path, n: int, lazy: bool) -> dict[str, float]:
    cl = CheckpointLog.open(path, durability="process")
    try:
        if not lazy:
            cl.lazy_instances_over = n  # not above: decoded at load, as before
        t0 = time.perf_counter()
        rec = cl.load("job")
        out = {"load_s": time.perf_counter() - t0}
        assert rec is not None
        inst = rec.fan_out_progress[0].instances
        assert (type(inst).__name__ == "LazyInstances") is lazy, type(inst)
        k = n * 77 // 100
        t0 = time.perf_counter()
        x = inst[k]
        out["first_access_s"] = time.perf_counter() - t0
        assert x.result == {"i": k, "ok": True}, x
        if lazy:
            t0 = time.perf_counter()
            done = sum(1 for p in inst if p.state == "completed")
            out["iterate_s"] = time.perf_counter() - t0
            assert done == n, done
        return out
    finally:
        cl.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--log", type=Path, default=None, help="reuse (or build) this log")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--eager-rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.log or Path(tmp) / "log"
        built = None if (path / "data.mdb").exists() else build(path, args.n)
        samples: dict[str, list[dict[str, float]]] = {"lazy": [], "eager": []}
        for r in range(max(args.rounds, args.eager_rounds)):
            if r < args.rounds:
                samples["lazy"].append(one(path, args.n, True))
            if r < args.eager_rounds:
                samples["eager"].append(one(path, args.n, False))
    load_after = os.getloadavg()
    med: dict[str, dict[str, float]] = {
        kind: {key: statistics.median(s[key] for s in got) for key in got[0]}
        for kind, got in samples.items()
        if got
    }
    lines = [
        f"| N = {args.n:,} | load (s) | first access (s) | full iteration (s) | rounds |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, fig in med.items():
        it = f"{fig['iterate_s']:.2f}" if "iterate_s" in fig else "-"
        lines.append(
            f"| {kind} | {fig['load_s']:.4f} | {fig['first_access_s']:.4f} | {it} | "
            f"{len(samples[kind])} |"
        )
    if "eager" in med:
        lines.append(
            f"eager load / lazy load: {med['eager']['load_s'] / med['lazy']['load_s']:,.0f}x"
        )
    print("\n".join(lines))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"build: {built if built is None else round(built, 1)} s; peak RSS {rss:.2f} GiB")
    print(f"load average before / after: {load_before} / {load_after}")
    report: dict[str, Any] = {
        "benchmark": "lazy_load",
        "n": args.n,
        "build_s": built,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "peak_rss_gib": rss,
        "medians": med,
        "samples": samples,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
