"""Save-throughput benchmark: ckptlog against the checkpointers people use today.

    python -m benchmarks run [--scenario S ...] [--backend B ...] [--peer MODULE:FACTORY ...]
                             [--quick] [--cell-budget SECONDS] [--doc] [--seed N]
                             [--duration 15m] [--rate N[,N...]] [--arrivals fixed|poisson]
    python -m benchmarks report [--json PATH] [--doc PATH]
    python -m benchmarks compare A.json B.json
    python -m benchmarks list

``run`` prints aligned tables, writes JSON under ``benchmarks/results/`` (``bench.json`` for a
full run of everything, ``bench.quick.json`` with ``--quick``, ``bench.partial.json`` otherwise,
so a smoke or partial run never overwrites the published figures) and, with ``--doc``,
regenerates ``docs/benchmarks.md`` and its plots from that JSON. ``report`` regenerates the doc
from an existing JSON. The same entry point is ``ckptlog bench``: :func:`main` takes the
arguments after ``bench`` (no command, or options only, means ``run``) and returns the exit
status: 0; 1 when a peer failed a scenario (its row says ``error``); 2 for bad arguments.

Every run first measures the machine's own limits on the stores' filesystem
(:mod:`benchmarks.limits`: fdatasync/s, flushed MB/s, raw LMDB synced commits/s and putmulti
rows/s, a CPU reference) and records them with its seed, the mount and the exact command.
``--duration D`` runs ``instances`` and ``linear`` as sustained runs of ``D`` each
(:mod:`benchmarks.sustained`); ``--rate N`` runs the ``openloop`` scenario at that offered rate
(:mod:`benchmarks.openloop`); ``compare`` prints two runs' ratios per row, normalised by each
run's limits (:mod:`benchmarks.compare`).

``--peer package.module:factory`` adds a user's own store to the run, beside the built-in
peers, measured and compared the same way (:mod:`benchmarks.peers.user`); a run with one is
never ``complete`` (it writes ``bench.partial.json``, not the published figures).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import environment, loadavg, versions, write_json
from benchmarks.harness import Progress, Runner
from benchmarks.limits import measure as measure_limits
from benchmarks.limits import print_limits
from benchmarks.openloop import OPENLOOP
from benchmarks.peers import PEER_NAMES, all_peers, select, user_peer
from benchmarks.peers.base import Peer, describe
from benchmarks.report import DOC, compute_targets, print_tables, write_doc
from benchmarks.report_runs import print_run_tables
from benchmarks.scenarios import SCENARIOS
from benchmarks.sustained import SUSTAINED, parse_duration

RESULTS = Path(__file__).resolve().parent / "results"
PEER_PACKAGES = (
    "openarmature",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-lmdb",
    "techrevati-runtime",
    "matplotlib",
)
BUILD_BUDGET_S = {"ckptlog": 180.0, "default": 75.0}  # read scenarios' history building


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=(__doc__ or "").splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run scenarios, print tables, write JSON")
    run.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help=f"scenario(s) to run, repeatable or comma-separated: {', '.join(SCENARIOS)} "
        "(default: all)",
    )
    run.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="PEER",
        help="peer(s) or families to run, repeatable or comma-separated (default: all): "
        f"{', '.join(PEER_NAMES)}",
    )
    run.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="MODULE:FACTORY",
        help="also run your own store: factory(directory) returns an openarmature Checkpointer "
        "or a LangGraph BaseCheckpointSaver (repeatable)",
    )
    run.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run for CI")
    run.add_argument(
        "--cell-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="instances: stop a run after this long and report the rows it did as partial "
        "(default 60; 20 with --quick)",
    )
    run.add_argument(
        "--instances-n",
        default=None,
        metavar="N[,N...]",
        help="instances: fan-out sizes (default 10000,200000,1000000; 1000 with --quick)",
    )
    run.add_argument(
        "--duration",
        default=None,
        metavar="D",
        help="sustained runs of instances and linear, D each (15m, 90s, 1h): rows/s per "
        "interval, decay, store growth",
    )
    run.add_argument(
        "--rate",
        default=None,
        metavar="N[,N...]",
        help="openloop: offer saves at these fixed rates (per second) instead of 25/50/75/90 %% "
        "of each row's measured maximum",
    )
    run.add_argument(
        "--arrivals",
        choices=("fixed", "poisson"),
        default="fixed",
        help="openloop: a fixed interval between arrivals, or Poisson arrivals from --seed",
    )
    run.add_argument(
        "--load-seconds",
        type=float,
        default=None,
        metavar="SECONDS",
        help="openloop: seconds per load point (default 10; 0.5 with --quick)",
    )
    run.add_argument(
        "--limits-seconds",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds per machine limit (default 3; 0.2 with --quick)",
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the run's random inputs")
    run.add_argument("--repeats", type=int, default=None, help="timed runs per row (default 5)")
    run.add_argument("--out", type=Path, default=None, help="JSON path (default: see above)")
    run.add_argument("--dir", type=Path, default=None, help="data directory (default: a tmp)")
    run.add_argument("--doc", action="store_true", help="also regenerate docs/benchmarks.md")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    cmp = sub.add_parser("compare", help="ratios between two runs, normalised by their limits")
    cmp.add_argument("a", type=Path, metavar="A.json")
    cmp.add_argument("b", type=Path, metavar="B.json")
    rep = sub.add_parser("report", help="regenerate docs/benchmarks.md from a JSON result")
    rep.add_argument("--json", type=Path, default=RESULTS / "bench.json")
    rep.add_argument("--doc", type=Path, default=DOC)
    sub.add_parser("list", help="list scenarios and peers (with durability)")
    return parser


def _scenarios(tokens: list[str], *, sustained: bool = False) -> list[str]:
    """Scenario names in run order (``limits`` always runs first, named or not); with
    ``sustained`` (``--duration``) only ``instances`` and ``linear``, as their sustained runs."""
    names = [p.strip() for t in tokens for p in t.split(",") if p.strip() and p.strip() != "limits"]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s) {unknown}; expected some of {list(SCENARIOS)}")
    if sustained:
        other = [n for n in names if n not in SUSTAINED]
        if other:
            raise ValueError(
                f"--duration applies to {' and '.join(SUSTAINED)}, not {other}: run those "
                "without --duration"
            )
        return [SUSTAINED[n].name for n in SUSTAINED if n in names or not names]
    if tokens and not names:  # --scenario limits: the limits alone
        return []
    return [n for n in SCENARIOS if n in names] if names else list(SCENARIOS)


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(p.replace("_", "")) for p in text.split(",") if p.strip())
    except ValueError:
        rates = ()
    if not rates or min(rates) <= 0:
        raise ValueError(f"--rate expects positive rates per second like 500,2000, got {text!r}")
    return rates


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(p.replace("_", "")) for p in text.split(",") if p.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--instances-n expects positive integers like 10000,200000, got {text!r}")
    return sizes


def _default_out(quick: bool, complete: bool) -> Path:
    if quick:
        return RESULTS / "bench.quick.json"
    return RESULTS / ("bench.json" if complete else "bench.partial.json")


def _budget(peer: Peer) -> float:
    return BUILD_BUDGET_S.get(peer.family, BUILD_BUDGET_S["default"])


async def _run_all(scenario_names: list[str], peers: list[Peer], runner: Runner) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in scenario_names:
        scenario = SCENARIOS[name] if name in SCENARIOS else _SUSTAINED_BY_NAME[name]
        started = time.monotonic()
        load_before = loadavg()
        results = await runner.run(scenario, peers)
        out[name] = {
            "title": scenario.title,
            "description": scenario.description,
            "mode": scenario.mode,
            "metric": scenario.metric,
            "primary": scenario.primary,
            "higher_is_better": scenario.higher_is_better,
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
            "seconds": round(time.monotonic() - started, 1),
            "params": [r.to_json() for r in results],
        }
    return out


_SUSTAINED_BY_NAME = {s.name: s for s in SUSTAINED.values()}


def _scenario(name: str) -> Any:
    return SCENARIOS[name] if name in SCENARIOS else _SUSTAINED_BY_NAME[name]


def cmd_run(args: argparse.Namespace) -> int:
    duration = None if args.duration is None else parse_duration(args.duration)
    scenario_names = _scenarios(args.scenario, sustained=duration is not None)
    for sc in SUSTAINED.values():
        sc.duration_s = duration or sc.duration_s
    OPENLOOP.reset()  # set on every run: main() may run twice in a process
    OPENLOOP.rates = None if args.rate is None else _rates(args.rate)
    OPENLOOP.arrivals, OPENLOOP.seed = args.arrivals, args.seed
    if args.load_seconds is not None and args.load_seconds <= 0:
        raise ValueError(f"--load-seconds must be positive, got {args.load_seconds}")
    OPENLOOP.seconds = args.load_seconds
    if args.limits_seconds is not None and args.limits_seconds <= 0:
        raise ValueError(f"--limits-seconds must be positive, got {args.limits_seconds}")
    peer_names = select(args.backend)
    quick: bool = args.quick
    repeats = args.repeats if args.repeats is not None else (2 if quick else 5)
    if repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {repeats}")
    if args.cell_budget is not None and args.cell_budget <= 0:
        raise ValueError(f"--cell-budget must be positive, got {args.cell_budget}")
    instances = SCENARIOS["instances"]  # set on every run: main() may run twice in a process
    instances.budget_s = args.cell_budget
    instances.sizes = None if args.instances_n is None else _sizes(args.instances_n)
    peers, missing = all_peers(peer_names)
    peers += [user_peer(spec) for spec in dict.fromkeys(args.peer)]
    complete = (
        len(scenario_names) == len(SCENARIOS)
        and peer_names == PEER_NAMES
        and not args.peer
        and args.instances_n is None
        and args.cell_budget is None
        and duration is None
        and args.rate is None
        and args.load_seconds is None
        and args.arrivals == "fixed"
    )
    out_path: Path = args.out or _default_out(quick, complete)

    root = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=args.dir))
    try:
        env = environment(durability="per peer: see peers", data_dir=str(root))
        env["peer_packages"] = versions(PEER_PACKAGES)
        limits = measure_limits(root, quick=quick, seed=args.seed, seconds=args.limits_seconds)
        print_limits(limits)
        progress = Progress(0, enabled=not args.no_progress)
        runner = Runner(
            root, quick=quick, repeats=repeats, progress=progress, build_budget_s=_budget
        )
        progress.total = max(1, sum(runner.units(_scenario(n), peers) for n in scenario_names))
        started = time.monotonic()
        try:
            scenarios = asyncio.run(_run_all(scenario_names, peers, runner))
        finally:
            progress.close()
        limits_end = None
        if duration is not None:  # did the machine change under a long run? measured again
            limits_end = measure_limits(
                root, quick=quick, seed=args.seed, seconds=args.limits_seconds
            )
            print_limits(limits_end)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    payload: dict[str, Any] = {
        "benchmark": "bench",
        "schema": 1,
        "quick": quick,
        "complete": complete,
        "command": "python -m benchmarks " + shlex.join(args.argv),
        "seed": args.seed,
        "limits": limits,
        **({"limits_end": limits_end} if limits_end is not None else {}),
        "environment": env,
        "loadavg_end": loadavg(),
        "seconds": round(time.monotonic() - started, 1),
        "settings": {
            "repeats": repeats,
            "warmup_runs": 1,
            "build_budget_s": BUILD_BUDGET_S,
            "scenarios": {n: _scenario(n).settings(quick) for n in scenario_names},
        },
        "peers": {p.name: describe(p) for p in peers},
        "missing_peers": missing,
        "scenarios": scenarios,
    }
    payload["targets"] = compute_targets(payload)
    print_tables(payload)
    print_run_tables(payload)
    written = write_json(out_path, payload)
    print(f"\nwrote {written}")
    if args.doc:
        doc = write_doc(payload, DOC, json_path=written)
        print(f"wrote {doc}")
    errors = [
        (name, p["label"], row["label"], row["reason"])
        for name, sc in scenarios.items()
        for p in sc["params"]
        for row in p["rows"]
        if row["status"] == "error"
    ]
    for name, param, label, reason in errors:
        print(f"ERROR {name} {param} {label}: {reason}", file=sys.stderr)
    return 1 if errors else 0


def cmd_report(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415

    if not args.json.exists():
        raise ValueError(f"no results at {args.json}; run `python -m benchmarks run` first")
    payload = json.loads(args.json.read_text(encoding="utf-8"))
    doc = write_doc(payload, args.doc, json_path=args.json)
    print(f"wrote {doc}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for name, sc in SCENARIOS.items():
        print(f"{name:<11} {sc.title}")
    for name, sc in SUSTAINED.items():
        print(f"{name:<11} --duration D: {sc.title} ({sc.name})")
    print("limits      measured first in every run: fdatasync/s, MB/s, LMDB commits/s and rows/s")
    print()
    peers, missing = all_peers()
    for p in peers:
        print(f"{p.name:<18} {p.durability.kind:<8} {p.durability.detail}")
    for name, why in missing.items():
        print(f"{name:<18} n/a      {why}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark CLI with ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (args_list[0].startswith("-") and args_list[0] not in ("-h", "--help")):
        args_list.insert(0, "run")  # `ckptlog bench --quick` means `run --quick`
    parser = _parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as e:  # --help (0) or a usage error (2): a status, not an exit
        return e.code if isinstance(e.code, int) else 2
    args.argv = args_list
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "compare":
            from benchmarks.compare import cmd_compare  # noqa: PLC0415 - only this command

            return cmd_compare(args.a, args.b)
        return cmd_list(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
