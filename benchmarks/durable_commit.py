"""The cost of a durable commit (issue 28): ckptlog against raw LMDB and SQLite, interleaved.

``python -m benchmarks.durable_commit [--quick] [--repeats N] [--out PATH]`` measures, in one
process, rounds in rotating order (the machine's flush latency drifts; every row of a round
shares its seconds):

- ``CheckpointLog.save``, ``"fsync"`` and ``"process"``: sequential saves of one invocation,
  each durable on return (fsync), of a ~200 B and a ~4 KiB state;
- raw py-lmdb, one put per synced transaction (``sync=True``), value of the same size;
- SQLite, WAL journal, ``synchronous=FULL``, one INSERT + COMMIT (SqliteSaver's pattern);
- LangGraph: ``LmdbSaver.put`` at fsync against ``SqliteSaver.put``, and a 500-step graph run
  with ``durability="sync"`` on each;
- 1,000 concurrent async saves (``Checkpointer``, fsync): saves/s.

The saves of the four stores take turns save by save, the two LangGraph savers put by put, so
each row sees the same moments of the device. It prints a table (the median over the rounds
of each round's mean time per save, i.e. 1 / saves/s; ratios against the peers of the same
rounds) and
writes JSON with the environment (``benchmarks/results/durable_commit.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from benchmarks import durable_report
from benchmarks.common import (
    environment,
    fmt_float,
    median,
    print_table,
    raw_lmdb_commits,
    sqlite_commits,
    write_json,
)
from eventlog import CheckpointRecord, NodePosition
from eventlog.checkpoints import Checkpointer, CheckpointLog

RESULTS = durable_report.RESULTS
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SIZES = (200, 4096)


def _rec(i: int, size: int) -> CheckpointRecord:
    return CheckpointRecord(
        "inv", "c", {"i": i, "pad": "x" * size}, (NodePosition((), "n", i),), (), 1.0 + i
    )  # fmt: skip


def _written() -> int:
    """Bytes this process has handed to ``write``/``pwrite`` so far (``/proc/self/io``
    ``wchar``): what a commit writes into the page cache, which its flushes then put on disk."""
    with open("/proc/self/io", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def alternate_saves(d: Path, n: int, size: int) -> dict[str, float]:
    """Mean seconds per save of each store (total time over saves, as saves/s measures it),
    the stores taking turns save by save (so each sees the same moments of the device: its
    flush latency drifts by 10x here, and has a long tail)."""
    ours = CheckpointLog.open(d / "log")
    ours_p = CheckpointLog.open(d / "log-process", durability="process")
    value = b"x" * size
    raw, raw_close = raw_lmdb_commits(d / "raw", value, sync=True)
    sql, sql_close = sqlite_commits(d / "sq.db", value, synchronous="FULL")

    ops: dict[str, Callable[[int], None]] = {
        f"ckptlog save fsync {size} B": lambda i: ours.save("inv", _rec(i, size)),
        f"ckptlog save process {size} B": lambda i: ours_p.save("inv", _rec(i, size)),
        f"raw lmdb one-put synced {size} B": raw,
        f"sqlite WAL FULL commit {size} B": sql,
    }
    times: dict[str, list[float]] = {k: [] for k in ops}
    wrote = dict.fromkeys(ops, 0)
    names = list(ops)
    try:
        for name in names:
            ops[name](0)  # a process's first ckptlog commit checkpoints: not timed
        for i in range(1, n + 1):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                w = _written()
                t = time.perf_counter()
                ops[name](i)
                times[name].append(time.perf_counter() - t)
                wrote[name] += _written() - w
    finally:
        ours.close()
        ours_p.close()
        raw_close()
        sql_close()
    out = {k: sum(v) / len(v) for k, v in times.items()}
    for k in (f"ckptlog save fsync {size} B", f"sqlite WAL FULL commit {size} B"):
        out[f"{k} (bytes written)"] = wrote[k] / n
    return out


def _lg_checkpoint(i: int) -> tuple[Any, Any, Any, Any]:
    from langgraph.checkpoint.base import empty_checkpoint  # noqa: PLC0415

    cp = empty_checkpoint()
    cp["channel_values"] = {"n": i, "msg": "x" * 200}
    cp["channel_versions"] = {"n": i + 1, "msg": i + 1}
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    return config, cp, {"source": "loop", "step": i, "parents": {}}, {"n": i + 1, "msg": i + 1}


def _savers(d: Path, name: str) -> Any:
    if name == "LmdbSaver":
        from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

        return LmdbSaver.open(d / "lg")
    from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: PLC0415

    return SqliteSaver(sqlite3.connect(d / "lg.db", check_same_thread=False))


def _close(saver: Any) -> None:
    if hasattr(saver, "close"):
        saver.close()
    else:
        saver.conn.close()


def alternate_lg_puts(d: Path, n: int) -> dict[str, float]:
    """Mean seconds per ``put`` of LmdbSaver (fsync) and SqliteSaver, taking turns."""
    savers = {name: _savers(d, name) for name in ("LmdbSaver", "SqliteSaver")}
    configs: dict[str, Any] = {}
    times: dict[str, list[float]] = {name: [] for name in savers}
    wrote = dict.fromkeys(savers, 0)
    try:
        for name, saver in savers.items():
            config, cp, md, versions = _lg_checkpoint(0)
            configs[name] = saver.put(config, cp, md, versions)
        for i in range(1, n + 1):
            for name, saver in list(savers.items())[:: 1 if i % 2 else -1]:
                _, cp, md, versions = _lg_checkpoint(i)
                cp["id"] = f"{i:032d}"
                w = _written()
                t = time.perf_counter()
                configs[name] = saver.put(configs[name], cp, md, versions)
                times[name].append(time.perf_counter() - t)
                wrote[name] += _written() - w
    finally:
        for saver in savers.values():
            _close(saver)
    out = {f"langgraph put {name}": sum(v) / len(v) for name, v in times.items()}
    out.update({f"langgraph put {name} (bytes written)": b / n for name, b in wrote.items()})
    return out


class _Count(TypedDict):
    n: int


def lg_loop(d: Path, steps: int, name: str) -> float:
    """Seconds for one graph run of ``steps`` supersteps with ``durability="sync"``."""
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    def bump(s: _Count) -> _Count:
        return {"n": s["n"] + 1}

    graph = StateGraph(_Count)
    graph.add_node("bump", bump)
    graph.add_edge(START, "bump")
    graph.add_conditional_edges("bump", lambda s: END if s["n"] >= steps else "bump")
    saver = _savers(d, name)
    try:
        app = graph.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "loop"}, "recursion_limit": steps + 10}
        t = time.perf_counter()
        app.invoke({"n": 0}, config, durability="sync")
        return time.perf_counter() - t
    finally:
        _close(saver)


def _arec(inv: str, k: int) -> CheckpointRecord:
    return CheckpointRecord(inv, "c", {"k": k}, (NodePosition((), "n", 0),), (), 2.0 + k)


def async_saves(d: Path, n: int) -> float:
    """Saves per second of ``n`` concurrent async saves (fsync), over 50 invocations."""

    async def go() -> float:
        cp = Checkpointer.open(d / "alog")
        try:
            await cp.save("inv-0", _arec("inv-0", -1))
            t = time.perf_counter()

            async def one(k: int) -> None:
                inv = f"inv-{k % 50}"
                await cp.save(inv, _arec(inv, k))

            await asyncio.gather(*(one(k) for k in range(n)))
            return n / (time.perf_counter() - t)
        finally:
            await cp.aclose()

    return asyncio.run(go())


def one_round(d: Path, n: int, loop_steps: int, async_n: int, rep: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for size in SIZES:
        (d / f"s{size}").mkdir()
        out.update(alternate_saves(d / f"s{size}", n, size))
    (d / "lg").mkdir()
    out.update(alternate_lg_puts(d / "lg", n))
    for name in ("LmdbSaver", "SqliteSaver")[:: 1 if rep % 2 else -1]:
        (d / f"loop-{name}").mkdir()
        out[f"langgraph {loop_steps}-step sync loop {name} (s)"] = lg_loop(
            d / f"loop-{name}", loop_steps, name
        )
    (d / "async").mkdir()
    out[f"async {async_n} concurrent saves fsync (saves/s)"] = async_saves(d / "async", async_n)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--saves", type=int, default=None)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--before",
        default=None,
        help="the JSON of a run of this benchmark on earlier code, shown beside this run's",
    )
    ap.add_argument("--doc", action="store_true", help="write the section of docs/benchmarks.md")
    args = ap.parse_args(argv)
    n = args.saves or (30 if args.quick else 300)
    repeats = args.repeats or (1 if args.quick else 5)
    loop_steps = 20 if args.quick else 500
    async_n = 100 if args.quick else 1000
    samples: dict[str, list[float]] = {}
    root = Path(tempfile.mkdtemp(prefix="durable-commit-"))
    try:
        for name in ("LmdbSaver", "SqliteSaver"):  # lazy imports and first-use costs: untimed
            (root / f"warm-{name}").mkdir()
            lg_loop(root / f"warm-{name}", 3, name)
        for rep in range(repeats):
            d = root / str(rep)
            d.mkdir()
            for k, v in one_round(d, n, loop_steps, async_n, rep).items():
                samples.setdefault(k, []).append(v)
            shutil.rmtree(d, ignore_errors=True)
        env = environment(durability="fsync", data_dir=str(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: median(v) for k, v in samples.items()}
    ratios: dict[str, float] = {}
    for size in SIZES:
        ours = med[f"ckptlog save fsync {size} B"]
        raw = med[f"raw lmdb one-put synced {size} B"]
        sql = med[f"sqlite WAL FULL commit {size} B"]
        ratios[f"save fsync / raw lmdb {size} B"] = ours / raw
        ratios[f"save fsync / sqlite FULL {size} B"] = ours / sql
    ratios["langgraph put: SqliteSaver / LmdbSaver"] = (
        med["langgraph put SqliteSaver"] / med["langgraph put LmdbSaver"]
    )
    ratios[f"langgraph {loop_steps}-step loop: LmdbSaver / SqliteSaver"] = (
        med[f"langgraph {loop_steps}-step sync loop LmdbSaver (s)"]
        / med[f"langgraph {loop_steps}-step sync loop SqliteSaver (s)"]
    )
    print_table(
        ["row", "median", "unit"],
        [
            [k, fmt_float(v if k.endswith(")") else v * 1e6, 3 if k.endswith("(s)") else 1),
             "s" if k.endswith("(s)") else "saves/s" if k.endswith("(saves/s)")
             else "bytes/op" if k.endswith("(bytes written)") else "us/save"]
            for k, v in med.items()
        ],
        title=f"durable commits, median of {repeats} interleaved rounds, {n} saves a row",
    )  # fmt: skip
    print_table(
        ["ratio", "value"],
        [[k, fmt_float(v, 2)] for k, v in ratios.items()],
        title="\nratios (same rounds)",
    )
    payload: dict[str, Any] = {
        "benchmark": "durable_commit",
        "quick": bool(args.quick),
        "saves_per_row": n,
        "repeats": repeats,
        "medians": med,
        "samples": samples,
        "ratios": ratios,
        "environment": env,
    }
    if args.before:
        before = json.loads(Path(args.before).read_text(encoding="utf-8"))
        payload["before"] = {k: before[k] for k in ("medians", "ratios", "environment")}
    write_json(args.out, payload)
    if args.doc:
        durable_report.replace_section(DOC, durable_report.section(payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
