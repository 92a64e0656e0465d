"""Forensics benchmarks: verify, export and compact throughput; ``show --at`` latency.

``python -m benchmarks.forensics [--quick] [--out PATH] [--dir DIR]`` prints aligned tables and
writes ``benchmarks/results/forensics.json`` (``forensics.quick.json`` with ``--quick``, so a
smoke run never overwrites the published figures), with the environment. Scenarios:

(a) a log of 1,000,000 frames (20,000 with ``--quick``): 1,000 invocations saving small
    whole records round-robin, through buffered ``save_fan_out_internal`` under
    ``FanOutInternalSaveBatching(flush_every=4096)`` with ``durability="process"``. On it:
    ``verify`` (the core walk and the materialized-row check, timed apart), ``export`` in
    both formats, and ``compact`` keeping all and keeping heads: frames/s each.
(b) one invocation with a 100,000-save history (5,000 with ``--quick``): ``record_at`` (what
    ``show --at`` runs) at seqs in the last 1 % of the history, p50/p99, against folding from
    seq 1; and ``ckptlog show --at`` end to end (a subprocess: Python start-up included).

Reads run on the log reopened read-only, as the CLI does. No figure here is asserted anywhere.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.common import (
    environment,
    fmt_float,
    fmt_int,
    percentile,
    print_table,
    write_json,
)
from eventlog import forensics
from eventlog.checkpoints import CheckpointLog
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)

DURABILITY = "process"
RESULTS = Path(__file__).resolve().parent / "results"
FLUSH_EVERY = 4096
SEED = 20240611


class _Null:
    """A byte sink that counts (export throughput without the disk)."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        return len(data)


def record(inv: str, step: int) -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id=inv,
        correlation_id=f"batch-{hash(inv) % 7}",
        state={"step": step, "score": (step * 2654435761) % 1000 / 1000, "label": f"l{step % 17}"},
        completed_positions=(
            NodePosition((), "plan", 0),
            NodePosition((), "work", 1),
            NodePosition((), "score", 2),
        ),
        parent_states=(),
        last_saved_at=1_700_000_000.0 + step,
    )


def build_wide(path: Path, invocations: int, saves: int) -> tuple[int, float]:
    """``invocations`` x ``saves`` buffered whole-record saves, round-robin; (frames, seconds)."""
    started = time.perf_counter()
    batching = FanOutInternalSaveBatching(flush_every=FLUSH_EVERY)
    with CheckpointLog.open(path, durability=DURABILITY, batching=batching) as cl:
        names = [f"inv-{i:05d}" for i in range(invocations)]
        for step in range(saves):
            for inv in names:
                cl.save_fan_out_internal(inv, record(inv, step))
        cl.flush()
        frames = cl.stats().frames
    return frames, time.perf_counter() - started


