"""Group commit, this tree against another checkout (issue 28): 1,000 concurrent async saves.

``python -m benchmarks.group_commit_ab --other PATH [--rounds N] [--saves N] [--durability D]
[--out PATH] [--instructions]`` runs ``n`` concurrent ``Checkpointer.save`` calls (``"fsync"``
unless told, over 50 invocations) in a fresh subprocess per run, alternating between this
checkout and ``PATH`` (another checkout of ckptlog, e.g. a worktree of the commit before the
write-ahead segment), the order flipped every round so both see the same moments of the
device. Each child imports ckptlog from its tree (``PYTHONPATH``) and prints saves/s; the table
shows the median of each and the ratio of the medians and of each round's pair, and the CPU
time per save (all threads). ``--instructions`` also counts each tree's instructions per save
under valgrind's callgrind (``"process"`` durability, where a ``gather`` of saves is one
commit: the same work in every run, so the count holds on a busy machine where CPU time does
not). Writes JSON (``benchmarks/results/group_commit_ab.json``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import environment, fmt_float, median, print_table, write_json

HERE = Path(__file__).resolve().parent.parent
RESULTS = HERE / "benchmarks" / "results" / "group_commit_ab.json"

CHILD = """
import asyncio, sys, time
import eventlog
from eventlog import CheckpointRecord, NodePosition
from eventlog.checkpoints import Checkpointer

assert eventlog.__file__.startswith(sys.argv[3]), (eventlog.__file__, sys.argv[3])
n = int(sys.argv[2])

def rec(inv, k):
    return CheckpointRecord(inv, "c", {"k": k}, (NodePosition((), "n", 0),), (), 2.0 + k)

async def go():
    cp = Checkpointer.open(sys.argv[1], durability=sys.argv[4])
    try:
        await cp.save("inv-0", rec("inv-0", -1))
        t, c = time.perf_counter(), time.process_time()

        async def one(k):
            inv = f"inv-{k % 50}"
            await cp.save(inv, rec(inv, k))

        await asyncio.gather(*(one(k) for k in range(n)))
        return n / (time.perf_counter() - t), (time.process_time() - c) / n
    finally:
        await cp.aclose()

print(*asyncio.run(go()))
"""


CHILD_ROUNDS = """
import asyncio, sys
from eventlog import CheckpointRecord, NodePosition
from eventlog.checkpoints import Checkpointer

n, rounds = int(sys.argv[2]), int(sys.argv[3])

def rec(inv, k):
    return CheckpointRecord(inv, "c", {"k": k}, (NodePosition((), "n", 0),), (), 2.0 + k)

async def go():
    cp = Checkpointer.open(sys.argv[1], durability="process")
    try:
        await cp.save("inv-0", rec("inv-0", -1))
        for r in range(rounds):
            async def one(k):
                inv = f"inv-{k % 50}"
                await cp.save(inv, rec(inv, k))
            await asyncio.gather(*(one(k) for k in range(n)))
    finally:
        await cp.aclose()

asyncio.run(go())
"""


def instructions_per_save(tree: Path, d: Path, n: int) -> float:
    """Instructions per save (callgrind's count, all threads) of ``n`` concurrent async saves
    at ``"process"`` durability (one commit per ``gather``, so the same work every run): a run
    of three gathers less a run of one, over ``2 n``. Steady where CPU time is not (a shared
    machine), and comparable between trees run the same way."""
    counts = []
    for rounds in (1, 3):
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
             "-c", CHILD_ROUNDS, str(d / f"ir-{rounds}"), str(n), str(rounds)],
            env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree, check=True,
            capture_output=True, text=True,
        )  # fmt: skip
        line = next(x for x in out.stderr.splitlines() if "Collected :" in x)
        counts.append(int(line.split()[-1].replace(",", "")))
    return (counts[1] - counts[0]) / (2 * n)


def run_one(tree: Path, d: Path, n: int, durability: str) -> tuple[float, float]:
    """Saves per second and CPU seconds (all threads) per save of one run."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(d), str(n), str(tree), durability],
        env=env, cwd=tree, check=True, capture_output=True, text=True,
    )  # fmt: skip
    rate, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(rate), float(cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", required=True, help="the other checkout (the 'before' tree)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--saves", type=int, default=1000)
    ap.add_argument("--durability", default="fsync", choices=("fsync", "process"))
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="also count instructions per save of each tree under valgrind (process durability)",
    )
    args = ap.parse_args(argv)
    trees = {"this": HERE, "other": Path(args.other).resolve()}
    rates: dict[str, list[float]] = {k: [] for k in trees}
    cpu: dict[str, list[float]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory(prefix="group-commit-ab-") as tmp:
        for r in range(args.rounds):
            for name in list(trees)[:: 1 if r % 2 else -1]:
                d = Path(tmp) / f"{r}-{name}"
                rate, per_save = run_one(trees[name], d, args.saves, args.durability)
                rates[name].append(rate)
                cpu[name].append(per_save)
        ir = (
            {k: instructions_per_save(t, Path(tmp) / k, args.saves) for k, t in trees.items()}
            if args.instructions
            else None
        )
        env = environment(durability=args.durability, data_dir=tmp)
    pairs = [a / b for a, b in zip(rates["this"], rates["other"], strict=True)]
    med = {k: median(v) for k, v in rates.items()}
    cpu_med = {k: median(v) for k, v in cpu.items()}
    print_table(
        ["tree", "median saves/s", "CPU us/save", "rounds"],
        [
            [
                f"{k} ({trees[k]})",
                fmt_float(v, 0),
                fmt_float(cpu_med[k] * 1e6, 1),
                str(len(rates[k])),
            ]
            for k, v in med.items()
        ],
        title=f"{args.saves} concurrent async saves, {args.durability}, {args.rounds} rounds",
    )
    print(f"\nthis / other: ratio of medians {med['this'] / med['other']:.2f}, "
          f"median of round ratios {median(pairs):.2f}, load {os.getloadavg()}")  # fmt: skip
    if ir is not None:
        print(f"instructions per save (process, callgrind): this {ir['this']:,.0f}, "
              f"other {ir['other']:,.0f}, this / other {ir['this'] / ir['other']:.3f}")  # fmt: skip
    payload: dict[str, Any] = {
        "benchmark": "group_commit_ab",
        "saves": args.saves,
        "rounds": args.rounds,
        "durability": args.durability,
        "trees": {k: str(v) for k, v in trees.items()},
        "rates": rates,
        "medians": med,
        "cpu_seconds_per_save": cpu,
        "cpu_medians": cpu_med,
        "ratio_of_medians": med["this"] / med["other"],
        "median_round_ratio": median(pairs),
        "instructions_per_save": ir,
        "environment": env,
    }
    write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
