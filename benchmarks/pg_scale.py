"""Many writer processes on one PostgreSQL log: throughput and the writers' lock waits.

``python -m benchmarks.pg_scale [--url URL] [--instances N] [--flush-every K] [--workers 1,2,4,8]``

Each run makes a fresh schema, saves one invocation whose fan-out has ``N`` instances, then
starts the worker processes of ``tests/pg_writer.py``: each saves its share of the instances
with ``save_instance`` (batched by ``K``; 0: every save durable, group commit only) plus a few
whole-record saves, as workers on separate hosts would. Reported per worker count: instances
saved per second of wall time (from the first worker's start to the last one's end, process
start-up excluded by subtracting the slowest worker's open), commits, and the share of the
workers' time spent waiting to begin a write transaction (the writers' lock).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from eventlog.checkpoints import CheckpointLog
from eventlog.testing import NOT_STARTED, fan_out, make_record

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "pg_writer.py"


def run(url: str, schema: str, workers: int, instances: int, flush_every: int) -> dict[str, float]:
    base = url.split("?", maxsplit=1)[0]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    full = f"{base}?schema={schema}"
    cl = CheckpointLog.open(full)
    cl.save("shared", make_record("shared", fan_outs=[fan_out("f", [NOT_STARTED] * instances)]))
    cl.close()
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                full,
                str(w),
                str(workers),
                "4",
                str(instances),
                str(flush_every),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - start
    assert all(p.returncode == 0 for p in procs)
    stats = {"elapsed": 0.0, "commits": 0.0, "lockwait": 0.0}
    worst = 0.0
    for out in outs:
        for line in out.splitlines():
            key, _, val = line.partition(" ")
            if key in stats:
                stats[key] += float(val)
                if key == "elapsed":
                    worst = max(worst, float(val))
    check = CheckpointLog.open(full, readonly=True)
    ok = check.verify().ok
    check.close()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return {
        "workers": workers,
        "inst_per_s": instances / worst,
        "wall_s": wall,
        "commits": stats["commits"],
        "lock_wait_share": stats["lockwait"] / stats["elapsed"],
        "verify_ok": float(ok),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--instances", type=int, default=4000)
    ap.add_argument("--flush-every", type=int, default=0)
    ap.add_argument("--workers", default="1,2,4,8")
    a = ap.parse_args()
    print("workers  instances/s  commits  lock-wait share  verify")
    for n in map(int, a.workers.split(",")):
        r = run(a.url, "bench_pg_scale", n, a.instances, a.flush_every)
        print(
            f"{n:7d}  {r['inst_per_s']:11.0f}  {r['commits']:7.0f}  "
            f"{100 * r['lock_wait_share']:14.1f}%  {bool(r['verify_ok'])}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
