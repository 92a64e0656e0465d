"""The command table and the runner: parse, run the command in a forked child, report.

Invariants:
- A command's module is imported only when it runs (or ``--help`` shows it): the table names
  it as text.
- ``isolate`` (the default on the real stdout/stderr with ``fork``): the command runs in a
  child process, so a reader killed by a damaged page (SIGBUS, an abort) is reported in one
  line by the parent; signals sent to the parent are passed on to the child.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from typing import IO, Any, Final, NamedTuple

from eventlog import forensics as fx
from eventlog.cli.context import (
    EXIT_CODES,
    INTERNAL,
    OK,
    PROBLEMS,
    UNREADABLE,
    USAGE,
    CliError,
    Ctx,
    is_storage_error,
)
from eventlog.cli.options import Parser, common
from eventlog.errors import CheckpointError, CorruptFrame, NotALog, StorageError, UnsupportedFormat
from eventlog.read.values import package_version
from eventlog.reports import Problem, VerifyReport


class Command(NamedTuple):
    """A row of the command table: the module that implements it, and what it does."""

    module: str
    summary: str


COMMANDS: Final[dict[str, Command]] = {
    "ls": Command("ls", "list the invocations in a log"),
    "show": Command("show", "show an invocation's record: the latest, --at SEQ or --as-of TIME"),
    "history": Command("history", "list every save of an invocation"),
    "diff": Command(
        "diff",
        "what changed in an invocation between two seqs, or between two"
        " invocations (A@SEQ B@SEQ: an original and its fork)",
    ),
    "replay": Command("replay", "step through an invocation's saves with what each changed"),
    "export": Command(
        "export", "write history as JSON Lines (one invocation, or all), or as Parquet tables"
    ),
    "tail": Command("tail", "print each save as it is committed, by any process (until Ctrl-C)"),
    "sql": Command("sql", "run a SQL query (DuckDB) over a log's history as tables"),
    "search": Command("search", "find the frames, in every invocation, that hold a value or an id"),
    "verify": Command(
        "verify", "check checksums, hash chains, index, materialized rows, forks (and a head)"
    ),
    "stats": Command("stats", "counts and sizes of a log"),
    "compact": Command("compact", "write a compacted copy of a log to a new log"),
    "serve": Command("serve", "a read-only web viewer of a log on http://127.0.0.1:8765/"),
    "fork": Command("fork", "WRITES: start a new invocation from one save of another"),
    "head": Command("head", "one digest of every stream's head, to anchor elsewhere"),
    "copy": Command("copy", "copy a log byte for byte to another engine (LMDB <-> PostgreSQL)"),
    "bench": Command("bench", "run the benchmarks (python -m benchmarks ARGS)"),
}

FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
"""Sent to the parent (``timeout``, CI, ``kill``), passed on to the forked child running the
command; the exit status is then ``128 + signal`` (143 for SIGTERM), as for any process."""


def command_module(name: str) -> Any:
    return importlib.import_module(f"eventlog.cli.commands.{COMMANDS[name].module}")


def build_parser(command: str | None = None) -> Parser:
    """The ``ckptlog`` parser; with ``command``, only that command's module is imported (the
    others are listed by their summaries)."""
    parser = Parser(
        prog="ckptlog",
        description="Look into a ckptlog checkpoint log: what was saved, when, in what order,\n"
        "and proof that nothing was altered. Logs are opened read-only (compact and copy\n"
        "write only their new DEST; fork appends one frame), so a running writer is never\n"
        "blocked.",
        epilog=EXIT_CODES + "\ntimes: seconds since the epoch or ISO 8601; shown in UTC.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ckptlog {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    parent = common()
    for name, row in COMMANDS.items():
        if name == "bench":
            b = sub.add_parser(
                name,
                help=row.summary,
                description="Run the benchmarks: every argument after `bench` goes to "
                "`python -m benchmarks` (try `ckptlog bench --help`).",
                add_help=False,
            )
            b.add_argument("bench_args", nargs=argparse.REMAINDER)
            continue
        p = sub.add_parser(
            name, help=row.summary, description=row.summary, parents=[parent],
            epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip
        if command is None or command == name:
            command_module(name).add_arguments(p)
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
            args = argparse.Namespace(command="bench", bench_args=arguments[1:])
        else:
            chosen = arguments[0] if arguments and arguments[0] in COMMANDS else None
            args = build_parser(chosen or "").parse_args(arguments)
    except CliError as e:
        error(err, str(e))
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
        code: int = command_module(args.command).run(ctx)
        return code
    except CliError as e:
        error(err, str(e))
        return e.code
    except KeyboardInterrupt:
        error(err, "interrupted")
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
        error(err, message)
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

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)  # the child stops as told; we report how it ended

    # Ctrl-C reaches the child from the terminal: the parent ignores it, unless the command
    # ends on SIGINT by design (``tail``), which then gets a SIGINT sent to the parent alone.
    on_int = forward if getattr(command_module(args.command), "FORWARD_SIGINT", False) else None
    previous: dict[int, Any] = {
        signal.SIGINT: signal.signal(signal.SIGINT, on_int or signal.SIG_IGN)
    }

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
        error(err, f"stopped by {fx.signal_name(sig)}")
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
        from eventlog.cli.commands.verify import truncated  # noqa: PLC0415 - verify only
        from eventlog.cli.render import print_verify  # noqa: PLC0415

        problems = [Problem("storage", detail)]
        if check is not None and check.short:
            problems.insert(0, truncated(check))
        print_verify(Ctx(args, out, err), VerifyReport(problems=problems), finished=False)
        out.flush()
        return PROBLEMS
    error(err, detail)
    return UNREADABLE


def _status_of(e: BaseException) -> int:
    if isinstance(e, CorruptFrame):
        return PROBLEMS
    if isinstance(e, (NotALog, UnsupportedFormat, StorageError)) or is_storage_error(e):
        return UNREADABLE
    if isinstance(e, CheckpointError):
        return USAGE
    return INTERNAL


def error(err: IO[str], message: str) -> None:
    text = " ".join(message.split())  # one line, whatever the message held
    err.write(f"ckptlog: error: {text}\n")
    err.flush()
