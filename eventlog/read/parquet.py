"""Parquet files and SQL over a log's history (``ckptlog export --format parquet``,
``ckptlog sql``): the tables of eventlog.read.tables, written with pyarrow in record batches
and queried with DuckDB.

pyarrow and DuckDB are the optional extra ``ckptlog[sql]``; without them these functions
raise :class:`~eventlog.errors.MissingExtra` saying what to install.

Invariants:
- Read-only on the log; an export writes only into DEST, which must be new or empty, each
  file written under a temporary name and renamed when complete.
- Memory stays bounded: rows go to the files a batch (eventlog.read.tables.BATCH_ROWS) at a
  time; every table is written, empty ones included, so a query never misses a table.
- ``sql`` sees exactly the tables an export writes, as views named after them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from eventlog.errors import InvalidArgument, MissingExtra
from eventlog.log import EventLog
from eventlog.read.tables import BATCH_ROWS, SCHEMAS, TableBuilder

__all__ = ["Answer", "export_parquet", "is_export", "query", "require"]

INSTALL: Final = "pip install 'ckptlog[sql]'"
Progress = Callable[[int, int], None]


def require(what: str = "this") -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``; :class:`MissingExtra` when pyarrow is missing."""
    try:
        import pyarrow as pa  # noqa: PLC0415 - the optional extra
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ImportError as e:
        raise MissingExtra(
            f"{what} needs pyarrow, which is not installed ({e}); install the sql extra: {INSTALL}",
            extra="sql",
        ) from e
    return pa, pq


def _duckdb(what: str) -> Any:
    try:
        import duckdb  # noqa: PLC0415 - the optional extra
    except ImportError as e:
        raise MissingExtra(
            f"{what} needs DuckDB, which is not installed ({e}); install the sql extra: {INSTALL}",
            extra="sql",
        ) from e
    return duckdb


def _arrow_schema(pa: Any, table: str) -> Any:
    types = {
        "str": pa.string(),
        "json": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "time": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([(name, types[typ]) for name, typ in SCHEMAS[table]])


def _batch(pa: Any, schema: Any, table: str, cols: dict[str, list[Any]]) -> Any:
    arrays = []
    for name, typ in SCHEMAS[table]:
        values = cols[name]
        if typ == "time":
            values = [None if t is None else round(t * 1_000_000) for t in values]
        arrays.append(pa.array(values, type=schema.field(name).type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def is_export(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory an export wrote (it holds ``saves.parquet``)."""
    return isinstance(path, (str, os.PathLike)) and (Path(path) / "saves.parquet").is_file()


def export_parquet(
    log: EventLog,
    dest: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
    batch_rows: int = BATCH_ROWS,
) -> dict[str, int]:
    """Write every table of ``log`` to ``DEST/<table>.parquet``; returns rows per table.
    ``progress(frames read, frames in the log)`` is called every batch of frames. A frame
    that cannot be read (:class:`~eventlog.errors.CorruptFrame`) stops the export and
    nothing is left in DEST (``ckptlog verify`` names the damage; ``export`` in JSON Lines
    writes what is readable around it)."""
    pa, pq = require("export --format parquet")
    out = Path(dest)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidArgument(
            f"DEST {str(dest)!r} exists and is not an empty directory; give a new directory "
            "(an export never overwrites)"
        )
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _write(pa, pq, log, out, progress, batch_rows)
    except BaseException:
        # a damaged frame (CorruptFrame), an interrupt: no half an export left behind
        for t in SCHEMAS:
            (out / f".{t}.parquet.part").unlink(missing_ok=True)
            (out / f"{t}.parquet").unlink(missing_ok=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise


def _write(
    pa: Any, pq: Any, log: EventLog, out: Path, progress: Progress | None, batch_rows: int
) -> dict[str, int]:
    total = log.stats().frames
    schemas = {t: _arrow_schema(pa, t) for t in SCHEMAS}
    writers = {
        t: pq.ParquetWriter(str(out / f".{t}.parquet.part"), schemas[t], compression="zstd")
        for t in SCHEMAS
    }
    rows = dict.fromkeys(SCHEMAS, 0)
    builder = TableBuilder(log, batch_rows)
    try:
        done = 0
        for table, cols in builder.add_all():
            writers[table].write_batch(_batch(pa, schemas[table], table, cols))
            rows[table] += len(cols[SCHEMAS[table][0][0]])
            if progress is not None and builder.frames != done:
                done = builder.frames
                progress(done, total)
    finally:
        for w in writers.values():
            w.close()
    for t in SCHEMAS:
        os.replace(out / f".{t}.parquet.part", out / f"{t}.parquet")
    if progress is not None:
        progress(builder.frames, total)
    return rows


@dataclass
class Answer:
    """A query's answer: column names and rows (tuples of Python values)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


def query(
    source: EventLog | str | os.PathLike[str],
    sql: str,
    *,
    progress: Progress | None = None,
) -> Answer:
    """Run ``sql`` (DuckDB's dialect) over the tables of ``source``: a log (exported to a
    temporary directory first) or a directory an export wrote."""
    duckdb = _duckdb("sql")
    require("sql")
    scratch: str | None = None
    try:
        if isinstance(source, EventLog):
            scratch = tempfile.mkdtemp(prefix="ckptlog-sql-")
            export_parquet(source, scratch, progress=progress)
            where = Path(scratch)
        else:
            where = Path(source)
        con = duckdb.connect(":memory:")
        try:
            for t in SCHEMAS:
                file = str(where / f"{t}.parquet").replace("'", "''")
                con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{file}')")
            try:
                cursor = con.execute(sql)
            except duckdb.Error as e:
                raise InvalidArgument(
                    f"the query failed: {e}; the tables are {', '.join(SCHEMAS)} "
                    "(`ckptlog sql PATH --schema` lists their columns)"
                ) from e
            columns = [d[0] for d in cursor.description or ()]
            return Answer(columns, [tuple(r) for r in cursor.fetchall()])
        finally:
            con.close()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
