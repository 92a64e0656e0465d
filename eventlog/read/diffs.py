"""Structured diffs: what changed between two points of a stream, as value changes, as RFC 6902
operations and as text lines (coloured by the face that prints them), all from the same data;
and value paths (``state.results[3]``, ``channel_values.n``) to ask what changed a value.

Invariants:
- Plain data in, plain data out; nothing here reads the log.
- A text line is cut (``DIFF_ITEMS_MAX`` changes of one kind, values at 60 characters) unless
  ``full``; JSON and JSON Patch are never cut.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from eventlog.read.text import PLAIN, Styler, brief, escape, fmt_time
from projections.history import InstanceDiff, RecordDiff, ValueChange, diff_values

__all__ = [
    "DIFF_ITEMS_MAX",
    "capped",
    "diff_lines",
    "json_patch",
    "record_changes",
    "touches",
    "value_changes",
    "value_line",
    "value_lines",
]

DIFF_ITEMS_MAX: Final = 50  # changes of one kind `diff`/`replay` print (--full: all)


# -- value changes -------------------------------------------------------------------------------


def value_changes(old: Any, new: Any) -> list[ValueChange]:
    """Changes between two values of a stream, with paths from the top (``channel_values.n``)."""
    if old is None and new is None:
        return []
    changes = diff_values(old if old is not None else {}, new if new is not None else {}, "")
    return [msgspec.structs.replace(c, path=c.path.removeprefix(".")) for c in changes]


def record_changes(d: RecordDiff) -> tuple[ValueChange, ...]:
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


# -- RFC 6902 ------------------------------------------------------------------------------------


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


# -- value paths ---------------------------------------------------------------------------------

_SEGMENT: Final = re.compile(
    r"\.([^.\[]+)|\[(-?\d+)\]|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]"
)


def lookup(value: Any, rest: str) -> tuple[bool, Any]:
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


def touches(change: ValueChange, wanted: str) -> bool:
    """``change`` changed ``wanted``: the same path, a part of it (``state.results[3]`` for
    ``state.results``), or a value holding it whose old and new differ there."""
    path = change.path
    if path == wanted or (path.startswith(wanted) and path[len(wanted)] in ".["):
        return True
    if not (wanted.startswith(path) and wanted[len(path)] in ".["):
        return False
    rest = wanted[len(path) :]
    had, old = lookup(change.old, rest)
    has, new = lookup(change.new, rest)
    return had != has or (had and old != new)


# -- text lines ----------------------------------------------------------------------------------


def capped(lines: list[str], full: bool, what: str, s: Styler, indent: str) -> list[str]:
    if full or len(lines) <= DIFF_ITEMS_MAX:
        return lines
    more = len(lines) - DIFF_ITEMS_MAX
    return [*lines[:DIFF_ITEMS_MAX], indent + s.dim(f"... {more:,} more {what} (--full or --json)")]


def value_line(c: ValueChange, s: Styler = PLAIN, full: bool = False) -> str:
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


def value_lines(changes: Sequence[ValueChange], s: Styler = PLAIN, full: bool = False) -> list[str]:
    """A stream's value changes as lines (``  + path: value``)."""
    return capped(["  " + value_line(c, s, full) for c in changes], full, "value changes", s, "  ")


def _pos(p: Any) -> str:
    ns = "/".join(p.namespace)
    extra = f" attempt {p.attempt_index}" if p.attempt_index else ""
    if p.fan_out_index is not None:
        extra += f" fan-out index {p.fan_out_index}"
    return escape(f"{ns + '/' if ns else ''}{p.node_name} step {p.step}{extra}")


def _instance_line(i: InstanceDiff, s: Styler, full: bool = False) -> str:
    line = f"~ {escape(i.fan_out)}[{i.index}]: {i.old_state} -> "
    line = s.yellow(line) + (s.red(i.new_state) if i.result_is_error else s.green(i.new_state))
    if i.new_state == "completed":
        label = "error" if i.result_is_error else "result"
        line += f"  {label} {brief(i.new_result, None if full else 40)}"
    elif i.inner_positions_added:
        line += f"  +{i.inner_positions_added} inner node(s)"
    return line


def diff_lines(
    d: RecordDiff,
    s: Styler = PLAIN,
    *,
    full: bool,
    indent: str = "  ",
    times: Sequence[float] = (),
) -> list[str]:
    """A record diff as lines: ``+`` added (green), ``-`` removed (red), ``~`` changed.

    ``times`` (a batch's, parallel to ``d.instances``) starts each instance line with the time
    of its change."""
    out: list[str] = []
    if d.existed_before != d.exists_after:
        out.append(
            indent + (s.green("+ record created") if d.exists_after else s.red("- record deleted"))
        )
        if not d.exists_after:
            return out
    out.extend(indent + value_line(c, s, full) for c in d.fields)
    out.extend(
        capped(
            [indent + s.red(f"- node {_pos(p)}") for p in d.positions_removed]
            + [indent + s.green(f"+ node {_pos(p)}") for p in d.positions_added],
            full,
            "node changes",
            s,
            indent,
        )
    )
    out.extend(
        capped([indent + value_line(c, s, full) for c in d.state], full, "value changes", s, indent)
    )
    for fo in d.fan_outs:
        where = " in " + "/".join(fo.namespace) if fo.namespace else ""
        text = escape(f"fan-out {fo.fan_out}{where} ({fo.instance_count:,} instances)")
        out.append(indent + (s.green("+ " + text) if fo.op == "added" else s.red("- " + text)))
    stamps = [s.dim(fmt_time(t)) + "  " for t in times] if times else [""] * len(d.instances)
    out.extend(
        capped(
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
