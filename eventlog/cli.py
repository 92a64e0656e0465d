"""``ckptlog``: look into a checkpoint log from the shell (eventlog.forensics underneath).

Invariants:
- Read commands open the log read-only and never block a running writer (LMDB readers take
  no lock the writer waits for), and write nothing into the log's directory (an evidence copy
  opens without its lock file); only ``compact`` writes, and only to its new DEST.
- Every kind of stream answers: checkpoint invocations through eventlog.forensics, LangGraph
  threads, techrevati threads and apflow tasks through eventlog.cli_streams' views; a stream
  with nothing to show is refused with exit status 2, never reported as deleted.
- stdout carries the answer (tables, or JSON with ``--json``); stderr carries progress bars
  (rich, only on a terminal), warnings and the one-line ``ckptlog: error: ...``. Colour only
  when stdout is a terminal and ``NO_COLOR`` is unset (``--color`` overrides). Text from the
  log is escaped (eventlog.cli_render.escape) before it reaches a terminal.
- Damage never crashes a command: what is readable is printed, what is not is named, and the
  exit status says so (see ``EXIT_CODES``). No traceback reaches the user; a signal sent to
  the parent reaches the forked child running the command (exit status 128 + signal).
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import dataclasses
import datetime as dt
import difflib
import errno
import importlib.metadata
import itertools
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, Final, NoReturn

import msgspec

from backends.lmdb_salvage import probe_in_child
from eventlog import cli_streams as cs
from eventlog import forensics as fx
from eventlog.checkpoints import CheckpointLog
from eventlog.cli_render import Pager, ProgressBar, Style, colour_enabled, escape, pad
from eventlog.cli_render import table as _table
from eventlog.errors import CheckpointError, CorruptFrame, NotALog, StorageError, UnsupportedFormat
from eventlog.frames import CHECKPOINT_FRAMES, Save
from eventlog.log import Problem, VerifyReport
from eventlog.records import CheckpointRecord
from projections.history import InstanceDiff, RecordDiff, ValueChange, diff_records, diff_values

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
     not empty or not writable, a log that needs --chain-key-file)
  {UNREADABLE}  PATH is not a ckptlog log, or it cannot be opened or read at all
  {INTERNAL}  internal error (a bug in ckptlog: please report it with the message)
  128+N  stopped by signal N (143: SIGTERM), which also stopped the command's worker
"""
STATE_LINES_MAX: Final = 40  # lines of state JSON `show` prints before eliding (--full: all)
DIFF_ITEMS_MAX: Final = 50  # changes of one kind `diff`/`replay` print (--full: all)


FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
"""Sent to the parent (``timeout``, CI, ``kill``), passed on to the forked child running the
command; the exit status is then ``128 + signal`` (143 for SIGTERM), as for any process."""


class CliError(Exception):
    """A failure to report as one line with an exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- output: colours, times, values, tables ---------------------------------------------------


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


def brief(value: Any, width: int | None = 60) -> str:
    """``value`` as one line of JSON, escaped for a terminal; cut to ``width`` (None: whole)."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    text = escape(text)
    return text if width is None or len(text) <= width else text[: width - 3] + "..."


def iso_time(t: float | None) -> str | None:
    """ISO 8601 (UTC, milliseconds) beside epoch seconds in JSON; None for no time."""
    return None if t is None or not math.isfinite(t) else fmt_time(t)


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

    def progress(self, label: str, unit: str = "frames") -> ProgressBar:
        return ProgressBar(label, unit=unit, stream=self.err)

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()
            self.opened = None


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


def _is_storage_error(e: BaseException) -> bool:
    """An error raised by the storage library itself (a damaged B-tree page, ...)."""
    return type(e).__module__.split(".")[0] == "lmdb"


# -- commands ----------------------------------------------------------------------------------


def _streams(cl: CheckpointLog) -> list[str]:
    return cl.log.streams()


def resolve(ctx: Ctx, *, required: bool = True) -> str | None:
    """The stream a command is about: ID (an invocation, an integration's stream key, or a
    LangGraph thread id) or ``--thread``/``--ns``; a usage error naming close matches."""
    assert ctx.opened is not None
    cl = ctx.opened.log
    a = ctx.args
    inv: str | None = getattr(a, "invocation", None)
    thread: str | None = getattr(a, "thread", None)
    ns: str | None = getattr(a, "ns", None)
    if thread is not None:
        if inv is not None:
            raise CliError(f"give an ID ({inv!r}) or --thread, not both", USAGE)
        name = cs.langgraph_stream(thread, ns or "")
        if cl.log.last_seq(name) == 0:
            where = f" in namespace {ns!r}" if ns else ""
            raise CliError(
                f"no LangGraph thread {thread!r}{where} in the log at {ctx.args.path!r}"
                f"{_did_you_mean(cl, thread)}; list the threads with `ckptlog ls PATH`",
                USAGE,
            )
        return name
    if inv is None:
        if ns is not None:
            raise CliError("--ns needs --thread (the LangGraph thread it belongs to)", USAGE)
        if not required:
            return None
        raise CliError("give an invocation ID (or --thread THREAD for a LangGraph thread)", USAGE)
    if cl.log.last_seq(inv) > 0 and ns is None:
        return inv
    candidates = [cs.langgraph_stream(inv, ns or "")]
    if ns is None:
        candidates += [cs.TR_PREFIX + inv, cs.AP_PREFIX + inv]
    for name in candidates:
        if cl.log.last_seq(name) > 0:
            return name
    raise CliError(
        f"no invocation {inv!r} in the log at {ctx.args.path!r}{_did_you_mean(cl, inv)}; "
        "list the invocations it holds with `ckptlog ls PATH --all`",
        USAGE,
    )