def timed(fn: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def bench_wide(root: Path, invocations: int, saves: int) -> dict[str, Any]:
    path = root / "wide"
    frames, build_s = build_wide(path, invocations, saves)
    print(f"(a) built {frames:,} frames in {build_s:.1f} s", file=sys.stderr)
    rows: dict[str, Any] = {"frames": frames, "build_seconds": build_s, "ops": {}}
    with CheckpointLog.open(path, readonly=True) as cl:
        core, s = timed(cl.log.verify)
        assert core.ok, str(core)
        rows["ops"]["verify: checksums, chains, index"] = s
        problems, s = timed(lambda: forensics.verify_materialized(cl))
        assert not problems, problems[:3]
        rows["ops"]["verify: materialized rows vs fold"] = s
        for fmt in forensics.EXPORT_FORMATS:
            sink = _Null()
            summary, s = timed(lambda fmt=fmt, sink=sink: cl.export(None, fmt, out=sink))
            assert summary.lines == frames
            rows["ops"][f"export {fmt}"] = s
            rows[f"export_{fmt}_bytes"] = sink.bytes
        for keep in ("all", "heads"):
            dest = root / f"compact-{keep}"
            report, s = timed(lambda keep=keep, dest=dest: cl.compact(dest, keep=keep))
            rows["ops"][f"compact keep={keep}"] = s
            rows[f"compact_{keep}_frames_out"] = report.frames_out
            shutil.rmtree(dest)
    rows["frames_per_second"] = {op: frames / s for op, s in rows["ops"].items()}
    rows["ops"]["verify (both passes)"] = (
        rows["ops"]["verify: checksums, chains, index"]
        + rows["ops"]["verify: materialized rows vs fold"]
    )
    rows["frames_per_second"]["verify (both passes)"] = frames / rows["ops"]["verify (both passes)"]
    return rows


def build_long(path: Path, saves: int, kind: str) -> float:
    """One invocation, ``saves`` saves: small whole records (``records``), or instance saves
    on one fan-out of ``saves // 2`` instances, each in flight then completed (``fan_out``).

    Instance saves are made unbatched, so each is a frame of its own: batched ones would share
    frames (one per batch) and make a far shorter history to fold."""
    started = time.perf_counter()
    batching = FanOutInternalSaveBatching(flush_every=FLUSH_EVERY) if kind == "records" else None
    with CheckpointLog.open(path, durability=DURABILITY, batching=batching) as cl:
        if kind == "records":
            for step in range(saves):
                cl.save_fan_out_internal("long", record("long", step))
        else:
            n = saves // 2
            fan_out = FanOutProgress("items", (), n, (NOT_STARTED,) * n)
            first = msgspec.structs.replace(record("long", 0), fan_out_progress=(fan_out,))
            cl.save("long", first)
            inner = (NodePosition(("items",), "fetch", 0),)
            flying = FanOutInstanceProgress("in_flight", None, False, inner)
            for i in range(n):
                cl.save_instance("long", "items", i, flying)
                done = FanOutInstanceProgress("completed", {"i": i}, False, inner)
                cl.save_instance("long", "items", i, done)
        cl.flush()
    return time.perf_counter() - started


def bench_show_at(root: Path, saves: int, kind: str, samples: int, cli_runs: int) -> dict[str, Any]:
    path = root / f"long-{kind}"
    build_s = build_long(path, saves, kind)
    print(f"(b) built a {saves:,}-save history ({kind}) in {build_s:.1f} s", file=sys.stderr)
    rng = random.Random(SEED)
    with CheckpointLog.open(path, readonly=True) as cl:
        last = cl.log.last_seq("long")
        tail = max(1, saves // 100)
        seqs = [last - rng.randrange(tail) for _ in range(samples)]
        lat, kept_lat = [], []
        for seq in seqs:  # each record dropped before the next call, as one `show --at` does
            started = time.perf_counter()
            found = cl.record_at("long", seq) is not None
            lat.append(time.perf_counter() - started)
            assert found
        kept = None
        for seq in seqs:  # a caller that keeps the previous record: the cyclic GC walks it
            started = time.perf_counter()
            rec = cl.record_at("long", seq)
            kept_lat.append(time.perf_counter() - started)
            assert rec is not None
            kept = rec
        del kept
        naive_s = []
        for seq in seqs[:2]:
            started = time.perf_counter()
            for _ in forensics.walk(cl.log, "long", to_seq=seq):
                pass
            naive_s.append(time.perf_counter() - started)
    cli = []
    for seq in seqs[:cli_runs]:
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "eventlog.cli", "show", str(path), "long", "--at", str(seq)],
            capture_output=True,
            text=True,
            check=False,
        )
        cli.append(time.perf_counter() - started)
        assert proc.returncode == 0, proc.stderr
    return {
        "history": kind,
        "saves": saves,
        "last_seq": last,
        "build_seconds": build_s,
        "samples": samples,
        "record_at_ms": {"p50": percentile(lat, 50) * 1e3, "p99": percentile(lat, 99) * 1e3},
        "record_at_keeping_previous_ms": {
            "p50": percentile(kept_lat, 50) * 1e3,
            "p99": percentile(kept_lat, 99) * 1e3,
        },
        "fold_from_seq_1_ms": {"p50": percentile(naive_s, 50) * 1e3},
        "cli_show_at_ms": {"p50": percentile(cli, 50) * 1e3, "max": max(cli) * 1e3},
        "cli_runs": len(cli),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (CI smoke)")
    parser.add_argument("--out", help="JSON path (default: benchmarks/results/forensics*.json)")
    parser.add_argument("--dir", help="where to build the logs (default: a temp directory)")
    args = parser.parse_args(argv)
    invocations, saves = (100, 200) if args.quick else (1_000, 1_000)
    long_saves = 5_000 if args.quick else 100_000
    samples, cli_runs = (100, 2) if args.quick else (300, 10)
    root = Path(tempfile.mkdtemp(prefix="ckptlog-bench-forensics-", dir=args.dir))
    try:
        wide = bench_wide(root, invocations, saves)
        shows = [
            bench_show_at(root, long_saves, kind, samples, cli_runs)
            for kind in ("records", "fan_out")
        ]
        env = environment(durability=DURABILITY, data_dir=str(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(
        ["operation", "seconds", "frames/s"],
        [
            [op, fmt_float(s, 2), fmt_int(wide["frames_per_second"][op])]
            for op, s in wide["ops"].items()
        ],
        title=f"(a) throughput on a log of {wide['frames']:,} frames "
        f"({invocations:,} invocations x {saves:,} saves; built in {wide['build_seconds']:.1f} s)",
    )
    print()
    rows = []
    for show in shows:
        what = "small records" if show["history"] == "records" else "fan-out instance saves"
        rec, naive, cli = show["record_at_ms"], show["fold_from_seq_1_ms"], show["cli_show_at_ms"]
        rows.append(
            [f"{what}: record_at, last 1 %", fmt_float(rec["p50"], 3), fmt_float(rec["p99"], 3)]
        )
        kept = show["record_at_keeping_previous_ms"]
        rows.append(
            [
                f"{what}: record_at, caller keeps the previous",
                fmt_float(kept["p50"], 3),
                fmt_float(kept["p99"], 3),
            ]
        )
        rows.append([f"{what}: fold from seq 1 instead", fmt_float(naive["p50"], 1), "-"])
        rows.append(
            [
                f"{what}: ckptlog show --at ({show['cli_runs']} runs)",
                fmt_float(cli["p50"], 1),
                fmt_float(cli["max"], 1),
            ]
        )
    print_table(
        ["measure", "p50 ms", "p99 / max ms"],
        rows,
        title=f"(b) show --at latency at the end of a {long_saves:,}-save history",
    )
    name = "forensics.quick.json" if args.quick else "forensics.json"
    out = Path(args.out) if args.out else RESULTS / name
    write_json(out, {"quick": args.quick, "environment": env, "wide": wide, "show_at": shows})
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
