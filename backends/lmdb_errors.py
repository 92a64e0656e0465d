"""LMDB's errors in this library's terms (:func:`translate`), for the LMDB backend's modules."""

from __future__ import annotations

import errno
import os

import lmdb

from eventlog.errors import (
    CheckpointError,
    DamagedLog,
    NotALog,
    ReadOnlyLog,
    StorageError,
    StorageFull,
    UnsupportedFormat,
)


def translate(err: lmdb.Error, where: str, path: str | None = None) -> CheckpointError:
    """Map an lmdb error to our hierarchy, keeping lmdb's own hint text. ``path``: the log's
    directory, to tell a full disk from a failing one when LMDB reports an I/O error."""
    if isinstance(err, lmdb.MapFullError):
        return StorageFull(f"{where}: the LMDB map is full ({err}); raise map_size_max")
    if isinstance(err, lmdb.DiskError):  # ENOSPC: keeps the errno for callers that test it
        return StorageError(errno.ENOSPC, f"{where}: {DISK_FULL} ({err}). {FREE_SPACE}")
    if path is not None and "Input/output error" in str(err):
        # LMDB reports a short write (what a full disk gives) as EIO: tell which it was.
        free = free_bytes(path)
        if free is not None and free < DISK_FULL_BELOW:
            return StorageError(
                errno.ENOSPC,
                f"{where}: {DISK_FULL}: {free:,} bytes free on the disk holding it (LMDB "
                f"reported {err}). {FREE_SPACE}",
            )
        return StorageError(
            errno.EIO,
            f"{where}: the disk reported an I/O error ({err}) with "
            f"{'unknown' if free is None else f'{free:,} bytes'} free: nothing of this write "
            "was committed. Check the device (dmesg, SMART) before writing again",
        )
    if isinstance(err, lmdb.VersionMismatchError):
        return UnsupportedFormat(f"{where}: LMDB file version mismatch ({err})")
    if isinstance(err, lmdb.CorruptedError):
        return DamagedLog(
            f"{where}: the log's LMDB pages are damaged ({err}); restore it from a backup. "
            "`ckptlog verify PATH` reports what is still readable",
            kind="pages",
        )
    if isinstance(err, lmdb.InvalidError):
        return NotALog(f"{where}: not a readable LMDB environment ({err})")
    if isinstance(err, lmdb.ReadonlyError):
        return ReadOnlyLog(f"{where}: the log is open read-only ({err})")
    return StorageError(f"{where}: LMDB error {type(err).__name__}: {err}")


DISK_FULL_BELOW = 4 << 20  # free bytes under which an I/O error on write means a full disk
DISK_FULL = "the disk is full, so the write was not committed (nothing of it was saved)"
FREE_SPACE = (
    "Free space on the disk holding the log (or move the log to a larger one), then retry: "
    "the log is intact and usable, and buffered saves are kept for the next flush"
)


def free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
