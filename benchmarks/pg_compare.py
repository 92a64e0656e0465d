"""ckptlog's PostgreSQL backend against what users would run instead, on one server, in one run.

``python -m benchmarks.pg_compare [--quick] [--out JSON] [--doc [PATH]] [--only SECTIONS]``

Every store gets a fresh schema of its own on the server ``CKPTLOG_PG_URL`` (default: the
loopback server of the development machines, database ``test``), named ``CKPTLOG_BENCH_PG_PREFIX``
(default ``bench_``) plus a random suffix; all of them are dropped at the end, also when the run
fails. Durability is compared like for like: ckptlog's ``fsync`` is ``synchronous_commit = on``,
its ``process`` is ``synchronous_commit = off``, and the peers' connections are given the same
setting. Each measurement alternates the compared stores in rounds (the order rotating from round
to round), so they share the machine's moments; it reports the median rate over the rounds and
the median of the per-round ratios ours / theirs.

1. ``linear``: LangGraph saves. A real ``StateGraph`` (one node; each step replaces a ~200-byte
   ``result`` dict and bumps a counter) runs once on LangGraph's ``InMemorySaver``; its ``put`` and
   ``put_writes`` calls are recorded, then replayed, in order, on a new thread per round into
   ckptlog's LangGraph saver on PostgreSQL (``LmdbSaver.open(url)``, the backend-neutral saver)
   and into LangGraph's ``PostgresSaver`` (langgraph-checkpoint-postgres, ``.setup()`` in its own
   schema, a connection as ``PostgresSaver.from_conn_string`` makes one). Rate: checkpoints per
   second, each with the ``put_writes`` before it (what one graph step costs the saver).
   Targets: ours >= 1x ``PostgresSaver`` with the ~200-byte and 4 KiB states (round-trip
   parity), >= 3x with 64 KiB.
2. ``growth``: storage of a 1,000-step thread whose every step appends a message
   (:func:`benchmarks.langgraph_growth.chat_graph`, run for real with ``graph.invoke``; the
   reloaded state is checked). Bytes: ``pg_total_relation_size`` of every table of the store's
   schema (ours: ``backend.size_bytes()``), after the run minus after set-up. Target: ours <= 1/10.
3. ``instances``: a batch job's fan-out of N instances saving each instance's result
   (:func:`benchmarks.instances.result_of`), committed every 256. Ours: ``save_instance`` under
   ``FanOutInternalSaveBatching(flush_every=256)`` and a final ``flush`` (the N-instance record
   saved first, untimed). Hand-rolled: a psycopg table ``(job text, item int, result bytea,
   PRIMARY KEY (job, item))``, results encoded with ``msgspec.json``, 256 rows per transaction,
   written two ways: ``executemany`` of an upsert (psycopg runs it in pipeline mode) and binary
   ``COPY``. Target: ours >= 1x the faster of the two.
4. ``workers``: the N-instance job (100,000) saved by 1, 4 and 8 worker processes on one log
   (:func:`benchmarks.pg_scale.run`, batches of 256, ``fsync``): instances per second and the
   share of the workers' time spent waiting for the writers' lock. Targets: 8 workers >= 0.8x
   the lock-free hand-rolled table with 8, and ours with 8 >= ours with 1.

``--quick`` runs every section at smoke sizes (under ~30 s); ``--doc`` rewrites the
"PostgreSQL" section of ``docs/benchmarks.md`` from this run's JSON (``python -m benchmarks
report`` keeps it, reading ``benchmarks/results/pg_compare.json``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import random
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import msgspec
import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver, copy_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from psycopg import sql
from psycopg.rows import dict_row

from benchmarks import pg_scale
from benchmarks.common import (
    environment,
    loadavg,
    median,
    print_table,
    versions,
    write_json,
)
from benchmarks.instances import BATCH, result_of
from benchmarks.langgraph_growth import SEED, chat_graph
from benchmarks.pg_report import (
    DOC,
    RESULTS,
    markdown,
    replace_section,
    shown,
    tables,
    verdicts,
)
from eventlog.checkpoints import CheckpointLog
from eventlog.integrations.langgraph import LmdbSaver
from eventlog.records import FanOutInternalSaveBatching
from eventlog.testing import NOT_STARTED, NS, done, fan_out, make_record

URL = os.environ.get("CKPTLOG_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PREFIX = os.environ.get("CKPTLOG_BENCH_PG_PREFIX", "bench_")
SECTIONS = ("linear", "growth", "instances", "workers")
DURABILITIES = (("fsync", "on"), ("process", "off"))
TARGETS = {"linear": 3.0, "growth": 0.1, "instances": 1.0}
# LangGraph step vs PostgresSaver by the state's unchanged document (issue #24): round-trip
# parity with small states, 3x where storing deltas decides
LINEAR_TARGETS = {0: 1.0, 4096: 1.0, 65536: 3.0}

# (full, quick) sizes
LINEAR_STEPS = (500, 30)
LINEAR_ROUNDS = (7, 2)
# the unchanged part of the state, beside the ~200-byte result each step writes (the linear
# scenario of the LMDB harness: 200 B, 4 KiB, 64 KiB states)
LINEAR_DOC_BYTES = ((0, 4096, 65536), (0, 4096))
GROWTH_STEPS = (1_000, 50)
INSTANCES_N = (50_000, 1_000)
INSTANCES_ROUNDS = (5, 2)
WORKERS_N = (100_000, 2_000)
WORKERS_ROUNDS = (3, 1)
WORKER_COUNTS = (1, 4, 8)
OWN_WORKERS = 8  # also run with a fan-out per worker (no shared stream)
RESULT_WORDS = 24


class Warnings(logging.Handler):
    """Keeps the warnings logged during the run (e.g. the backend retrying a write after the
    server dropped its connection), so the JSON and the page say the run was disturbed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = f"{record.name}: {record.getMessage()}"
        print(message, file=sys.stderr)
        self.messages.append(message[:300])