def _did_you_mean(cl: CheckpointLog, wanted: str) -> str:
    names: dict[str, str] = {}
    for name in _streams(cl):
        names.setdefault(name, name)
        names.setdefault(cs.display_name(name), name)
        for prefix in (cs.TR_PREFIX, cs.AP_PREFIX):
            if name.startswith(prefix):
                names.setdefault(name[len(prefix) :], name)
    close = difflib.get_close_matches(wanted, list(names), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def _type_label(name: str) -> str:
    kind = cs.stream_type(name)
    return {cs.LANGGRAPH: "langgraph thread", cs.TECHREVATI: "techrevati thread"}.get(
        kind or "", "apflow task" if kind == cs.APFLOW else "events"
    )


def cmd_ls(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    rows = fx.invocations(cl, a.correlation_id, all_streams=True)
    shown = [
        r
        for r in rows
        if a.all
        or (
            not r.deleted
            and (r.correlation_id is not None or cs.stream_type(r.invocation_id) is not None)
        )
    ]
    if ctx.json:
        docs = []
        for r in shown:
            doc = fx.plain(r)
            doc["type"] = (
                "checkpoint" if r.correlation_id is not None or r.deleted
                else cs.stream_type(r.invocation_id) or "events"
            )  # fmt: skip
            doc["last_saved_at_iso"] = iso_time(r.last_saved_at)
            parsed = cs.parse_stream_key(r.invocation_id)
            if parsed is not None:
                doc["thread_id"], doc["checkpoint_ns"] = parsed
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
                escape(cs.display_name(r.invocation_id)),
                escape(r.correlation_id) if r.correlation_id is not None else "-",
                f"{r.frames:,}",
                fmt_time(r.last_saved_at),
                s.dim("deleted") if r.deleted
                else (escape(r.kind or "-") if r.correlation_id is not None
                      else _type_label(r.invocation_id)),
                str(r.completed_nodes) if r.correlation_id is not None else "-",
                _fan_out_cell(r, s),
            ]
            for r in shown
        ),
        "llrllrl",
        ctx.out,
        colour=ctx.style.enabled,
    )  # fmt: skip
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
    inv = resolve(ctx)
    assert inv is not None
    last = fx.last_seq(cl, inv)
    a = ctx.args
    if cs.stream_type(inv) is not None:
        return _show_view(ctx, inv, last)
    if a.at is None and a.as_of is None:
        record = cl.load(inv)
        if record is not None:
            return _show_record(ctx, inv, last, last, record, None)
        seq = last
    elif a.as_of is not None:
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
        if item.is_record:
            record = item.record()
            if record is None:
                return _show_none(ctx, inv, seq, last, f"deleted at seq {seq}")
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
    return _show_none(ctx, inv, seq, last, "deleted (the last record frame before it is a delete)")


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
            "saved_at_iso": iso_time(record.last_saved_at),
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
            ["invocation", s.bold(escape(inv))],
            ["correlation", escape(record.correlation_id)],
            ["seq", where],
            ["saved at", fmt_time(record.last_saved_at)],
            ["schema", record.schema_version or "-"],
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
    _print_value(ctx, "state", record.state)
    _print_value(ctx, "parent states", list(record.parent_states))
    return OK


INSTANCE_STATES: Final = ("completed", "in_flight", "not_started", "error")


def _instance_wanted(inst: Any, state: str | None) -> bool:
    """``--state``: one state (``error``: completed with an error result); default: started."""
    if state is None:
        return bool(inst.state != "not_started")
    if state == "error":
        return bool(inst.state == "completed" and inst.result_is_error)
    return bool(inst.state == state)


def _print_value(ctx: Ctx, label: str, value: Any) -> None:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    lines = text.splitlines()
    ctx.out.write(f"{label}:\n")
    shown = lines if ctx.args.full or len(lines) <= STATE_LINES_MAX else lines[:STATE_LINES_MAX]
    for line in shown:
        ctx.out.write(f"  {escape(line)}\n")
    if len(shown) < len(lines):
        ctx.out.write(
            ctx.style.dim(f"  ... {len(lines) - len(shown):,} more lines (--full or --json)") + "\n"
        )


# -- integration streams (LangGraph, techrevati, apflow): views folded from their frames ------


def _views(ctx: Ctx, inv: str) -> Iterator[cs.View | fx.Unreadable]:
    assert ctx.opened is not None
    try:
        return cs.views(ctx.opened.log.log, inv)
    except cs.UnsupportedStream as e:
        raise CliError(str(e), USAGE) from e


def _view_at(ctx: Ctx, inv: str, seq: int) -> cs.View | None:
    """The frame at ``seq`` with the stream's view after it (``None``: seq 0)."""
    found: cs.View | None = None
    for item in _views(ctx, inv):
        if isinstance(item, fx.Unreadable):
            if item.seq <= seq:
                ctx.report_unreadable(item)
            continue
        if item.seq > seq:
            break
        found = item
    return found


def _view_json(inv: str, v: cs.View, last: int) -> dict[str, Any]:
    return {
        "invocation_id": inv,
        "type": cs.stream_type(inv),
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
        "view": v.view,
    }


def _show_view(ctx: Ctx, inv: str, last: int) -> int:
    a = ctx.args
    if a.as_of is not None:
        when = parse_time(a.as_of)
        seq = 0
        for item in _views(ctx, inv):
            if not isinstance(item, fx.Unreadable) and item.saved_at <= when:
                seq = item.seq
        if seq == 0:
            return _show_none(ctx, inv, 0, last, f"nothing was saved by {fmt_time(when)}")
    else:
        seq = _seq_arg(a.at, last, inv) if a.at is not None else last
        if seq == 0:
            return _show_none(ctx, inv, 0, last, "seq 0 is before the first save")
    v = _view_at(ctx, inv, seq)
    if v is None or v.seq != seq:
        raise CliError(f"the frame of {inv!r} at seq {seq} cannot be read", PROBLEMS)
    if ctx.json:
        ctx.out.write(to_json(_view_json(inv, v, last)) + "\n")
        return PROBLEMS if ctx.unreadable else OK
    s = ctx.style
    rows = [
        [_type_label(inv), s.bold(escape(cs.display_name(inv)))],
        ["seq", f"{seq} of {last} ({escape(_view_title(v))})"],
        ["saved at", fmt_time(v.saved_at)],
    ]
    if v.node:
        rows.append(["node", escape(v.node)])
    table(None, rows, "ll", ctx.out, colour=s.enabled)
    if v.view is None:
        ctx.out.write(f"nothing live at seq {seq}: {escape(_view_title(v))}\n")
    elif isinstance(v.view, dict):
        for key, value in v.view.items():
            _print_value(ctx, key.replace("_", " "), value)
    else:
        _print_value(ctx, "view", v.view)
    return PROBLEMS if ctx.unreadable else OK


def _view_title(v: cs.View) -> str:
    """``checkpoint step 3 (loop) 1f1e...`` : what the frame is, and the id it is about."""
    return " ".join(x for x in (v.kind, v.label, v.ref) if x)


