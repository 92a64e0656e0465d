"""What the writer (eventlog.commit) makes of a commit the storage refused: the error each
caller of the commit gets, and each flush that covered a buffered frame it kept."""

from __future__ import annotations

import errno

from eventlog.errors import FlushFailed, ReadOnlyLog, StorageError, StorageFull


def _is_storage_failure(e: BaseException) -> bool:
    """An error of the medium (disk full, I/O error), not of the frames being written."""
    return isinstance(e, OSError) and not isinstance(e, ReadOnlyLog)


def _is_disk_full(e: BaseException) -> bool:
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, StorageFull) or getattr(seen, "errno", None) == errno.ENOSPC:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _storage_error(e: Exception) -> StorageError:
    """``e`` as a :class:`StorageError` (a bare ``OSError`` from the backend is wrapped)."""
    if isinstance(e, StorageError):
        return e
    full = _is_disk_full(e)
    err = StorageError(
        f"writing the log failed: {type(e).__name__}: {e}; "
        + (
            "the disk is full: free space, then save again"
            if full
            else "check the medium the log is on, then save again"
        )
    )
    err.errno = getattr(e, "errno", None)
    err.__cause__ = e
    return err


def _flush_failed(failure: StorageError, kept: int) -> FlushFailed:
    what = "the disk is full" if _is_disk_full(failure) else "the storage failed"
    err = FlushFailed(
        f"flush failed: {what} ({failure}). The {kept} buffered frame(s) it was to commit are "
        "kept in memory, in order: the next flush() or close() (or a durable save of their "
        "stream) writes them. Free space and flush again; they are lost if the process dies "
        "first",
        kept=kept,
    )
    err.errno = failure.errno
    err.__cause__ = failure
    return err
