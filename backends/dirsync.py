"""Names that survive a power cut: fsync the directory after each create, link and rename.

POSIX makes a new, renamed or removed name durable only once its directory is fsynced
(fsync(2): "an explicit fsync() on a file descriptor for the directory is also needed"); a
data file fsynced under a name that never reached the disk is lost whole at a power cut. ext4
and XFS usually commit the name with the file's first fsync, but nothing promises it, so every
name ckptlog creates and then relies on goes through this module, as SQLite does with its
journal's directory.

Invariants:
- :func:`make_dirs` creates the missing ancestors of a path one at a time, fsyncing each new
  directory's parent before creating the next, so a directory is never durable below a parent
  whose entry for it is not.
- :func:`sync_directory` raises :class:`StorageError` for a real failure (EIO: the names may
  not be on disk) and ignores only "this file system cannot fsync a directory" (EINVAL,
  ENOTSUP), as SQLite does.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from eventlog.errors import StorageError

_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def sync_directory(path: str | os.PathLike[str]) -> None:
    """Make the names in directory ``path`` (creates, links, renames, unlinks) durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise StorageError(
            e.errno or errno.EIO,
            f"opening the directory {str(path)!r} to make its names durable: {e}",
        ) from e
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _UNSUPPORTED:
            raise StorageError(
                e.errno or errno.EIO,
                f"fsync of the directory {str(path)!r} failed ({e}): the names created in it "
                "may not survive a power cut; check the disk and retry",
            ) from e
    finally:
        os.close(fd)


def make_dirs(path: Path) -> bool:
    """Create ``path`` and its missing ancestors, each made durable in its parent.

    Returns whether this call created ``path`` itself (``False``: it existed, or another
    process created it at the same time). Existing directories are left as they are, but the
    parent of ``path`` is fsynced either way when ``path`` was missing at the start, so a
    directory another process created concurrently is durable too before it is used.
    """
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    made = False
    for d in reversed(missing):
        try:
            d.mkdir()
            made = d == path
        except FileExistsError:
            pass  # another process is creating it too: its name is synced below all the same
        except OSError as e:
            raise StorageError(
                e.errno or errno.EIO, f"creating the log directory {str(d)!r}: {e}"
            ) from e
        sync_directory(d.parent)
    return made
