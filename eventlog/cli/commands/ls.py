"""``ckptlog ls``: the streams of a log, what each is and how far it got."""

from __future__ import annotations

import argparse

from eventlog import forensics as fx
from eventlog import read
from eventlog.cli.context import OK, Ctx
from eventlog.cli.render import escape, fmt_time, iso_time, table, to_json
from eventlog.cli_render import Style


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--correlation-id", metavar="X", help="only invocations with this id")
    p.add_argument(
        "--all",
        action="store_true",
        help="also streams without a head: deleted invocations, events, other integrations",
    )


def run(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    rows = read.listing(cl, a.correlation_id)
    shown = [
        r
        for r in rows
        if a.all or (not r.row.deleted and (r.row.correlation_id is not None or r.kind != "events"))
    ]
    if ctx.json:
        docs = []
        for r in shown:
            doc = fx.plain(r.row)
            doc["type"] = r.kind
            doc["status"] = r.status
            doc["last_saved_at_iso"] = iso_time(r.row.last_saved_at)
            doc.update(r.labels)
            docs.append(doc)
        ctx.out.write(to_json(docs) + "\n")
        return OK
    if not shown:
        what = f" with correlation id {a.correlation_id!r}" if a.correlation_id else ""
        ctx.out.write(f"no invocations{what}\n")
        return OK
    s = ctx.style
    table(
        ["INVOCATION", "CORRELATION", "SAVES", "LAST SAVED (UTC)", "KIND", "NODES", "FAN-OUT"],
        (
            [
                escape(r.info.display),
                escape(r.row.correlation_id) if r.row.correlation_id is not None else "-",
                f"{r.row.frames:,}",
                fmt_time(r.row.last_saved_at),
                _kind_cell(r, s),
                str(r.row.completed_nodes) if r.row.correlation_id is not None else "-",
                _fan_out_cell(r.row, s),
            ]
            for r in shown
        ),
        "llrllrl",
        ctx.out,
        colour=ctx.style.enabled,
    )
    return OK


def _kind_cell(r: read.Listed, s: Style) -> str:
    if r.row.deleted:
        return s.dim("deleted")
    if r.row.correlation_id is not None:
        return escape(r.row.kind or "-")
    return escape(r.info.noun)


def _fan_out_cell(r: fx.Invocation, s: Style) -> str:
    if not r.fan_out_instances:
        return "-"
    cell = f"{r.completed_instances:,}/{r.fan_out_instances:,} done"
    if r.error_instances:
        cell += ", " + s.red(f"{r.error_instances:,} errors")
    return cell
