"""``python -m soak [--seed N] [--long] [--out docs/reliability.md]``: the reliability campaign.

Runs, seeded: kills of real writer processes, faults injected at the backend seam and on a
real full disk, asyncio cancellation, readers under load, damage to copies of ``data.mdb``,
bad input to every public entry point and power cuts on the FUSE simulator
(``soak/powerfs.py``); prints the tallies and writes the report. Exits 1
when anything failed (a lost save, a crash, a hang, an untyped error, ...).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from soak import badinput, damage, faults, kills, powercut, report
from soak.common import Tally

SMOKE = {"kills": 7, "flips": 40, "truncations": 10, "bad_inputs": 60, "faults": 1, "cuts": 2}
SHORT = {"kills": 24, "flips": 150, "truncations": 30, "bad_inputs": 300, "faults": 1, "cuts": 40}
LONG = {
    "kills": 1000, "flips": 3000, "truncations": 500, "bad_inputs": 3000, "faults": 5,
    "cuts": 500,
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    ap.add_argument("--seed", type=int, default=15, help="the seed of every random choice")
    ap.add_argument("--long", action="store_true", help=">= 1,000 kills, thousands of flips")
    ap.add_argument("--smoke", action="store_true", help="the smallest run (the test suite's)")
    ap.add_argument("--out", type=Path, default=None, help="write the report here (markdown)")
    ap.add_argument(
        "--only",
        default="kills,faults,cancel,readers,damage,badinput,powercut",
        help="comma-separated sections to run",
    )
    ap.add_argument("--kills", type=int, default=None, help="override the number of kills")
    ap.add_argument("--cuts", type=int, default=None, help="override the number of power cuts")
    args = ap.parse_args(argv)
    scale = dict(LONG if args.long else SMOKE if args.smoke else SHORT)
    if args.kills is not None:
        scale["kills"] = args.kills
    if args.cuts is not None:
        scale["cuts"] = args.cuts
    only = set(args.only.split(","))
    tallies: dict[str, Tally] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ckptlog-soak-") as tmp:
        work = Path(tmp)
        sections: list[tuple[str, Callable[[Tally], None]]] = [
            ("kills", lambda t: kills.run(args.seed, scale["kills"], work, t)),
            ("faults", lambda t: faults.run(args.seed, scale["faults"], work, t)),
            ("cancel", lambda t: faults.cancellation(args.seed, scale["faults"], work, t)),
            ("readers", lambda t: faults.readers(args.seed, scale["faults"], work, t)),
            (
                "damage",
                lambda t: damage.run(args.seed, scale["flips"], scale["truncations"], work, t),
            ),
            ("badinput", lambda t: badinput.run(args.seed, scale["bad_inputs"], work, t)),
            ("powercut", lambda t: powercut.run(args.seed, scale["cuts"], work, t)),
        ]
        for name, fn in sections:
            if name not in only:
                continue
            t0 = time.monotonic()
            tally = tallies[name] = Tally()
            print(f"soak: {name} ...", file=sys.stderr, flush=True)
            fn(tally)
            tally.add("seconds", round(time.monotonic() - t0))
            print(f"soak: {name}: {dict(tally.counts)}", file=sys.stderr, flush=True)
            for f in tally.failures:
                print(f"soak: FAILED {name}: {f}", file=sys.stderr)
    seconds = time.monotonic() - started
    name = "long" if args.long else "smoke" if args.smoke else "short"
    text = report.render(args.seed, name, seconds, tallies)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 1 if any(t.counts["failures"] for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
