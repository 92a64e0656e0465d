"""Parquet export and SQL over the history (issue 25): ``ckptlog export --format parquet``
throughput on a log of 1,000,000 frames, against the JSON Lines export of the same log in
the same run, and a DuckDB query over the tables.

``python -m benchmarks.export_parquet [--quick] [--out PATH] [--dir DIR]`` prints a table and
writes ``benchmarks/results/export_parquet.json`` (``export_parquet.quick.json`` with
``--quick``: 20,000 frames, so a smoke run never overwrites the published figures), with the
environment (load average included).

The log: 1,000 invocations x 1,000 buffered whole-record saves, round-robin (as
benchmarks/forensics.py builds it), plus one fan-out of 50,000 instances saved through
``save_instance`` in batches of 256 (a few hundred frames, 50,000 rows of ``instances``).
Each measure runs in a child process reading the log read-only, as the CLI does, so the peak
resident memory (``ru_maxrss`` of that child, from ``wait4``) is the export's alone; the
Parquet and JSON Lines exports are interleaved (``--repeat`` rounds), and the figure quoted
is the ratio of their medians. Target: 1,000,000 frames in <= 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import environment, fmt_float, fmt_int, print_table, write_json
from benchmarks.forensics import DURABILITY, build_wide
from eventlog.checkpoints import CheckpointLog
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_SECONDS = 60.0
TARGET_FRAMES = 1_000_000


def add_fan_out(path: Path, instances: int) -> None:
    rec = CheckpointRecord(
        invocation_id="fan",
        correlation_id="batch-fan",
        state={"phase": "fan_out"},
        completed_positions=(NodePosition((), "plan", 0),),
        parent_states=(),
        last_saved_at=1_700_000_000.0,
        fan_out_progress=(FanOutProgress("work", (), instances, (NOT_STARTED,) * instances),),
    )
    batching = FanOutInternalSaveBatching(flush_every=256)
    with CheckpointLog.open(path, durability=DURABILITY, batching=batching) as cl:
        cl.save("fan", rec)
        for i in range(instances):
            ok = i % 97 != 96
            outcome = {"value": i} if ok else {"error": f"item {i} timed out"}
            progress = FanOutInstanceProgress("completed", outcome, not ok)
            cl.save_instance("fan", "work", i, progress, saved_at=1_700_000_100.0 + i / 100)
        cl.flush()


def child(what: str, path: str, dest: str) -> dict[str, Any]:
    """One measure in this (child) process: ``parquet``, ``jsonl`` or ``sql``."""
    from eventlog import forensics, read  # noqa: PLC0415
    from eventlog.read import parquet  # noqa: PLC0415

    opened = read.open_log(path)
    try:
        log = opened.log.log
        started = time.perf_counter()
        out: dict[str, Any] = {}
        if what == "parquet":
            out["rows"] = parquet.export_parquet(log, dest)
        elif what == "jsonl":
            sink = _Null()
            summary = forensics.export(opened.log, None, "jsonl-frames", out=sink)
            out["lines"], out["bytes"] = summary.lines, sink.bytes
        else:
            answer = parquet.query(
                dest,
                "SELECT kind, count(*) AS saves, sum(size) AS bytes FROM saves GROUP BY kind",
            )
            out["answer_rows"] = len(answer.rows)
            q = "SELECT state, result_is_error, count(*) FROM instances GROUP BY ALL"
            out["instances_rows"] = len(parquet.query(dest, q).rows)
        out["seconds"] = time.perf_counter() - started
        out.update(_memory())
    finally:
        opened.close()
    return out


def _memory() -> dict[str, float]:
    """Resident memory now, anonymous (the heap: what batching bounds) apart from file pages
    (LMDB's map of the log, which the kernel may drop at will), in MiB."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:")):
                    name, kib = line.split()[:2]
                    out[name.rstrip(":").lower() + "_mib_at_end"] = int(kib) / 1024
    except OSError:
        pass
    return out


class _Null:
    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        return len(data)


def run_child(what: str, path: Path, dest: Path) -> dict[str, Any]:
    """A measure in a child process; its own peak resident memory from ``wait4``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.export_parquet", "--child", what, str(path), str(dest)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    text = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"the {what} child failed with exit status {proc.returncode}")
    result: dict[str, Any] = json.loads(text.strip().splitlines()[-1])
    result["peak_rss_mib"] = usage.ru_maxrss / 1024  # KiB on Linux
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 frames (CI smoke)")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3; quick 1)")
    parser.add_argument("--out", help="JSON path (default: benchmarks/results/...)")
    parser.add_argument("--dir", help="where to build the log (default: a temp directory)")
    parser.add_argument(
        "--log", help="use this log (built by an earlier run with --keep-log) instead of building"
    )
    parser.add_argument("--keep-log", metavar="PATH", help="move the built log to PATH at the end")
    parser.add_argument(
        "--child", nargs=3, metavar=("WHAT", "PATH", "DEST"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    invocations, saves, instances = (20, 1_000, 2_000) if args.quick else (1_000, 1_000, 50_000)
    repeat = args.repeat or (1 if args.quick else 3)
    root = Path(tempfile.mkdtemp(prefix="ckptlog-bench-parquet-", dir=args.dir))
    try:
        path = Path(args.log) if args.log else root / "log"
        started = time.perf_counter()
        if not args.log:
            build_wide(path, invocations, saves)
            add_fan_out(path, instances)
        build_s = time.perf_counter() - started
        with CheckpointLog.open(path, readonly=True) as cl:
            frames = cl.stats().frames
        print(f"built {frames:,} frames in {build_s:.1f} s", file=sys.stderr)
        rounds: list[dict[str, Any]] = []
        for r in range(repeat):
            dest = root / f"tables-{r}"
            pq_run = run_child("parquet", path, dest)
            jl_run = run_child("jsonl", path, dest)
            sql_run = run_child("sql", path, dest)
            rounds.append({"parquet": pq_run, "jsonl": jl_run, "sql": sql_run})
            print(
                f"round {r + 1}: parquet {pq_run['seconds']:.1f} s, jsonl-frames "
                f"{jl_run['seconds']:.1f} s, sql {sql_run['seconds']:.2f} s",
                file=sys.stderr,
            )
            table_bytes = sum(f.stat().st_size for f in dest.iterdir())
            shutil.rmtree(dest)
        env = environment(durability=DURABILITY, data_dir=str(root))
        if args.keep_log and not args.log:
            shutil.move(str(path), args.keep_log)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    pq_s = statistics.median(x["parquet"]["seconds"] for x in rounds)
    jl_s = statistics.median(x["jsonl"]["seconds"] for x in rounds)
    sql_s = statistics.median(x["sql"]["seconds"] for x in rounds)
    per_million = pq_s * TARGET_FRAMES / frames
    rows = rounds[0]["parquet"]["rows"]
    last = rounds[-1]
    print_table(
        ["measure", "seconds", "frames/s", "peak RSS MiB", "heap MiB at end"],
        [
            [
                "export --format parquet",
                fmt_float(pq_s),
                fmt_int(frames / pq_s),
                fmt_float(last["parquet"]["peak_rss_mib"], 0),
                fmt_float(last["parquet"].get("rssanon_mib_at_end"), 0),
            ],
            [
                "export jsonl-frames (to /dev/null)",
                fmt_float(jl_s),
                fmt_int(frames / jl_s),
                fmt_float(last["jsonl"]["peak_rss_mib"], 0),
                fmt_float(last["jsonl"].get("rssanon_mib_at_end"), 0),
            ],
            ["sql: two GROUP BY queries over the files", fmt_float(sql_s), "-", "-", "-"],
        ],
        title=f"Parquet export of {frames:,} frames (median of {repeat}; tables: "
        + ", ".join(f"{t} {n:,}" for t, n in rows.items())
        + f"; {table_bytes / 2**20:,.1f} MiB of Parquet)",
    )
    verdict = "met" if per_million <= TARGET_SECONDS else "MISSED"
    print(
        f"\nparquet / jsonl-frames time: {pq_s / jl_s:.2f}x; 1,000,000 frames in "
        f"{per_million:.1f} s (target <= {TARGET_SECONDS:.0f} s: {verdict}); "
        f"load average {env['loadavg_1_5_15']}"
    )
    name = "export_parquet.quick.json" if args.quick else "export_parquet.json"
    out = Path(args.out) if args.out else RESULTS / name
    write_json(
        out,
        {
            "quick": args.quick,
            "environment": env,
            "frames": frames,
            "build_seconds": build_s,
            "rounds": rounds,
            "median_seconds": {"parquet": pq_s, "jsonl-frames": jl_s, "sql": sql_s},
            "parquet_over_jsonl": pq_s / jl_s,
            "seconds_per_million_frames": per_million,
            "target_seconds": TARGET_SECONDS,
            "target_met": per_million <= TARGET_SECONDS,
            "parquet_bytes": table_bytes,
        },
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
