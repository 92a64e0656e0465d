"""Opening a log read-only for forensics, never crashing on a truncated data file.

The only forensics module that builds a :class:`~eventlog.checkpoints.CheckpointLog` (the
package exposes it lazily, so CheckpointLog can use the rest of forensics without a cycle).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends import lmdb_meta
from backends.lmdb_salvage import DATA_FILE, data_file_check, zero_filled_copy
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import NotALog
from eventlog.log_open import is_server_url
from eventlog.reports import Problem

Prober = Callable[[str], int | None]
"""``probe(path)``: read every page of the log at ``path`` somewhere a crash cannot hurt (a
forked child: ``backends.lmdb_salvage.probe_in_child``); the signal that killed the reader,
or ``None``."""


class Opened:
    """A checkpoint log opened read-only for forensics, with storage-level problems found
    on the way (a truncated ``data.mdb`` is read from a zero-filled private copy)."""

    def __init__(self, log: CheckpointLog, problems: list[Problem], copy_dir: str | None) -> None:
        self.log = log
        self.problems = problems
        self._copy_dir = copy_dir

    def close(self) -> None:
        try:
            self.log.close()
        finally:
            if self._copy_dir is not None:
                shutil.rmtree(self._copy_dir, ignore_errors=True)

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_readonly(
    path: str | os.PathLike[str], *, probe: Prober | bool | None = None, **options: Any
) -> Opened:
    """Open the log at ``path`` read-only, never crashing on a truncated ``data.mdb``.

    When the file is shorter than its newest LMDB transaction says, the log is read from a
    private copy whose missing tail is zero-filled, so every reader sees damaged pages as
    errors (reported) rather than dying of SIGBUS. Whether the file is short is read from its
    LMDB meta pages (``backends.lmdb_meta``), as the library does before it maps a file;
    ``probe`` is accepted for callers that pass one and is no longer needed.
    """
    location = os.fspath(path)
    if is_server_url(location):  # a server: no file to check
        return Opened(CheckpointLog.open(location, readonly=True, **options), [], None)
    if not Path(location).is_dir():
        raise NotALog(
            f"no ckptlog log at {location!r}: expected a directory holding {DATA_FILE}; "
            "check the path"
        )
    check = data_file_check(location)
    problems: list[Problem] = []
    copy_dir: str | None = None
    state = lmdb_meta.read_state(os.path.join(location, DATA_FILE), lock=False)
    if check is not None and state is not None and state.truncated() is not None:
        # A used page lies past the end: the library refuses to map it (DamagedLog), so the
        # file is read from a copy.
        missing = check.used_bytes - check.file_bytes
        problems.append(
            Problem(
                "truncated",
                f"{check.path} is {check.file_bytes:,} bytes, but its last transaction "
                f"(txn {check.txn_id}) uses {check.used_bytes:,}: the last "
                f"{missing:,} bytes ({-(-missing // check.page_bytes)} pages) are missing; "
                "read from a copy with them zero-filled: what they held is reported "
                "unreadable. Restore the file from a backup",
            )
        )
        parent = getattr(sys.modules.get("eventlog.forensics"), "SALVAGE_PARENT", None)
        copy_dir = zero_filled_copy(check, parent)
    try:
        log = CheckpointLog.open(copy_dir or location, readonly=True, **options)
    except BaseException:
        if copy_dir is not None:
            shutil.rmtree(copy_dir, ignore_errors=True)
        raise
    return Opened(log, problems, copy_dir)


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
