"""Times and values as text, the same in the command line, the viewer and exports.

Invariants:
- Times are UTC, ISO 8601 with milliseconds; input times are seconds since the epoch or ISO
  8601 (no offset means UTC); a bad one raises :class:`~eventlog.errors.InvalidArgument`.
- Text from the log goes through :func:`escape`: control characters print as escapes, never
  act on a terminal.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any, Protocol

from eventlog.errors import InvalidArgument

__all__ = [
    "PLAIN",
    "Plain",
    "Styler",
    "brief",
    "escape",
    "fmt_gap",
    "fmt_time",
    "iso_time",
    "parse_time",
]


class Styler(Protocol):
    """How a face colours text (the command line's rich styles; :data:`PLAIN`: none)."""

    def red(self, text: str) -> str: ...
    def green(self, text: str) -> str: ...
    def yellow(self, text: str) -> str: ...
    def bold(self, text: str) -> str: ...
    def dim(self, text: str) -> str: ...


class Plain:
    """No colour: text as it is (the viewer, JSON)."""

    enabled = False

    def red(self, text: str) -> str:
        return text

    green = yellow = bold = dim = red


PLAIN = Plain()


def escape(text: str) -> str:
    """``text`` with every non-printable character as a Python escape (``\\x1b``, ``\\n``,
    ``\\u2028``), so a terminal shows it instead of obeying it; a backslash is doubled only
    when something else was escaped (plain names read as they are)."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def fmt_time(t: float | None) -> str:
    """UTC, ISO 8601 with milliseconds (unambiguous across machines)."""
    if t is None:
        return "-"
    try:
        when = dt.datetime.fromtimestamp(t, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return repr(t)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def iso_time(t: float | None) -> str | None:
    """ISO 8601 (UTC, milliseconds) beside epoch seconds in JSON; None for no time."""
    return None if t is None or not math.isfinite(t) else fmt_time(t)


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
        raise InvalidArgument(
            f"cannot read {text!r} as a time: give seconds since the epoch (1718100000.5) or "
            "ISO 8601 (2024-06-11T10:00:00Z; no offset means UTC)"
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