# -- schemas -----------------------------------------------------------------------------------


class Schemas:
    """Fresh schemas, each store its own; :meth:`drop_all` drops them (also at exit)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.created: list[str] = []  # not dropped yet
        self.ever: list[str] = []  # every schema this run created
        atexit.register(self.drop_all)

    def new(self, what: str) -> str:
        name = f"{PREFIX}{what}_{secrets.token_hex(4)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        self.created.append(name)
        self.ever.append(name)
        return name

    def vacuum(self, name: str) -> None:
        """``VACUUM (ANALYZE)`` every table of schema ``name``, then a ``CHECKPOINT``: what
        autovacuum and the checkpointer do between a burst of writes and the reads that follow
        (autovacuum runs at most once a minute a database by default, a checkpoint every 5
        minutes, while a benchmark builds a 10,000-step thread in seconds)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (name,)
            ).fetchall()
            for (table,) in tables:
                conn.execute(
                    sql.SQL("VACUUM (ANALYZE) {}.{}").format(
                        sql.Identifier(name), sql.Identifier(table)
                    )
                )
            # and the build's dirty pages written out now, not by a checkpoint that lands in
            # the reads measured next (either store's build: it slowed both savers' reads)
            conn.execute("CHECKPOINT")

    def drop(self, name: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        if name in self.created:
            self.created.remove(name)

    def drop_all(self) -> None:
        for name in list(self.created):
            with contextlib.suppress(psycopg.Error):
                self.drop(name)


def ckpt_url(url: str, schema: str) -> str:
    return f"{url}?schema={schema}"


def peer_connect(url: str, schema: str, sync: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A connection whose tables live in ``schema``, with ``synchronous_commit = sync``."""
    return psycopg.connect(
        url, options=f"-c search_path={schema} -c synchronous_commit={sync}", **kwargs
    )


def schema_bytes(url: str, schema: str) -> int:
    """``pg_total_relation_size`` of every table in ``schema`` (indexes and TOAST included)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def open_postgres_saver(url: str, schema: str, sync: str) -> tuple[PostgresSaver, Any]:
    """``PostgresSaver`` on a connection as ``from_conn_string`` opens one, set up."""
    conn = peer_connect(
        url, schema, sync, autocommit=True, prepare_threshold=0, row_factory=dict_row
    )
    saver = PostgresSaver(conn)
    saver.setup()
    return saver, conn


def rotated(items: list[Any], k: int) -> list[Any]:
    k %= len(items)
    return items[k:] + items[:k]


def ratio_stats(ours: list[float], theirs: list[float]) -> dict[str, float]:
    return {
        "ours_median": median(ours),
        "theirs_median": median(theirs),
        "ratio_of_medians": median(ours) / median(theirs),
        "median_of_ratios": median([a / b for a, b in zip(ours, theirs, strict=True)]),
    }


# -- 1. linear LangGraph saves -----------------------------------------------------------------


class Work(TypedDict):
    n: int
    result: dict[str, Any]
    doc: str  # the rest of the state: set by the input, read, never rewritten by the node


def document(size: int, rng: random.Random) -> str:
    """``size`` bytes of words: the part of a state each step carries but does not change."""
    words = ("alpha", "beta", "gamma", "delta", "tool", "call", "plan", "answer", "state")
    text = ""
    while len(text) < size:
        text += " ".join(rng.choice(words) for _ in range(64)) + "\n"
    return text[:size]


def work_graph(steps: int, rng: random.Random) -> StateGraph[Work]:
    words = ("alpha", "beta", "gamma", "delta", "tool", "call", "plan", "answer", "state")

    def step(s: Work) -> dict[str, Any]:
        text = " ".join(rng.choice(words) for _ in range(RESULT_WORDS))
        return {"n": s["n"] + 1, "result": {"text": text, "score": rng.random(), "ok": True}}

    b = StateGraph(Work)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return b


Call = tuple[str, tuple[Any, ...]]


def record_calls(steps: int, doc_bytes: int = 0) -> list[Call]:
    """The ``put`` and ``put_writes`` calls of one run of :func:`work_graph` whose input carries
    a document of ``doc_bytes``, in order."""
    calls: list[Call] = []
    saver = InMemorySaver()
    put, put_writes = saver.put, saver.put_writes

    def rec_put(config: Any, checkpoint: Any, md: Any, new_versions: Any) -> Any:
        calls.append(("put", (config, copy_checkpoint(checkpoint), dict(md), dict(new_versions))))
        return put(config, checkpoint, md, new_versions)

    def rec_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        calls.append(("put_writes", (config, list(writes), task_id, task_path)))
        put_writes(config, writes, task_id, task_path)

    saver.put = rec_put  # type: ignore[method-assign]
    saver.put_writes = rec_writes  # type: ignore[method-assign]
    graph = work_graph(steps, random.Random(SEED)).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "rec"}, "recursion_limit": steps + 10}
    doc = document(doc_bytes, random.Random(SEED + 1))
    out = graph.invoke({"n": 0, "result": {}, "doc": doc}, config)  # type: ignore[arg-type]
    if out["n"] != steps:
        raise SystemExit(f"recording: expected {steps} steps, got {out['n']}")
    return calls


