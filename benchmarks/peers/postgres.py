"""ckptlog's ``Checkpointer`` on PostgreSQL, as a peer of the benchmark harness:

    python -m benchmarks run --backend ckptlog --peer benchmarks.peers.postgres:fsync \\
        --peer benchmarks.peers.postgres:process

``fsync`` and ``process`` save unbatched (the ``linear`` and ``fanout`` scenarios);
``fsync_batched`` and ``process_batched`` buffer fan-out saves as the ``instances`` scenario's
ckptlog rows do (``flush_every`` = its batch of 256), which the harness cannot pass to a
``--peer`` store.

Each row then compares the PostgreSQL log with the LMDB one of the same durability (the
harness's reference row). The server is ``CKPTLOG_PG_URL`` (default: the loopback server of the
development machines, database ``test``). Each store the harness asks for gets a schema of its
own, named in a file in the store's directory so a reopen finds it; schemas are named
``CKPTLOG_BENCH_PG_PREFIX`` (default ``bench_``) plus a random suffix, and every schema a process
created is dropped when it exits (:func:`drop_created`).
"""

from __future__ import annotations

import atexit
import os
import secrets
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.instances import BATCH
from eventlog.checkpoints import Checkpointer
from eventlog.records import FanOutInternalSaveBatching

URL = os.environ.get("CKPTLOG_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA_FILE = "postgres-schema"
_created: list[str] = []


def drop_created() -> None:
    """Drop every schema this process created (registered at exit)."""
    names, _created[:] = list(_created), []
    if not names:
        return
    with psycopg.connect(URL, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _schema_of(directory: Path) -> str:
    """The store's schema (named in a file in ``directory``; a new one the first time, dropped
    when this process exits)."""
    marker = directory / SCHEMA_FILE
    if marker.exists():
        return marker.read_text(encoding="utf-8").strip()
    prefix = os.environ.get("CKPTLOG_BENCH_PG_PREFIX", "bench_")
    schema = prefix + secrets.token_hex(6)
    directory.mkdir(parents=True, exist_ok=True)
    marker.write_text(schema, encoding="utf-8")
    if not _created:
        atexit.register(drop_created)
    _created.append(schema)
    return schema


def _open(directory: Path, durability: str, batch: int = 0) -> Checkpointer:
    batching = FanOutInternalSaveBatching(flush_every=batch) if batch > 0 else None
    return Checkpointer.open(
        f"{URL}?schema={_schema_of(directory)}", durability=durability, batching=batching
    )


def fsync(directory: Path) -> Checkpointer:
    """``synchronous_commit = on``: a save survives a crash of the server or its machine."""
    return _open(directory, "fsync")


def process(directory: Path) -> Checkpointer:
    """``synchronous_commit = off``: a save survives the client being killed; a server crash
    may lose the last 600 ms of saves."""
    return _open(directory, "process")


def fsync_batched(directory: Path) -> Checkpointer:
    """:func:`fsync`, fan-out saves buffered and committed 256 at a time."""
    return _open(directory, "fsync", BATCH)


def process_batched(directory: Path) -> Checkpointer:
    """:func:`process`, fan-out saves buffered and committed 256 at a time."""
    return _open(directory, "process", BATCH)


for _factory, _kind in (
    (fsync, "fsync"),
    (process, "process"),
    (fsync_batched, "fsync"),
    (process_batched, "process"),
):
    _factory.durability = _kind  # type: ignore[attr-defined]


# -- LangGraph savers on the same server: ours and LangGraph's own PostgresSaver -------------


def _lg_ours(directory: Path, durability: str) -> Any:
    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415 - optional peer

    return LmdbSaver.open(f"{URL}?schema={_schema_of(directory)}", durability=durability)


def lg_fsync(directory: Path) -> Any:
    """ckptlog's LangGraph saver on PostgreSQL, ``fsync``."""
    return _lg_ours(directory, "fsync")


def lg_process(directory: Path) -> Any:
    """ckptlog's LangGraph saver on PostgreSQL, ``process``."""
    return _lg_ours(directory, "process")


def _pg_saver(directory: Path, sync: str) -> Any:
    """LangGraph's ``PostgresSaver`` (langgraph-checkpoint-postgres) in the store's schema, on a
    connection opened as its ``from_conn_string`` opens one, with ``synchronous_commit`` set
    like for like; closing the saver closes the connection."""
    from benchmarks.pg_compare import open_postgres_saver  # noqa: PLC0415 - optional peer

    schema = _schema_of(directory)
    with psycopg.connect(URL, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    saver, conn = open_postgres_saver(URL, schema, sync)
    saver.close = conn.close  # type: ignore[attr-defined]  # the harness closes what it opened
    return saver


def pgsaver_fsync(directory: Path) -> Any:
    """LangGraph's ``PostgresSaver``, ``synchronous_commit = on``."""
    return _pg_saver(directory, "on")


def pgsaver_process(directory: Path) -> Any:
    """LangGraph's ``PostgresSaver``, ``synchronous_commit = off``."""
    return _pg_saver(directory, "off")


for _factory, _kind in (
    (lg_fsync, "fsync"),
    (lg_process, "process"),
    (pgsaver_fsync, "fsync"),
    (pgsaver_process, "process"),
):
    _factory.durability = _kind  # type: ignore[attr-defined]
