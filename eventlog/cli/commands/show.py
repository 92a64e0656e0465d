"""``ckptlog show``: a stream as of one seq or time; a checkpoint record in full, any other
stream as its view shows it."""

from __future__ import annotations

import argparse
from typing import Any, Final

from eventlog import forensics as fx
from eventlog import read
from eventlog.cli import options
from eventlog.cli.context import PROBLEMS, USAGE, CliError, Ctx, seq_arg
from eventlog.cli.render import (
    brief,
    escape,
    fmt_time,
    iso_time,
    print_step_value,
    print_value,
    show_none,
    step_doc,
    table,
    to_json,
)
from eventlog.frames import CHECKPOINT_FRAMES
from eventlog.read.forks import forked_from, origin_doc, origin_text
from eventlog.read.text import parse_time
from eventlog.streams import Step, StreamInfo

INSTANCE_STATES: Final = ("completed", "in_flight", "not_started", "error")


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.target(p)
    when = p.add_mutually_exclusive_group()
    when.add_argument("--at", metavar="SEQ", help="the record as of stream seq SEQ")
    when.add_argument("--as-of", metavar="TIME", help="the record as it stood at TIME")
    p.add_argument("--instances", action="store_true", help="list every started instance")
    p.add_argument(
        "--state",
        choices=INSTANCE_STATES,
        help="list the fan-out instances in this state (error: completed with an error)",
    )
    options.full(p, "print the whole state")


def run(ctx: Ctx) -> int:
    cl = ctx.open().log
    found = ctx.resolve()
    assert found is not None
    inv, info = found
    last = fx.last_seq(cl, inv)
    a = ctx.args
    if not info.records:
        return _show_step(ctx, info, last)
    if a.at is None and a.as_of is None:
        record = cl.load(inv)
        if record is not None:
            return _show_record(ctx, inv, last, last, record, None)
        seq = last
    elif a.as_of is not None:
        when = parse_time(a.as_of)
        seq = _seq_as_of(ctx, inv, when)
        if seq == 0:
            return show_none(ctx, inv, 0, last, f"nothing was saved by {fmt_time(when)}")
    else:
        seq = seq_arg(a.at, last, inv)
        if seq == 0:
            return show_none(ctx, inv, 0, last, "seq 0 is before the first save")
    for item in fx.walk(cl.log, inv, from_seq=seq, to_seq=seq, tolerant=True):
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            raise CliError(
                f"the record of {inv!r} at seq {seq} cannot be read: {item.problem}: {item.detail}",
                PROBLEMS,
            )
        if item.is_record:
            record = item.record()
            if record is None:
                return show_none(ctx, inv, seq, last, f"deleted at seq {seq}")
            return _show_record(ctx, inv, seq, last, record, item)
    # The frame at seq is an application event appended beside the saves: the record as of it.
    record = cl.record_at(inv, seq)
    if record is not None:
        return _show_record(ctx, inv, seq, last, record, None)
    if not any(
        not isinstance(f, fx.Unreadable) and isinstance(f.frame, CHECKPOINT_FRAMES)
        for f in fx.read_frames(cl.log, inv, 1, seq)
    ):
        raise CliError(
            f"{inv!r} holds no checkpoint record by seq {seq}: its frames are application "
            f"events; list them with `ckptlog history PATH {inv}` or `ckptlog export`",
            USAGE,
        )
    return show_none(ctx, inv, seq, last, "deleted (the last record frame before it is a delete)")


def _seq_as_of(ctx: Ctx, inv: str, when: float) -> int:
    assert ctx.opened is not None
    found = 0
    for item in fx.read_frames(ctx.opened.log.log, inv):
        if isinstance(item, fx.Unreadable):
            if item.breaks_fold:
                ctx.warn(
                    f"seq {item.seq} of {inv!r} is unreadable, so its save time is unknown: the "
                    "point found may be off"
                )
            continue
        if fx.frame_saved_at(item.frame) <= when:
            found = item.seq
    return found


def step_at(ctx: Ctx, info: StreamInfo, seq: int) -> Step | None:
    """The step at ``seq`` of a stream (``None``: seq 0), unreadable frames reported."""
    assert ctx.opened is not None
    found, unreadable = read.step_at(ctx.opened.log.log, info.stream, info, seq)
    for item in unreadable:
        ctx.report_unreadable(item)
    return found