def _view_diff(old: Any, new: Any) -> list[ValueChange]:
    """Changes between two views, with paths from the view's top (``channel_values.n``)."""
    if old is None and new is None:
        return []
    changes = diff_values(old if old is not None else {}, new if new is not None else {}, "")
    return [msgspec.structs.replace(c, path=c.path.removeprefix(".")) for c in changes]


def _view_lines(ctx: Ctx, changes: list[ValueChange], full: bool) -> list[str]:
    s = ctx.style
    lines = ["  " + _value_line(c, s, full) for c in changes]
    return _capped(lines, full, "value changes", s, "  ")


def _diff_views(ctx: Ctx, inv: str, seq_a: int, seq_b: int) -> int:
    a = ctx.args
    va = _view_at(ctx, inv, seq_a).view if seq_a else None  # type: ignore[union-attr]
    vb = _view_at(ctx, inv, seq_b).view if seq_b else None  # type: ignore[union-attr]
    if a.format == "json-patch":
        ctx.out.write(to_json(json_patch(va, vb)) + "\n")
        return OK
    changes = _view_diff(va, vb)
    if ctx.json:
        doc = {"invocation_id": inv, "from_seq": seq_a, "to_seq": seq_b, "changes": changes}
        ctx.out.write(to_json(doc) + "\n")
        return OK
    ctx.out.write(ctx.style.bold(f"{escape(cs.display_name(inv))}: seq {seq_a} -> seq {seq_b}"))
    ctx.out.write("\n")
    for line in _view_lines(ctx, changes, a.full) or ["  (no changes)"]:
        ctx.out.write(line + "\n")
    return PROBLEMS if ctx.unreadable else OK


def _replay_views(ctx: Ctx, inv: str, from_seq: int, to_seq: int | None, out: IO[str]) -> int:
    s = ctx.style
    before: Any = None
    for item in _views(ctx, inv):
        if isinstance(item, fx.Unreadable):
            if item.last_seq >= from_seq and (to_seq is None or item.seq <= to_seq):
                ctx.report_unreadable(item)
                out.write(to_json(_unreadable_json(item)) if ctx.json else s.red(f"!! {item}"))
                out.write("\n")
            continue
        if to_seq is not None and item.seq > to_seq:
            break
        changes = _view_diff(before, item.view)
        before = item.view
        if item.seq < from_seq:
            continue
        if ctx.json:
            doc = _view_json(inv, item, 0)
            del doc["last_seq"], doc["view"]
            doc["changes"] = changes
            out.write(to_json(doc) + "\n")
            continue
        node = f"  node {escape(item.node)}" if item.node else ""
        head = f"seq {item.seq}  {fmt_time(item.saved_at)}  {escape(_view_title(item))}"
        out.write(s.bold(head + node) + "\n")
        for line in _view_lines(ctx, changes, ctx.args.full) or ["  (no changes)"]:
            out.write(line + "\n")
    return PROBLEMS if ctx.unreadable else OK


