"""What every ``ckptlog`` command gets: exit statuses, the one-line error, and :class:`Ctx`
(parsed options, output streams, colours, the log opened read-only, the stream meant).

Invariants:
- A failure a command reports is a :class:`CliError` with its exit status; the runner prints
  it as one line (``ckptlog: error: ...``), never a traceback.
- Warnings and unreadable frames go to stderr, counted (a command that met one exits 1).
"""

from __future__ import annotations

import argparse
import errno
from typing import IO, Any, Final

from backends.lmdb_salvage import probe_in_child
from eventlog import forensics as fx
from eventlog import read
from eventlog.cli_render import ProgressBar, Style, colour_enabled
from eventlog.errors import CheckpointError, InvalidOption, NotALog, StorageError
from eventlog.streams import StreamInfo

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


class CliError(Exception):
    """A failure to report as one line with an exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def is_storage_error(e: BaseException) -> bool:
    """An error raised by the storage library itself (a damaged B-tree page, ...)."""
    return type(e).__module__.split(".")[0] == "lmdb"


def is_permission(e: BaseException | None) -> bool:
    while e is not None:
        if (
            isinstance(e, PermissionError)
            or (isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM))
            or "Permission denied" in str(e)
        ):
            return True
        e = e.__cause__
    return False


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
        try:
            self.opened = read.open_log(
                self.args.path,
                chain_key_file=getattr(self.args, "chain_key_file", None),
                probe=probe_in_child,
            )
        except InvalidOption as e:
            raise CliError(str(e), USAGE) from e.__cause__
        except (CheckpointError, OSError) as e:
            damaged = isinstance(e, (NotALog, StorageError))
            raise CliError(self._cannot_open(str(e), damaged), UNREADABLE) from e
        except Exception as e:
            if is_storage_error(e):
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

    def status(self) -> int:
        """OK, or PROBLEMS when an unreadable frame was met."""
        return PROBLEMS if self.unreadable else OK

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()
            self.opened = None

    # -- the stream a command is about ----------------------------------------------------------

    def resolve(self, *, required: bool = True) -> tuple[str, StreamInfo] | None:
        """The stream a command is about: ID (an invocation, an integration's stream key, or
        a name its view gives it, such as a LangGraph thread id) or ``--thread``/``--ns``; a
        usage error naming close matches."""
        assert self.opened is not None
        log = self.opened.log.log
        a = self.args
        inv: str | None = getattr(a, "invocation", None)
        thread: str | None = getattr(a, "thread", None)
        ns: str | None = getattr(a, "ns", None)
        if thread is not None:
            if inv is not None:
                raise CliError(f"give an ID ({inv!r}) or --thread, not both", USAGE)
            found = read.find(log, None, {"thread_id": thread, "checkpoint_ns": ns or ""})
            if found is None:
                where = f" in namespace {ns!r}" if ns else ""
                raise CliError(
                    f"no LangGraph thread {thread!r}{where} in the log at {a.path!r}"
                    f"{self._did_you_mean(thread)}; list the threads with `ckptlog ls PATH`",
                    USAGE,
                )
            return found
        if inv is None:
            if ns is not None:
                raise CliError("--ns needs --thread (the LangGraph thread it belongs to)", USAGE)
            if not required:
                return None
            raise CliError(
                "give an invocation ID (or --thread THREAD for a LangGraph thread)", USAGE
            )
        labels = {"thread_id": inv, "checkpoint_ns": ns} if ns is not None else None
        found = read.find(log, inv, labels)
        if found is None:
            raise CliError(
                f"no invocation {inv!r} in the log at {a.path!r}{self._did_you_mean(inv)}; "
                "list the invocations it holds with `ckptlog ls PATH --all`",
                USAGE,
            )
        return found

    def _did_you_mean(self, wanted: str) -> str:
        assert self.opened is not None
        close = read.streams.close_matches(self.opened.log.log, wanted)
        if not close:
            return ""
        return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def seq_arg(text: str, last: int, inv: str) -> int:
    """A seq option: a number in ``0..last``, or ``latest``."""
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


def split(values: list[str]) -> list[str]:
    """Repeatable, comma-separated option values, as one list."""
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def option(args: argparse.Namespace, name: str, default: Any = None) -> Any:
    return getattr(args, name, default)
