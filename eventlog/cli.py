"""``ckptlog``: look into a checkpoint log from the shell (eventlog.forensics underneath).

Invariants:
- Read commands open the log read-only and never block a running writer (LMDB readers take
  no lock the writer waits for); only ``compact`` writes, and only to its new DEST.
- stdout carries the answer (tables, or JSON with ``--json``); stderr carries progress bars
  (only on a terminal), warnings and the one-line ``ckptlog: error: ...``. Colour only when
  stdout is a terminal and ``NO_COLOR`` is unset (``--color`` overrides).
- Damage never crashes a command: what is readable is printed, what is not is named, and the
  exit status says so (see ``EXIT_CODES``). No traceback reaches the user.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any, Final, NoReturn

import msgspec

from backends.lmdb_salvage import probe_in_child
from eventlog import forensics as fx
from eventlog.errors import CheckpointError, CorruptFrame, NotALog, StorageError, UnsupportedFormat
from eventlog.log import Problem, VerifyReport
from eventlog.records import CheckpointRecord
from projections.history import InstanceDiff, RecordDiff, ValueChange, diff_records

DATA_FILE: Final = fx.DATA_FILE
OK: Final = 0
PROBLEMS: Final = 1
USAGE: Final = 2
UNREADABLE: Final = 3
INTERNAL: Final = 4
EXIT_CODES: Final = f"""\
exit status:
  {OK}  success
  {PROBLEMS}  verify found problems, or the log is damaged where a command had to read
     (what was readable is printed; what was not is named on stderr)
  {USAGE}  usage error or bad input (unknown invocation, seq out of range, bad time, DEST
     not empty)
  {UNREADABLE}  PATH is not a ckptlog log, or it cannot be opened or read at all
  {INTERNAL}  internal error (a bug in ckptlog: please report it with the message)
"""
STATE_LINES_MAX: Final = 40  # lines of state JSON `show` prints before eliding (--full: all)
DIFF_ITEMS_MAX: Final = 50  # changes of one kind `diff`/`replay` print (--full: all)


class CliError(Exception):
    """A failure to report as one line with an exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- output: colours, times, values, tables ---------------------------------------------------


class Style:
    """ANSI colours, or nothing."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)


def colour_enabled(choice: str, stream: IO[str]) -> bool:
    if choice == "always":
        return True
    if choice == "never" or "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return fx.isatty(stream)


def fmt_time(t: float | None) -> str:
    """UTC, ISO 8601 with milliseconds (unambiguous across machines)."""
    if t is None:
        return "-"
    try:
        when = dt.datetime.fromtimestamp(t, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return repr(t)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def fmt_gap(seconds: float | None) -> str:
    """Time since the previous save: a long one is where a job stopped (or waited)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    sign = "-" if seconds < 0 else "+"  # stamps need not rise: saved_at is the caller's
    size = abs(seconds)
    if size < 1:
        return f"{sign}{size * 1e3:.1f}ms"
    if size < 120:
        return f"{sign}{size:.1f}s"
    return f"{sign}{size / 60:,.1f}min"