def json_patch(old: Any, new: Any, pointer: str = "") -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``old`` into ``new`` (plain data: dicts, lists, scalars)."""
    ops: list[dict[str, Any]] = []
    _patch_into(old, new, pointer, ops)
    return ops


def _pointer(pointer: str, key: Any) -> str:
    return pointer + "/" + str(key).replace("~", "~0").replace("/", "~1")


def _patch_into(old: Any, new: Any, pointer: str, ops: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        ops.extend({"op": "remove", "path": _pointer(pointer, k)} for k in old if k not in new)
        for key, value in new.items():
            if key in old:
                _patch_into(old[key], value, _pointer(pointer, key), ops)
            else:
                ops.append({"op": "add", "path": _pointer(pointer, key), "value": value})
        return
    if isinstance(old, list) and isinstance(new, list):
        common = min(len(old), len(new))
        for i in range(common):
            _patch_into(old[i], new[i], _pointer(pointer, i), ops)
        ops.extend(
            {"op": "remove", "path": _pointer(pointer, i)}
            for i in range(len(old) - 1, common - 1, -1)
        )
        ops.extend(
            {"op": "add", "path": _pointer(pointer, i), "value": new[i]}
            for i in range(common, len(new))
        )
        return
    both_nan = (
        isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new)
    )
    if (type(old) is not type(new) or old != new) and not both_nan:
        ops.append({"op": "replace", "path": pointer, "value": new})


def cmd_history(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    inv = resolve(ctx)
    assert inv is not None
    last = fx.last_seq(cl, inv)
    since = parse_time(a.since) if a.since else None
    until = parse_time(a.until) if a.until else None
    kinds = _split(a.kind) if a.kind else None
    foreign = cs.stream_type(inv) is not None
    if kinds is not None and not foreign:
        fx.check_kinds(kinds)
    for name, n in (("--limit", a.limit), ("--tail", a.tail)):
        if n is not None and n < 0:
            raise CliError(f"{name} needs a whole number >= 0, got {n}", USAGE)
    if a.min_gap is not None and not (math.isfinite(a.min_gap) and a.min_gap >= 0):
        raise CliError(f"--min-gap needs seconds >= 0, got {a.min_gap}", USAGE)
    rows = _history_rows(ctx, inv, foreign, diffs=a.changed is not None)

    def wanted(row: HistoryRow) -> bool:
        if row.unreadable is not None:
            return True
        if not fx.in_window(row.saved_at, since, until):
            return False
        if kinds is not None and row.kind not in kinds:
            return False
        if a.node is not None and a.node not in row.nodes:
            return False
        if a.changed is not None and not any(_touches(c, a.changed) for c in row.changed):
            return False
        return a.min_gap is None or (row.gap is not None and row.gap >= a.min_gap)

    selected: Iterable[HistoryRow] = (r for r in rows if wanted(r))
    if a.tail is not None:
        selected = collections.deque(selected, maxlen=a.tail)
    if a.reverse:
        selected = list(selected)[::-1]
    if a.limit is not None:
        selected = itertools.islice(selected, a.limit)
    pager = Pager(ctx.out, enabled=not ctx.json and not a.no_pager)
    out: IO[str] = pager.stream
    try:
        shown = _print_history(ctx, selected, out, last, foreign)
    finally:
        pager.close()
    if not shown and not ctx.json:
        ctx.out.write("(no saves match)\n")
    return PROBLEMS if ctx.unreadable else OK


@dataclasses.dataclass
class HistoryRow:
    """One row of ``history``: a frame of the stream (or a run of unreadable seqs)."""

    seq: int
    saved_at: float
    gap: float | None
    kind: str  # a save kind, delete, an integration's frame kind
    label: str  # kind as shown: a batch says how many saves (x256), an integration its frame
    frame: str
    stored_bytes: int
    nodes: tuple[str, ...]  # the node(s) whose completion made this save
    completed_nodes: int | None
    counts: dict[str, int]
    doc: dict[str, Any]  # the JSON object of the row
    unreadable: fx.Unreadable | None = None
    changed: tuple[ValueChange, ...] = ()  # what this frame changed (with --changed only)


def _history_rows(
    ctx: Ctx, inv: str, foreign: bool, *, diffs: bool = False
) -> Iterator[HistoryRow]:
    """Rows as the frames are read (nothing is collected first); ``diffs``: with the paths
    each frame changed."""
    assert ctx.opened is not None
    previous: float | None = None
    before: Any = None
    if foreign:
        for v in _views(ctx, inv):
            if isinstance(v, fx.Unreadable):
                ctx.report_unreadable(v)
                previous = None
                yield _unreadable_row(v)
                continue
            gap = v.saved_at - previous if previous is not None else None
            previous = v.saved_at
            doc = _view_json(inv, v, 0)
            del doc["last_seq"], doc["view"], doc["invocation_id"], doc["type"]
            doc["stored_bytes"] = v.stored_bytes
            doc["gap"] = gap
            made_by = tuple(n.strip() for n in (v.node or "").split(",") if n.strip())
            changed = tuple(_view_diff(before, v.view)) if diffs else ()
            before = v.view
            yield HistoryRow(
                v.seq, v.saved_at, gap, v.kind, f"{v.kind} {v.label}".strip(),
                fx.frame_type(v.frame), v.stored_bytes, made_by, None, {}, doc, None, changed,
            )  # fmt: skip
        return
    positions = 0
    for item in fx.walk(ctx.opened.log.log, inv, tolerant=True, counts=True, diffs=diffs):
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            previous = None
            yield _unreadable_row(item)
            continue
        gap = item.saved_at - previous if previous is not None else None
        previous = item.saved_at
        nodes: tuple[str, ...] = ()
        if item.head is not None:
            now = len(item.head.positions)
            if now > positions and item.compacted is None:  # a compacted start: not new
                nodes = tuple(dict.fromkeys(p.node_name for p in item.head.positions[positions:]))
            positions = now
            if not nodes:
                nodes = _fan_out_nodes(item)
        elif item.is_record:
            positions = 0
        label = _kind_label(item) + (" (compacted)" if item.compacted is not None else "")
        doc = _step_json(item)
        doc["gap"] = gap
        doc["node"] = ", ".join(nodes) or None
        yield HistoryRow(
            item.seq, item.saved_at, gap, item.kind, label, item.frame_type, item.stored_bytes,
            nodes, len(item.head.positions) if item.head is not None else None, item.counts, doc,
            None, _changes(item.diff) if item.diff is not None else (),
        )  # fmt: skip


def _changes(d: RecordDiff) -> tuple[ValueChange, ...]:
    """Everything a record diff touches, as value changes by path: fields, state paths,
    ``completed_positions``, ``<fan-out>`` (added or removed), ``<fan-out>[i]`` (an
    instance), ``record`` (created or deleted)."""
    out = [*d.fields, *d.state]
    if d.positions_added or d.positions_removed:
        out.append(ValueChange("completed_positions", "changed", None, None))
    out += [ValueChange(fo.fan_out, fo.op, None, None) for fo in d.fan_outs]
    out += [
        ValueChange(f"{i.fan_out}[{i.index}]", "changed", i.old_state, i.new_state)
        for i in d.instances
    ]
    if d.existed_before != d.exists_after:
        out.append(ValueChange("record", "changed", d.existed_before, d.exists_after))
    return tuple(out)


_SEGMENT: Final = re.compile(
    r"\.([^.\[]+)|\[(-?\d+)\]|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]"
)


def _lookup(value: Any, rest: str) -> tuple[bool, Any]:
    """``value`` at the path suffix ``rest`` (``.a[2]['k']``): ``(found, the value)``."""
    pos = 0
    while pos < len(rest):
        m = _SEGMENT.match(rest, pos)
        if m is None:
            return False, None
        key: Any = m.group(1) if m.group(1) is not None else None
        if m.group(2) is not None:
            key = int(m.group(2))
        elif m.group(3) is not None:
            key = ast.literal_eval(m.group(3))
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return False, None
        pos = m.end()
    return True, value


def _touches(change: ValueChange, wanted: str) -> bool:
    """``change`` changed ``wanted``: the same path, a part of it (``state.results[3]`` for
    ``state.results``), or a value holding it whose old and new differ there."""
    path = change.path
    if path == wanted or (path.startswith(wanted) and path[len(wanted)] in ".["):
        return True
    if not (wanted.startswith(path) and wanted[len(path)] in ".["):
        return False
    rest = wanted[len(path) :]
    had, old = _lookup(change.old, rest)
    has, new = _lookup(change.new, rest)
    return had != has or (had and old != new)


def _fan_out_nodes(step: fx.Step) -> tuple[str, ...]:
    """The fan-out node(s) whose instances a frame changed (a batch, or one instance save)."""
    changes, _ = fx.batch_of(step.frame)
    if not changes and isinstance(step.frame, Save):
        changes = step.frame.instances
    if step.head is None:
        return ()
    names = {s.header.fid: s.header.fan_out_node_name for s in step.head.slots}
    if not changes:
        # A snapshot written for one instance save keeps no change list: an instance save
        # changes its invocation's fan-out(s).
        fan_out_kind = step.kind in ("fan_out_internal", "fan_out_in_flight_failure")
        return tuple(dict.fromkeys(names.values())) if fan_out_kind else ()
    return tuple(dict.fromkeys(names.get(c.fid, "?") for c in changes))


def _unreadable_row(item: fx.Unreadable) -> HistoryRow:
    return HistoryRow(
        item.seq, math.nan, None, "unreadable", f"!! {item.problem}", "", 0, (), None, {},
        _unreadable_json(item), item,
    )  # fmt: skip


KIND_CELLS: Final = len("fan_out_internal (compacted)")  # wider kinds push their row on


def _print_history(
    ctx: Ctx, rows: Iterable[HistoryRow], out: IO[str], last: int, foreign: bool
) -> int:
    """Print rows as they come (fixed column widths: no wait for the last row); the count."""
    s = ctx.style
    shown = 0
    if ctx.json:
        out.write("[")
        for row in rows:
            out.write(("\n" if not shown else ",\n") + to_json(row.doc))
            shown += 1
        out.write("\n]\n")
        return shown
    seq_cells = max(3, len(f"{last}-{last}"))
    kind_cells = 28 if foreign else KIND_CELLS
    frame_cells = 13 if foreign else 9
    head = [
        pad("SEQ", seq_cells, "r"), pad("SAVED AT (UTC)", 24), pad("AFTER", 9, "r"),
        pad("KIND", kind_cells), pad("FRAME", frame_cells), pad("BYTES", 7, "r"),
        pad("NODES", 5, "r"),
        pad("NODE", 16), "FAN-OUT DONE",
    ]  # fmt: skip
    for row in rows:
        if not shown:
            out.write("  ".join(head).rstrip() + "\n")
        shown += 1
        if row.unreadable is not None:
            u = row.unreadable
            seqs = str(u.seq) if u.seq == u.last_seq else f"{u.seq}-{u.last_seq}"
            out.write(s.red(pad(seqs, seq_cells, "r")) + "  " + s.red(f"!! {u.problem}") + "\n")
            continue
        label = escape(row.label)
        cells = [
            pad(str(row.seq), seq_cells, "r"),
            pad(fmt_time(row.saved_at), 24),
            pad(fmt_gap(row.gap), 9, "r"),
            pad(s.dim(label) if row.kind == "delete" else label, kind_cells),
            pad(row.frame, frame_cells),
            pad(f"{row.stored_bytes:,}", 7, "r"),
            pad(str(row.completed_nodes) if row.completed_nodes is not None else "-", 5, "r"),
            pad(escape(", ".join(row.nodes)) or "-", 16),
            _counts_cell(row.counts),
        ]
        out.write("  ".join(cells).rstrip() + "\n")
        if shown % 64 == 0:
            out.flush()
    return shown


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
    inv = resolve(ctx)
    assert inv is not None
    last = fx.last_seq(cl, inv)
    seq_a, seq_b = _seq_arg(a.a, last, inv), _seq_arg(a.b, last, inv)
    if cs.stream_type(inv) is not None:
        return _diff_views(ctx, inv, seq_a, seq_b)
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
            # An application event at seq: the record as of it (the frames before).
            records.append(item.record() if item.is_record else cl.record_at(inv, seq))
            found = True
        if not found:
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
    out.extend(indent + _value_line(c, s, full) for c in d.fields)
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
        _capped(
            [indent + _value_line(c, s, full) for c in d.state], full, "value changes", s, indent
        )
    )
    for fo in d.fan_outs:
        where = " in " + "/".join(fo.namespace) if fo.namespace else ""
        text = escape(f"fan-out {fo.fan_out}{where} ({fo.instance_count:,} instances)")
        out.append(indent + (s.green("+ " + text) if fo.op == "added" else s.red("- " + text)))
    stamps = [s.dim(fmt_time(t)) + "  " for t in times] if times else [""] * len(d.instances)
    out.extend(
        _capped(
            [
                indent + stamp + _instance_line(i, s, full)
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
    return escape(f"{ns + '/' if ns else ''}{p.node_name} step {p.step}{extra}")


def _value_line(c: ValueChange, s: Style, full: bool = False) -> str:
    """One value change; ``full``: whole values, never cut."""
    wide, narrow = (None, None) if full else (60, 40)
    path = escape(c.path)
    if c.op == "added":
        return s.green(f"+ {path}: {brief(c.new, wide)}")
    if c.op == "removed":
        return s.red(f"- {path}: {brief(c.old, wide)}")
    return (
        s.yellow(f"~ {path}: ")
        + s.red(brief(c.old, narrow))
        + " -> "
        + s.green(brief(c.new, narrow))
    )


def _instance_line(i: InstanceDiff, s: Style, full: bool = False) -> str:
    line = f"~ {escape(i.fan_out)}[{i.index}]: {i.old_state} -> "
    line = s.yellow(line) + (s.red(i.new_state) if i.result_is_error else s.green(i.new_state))
    if i.new_state == "completed":
        label = "error" if i.result_is_error else "result"
        line += f"  {label} {brief(i.new_result, None if full else 40)}"
    elif i.inner_positions_added:
        line += f"  +{i.inner_positions_added} inner node(s)"
    return line


def cmd_replay(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    inv = resolve(ctx)
    assert inv is not None
    last = fx.last_seq(cl, inv)
    from_seq = _seq_arg(a.from_seq, last, inv) if a.from_seq else 1
    to_seq = _seq_arg(a.to_seq, last, inv) if a.to_seq else None
    pager = Pager(ctx.out, enabled=not ctx.json and not a.no_pager)
    try:
        if cs.stream_type(inv) is not None:
            return _replay_views(ctx, inv, from_seq, to_seq, pager.stream)
        return _replay_steps(ctx, inv, from_seq, to_seq, pager.stream)
    finally:
        pager.close()


def _replay_steps(ctx: Ctx, inv: str, from_seq: int, to_seq: int | None, out: IO[str]) -> int:
    assert ctx.opened is not None
    cl = ctx.opened.log
    a = ctx.args
    s = ctx.style
    steps = fx.walk(
        cl.log, inv, from_seq=from_seq, to_seq=to_seq, tolerant=True, diffs=True, counts=True
    )
    for item in steps:
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            if ctx.json:
                out.write(to_json(_unreadable_json(item)) + "\n")
            else:
                out.write(s.red(f"!! {item}") + "\n")
            continue
        times = item.instance_saved_at()
        if ctx.json:
            doc = _step_json(item)
            doc["node"] = ", ".join(_fan_out_nodes(item)) or None
            doc["changes"] = changes = fx.plain(item.diff)
            for change, t in zip(changes["instances"] if times else (), times, strict=True):
                change["saved_at"] = t
            out.write(to_json(doc) + "\n")
            continue
        head = f"seq {item.seq}  {fmt_time(item.saved_at)}  {_kind_label(item)} ({item.frame_type})"
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
    return PROBLEMS if ctx.unreadable else OK


EXPORT_FORMATS: Final = ("jsonl-frames", "jsonl")
EXPORT_WARN_FACTOR: Final = 10  # warn when --format jsonl would write this many times the log


def cmd_export(ctx: Ctx) -> int:  # noqa: PLR0915 - options read top to bottom
    a = ctx.args
    if ctx.json:
        raise CliError(
            "export always writes JSON Lines; --json has no meaning here: drop it (choose what "
            "each line holds with --format jsonl-frames, the default, or --format jsonl)",
            USAGE,
        )
    cl = ctx.open().log
    one = resolve(ctx, required=False)
    if (a.from_seq or a.to_seq) and one is None:
        raise CliError("--from/--to are seqs of one invocation: give its ID too", USAGE)
    streams = [one] if one is not None else cl.log.streams()
    last = fx.last_seq(cl, one) if one is not None else 0
    from_seq = _seq_arg(a.from_seq, last, one) if a.from_seq and one is not None else 1
    to_seq = _seq_arg(a.to_seq, last, one) if a.to_seq and one is not None else None
    since = parse_time(a.since) if a.since else None
    until = parse_time(a.until) if a.until else None
    kinds = frozenset(_split(a.kind)) if a.kind else None
    if a.format == "jsonl":
        _warn_if_huge(ctx, cl, streams)
    target: IO[bytes] | _TextBytes
    close = False
    if a.out and a.out != "-":
        try:
            target = open(a.out, "wb")  # noqa: SIM115 - closed below, after the export
        except OSError as e:
            raise CliError(f"cannot write --out {a.out!r}: {e.strerror or e}", USAGE) from e
        close = True
    else:
        ctx.out.flush()
        target = sys.stdout.buffer if ctx.out is sys.stdout else _TextBytes(ctx.out)  # type: ignore[attr-defined]
    total = sum(cl.log.last_seq(s) for s in streams)
    bar = ctx.progress("export")
    jl = fx.JsonLines()
    lines = written = done = 0
    try:
        for stream in streams:
            for doc in _export_docs(ctx, stream, a.format, from_seq, to_seq):
                done += 1
                if done % fx.PROGRESS_EVERY_FRAMES == 0:
                    bar(done, total)
                if "unreadable" not in doc and not (
                    fx.in_window(doc["saved_at"], since, until)
                    and (kinds is None or doc["kind"] in kinds)
                ):
                    continue
                line = jl.line(doc)
                target.write(line)
                lines += 1
                written += len(line)
        bar(done, total)
    finally:
        bar.close()
        if close:
            target.close()
        else:
            target.flush()
    where = f" to {a.out}" if close else ""
    ctx.err.write(
        f"exported {lines:,} lines ({written:,} bytes) of {len(streams):,} invocation(s){where}\n"
    )
    return PROBLEMS if ctx.unreadable else OK


def _export_docs(
    ctx: Ctx, stream: str, fmt: str, from_seq: int, to_seq: int | None
) -> Iterator[dict[str, Any]]:
    """The lines of one stream: each frame as stored (``jsonl-frames``), or the record (an
    integration's view) after it (``jsonl``); unreadable seqs as ``{"unreadable": ...}``."""
    assert ctx.opened is not None
    if cs.stream_type(stream) is not None:
        for v in _views(ctx, stream):
            if isinstance(v, fx.Unreadable):
                ctx.report_unreadable(v)
                yield {"invocation_id": stream, **_unreadable_json(v)}
                continue
            if v.seq < from_seq or (to_seq is not None and v.seq > to_seq):
                continue
            doc = _export_head(stream, v.seq, v.global_seq, v.saved_at, v.kind, v.checksum)
            doc["frame"] = fx.frame_type(v.frame)
            if fmt == "jsonl-frames":
                doc["content"] = fx.frame_content(v.frame)
            else:
                doc["view"] = v.view
            yield doc
        return
    for item in fx.walk(ctx.opened.log.log, stream, from_seq=from_seq, to_seq=to_seq,
                        tolerant=True):  # fmt: skip
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            yield {"invocation_id": stream, **_unreadable_json(item)}
            continue
        doc = _export_head(
            stream, item.seq, item.global_seq, item.saved_at, item.kind, item.checksum
        )
        doc["frame"] = item.frame_type
        if fmt == "jsonl-frames" or not item.is_record:
            doc["content"] = fx.frame_content(item.frame)
        else:
            record = item.record()
            doc["record"] = fx.record_content(record) if record is not None else None
        yield doc


def _export_head(
    stream: str, seq: int, gseq: int, saved_at: float, kind: str, checksum: bytes
) -> dict[str, Any]:
    return {
        "invocation_id": stream,
        "seq": seq,
        "global_seq": gseq,
        "saved_at": saved_at,
        "saved_at_iso": iso_time(saved_at),
        "kind": kind,
        "checksum": checksum.hex(),
    }


def _warn_if_huge(ctx: Ctx, cl: CheckpointLog, streams: list[str]) -> None:
    """``--format jsonl`` writes the whole record after every save: O(saves x record size).
    Estimate it from each invocation's latest record; warn when it dwarfs the log."""
    estimate = 0
    for stream in streams:
        record = cl.load(stream) if cs.stream_type(stream) is None else None
        if record is not None:
            size = len(to_json(fx.record_content(record)))
            estimate += cl.log.last_seq(stream) * size
    check = fx.data_file_check(ctx.args.path)
    log_bytes = max(check.file_bytes if check is not None else 0, 1)
    if estimate > EXPORT_WARN_FACTOR * log_bytes:
        ctx.warn(
            f"--format jsonl writes the whole record after every save: about {estimate:,} "
            f"bytes, {estimate / log_bytes:,.0f} times the log's {log_bytes:,}; narrow it "
            "(an ID, --from/--to, --since/--until, --kind) or use the default --format "
            "jsonl-frames (each frame as stored, lossless)"
        )


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


def cmd_search(ctx: Ctx) -> int:
    """Every frame, in every stream, whose saved content holds TEXT (a value, an id, a
    correlation id): what it stores for a checkpoint stream (a delta holds what changed, a
    snapshot everything), what it changed for an integration's stream."""
    cl = ctx.open().log
    a = ctx.args
    text = a.text
    if not text:
        raise CliError("search needs a non-empty TEXT", USAGE)
    heads = {r.invocation_id: r for r in fx.invocations(cl, all_streams=True)}
    hits: list[dict[str, Any]] = []
    for stream in cl.log.streams():
        row = heads.get(stream)
        corr = row.correlation_id if row is not None else None
        if text in (stream, cs.display_name(stream)) or text == corr:
            last = cl.log.last_seq(stream)
            hits.append(
                {"invocation_id": stream, "seq": last, "saved_at": row.last_saved_at if row
                 else None, "saved_at_iso": iso_time(row.last_saved_at) if row else None,
                 "kind": "invocation", "match": "correlation id" if text == corr
                 else "invocation id"}
            )  # fmt: skip
            continue  # the whole stream is a match
        for seq, saved_at, kind, content in _search_items(ctx, stream):
            where = _found_in(text, content)
            if where is None:
                continue
            hits.append(
                {"invocation_id": stream, "seq": seq, "saved_at": saved_at,
                 "saved_at_iso": iso_time(saved_at), "kind": kind, "match": where}
            )  # fmt: skip
            if a.first:
                break
        if a.limit is not None and len(hits) >= a.limit:
            del hits[a.limit :]
            break
    if ctx.json:
        ctx.out.write(to_json(hits) + "\n")
    elif not hits:
        ctx.out.write(f"no frame holds {text!r}\n")
    else:
        table(
            ["INVOCATION", "SEQ", "SAVED AT (UTC)", "KIND", "MATCH"],
            (
                [escape(cs.display_name(h["invocation_id"])), str(h["seq"]),
                 fmt_time(h["saved_at"]), escape(h["kind"]), escape(h["match"])]
                for h in hits
            ),
            "lrlll",
            ctx.out,
            colour=ctx.style.enabled,
        )  # fmt: skip
    return PROBLEMS if ctx.unreadable else OK


def _search_items(ctx: Ctx, stream: str) -> Iterator[tuple[int, float, str, Any]]:
    """``(seq, saved_at, kind, content)`` of each readable frame of ``stream``."""
    assert ctx.opened is not None
    if cs.stream_type(stream) is not None:
        before: Any = None
        for v in _views(ctx, stream):
            if isinstance(v, fx.Unreadable):
                ctx.report_unreadable(v)
                continue
            changes = _view_diff(before, v.view)
            before = v.view
            yield v.seq, v.saved_at, v.kind, {c.path: c.new for c in changes if c.op != "removed"}
        return
    for item in fx.read_frames(ctx.opened.log.log, stream):
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            continue
        frame = item.frame
        content = fx.plain(fx.frame_content(frame))
        yield item.seq, fx.frame_saved_at(frame), fx.frame_kind(frame), content


def _found_in(text: str, content: Any, path: str = "") -> str | None:
    """``path = value`` of the first value in ``content`` that is ``text`` (a number, true,
    false, null as written) or a string holding it; ``None`` when none is."""
    if isinstance(content, dict):
        for key, value in content.items():
            sub = f"{path}.{key}" if path else str(key)
            found = _found_in(text, value, sub)
            if found is not None:
                return found
        return None
    if isinstance(content, (list, tuple)):
        for i, value in enumerate(content):
            found = _found_in(text, value, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(content, str):
        hit = text in content
    elif content is None or isinstance(content, (bool, int, float)):
        hit = text == json.dumps(content)
    else:
        hit = False
    return f"{path or '(value)'} = {brief(content)}" if hit else None


def cmd_verify(ctx: Ctx) -> int:
    try:
        opened = ctx.open()
    except CliError as e:
        check = fx.data_file_check(ctx.args.path)
        cause = e.__cause__
        if _needs_chain_key(cause):
            raise CliError(
                f"{ctx.args.path!r} was written with a chain key (keyed checksums): pass the "
                "key with --chain-key-file FILE" + (
                    " (the one given is not it)" if ctx.args.chain_key_file else ""),
                USAGE,
            ) from cause  # fmt: skip
        if e.code != UNREADABLE or check is None or _is_permission(cause):
            raise  # not an LMDB file at all, or not ours to read: nothing to verify
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
    if ctx.args.chain_key_file and report.frames and _all_checksums_fail(report):
        report = VerifyReport(
            frames=report.frames,
            streams=report.streams,
            problems=[
                Problem(
                    "chain-key",
                    f"wrong chain key: every one of the {report.frames:,} frames fails its "
                    "keyed checksum with the key in --chain-key-file, which a damaged or "
                    "altered log does not do; verify again with the key the log was written "
                    "with",
                )
            ],
        )
    print_verify(ctx, report)
    return OK if report.ok else PROBLEMS


def _needs_chain_key(e: BaseException | None) -> bool:
    """The log's checksums are keyed but no key (or a log written without one, and a key)."""
    return type(e) is CheckpointError and "chain_key" in str(e)


def _is_permission(e: BaseException | None) -> bool:
    while e is not None:
        if (
            isinstance(e, PermissionError)
            or (isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM))
            or "Permission denied" in str(e)
        ):
            return True
        e = e.__cause__
    return False


def _all_checksums_fail(report: VerifyReport) -> bool:
    """Every frame fails its checksum: the key is wrong (damage is never that uniform)."""
    failed = {(p.stream, p.seq) for p in report.problems if p.kind == "checksum"}
    return len(failed) >= report.frames


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
    table(None, rows, "ll", ctx.out, colour=ctx.style.enabled)
    if st.largest:
        ctx.out.write("largest streams:\n")
        table(
            ["  INVOCATION", "FRAMES"],
            ([f"  {x.invocation_id}", f"{x.frames:,}"] for x in st.largest),
            "lr",
            ctx.out,
            colour=ctx.style.enabled,
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
    _check_dest_parent(a.dest)
    cl = ctx.open().log
    bar = ctx.progress("compact")
    try:
        report = fx.compact(cl, a.dest, progress=bar, **choice)
    except fx.SourceDamaged as e:
        raise CliError(str(e), PROBLEMS) from e
    except fx.CompactionError as e:
        raise CliError(str(e), USAGE) from e
    except OSError as e:  # StorageError too: DEST could not be created or written
        raise CliError(_dest_os_error(a.dest, e), USAGE) from e
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


def _check_dest_parent(dest: str) -> None:
    """DEST goes in an existing, writable directory: never create its parents silently."""
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


def _dest_os_error(dest: str, e: OSError) -> str:
    why = e.strerror or str(e)
    if _is_permission(e) or e.errno == errno.EROFS or "Read-only file system" in str(e):
        return f"cannot write DEST {dest!r}: {why}; choose a directory you can write to"
    if e.errno == errno.ENOSPC:
        return f"cannot write DEST {dest!r}: the disk is full; free space or choose another disk"
    return f"cannot write DEST {dest!r}: {why}"


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
    "search": (cmd_search, "find the frames, in every invocation, that hold a value or an id"),
    "verify": (cmd_verify, "check checksums, hash chains, index and materialized rows"),
    "stats": (cmd_stats, "counts and sizes of a log"),
    "compact": (cmd_compact, "write a compacted copy of a log to a new log"),
    "serve": (cmd_serve, "a read-only web viewer of a log on http://127.0.0.1:8765/"),
    "copy": (cmd_copy, "copy a log byte for byte to another engine (LMDB <-> PostgreSQL)"),
    "bench": (cmd_bench, "run the benchmarks (python -m benchmarks ARGS)"),
}


def _version() -> str:
    try:
        return importlib.metadata.version("ckptlog")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def build_parser() -> Parser:  # noqa: PLR0915 - one statement per option, read top to bottom
    parser = Parser(
        prog="ckptlog",
        description="Look into a ckptlog checkpoint log: what was saved, when, in what order,\n"
        "and proof that nothing was altered. Logs are opened read-only (compact writes only\n"
        "its new DEST), so a running writer is never blocked.",
        epilog=EXIT_CODES + "\ntimes: seconds since the epoch or ISO 8601; shown in UTC.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ckptlog {_version()}")
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

    def target(p: Parser, *, optional: bool = False) -> None:
        p.add_argument(
            "invocation",
            metavar="ID",
            nargs="?",
            help="an invocation id, an integration's stream (`ckptlog ls` names them) or a "
            "LangGraph thread id" + (" (default: every stream)" if optional else ""),
        )
        p.add_argument("--thread", metavar="T", help="a LangGraph thread (instead of ID)")
        p.add_argument("--ns", metavar="NS", help="its checkpoint namespace (default: root)")

    p = add("show")
    target(p)
    when = p.add_mutually_exclusive_group()
    when.add_argument("--at", metavar="SEQ", help="the record as of stream seq SEQ")
    when.add_argument("--as-of", metavar="TIME", help="the record as it stood at TIME")
    p.add_argument("--instances", action="store_true", help="list every started instance")
    p.add_argument(
        "--state",
        choices=INSTANCE_STATES,
        help="list the fan-out instances in this state (error: completed with an error)",
    )
    p.add_argument("--full", action="store_true", help="print the whole state")

    p = add("history")
    target(p)
    p.add_argument("--since", metavar="TIME", help="saves stamped at or after TIME")
    p.add_argument("--until", metavar="TIME", help="saves stamped before TIME")
    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help=f"only these kinds (repeatable or comma-separated): {', '.join(fx.HISTORY_KINDS)}",
    )
    p.add_argument("--node", metavar="NAME", help="only saves made by node NAME completing")
    p.add_argument(
        "--changed",
        metavar="PATH",
        help="only saves that changed PATH (state.results, process_items[3], "
        "channel_values.n, ...); with -n 1: the first seq that changed it (git log -S)",
    )
    p.add_argument(
        "--min-gap",
        type=float,
        metavar="SECONDS",
        help="only saves that came SECONDS or more after the one before (find the pauses)",
    )
    p.add_argument("-n", "--limit", type=int, metavar="N", help="print at most N rows")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N rows")
    p.add_argument("--reverse", action="store_true", help="newest first")
    p.add_argument("--no-pager", action="store_true", help="never page (default: on a terminal)")

    p = add("diff")
    target(p)
    p.add_argument("a", metavar="A", help="a seq (0: before the first save; 'latest')")
    p.add_argument("b", metavar="B", help="a seq (or 'latest')")
    p.add_argument("--full", action="store_true", help="list every change, with whole values")
    p.add_argument(
        "--format",
        choices=("text", "json-patch"),
        default="text",
        help="json-patch: the RFC 6902 operations that turn the record at A into the one at B",
    )

    p = add("replay")
    target(p)
    p.add_argument("--from", dest="from_seq", metavar="SEQ", help="start at SEQ")
    p.add_argument("--to", dest="to_seq", metavar="SEQ", help="stop after SEQ")
    p.add_argument("--full", action="store_true", help="list every change of each step")
    p.add_argument("--no-pager", action="store_true", help="never page (default: on a terminal)")

    p = add("export")
    target(p, optional=True)
    p.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="jsonl-frames",
        help="jsonl-frames (default): each stored frame as written (deltas stay deltas: "
        "small, lossless); jsonl: the whole record after every save (O(saves x record "
        "size): narrow it with the options below)",
    )
    p.add_argument("--from", dest="from_seq", metavar="SEQ", help="from seq SEQ (with an ID)")
    p.add_argument("--to", dest="to_seq", metavar="SEQ", help="up to seq SEQ (with an ID)")
    p.add_argument("--since", metavar="TIME", help="frames stamped at or after TIME")
    p.add_argument("--until", metavar="TIME", help="frames stamped before TIME")
    p.add_argument("--kind", action="append", metavar="KIND", help="only these kinds (repeatable)")
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")

    p = add("search")
    p.add_argument("text", metavar="TEXT", help="a value, an id or a correlation id")
    p.add_argument("--first", action="store_true", help="only the first frame of each stream")
    p.add_argument("-n", "--limit", type=int, metavar="N", help="stop after N matches")

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
        "`python -m benchmarks` (try `ckptlog bench --help`).",
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
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if arguments[:1] == ["bench"]:  # everything after it is the benchmarks' (--help too)
            args = argparse.Namespace(command="bench", bench_args=arguments[1:], fn=cmd_bench)
        else:
            args = build_parser().parse_args(arguments)
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
    previous: dict[int, Any] = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)  # the child stops as told; we report how it ended

    for signum in FORWARDED_SIGNALS:
        previous[signum] = signal.signal(signum, forward)
    try:
        _, status = os.waitpid(pid, 0)  # retried after a forwarded signal (PEP 475)
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)
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
