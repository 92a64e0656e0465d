"""The client instructions of one batched instance save on PostgreSQL, counted (issue #24).

``python -m benchmarks.pg_instances_ir [--n N] [--rows NAME ...] [--out PATH]``

The job of ``pg_compare``'s per-instance section: ``N`` instances saved one call each, 256 a
commit, by ckptlog (``save_instance`` under ``FanOutInternalSaveBatching(flush_every=256)``,
``"process"``: no flush) and by the hand-rolled table written with binary ``COPY`` or an
``executemany`` upsert (``synchronous_commit = off``). Each row runs twice under valgrind's
callgrind, in a child process, each in a fresh schema of its own: the set-up and all ``N``
saves, then the set-up and ``BATCH``; the difference over ``N - BATCH`` is the client's
instructions per instance (every thread of the client; the server's work is not counted, so
this is the client's share of what the 8-worker comparison divides between 2 cores). Needs
``valgrind`` on the PATH and the server ``CKPTLOG_PG_URL`` (default: the loopback server,
database ``test``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.common import callgrind_instructions
from benchmarks.pg_compare import BATCH, INSTANCE_STORES, URL, Schemas

RESULTS = Path(__file__).parent / "results" / "pg_instances_ir.json"


def child(row: str, n: int) -> None:
    schemas = Schemas(URL)
    try:
        store = INSTANCE_STORES[row](URL, schemas.new(f"ir_{row}"), "process", "off")
        try:
            store.setup("job", n)
            store.run("job", n)
        finally:
            store.close()
    finally:
        schemas.drop_all()


def instructions(row: str, n: int) -> int:
    return callgrind_instructions("benchmarks.pg_instances_ir", ["--child", row, str(n)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_480)
    parser.add_argument("--rows", nargs="+", default=list(INSTANCE_STORES))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    per: dict[str, float] = {}
    for row in args.rows:
        per[row] = (instructions(row, args.n) - instructions(row, BATCH)) / (args.n - BATCH)
    print(f"| row (N = {args.n:,}) | client instructions per instance | ours / row |")
    print("|---|---:|---:|")
    for row, ir in per.items():
        ratio = f"{per['ours'] / ir:.2f}" if "ours" in per and row != "ours" else "-"
        print(f"| {row} | {ir:,.0f} | {ratio} |")
    args.out.write_text(json.dumps({"n": args.n, "instructions_per_instance": per}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
