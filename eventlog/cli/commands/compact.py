"""``ckptlog compact``: a compacted copy of a log, written to a new log (the source is only
read)."""

from __future__ import annotations

import argparse
import errno
import os
from typing import Any

from eventlog import forensics as fx
from eventlog.cli import options
from eventlog.cli.context import OK, PROBLEMS, USAGE, CliError, Ctx, is_permission
from eventlog.cli.render import print_verify, table, to_json
from eventlog.log_open import is_server_url
from eventlog.read.text import parse_time
from eventlog.reports import VerifyReport


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="where to write the new log (must not exist)")
    p.add_argument(
        "--keep",
        default="all",
        metavar="WHAT",
        help="all (default), heads, last=N (saves per invocation) or since=TIME",
    )
    options.no_verify(p, "skip verifying DEST afterwards")


def parse_keep(text: str) -> dict[str, Any]:
    """``all`` | ``heads`` | ``last=N`` | ``since=TIME`` -> ``compact`` keywords."""
    name, _, value = text.partition("=")
    name = name.strip().lower().replace("-", "_")
    if name in ("all", "heads") and not value:
        return {"keep": name}
    if name in ("last", "last_n") and value:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise CliError(f"--keep last=N needs a whole number N >= 1, got {value!r}", USAGE)
        return {"last_n": n}
    if name == "since" and value:
        return {"since": parse_time(value)}
    raise CliError(f"--keep must be all, heads, last=N or since=TIME, got {text!r}", USAGE)


def run(ctx: Ctx) -> int:
    a = ctx.args
    choice = parse_keep(a.keep)
    check_dest_parent(a.dest)
    cl = ctx.open().log
    bar = ctx.progress("compact")
    try:
        report = fx.compact(cl, a.dest, progress=bar, **choice)
    except fx.SourceDamaged as e:
        raise CliError(str(e), PROBLEMS) from e
    except fx.CompactionError as e:
        raise CliError(str(e), USAGE) from e
    except OSError as e:  # StorageError too: DEST could not be created or written
        raise CliError(dest_os_error(a.dest, e), USAGE) from e
    finally:
        bar.close()
    dest_report: VerifyReport | None = None
    if not a.no_verify:
        with fx.open_readonly(a.dest) as dest:
            dest_report = fx.verify(dest.log)
    if ctx.json:
        doc: dict[str, Any] = {"report": report}
        if dest_report is not None:
            doc["dest_verify"] = {"ok": dest_report.ok, "problems": dest_report.problems}
        ctx.out.write(to_json(doc) + "\n")
    else:
        table(
            ["", "SOURCE", "DEST"],
            [
                ["invocations / streams", f"{report.streams_in:,}", f"{report.streams_out:,}"],
                ["frames", f"{report.frames_in:,}", f"{report.frames_out:,}"],
                ["data file bytes", f"{report.source_bytes:,}", f"{report.dest_bytes:,}"],
            ],
            "lrr",
            ctx.out,
            colour=ctx.style.enabled,
        )
        ctx.out.write(
            f"kept {report.policy} in {report.seconds:.2f} s; {report.dest} is a new log, "
            f"{report.source} is unchanged\n"
        )
        if dest_report is not None:
            print_verify(ctx, dest_report, label=report.dest)
    return OK if dest_report is None or dest_report.ok else PROBLEMS


def check_dest_parent(dest: str) -> None:
    """DEST goes in an existing, writable directory: never create its parents silently."""
    if is_server_url(dest):
        raise CliError(
            f"cannot write DEST {dest!r}: compact writes a new LMDB log (a directory); to "
            "compact into PostgreSQL, compact to a directory, then `ckptlog copy DIR URL`",
            USAGE,
        )
    parent = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(parent):
        raise CliError(
            f"cannot write DEST {dest!r}: the directory it goes in, {parent!r}, does not exist; "
            "create it first (compact creates only DEST itself)",
            USAGE,
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(
            f"cannot write DEST {dest!r}: {parent!r} is not writable by this user; choose a "
            "directory you can write to",
            USAGE,
        )


def dest_os_error(dest: str, e: OSError) -> str:
    why = e.strerror or str(e)
    if is_permission(e) or e.errno == errno.EROFS or "Read-only file system" in str(e):
        return f"cannot write DEST {dest!r}: {why}; choose a directory you can write to"
    if e.errno == errno.ENOSPC:
        return f"cannot write DEST {dest!r}: the disk is full; free space or choose another disk"
    return f"cannot write DEST {dest!r}: {why}"