def on_thread(config: Any, thread: str) -> Any:
    return {"configurable": {**config["configurable"], "thread_id": thread}}


def replay(saver: BaseCheckpointSaver[Any], calls: list[Call], thread: str) -> float:
    """Seconds to replay ``calls`` on ``thread``."""
    t0 = time.perf_counter()
    for kind, args in calls:
        config, *rest = args
        if kind == "put":
            saver.put(on_thread(config, thread), *rest)
        else:
            saver.put_writes(on_thread(config, thread), *rest)
    return time.perf_counter() - t0


def bench_linear(url: str, schemas: Schemas, quick: bool) -> dict[str, Any]:
    steps, rounds = LINEAR_STEPS[quick], LINEAR_ROUNDS[quick]
    rows: list[dict[str, Any]] = []
    for doc_bytes in LINEAR_DOC_BYTES[quick]:
        calls = record_calls(steps, doc_bytes)
        puts = sum(1 for kind, _ in calls if kind == "put")
        writes = len(calls) - puts
        rows.extend(
            {"doc_bytes": doc_bytes, **row}
            for row in _linear_rows(url, schemas, steps, rounds, calls, puts)
        )
    return {
        "steps": steps,
        "rounds": rounds,
        "puts_per_round": puts,
        "put_writes_per_round": writes,
        "unit": "checkpoints/s (each put with the put_writes before it)",
        "ours": "ckptlog LmdbSaver.open(postgresql://...?schema=...)",
        "theirs": "langgraph PostgresSaver (.setup(), autocommit connection)",
        "target_min": TARGETS["linear"],
        "target_by_doc_bytes": {str(k): v for k, v in LINEAR_TARGETS.items()},
        "rows": rows,
    }


