"""``ckptlog diff``: what changed in a stream between two seqs (text, JSON or JSON Patch)."""

from __future__ import annotations

import argparse

from eventlog import forensics as fx
from eventlog.cli import options
from eventlog.cli.commands.show import step_at
from eventlog.cli.context import OK, PROBLEMS, CliError, Ctx, seq_arg
from eventlog.cli.render import escape, print_value_changes, to_json
from eventlog.read.diffs import diff_lines, json_patch, value_changes
from eventlog.records import CheckpointRecord
from eventlog.streams import StreamInfo
from projections.history import diff_records


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.target(p)
    p.add_argument("a", metavar="A", help="a seq (0: before the first save; 'latest')")
    p.add_argument("b", metavar="B", help="a seq (or 'latest')")
    options.full(p, "list every change, with whole values")
    p.add_argument(
        "--format",
        choices=("text", "json-patch"),
        default="text",
        help="json-patch: the RFC 6902 operations that turn the record at A into the one at B",
    )


def run(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    found = ctx.resolve()
    assert found is not None
    inv, info = found
    last = fx.last_seq(cl, inv)
    seq_a, seq_b = seq_arg(a.a, last, inv), seq_arg(a.b, last, inv)
    if not info.records:
        return _diff_steps(ctx, info, seq_a, seq_b)
    records: list[CheckpointRecord | None] = []
    for seq in (seq_a, seq_b):
        if seq == 0:
            records.append(None)
            continue
        got = False
        for item in fx.walk(cl.log, inv, from_seq=seq, to_seq=seq, tolerant=True):
            if isinstance(item, fx.Unreadable):
                ctx.report_unreadable(item)
                raise CliError(
                    f"the record of {inv!r} at seq {seq} cannot be read, so there is nothing "
                    "to diff against",
                    PROBLEMS,
                )
            # An application event at seq: the record as of it (the frames before).
            records.append(item.record() if item.is_record else cl.record_at(inv, seq))
            got = True
        if not got:
            raise CliError(f"the record of {inv!r} at seq {seq} cannot be read", PROBLEMS)
    if a.format == "json-patch":
        docs = [fx.plain(fx.record_content(r)) if r is not None else None for r in records]
        ctx.out.write(to_json(json_patch(docs[0], docs[1])) + "\n")
        return OK
    changes = diff_records(records[0], records[1])
    if ctx.json:
        ctx.out.write(
            to_json({"invocation_id": inv, "from_seq": seq_a, "to_seq": seq_b, "changes": changes})
            + "\n"
        )
        return OK
    ctx.out.write(ctx.style.bold(f"{escape(inv)}: seq {seq_a} -> seq {seq_b}") + "\n")
    for line in diff_lines(changes, ctx.style, full=a.full) or ["  (no changes)"]:
        ctx.out.write(line + "\n")
    return OK


def _diff_steps(ctx: Ctx, info: StreamInfo, seq_a: int, seq_b: int) -> int:
    a = ctx.args
    va = step_at(ctx, info, seq_a).value if seq_a else None  # type: ignore[union-attr]
    vb = step_at(ctx, info, seq_b).value if seq_b else None  # type: ignore[union-attr]
    if a.format == "json-patch":
        ctx.out.write(to_json(json_patch(va, vb)) + "\n")
        return OK
    changes = value_changes(va, vb)
    if ctx.json:
        doc = {"invocation_id": info.stream, "from_seq": seq_a, "to_seq": seq_b, "changes": changes}
        ctx.out.write(to_json(doc) + "\n")
        return OK
    ctx.out.write(ctx.style.bold(f"{escape(info.display)}: seq {seq_a} -> seq {seq_b}") + "\n")
    print_value_changes(ctx, changes)
    return ctx.status()
