"""``ckptlog sql``: a SQL query (DuckDB) over a log's history as tables (the ones ``export
--format parquet`` writes: saves, frames, instances, lg_checkpoints, lg_writes, events)."""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
from typing import Any

from eventlog.cli.context import OK, USAGE, CliError, Ctx
from eventlog.cli.render import escape, table, to_json
from eventlog.errors import InvalidArgument
from eventlog.read import parquet
from eventlog.read.tables import SCHEMAS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "query",
        metavar="QUERY",
        nargs="?",
        help="a SELECT in DuckDB's SQL over the tables "
        + ", ".join(SCHEMAS)
        + " (PATH may also be a directory `export --format parquet` wrote)",
    )
    p.add_argument("--schema", action="store_true", help="list the tables and their columns")
    p.epilog = (p.epilog or "") + (
        '\nexample:\n  ckptlog sql PATH "SELECT fan_out, state, count(*) FROM instances '
        "GROUP BY ALL\"\nneeds the sql extra: pip install 'ckptlog[sql]'\n"
    )


def run(ctx: Ctx) -> int:
    a = ctx.args
    if a.schema:
        return _schema(ctx)
    if not a.query:
        raise CliError("give a QUERY (or --schema to list the tables)", USAGE)
    try:
        if parquet.is_export(a.path):
            answer = parquet.query(a.path, a.query)
        else:
            parquet.require("sql")
            log = ctx.open().log.log
            bar = ctx.progress("reading")
            try:
                answer = parquet.query(log, a.query, progress=bar)
            finally:
                bar.close()
    except InvalidArgument as e:
        raise CliError(str(e), USAGE) from e
    if ctx.json:
        for row in answer.rows:
            ctx.out.write(to_json(dict(zip(answer.columns, map(_plain, row), strict=True))))
            ctx.out.write("\n")
        return OK
    cells = [[escape(_cell(v)) for v in row] for row in answer.rows]
    align = "".join(
        "r" if _numeric([row[i] for row in answer.rows]) else "l"
        for i in range(len(answer.columns))
    )
    table(answer.columns, cells, align, ctx.out, colour=ctx.style.enabled)
    ctx.err.write(f"{len(answer.rows):,} row(s)\n")
    return OK


def _plain(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(v, (dt.date, dt.time, dt.timedelta)):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


def _numeric(values: list[Any]) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(
        isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool) for v in present
    )


def _cell(v: Any) -> str:
    p = _plain(v)
    if p is None:
        return "-"
    return p if isinstance(p, str) else to_json(p)


def _schema(ctx: Ctx) -> int:
    if ctx.json:
        ctx.out.write(to_json({t: dict(cols) for t, cols in SCHEMAS.items()}) + "\n")
        return OK
    rows = [[t, ", ".join(f"{c} {typ}" for c, typ in cols)] for t, cols in SCHEMAS.items()]
    table(["table", "columns"], rows, "ll", ctx.out, colour=ctx.style.enabled)
    return OK
