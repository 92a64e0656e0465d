"""``ckptlog copy``: a log copied byte for byte to another engine (LMDB <-> PostgreSQL)."""

from __future__ import annotations

import argparse
from typing import Any

from eventlog import forensics as fx
from eventlog.cli import options
from eventlog.cli.context import OK, PROBLEMS, Ctx
from eventlog.cli.render import print_verify, table, to_json
from eventlog.reports import VerifyReport


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "dest", metavar="DEST", help="a new log directory or postgresql://...?schema= URL"
    )
    options.no_verify(p, "skip verifying both ends")


def run(ctx: Ctx) -> int:
    from eventlog.copylog import copy_log  # noqa: PLC0415 - only this command needs it

    a = ctx.args
    bar = ctx.progress("copy", unit="rows")
    try:
        report = copy_log(a.path, a.dest, progress=bar)
    finally:
        bar.close()
    reports: list[tuple[str, VerifyReport]] = []
    if not a.no_verify:
        for where in (a.path, a.dest):
            with fx.open_readonly(where) as opened:
                reports.append((where, fx.verify(opened.log)))
    if ctx.json:
        doc: dict[str, Any] = {"report": report}
        doc["verify"] = [{"path": w, "ok": r.ok, "problems": r.problems} for w, r in reports]
        ctx.out.write(to_json(doc) + "\n")
    else:
        table(
            ["TABLE", "ROWS"],
            [[name, f"{n:,}"] for name, n in report.rows.items()],
            "lr",
            ctx.out,
        )
        ctx.out.write(
            f"copied {sum(report.rows.values()):,} rows ({report.bytes:,} bytes) in "
            f"{report.seconds:.2f} s to {report.dest}\n"
        )
        for where, rep in reports:
            print_verify(ctx, rep, label=where)
    return OK if all(r.ok for _, r in reports) else PROBLEMS
