"""``ckptlog tail``: each save as it is committed, by any process, until interrupted."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from eventlog import read
from eventlog.cli import options
from eventlog.cli.context import USAGE, CliError, Ctx
from eventlog.cli.render import escape, fmt_time, iso_time, to_json
from eventlog.read.tail import POLL_SECONDS, Saved, tail
from eventlog.streams import StreamInfo

FORWARD_SIGINT = True
"""A SIGINT sent to the ``ckptlog`` process alone (``kill -INT``) reaches the worker too."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.target(p, optional=True)
    p.add_argument(
        "--from",
        dest="from_seq",
        type=int,
        metavar="SEQ",
        help="start at seq SEQ of the stream (with an ID or --thread; every save from it is "
        "printed first), or after global seq SEQ-1 of the log; default: from now",
    )
    p.add_argument(
        "--poll",
        type=float,
        default=POLL_SECONDS,
        metavar="SECONDS",
        help=f"how often to look for new saves (default {POLL_SECONDS}: a line follows its "
        "commit within that, plus the read); the log is only read",
    )


def run(ctx: Ctx) -> int:
    a = ctx.args
    if a.poll <= 0:
        raise CliError(f"--poll must be > 0 seconds, got {a.poll}", USAGE)
    if a.from_seq is not None and a.from_seq < 1:
        raise CliError(f"--from counts from 1, got {a.from_seq}", USAGE)
    log = ctx.open().log.log
    stream: str | None = None
    info: StreamInfo | None = None
    wanted = a.invocation
    if wanted is not None and a.thread is None and a.ns is None and read.find(log, wanted) is None:
        stream = wanted  # not there yet: tail it by its key, from its first save
        ctx.warn(f"no stream {wanted!r} in the log yet; waiting for its first save")
    else:
        found = ctx.resolve(required=False)
        if found is not None:
            stream, info = found
    stopping: list[bool] = []
    # SIGINT (Ctrl-C) ends the tail between polls, with exit status 0 (every line printed
    # whole); other signals end it as they end any command (128 + N).
    previous = signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    try:
        for row in tail(
            log, stream, from_seq=a.from_seq, poll_seconds=a.poll,
            stop=lambda: bool(stopping), info=info,
        ):  # fmt: skip
            if row.problem is not None:
                ctx.unreadable += 1  # counted: the exit status is then 1
                ctx.err.write(ctx.err_style.red(f"ckptlog: unreadable: {row.problem}") + "\n")
            ctx.out.write(_line(ctx, row, stream is None) + "\n")
            ctx.out.flush()
            if stopping:
                break
    finally:
        signal.signal(signal.SIGINT, previous)
    return ctx.status()


def _line(ctx: Ctx, row: Saved, every: bool) -> str:
    if ctx.json:
        doc: dict[str, Any] = row.doc()
        doc["saved_at_iso"] = iso_time(row.saved_at)
        return to_json(doc)
    s = ctx.style
    parts = [s.dim(fmt_time(row.saved_at)), s.dim(f"#{row.global_seq}")]
    if every:
        parts.append(s.bold(escape(row.display)))
    parts.append(f"seq {row.seq}")
    kind = escape(row.kind)
    bad = "fail" in row.kind or row.kind in ("delete", "remove") or row.kind.endswith(".delete")
    parts.append(s.red(kind) if bad else s.green(kind))
    if row.node:
        parts.append(f"node={escape(row.node)}")
    if row.ref:
        parts.append(s.dim(escape(row.ref)))
    parts.append(s.dim(f"{row.frame} {row.size:,} B"))
    return "  ".join(parts)