def parse_time(text: str) -> float:
    """Seconds since the epoch, or ISO 8601 (``Z`` or an offset; no offset means UTC)."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(value):
            return value
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(
            f"cannot read {text!r} as a time: give seconds since the epoch (1718100000.5) or "
            "ISO 8601 (2024-06-11T10:00:00Z; no offset means UTC)",
            USAGE,
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def brief(value: Any, width: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def table(
    headers: Sequence[str] | None, rows: Iterable[Sequence[str]], align: str, out: IO[str]
) -> None:
    """Aligned columns (``align``: one ``l`` or ``r`` per column); no header line for None."""
    body = [list(r) for r in rows]
    widths = [len(h) for h in headers] if headers is not None else [0] * len(align)
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(_visible(cell)))

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            pad = " " * (widths[i] - len(_visible(cell)))
            parts.append(cell + pad if align[i] == "l" else pad + cell)
        return "  ".join(parts).rstrip()

    if headers is not None:
        out.write(line(headers) + "\n")
    for row in body:
        out.write(line(row) + "\n")


def _visible(cell: str) -> str:
    """``cell`` without ANSI colour codes (for widths)."""
    out, i = [], 0
    while i < len(cell):
        if cell[i] == "\x1b":
            end = cell.find("m", i)
            i = end + 1 if end >= 0 else len(cell)
        else:
            out.append(cell[i])
            i += 1
    return "".join(out)


_json = msgspec.json.Encoder()


def to_json(obj: Any) -> str:
    """JSON text of ``obj`` with every Struct as an object keyed by field name."""
    value = fx.plain(obj)
    try:
        return _json.encode(value).decode()
    except (TypeError, ValueError):
        return _json.encode(fx.json_safe(value)).decode()


def problem_json(p: Problem | fx.Unreadable) -> dict[str, Any]:
    return msgspec.to_builtins(p)  # type: ignore[no-any-return]


# -- the command context -----------------------------------------------------------------------


class Ctx:
    """What every command gets: parsed arguments, output streams, style, the opened log."""

    def __init__(self, args: argparse.Namespace, out: IO[str], err: IO[str]) -> None:
        self.args = args
        self.out = out
        self.err = err
        self.style = Style(colour_enabled(getattr(args, "color", "auto"), out))
        self.err_style = Style(colour_enabled(getattr(args, "color", "auto"), err))
        self.json: bool = bool(getattr(args, "json", False))
        self.opened: fx.Opened | None = None
        self.unreadable = 0

    def open(self) -> fx.Opened:
        options: dict[str, Any] = {}
        key_file = getattr(self.args, "chain_key_file", None)
        if key_file:
            try:
                with open(key_file, "rb") as f:
                    options["chain_key"] = f.read()
            except OSError as e:
                raise CliError(f"cannot read --chain-key-file {key_file!r}: {e}", USAGE) from e
        try:
            self.opened = fx.open_readonly(self.args.path, probe=probe_in_child, **options)
        except (CheckpointError, OSError) as e:
            damaged = isinstance(e, (NotALog, StorageError))
            raise CliError(self._cannot_open(str(e), damaged), UNREADABLE) from e
        except Exception as e:
            if _is_storage_error(e):
                raise CliError(
                    self._cannot_open(f"its storage is damaged ({e})", True), UNREADABLE
                ) from e
            raise
        if self.args.command != "verify":
            for p in self.opened.problems:
                self.warn(str(p))
        return self.opened

    def _cannot_open(self, why: str, damaged: bool) -> str:
        message = f"cannot open {self.args.path!r}: {why}"
        check = fx.data_file_check(self.args.path) if damaged else None
        if check is not None and check.short:
            message += (
                f"; {DATA_FILE} is {check.file_bytes:,} bytes, shorter than the "
                f"{check.used_bytes:,} its last transaction uses: it was truncated"
            )
        return message

    def warn(self, message: str) -> None:
        self.err.write(self.err_style.yellow(f"ckptlog: warning: {message}") + "\n")

    def report_unreadable(self, item: fx.Unreadable) -> None:
        self.unreadable += 1
        self.err.write(self.err_style.red(f"ckptlog: unreadable: {item}") + "\n")

    def progress(self, label: str, unit: str = "frames") -> fx.ProgressBar:
        return fx.ProgressBar(label, unit=unit, stream=self.err)

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()
            self.opened = None


def _is_storage_error(e: BaseException) -> bool:
    """An error raised by the storage library itself (a damaged B-tree page, ...)."""
    return type(e).__module__.split(".")[0] == "lmdb"


# -- commands ----------------------------------------------------------------------------------


def cmd_ls(ctx: Ctx) -> int:
    cl = ctx.open().log
    rows = fx.invocations(cl, ctx.args.correlation_id, all_streams=ctx.args.all)
    if ctx.json:
        ctx.out.write(to_json(rows) + "\n")
        return OK
    if not rows:
        what = (
            f" with correlation id {ctx.args.correlation_id!r}" if ctx.args.correlation_id else ""
        )
        ctx.out.write(f"no invocations{what}\n")
        return OK
    s = ctx.style
    table(
        ["INVOCATION", "CORRELATION", "SAVES", "LAST SAVED (UTC)", "KIND", "NODES", "FAN-OUT"],
        (
            [
                r.invocation_id,
                r.correlation_id if r.correlation_id is not None else "-",
                f"{r.frames:,}",
                fmt_time(r.last_saved_at),
                s.dim("deleted") if r.deleted else (r.kind or "-"),
                str(r.completed_nodes),
                _fan_out_cell(r, s),
            ]
            for r in rows
        ),
        "llrllrl",
        ctx.out,
    )
    return OK


def _fan_out_cell(r: fx.Invocation, s: Style) -> str:
    if not r.fan_out_instances:
        return "-"
    cell = f"{r.completed_instances:,}/{r.fan_out_instances:,} done"
    if r.error_instances:
        cell += ", " + s.red(f"{r.error_instances:,} errors")
    return cell


def cmd_show(ctx: Ctx) -> int:
    cl = ctx.open().log
    inv = ctx.args.invocation
    last = fx.last_seq(cl, inv)
    a = ctx.args
    if a.at is None and a.as_of is None:
        record = cl.load(inv)
        seq = last
        if record is None:
            return _show_none(ctx, inv, seq, last, "deleted (its latest frame is a delete)")
        return _show_record(ctx, inv, seq, last, record, None)
    if a.as_of is not None:
        when = parse_time(a.as_of)
        seq = _seq_as_of(ctx, inv, when)
        if seq == 0:
            return _show_none(ctx, inv, 0, last, f"nothing was saved by {fmt_time(when)}")
    else:
        seq = _seq_arg(a.at, last, inv)
        if seq == 0:
            return _show_none(ctx, inv, 0, last, "seq 0 is before the first save")
    for item in fx.walk(cl.log, inv, from_seq=seq, to_seq=seq, tolerant=True):
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            raise CliError(
                f"the record of {inv!r} at seq {seq} cannot be read: {item.problem}: {item.detail}",
                PROBLEMS,
            )
        record = item.record()
        if record is None:
            return _show_none(ctx, inv, seq, last, f"deleted at seq {seq}")
        return _show_record(ctx, inv, seq, last, record, item)
    raise CliError(f"the record of {inv!r} at seq {seq} cannot be read", PROBLEMS)


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


def _seq_arg(text: str, last: int, inv: str) -> int:
    if text in ("latest", "head", "last"):
        return last
    try:
        seq = int(text)
    except ValueError:
        raise CliError(f"seq must be a number or 'latest', got {text!r}", USAGE) from None
    if not 0 <= seq <= last:
        raise CliError(
            f"seq {seq} is outside {inv!r}, whose seqs run 1..{last} (0: before the first save)",
            USAGE,
        )
    return seq


def _show_none(ctx: Ctx, inv: str, seq: int, last: int, why: str) -> int:
    if ctx.json:
        ctx.out.write(to_json({"invocation_id": inv, "seq": seq, "last_seq": last, "record": None}))
        ctx.out.write("\n")
    else:
        ctx.out.write(f"{inv}: no record at seq {seq} of {last}: {why}\n")
    return OK


def _show_record(ctx: Ctx, inv: str, seq: int, last: int, record: Any, step: fx.Step | None) -> int:
    if ctx.json:
        doc = {
            "invocation_id": inv,
            "seq": seq,
            "last_seq": last,
            "record": fx.record_content(record),
        }
        if step is not None:
            doc["kind"], doc["frame"] = step.kind, step.frame_type
            doc["checksum"] = step.checksum.hex()
        ctx.out.write(to_json(doc) + "\n")
        return OK
    s, out = ctx.style, ctx.out
    where = f"{seq} of {last}" + (f" ({step.kind}, {step.frame_type} frame)" if step else "")
    table(
        None,
        [
            ["invocation", s.bold(inv)],
            ["correlation", record.correlation_id],
            ["seq", where],
            ["saved at", fmt_time(record.last_saved_at)],
            ["schema", record.schema_version or "-"],
        ],
        "ll",
        out,
    )
    out.write(f"completed nodes ({len(record.completed_positions)}):\n")
    if record.completed_positions:
        table(
            ["  #", "NAMESPACE", "NODE", "STEP", "ATTEMPT", "FAN-OUT INDEX"],
            (
                [
                    f"  {i}",
                    "/".join(p.namespace) or "-",
                    p.node_name,
                    str(p.step),
                    str(p.attempt_index),
                    "-" if p.fan_out_index is None else str(p.fan_out_index),
                ]
                for i, p in enumerate(record.completed_positions, 1)
            ),
            "rllrrr",
            out,
        )
    for fo in record.fan_out_progress:
        states = {"completed": 0, "in_flight": 0, "not_started": 0}
        errors = 0
        for inst in fo.instances:
            states[inst.state] = states.get(inst.state, 0) + 1
            errors += inst.state == "completed" and inst.result_is_error
        ns = "/".join(fo.namespace)
        out.write(
            f"fan-out {s.bold(fo.fan_out_node_name)}{f' in {ns}' if ns else ''}: "
            f"{fo.instance_count:,} instances: {states['completed']:,} completed"
            + (f" ({s.red(f'{errors:,} errors')})" if errors else "")
            + f", {states['in_flight']:,} in flight, {states['not_started']:,} not started\n"
        )
        if ctx.args.instances:
            table(
                ["  INDEX", "STATE", "RESULT"],
                (
                    [
                        f"  {i}",
                        inst.state,
                        (s.red("error: ") if inst.result_is_error else "") + brief(inst.result),
                    ]
                    for i, inst in enumerate(fo.instances)
                    if inst.state != "not_started"
                ),
                "rll",
                out,
            )
    _print_value(ctx, "state", record.state)
    _print_value(ctx, "parent states", list(record.parent_states))
    return OK


def _print_value(ctx: Ctx, label: str, value: Any) -> None:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    lines = text.splitlines()
    ctx.out.write(f"{label}:\n")
    shown = lines if ctx.args.full or len(lines) <= STATE_LINES_MAX else lines[:STATE_LINES_MAX]
    for line in shown:
        ctx.out.write(f"  {line}\n")
    if len(shown) < len(lines):
        ctx.out.write(
            ctx.style.dim(f"  ... {len(lines) - len(shown):,} more lines (--full or --json)") + "\n"
        )


def cmd_history(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    inv = a.invocation
    fx.last_seq(cl, inv)
    since = parse_time(a.since) if a.since else None
    until = parse_time(a.until) if a.until else None
    kinds = fx.check_kinds(_split(a.kind)) if a.kind else None
    s = ctx.style
    rows: list[list[str]] = []
    first = True
    previous: float | None = None  # the saved_at of the frame before (gaps show crashes)
    if ctx.json:
        ctx.out.write("[")
    for item in fx.walk(cl.log, inv, tolerant=True, counts=True):
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            if ctx.json:
                ctx.out.write(("\n" if first else ",\n") + to_json(_unreadable_json(item)))
                first = False
            else:
                seqs = str(item.seq) if item.seq == item.last_seq else f"{item.seq}-{item.last_seq}"
                rows.append([s.red(seqs), s.red(f"!! {item.problem}"), "", "", "", "", "", ""])
            previous = None
            continue
        gap = item.saved_at - previous if previous is not None else None
        previous = item.saved_at
        if not fx.in_window(item.saved_at, since, until) or (
            kinds is not None and item.kind not in kinds
        ):
            continue
        if ctx.json:
            ctx.out.write(("\n" if first else ",\n") + to_json(_step_json(item)))
            first = False
            continue
        kind = _kind_label(item) + (" (compacted)" if item.compacted is not None else "")
        rows.append(
            [
                str(item.seq),
                fmt_time(item.saved_at),
                fmt_gap(gap),
                s.dim(kind) if item.kind == "delete" else kind,
                item.frame_type,
                f"{item.stored_bytes:,}",
                str(len(item.head.positions)) if item.head is not None else "-",
                _counts_cell(item.counts),
            ]
        )
    if ctx.json:
        ctx.out.write("\n]\n")
    else:
        table(
            ["SEQ", "SAVED AT (UTC)", "AFTER", "KIND", "FRAME", "BYTES", "NODES", "FAN-OUT DONE"],
            rows,
            "rlrllrrl",
            ctx.out,
        )
        if not rows:
            ctx.out.write("(no saves match)\n")
    return PROBLEMS if ctx.unreadable else OK


def _kind_label(step: fx.Step) -> str:
    """The save kind; a batch says how many instance saves it commits (``x256``)."""
    n = step.instance_saves
    return step.kind if n is None else f"{step.kind} x{n:,}"


def _split(values: list[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _counts_cell(counts: dict[str, int]) -> str:
    total = counts.get("total", 0)
    if not total:
        return "-"
    cell = f"{counts['completed']:,}/{total:,}"
    if counts.get("errors"):
        cell += f" ({counts['errors']:,} errors)"
    return cell


def _step_json(step: fx.Step) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "seq": step.seq,
        "global_seq": step.global_seq,
        "saved_at": step.saved_at,
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
    return doc


def _unreadable_json(item: fx.Unreadable) -> dict[str, Any]:
    return {
        "seq": item.seq,
        "last_seq": item.last_seq,
        "unreadable": item.problem,
        "detail": item.detail,
    }


def cmd_diff(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    inv = a.invocation
    last = fx.last_seq(cl, inv)
    seq_a, seq_b = _seq_arg(a.a, last, inv), _seq_arg(a.b, last, inv)
    records: list[CheckpointRecord | None] = []
    for seq in (seq_a, seq_b):
        if seq == 0:
            records.append(None)
            continue
        found = False
        for item in fx.walk(cl.log, inv, from_seq=seq, to_seq=seq, tolerant=True):
            if isinstance(item, fx.Unreadable):
                ctx.report_unreadable(item)
                raise CliError(
                    f"the record of {inv!r} at seq {seq} cannot be read, so there is nothing "
                    "to diff against",
                    PROBLEMS,
                )
            records.append(item.record())
            found = True
        if not found:
            raise CliError(f"the record of {inv!r} at seq {seq} cannot be read", PROBLEMS)
    changes = diff_records(records[0], records[1])
    if ctx.json:
        ctx.out.write(
            to_json({"invocation_id": inv, "from_seq": seq_a, "to_seq": seq_b, "changes": changes})
            + "\n"
        )
        return OK
    ctx.out.write(ctx.style.bold(f"{inv}: seq {seq_a} -> seq {seq_b}") + "\n")
    lines = diff_lines(changes, ctx.style, full=a.full)
    for line in lines or ["  (no changes)"]:
        ctx.out.write(line + "\n")
    return OK


def diff_lines(
    d: RecordDiff, s: Style, *, full: bool, indent: str = "  ", times: Sequence[float] = ()
) -> list[str]:
    """A diff as human lines: ``+`` added (green), ``-`` removed (red), ``~`` changed.

    ``times`` (a batch's, parallel to ``d.instances``) starts each instance line with the time
    of its change."""
    out: list[str] = []
    if d.existed_before != d.exists_after:
        out.append(
            indent + (s.green("+ record created") if d.exists_after else s.red("- record deleted"))
        )
        if not d.exists_after:
            return out
    out.extend(indent + _value_line(c, s) for c in d.fields)
    out.extend(
        _capped(
            [indent + s.red(f"- node {_pos(p)}") for p in d.positions_removed]
            + [indent + s.green(f"+ node {_pos(p)}") for p in d.positions_added],
            full,
            "node changes",
            s,
            indent,
        )
    )
    out.extend(
        _capped([indent + _value_line(c, s) for c in d.state], full, "value changes", s, indent)
    )
    for fo in d.fan_outs:
        where = " in " + "/".join(fo.namespace) if fo.namespace else ""
        text = f"fan-out {fo.fan_out}{where} ({fo.instance_count:,} instances)"
        out.append(indent + (s.green("+ " + text) if fo.op == "added" else s.red("- " + text)))
    stamps = [s.dim(fmt_time(t)) + "  " for t in times] if times else [""] * len(d.instances)
    out.extend(
        _capped(
            [
                indent + stamp + _instance_line(i, s)
                for i, stamp in zip(d.instances, stamps, strict=True)
            ],
            full,
            "instance changes",
            s,
            indent,
        )
    )
    return out


def _capped(lines: list[str], full: bool, what: str, s: Style, indent: str) -> list[str]:
    if full or len(lines) <= DIFF_ITEMS_MAX:
        return lines
    more = len(lines) - DIFF_ITEMS_MAX
    return [*lines[:DIFF_ITEMS_MAX], indent + s.dim(f"... {more:,} more {what} (--full or --json)")]


def _pos(p: Any) -> str:
    ns = "/".join(p.namespace)
    extra = f" attempt {p.attempt_index}" if p.attempt_index else ""
    if p.fan_out_index is not None:
        extra += f" fan-out index {p.fan_out_index}"
    return f"{ns + '/' if ns else ''}{p.node_name} step {p.step}{extra}"


def _value_line(c: ValueChange, s: Style) -> str:
    if c.op == "added":
        return s.green(f"+ {c.path}: {brief(c.new)}")
    if c.op == "removed":
        return s.red(f"- {c.path}: {brief(c.old)}")
    return s.yellow(f"~ {c.path}: ") + s.red(brief(c.old, 40)) + " -> " + s.green(brief(c.new, 40))


def _instance_line(i: InstanceDiff, s: Style) -> str:
    line = f"~ {i.fan_out}[{i.index}]: {i.old_state} -> "
    line = s.yellow(line) + (s.red(i.new_state) if i.result_is_error else s.green(i.new_state))
    if i.new_state == "completed":
        label = "error" if i.result_is_error else "result"
        line += f"  {label} {brief(i.new_result, 40)}"
    elif i.inner_positions_added:
        line += f"  +{i.inner_positions_added} inner node(s)"
    return line


def cmd_replay(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    inv = a.invocation
    last = fx.last_seq(cl, inv)
    from_seq = _seq_arg(a.from_seq, last, inv) if a.from_seq else 1
    to_seq = _seq_arg(a.to_seq, last, inv) if a.to_seq else None
    s = ctx.style
    steps = fx.walk(
        cl.log, inv, from_seq=from_seq, to_seq=to_seq, tolerant=True, diffs=True, counts=True
    )
    for item in steps:
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            if ctx.json:
                ctx.out.write(to_json(_unreadable_json(item)) + "\n")
            else:
                ctx.out.write(s.red(f"!! {item}") + "\n")
            continue
        times = item.instance_saved_at()
        if ctx.json:
            doc = _step_json(item)
            doc["changes"] = changes = fx.plain(item.diff)
            for change, t in zip(changes["instances"] if times else (), times, strict=True):
                change["saved_at"] = t
            ctx.out.write(to_json(doc) + "\n")
            continue
        head = f"seq {item.seq}  {fmt_time(item.saved_at)}  {_kind_label(item)} ({item.frame_type})"
        if item.compacted is not None:
            head += f"  [compacted: stands for original seq {item.compacted.seq}]"
        ctx.out.write(s.bold(head) + "\n")
        if item.resumed:
            ctx.out.write(
                s.yellow("  (rebuilt again from this frame: what changed since the unreadable "
                         "seqs is unknown)") + "\n"
            )  # fmt: skip
        elif item.diff is not None:
            for line in diff_lines(item.diff, s, full=a.full, times=times) or ["  (no changes)"]:
                ctx.out.write(line + "\n")
    return PROBLEMS if ctx.unreadable else OK


def cmd_export(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    if a.invocation is not None:
        fx.last_seq(cl, a.invocation)
    bar = ctx.progress("export")
    target: IO[bytes] | _TextBytes
    close = False
    if a.out and a.out != "-":
        try:
            target = open(a.out, "wb")  # noqa: SIM115 - closed below, after the export
        except OSError as e:
            raise CliError(f"cannot write --out {a.out!r}: {e}", USAGE) from e
        close = True
    else:
        ctx.out.flush()
        target = sys.stdout.buffer if ctx.out is sys.stdout else _TextBytes(ctx.out)  # type: ignore[attr-defined]
    try:
        summary = fx.export(cl, a.invocation, a.format, out=target, progress=bar, tolerant=True)
    finally:
        bar.close()
        if close:
            target.close()
        else:
            target.flush()
    for item in summary.unreadable:
        ctx.report_unreadable(item)
    where = f" to {a.out}" if close else ""
    ctx.err.write(
        f"exported {summary.lines:,} lines ({summary.bytes:,} bytes) of "
        f"{summary.invocations:,} invocation(s){where}\n"
    )
    return PROBLEMS if summary.unreadable else OK


class _TextBytes:
    """Bytes written to a text stream (tests capture stdout as text)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        self.stream.write(data.decode("utf-8"))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        self.flush()


def cmd_verify(ctx: Ctx) -> int:
    try:
        opened = ctx.open()
    except CliError as e:
        check = fx.data_file_check(ctx.args.path)
        if e.code != UNREADABLE or check is None:
            raise  # not an LMDB file at all: nothing to verify
        # An LMDB file that does not open: name what is wrong with it, as a verify finding.
        problems = [Problem("storage", str(e))]
        if check.short:
            problems.insert(0, _truncated(check))
        print_verify(ctx, VerifyReport(problems=problems), finished=False)
        return PROBLEMS
    frames_bar = ctx.progress("verify")
    rows_bar = ctx.progress("heads")
    try:
        report = fx.verify(opened.log, frames_bar, rows_bar)
    finally:
        frames_bar.close()
        rows_bar.close()
    report.problems[:0] = opened.problems
    print_verify(ctx, report)
    return OK if report.ok else PROBLEMS


def _truncated(check: fx.DataFileCheck) -> Problem:
    missing = check.used_bytes - check.file_bytes
    return Problem(
        "truncated",
        f"{check.path} is {check.file_bytes:,} bytes, shorter than the {check.used_bytes:,} its "
        f"last transaction (txn {check.txn_id}) uses: {missing:,} bytes are missing; restore "
        "the file from a backup",
    )


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


def cmd_stats(ctx: Ctx) -> int:
    cl = ctx.open().log
    st = fx.stats(cl)
    if ctx.json:
        ctx.out.write(to_json(st) + "\n")
        return OK
    fmt = st.format
    rows = [
        ["path", st.path],
        ["frames", f"{st.frames:,}"],
        ["streams", f"{st.streams:,}"],
        ["live invocations", f"{st.invocations:,}"],
        ["streams without head", f"{st.streams_without_head:,} (deleted, or events only)"],
        ["snapshots", f"{st.snapshots:,}"],
        ["data file", f"{st.data_file_bytes:,} bytes ({st.bytes_per_frame:,.1f} per frame)"],
        ["oldest head saved", fmt_time(st.oldest_saved_at)],
        ["newest head saved", fmt_time(st.newest_saved_at)],
        ["format", f"version {fmt.get('format_version', '?')}, {fmt.get('checksum', '?')}, "
                   f"{fmt.get('compression', '?')} from "
                   f"{fmt.get('compress_threshold_bytes', '?')} B"],
        ["created", fmt_time(fmt.get("created_at"))],
    ]  # fmt: skip
    table(None, rows, "ll", ctx.out)
    if st.largest:
        ctx.out.write("largest streams:\n")
        table(
            ["  INVOCATION", "FRAMES"],
            ([f"  {x.invocation_id}", f"{x.frames:,}"] for x in st.largest),
            "lr",
            ctx.out,
        )
    return OK


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


def cmd_compact(ctx: Ctx) -> int:
    a = ctx.args
    choice = parse_keep(a.keep)
    cl = ctx.open().log
    bar = ctx.progress("compact")
    try:
        report = fx.compact(cl, a.dest, progress=bar, **choice)
    except fx.SourceDamaged as e:
        raise CliError(str(e), PROBLEMS) from e
    except fx.CompactionError as e:
        raise CliError(str(e), USAGE) from e
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
        )
        ctx.out.write(
            f"kept {report.policy} in {report.seconds:.2f} s; {report.dest} is a new log, "
            f"{report.source} is unchanged\n"
        )
        if dest_report is not None:
            print_verify(ctx, dest_report, label=report.dest)
    return OK if dest_report is None or dest_report.ok else PROBLEMS


