"""openarmature fan-out benchmark: one real graph, every checkpoint backend, interleaved.

``python -m benchmarks.openarmature_fanout [--quick] [--rounds R] [--sizes N ...] [--out PATH]``
prints a table per fan-out size and writes ``benchmarks/results/openarmature_fanout.json``.

The graph: ``work`` fans out over N items (concurrency 16) into a 2-node instance subgraph
(``double`` -> ``plus``), collecting into an ``append`` field. openarmature 0.17 saves after
every inner node and after every instance completes (3 fan-out saves per instance), and every
save carries all N instances: the engine itself spends O(N) per save, so wall time grows as N^2
whatever the backend (the in-memory row shows the engine's own share).

Backends: ckptlog's ``Checkpointer`` (``fsync`` and ``process`` durability, without and with
``FanOutInternalSaveBatching(flush_every=256)``), openarmature's ``SQLiteCheckpointer``
(``pickle`` and ``json``) and ``InMemoryCheckpointer``. Runs are interleaved (round-robin over
the backends, order rotated every round) and the median per backend is reported.

Per run:
- ``wall``: the ``invoke`` call; the log is closed afterwards (outside the timing) and the final
  state is checked (N results, each exactly once).
- ``backend``: the wall time the backend adds: ``wall`` minus the in-memory run's ``wall`` of
  the same round (the engine's own O(N)-per-save work is the same for every backend, and
  ``InMemoryCheckpointer`` costs next to nothing). ``busy`` is the union of the intervals
  during which a backend call was awaited; with 16 concurrent instances some save is nearly
  always pending while the engine works on other instances, so ``busy`` overstates the
  backend's share and is shown for reference only.
- ``cpu``: process CPU time (all threads: ckptlog's writer, SQLite's worker threads);
  ``backend cpu`` is the CPU time the backend adds over the in-memory run of the same round,
  the figure least disturbed by other load on the machine.
- ``saves/s``: save calls (all three kinds) per second of wall time.
- ``written``: bytes the process passed to ``write``/``pwrite`` during the run and the close
  (``wchar`` in ``/proc/self/io``: LMDB's page writes, SQLite's WAL and checkpoint writes).
- ``frames`` (ckptlog: envelope bytes appended to the log) and ``serialized`` (SQLite: bytes
  its encoder produced for the saved records).

Targets at N = 5,000: ckptlog's backend time <= 1/10 of ``SQLiteCheckpointer``'s, and the bytes
ckptlog writes <= 1/20 of the bytes ``SQLiteCheckpointer(serialization="json")`` serializes.
Note that SQLite runs in WAL mode with ``synchronous=NORMAL``, which does not fsync on commit:
ckptlog ``process`` is its closest durability match.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

from openarmature.checkpoint import InMemoryCheckpointer, SQLiteCheckpointer
from openarmature.graph import END, CompiledGraph, GraphBuilder, State, append
from pydantic import Field

from benchmarks.common import environment, fmt_float, fmt_int, print_table, write_json
from eventlog.checkpoints import Checkpointer
from eventlog.records import FanOutInternalSaveBatching

RESULTS = Path(__file__).resolve().parent / "results" / "openarmature_fanout.json"
CONCURRENCY = 16
FLUSH_EVERY = 256
SIZES = (1_000, 5_000)
QUICK_SIZES = (30, 90)
ROUNDS = {1_000: 3, 5_000: 1}  # default rounds per size (a 5,000 round takes tens of minutes)
TARGET_BACKEND_RATIO = 1 / 10
TARGET_BYTES_RATIO = 1 / 20

# name -> (kind, options)
BACKENDS: dict[str, tuple[str, dict[str, Any]]] = {
    "ckptlog fsync": ("ckptlog", {"durability": "fsync", "flush_every": 0}),
    "ckptlog fsync batch": ("ckptlog", {"durability": "fsync", "flush_every": FLUSH_EVERY}),
    "ckptlog process": ("ckptlog", {"durability": "process", "flush_every": 0}),
    "ckptlog process batch": ("ckptlog", {"durability": "process", "flush_every": FLUSH_EVERY}),
    "sqlite pickle": ("sqlite", {"serialization": "pickle"}),
    "sqlite json": ("sqlite", {"serialization": "json"}),
    "in-memory": ("memory", {}),
}
SAVE_METHODS = ("save", "save_fan_out_internal", "save_fan_out_in_flight_failure")


class Outer(State):
    items: list[int]
    results: Annotated[list[int], append] = Field(default_factory=list)


class Instance(State):
    item: int = 0
    doubled: int = 0
    out: int = 0


async def _double(s: Instance) -> dict[str, int]:
    return {"doubled": s.item * 2}


async def _plus(s: Instance) -> dict[str, int]:
    return {"out": s.doubled + 1}


def build_graph() -> CompiledGraph[Outer]:
    instance = (
        GraphBuilder(Instance)
        .add_node("double", _double)
        .add_node("plus", _plus)
        .add_edge("double", "plus")
        .add_edge("plus", END)
        .set_entry("double")
        .compile()
    )
    return (
        GraphBuilder(Outer)
        .add_fan_out_node(
            "work",
            subgraph=instance,
            items_field="items",
            item_field="item",
            collect_field="out",
            target_field="results",
            concurrency=CONCURRENCY,
        )
        .add_edge("work", END)
        .set_entry("work")
        .compile()
    )


class Timed:
    """Forwards the checkpointer protocol to ``inner``, recording each call's interval.

    A method the backend lacks is not offered either, so the engine takes the same path
    (``SQLiteCheckpointer`` has no fan-out hooks: the engine then calls ``save``).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.supports_state_migration = getattr(inner, "supports_state_migration", False)
        self.intervals: list[tuple[float, float]] = []
        self.calls: dict[str, int] = {}
        for name in (*SAVE_METHODS, "load", "list", "delete"):
            method = getattr(inner, name, None)
            if method is not None:
                setattr(self, name, self._timed(name, method))

    def _timed(
        self, name: str, method: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            start = time.perf_counter()
            try:
                return await method(*args)
            finally:
                self.intervals.append((start, time.perf_counter()))

        return call

    def busy_seconds(self) -> float:
        """Length of the union of the call intervals."""
        total = 0.0
        end = float("-inf")
        for a, b in sorted(self.intervals):
            if b <= end:
                continue
            total += b - max(a, end)
            end = b
        return total

    def sum_seconds(self) -> float:
        return sum(b - a for a, b in self.intervals)


def _wchar() -> int:
    with open("/proc/self/io", encoding="ascii") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no wchar line")


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def open_backend(kind: str, options: dict[str, Any], where: Path) -> tuple[Any, Callable[[], Any]]:
    """``(checkpointer, extras)``: ``extras()`` returns backend-specific figures after close."""
    if kind == "ckptlog":
        flush_every = options["flush_every"]
        cp = Checkpointer.open(
            where / "log",
            durability=options["durability"],
            batching=FanOutInternalSaveBatching(flush_every) if flush_every else None,
        )

        def ckptlog_extras() -> dict[str, Any]:
            stats = cp.sync.stats()
            cp.sync.close()
            return {
                "frames_bytes": stats.log_bytes,
                "frames": stats.frames_appended,
                "commits": stats.commits,
                "disk_bytes": _dir_bytes(where / "log"),
            }

        return cp, ckptlog_extras
    if kind == "sqlite":
        sq = SQLiteCheckpointer(where / "ck.db", serialization=options["serialization"])
        serialized = [0]
        encode = sq._encode  # the bytes SQLite stores for each save (no public counter)

        def counting_encode(obj: Any) -> bytes:
            out = encode(obj)
            serialized[0] += len(out)
            return out

        sq._encode = counting_encode  # type: ignore[method-assign]
        return sq, lambda: {"serialized_bytes": serialized[0], "disk_bytes": _dir_bytes(where)}
    return InMemoryCheckpointer(), dict


def run_one(name: str, n: int, root: Path) -> dict[str, Any]:
    kind, options = BACKENDS[name]
    where = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    graph = build_graph()
    backend, extras = open_backend(kind, options, where)
    timed = Timed(backend)
    graph.attach_checkpointer(timed)  # type: ignore[arg-type]
    gc.collect()
    written0 = _wchar()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    final = asyncio.run(graph.invoke(Outer(items=list(range(n))), invocation_id="bench"))
    wall = time.perf_counter() - t0
    figures = extras()
    cpu = time.process_time() - cpu0
    written = _wchar() - written0
    if sorted(final.results) != [2 * i + 1 for i in range(n)]:
        raise AssertionError(f"{name}: the fan-out result is wrong (N={n})")
    saves = sum(timed.calls.get(m, 0) for m in SAVE_METHODS)
    shutil.rmtree(where, ignore_errors=True)
    return {
        "backend": name,
        "instances": n,
        "wall_s": wall,
        "busy_s": timed.busy_seconds(),
        "cpu_s": cpu,
        "saves": saves,
        "saves_per_s": saves / wall,
        "written_bytes": written,
        "calls": dict(timed.calls),
        **figures,
    }


def _median_row(runs: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds; ``backend_s`` pairs each run with the in-memory run of its round."""
    row = dict(runs[0])
    for key in ("wall_s", "busy_s", "cpu_s", "saves_per_s", "written_bytes"):
        row[key] = statistics.median(r[key] for r in runs)
    for key, base in (("backend_s", "wall_s"), ("backend_cpu_s", "cpu_s")):
        row[key] = statistics.median(
            max(0.0, r[base] - b[base]) for r, b in zip(runs, baseline, strict=True)
        )
    row["rounds"] = len(runs)
    row["each_round"] = [
        {k: r[k] for k in ("wall_s", "cpu_s", "busy_s", "written_bytes")} for r in runs
    ]
    return row


def summarize(rows: list[dict[str, Any]], n: int) -> dict[str, Any]:
    by = {r["backend"]: r for r in rows if r["instances"] == n}

    def fastest_sqlite(key: str) -> float:
        return float(min(by["sqlite pickle"][key], by["sqlite json"][key]))

    def ratio(row: dict[str, Any], key: str) -> float | None:
        # None when SQLite added no measurable time (tiny --quick sizes)
        base = fastest_sqlite(key)
        return float(row[key]) / base if base > 0 else None

    json_serialized = by["sqlite json"]["serialized_bytes"]
    out: dict[str, Any] = {"instances": n}
    for name, row in by.items():
        if not name.startswith("ckptlog"):
            continue
        out[name] = {
            "backend_vs_fastest_sqlite": ratio(row, "backend_s"),
            "backend_cpu_vs_fastest_sqlite": ratio(row, "backend_cpu_s"),
            "written_vs_sqlite_json_serialized": row["written_bytes"] / json_serialized,
            "frames_vs_sqlite_json_serialized": row["frames_bytes"] / json_serialized,
        }
    return out


def print_results(rows: list[dict[str, Any]], ratios: list[dict[str, Any]]) -> None:
    for n in sorted({r["instances"] for r in rows}):
        table = []
        for r in (r for r in rows if r["instances"] == n):
            own = r.get("frames_bytes", r.get("serialized_bytes"))
            table.append(
                [
                    r["backend"],
                    fmt_float(r["wall_s"], 2),
                    fmt_float(r["backend_s"], 2),
                    fmt_float(r["busy_s"], 2),
                    fmt_float(r["cpu_s"], 2),
                    fmt_float(r["backend_cpu_s"], 2),
                    fmt_int(r["saves"]),
                    fmt_int(r["saves_per_s"]),
                    fmt_int(r["written_bytes"]),
                    "-" if own is None else fmt_int(own),
                    fmt_int(r.get("disk_bytes")),
                ]
            )
        print_table(
            [
                "backend",
                "wall s",
                "backend s",
                "busy s",
                "cpu s",
                "backend cpu s",
                "saves",
                "saves/s",
                "written B",
                "frames/serialized B",
                "disk B",
            ],
            table,
            title=f"fan-out over {n:,} items, 2-node instance subgraph (median of rounds)",
        )
        print()
    ratio_rows = []
    for ratio in ratios:
        for name, r in ratio.items():
            if name == "instances":
                continue
            ratio_rows.append(
                [
                    f"{ratio['instances']:,}",
                    name,
                    fmt_float(r["backend_vs_fastest_sqlite"], 3),
                    fmt_float(r["backend_cpu_vs_fastest_sqlite"], 3),
                    f"{r['written_vs_sqlite_json_serialized']:.4f}",
                    f"{r['frames_vs_sqlite_json_serialized']:.4f}",
                ]
            )
    print_table(
        [
            "N",
            "ckptlog",
            "backend / sqlite",
            "backend cpu / sqlite",
            "written / json ser.",
            "frames / json ser.",
        ],
        ratio_rows,
        align="rlrrrr",
        title=(
            f"ratios (targets at N=5,000: backend <= {TARGET_BACKEND_RATIO:.2f}, "
            f"written <= {TARGET_BYTES_RATIO:.2f})"
        ),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="fan-out sizes")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size (see ROUNDS)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--dir", type=Path, default=None, help="data directory (default: a tmp)")
    args = parser.parse_args(argv)
    sizes: tuple[int, ...] = tuple(args.sizes or (QUICK_SIZES if args.quick else SIZES))
    rounds = {n: args.rounds or ROUNDS.get(n, 1) for n in sizes}
    root = Path(tempfile.mkdtemp(prefix="oa-fanout-bench-", dir=args.dir))
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        env = environment(durability="fsync and process (per backend)", data_dir=str(root))
        names = list(BACKENDS)
        for n in sizes:
            for rnd in range(rounds[n]):
                order = names[rnd % len(names) :] + names[: rnd % len(names)]
                for name in order:
                    run = run_one(name, n, root)
                    runs.setdefault((name, n), []).append(run)
                    print(
                        f"  N={n:,} round {rnd + 1}/{rounds[n]} {name}: "
                        f"wall {run['wall_s']:.2f} s, cpu {run['cpu_s']:.2f} s",
                        file=sys.stderr,
                    )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [
        _median_row(runs[(name, n)], runs[("in-memory", n)]) for n in sizes for name in BACKENDS
    ]
    ratios = [summarize(rows, n) for n in sizes]
    print_results(rows, ratios)
    payload = {
        "benchmark": "openarmature_fanout",
        "quick": args.quick,
        "environment": env,
        "settings": {
            "sizes": list(sizes),
            "rounds": {str(n): r for n, r in rounds.items()},
            "concurrency": CONCURRENCY,
            "flush_every": FLUSH_EVERY,
            "instance_subgraph_nodes": 2,
            "targets_at_5000": {
                "backend_vs_fastest_sqlite_max": TARGET_BACKEND_RATIO,
                "backend_cpu_vs_fastest_sqlite_max": TARGET_BACKEND_RATIO,
                "written_vs_sqlite_json_serialized_max": TARGET_BYTES_RATIO,
            },
        },
        "runs": rows,
        "ratios": ratios,
    }
    out = write_json(args.out, payload)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
