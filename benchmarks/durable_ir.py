"""The instructions of one durable save, counted (issue 28).

``python -m benchmarks.durable_ir [--n N] [--k K] [--rows NAME ...] [--out PATH]``

Each row runs twice under valgrind's callgrind, in a child process: the set-up and ``N``
operations, then the set-up and ``N + K``; the difference over ``K`` is the instructions per
operation (every thread; system calls, and so the flushes themselves, are not counted). Rows:
``CheckpointLog.save`` at ``"fsync"`` of a ~200 B and a ~4 KiB state (the states of
:mod:`benchmarks.durable_commit`; ``save200p``: the 200 B save at ``"process"``, what the
durable path adds is the difference), ``LmdbSaver.put`` at fsync, and for scale raw py-lmdb
(one put per synced transaction) and SQLite WAL FULL (one INSERT + COMMIT). ``lgwrites``: a
graph step's ``put_writes`` (two writes of one task, against the current checkpoint) then its
``put``, as a ``durability="sync"`` loop makes them (``put_writes`` alone: it less ``lgput``).
``K`` is a multiple of the segment's checkpoint cadence so that checkpoints are amortized in.
It also prints the bytes handed to ``write``/``pwrite`` per operation (``/proc/self/io`` ``wchar``),
measured without valgrind. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import callgrind_instructions, raw_lmdb_commits, sqlite_commits
from benchmarks.durable_commit import _lg_checkpoint, _rec, _written

RESULTS = Path(__file__).parent / "results" / "durable_ir.json"


def _ops(d: Path, name: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    if name.startswith("save"):
        from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415

        size = int(name.removeprefix("save").removesuffix("p"))
        log = CheckpointLog.open(d / "log", durability="process" if name.endswith("p") else "fsync")
        return (lambda i: log.save("inv", _rec(i, size))), log.close
    if name == "lgput":
        from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

        saver = LmdbSaver.open(d / "lg")
        state: dict[str, Any] = {}

        def put(i: int) -> None:
            config, cp, md, versions = _lg_checkpoint(i)
            cp["id"] = f"{i:032d}"
            state["c"] = saver.put(state.get("c", config), cp, md, versions)

        return put, saver.close
    if name == "lgwrites":
        from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

        wsaver = LmdbSaver.open(d / "lg")
        wstate: dict[str, Any] = {}

        def step(i: int) -> None:  # a task's writes against the current checkpoint, then put
            config, cp, md, versions = _lg_checkpoint(i)
            current = wstate.get("c")
            if current is not None:
                writes = [("n", i), ("branch:to:bump", None)]
                wsaver.put_writes(current, writes, f"task-{i}", "~__pregel_pull, bump")
            cp["id"] = f"{i:032d}"
            wstate["c"] = wsaver.put(current or config, cp, md, versions)

        return step, wsaver.close
    value = b"x" * 200
    if name == "rawlmdb":
        return raw_lmdb_commits(d / "raw", value, sync=True, map_size=1 << 28)
    assert name == "sqlite"
    return sqlite_commits(d / "sq.db", value, synchronous="FULL")


ROWS = ("save200", "save4096", "lgput", "rawlmdb", "sqlite", "save200p", "lgwrites")


def child(name: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        op, close = _ops(Path(tmp), name)
        try:
            for i in range(n):
                op(i)
        finally:
            close()


def instructions(name: str, n: int) -> int:
    return callgrind_instructions("benchmarks.durable_ir", ["--child", name, str(n)])


def bytes_written(name: str, n: int, k: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        op, close = _ops(Path(tmp), name)
        try:
            for i in range(n):
                op(i)
            w = _written()
            for i in range(n, n + k):
                op(i)
            return (_written() - w) / k
        finally:
            close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("ROW", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    out: dict[str, dict[str, float]] = {}
    print(f"| row (N = {args.n}, K = {args.k}) | instructions per op | bytes written per op |")
    print("|---|---:|---:|")
    for name in args.rows:
        per = (instructions(name, args.n + args.k) - instructions(name, args.n)) / args.k
        wrote = bytes_written(name, args.n, args.k)
        out[name] = {"instructions": per, "bytes_written": wrote}
        print(f"| {name} | {per:,.0f} | {wrote:,.0f} |", flush=True)
    args.out.write_text(json.dumps({"n": args.n, "k": args.k, "rows": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
