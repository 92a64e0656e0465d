"""What a wait for the device does to the CPU cost of the next commit (issue 28).

    python -m benchmarks.cold_commit [--quick] [--rounds N] [--out PATH]

A durable save blocks in ``fdatasync`` for 0.1-4 ms on these machines; while it waits, its
core runs other work or halts, and the save's code and data leave the CPU's caches. This
measures that effect apart from the device: each store commits *without* a flush
(``CheckpointLog`` at ``"process"``, raw py-lmdb with ``sync=False``, SQLite WAL with
``synchronous=OFF``), and between two commits the thread either goes straight on (``hot``) or
sleeps as long as a flush takes (``after 0.5 ms`` / ``after 3 ms`` asleep). The row is the
thread's CPU time per commit (``time.thread_time``, the sleeps excluded), the median over
rounds that rotate the stores' order.

So a durable save pays, besides its flush, its own code run cold: the longer the code path of a
commit (ckptlog's is Python: validation, frames, views, the log's bookkeeping), the more the
wait costs it; SQLite's and LMDB's commits are short C paths. Writes
``benchmarks/results/cold_commit.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    environment,
    print_table,
    raw_lmdb_commits,
    sqlite_commits,
    write_json,
)
from eventlog import CheckpointRecord, NodePosition
from eventlog.checkpoints import CheckpointLog

RESULTS = Path(__file__).resolve().parent / "results" / "cold_commit.json"
SLEEPS = (0.0, 0.0005, 0.003)


def _rec(i: int) -> CheckpointRecord:
    return CheckpointRecord(
        "inv", "c", {"i": i, "pad": "x" * 200}, (NodePosition((), "n", i),), (), 1.0 + i
    )  # fmt: skip


def stores(d: Path) -> tuple[dict[str, Callable[[int], None]], Callable[[], None]]:
    """One commit of each store, by index (none of them flushes), and what closes them."""
    log = CheckpointLog.open(d / "log", durability="process")
    value = b"x" * 200
    raw, raw_close = raw_lmdb_commits(d / "raw", value, sync=False)
    sql, sql_close = sqlite_commits(d / "sq.db", value, synchronous="OFF", replace=True)

    def ours(i: int) -> None:
        log.save("inv", _rec(i))

    def close() -> None:
        log.close()
        raw_close()
        sql_close()

    return {"ckptlog save": ours, "raw lmdb put": raw, "sqlite insert": sql}, close


def cpu_per_commit(commit: Callable[[int], None], start: int, n: int, sleep_s: float) -> float:
    """Microseconds of this thread's CPU per commit, the sleeps excluded."""
    asleep = 0.0
    c0 = time.thread_time()
    for i in range(start, start + n):
        commit(i)
        if sleep_s:
            a = time.thread_time()
            time.sleep(sleep_s)
            asleep += time.thread_time() - a
    return (time.thread_time() - c0 - asleep) / n * 1e6


def run(rounds: int, n: int) -> dict[str, Any]:
    cells: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("CKPTLOG_BENCH_DIR")) as tmp:
        commits, close = stores(Path(tmp))
        try:
            for commit in commits.values():
                commit(0)  # open files, first pages
            names = list(commits)
            for r in range(rounds):
                for k, sleep_s in enumerate(SLEEPS):
                    start = 1 + (r * len(SLEEPS) + k) * n
                    for name in names[r % len(names) :] + names[: r % len(names)]:
                        us = cpu_per_commit(commits[name], start, n, sleep_s)
                        cells.setdefault(name, {}).setdefault(str(sleep_s), []).append(us)
        finally:
            close()
    medians = {name: {s: statistics.median(v) for s, v in by.items()} for name, by in cells.items()}
    return {"rounds": rounds, "commits_per_cell": n, "sleeps_s": list(SLEEPS),
            "cpu_us_per_commit": medians, "samples": cells}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    rounds, n = (1, 40) if args.quick else (args.rounds, 300)
    load0 = os.getloadavg()
    res = run(rounds, n)
    res["load_before_after"] = [load0, os.getloadavg()]
    res["environment"] = environment(durability="none (no flush)", data_dir=tempfile.gettempdir())
    rows = []
    for name, by in res["cpu_us_per_commit"].items():
        hot = by["0.0"]
        rows.append([name] + [f"{by[str(s)]:,.0f} µs ({by[str(s)] / hot:.2f}x)" for s in SLEEPS])
    print_table(
        ["store", "hot", "after 0.5 ms asleep", "after 3 ms asleep"],
        rows,
        title="CPU per commit (thread time, sleeps excluded; x: over hot)",
    )
    print(f"load average before / after: {load0} / {os.getloadavg()}")
    write_json(args.out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
