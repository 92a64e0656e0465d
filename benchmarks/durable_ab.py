"""Two trees' durable saves in lockstep, with raw LMDB and SQLite beside them (issue 28).

``python -m benchmarks.durable_ab OTHER_TREE [--saves N]`` (run from this tree): a child
process per tree (its working directory the tree, so it imports that tree's code) saves with
``CheckpointLog.save`` at ``"fsync"``; the parent makes raw py-lmdb one-put synced commits and
SQLite WAL FULL commits. The four take turns save by save in rotating order, so each sees the
same moments of the device (its flush latency drifts by 10x within minutes on a shared
machine, which makes runs one after the other incomparable). Prints the mean time per save of
each, for a ~200 B and a ~4 KiB state, the ratios of the same rounds, and the load average;
then LangGraph ``LmdbSaver.put`` at fsync in each tree against ``SqliteSaver.put`` in the
parent, put by put the same way.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lmdb

SIZES = (200, 4096, 0)  # 0: the LangGraph put row (LG)


LG = 0  # the "size" of the LangGraph row: LmdbSaver.put (fsync) in the children


def lg_child() -> None:
    """LangGraph ``LmdbSaver.put`` at fsync, put by put, with this tree's code."""
    sys.path.insert(0, os.getcwd())
    from benchmarks.durable_commit import _lg_checkpoint  # noqa: PLC0415 - the tree in cwd
    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as d:
        saver = LmdbSaver.open(Path(d) / "lg")
        try:
            config, cp, md, versions = _lg_checkpoint(0)
            config = saver.put(config, cp, md, versions)  # the first commit checkpoints
            for line in sys.stdin:
                i = int(line)
                if i < 0:
                    break
                _, cp, md, versions = _lg_checkpoint(i)
                cp["id"] = f"{i:032d}"
                t = time.perf_counter()
                config = saver.put(config, cp, md, versions)
                sys.stdout.write(f"{time.perf_counter() - t}\n")
                sys.stdout.flush()
        finally:
            saver.close()


def child(size: int) -> None:
    if size == LG:
        lg_child()
        return
    sys.path.insert(0, os.getcwd())  # the tree the parent started this process in
    from benchmarks.durable_commit import _rec  # noqa: PLC0415 - the tree in cwd
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as d:
        log = CheckpointLog.open(Path(d) / "log")
        try:
            log.save("inv", _rec(0, size))  # a process's first commit checkpoints: not timed
            for line in sys.stdin:
                i = int(line)
                if i < 0:
                    break
                t = time.perf_counter()
                log.save("inv", _rec(i, size))
                sys.stdout.write(f"{time.perf_counter() - t}\n")
                sys.stdout.flush()
        finally:
            log.close()


def _turn(p: subprocess.Popen[str]) -> Callable[[int], float]:
    def save(i: int) -> float:
        assert p.stdin is not None
        assert p.stdout is not None
        p.stdin.write(f"{i}\n")
        p.stdin.flush()
        return float(p.stdout.readline())

    return save


def run(trees: dict[str, str], size: int, n: int) -> dict[str, float]:
    """Mean microseconds per save of each tree and of the two peers."""
    kids = {
        name: subprocess.Popen(
            [sys.executable, __file__, "--child", str(size)],  # this file, that tree's code
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, tree in trees.items()
    }
    value = b"x" * size
    with tempfile.TemporaryDirectory() as d:
        env = lmdb.open(d + "/raw", sync=True, map_size=1 << 30)
        db = sqlite3.connect(d + "/sq.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")

        def raw(i: int) -> float:
            t = time.perf_counter()
            with env.begin(write=True) as txn:
                txn.put(b"k%08d" % i, value)
            return time.perf_counter() - t

        def sql(i: int) -> float:
            t = time.perf_counter()
            db.execute("BEGIN")
            db.execute("INSERT INTO t VALUES (?, ?)", (i, value))
            db.execute("COMMIT")
            return time.perf_counter() - t

        peers: dict[str, Callable[[int], float]] = {"raw lmdb": raw, "sqlite": sql}
        if size == LG:
            peers = {"SqliteSaver": _sqlite_saver_puts(d)}
        ops = {**{k: _turn(p) for k, p in kids.items()}, **peers}
        names = list(ops)
        total = dict.fromkeys(names, 0.0)
        try:
            for i in range(1, n + 1):
                k = i % len(names)
                for name in names[k:] + names[:k]:
                    total[name] += ops[name](i)
        finally:
            for p in kids.values():
                assert p.stdin is not None
                p.stdin.write("-1\n")
                p.stdin.close()
                p.wait()
            env.close()
            db.close()
    return {k: v / n * 1e6 for k, v in total.items()}


def _sqlite_saver_puts(d: str) -> Callable[[int], float]:
    """SqliteSaver.put, timed (the parent's code: SqliteSaver is the same for both trees)."""
    from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: PLC0415

    from benchmarks.durable_commit import _lg_checkpoint  # noqa: PLC0415

    saver = SqliteSaver(sqlite3.connect(d + "/lg.db", check_same_thread=False))
    config, cp, md, versions = _lg_checkpoint(0)
    state = {"config": saver.put(config, cp, md, versions)}

    def put(i: int) -> float:
        _, cp, md, versions = _lg_checkpoint(i)
        cp["id"] = f"{i:032d}"
        t = time.perf_counter()
        state["config"] = saver.put(state["config"], cp, md, versions)
        return time.perf_counter() - t

    return put


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", nargs="?", help="the other tree (a checkout of earlier code)")
    ap.add_argument("--saves", type=int, default=600)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        child(args.child)
        return 0
    if not args.other:
        ap.error("name the other tree")
    trees = {"other": os.path.abspath(args.other), "this": os.getcwd()}
    for size in SIZES:
        r = run(trees, size, args.saves)
        if size == LG:
            print("langgraph put: " + ", ".join(f"{k} {v:,.0f} us" for k, v in r.items()))
            print(
                f"  SqliteSaver / other {r['SqliteSaver'] / r['other']:.2f}, SqliteSaver / "
                f"this {r['SqliteSaver'] / r['this']:.2f}, this / other "
                f"{r['this'] / r['other']:.3f}",
                flush=True,
            )
            continue
        print(f"{size} B: " + ", ".join(f"{k} {v:,.0f} us" for k, v in r.items()))
        print(
            f"  other / raw {r['other'] / r['raw lmdb']:.2f}, this / raw "
            f"{r['this'] / r['raw lmdb']:.2f}, other / sqlite {r['other'] / r['sqlite']:.2f}, "
            f"this / sqlite {r['this'] / r['sqlite']:.2f}, this / other "
            f"{r['this'] / r['other']:.3f}",
            flush=True,
        )
    print("load average", ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
