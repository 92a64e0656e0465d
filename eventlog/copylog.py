"""Copying a log between engines (LMDB <-> PostgreSQL), every stored byte kept.

Invariants:
- The copy reads the source in one read transaction (a consistent snapshot, even while a
  writer appends) and writes every row of every log table unchanged: frames, their chains and
  checksums, indexes and materialized rows are byte for byte the source's, so ``verify`` passes
  on both ends.
- The destination must hold no log (no ``meta`` record, no frame): a copy never merges.
- Rows go in chunks of ``chunk_rows`` per write transaction with durability ``process``, and the
  destination is synced once at the end; a copy that fails midway leaves a destination that is
  refused as a log (no ``meta`` record is written until every other row is there).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable

import msgspec

from backends.base import Backend, WriteTxn
from eventlog.errors import CheckpointError
from eventlog.layout import CORE_TABLES, META
from eventlog.log import open_backend
from eventlog.views import REGISTRY

# Every table a log may hold: the core ones and each registered view's (the views import no
# framework, so copying never does).
COPY_TABLES = (*CORE_TABLES, *(table for view in REGISTRY for table in view.tables))
CHUNK_ROWS = 4096


class CopyReport(msgspec.Struct, frozen=True):
    source: str
    dest: str
    rows: dict[str, int]  # per table, the tables that had rows
    bytes: int  # keys and values copied
    seconds: float


def _flush(backend: Backend, table: str, rows: list[tuple[bytes, bytes]]) -> None:
    def fn(txn: WriteTxn) -> None:
        txn.put_many(table, rows)

    backend.run_write(fn)


def format_for(dst: Backend, raw: bytes) -> bytes:
    """The ``meta`` format record ``raw`` as ``dst`` must hold it: its ``format_version`` raised
    to ``dst``'s storage layout (eventlog.layout.META_FORMAT_MAX), so that a ckptlog that
    cannot read that layout refuses the copy; a record that is not JSON is copied as it is
    (opening the copy says what is wrong with it)."""
    try:
        settings = json.loads(raw)
        version = int(settings["format_version"])
    except (ValueError, KeyError, TypeError):
        return raw
    if version >= dst.layout_version:
        return raw
    settings["format_version"] = dst.layout_version
    return json.dumps(settings, sort_keys=True).encode()


def copy_log(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    tables: Iterable[str] = COPY_TABLES,
    chunk_rows: int = CHUNK_ROWS,
    progress: Callable[[int, int], None] | None = None,
) -> CopyReport:
    """Copy the log at ``source`` to ``dest`` (each an LMDB directory or a
    ``postgresql://...?schema=`` URL); ``progress(done, total)`` counts rows."""
    names = tuple(dict.fromkeys(tables))
    started = time.perf_counter()
    src = open_backend(source, tables=names, readonly=True)
    try:
        dst = open_backend(dest, tables=names, durability="process")
        try:
            with dst.read() as txn:
                if txn.get(META, b"format") is not None or txn.count("log") > 0:
                    raise CheckpointError(
                        f"cannot copy to {dst.location!r}: it already holds a log; copy to a "
                        "new directory or a new schema (a copy never merges two logs)"
                    )
            rows: dict[str, int] = {}
            copied = 0
            order = [t for t in names if t != META] + [META]  # meta last: whole or refused
            with src.read() as r:
                total = sum(r.count(t) for t in order)
                done = 0
                for table in order:
                    chunk: list[tuple[bytes, bytes]] = []
                    for key, raw in r.scan(table):
                        value = format_for(dst, raw) if table == META and key == b"format" else raw
                        chunk.append((key, value))
                        copied += len(key) + len(value)
                        if len(chunk) >= chunk_rows:
                            _flush(dst, table, chunk)
                            done += len(chunk)
                            rows[table] = rows.get(table, 0) + len(chunk)
                            chunk = []
                            if progress is not None:
                                progress(done, total)
                    if chunk:
                        _flush(dst, table, chunk)
                        done += len(chunk)
                        rows[table] = rows.get(table, 0) + len(chunk)
                        if progress is not None:
                            progress(done, total)
            dst.sync()
            location = dst.location
        finally:
            dst.close()
    finally:
        src.close()
    return CopyReport(
        source=src.location,
        dest=location,
        rows=rows,
        bytes=copied,
        seconds=time.perf_counter() - started,
    )
