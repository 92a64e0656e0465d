"""File-level checks and salvage of an LMDB log directory (``data.mdb``), beside the backend.

Reading a page past the end of a truncated ``data.mdb`` kills the process with SIGBUS inside
LMDB, which no ``try`` can catch. :func:`data_file_check` reads the LMDB meta pages with plain
file reads to tell a short file; :func:`zero_filled_copy` makes a private copy whose missing
tail reads as zeros, so readers see damaged pages as errors instead of dying.

Invariants:
- Nothing here writes to the directory it checks.
- Nothing here forks except :func:`probe_in_child`, which command-line tools may call (a
  library call never forks its caller's process).
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Final

import msgspec

DATA_FILE: Final = "data.mdb"
LMDB_MAGIC: Final = 0xBEEFC0DE


class DataFileCheck(msgspec.Struct, frozen=True):
    """What the newest LMDB meta page of ``data.mdb`` says, against the file's real size."""

    path: str
    file_bytes: int
    used_bytes: int  # (last page + 1) x page size: the file must be at least this long
    page_bytes: int
    txn_id: int

    @property
    def short(self) -> bool:
        return self.file_bytes < self.used_bytes


def data_file_check(path: str | os.PathLike[str]) -> DataFileCheck | None:
    """Read the LMDB meta pages of ``path/data.mdb`` (no LMDB call: plain file reads).

    ``None`` when there is no such file or it does not start with LMDB meta pages (opening
    it then fails with LMDB's own message). Layout (LMDB 0.9, 64-bit, native byte order):
    each meta page is a 16-byte page header followed by ``MDB_meta``; the page size is the
    free-list database's ``md_pad`` (offset 40), ``mm_last_pg`` is at 136, ``mm_txnid`` at 144.
    """
    file = Path(path) / DATA_FILE
    try:
        with open(file, "rb") as f:
            first = f.read(160)
            size = os.fstat(f.fileno()).st_size
            if len(first) < 160:
                return None
            order = _byte_order(first)
            if order is None:
                return None
            page = struct.unpack_from(order + "I", first, 40)[0]
            if page < 512 or page & (page - 1):
                return None
            f.seek(page)
            second = f.read(160)
    except OSError:
        return None
    metas = [first] + ([second] if len(second) == 160 and _byte_order(second) == order else [])
    best = max(
        (struct.unpack_from(order + "QQ", m, 136) for m in metas), key=lambda lt: lt[1]
    )  # (last page, txn id) of the newest meta
    return DataFileCheck(str(file), size, (best[0] + 1) * page, page, best[1])


def _byte_order(meta_page: bytes) -> str | None:
    for order in ("<", ">"):
        magic, version = struct.unpack_from(order + "II", meta_page, 16)
        if magic == LMDB_MAGIC and version == 1:
            return order
    return None


def probe_in_child(path: str) -> int | None:
    """Walk every table of the LMDB environment at ``path`` in a forked child; the signal
    that killed it (SIGBUS: a page past the end of a truncated file), or ``None`` when the
    walk finished. Forks: for command-line tools, never called by the library itself."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its outcome is the exit status
        code = 0
        try:
            import lmdb  # noqa: PLC0415 - only in the child

            env = lmdb.open(path, readonly=True, max_dbs=64, subdir=True)
            with env.begin() as txn:
                names = [bytes(k) for k, _ in txn.cursor()]
            for name in names:
                db = env.open_db(name, create=False)
                with env.begin(db=db) as txn:
                    for _ in txn.cursor():
                        pass
        except BaseException:  # noqa: BLE001 - any error is the parent's to report, not a crash
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None


def zero_filled_copy(check: DataFileCheck, parent: str | None = None) -> str:
    """A new directory (under ``parent``, default the temp dir) holding a copy of the data
    file cut or extended to the length its last transaction uses: a missing tail reads as
    zeros (sparse). The caller removes the directory."""
    directory = tempfile.mkdtemp(prefix="ckptlog-salvage-", dir=parent)
    target = os.path.join(directory, DATA_FILE)
    try:
        shutil.copyfile(check.path, target)
        os.truncate(target, check.used_bytes)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory
