"""The ``instances`` rows by instructions: what each per-instance save costs, counted.

``python -m benchmarks.instances_ir [--n N] [--rows NAME ...] [--out PATH]``

The job of :mod:`benchmarks.instances_cpu` (``durability="process"``, a fan-out of N
instances, ~60-byte results, 256 rows a commit), run under valgrind's callgrind, which counts
the instructions the process executes (every thread). Each row runs twice in a child process:
the set-up and all N saves, then the same set-up and one save; the difference over N - 1 is
the instructions per row. On a shared machine this is the steady view: it does not depend on
the other processes or on the scheduler (it ignores cache misses and system calls, which a
CPU-time run sees). Needs ``valgrind`` on the PATH; about a minute per row at N = 20,000.
raw py-lmdb rows do not run under valgrind (their map size); see ``instances_cpu`` for them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.common import callgrind_instructions
from benchmarks.instances import result_of
from benchmarks.instances_cpu import ROWS

RESULTS = Path(__file__).parent / "results" / "instances_ir.json"
DEFAULT_ROWS = ("ckptlog save_instance", "ckptlog save_instances", "sqlite-rows")


def child(name: str, n: int, saves: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sink = ROWS[name](Path(tmp) / "store")
        try:
            sink.setup("job", n)
            results = [result_of(i) for i in range(saves)]
            save = sink.save
            for i in range(saves):
                save(i, results[i])
            sink.flush()
        finally:
            sink.close()


def instructions(name: str, n: int, saves: int) -> int:
    args = ["--child", name, str(n), str(saves)]
    return callgrind_instructions("benchmarks.instances_ir", args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rows", nargs="+", default=list(DEFAULT_ROWS), choices=list(ROWS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    per_row = {}
    for name in args.rows:
        full, one = instructions(name, args.n, args.n), instructions(name, args.n, 1)
        per_row[name] = (full - one) / (args.n - 1)
    base = per_row.get("sqlite-rows")
    print(f"| row (N = {args.n:,}) | instructions per row | ratio to sqlite-rows |")
    print("|---|---:|---:|")
    for name, ir in per_row.items():
        ratio = f"{base / ir:.2f}" if base and name != "sqlite-rows" else "-"
        print(f"| {name} | {ir:,.0f} | {ratio} |")
    args.out.write_text(json.dumps({"n": args.n, "instructions_per_row": per_row}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
