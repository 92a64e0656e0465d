"""What fork and the anchored head cost (issue 25).

    python -m benchmarks.anchor_fork [--quick] [--json PATH]

Builds one LMDB log (``process`` durability) of INVOCATIONS invocations with SAVES saves each
(a small state and a 64-instance fan-out), every tenth one forked from its middle save, then
measures, alternating the forms within each repeat (the machine is shared: compare ratios):

- ``verify``: ``CheckpointLog.verify`` (core checks, view rows, and the fork links);
- ``fork links``: ``eventlog.fork_links.check_links`` alone (the part forks add to verify);
- ``find forks (peek)``: ``fork_links.forks``, every stream's first frame peeked for its
  ``forked`` field in one transaction, against ``find forks (decode)``: each first frame read
  and decoded whole (``read_stream``), as the first version did;
- ``head take``: ``eventlog.anchor.take`` (``ckptlog head``);
- ``head check``: ``eventlog.anchor.check`` against a digest taken before the last 1% of
  saves (``verify --expect-head`` on top of verify);
- ``fork``: one ``CheckpointLog.fork`` (record folded, one frame written), median of 50.

Each figure is the best of the repeats (for fork, the lowest median). Prints the table with
each figure's ratio to ``verify`` and the load average; writes
``benchmarks/results/anchor_fork.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import environment, loadavg, print_table, write_json
from eventlog import anchor
from eventlog.checkpoints import CheckpointLog
from eventlog.fork_links import check_links, forks, origin
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutProgress,
    NodePosition,
)

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "anchor_fork.json"
INSTANCES = 64


def record(inv: str, step: int) -> CheckpointRecord:
    done = min(step * 4, INSTANCES)
    instances = tuple(
        FanOutInstanceProgress("completed", i * i) if i < done else NOT_STARTED
        for i in range(INSTANCES)
    )
    return CheckpointRecord(
        inv, "corr", {"step": step, "note": "x" * 64}, (NodePosition((), "plan", 0),), (),
        float(step), fan_out_progress=(FanOutProgress("work", (), INSTANCES, instances),),
    )  # fmt: skip


def build(path: Path, invocations: int, saves: int) -> tuple[CheckpointLog, anchor.HeadDigest]:
    cl = CheckpointLog.open(path, durability="process")
    for n in range(invocations):
        inv = f"inv-{n:06d}"
        for step in range(1, saves + 1):
            cl.save(inv, record(inv, step))
        if n % 10 == 0:
            cl.fork(inv, at=saves // 2, new_invocation_id=f"{inv}-fork")
    before = anchor.take(cl.log)
    for n in range(max(1, invocations // 100)):  # the last 1%: growth after the digest
        inv = f"inv-{n:06d}"
        cl.save(inv, record(inv, saves + 1))
    return cl, before


def forks_decoded(cl: CheckpointLog) -> list[tuple[str, Any]]:
    out = []
    for stream in cl.log.streams():
        first = next(iter(cl.log.read_stream(stream, 1, 1)), None)
        link = origin(first.frame) if first is not None else None
        if link is not None:
            out.append((stream, link))
    return out


def best_of(repeats: int, forms: dict[str, Callable[[], Any]]) -> dict[str, float]:
    best = {name: float("inf") for name in forms}
    for _ in range(repeats):
        for name, form in forms.items():
            t0 = time.perf_counter()
            form()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def fork_median(cl: CheckpointLog, saves: int, count: int, round_: int) -> float:
    times = []
    for n in range(count):
        t0 = time.perf_counter()
        cl.fork(f"inv-{n:06d}", at=saves, new_invocation_id=f"f{round_}-{n}")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small log (a smoke run)")
    ap.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    a = ap.parse_args(argv)
    invocations, saves, repeats = (200, 5, 2) if a.quick else (5_000, 20, 5)
    with tempfile.TemporaryDirectory(prefix="anchor-fork-") as tmp:
        cl, before = build(Path(tmp) / "log", invocations, saves)
        try:
            frames = cl.stats().frames
            best = best_of(
                repeats,
                {
                    "verify": cl.verify,
                    "fork links": lambda: check_links(cl.log),
                    "find forks (peek)": lambda: list(forks(cl.log)),
                    "find forks (decode)": lambda: forks_decoded(cl),
                    "head take": lambda: anchor.take(cl.log),
                    "head check": lambda: anchor.check(cl.log, before),
                },
            )
            assert anchor.check(cl.log, before) == []
            assert list(forks(cl.log)) == forks_decoded(cl)
            count = 10 if a.quick else 50
            best["fork"] = min(fork_median(cl, saves, count, r) for r in range(repeats))
            env = environment(durability="process", data_dir=tmp)
        finally:
            cl.close()
    rows = [
        [name, f"{seconds * 1e3:,.2f}", f"{seconds / best['verify']:.3f}"]
        for name, seconds in best.items()
    ]
    print_table(
        ["operation", "ms", "x verify"],
        rows,
        title=f"Fork and head on {frames:,} frames, {invocations:,} invocations "
        f"({invocations // 10:,} forks); load average {loadavg()}",
    )
    payload = {
        "quick": a.quick,
        "frames": frames,
        "invocations": invocations,
        "saves": saves,
        "seconds": best,
        "environment": env,
    }
    write_json(a.json, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