def _linear_rows(
    url: str, schemas: Schemas, steps: int, rounds: int, calls: list[Call], puts: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for durability, sync in DURABILITIES:
        ours_schema, theirs_schema = schemas.new("lg_ours"), schemas.new("lg_pgsaver")
        ours = LmdbSaver.open(ckpt_url(url, ours_schema), durability=durability)
        theirs, conn = open_postgres_saver(url, theirs_schema, sync)
        stores: dict[str, BaseCheckpointSaver[Any]] = {"ours": ours, "theirs": theirs}
        rates: dict[str, list[float]] = {"ours": [], "theirs": []}
        try:
            # one untimed step each: connections, prepared statements, catalog caches
            for store in stores.values():
                replay(store, calls[:4], "warm")
            backend = ours.log.backend
            commits0 = getattr(backend, "commits", None)
            for r in range(rounds):
                for name in rotated(list(stores), r):
                    rates[name].append(puts / replay(stores[name], calls, f"t{r}"))
            commits1 = getattr(backend, "commits", None)
            for name, store in stores.items():  # the last round's thread reads back whole
                tup = store.get_tuple({"configurable": {"thread_id": f"t{rounds - 1}"}})
                if tup is None or tup.checkpoint["channel_values"]["n"] != steps:
                    raise SystemExit(f"linear {name}: the replayed thread did not read back")
        finally:
            ours.close()
            conn.close()
            schemas.drop(ours_schema)
            schemas.drop(theirs_schema)
        rows.append(
            {
                "durability": durability,
                "synchronous_commit": sync,
                "ours_rates": rates["ours"],
                "theirs_rates": rates["theirs"],
                **ratio_stats(rates["ours"], rates["theirs"]),
                # the backend's own count (None if it keeps none): commits per LangGraph call
                "ours_commits_per_call": None
                if commits0 is None or commits1 is None
                else (commits1 - commits0) / (rounds * len(calls)),
            }
        )
    return rows


# -- 2. storage growth -------------------------------------------------------------------------


def growth_run(saver: BaseCheckpointSaver[Any], steps: int) -> float:
    graph = chat_graph(steps, random.Random(SEED)).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "chat"}, "recursion_limit": steps + 10}
    t0 = time.perf_counter()
    out = graph.invoke({"messages": [], "n": 0}, config)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    reloaded = graph.get_state(config).values  # type: ignore[arg-type]
    if [m.content for m in reloaded["messages"]] != [m.content for m in out["messages"]]:
        raise SystemExit(f"growth {type(saver).__name__}: the reloaded thread differs")
    if len(out["messages"]) != steps:
        raise SystemExit(f"growth: expected {steps} messages, got {len(out['messages'])}")
    return seconds


def bench_growth(url: str, schemas: Schemas, quick: bool) -> dict[str, Any]:
    steps = GROWTH_STEPS[quick]
    rows: dict[str, dict[str, Any]] = {}
    ours_schema, theirs_schema = schemas.new("grow_ours"), schemas.new("grow_pgsaver")
    try:
        ours = LmdbSaver.open(ckpt_url(url, ours_schema), durability="process")
        try:
            backend = ours.log.backend
            before = backend.size_bytes()  # type: ignore[attr-defined]
            seconds = growth_run(ours, steps)
            after = backend.size_bytes()  # type: ignore[attr-defined]
        finally:
            ours.close()
        rows["ours"] = {"before": before, "after": after, "seconds": seconds}
        theirs, conn = open_postgres_saver(url, theirs_schema, "off")
        try:
            before = schema_bytes(url, theirs_schema)
            seconds = growth_run(theirs, steps)
            after = schema_bytes(url, theirs_schema)
        finally:
            conn.close()
        rows["theirs"] = {"before": before, "after": after, "seconds": seconds}
    finally:
        schemas.drop(ours_schema)
        schemas.drop(theirs_schema)
    for r in rows.values():
        r["growth"] = r["after"] - r["before"]
    return {
        "steps": steps,
        "durability": "process (synchronous_commit = off: bytes do not depend on it)",
        "ours": rows["ours"],
        "theirs": rows["theirs"],
        "ratio_growth": rows["ours"]["growth"] / rows["theirs"]["growth"],
        "ratio_total": rows["ours"]["after"] / rows["theirs"]["after"],
        "target_max": TARGETS["growth"],
    }


