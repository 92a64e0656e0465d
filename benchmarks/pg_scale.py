"""Many writer processes on one PostgreSQL log: throughput and the writers' lock.

``python -m benchmarks.pg_scale [--url URL] [--instances N] [--flush-every K]
[--workers 1,4,8] [--rounds R] [--json PATH]``

Each run makes a fresh schema, saves one invocation whose fan-out has ``N`` instances, then
starts the worker processes of ``tests/pg_writer.py``: each saves its share of the instances
with ``save_instance`` (batched by ``K``; 0: every save durable, group commit only) plus a few
whole-record saves, as workers on separate hosts would. Reported per worker count: instances
saved per second (``N`` over the slowest worker's run, process start-up excluded), commits,
the share of the workers' time spent waiting for the writers' lock, and the **lock busy
share**: the time the lock was held, summed over all workers' commits, over the run's time.
A busy share well under 100% means the lock is not what limits throughput. Where the lock's
time goes: the share of commits that **read under the lock** (held it across a round trip of
their client: the writer's knowledge was stale, or it had none), and for those the holder's
**wall and CPU milliseconds** from the lock's answer reaching it to its COMMIT going out. Wall
well above CPU is time the holder was not running (waiting for a core on a loaded machine)
while every other writer waited for it.

Beside each row runs the same job on a **hand-rolled table with no lock at all**
(``rows``: each worker writes its share to ``(job, item, result)`` in batches of ``K`` rows per
durable commit, ``INSERT ... ON CONFLICT DO UPDATE`` from arrays, results msgspec-encoded):
what this machine allows for the workload when nothing is serialized, so the ratio of the two
is what ckptlog's ordering and chaining cost at that worker count. Rounds interleave the two
and medians are reported; everything runs on the same server in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import psycopg

from eventlog.checkpoints import CheckpointLog
from eventlog.testing import NOT_STARTED, fan_out, make_record

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "pg_writer.py"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _drop(base: str, schema: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def run(
    url: str, schema: str, workers: int, instances: int, flush_every: int, *, own: bool = False
) -> dict[str, float]:
    """The ckptlog job with ``workers`` processes on a fresh schema (dropped afterwards);
    ``own``: each worker saves the instances of a fan-out of its own (``job-W``), so the
    workers share no stream, only the log."""
    base = url.split("?", maxsplit=1)[0]
    _drop(base, schema)
    full = f"{base}?schema={schema}"
    try:
        cl = CheckpointLog.open(full)
        if own:
            share = instances // workers + 1
            for w in range(workers):
                job = f"job-{w}"
                cl.save(job, make_record(job, fan_outs=[fan_out("f", [NOT_STARTED] * share)]))
        else:
            fan = fan_out("f", [NOT_STARTED] * instances)
            cl.save("shared", make_record("shared", fan_outs=[fan]))
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
                    *(["own"] if own else []),
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
        stats = {
            "elapsed": 0.0,
            "commits": 0.0,
            "lockwait": 0.0,
            "lockheld": 0.0,
            "stale": 0.0,
            "heldacross": 0.0,
            "heldclient": 0.0,
            "heldcpu": 0.0,
        }
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
    finally:
        _drop(base, schema)
    return {
        "workers": workers,
        "inst_per_s": instances / worst,
        "wall_s": wall,
        "commits": stats["commits"],
        "stale": stats["stale"],
        "lock_wait_share": stats["lockwait"] / stats["elapsed"],
        "lock_busy_share": stats["lockheld"] / worst,
        # commits that held the lock across a client round trip (read under it), and in them
        # the holder's wall and CPU milliseconds from the lock's answer to sending the COMMIT
        "held_across_share": stats["heldacross"] / max(stats["commits"], 1.0),
        "holder_client_ms": 1e3 * stats["heldclient"] / max(stats["heldacross"], 1.0),
        "holder_cpu_ms": 1e3 * stats["heldcpu"] / max(stats["heldacross"], 1.0),
        "verify_ok": float(ok),
    }


def rows_worker(url: str, schema: str, w: int, workers: int, instances: int, batch: int) -> None:
    """One worker of the hand-rolled peer (``--rows-worker``): its share, ``batch`` rows per
    durable commit; prints its elapsed time."""
    enc = msgspec.msgpack.Encoder()
    mine = list(range(w, instances, workers))
    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        q = (
            f'INSERT INTO "{schema}".results (job, item, result) '
            "SELECT 'shared', * FROM unnest(%b::int4[], %b::bytea[]) "
            "ON CONFLICT (job, item) DO UPDATE SET result = EXCLUDED.result"
        )
        for k in range(0, len(mine), max(batch, 1)):
            part = mine[k : k + max(batch, 1)]
            vals = [enc.encode({"status": "completed", "result": {"w": w, "i": i}}) for i in part]
            with conn.transaction():
                conn.execute(q, (part, vals), binary=True)
    print(f"elapsed {time.perf_counter() - start:.4f}", flush=True)


def run_rows(url: str, schema: str, workers: int, instances: int, batch: int) -> dict[str, float]:
    base = url.split("?", maxsplit=1)[0]
    _drop(base, schema)
    try:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
            conn.execute(
                f'CREATE TABLE "{schema}".results '
                "(job text, item int4, result bytea NOT NULL, PRIMARY KEY (job, item))"
            )
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.pg_scale",
                    "--rows-worker",
                    f"{w},{workers},{instances},{batch}",
                    "--url",
                    base,
                    "--schema",
                    schema,
                ],
                cwd=REPO,
                stdout=subprocess.PIPE,
                text=True,
            )
            for w in range(workers)
        ]
        outs = [p.communicate()[0] for p in procs]
        assert all(p.returncode == 0 for p in procs)
        worst = max(float(o.split()[-1]) for o in outs)
        with psycopg.connect(base, autocommit=True) as conn:
            row = conn.execute(f'SELECT count(*) FROM "{schema}".results').fetchone()
        assert row is not None
        assert row[0] == instances
    finally:
        _drop(base, schema)
    return {"workers": workers, "inst_per_s": instances / worst}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=DEFAULT_URL)
    ap.add_argument("--instances", type=int, default=100_000)
    ap.add_argument("--flush-every", type=int, default=256)
    ap.add_argument("--workers", default="1,4,8")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="write the medians here")
    ap.add_argument(
        "--own",
        action="store_true",
        help="each worker saves a fan-out of its own (the workers share the log, no stream)",
    )
    ap.add_argument("--rows-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--schema", default="bench_pg_scale_rows", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.rows_worker is not None:
        w, workers, instances, batch = map(int, a.rows_worker.split(","))
        rows_worker(a.url, a.schema, w, workers, instances, batch)
        return 0
    counts = [int(n) for n in a.workers.split(",")]
    got: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    peer: dict[int, list[float]] = {n: [] for n in counts}
    # schemas of this run's own: two runs at once (two sessions on one server) never drop
    # each other's
    ours, theirs = f"bench_pg_scale_{os.getpid()}", f"bench_pg_scale_rows_{os.getpid()}"
    for _ in range(a.rounds):
        for n in counts:
            got[n].append(run(a.url, ours, n, a.instances, a.flush_every, own=a.own))
            peer[n].append(run_rows(a.url, theirs, n, a.instances, a.flush_every)["inst_per_s"])
    print(
        f"{a.instances:,} instances, batches of {a.flush_every} (0: each save durable), fsync, "
        f"median of {a.rounds} round(s); "
        + ("a fan-out per worker" if a.own else "one fan-out shared by the workers")
    )
    print(
        "workers  ckptlog inst/s  lock wait  lock busy  read under lock  holder wall/CPU ms  "
        "rows (no lock) inst/s  ratio  verify"
    )
    table: list[dict[str, Any]] = []
    for n in counts:
        med = {k: statistics.median(r[k] for r in got[n]) for k in got[n][0]}
        rows = statistics.median(peer[n])
        ok = all(r["verify_ok"] for r in got[n])
        print(
            f"{n:7d}  {med['inst_per_s']:14,.0f}  {100 * med['lock_wait_share']:8.1f}%  "
            f"{100 * med['lock_busy_share']:8.1f}%  {100 * med['held_across_share']:14.0f}%  "
            f"{med['holder_client_ms']:9.1f} / {med['holder_cpu_ms']:5.1f}  {rows:21,.0f}  "
            f"{med['inst_per_s'] / rows:5.2f}  {ok}"
        )
        table.append({**med, "rows_inst_per_s": rows, "ratio_vs_rows": med["inst_per_s"] / rows})
    if a.json is not None:
        a.json.write_text(
            json.dumps(
                {
                    "instances": a.instances,
                    "flush_every": a.flush_every,
                    "rounds": a.rounds,
                    "own_fan_outs": a.own,
                    "rows": table,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
