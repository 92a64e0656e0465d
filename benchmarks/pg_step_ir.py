"""The client instructions of one LangGraph step on PostgreSQL, counted (issue #24).

``python -m benchmarks.pg_step_ir [--n N] [--k K] [--doc-bytes B] [--rows NAME ...]
[--areas [A ...]] [--jobs J] [--out PATH]``

A step is what :func:`benchmarks.pg_compare.bench_linear` times: a recorded graph step's
``put_writes`` then its ``put``, replayed on ckptlog's saver on PostgreSQL (``ours``:
``LmdbSaver.open(url)``, ``fsync``) or LangGraph's ``PostgresSaver`` (``theirs``, its connection
with ``synchronous_commit = on``), each in a fresh schema of its own (named after the process,
dropped at the end). Each row runs twice under valgrind's callgrind, in a child process: the
set-up and ``N`` steps, then the set-up and ``N + K``; the difference over ``K`` is the client's
instructions per step (every thread of the client; the server's work is not counted). The calls
are recorded once, in this process, and handed to the children pickled (each call's config
reduced to its ``configurable`` without the ``__`` keys: all that a replay passes on that the
savers read), so recording costs neither row anything.

It also counts, without valgrind, the statements (``Execute`` and simple ``Query`` messages) and
the round trips (``Sync`` and simple ``Query`` messages) every connection of the store sends per
step, from libpq's trace of each connection.

``--areas``: where ours spends them (the areas named, or all). One child per area runs the
``K`` steps after ``N`` with callgrind collecting only inside ``functools.reduce``, through
which the area's functions are called (outermost calls only): the whole step, the backend's
``run_write`` (all of a write transaction, the saver's work inside it included), and within it
the backend's transaction operations (``put``, ``get``, ``append_indexed`` ...), the scope's
entry and its exit (the commit: ``_at_once``; of it the batch's statement and parameters, the
pipeline, ``committed``).

The callgrind runs go ``J`` at a time (default 2). Needs ``valgrind`` on the PATH and the
server ``CKPTLOG_PG_URL`` (default: the loopback server, database ``test``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import pickle
import re
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.common import callgrind_instructions
from benchmarks.pg_compare import URL, ckpt_url, open_postgres_saver, replay

RESULTS = Path(__file__).parent / "results" / "pg_step_ir.json"
ROWS = ("ours", "theirs")
# area -> (module, class, functions) whose outermost calls are counted
_TXN_OPS = (
    "put",
    "put_many",
    "get",
    "get_many",
    "append",
    "append_many",
    "append_indexed",
    "scan",
    "prefetch",
    "last_item",
    "last_key",
    "discard",
    "delete",
    "delete_prefix",
    "count",
    "prefix_rows",
)
AREAS: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {
    "step": [],
    "run_write": [("backends.postgres", "PostgresBackend", ("run_write",))],
    "txn_ops": [("backends.postgres", "_PgWrite", _TXN_OPS)],
    "enter": [
        ("backends.postgres", "PostgresBackend", ("write",)),
        ("backends.postgres", "_WriteScope", ("__enter__",)),
    ],
    "exit": [("backends.postgres", "_WriteScope", ("__exit__",))],
    "batch_statement": [
        ("backends.postgres", "_PgWrite", ("take_batch",)),
        ("backends.postgres", "PostgresBackend", ("_batch_text",)),
        ("backends.postgres_batch", "Batch", ("params",)),
    ],
    "pipeline": [("backends.postgres_fast", "RawPipeline", ("run",))],
    "committed": [("backends.postgres", "_PgWrite", ("committed",))],
}


def _schema(name: str, *, create: bool) -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        ident = sql.Identifier(name)
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(ident))
        if create:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))


@contextmanager
def _store(row: str, schema: str) -> Iterator[Any]:
    _schema(schema, create=True)
    try:
        if row == "ours":
            from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

            saver = LmdbSaver.open(ckpt_url(URL, schema), durability="fsync")
            try:
                yield saver
            finally:
                saver.close()
        else:
            theirs, conn = open_postgres_saver(URL, schema, "on")
            try:
                yield theirs
            finally:
                conn.close()
    finally:
        _schema(schema, create=False)


def _steps(calls: list[Any], n: int) -> list[Any]:
    """The calls up to the ``n``-th step's ``put`` (the first ``put``, the input's, is step 0)."""
    puts = 0
    for i, (kind, _) in enumerate(calls):
        if kind == "put":
            if puts == n:
                return calls[: i + 1]
            puts += 1
    raise SystemExit(f"only {puts} steps recorded, {n} asked for")


def _picklable(calls: list[Any]) -> list[Any]:
    out = []
    for kind, (config, *rest) in calls:
        conf = {k: v for k, v in config["configurable"].items() if not k.startswith("__")}
        out.append((kind, ({"configurable": conf}, *rest)))
    return out


def _through_reduce(area: str) -> Callable[[Callable[[], None]], None]:
    """Route the area's functions (their outermost calls) through ``functools.reduce``, the
    function callgrind collects in; returns how to run the whole step so (area ``step``)."""
    import importlib  # noqa: PLC0415

    depth = [0]

    def counted(fn: Callable[[], Any]) -> Any:
        return functools.reduce(lambda _, __: fn(), [0], None)

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return real(*args, **kwargs)
            depth[0] += 1
            try:
                return counted(lambda: real(*args, **kwargs))
            finally:
                depth[0] -= 1

        return wrapper

    for module, cls_name, names in AREAS[area]:
        cls = getattr(importlib.import_module(module), cls_name)
        for name in names:
            if hasattr(cls, name):
                setattr(cls, name, wrap(getattr(cls, name)))
    if area == "step":
        return counted
    return lambda fn: fn()


def child(row: str, n: int, k: int, calls_file: str, area: str | None) -> None:
    calls = pickle.loads(Path(calls_file).read_bytes())
    with _store(row, f"ir_{row}_{os.getpid()}") as saver:
        replay(saver, calls[:4], "warm")  # connections, prepared statements, catalog caches
        first = _steps(calls, n)
        replay(saver, first, "t")
        if area is not None:
            rest = _steps(calls, n + k)[len(first) :]
            _through_reduce(area)(lambda: replay(saver, rest, "t"))


def _callgrind(args: list[str], extra: list[str]) -> int:
    return callgrind_instructions("benchmarks.pg_step_ir", ["--child", *args], extra)


def instructions(row: str, n: int, k: int, calls_file: str, pool: Executor) -> float:
    base = pool.submit(_callgrind, [row, str(n), "0", calls_file, "-"], [])
    more = pool.submit(_callgrind, [row, str(n + k), "0", calls_file, "-"], [])
    return (more.result() - base.result()) / k


def area_instructions(area: str, n: int, k: int, calls_file: str) -> float:
    toggle = ["--toggle-collect=functools_reduce"]
    return _callgrind(["ours", str(n), str(k), calls_file, area], toggle) / k


_TRACED = re.compile(rb"^(?:\S+\t)?F\t\d+\t(Execute|Query|Sync)\b", re.M)


def messages(row: str, calls: list[Any], n: int, k: int) -> dict[str, float]:
    """Statements and round trips per step, from libpq's trace of every connection opened."""
    real = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]
    with contextlib.ExitStack() as stack:
        traces: list[Any] = []

        def connect(cls: Any, *args: Any, **kwargs: Any) -> Any:
            conn = real(cls, *args, **kwargs)
            f = stack.enter_context(tempfile.TemporaryFile())
            traces.append(f)
            conn.pgconn.trace(f.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            return conn

        def counted() -> dict[str, int]:
            out = {"Execute": 0, "Query": 0, "Sync": 0}
            for f in traces:
                f.seek(0)
                for m in _TRACED.finditer(f.read()):
                    out[m.group(1).decode()] += 1
            return out

        psycopg.Connection.connect = classmethod(connect)  # type: ignore[method-assign, assignment]
        psycopg.connect = psycopg.Connection.connect
        try:
            with _store(row, f"msg_{row}_{os.getpid()}") as saver:
                replay(saver, calls[:4], "warm")
                first = _steps(calls, n)
                replay(saver, first, "t")
                before = counted()
                replay(saver, _steps(calls, n + k)[len(first) :], "t")
                after = counted()
        finally:
            psycopg.Connection.connect = classmethod(real)  # type: ignore[method-assign, assignment]
            psycopg.connect = psycopg.Connection.connect
    d = {key: (after[key] - before[key]) / k for key in after}
    return {"statements": d["Execute"] + d["Query"], "round_trips": d["Sync"] + d["Query"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--k", type=int, default=400)
    parser.add_argument("--doc-bytes", type=int, default=0)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument(
        "--areas", nargs="*", choices=list(AREAS), help="also ours by area (none named: all)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="callgrind runs at once")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.child:
        row, n, k, calls_file, area = args.child
        child(row, int(n), int(k), calls_file, None if area == "-" else area)
        return 0
    from benchmarks.pg_compare import record_calls  # noqa: PLC0415

    calls = _picklable(record_calls(args.n + args.k + 1, args.doc_bytes))
    out: dict[str, Any] = {}
    print(f"| store (N = {args.n}, K = {args.k}) | instructions per step | statements | trips |")
    print("|---|---:|---:|---:|")
    with (
        tempfile.NamedTemporaryFile(suffix=".pickle") as f,
        ThreadPoolExecutor(args.jobs) as pool,
    ):
        f.write(pickle.dumps(calls))
        f.flush()
        areas_run = {
            area: pool.submit(area_instructions, area, args.n, args.k, f.name)
            for area in (args.areas or AREAS if args.areas is not None else ())
        }
        for row in args.rows:
            per = instructions(row, args.n, args.k, f.name, pool)
            sent = messages(row, calls, args.n, args.k)
            out[row] = {"instructions": per, **sent}
            trips = sent["round_trips"]
            print(f"| {row} | {per:,.0f} | {sent['statements']:.2f} | {trips:.2f} |", flush=True)
        if areas_run:
            print("\n| ours, area | instructions per step |\n|---|---:|")
            areas = out["areas"] = {}
            for area, counted in areas_run.items():
                areas[area] = counted.result()
                print(f"| {area} | {areas[area]:,.0f} |", flush=True)
    if "ours" in out and "theirs" in out:
        ratio = out["ours"]["instructions"] / out["theirs"]["instructions"]
        print(f"ours / theirs instructions: {ratio:.2f}")
    doc = {"n": args.n, "k": args.k, "doc_bytes": args.doc_bytes, "rows": out}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