# -- 3. per-instance saves, batched --------------------------------------------------------------


class OursInstances:
    label = "ckptlog save_instance, flush_every=256"

    def __init__(self, url: str, schema: str, durability: str, sync: str) -> None:
        self.log = CheckpointLog.open(
            ckpt_url(url, schema),
            durability=durability,
            batching=FanOutInternalSaveBatching(flush_every=BATCH),
        )

    def setup(self, job: str, n: int) -> None:
        self.log.save(job, make_record(job, fan_outs=[fan_out("f", [NOT_STARTED] * n)]))

    def run(self, job: str, n: int) -> None:
        log = self.log
        for i in range(n):
            log.save_instance(job, "f", i, done(result_of(i)), namespace=NS)
        log.flush()

    def count(self, job: str) -> int:
        head = self.log.load(job)
        assert head is not None
        (fan,) = head.fan_out_progress
        return sum(1 for x in fan.instances if x.state == "completed")

    def close(self) -> None:
        self.log.close()


class HandRolled:
    """A user's own table, 256 rows per transaction, ``msgspec.json``-encoded results."""

    label = "hand-rolled table"
    CREATE = (
        "CREATE TABLE results (job text NOT NULL, item int NOT NULL, result bytea NOT NULL, "
        "PRIMARY KEY (job, item))"
    )

    def __init__(self, url: str, schema: str, durability: str, sync: str) -> None:
        self.conn = peer_connect(url, schema, sync, prepare_threshold=0)
        with self.conn.transaction():
            self.conn.execute(self.CREATE)

    def setup(self, job: str, n: int) -> None:
        pass

    def write(self, rows: list[tuple[str, int, bytes]]) -> None:
        raise NotImplementedError

    def run(self, job: str, n: int) -> None:
        encode = msgspec.json.encode
        pending: list[tuple[str, int, bytes]] = []
        for i in range(n):
            pending.append((job, i, encode(result_of(i))))
            if len(pending) == BATCH:
                self.write(pending)
                pending = []
        if pending:
            self.write(pending)

    def count(self, job: str) -> int:
        with self.conn.transaction():
            row = self.conn.execute(
                "SELECT count(*) FROM results WHERE job = %s", (job,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self.conn.close()


class HandRolledExecutemany(HandRolled):
    label = "hand-rolled, executemany upsert (pipeline)"
    UPSERT = (
        "INSERT INTO results (job, item, result) VALUES (%s, %s, %s) "
        "ON CONFLICT (job, item) DO UPDATE SET result = excluded.result"
    )

    def write(self, rows: list[tuple[str, int, bytes]]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(self.UPSERT, rows)  # psycopg pipelines executemany


class HandRolledCopy(HandRolled):
    label = "hand-rolled, binary COPY"
    COPY = "COPY results (job, item, result) FROM STDIN (FORMAT BINARY)"

    def write(self, rows: list[tuple[str, int, bytes]]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur, cur.copy(self.COPY) as copy:
            copy.set_types(["text", "int4", "bytea"])
            for row in rows:
                copy.write_row(row)


INSTANCE_STORES: dict[str, Callable[..., Any]] = {
    "ours": OursInstances,
    "executemany": HandRolledExecutemany,
    "copy": HandRolledCopy,
}


def bench_instances(url: str, schemas: Schemas, quick: bool) -> dict[str, Any]:
    n, rounds = INSTANCES_N[quick], INSTANCES_ROUNDS[quick]
    rows: list[dict[str, Any]] = []
    for durability, sync in DURABILITIES:
        names = {k: schemas.new(f"inst_{k}") for k in INSTANCE_STORES}
        stores: dict[str, Any] = {}
        rates: dict[str, list[float]] = {k: [] for k in INSTANCE_STORES}
        try:
            for k, factory in INSTANCE_STORES.items():
                stores[k] = factory(url, names[k], durability, sync)
            for store in stores.values():  # warm: connections, statements, caches
                store.setup("warm", BATCH)
                store.run("warm", BATCH)
            for r in range(rounds):
                job = f"job-{r}"
                for k in rotated(list(stores), r):
                    stores[k].setup(job, n)
                    t0 = time.perf_counter()
                    stores[k].run(job, n)
                    rates[k].append(n / (time.perf_counter() - t0))
                    if stores[k].count(job) != n:
                        raise SystemExit(f"instances {k}: expected {n} results in {job}")
        finally:
            for store in stores.values():
                store.close()
            for name in names.values():
                schemas.drop(name)
        best = max(("executemany", "copy"), key=lambda k: median(rates[k]))
        per_round_best = [
            max(a, b) for a, b in zip(rates["executemany"], rates["copy"], strict=True)
        ]
        rows.append(
            {
                "durability": durability,
                "synchronous_commit": sync,
                "rates": rates,
                "medians": {k: median(v) for k, v in rates.items()},
                "best_hand_rolled": best,
                "ratio_vs_executemany": ratio_stats(rates["ours"], rates["executemany"]),
                "ratio_vs_copy": ratio_stats(rates["ours"], rates["copy"]),
                "ratio_vs_best": ratio_stats(rates["ours"], per_round_best),
            }
        )
    return {
        "instances": n,
        "rounds": rounds,
        "batch": BATCH,
        "unit": "instances/s",
        "labels": {k: v.label for k, v in INSTANCE_STORES.items()},  # type: ignore[attr-defined]
        "target_min": TARGETS["instances"],
        "rows": rows,
    }


# -- 4. worker processes ---------------------------------------------------------------------


def bench_workers(url: str, schemas: Schemas, quick: bool) -> dict[str, Any]:
    n, rounds = WORKERS_N[quick], WORKERS_ROUNDS[quick]
    runs: dict[int, list[dict[str, float]]] = {w: [] for w in WORKER_COUNTS}
    peer: dict[int, list[float]] = {w: [] for w in WORKER_COUNTS}
    own: list[dict[str, float]] = []
    for r in range(rounds):
        order = list(WORKER_COUNTS) if r % 2 == 0 else list(reversed(WORKER_COUNTS))
        for w in order:
            if w == OWN_WORKERS:
                # The same job with a fan-out per worker: no stream shared, only the log (what
                # per-worker streams alone would leave of the serialization, docs/scale-out.md)
                schema = schemas.new(f"own{w}")
                try:
                    own.append(pg_scale.run(url, schema, w, n, BATCH, own=True))
                finally:
                    schemas.drop(schema)
            schema = schemas.new(f"workers{w}")
            try:
                runs[w].append(pg_scale.run(url, schema, w, n, BATCH))
            finally:
                schemas.drop(schema)
            schema = schemas.new(f"rows{w}")
            try:  # the same job on a table with no lock at all: what the machine allows
                peer[w].append(pg_scale.run_rows(url, schema, w, n, BATCH)["inst_per_s"])
            finally:
                schemas.drop(schema)
    rows = []
    for w in WORKER_COUNTS:
        rs = runs[w]
        if not all(x["verify_ok"] for x in rs):
            raise SystemExit(f"workers {w}: the log did not verify after the run")
        rows.append(
            {
                "workers": w,
                "inst_per_s": median([x["inst_per_s"] for x in rs]),
                "lock_wait_share": median([x["lock_wait_share"] for x in rs]),
                "lock_busy_share": median([x["lock_busy_share"] for x in rs]),
                "held_across_share": median([x["held_across_share"] for x in rs]),
                "holder_client_ms": median([x["holder_client_ms"] for x in rs]),
                "holder_cpu_ms": median([x["holder_cpu_ms"] for x in rs]),
                "rows_inst_per_s": median(peer[w]),
                "ratio_vs_rows": median(
                    [a["inst_per_s"] / b for a, b in zip(rs, peer[w], strict=True)]
                ),
                "commits": median([x["commits"] for x in rs]),
                "runs": rs,
            }
        )
    if not all(x["verify_ok"] for x in own):
        raise SystemExit(f"workers {OWN_WORKERS}, a fan-out each: the log did not verify")
    own_row = {
        "workers": OWN_WORKERS,
        "inst_per_s": median([x["inst_per_s"] for x in own]),
        **{
            k: median([x[k] for x in own])
            for k in (
                "lock_wait_share",
                "lock_busy_share",
                "held_across_share",
                "holder_client_ms",
                "holder_cpu_ms",
                "commits",
            )
        },
        "rows_inst_per_s": median(peer[OWN_WORKERS]),
        "ratio_vs_rows": median(
            [a["inst_per_s"] / b for a, b in zip(own, peer[OWN_WORKERS], strict=True)]
        ),
        "runs": own,
    }
    return {
        "instances": n,
        "rounds": rounds,
        "flush_every": BATCH,
        "durability": "fsync (synchronous_commit = on)",
        "rows": rows,
        "own_fan_outs": own_row,
    }


# -- output --------------------------------------------------------------------------------------


def server_info(url: str) -> dict[str, Any]:
    keys = (
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "shared_buffers",
        "wal_writer_delay",
        "max_connections",
    )
    with psycopg.connect(url, autocommit=True) as conn:
        info: dict[str, Any] = {
            k: conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(k))).fetchone()[0]  # type: ignore[index]
            for k in keys
        }
        data_dir = conn.execute("SHOW data_directory").fetchone()
    info["data_directory"] = data_dir[0] if data_dir else None
    info["url"] = url.rsplit("@", maxsplit=1)[-1]
    return info


def carry_over(payload: dict[str, Any], out: Path, only: list[str]) -> None:
    """A run of some sections (``--only``) keeps the others from the run stored at ``out``,
    each marked with the run it came from (the section's tables then say so)."""
    if set(only) >= set(SECTIONS) or not out.exists():
        return
    try:
        old = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    git = (old.get("environment") or {}).get("git") or {}
    for name in SECTIONS:
        if name in only or name not in old:
            continue
        section = dict(old[name])
        section.setdefault(
            "carried_from",
            {
                "timestamp_utc": (old.get("environment") or {}).get("timestamp_utc"),
                "commit": (git.get("commit") or "unknown")[:10],
                "command": old.get("command"),
                "loadavg_before": old.get("loadavg_before"),
                "loadavg_after": old.get("loadavg_after"),
            },
        )
        payload[name] = section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes (under ~30 s)")
    parser.add_argument("--url", default=URL)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated, of {','.join(SECTIONS)}"
    )
    parser.add_argument(
        "--doc",
        nargs="?",
        const=str(DOC),
        default=None,
        help="rewrite the PostgreSQL section of this page (default docs/benchmarks.md)",
    )
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"--only: expected some of {', '.join(SECTIONS)}, found {sorted(unknown)}")
    quick = bool(args.quick)
    schemas = Schemas(args.url)
    benches = {
        "linear": bench_linear,
        "growth": bench_growth,
        "instances": bench_instances,
        "workers": bench_workers,
    }
    warnings = Warnings()
    logging.getLogger().addHandler(warnings)
    started = time.perf_counter()
    before = loadavg()
    payload: dict[str, Any] = {
        "benchmark": "pg_compare",
        "quick": quick,
        "command": " ".join(["python -m benchmarks.pg_compare", *(argv or sys.argv[1:])]),
        "server": server_info(args.url),
        "packages": versions(
            (
                "langgraph",
                "langgraph-checkpoint",
                "langgraph-checkpoint-postgres",
                "psycopg",
                "msgspec",
            )
        ),
        "loadavg_before": before,
    }
    try:
        for name in only:
            t0 = time.perf_counter()
            payload[name] = benches[name](args.url, schemas, quick)
            payload[name]["seconds"] = round(time.perf_counter() - t0, 1)
            payload[name]["loadavg_after"] = loadavg()
            for title, headers, rows, align in tables({name: payload[name]}):
                print()
                print_table(headers, rows, align=align, title=title)
    finally:
        schemas.drop_all()
    carry_over(payload, Path(args.out), only)
    payload["schemas_created_and_dropped"] = schemas.ever
    payload["warnings_logged"] = len(warnings.messages)
    payload["warnings"] = warnings.messages[:20]
    payload["loadavg_after"] = loadavg()
    payload["seconds"] = time.perf_counter() - started
    payload["environment"] = environment(
        durability="fsync and process, per table", data_dir=payload["server"]["data_directory"]
    )
    print()
    for line in verdicts(payload):
        print(line)
    print(f"wrote {write_json(args.out, payload)}")
    if args.doc:
        doc = Path(args.doc)
        text = doc.read_text(encoding="utf-8") if doc.exists() else ""
        section = markdown(payload, shown(Path(args.out)))
        doc.write_text(replace_section(text, section), encoding="utf-8")
        print(f"wrote the PostgreSQL section of {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