def cmd_copy(ctx: Ctx) -> int:
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


def cmd_bench(ctx: Ctx) -> int:
    try:
        from benchmarks.__main__ import main as bench_main  # noqa: PLC0415 - optional, lazy
    except ImportError as e:
        raise CliError(
            f"the benchmarks are not available ({e}); they ship with the source tree: run "
            "`python -m benchmarks` from a checkout of ckptlog",
            USAGE,
        ) from e
    argv = list(ctx.args.bench_args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    return int(bench_main(argv) or 0)


def cmd_serve(ctx: Ctx) -> int:
    from eventlog import serve  # noqa: PLC0415 - the web viewer loads only when asked for

    return serve.run(ctx.args, ctx.out, ctx.err)


# -- argument parsing --------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line: ``ckptlog: error: ...``."""

    def error(self, message: str) -> NoReturn:
        hint = f" (see `{self.prog} --help`)"
        raise CliError(f"{message}{hint}", USAGE)


COMMANDS: dict[str, tuple[Callable[[Ctx], int], str]] = {
    "ls": (cmd_ls, "list the invocations in a log"),
    "show": (cmd_show, "show an invocation's record: the latest, --at SEQ or --as-of TIME"),
    "history": (cmd_history, "list every save of an invocation"),
    "diff": (cmd_diff, "what changed in an invocation between two seqs"),
    "replay": (cmd_replay, "step through an invocation's saves with what each changed"),
    "export": (cmd_export, "write history as JSON Lines (one invocation, or all)"),
    "verify": (cmd_verify, "check checksums, hash chains, index and materialized rows"),
    "stats": (cmd_stats, "counts and sizes of a log"),
    "compact": (cmd_compact, "write a compacted copy of a log to a new log"),
    "serve": (cmd_serve, "a read-only web viewer of a log on http://127.0.0.1:8765/"),
    "copy": (cmd_copy, "copy a log byte for byte to another engine (LMDB <-> PostgreSQL)"),
    "bench": (cmd_bench, "run the benchmarks (python -m benchmarks ARGS)"),
}


def build_parser() -> Parser:  # noqa: PLR0915 - one statement per option, read top to bottom
    parser = Parser(
        prog="ckptlog",
        description="Look into a ckptlog checkpoint log: what was saved, when, in what order,\n"
        "and proof that nothing was altered. Logs are opened read-only (compact writes only\n"
        "its new DEST), so a running writer is never blocked.",
        epilog=EXIT_CODES + "\ntimes: seconds since the epoch or ISO 8601; shown in UTC.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    common = Parser(add_help=False)
    common.add_argument(
        "path",
        metavar="PATH",
        help="the log directory (holding data.mdb) or a postgresql://host/db?schema=NAME URL",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour output: auto (default) = only on a terminal and when NO_COLOR is unset",
    )
    common.add_argument(
        "--chain-key-file", metavar="FILE", help="the chain key of a log written with one"
    )

    def add(name: str, **kw: Any) -> Parser:
        fn, text = COMMANDS[name]
        p = sub.add_parser(
            name, help=text, description=text, parents=[common], epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter, **kw,
        )  # fmt: skip
        p.set_defaults(fn=fn)
        assert isinstance(p, Parser)
        return p

    p = add("ls")
    p.add_argument("--correlation-id", metavar="X", help="only invocations with this id")
    p.add_argument(
        "--all",
        action="store_true",
        help="also streams without a head: deleted invocations, events, other integrations",
    )

    p = add("show")
    p.add_argument("invocation", metavar="ID")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--at", metavar="SEQ", help="the record as of stream seq SEQ")
    when.add_argument("--as-of", metavar="TIME", help="the record as it stood at TIME")
    p.add_argument("--instances", action="store_true", help="list every started instance")
    p.add_argument("--full", action="store_true", help="print the whole state")

    p = add("history")
    p.add_argument("invocation", metavar="ID")
    p.add_argument("--since", metavar="TIME", help="saves stamped at or after TIME")
    p.add_argument("--until", metavar="TIME", help="saves stamped before TIME")
    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help=f"only these kinds (repeatable or comma-separated): {', '.join(fx.HISTORY_KINDS)}",
    )

    p = add("diff")
    p.add_argument("invocation", metavar="ID")
    p.add_argument("a", metavar="A", help="a seq (0: before the first save; 'latest')")
    p.add_argument("b", metavar="B", help="a seq (or 'latest')")
    p.add_argument("--full", action="store_true", help="list every change")

    p = add("replay")
    p.add_argument("invocation", metavar="ID")
    p.add_argument("--from", dest="from_seq", metavar="SEQ", help="start at SEQ")
    p.add_argument("--to", dest="to_seq", metavar="SEQ", help="stop after SEQ")
    p.add_argument("--full", action="store_true", help="list every change of each step")

    p = add("export")
    p.add_argument("invocation", metavar="ID", nargs="?", help="one invocation (default: all)")
    p.add_argument(
        "--format",
        choices=fx.EXPORT_FORMATS,
        default="jsonl",
        help="jsonl: the full record after each save; jsonl-frames: each stored frame as "
        "written (deltas stay deltas: smaller, lossless)",
    )
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")

    add("verify")
    add("stats")

    p = add("compact")
    p.add_argument("dest", metavar="DEST", help="where to write the new log (must not exist)")
    p.add_argument(
        "--keep",
        default="all",
        metavar="WHAT",
        help="all (default), heads, last=N (saves per invocation) or since=TIME",
    )
    p.add_argument("--no-verify", action="store_true", help="skip verifying DEST afterwards")

    from eventlog import serve  # noqa: PLC0415 - stdlib only; its page loads when served

    serve.add_arguments(add("serve"))

    p = add("copy")
    p.add_argument(
        "dest", metavar="DEST", help="a new log directory or postgresql://...?schema= URL"
    )
    p.add_argument("--no-verify", action="store_true", help="skip verifying both ends")

    b = sub.add_parser(
        "bench",
        help=COMMANDS["bench"][1],
        description="Run the benchmarks: every argument after `bench` goes to "
        "`python -m benchmarks` (try `ckptlog bench -- --help`).",
        add_help=False,
    )
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    b.set_defaults(fn=cmd_bench)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    isolate: bool | None = None,
) -> int:
    """Run ``ckptlog`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    ``isolate`` (default: on when writing to the real stdout/stderr on a system with
    ``fork``) runs the command in a child process: LMDB can die of SIGBUS (a truncated file)
    or abort on a damaged page, and the parent then reports that in one line instead.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except CliError as e:
        _error(err, str(e))
        return e.code
    if isolate is None:
        isolate = (
            hasattr(os, "fork")
            and out is sys.stdout
            and err is sys.stderr
            and args.command not in ("bench", "serve")  # serve: one process, so a signal stops it
            and not os.environ.get("CKPTLOG_NO_ISOLATE")
        )
    if isolate:
        return _isolated(args, out, err)
    return _run(args, out, err)


def _run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    ctx = Ctx(args, out, err)
    try:
        code: int = args.fn(ctx)
        return code
    except CliError as e:
        _error(err, str(e))
        return e.code
    except KeyboardInterrupt:
        _error(err, "interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (`ckptlog export PATH | head`): stop quietly.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return OK
    except Exception as e:  # noqa: BLE001 - one line, never a traceback, with the right status
        code = _status_of(e)
        message = str(e) if not isinstance(e, KeyError) else str(e.args[0] if e.args else e)
        if code == INTERNAL:
            message = f"internal error ({type(e).__name__}: {e}); please report it"
        _error(err, message)
        return code
    finally:
        ctx.close()


def _isolated(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Run the command in a forked child; report a child killed by a signal."""
    dest = getattr(args, "dest", None)
    dest_existed = dest is not None and os.path.exists(dest)
    out.flush()
    err.flush()
    scratch = tempfile.mkdtemp(prefix="ckptlog-")
    fx.SALVAGE_PARENT = scratch  # the child inherits it; removed here whatever the child did
    try:
        return _fork_and_wait(args, out, err, dest, dest_existed)
    finally:
        fx.SALVAGE_PARENT = None
        shutil.rmtree(scratch, ignore_errors=True)


