"""The ``instances`` rows by CPU time: what each per-instance save costs the process.

``python -m benchmarks.instances_cpu [--sizes N ...] [--rounds R] [--out PATH]``

The same job as the harness's ``instances`` scenario (a fan-out of N instances, each ~60-byte
result saved as it completes, committed every 256 rows), with ``durability="process"`` (no
fsync wait, so the process's CPU time is the whole cost of a row): ckptlog ``save_instance``
under ``FanOutInternalSaveBatching(flush_every=256)`` and ``save_instances`` per 256 rows,
against the hand-rolled SQLite table and raw py-lmdb rows (:mod:`benchmarks.peers.rows`), all
in this process, interleaved (round-robin, the order rotated every round). Reported per row:
rows per second of **process CPU time** (``time.process_time``: every thread, ckptlog's writer
included) and of wall time, medians over rounds, and each ckptlog row's ratio to each peer.

Why CPU time: on a shared machine (other processes on the same cores) wall-time ratios of a
two-thread writer (ckptlog) against one-thread peers swing by 2x between rounds; CPU time per
row does not depend on how the scheduler shared the cores out. Wall time is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.instances import result_of
from benchmarks.peers.ckptlog import CkptlogSink
from benchmarks.peers.rows import LmdbRowsSink, SqliteRowsSink

BATCH = 256
SIZES = (200_000, 1_000_000)
ROUNDS = 3
RESULTS = Path(__file__).parent / "results" / "instances_cpu.json"

Sink = Any
ROWS: dict[str, Callable[[Path], Sink]] = {
    "ckptlog save_instance": lambda p: CkptlogSink(p, "process", BATCH),
    "ckptlog save_instances": lambda p: CkptlogSink(p, "process", BATCH, bulk=True),
    "sqlite-rows": lambda p: SqliteRowsSink(p, "process", BATCH),
    "lmdb-rows": lambda p: LmdbRowsSink(p, "process", BATCH),
}
PEERS = ("sqlite-rows", "lmdb-rows")


def run_one(make: Callable[[Path], Sink], n: int, root: Path) -> tuple[float, float]:
    """``(cpu seconds, wall seconds)`` of N saves and the final flush."""
    path = Path(tempfile.mkdtemp(dir=root))
    sink = make(path / "store")
    try:
        sink.setup("job", n)
        save = sink.save
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(n):
            save(i, result_of(i))
        sink.flush()
        return time.process_time() - c0, time.perf_counter() - w0
    finally:
        sink.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--dir", type=Path, default=None, help="data directory (default: tmp)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in args.sizes:
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in ROWS}
            names = list(ROWS)
            for r in range(args.rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    samples[name].append(run_one(ROWS[name], n, Path(tmp)))
            results[str(n)] = {
                name: {
                    "cpu_rows_s": n / statistics.median(c for c, _ in got),
                    "wall_rows_s": n / statistics.median(w for _, w in got),
                }
                for name, got in samples.items()
            }
    load_after = os.getloadavg()
    lines = [
        "| N | row | rows/s of CPU | rows/s of wall | CPU ratio to sqlite-rows | "
        "CPU ratio to lmdb-rows |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for n, rows in results.items():
        for name, fig in rows.items():
            ratios = [
                f"{fig['cpu_rows_s'] / rows[p]['cpu_rows_s']:.2f}"
                if name.startswith("ckptlog")
                else "-"
                for p in PEERS
            ]
            lines.append(
                f"| {int(n):,} | {name} | {fig['cpu_rows_s']:,.0f} | {fig['wall_rows_s']:,.0f} | "
                + " | ".join(ratios)
                + " |"
            )
    print("\n".join(lines))
    print(f"load average before / after: {load_before} / {load_after}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "instances_cpu",
                "sizes": args.sizes,
                "rounds": args.rounds,
                "batch": BATCH,
                "loadavg_before": load_before,
                "loadavg_after": load_after,
                "results": results,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
