"""EventLog append throughput against raw py-lmdb ceilings, measured in one run.

    python -m benchmarks.log_append [--quick] [--json PATH] [--dir DIR] [--repeats N]

Scenarios (each run on a fresh LMDB log in a temp directory, ``"fsync"`` durability):

- ``single``: durable ``EventLog.append`` one at a time from one thread.
- ``threads16`` / ``threads256``: durable appends from 16 / 256 threads, one stream each.
- ``async16`` / ``async256``: durable ``append_async`` from 16 / 256 asyncio tasks.
- ``buffered1024``: 1,024 ``append(durable=False)`` then ``flush()``, repeated.
- ``raw_commit``: py-lmdb, one synced write transaction per frame (``put`` then commit).
- ``raw_putmulti``: py-lmdb, ``cursor.putmulti(append=True)`` of 1,024 frames per synced
  transaction, ascending u64 keys.
- ``format_floor``: the least any pure-Python writer of this log format can do per frame,
  inlined with no API around it: msgspec-encode the frame, pack the envelope header, keyed
  blake2b over header and payload (copying a pre-keyed state), join the envelope, build the log
  and index rows; then ``putmulti`` both tables, 1,024 frames per synced transaction. It bounds
  what ``buffered1024`` can reach on this machine.

The raw scenarios write exactly the envelope bytes the log stores for the benchmark frame, so
the ratios compare like with like. Every scenario warms up on its own fresh log before its timed
part; the whole set is run ``--repeats`` times interleaved (A B C ... A B C ...) and the median
is reported. ``--quick`` runs tiny counts for CI smoke (no timing assertions anywhere).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lmdb

from benchmarks.common import (
    environment,
    fmt_float,
    fmt_int,
    loadavg,
    median,
    percentile,
    print_table,
    write_json,
)
from eventlog.codec import ZERO_CHECKSUM, Compressor, Serializer, seal
from eventlog.frames import Event, Frame
from eventlog.log import EventLog

DURABILITY = "fsync"
BATCH = 1024
FRAME_BYTES_TARGET = 200
MAP_SIZE = 1 << 30  # EventLog's initial map size, so neither side pays for growing
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "log_append.json"
# Smoke runs must not overwrite the published full-size figures.
DEFAULT_JSON_QUICK = DEFAULT_JSON.with_name("log_append.quick.json")
U64 = struct.Struct(">Q")

TARGETS = {
    "single_vs_raw_commit": 1 / 1.5,
    "threads256_abs": 50_000.0,
    "async256_abs": 50_000.0,
    "buffered_vs_raw_putmulti": 0.40,
}


@dataclass(frozen=True)
class Sizes:
    single: int  # appends / raw commits per run
    per_appender_16: int  # appends per appender with 16 appenders
    per_appender_256: int
    batches: int  # 1,024-frame batches per buffered run
    raw_batches: int  # 1,024-frame batches per putmulti run (fast: more, to time > 0.1 s)
    warmup_single: int
    repeats: int


FULL = Sizes(
    single=3_000,
    per_appender_16=500,
    per_appender_256=200,
    batches=100,
    raw_batches=400,
    warmup_single=200,
    repeats=5,
)
QUICK = Sizes(
    single=40,
    per_appender_16=4,
    per_appender_256=2,
    batches=3,
    raw_batches=3,
    warmup_single=10,
    repeats=3,
)


@dataclass
class Run:
    frames: int
    seconds: float
    commits: int | None = None  # write transactions (EventLog's own count)
    latencies: list[float] | None = None  # seconds per operation, when measured

    @property
    def rate(self) -> float:
        return self.frames / self.seconds


def make_frame(target: int = FRAME_BYTES_TARGET) -> Event:
    """An Event whose msgpack encoding is exactly ``target`` bytes (a typical node event)."""
    ser: Serializer[Any] = Serializer(Frame)

    def build(pad: int) -> Event:
        return Event(
            name="node.completed",
            data={
                "invocation_id": "inv-7f3c9a2e-41d8-4b6a-9c0e-5d2f8a1b3c4d",
                "node": "summarize",
                "step": 12,
                "attempt": 0,
                "ok": True,
                "output": "x" * pad,
            },
            at=1700000000.5,
        )

    base = len(ser.encode(build(0)))
    pad = max(target - base, 0)
    frame = build(pad)
    # str headers grow at 32 bytes of content (fixstr -> str8): settle on the exact size.
    while len(ser.encode(frame)) > target and pad > 0:
        pad -= 1
        frame = build(pad)
    return frame


def stored_envelope(frame: Event) -> bytes:
    """The exact envelope bytes the log stores for ``frame`` (default compression settings)."""
    payload, flags = Compressor().compress(Serializer(Frame).encode(frame))
    data, _ = seal(1, 1, ZERO_CHECKSUM, payload, flags=flags)
    return data


# -- EventLog scenarios --------------------------------------------------------------------


def _open(path: Path) -> EventLog:
    return EventLog.open(path, durability=DURABILITY)


def run_single(path: Path, frame: Event, sizes: Sizes) -> Run:
    log = _open(path)
    try:
        for _ in range(sizes.warmup_single):
            log.append("s0", frame)
        commits0 = log.stats().commits
        lat: list[float] = []
        clock = time.perf_counter
        t0 = clock()
        for _ in range(sizes.single):
            a = clock()
            log.append("s0", frame)
            lat.append(clock() - a)
        dt = clock() - t0
        commits = log.stats().commits - commits0
    finally:
        log.close()
    return Run(sizes.single, dt, commits, lat)


def run_threads(path: Path, frame: Event, appenders: int, per: int) -> Run:
    log = _open(path)
    start = threading.Barrier(appenders + 1)
    lats: list[list[float]] = [[] for _ in range(appenders)]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        stream = f"s{i}"
        out = lats[i]
        clock = time.perf_counter
        try:
            log.append(stream, frame)  # warm-up; also creates the stream
            start.wait()
            for _ in range(per):
                a = clock()
                log.append(stream, frame)
                out.append(clock() - a)
        except BaseException as e:
            errors.append(e)
            start.abort()
            raise

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(appenders)]
    try:
        for t in threads:
            t.start()
        start.wait()
        commits0 = log.stats().commits
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        commits = log.stats().commits - commits0
    finally:
        for t in threads:
            t.join()
        log.close()
    if errors:
        raise errors[0]
    return Run(appenders * per, dt, commits, [x for lat in lats for x in lat])


def run_async(path: Path, frame: Event, appenders: int, per: int) -> Run:
    log = _open(path)
    lats: list[list[float]] = [[] for _ in range(appenders)]

    async def worker(i: int) -> None:
        stream = f"s{i}"
        out = lats[i]
        clock = time.perf_counter
        for _ in range(per):
            a = clock()
            await log.append_async(stream, frame)
            out.append(clock() - a)

    async def main() -> tuple[float, int]:
        # Warm-up: every task's stream exists and the writer is running before timing starts.
        await asyncio.gather(*(log.append_async(f"s{i}", frame) for i in range(appenders)))
        commits0 = log.stats().commits
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(appenders)))
        return time.perf_counter() - t0, log.stats().commits - commits0

    try:
        dt, commits = asyncio.run(main())
    finally:
        log.close()
    return Run(appenders * per, dt, commits, [x for lat in lats for x in lat])


def run_buffered(path: Path, frame: Event, sizes: Sizes) -> Run:
    log = _open(path)
    try:
        for _ in range(BATCH):  # warm-up batch
            log.append("s0", frame, durable=False)
        log.flush()
        commits0 = log.stats().commits
        lat: list[float] = []
        clock = time.perf_counter
        t0 = clock()
        for _ in range(sizes.batches):
            a = clock()
            for _ in range(BATCH):
                log.append("s0", frame, durable=False)
            log.flush()
            lat.append(clock() - a)
        dt = clock() - t0
        commits = log.stats().commits - commits0
    finally:
        log.close()
    return Run(sizes.batches * BATCH, dt, commits, lat)


# -- raw py-lmdb ceilings ------------------------------------------------------------------


def _raw_env(path: Path) -> tuple[Any, Any]:
    # The settings backends/lmdb.py uses for "fsync" durability.
    env = lmdb.open(
        str(path),
        map_size=MAP_SIZE,
        subdir=True,
        sync=DURABILITY == "fsync",
        metasync=True,
        max_dbs=8,
        readahead=True,
        writemap=False,
    )
    return env, env.open_db(b"log")


def run_raw_commit(path: Path, value: bytes, sizes: Sizes) -> Run:
    env, db = _raw_env(path)
    pack = U64.pack
    try:
        for k in range(1, sizes.warmup_single + 1):
            with env.begin(write=True, db=db) as txn:
                txn.put(pack(k), value)
        first = sizes.warmup_single + 1
        lat: list[float] = []
        clock = time.perf_counter
        t0 = clock()
        for k in range(first, first + sizes.single):
            a = clock()
            with env.begin(write=True, db=db) as txn:
                txn.put(pack(k), value)
            lat.append(clock() - a)
        dt = clock() - t0
    finally:
        env.close()
    return Run(sizes.single, dt, sizes.single, lat)


def run_raw_putmulti(path: Path, value: bytes, sizes: Sizes) -> Run:
    env, db = _raw_env(path)
    pack = U64.pack

    def batch(start: int) -> None:
        # Keys are built inside the timed part: any writer has to make them.
        with env.begin(write=True, db=db) as txn:
            items = [(pack(k), value) for k in range(start, start + BATCH)]
            txn.cursor().putmulti(items, append=True)

    try:
        batch(1)  # warm-up
        lat: list[float] = []
        clock = time.perf_counter
        t0 = clock()
        for b in range(1, sizes.raw_batches + 1):
            a = clock()
            batch(1 + b * BATCH)
            lat.append(clock() - a)
        dt = clock() - t0
    finally:
        env.close()
    return Run(sizes.raw_batches * BATCH, dt, sizes.raw_batches, lat)


def run_format_floor(path: Path, frame: Event, sizes: Sizes) -> Run:
    env = lmdb.open(str(path), map_size=MAP_SIZE, subdir=True, sync=True, metasync=True, max_dbs=8)
    log_db, index_db = env.open_db(b"log"), env.open_db(b"streams")
    encode = Serializer(Frame).encode
    header = struct.Struct(">BBHQQ16s")
    keyed = hashlib.blake2b(digest_size=16, key=b"")
    pack, pack2 = U64.pack, struct.Struct(">QQ").pack
    state = {"gseq": 0, "seq": 0, "prev": ZERO_CHECKSUM}

    def batch() -> None:
        gseq, seq, prev = state["gseq"], state["seq"], state["prev"]
        log_rows, index_rows = [], []
        for _ in range(BATCH):
            payload = encode(frame)
            seq += 1
            gseq += 1
            head = header.pack(1, 0, 0, 1, seq, prev)
            h = keyed.copy()
            h.update(head)
            h.update(payload)
            prev = h.digest()
            gkey = pack(gseq)
            log_rows.append((gkey, head + prev + payload))
            index_rows.append((pack2(1, seq), gkey))
        with env.begin(write=True) as txn:
            txn.cursor(db=log_db).putmulti(log_rows, append=True)
            txn.cursor(db=index_db).putmulti(index_rows, append=True)
        state.update(gseq=gseq, seq=seq, prev=prev)

    try:
        batch()  # warm-up
        lat: list[float] = []
        clock = time.perf_counter
        t0 = clock()
        for _ in range(sizes.batches):
            a = clock()
            batch()
            lat.append(clock() - a)
        dt = clock() - t0
    finally:
        env.close()
    return Run(sizes.batches * BATCH, dt, sizes.batches, lat)


# -- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    latency_unit: str  # what one latency sample is: "append", "commit" or "batch"
    run: Callable[[Path], Run]


def scenarios(frame: Event, value: bytes, sizes: Sizes) -> list[Scenario]:
    s16, s256 = sizes.per_appender_16, sizes.per_appender_256
    return [
        Scenario(
            "single",
            "durable append, 1 thread",
            "append",
            lambda p: run_single(p, frame, sizes),
        ),
        Scenario(
            "threads16",
            "durable append, 16 threads",
            "append",
            lambda p: run_threads(p, frame, 16, s16),
        ),
        Scenario(
            "threads256",
            "durable append, 256 threads",
            "append",
            lambda p: run_threads(p, frame, 256, s256),
        ),
        Scenario(
            "async16",
            "durable append_async, 16 tasks",
            "append",
            lambda p: run_async(p, frame, 16, s16),
        ),
        Scenario(
            "async256",
            "durable append_async, 256 tasks",
            "append",
            lambda p: run_async(p, frame, 256, s256),
        ),
        Scenario(
            "buffered1024",
            "1,024 x append(durable=False) + flush()",
            "batch",
            lambda p: run_buffered(p, frame, sizes),
        ),
        Scenario(
            "format_floor",
            "pure-Python floor of this format, 1,024/txn",
            "batch",
            lambda p: run_format_floor(p, frame, sizes),
        ),
        Scenario(
            "raw_commit",
            "raw lmdb: 1 synced txn per frame",
            "commit",
            lambda p: run_raw_commit(p, value, sizes),
        ),
        Scenario(
            "raw_putmulti",
            "raw lmdb: putmulti 1,024 per synced txn",
            "batch",
            lambda p: run_raw_putmulti(p, value, sizes),
        ),
    ]


def _summarize(sc: Scenario, runs: list[Run]) -> dict[str, Any]:
    rates = [r.rate for r in runs]
    lat = [x for r in runs for x in (r.latencies or [])]
    commits = [r.commits for r in runs if r.commits]
    frames_per_commit = (
        median([r.frames / r.commits for r in runs if r.commits]) if commits else None
    )
    return {
        "description": sc.description,
        "unit": "frames/s",
        "median": median(rates),
        "min": min(rates),
        "max": max(rates),
        "runs": [
            {"frames": r.frames, "seconds": r.seconds, "rate": r.rate, "commits": r.commits}
            for r in runs
        ],
        "frames_per_commit": frames_per_commit,
        "latency_unit": sc.latency_unit,
        "latency_us": ({f"p{p}": percentile(lat, p) * 1e6 for p in (50, 90, 99)} if lat else None),
    }


def _ratios(res: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    def m(name: str) -> float:
        value: float = res[name]["median"]
        return value

    values = {
        "single_vs_raw_commit": (
            m("single") / m("raw_commit"),
            "single durable append / raw lmdb one synced txn per frame",
        ),
        "threads256_abs": (m("threads256"), "256 threads, durable appends/s"),
        "async256_abs": (m("async256"), "256 asyncio tasks, durable appends/s"),
        "buffered_vs_raw_putmulti": (
            m("buffered1024") / m("raw_putmulti"),
            "buffered 1,024 + flush / raw lmdb putmulti 1,024 per synced txn",
        ),
    }
    informative = {
        "format_floor_vs_raw_putmulti": (
            m("format_floor") / m("raw_putmulti"),
            "pure-Python floor of the envelope format / raw lmdb putmulti (the best any "
            "Python writer of these envelopes can score on buffered_vs_raw_putmulti)",
        ),
        "buffered_vs_format_floor": (
            m("buffered1024") / m("format_floor"),
            "buffered 1,024 + flush / the pure-Python floor of the format",
        ),
    }
    out: dict[str, dict[str, Any]] = {
        name: {
            "value": value,
            "target": TARGETS[name],
            "met": value >= TARGETS[name],
            "definition": definition,
        }
        for name, (value, definition) in values.items()
    }
    for name, (value, definition) in informative.items():
        out[name] = {"value": value, "target": None, "met": None, "definition": definition}
    return out


def _print(
    env: dict[str, Any],
    res: dict[str, dict[str, Any]],
    ratios: dict[str, dict[str, Any]],
    frame_bytes: int,
    stored_bytes: int,
    repeats: int,
) -> None:
    print(
        f"ckptlog log_append: {env['platform']}, {env['cpu_count']} CPUs ({env['cpu_model']}), "
        f"Python {env['python']}, lmdb {env['packages']['lmdb']}, "
        f"msgspec {env['packages']['msgspec']}, zstandard {env['packages']['zstandard']}"
    )
    print(
        f"durability={env['durability']}, frame {frame_bytes} B encoded / {stored_bytes} B "
        f"stored, median of {repeats} interleaved runs, data on {env['filesystem']}"
    )
    print(
        f"load average (1/5/15 min) at start {env['loadavg_1_5_15']}, at end "
        f"{env.get('loadavg_end')} (anything else running skews these figures)"
    )
    print()
    baseline = {
        "single": "raw_commit",
        "threads16": "raw_commit",
        "threads256": "raw_commit",
        "async16": "raw_commit",
        "async256": "raw_commit",
        "buffered1024": "raw_putmulti",
        "format_floor": "raw_putmulti",
    }
    rows = []
    for name, r in res.items():
        lat = r["latency_us"] or {}
        base = baseline.get(name)
        vs = f"{r['median'] / res[base]['median']:.2f}x {base}" if base else "-"
        rows.append(
            [
                name,
                r["description"],
                fmt_int(r["median"]),
                fmt_int(r["min"]),
                fmt_int(r["max"]),
                fmt_float(r["frames_per_commit"], 1),
                fmt_float(lat.get("p50"), 0),
                fmt_float(lat.get("p99"), 0),
                r["latency_unit"],
                vs,
            ]
        )
    print_table(
        [
            "scenario",
            "what",
            "frames/s",
            "min",
            "max",
            "frames/commit",
            "p50 us",
            "p99 us",
            "per",
            "vs raw",
        ],
        rows,
        align="llrrrrrrll",
    )
    print()
    rows = []
    for name, r in ratios.items():
        is_abs = name.endswith("_abs")
        if r["target"] is None:
            wanted, verdict = "-", "info"
        else:
            wanted = (">= " + fmt_int(r["target"])) if is_abs else f">= {r['target']:.2f}"
            verdict = "met" if r["met"] else "MISSED"
        rows.append(
            [
                name,
                fmt_int(r["value"]) if is_abs else f"{r['value']:.3f}",
                wanted,
                verdict,
                r["definition"],
            ]
        )
    print_table(["target", "measured", "wanted", "", "definition"], rows, align="lrrll")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.log_append", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="tiny counts for CI smoke runs")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="where to write results (default benchmarks/results/log_append.json, "
        "or log_append.quick.json with --quick)",
    )
    parser.add_argument("--dir", default=None, help="parent directory for the temp logs")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (>= 3)")
    args = parser.parse_args(argv)

    sizes = QUICK if args.quick else FULL
    if args.repeats is not None:
        if args.repeats < 1:
            parser.error(f"--repeats must be at least 1, got {args.repeats}")
        sizes = Sizes(**{**asdict(sizes), "repeats": args.repeats})
    json_path = args.json or (DEFAULT_JSON_QUICK if args.quick else DEFAULT_JSON)

    frame = make_frame()
    frame_bytes = len(Serializer(Frame).encode(frame))
    value = stored_envelope(frame)

    root = Path(tempfile.mkdtemp(prefix="ckptlog-bench-", dir=args.dir))
    try:
        env = environment(durability=DURABILITY, data_dir=str(root))
        plan = scenarios(frame, value, sizes)
        # One untimed pass at smoke size first: imports, thread start-up, page cache.
        for sc in scenarios(frame, value, QUICK):
            _run_fresh(root, "warmup-" + sc.name, sc)
        runs: dict[str, list[Run]] = {sc.name: [] for sc in plan}
        for rep in range(sizes.repeats):
            for sc in plan:
                runs[sc.name].append(_run_fresh(root, f"{rep}-{sc.name}", sc))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    env["loadavg_end"] = loadavg()
    res = {sc.name: _summarize(sc, runs[sc.name]) for sc in plan}
    ratios = _ratios(res)
    _print(env, res, ratios, frame_bytes, len(value), sizes.repeats)
    payload = {
        "benchmark": "log_append",
        "quick": args.quick,
        "environment": env,
        "config": {
            **asdict(sizes),
            "batch_frames": BATCH,
            "frame_bytes": frame_bytes,
            "stored_bytes": len(value),
            "map_size": MAP_SIZE,
        },
        "scenarios": res,
        "ratios": ratios,
    }
    out = write_json(json_path, payload)
    print(f"\nwrote {out}")
    return 0


def _run_fresh(root: Path, name: str, sc: Scenario) -> Run:
    path = root / name
    try:
        return sc.run(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
