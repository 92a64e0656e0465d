"""``ckptlog``: look into a checkpoint log from the shell, over the read layer (eventlog.read).

The commands are a table (:data:`COMMANDS`, as pip's ``commands_dict``): a name, the module
that implements it and a one-line summary; a command's module is imported only when it runs
(or when ``--help`` lists its options). Each module defines ``add_arguments(parser)`` and
``run(ctx) -> exit status``; options several commands share are in eventlog.cli.options,
output in eventlog.cli.render, the runner (forked child, signals, exit statuses) in
eventlog.cli.runner.

Invariants:
- Read commands open the log read-only and never block a running writer (LMDB readers take
  no lock the writer waits for), and write nothing into the log's directory (an evidence copy
  opens without its lock file); only ``compact`` and ``copy`` write a log, and only to a new
  DEST (``export --format parquet`` writes its files into a new DEST directory, ``sql`` into
  a temporary one), and ``fork``, which appends one frame (a new invocation's first) to PATH,
  as a writer.
- Every kind of stream answers: what a stream is comes from the view that claims it
  (eventlog.views), never from parsing its key here; a stream with nothing to show is refused
  with exit status 2, never reported as deleted.
- stdout carries the answer (tables, or JSON with ``--json``); stderr carries progress bars
  (rich, only on a terminal), warnings and the one-line ``ckptlog: error: ...``. Colour only
  when stdout is a terminal and ``NO_COLOR`` is unset (``--color`` overrides). Text from the
  log is escaped before it reaches a terminal.
- Damage never crashes a command: what is readable is printed, what is not is named, and the
  exit status says so (``EXIT_CODES``). No traceback reaches the user; a signal sent to the
  parent reaches the forked child running the command (exit status 128 + signal).
"""

from __future__ import annotations

from eventlog.cli.context import (
    EXIT_CODES,
    INTERNAL,
    OK,
    PROBLEMS,
    UNREADABLE,
    USAGE,
    CliError,
    Ctx,
)
from eventlog.cli.runner import COMMANDS, Command, build_parser, main
from eventlog.read.text import fmt_gap, fmt_time, parse_time

__all__ = [
    "COMMANDS",
    "EXIT_CODES",
    "INTERNAL",
    "OK",
    "PROBLEMS",
    "UNREADABLE",
    "USAGE",
    "CliError",
    "Command",
    "Ctx",
    "build_parser",
    "fmt_gap",
    "fmt_time",
    "main",
    "parse_time",
]
