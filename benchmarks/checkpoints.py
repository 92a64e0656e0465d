"""Checkpoint benchmarks: fan-out save size, load latency vs history, history replay rate.

``python -m benchmarks.checkpoints [--quick] [--out PATH]`` prints aligned tables and writes
``benchmarks/results/checkpoints.json`` (with the environment: machine, Python, package
versions, durability). Scenarios:

(a) bytes appended (``stats().log_bytes``) per fan-out instance-completed save, with 100 vs
    10,000 instances in flight, through ``save_instance`` (O(1)); and through
    ``save_fan_out_internal`` with whole openarmature-shaped records for 100 vs 1,000 instances
    (that path diffs the whole record: O(N) CPU). Target: the large/small ratio within 2x.
(b) ``load`` p50/p99 of a 4 KiB state with 100 vs 100,000 saves of history (5,000 with
    ``--quick``). Target: ratio within 2x.
(c) full-history replay rate: ``history(inv)`` records/s over the long history of (b).

Every log is written with ``durability="process"`` (committed to the OS, not fsynced): the
figures measure the log's own CPU and bytes, not the disk's flush latency.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    environment,
    fmt_float,
    fmt_int,
    percentile,
    print_table,
    write_json,
)
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
RESULTS = Path(__file__).resolve().parent / "results" / "checkpoints.json"
FLUSH_EVERY = 256
STATE_BYTES = 4096
TARGET_RATIO = 2.0


def fan_out_record(inv: str, instances: tuple[FanOutInstanceProgress, ...], at: float) -> Any:
    """An openarmature-shaped record: state, positions, and one fan-out of ``instances``."""
    return CheckpointRecord(
        invocation_id=inv,
        correlation_id="bench",
        state={"query": "q", "items": len(instances), "notes": "x" * 200},
        completed_positions=(NodePosition((), "plan", 0), NodePosition((), "split", 1)),
        parent_states=(),
        last_saved_at=at,
        schema_version="1",
        fan_out_progress=(FanOutProgress("process_items", (), len(instances), instances),),
    )


def result_of(i: int) -> dict[str, Any]:
    return {"item": i, "score": (i * 2654435761) % 1000 / 1000, "label": f"label-{i % 17}"}


def bench_fan_out(root: Path, mode: str, n: int, saves: int) -> dict[str, Any]:
    """Bytes and time per instance-completed save with ``n`` instances in flight."""
    path = root / f"fanout-{mode}-{n}"
    inv = f"{mode}-{n}"
    instances = [NOT_STARTED] * n
    batching = FanOutInternalSaveBatching(flush_every=FLUSH_EVERY)
    with CheckpointLog.open(path, durability=DURABILITY, batching=batching) as log:
        log.save(inv, fan_out_record(inv, tuple(instances), time.time()))
        before = log.stats()
        order = random.Random(n).sample(range(n), min(saves, n))
        order += [order[k % len(order)] for k in range(saves - len(order))]
        started = time.perf_counter()
        for i in order:
            done = FanOutInstanceProgress("completed", result_of(i))
            if mode == "save_instance":
                log.save_instance(inv, "process_items", i, done)
            else:
                instances[i] = done
                log.save_fan_out_internal(inv, fan_out_record(inv, tuple(instances), time.time()))
        log.flush()
        seconds = time.perf_counter() - started
        after = log.stats()
    frames = after.frames_appended - before.frames_appended
    appended = after.log_bytes - before.log_bytes
    return {
        "mode": mode,
        "instances": n,
        "saves": saves,
        "frames": frames,
        "bytes_appended": appended,
        "bytes_per_save": appended / frames,
        "saves_per_s": saves / seconds,
    }


def state_of(k: int) -> dict[str, Any]:
    """A ~4 KiB state of which a small part changes at every save."""
    rng = random.Random(0)
    fields = {f"f{j:02d}": rng.randbytes(48).hex() for j in range(STATE_BYTES // 110)}
    return {"step": k, "cursor": f"page-{k}", **fields}


def build_history(root: Path, saves: int) -> tuple[Path, str, float]:
    path = root / f"history-{saves}"
    inv = f"hist-{saves}"
    started = time.perf_counter()
    with CheckpointLog.open(path, durability=DURABILITY) as log:
        for k in range(saves):
            rec = CheckpointRecord(
                invocation_id=inv,
                correlation_id="bench",
                state=state_of(k),
                completed_positions=(NodePosition((), "step", k),),
                parent_states=(),
                last_saved_at=float(k),
            )
            log.save(inv, rec)
    return path, inv, time.perf_counter() - started


def bench_load(path: Path, inv: str, saves: int, loads: int) -> dict[str, Any]:
    with CheckpointLog.open(path, durability=DURABILITY) as log:
        for _ in range(min(50, loads)):  # warm the page cache and the interpreter
            log.load(inv)
        times = []
        for _ in range(loads):
            t0 = time.perf_counter()
            rec = log.load(inv)
            times.append(time.perf_counter() - t0)
        assert rec is not None
        assert rec.state["step"] == saves - 1
        disk = log.stats().disk_bytes
    return {
        "history_saves": saves,
        "loads": loads,
        "p50_us": percentile(times, 50) * 1e6,
        "p99_us": percentile(times, 99) * 1e6,
        "disk_bytes": disk,
    }


def bench_replay(path: Path, inv: str, saves: int) -> dict[str, Any]:
    with CheckpointLog.open(path, durability=DURABILITY) as log:
        t0 = time.perf_counter()
        count = sum(1 for _ in log.history(inv))
        seconds = time.perf_counter() - t0
    assert count == saves
    return {"records": count, "seconds": seconds, "records_per_s": count / seconds}


def ratio(large: float, small: float) -> float:
    return large / small if small else float("inf")


def verdict(r: float) -> str:
    return "ok" if r <= TARGET_RATIO else "MISSED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run, < 20 s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--dir", type=Path, default=None, help="data directory (default: a tmp)")
    args = parser.parse_args(argv)
    quick: bool = args.quick

    fan_saves = 500 if quick else 5_000
    internal_saves = 200 if quick else 1_000
    long_history = 5_000 if quick else 100_000
    loads = 300 if quick else 3_000

    root = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=args.dir))
    try:
        env = environment(durability=DURABILITY, data_dir=str(root))
        fan = [bench_fan_out(root, "save_instance", n, fan_saves) for n in (100, 10_000)]
        internal = [
            bench_fan_out(root, "save_fan_out_internal", n, internal_saves) for n in (100, 1_000)
        ]
        histories = [build_history(root, s) for s in (100, long_history)]
        load = [
            bench_load(p, inv, s, loads)
            for (p, inv, _), s in zip(histories, (100, long_history), strict=True)
        ]
        replay = bench_replay(histories[1][0], histories[1][1], long_history)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    fan_rows = []
    ratios: dict[str, float] = {}
    for name, (small, large) in (("save_instance", fan), ("save_fan_out_internal", internal)):
        r = ratio(large["bytes_per_save"], small["bytes_per_save"])
        ratios[f"{name}_bytes"] = r
        fan_rows.append(
            [
                name,
                f"{small['instances']:,} / {large['instances']:,}",
                fmt_float(small["bytes_per_save"], 1),
                fmt_float(large["bytes_per_save"], 1),
                f"{r:.2f}x {verdict(r)}",
                f"{fmt_int(small['saves_per_s'])} / {fmt_int(large['saves_per_s'])}",
            ]
        )
    print_table(
        ["save path", "instances", "B/save small", "B/save large", "ratio (<=2x)", "saves/s"],
        fan_rows,
        title="(a) bytes appended per instance-completed save (batching flush_every=256)",
    )
    print()
    load_rows = []
    for key in ("p50_us", "p99_us"):
        r = ratio(load[1][key], load[0][key])
        ratios[f"load_{key}"] = r
        load_rows.append(
            [
                f"load {key[:3]}",
                fmt_float(load[0][key], 1),
                fmt_float(load[1][key], 1),
                f"{r:.2f}x {verdict(r)}",
            ]
        )
    print_table(
        ["4 KiB state", "100 saves (us)", f"{long_history:,} saves (us)", "ratio (<=2x)"],
        load_rows,
        title=f"(b) load latency vs history length ({loads:,} loads each)",
    )
    print()
    build_rate = long_history / histories[1][2]
    print_table(
        ["replay", "records", "seconds", "records/s"],
        [
            [
                "history(inv)",
                fmt_int(replay["records"]),
                fmt_float(replay["seconds"], 2),
                fmt_int(replay["records_per_s"]),
            ],
            [
                "(build: save)",
                fmt_int(long_history),
                fmt_float(histories[1][2], 2),
                fmt_int(build_rate),
            ],
        ],
        title="(c) full-history replay of the long history (4 KiB state)",
    )

    payload = {
        "benchmark": "checkpoints",
        "quick": quick,
        "environment": env,
        "settings": {
            "durability": DURABILITY,
            "flush_every": FLUSH_EVERY,
            "state_bytes": STATE_BYTES,
            "target_ratio": TARGET_RATIO,
        },
        "fan_out_save_instance": fan,
        "fan_out_internal_whole_record": internal,
        "load": load,
        "history_build_saves_per_s": build_rate,
        "replay": replay,
        "ratios": ratios,
    }
    out = write_json(args.out, payload)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
