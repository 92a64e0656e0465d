"""``ckptlog replay``: step through a stream's frames with what each changed."""

from __future__ import annotations

import argparse
from typing import IO, Any

from eventlog import forensics as fx
from eventlog import read
from eventlog.checkpoint_view import fan_out_nodes, kind_label
from eventlog.cli import options
from eventlog.cli.context import Ctx, seq_arg
from eventlog.cli.render import (
    escape,
    fmt_time,
    print_value_changes,
    step_doc,
    to_json,
    unreadable_doc,
    walk_doc,
)
from eventlog.cli_render import Pager
from eventlog.read.diffs import diff_lines, value_changes
from eventlog.streams import StreamInfo


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.target(p)
    options.seq_range(p, "start at SEQ", "stop after SEQ")
    options.full(p, "list every change of each step")
    options.no_pager(p)


def run(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    found = ctx.resolve()
    assert found is not None
    inv, info = found
    last = fx.last_seq(cl, inv)
    from_seq = seq_arg(a.from_seq, last, inv) if a.from_seq else 1
    to_seq = seq_arg(a.to_seq, last, inv) if a.to_seq else None
    pager = Pager(ctx.out, enabled=not ctx.json and not a.no_pager)
    try:
        if not info.records:
            return _replay_steps(ctx, info, from_seq, to_seq, pager.stream)
        return _replay_records(ctx, inv, from_seq, to_seq, pager.stream)
    finally:
        pager.close()


def _replay_steps(
    ctx: Ctx, info: StreamInfo, from_seq: int, to_seq: int | None, out: IO[str]
) -> int:
    assert ctx.opened is not None
    s = ctx.style
    before: Any = None
    for item in read.steps(ctx.opened.log.log, info.stream, info):
        if isinstance(item, fx.Unreadable):
            if item.last_seq >= from_seq and (to_seq is None or item.seq <= to_seq):
                ctx.report_unreadable(item)
                out.write(to_json(unreadable_doc(item)) if ctx.json else s.red(f"!! {item}"))
                out.write("\n")
            continue
        if to_seq is not None and item.seq > to_seq:
            break
        changes = value_changes(before, item.value)
        before = item.value
        if item.seq < from_seq:
            continue
        if ctx.json:
            doc = step_doc(info, item, 0)
            del doc["last_seq"], doc["view"]
            doc["changes"] = changes
            out.write(to_json(doc) + "\n")
            continue
        node = f"  node {escape(item.node)}" if item.node else ""
        head = f"seq {item.seq}  {fmt_time(item.saved_at)}  {escape(item.title)}"
        out.write(s.bold(head + node) + "\n")
        print_value_changes(ctx, changes, out)
    return ctx.status()


def _replay_records(ctx: Ctx, inv: str, from_seq: int, to_seq: int | None, out: IO[str]) -> int:
    assert ctx.opened is not None
    a = ctx.args
    s = ctx.style
    steps = fx.walk(
        ctx.opened.log.log, inv, from_seq=from_seq, to_seq=to_seq, tolerant=True, diffs=True,
        counts=True,
    )  # fmt: skip
    for item in steps:
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            if ctx.json:
                out.write(to_json(unreadable_doc(item)) + "\n")
            else:
                out.write(s.red(f"!! {item}") + "\n")
            continue
        times = item.instance_saved_at()
        if ctx.json:
            doc = walk_doc(item)
            doc["node"] = ", ".join(fan_out_nodes(item)) or None
            doc["changes"] = changes = fx.plain(item.diff)
            for change, t in zip(changes["instances"] if times else (), times, strict=True):
                change["saved_at"] = t
            out.write(to_json(doc) + "\n")
            continue
        head = f"seq {item.seq}  {fmt_time(item.saved_at)}  {kind_label(item)} ({item.frame_type})"
        if item.compacted is not None:
            head += f"  [compacted: stands for original seq {item.compacted.seq}]"
        out.write(s.bold(head) + "\n")
        if item.resumed:
            out.write(
                s.yellow("  (rebuilt again from this frame: what changed since the unreadable "
                         "seqs is unknown)") + "\n"
            )  # fmt: skip
        elif item.diff is not None:
            for line in diff_lines(item.diff, s, full=a.full, times=times) or ["  (no changes)"]:
                out.write(line + "\n")
    return ctx.status()
