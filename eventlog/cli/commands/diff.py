"""``ckptlog diff``: what changed in a stream between two seqs (text, JSON or JSON Patch)."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from eventlog import forensics as fx
from eventlog import read
from eventlog.cli import options
from eventlog.cli.commands.show import step_at
from eventlog.cli.context import OK, PROBLEMS, USAGE, CliError, Ctx, seq_arg
from eventlog.cli.render import escape, print_value_changes, to_json
from eventlog.read.diffs import diff_lines, json_patch, value_changes
from eventlog.read.forks import split_at
from eventlog.records import CheckpointRecord
from eventlog.streams import StreamInfo
from projections.history import diff_records


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.target(p)
    p.add_argument(
        "a",
        metavar="A",
        help="a seq (0: before the first save; 'latest'); or, as `diff PATH A@SEQ B@SEQ`, two "
        "invocations at one seq each (an original and its fork)",
    )
    p.add_argument("b", metavar="B", nargs="?", help="a seq (or 'latest')")
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
    if a.b is None:
        pair = _pair(a.invocation, a.a) if a.thread is None else None
        if pair is not None:
            return _diff_pair(ctx, *pair)
        if a.invocation is None:
            raise CliError(
                "give ID A B (two seqs of one stream) or A@SEQ B@SEQ (two streams, one seq "
                "each: an original and its fork)",
                USAGE,
            )
        a.invocation, a.a, a.b = None, a.invocation, a.a  # `--thread T A B`: two seqs
    found = ctx.resolve()
    assert found is not None
    inv, info = found
    last = fx.last_seq(cl, inv)
    seq_a, seq_b = seq_arg(a.a, last, inv), seq_arg(a.b, last, inv)
    if not info.records:
        return _diff_steps(ctx, info, seq_a, seq_b)
    records = [_record(ctx, inv, seq) for seq in (seq_a, seq_b)]
    return _print_records(ctx, records, inv, seq_a, inv, seq_b)


def _record(ctx: Ctx, inv: str, seq: int) -> CheckpointRecord | None:
    """The record of ``inv`` as of ``seq`` (``None``: seq 0, or deleted then)."""
    if seq == 0:
        return None
    assert ctx.opened is not None
    cl = ctx.opened.log
    for item in fx.walk(cl.log, inv, from_seq=seq, to_seq=seq, tolerant=True):
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            raise CliError(
                f"the record of {inv!r} at seq {seq} cannot be read, so there is nothing "
                "to diff against",
                PROBLEMS,
            )
        # An application event at seq: the record as of it (the frames before).
        return item.record() if item.is_record else cl.record_at(inv, seq)
    raise CliError(f"the record of {inv!r} at seq {seq} cannot be read", PROBLEMS)


def _print_records(
    ctx: Ctx,
    records: list[CheckpointRecord | None],
    inv_a: str,
    seq_a: int,
    inv_b: str,
    seq_b: int,
) -> int:
    a = ctx.args
    if a.format == "json-patch":
        docs = [fx.plain(fx.record_content(r)) if r is not None else None for r in records]
        ctx.out.write(to_json(json_patch(docs[0], docs[1])) + "\n")
        return OK
    if inv_a != inv_b:  # two invocations: their ids differ by design, not by what they hold
        records = [
            None if r is None else msgspec.structs.replace(r, invocation_id="") for r in records
        ]
    changes = diff_records(records[0], records[1])
    if ctx.json:
        doc: dict[str, Any] = {"invocation_id": inv_a, "from_seq": seq_a, "to_seq": seq_b}
        if inv_a != inv_b:
            doc = {"from": f"{inv_a}@{seq_a}", "to": f"{inv_b}@{seq_b}"}
        ctx.out.write(to_json({**doc, "changes": changes}) + "\n")
        return OK
    title = (
        f"{escape(inv_a)}: seq {seq_a} -> seq {seq_b}"
        if inv_a == inv_b
        else f"{escape(inv_a)}@{seq_a} -> {escape(inv_b)}@{seq_b}"
    )
    ctx.out.write(ctx.style.bold(title) + "\n")
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


def _pair(first: str | None, second: str) -> tuple[tuple[str, str], tuple[str, str]] | None:
    if first is None:
        return None
    a, b = split_at(first), split_at(second)
    return None if a is None or b is None else (a, b)


def _diff_pair(ctx: Ctx, one: tuple[str, str], two: tuple[str, str]) -> int:
    """Two streams, one seq each (an original and its fork): records, or any view's values."""
    assert ctx.opened is not None
    log = ctx.opened.log.log
    ends: list[tuple[str, StreamInfo, int]] = []
    for wanted, seq_text in (one, two):
        found = read.find(log, wanted)
        if found is None:
            raise CliError(
                f"no invocation {wanted!r} in the log at {ctx.args.path!r}; list the "
                "invocations it holds with `ckptlog ls PATH --all`",
                USAGE,
            )
        inv, info = found
        ends.append((inv, info, seq_arg(seq_text, fx.last_seq(ctx.opened.log, inv), inv)))
    (inv_a, info_a, seq_a), (inv_b, info_b, seq_b) = ends
    if info_a.records and info_b.records:
        records = [_record(ctx, inv_a, seq_a), _record(ctx, inv_b, seq_b)]
        return _print_records(ctx, records, inv_a, seq_a, inv_b, seq_b)
    va = step_at(ctx, info_a, seq_a).value if seq_a else None  # type: ignore[union-attr]
    vb = step_at(ctx, info_b, seq_b).value if seq_b else None  # type: ignore[union-attr]
    if ctx.args.format == "json-patch":
        ctx.out.write(to_json(json_patch(va, vb)) + "\n")
        return OK
    changes = value_changes(va, vb)
    if ctx.json:
        doc = {"from": f"{inv_a}@{seq_a}", "to": f"{inv_b}@{seq_b}", "changes": changes}
        ctx.out.write(to_json(doc) + "\n")
        return OK
    title = f"{escape(info_a.display)}@{seq_a} -> {escape(info_b.display)}@{seq_b}"
    ctx.out.write(ctx.style.bold(title) + "\n")
    print_value_changes(ctx, changes)
    return ctx.status()