def _show_step(ctx: Ctx, info: StreamInfo, last: int) -> int:
    assert ctx.opened is not None
    a = ctx.args
    inv = info.stream
    if a.as_of is not None:
        when = parse_time(a.as_of)
        seq = read.seq_as_of(ctx.opened.log.log, inv, info, when)
        if seq == 0:
            return show_none(ctx, inv, 0, last, f"nothing was saved by {fmt_time(when)}")
    else:
        seq = seq_arg(a.at, last, inv) if a.at is not None else last
        if seq == 0:
            return show_none(ctx, inv, 0, last, "seq 0 is before the first save")
    v = step_at(ctx, info, seq)
    if v is None or v.seq != seq:
        raise CliError(f"the frame of {inv!r} at seq {seq} cannot be read", PROBLEMS)
    if ctx.json:
        ctx.out.write(to_json(step_doc(info, v, last)) + "\n")
        return ctx.status()
    print_step_value(ctx, info, v, last)
    return ctx.status()


def _show_record(ctx: Ctx, inv: str, seq: int, last: int, record: Any, step: fx.Step | None) -> int:
    assert ctx.opened is not None
    link = forked_from(ctx.opened.log.log, inv)
    if ctx.json:
        doc = {
            "invocation_id": inv,
            "seq": seq,
            "last_seq": last,
            "saved_at_iso": iso_time(record.last_saved_at),
            "record": fx.record_content(record),
        }
        if step is not None:
            doc["kind"], doc["frame"] = step.kind, step.frame_type
            doc["checksum"] = step.checksum.hex()
        if link is not None:
            doc["forked_from"] = origin_doc(link)
        ctx.out.write(to_json(doc) + "\n")
        return 0
    s, out = ctx.style, ctx.out
    where = f"{seq} of {last}" + (f" ({step.kind}, {step.frame_type} frame)" if step else "")
    table(
        None,
        [
            ["invocation", s.bold(escape(inv))],
            ["correlation", escape(record.correlation_id)],
            ["seq", where],
            ["saved at", fmt_time(record.last_saved_at)],
            ["schema", record.schema_version or "-"],
            *([["origin", escape(origin_text(link))]] if link is not None else []),
        ],
        "ll",
        out,
        colour=ctx.style.enabled,
    )
    out.write(f"completed nodes ({len(record.completed_positions)}):\n")
    if record.completed_positions:
        table(
            ["  #", "NAMESPACE", "NODE", "STEP", "ATTEMPT", "FAN-OUT INDEX"],
            (
                [
                    f"  {i}",
                    escape("/".join(p.namespace)) or "-",
                    escape(p.node_name),
                    str(p.step),
                    str(p.attempt_index),
                    "-" if p.fan_out_index is None else str(p.fan_out_index),
                ]
                for i, p in enumerate(record.completed_positions, 1)
            ),
            "rllrrr",
            out,
            colour=ctx.style.enabled,
        )
    for fo in record.fan_out_progress:
        states = {"completed": 0, "in_flight": 0, "not_started": 0}
        errors = 0
        for inst in fo.instances:
            states[inst.state] = states.get(inst.state, 0) + 1
            errors += inst.state == "completed" and inst.result_is_error
        ns = escape("/".join(fo.namespace))
        out.write(
            f"fan-out {s.bold(escape(fo.fan_out_node_name))}{f' in {ns}' if ns else ''}: "
            f"{fo.instance_count:,} instances: {states['completed']:,} completed"
            + (f" ({s.red(f'{errors:,} errors')})" if errors else "")
            + f", {states['in_flight']:,} in flight, {states['not_started']:,} not started\n"
        )
        if ctx.args.instances or ctx.args.state:
            table(
                ["  INDEX", "STATE", "RESULT"],
                (
                    [
                        f"  {i}",
                        inst.state,
                        (s.red("error: ") if inst.result_is_error else "") + brief(inst.result),
                    ]
                    for i, inst in enumerate(fo.instances)
                    if _instance_wanted(inst, ctx.args.state)
                ),
                "rll",
                out,
                colour=ctx.style.enabled,
            )
    print_value(ctx, "state", record.state)
    print_value(ctx, "parent states", list(record.parent_states))
    return 0


def _instance_wanted(inst: Any, state: str | None) -> bool:
    """``--state``: one state (``error``: completed with an error result); default: started."""
    if state is None:
        return bool(inst.state != "not_started")
    if state == "error":
        return bool(inst.state == "completed" and inst.result_is_error)
    return bool(inst.state == state)
