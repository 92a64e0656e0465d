"""Rendering, in one place: every answer ``ckptlog`` prints, as text tables or JSON.

Invariants:
- stdout carries the answer (tables, or JSON with ``--json``); text from the log is escaped
  (eventlog.read.text.escape) before it reaches a terminal; colour comes from the context's
  style only.
- JSON is the same data the text shows: every Struct as an object keyed by field name, times
  as epoch seconds with an ISO 8601 twin.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import IO, Any, Final

import msgspec

from eventlog import forensics as fx
from eventlog.cli.context import Ctx
from eventlog.cli_render import table as _table
from eventlog.read.diffs import value_lines
from eventlog.read.forks import origin_doc
from eventlog.read.text import brief, escape, fmt_time, iso_time
from eventlog.read.values import json_bytes
from eventlog.reports import Problem, VerifyReport
from eventlog.streams import Step, StreamInfo

__all__ = [
    "STATE_LINES_MAX",
    "brief",
    "escape",
    "fmt_time",
    "iso_time",
    "print_value",
    "print_verify",
    "show_none",
    "step_doc",
    "table",
    "to_json",
    "unreadable_doc",
]

STATE_LINES_MAX: Final = 40  # lines of state JSON `show` prints before eliding (--full: all)


def to_json(obj: Any) -> str:
    """JSON text of ``obj`` with every Struct as an object keyed by field name."""
    return json_bytes(obj).decode()


def problem_json(p: Problem | fx.Unreadable) -> dict[str, Any]:
    return msgspec.to_builtins(p)  # type: ignore[no-any-return]


def table(
    headers: Sequence[str] | None,
    rows: Iterable[Sequence[str]],
    align: str,
    out: IO[str],
    *,
    colour: bool = False,
) -> None:
    """Aligned columns (eventlog.cli_render.table: a rich table, escaped text, no wrapping)."""
    _table(headers, rows, align, out, colour=colour)


def print_value(ctx: Ctx, label: str, value: Any) -> None:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    lines = text.splitlines()
    ctx.out.write(f"{label}:\n")
    full = getattr(ctx.args, "full", False)
    shown = lines if full or len(lines) <= STATE_LINES_MAX else lines[:STATE_LINES_MAX]
    for line in shown:
        ctx.out.write(f"  {escape(line)}\n")
    if len(shown) < len(lines):
        ctx.out.write(
            ctx.style.dim(f"  ... {len(lines) - len(shown):,} more lines (--full or --json)") + "\n"
        )


def show_none(ctx: Ctx, inv: str, seq: int, last: int, why: str) -> int:
    if ctx.json:
        ctx.out.write(to_json({"invocation_id": inv, "seq": seq, "last_seq": last, "record": None}))
        ctx.out.write("\n")
    else:
        ctx.out.write(f"{inv}: no record at seq {seq} of {last}: {why}\n")
    return 0


def unreadable_doc(item: fx.Unreadable) -> dict[str, Any]:
    return {
        "seq": item.seq,
        "last_seq": item.last_seq,
        "unreadable": item.problem,
        "detail": item.detail,
    }


def step_doc(info: StreamInfo, v: Step, last: int) -> dict[str, Any]:
    """A step of a stream as JSON (``show``, ``history``, ``replay``)."""
    return {
        "invocation_id": info.stream,
        "type": info.kind,
        "seq": v.seq,
        "last_seq": last,
        "global_seq": v.global_seq,
        "saved_at": v.saved_at,
        "saved_at_iso": iso_time(v.saved_at),
        "kind": v.kind,
        "label": v.label,
        "ref": v.ref,
        "node": v.node,
        "checksum": v.checksum.hex(),
        "view": v.value,
    }


def walk_doc(step: fx.Step) -> dict[str, Any]:
    """A checkpoint walk step as JSON (``history``, ``replay``)."""
    doc: dict[str, Any] = {
        "seq": step.seq,
        "global_seq": step.global_seq,
        "saved_at": step.saved_at,
        "saved_at_iso": iso_time(step.saved_at),
        "kind": step.kind,
        "instance_saves": step.instance_saves,
        "frame": step.frame_type,
        "stored_bytes": step.stored_bytes,
        "checksum": step.checksum.hex(),
        "completed_nodes": len(step.head.positions) if step.head is not None else None,
        "fan_out": step.counts,
    }
    if step.compacted is not None:
        c = step.compacted
        doc["compacted"] = {
            "original_seq": c.seq,
            "original_checksum": c.checksum.hex(),
            "original_stream_id": c.stream_id,
            "compacted_at": c.compacted_at,
        }
    if step.forked is not None:
        doc["forked_from"] = origin_doc(step.forked)
    return doc


def print_step_value(ctx: Ctx, info: StreamInfo, v: Step, last: int) -> None:
    """``show`` of a stream that is not a checkpoint record: the step and the value after it."""
    s = ctx.style
    rows = [
        [info.noun, s.bold(escape(info.display))],
        ["seq", f"{v.seq} of {last} ({escape(v.title)})"],
        ["saved at", fmt_time(v.saved_at)],
    ]
    if v.node:
        rows.append(["node", escape(v.node)])
    table(None, rows, "ll", ctx.out, colour=s.enabled)
    if v.value is None:
        ctx.out.write(f"nothing live at seq {v.seq}: {escape(v.title)}\n")
    elif isinstance(v.value, dict):
        for key, value in v.value.items():
            print_value(ctx, key.replace("_", " "), value)
    else:
        print_value(ctx, "view", v.value)


def print_value_changes(ctx: Ctx, changes: Sequence[Any], out: IO[str] | None = None) -> None:
    out = out if out is not None else ctx.out
    for line in value_lines(changes, ctx.style, getattr(ctx.args, "full", False)) or [
        "  (no changes)"
    ]:
        out.write(line + "\n")


def print_verify(ctx: Ctx, report: VerifyReport, label: str = "", *, finished: bool = True) -> None:
    if ctx.json:
        ctx.out.write(
            to_json(
                {
                    "path": label or ctx.args.path,
                    "ok": report.ok,
                    "finished": finished,
                    "frames": report.frames,
                    "streams": report.streams,
                    "problems": report.problems,
                }
            )
            + "\n"
        )
        return
    s = ctx.style
    head = f"{label or ctx.args.path}: {report.frames:,} frames in {report.streams:,} streams: "
    if not finished:
        head = f"{label or ctx.args.path}: verify could not read the log: "
    if report.ok:
        ctx.out.write(head + s.green("OK") + "\n")
        return
    ctx.out.write(head + s.red(f"{len(report.problems):,} problem(s)") + "\n")
    for p in report.problems:
        ctx.out.write("  " + s.red(str(p)) + "\n")
