"""The reads a resuming job makes on PostgreSQL, each kind of stream, against one-statement floors.

``python -m benchmarks.pg_reads [--quick] [--rounds N] [--out PATH]`` builds, on the server
``CKPTLOG_PG_URL`` (schemas of its own, dropped at the end), one stream of each kind with a few
saves (a ~200 B state), then times, in rounds that take turns op by op:

- ``CheckpointLog.load`` (what openarmature's resume calls), apflow's ``load_checkpoint``,
  techrevati's ``get`` (latest) and ``get_step``, the LangGraph saver's ``get_tuple`` (latest and
  by id);
- the peers a user would compare with: LangGraph's ``PostgresSaver.get_tuple`` (latest) on its
  own schema, and the floor of any read, one ``SELECT`` of a row by primary key in a hand-rolled
  table over psycopg.

For each it counts the statements ckptlog sends (each one round trip; ``BEGIN`` counted for
every read transaction, whose ``COMMIT`` is one more) and prints the median latency and its
ratio to the one-statement floor. JSON: ``benchmarks/results/pg_reads.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import environment, print_table, write_json
from benchmarks.pg_compare import URL, Schemas, ckpt_url, open_postgres_saver, peer_connect

RESULTS = Path(__file__).parent / "results" / "pg_reads.json"
SAVES = 20
STATE = {"doc": "x" * 200}


@contextlib.contextmanager
def sent_statements() -> Iterator[list[str]]:
    """The statements ckptlog's PostgreSQL readers send inside the block, in order
    (``"BEGIN"`` for each read transaction begun; its ``COMMIT`` is not listed)."""
    from backends import postgres  # noqa: PLC0415

    sent: list[str] = []
    real_q, real_enter = postgres._PgRead._q, postgres._ReadScope.__enter__

    def q(self: Any, query: str, params: Any = ()) -> Any:
        sent.append(query)
        return real_q(self, query, params)

    def enter(self: Any) -> Any:
        sent.append("BEGIN")
        return real_enter(self)

    postgres._PgRead._q = q  # type: ignore[method-assign]
    postgres._ReadScope.__enter__ = enter  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        postgres._PgRead._q = real_q  # type: ignore[method-assign]
        postgres._ReadScope.__enter__ = real_enter  # type: ignore[method-assign]


def build(url: str, schemas: Schemas) -> tuple[dict[str, Callable[[], Any]], Callable[[], None]]:
    """One stream of each kind, and the read to time of each."""
    from langgraph.checkpoint.base import empty_checkpoint  # noqa: PLC0415

    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from eventlog.integrations.apflow import LogCheckpointManager  # noqa: PLC0415
    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415
    from eventlog.integrations.techrevati import LogSaver  # noqa: PLC0415
    from eventlog.testing import make_record, pos  # noqa: PLC0415

    closers: list[Callable[[], None]] = []
    log = CheckpointLog.open(ckpt_url(url, schemas.new("reads_cp")))
    closers.append(log.close)
    for i in range(SAVES):
        positions = [pos(f"n{j}", j) for j in range(i + 1)]
        log.save("job", make_record("job", state={**STATE, "i": i}, positions=positions))
    manager = LogCheckpointManager.open(ckpt_url(url, schemas.new("reads_ap")))
    closers.append(manager.close)
    for i in range(SAVES):
        asyncio.run(manager.save_checkpoint("task", {**STATE, "i": i}))
    tr = LogSaver.open(ckpt_url(url, schemas.new("reads_tr")))
    closers.append(tr.close)
    for i in range(SAVES):
        tr.put("thread", {**STATE, "i": i})
        tr.put_step("thread", f"step-{i}", {"i": i})

    def lg_thread(saver: Any) -> list[Any]:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        ids = []
        for i in range(SAVES):
            cp = empty_checkpoint()
            cp["channel_values"] = {**STATE, "i": i}
            cp["channel_versions"] = {"doc": i + 1, "i": i + 1}
            config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {})
            ids.append(config)
        return ids

    lg = LmdbSaver.open(ckpt_url(url, schemas.new("reads_lg")))
    closers.append(lg.close)
    lg_ids = lg_thread(lg)
    pg_schema = schemas.new("reads_pgsaver")
    pg_saver, pg_conn = open_postgres_saver(url, pg_schema, "on")
    closers.append(pg_conn.close)
    lg_thread(pg_saver)
    floor_schema = schemas.new("reads_floor")
    conn = peer_connect(url, floor_schema, "on", autocommit=True)
    closers.append(conn.close)
    conn.execute("CREATE TABLE heads (k text PRIMARY KEY, v bytea NOT NULL)")
    conn.execute("INSERT INTO heads VALUES ('job', %s)", (b"x" * 300,))
    latest: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    middle = lg_ids[SAVES // 2]
    loop = asyncio.new_event_loop()
    closers.append(loop.close)
    ops: dict[str, Callable[[], Any]] = {
        "CheckpointLog.load": lambda: log.load("job"),
        "apflow load_checkpoint": lambda: loop.run_until_complete(manager.load_checkpoint("task")),
        "techrevati get": lambda: tr.get("thread"),
        "techrevati get_step": lambda: tr.get_step("thread", "step-3"),
        "LangGraph get_tuple latest": lambda: lg.get_tuple(latest),
        "LangGraph get_tuple by id": lambda: lg.get_tuple(middle),
        "PostgresSaver get_tuple latest": lambda: pg_saver.get_tuple(latest),
        "floor: one SELECT by key": lambda: conn.execute(
            "SELECT v FROM heads WHERE k = %s", ("job",)
        ).fetchall(),
    }

    def close() -> None:
        for c in reversed(closers):
            c()

    return ops, close


def measure(ops: dict[str, Callable[[], Any]], rounds: int, calls: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in ops}
    names = list(ops)
    for name in names:  # warm: connections opened, statements prepared
        for _ in range(5):
            ops[name]()
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for _ in range(calls):
            for name in order:
                t0 = time.perf_counter()
                ops[name]()
                times[name].append(time.perf_counter() - t0)
    return times


def statements(ops: dict[str, Callable[[], Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with sent_statements() as sent:
        for name, op in ops.items():
            if name.startswith(("PostgresSaver", "floor")):
                continue
            sent.clear()
            op()
            begins = sent.count("BEGIN")
            out[name] = {"statements": len(sent) - begins, "transactions": begins}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--url", default=URL)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 7)
    calls = 20 if args.quick else 200
    schemas = Schemas(args.url)
    try:
        ops, close = build(args.url, schemas)
        try:
            counts = statements(ops)
            times = measure(ops, rounds, calls)
        finally:
            close()
    finally:
        schemas.drop_all()
    floor = statistics.median(times["floor: one SELECT by key"])
    rows = []
    out: dict[str, Any] = {}
    for name, xs in times.items():
        p50 = statistics.median(xs)
        c = counts.get(name)
        # round trips: each statement, plus BEGIN and COMMIT of each read transaction
        trips = None if c is None else c["statements"] + 2 * c["transactions"]
        out[name] = {
            "p50_us": p50 * 1e6,
            "over_floor": p50 / floor,
            "round_trips": trips,
            **(c or {}),
        }
        rows.append(
            [name, f"{p50 * 1e6:,.0f}", f"{p50 / floor:.2f}x", "-" if trips is None else str(trips)]
        )
    print_table(
        ["read", "p50 µs", "÷ one SELECT", "ckptlog round trips"], rows, title="PostgreSQL reads"
    )
    env = environment(durability="fsync", data_dir=args.url)
    payload = {"benchmark": "pg_reads", "quick": args.quick, "rounds": rounds, "calls": calls}
    write_json(args.out, {**payload, "environment": env, "reads": out})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
