"""Terminal output for ``ckptlog`` and the demo, through rich: colours, tables, progress bars,
a pager, and escaping of what the log holds.

Invariants:
- Colour only when the stream is a terminal, ``NO_COLOR`` is unset and ``TERM`` is not
  ``dumb`` (``--color always|never`` overrides); rich decides what a terminal is.
- Piped output is plain, stable text: no ANSI codes, no ``\\r`` progress frames (a progress
  bar draws only on a terminal), tables never wrap or truncate (no terminal width applies)
  and carry no trailing spaces.
- Text from the log (ids, node names, labels) goes through :func:`escape` before it reaches
  a terminal: control characters print as escapes (``\\x1b``, ``\\n``), never act; wide
  characters are measured in terminal cells, so columns stay aligned.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from typing import IO, Any, Final

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style as RichStyle
from rich.table import Table
from rich.text import Text

from eventlog.forensics.progress import ProgressBar
from eventlog.read.text import escape

__all__ = [
    "Pager",
    "ProgressBar",
    "Style",
    "colour_enabled",
    "console_for",
    "escape",
    "is_terminal",
    "pad",
    "table",
    "width",
]

TABLE_WIDTH: Final = 1 << 20  # piped tables: wide enough never to wrap


def console_for(stream: IO[str]) -> Console:
    """A rich console on ``stream`` (it detects a terminal, ``NO_COLOR`` and ``TERM=dumb``)."""
    return Console(file=stream, highlight=False, markup=False, emoji=False, soft_wrap=True)


def colour_enabled(choice: str, stream: IO[str]) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    console = console_for(stream)
    return console.is_terminal and not console.no_color and not console.is_dumb_terminal


def is_terminal(stream: IO[str]) -> bool:
    return console_for(stream).is_terminal


class Style:
    """Colours rendered by rich (ANSI on a colour terminal), or plain text."""

    _STYLES: Final = {
        "red": RichStyle(color="red"),
        "green": RichStyle(color="green"),
        "yellow": RichStyle(color="yellow"),
        "bold": RichStyle(bold=True),
        "dim": RichStyle(dim=True),
    }

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, name: str, text: str) -> str:
        if not self.enabled:
            return text
        return self._STYLES[name].render(text, color_system=ColorSystem.STANDARD)

    def red(self, text: str) -> str:
        return self._wrap("red", text)

    def green(self, text: str) -> str:
        return self._wrap("green", text)

    def yellow(self, text: str) -> str:
        return self._wrap("yellow", text)

    def bold(self, text: str) -> str:
        return self._wrap("bold", text)

    def dim(self, text: str) -> str:
        return self._wrap("dim", text)


def width(text: str) -> int:
    """Terminal cells ``text`` takes (ANSI colour codes take none, wide characters two)."""
    return cell_len(Text.from_ansi(text).plain) if "\x1b" in text else cell_len(text)


def pad(text: str, cells: int, align: str = "l") -> str:
    """``text`` padded with spaces to ``cells`` terminal cells (``r``: on the left)."""
    fill = " " * max(0, cells - width(text))
    return fill + text if align == "r" else text + fill


def table(
    headers: Sequence[str] | None,
    rows: Iterable[Sequence[str]],
    align: str,
    out: IO[str],
    *,
    colour: bool = False,
) -> None:
    """Aligned columns through a rich ``Table`` (``align``: ``l`` or ``r`` per column); cells
    may hold ANSI colour (from :class:`Style`); no header line for ``None``."""
    t = Table(
        box=None,
        show_header=headers is not None,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        header_style="bold" if colour else "",
        expand=False,
    )
    for i, a in enumerate(align):
        t.add_column(
            headers[i] if headers is not None else "",
            justify="right" if a == "r" else "left",
            no_wrap=True,
        )
    for row in rows:
        t.add_row(*(Text.from_ansi(cell) if "\x1b" in cell else Text(cell) for cell in row))
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=TABLE_WIDTH,
        color_system="standard" if colour else None,
        force_terminal=colour,
        no_color=not colour,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
    )
    console.print(t)
    for line in buffer.getvalue().splitlines():
        out.write(line.rstrip() + "\n")


class Pager:
    """Output through ``$PAGER`` (default ``less -FRX``: it exits at once when everything fits
    on one screen) when stdout is a terminal; otherwise straight to ``out``. Lines reach the
    pager as they are written, so the first screen shows before the last row is read."""

    def __init__(self, out: IO[str], enabled: bool) -> None:
        self.out = out
        self._proc: subprocess.Popen[str] | None = None
        if not enabled or not is_terminal(out):
            return
        command = os.environ.get("CKPTLOG_PAGER", os.environ.get("PAGER", "less"))
        if not command.strip() or command.strip() == "cat":
            return
        argv = command.split()
        if shutil.which(argv[0]) is None:
            return
        env = dict(os.environ)
        env.setdefault("LESS", "-FRX")
        try:
            out.flush()
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, text=True, env=env)
        except OSError:
            self._proc = None

    @property
    def stream(self) -> Any:
        return self._proc.stdin if self._proc is not None else self.out

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except BrokenPipeError:
            pass  # the user quit the pager early
        self._proc.wait()
        self._proc = None