def _fork_and_wait(
    args: argparse.Namespace, out: IO[str], err: IO[str], dest: str | None, dest_existed: bool
) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its outcome is the exit status
        code = INTERNAL
        try:
            code = _run(args, out, err)
        finally:
            for stream in (out, err):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            os._exit(code)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child handles Ctrl-C
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        signal.signal(signal.SIGINT, previous)
    if not os.WIFSIGNALED(status):
        return os.waitstatus_to_exitcode(status)
    sig = os.WTERMSIG(status)
    if dest is not None and not dest_existed:
        shutil.rmtree(dest, ignore_errors=True)  # a compaction that died: no half a log left
    return _crashed(args, out, err, sig)


def _crashed(args: argparse.Namespace, out: IO[str], err: IO[str], sig: int) -> int:
    if sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGPIPE):
        _error(err, f"stopped by {fx.signal_name(sig)}")
        return 128 + sig
    path = args.path
    detail = (
        f"reading {path!r} killed the reader ({fx.signal_name(sig)}): the log's LMDB pages "
        "are damaged"
    )
    check = fx.data_file_check(path)
    if check is not None and check.short:
        detail += (
            f"; {check.path} is {check.file_bytes:,} bytes, shorter than the "
            f"{check.used_bytes:,} its last transaction uses: the file was truncated"
        )
    detail += "; restore the log from a backup"
    if args.command == "verify":
        problems = [Problem("storage", detail)]
        if check is not None and check.short:
            problems.insert(0, _truncated(check))
        print_verify(Ctx(args, out, err), VerifyReport(problems=problems), finished=False)
        out.flush()
        return PROBLEMS
    _error(err, detail)
    return UNREADABLE


def _status_of(e: BaseException) -> int:
    if isinstance(e, CorruptFrame):
        return PROBLEMS
    if isinstance(e, (NotALog, UnsupportedFormat, StorageError)) or _is_storage_error(e):
        return UNREADABLE
    if isinstance(e, CheckpointError):
        return USAGE
    return INTERNAL


def _error(err: IO[str], message: str) -> None:
    text = " ".join(message.split())  # one line, whatever the message held
    err.write(f"ckptlog: error: {text}\n")
    err.flush()


if __name__ == "__main__":
    sys.exit(main())
