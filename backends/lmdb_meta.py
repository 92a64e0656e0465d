"""Checks of an LMDB ``data.mdb`` made with plain file reads, before LMDB maps it.

Why: LMDB maps the file and trusts its meta pages. A file shorter than its newest transaction
says (truncated by a full disk, a partial copy, a bad restore) makes the first read of a page
past its end kill the process with SIGBUS, which no Python code can catch; and LMDB 0.9's meta
pages carry no checksum, so a damaged transaction id makes it open the previous transaction
and silently drop the newest one. Both are checked here, on the file, first.

Layout read (LMDB 0.9, 64-bit, native byte order): the file starts with two meta pages; each is
a 16-byte page header followed by ``MDB_meta``: ``mm_magic`` (u32 at 16), ``mm_version`` (u32
at 20), the free-list database's ``md_pad`` holding the page size (u32 at 40), ``mm_last_pg``
(u64 at 136) and ``mm_txnid`` (u64 at 144). Transaction ``t`` writes its meta into page
``t % 2``, so a sound file's pages hold consecutive ids ``t`` and ``t - 1``, each in the page of
its parity (a new file: both ``0``). LMDB opens the meta with the larger id.

Invariant: nothing here writes, maps or locks the data file except :func:`check_data_file`'s
optional ``flock`` (the writers' lock of ``backends.lmdb``), taken so that no writer commits
between the two meta reads.
"""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass

LMDB_MAGIC = 0xBEEFC0DE
META_BYTES = 152  # through mm_txnid
STABLE_READS = 5
NO_PAGE = 2**64 - 1  # P_INVALID: an empty database's root
P_BRANCH, P_LEAF, P_OVERFLOW, P_LEAF2 = 0x01, 0x02, 0x04, 0x20
F_BIGDATA, F_SUBDATA = 0x01, 0x02


@dataclass(frozen=True)
class Meta:
    """One meta page: ``ok`` False when its magic or version is not LMDB 0.9's."""

    ok: bool
    page_bytes: int
    last_page: int
    txn_id: int
    roots: tuple[int, int] = (NO_PAGE, NO_PAGE)  # the free-list and main databases' root pages


@dataclass(frozen=True)
class DataFileState:
    """Both meta pages of a data file and the file's size, read in that order."""

    path: str
    file_bytes: int
    metas: tuple[Meta, Meta]
    beyond: int | None = None  # a page the newest transaction uses that lies past the end

    @property
    def newest(self) -> Meta:
        """The meta LMDB opens (the larger transaction id among the readable ones)."""
        good = [m for m in self.metas if m.ok] or list(self.metas)
        return max(good, key=lambda m: m.txn_id)

    @property
    def used_bytes(self) -> int:
        n = self.newest
        return (n.last_page + 1) * n.page_bytes

    @property
    def short(self) -> bool:
        """Shorter than the newest transaction's page count. Not damage by itself: pages a
        transaction allocated and freed again ("loose" pages) count but are never written, so
        a sound file may end a few pages early; :func:`read_state` then walks the B-trees."""
        return self.newest.ok and self.file_bytes < self.used_bytes

    def truncated(self) -> str | None:
        """Why the file is too short for its newest transaction, or ``None``."""
        n = self.newest
        if self.beyond is None:
            return None
        missing = self.used_bytes - self.file_bytes
        return (
            f"{self.path} is {self.file_bytes:,} bytes, but its last transaction (txn "
            f"{n.txn_id}) uses {self.used_bytes:,}: the last {missing:,} bytes "
            f"({-(-missing // n.page_bytes)} pages) are missing, and page {self.beyond}, which "
            "it uses, is past the end (a truncated copy, or a disk that filled up). LMDB "
            "would die of SIGBUS reading them, so the log was not opened: "
            "restore the file from a backup; `ckptlog verify` reads what is left"
        )

    def meta_damage(self) -> str | None:
        """Why the two meta pages cannot both be LMDB's, or ``None`` when they agree."""
        m0, m1 = self.metas
        if not (m0.ok and m1.ok):
            which = 0 if not m0.ok else 1
            return (
                f"{self.path}: LMDB meta page {which} is damaged (its magic or version is "
                "wrong); LMDB may open an older transaction than the last one committed. "
                "Restore the file from a backup"
            )
        t0, t1 = m0.txn_id, m1.txn_id
        if (t0, t1) == (0, 0) or (t0 % 2 == 0 and t1 % 2 == 1 and abs(t0 - t1) == 1):
            return None
        return (
            f"{self.path}: LMDB's meta pages hold transaction ids {t0} (page 0) and {t1} "
            "(page 1); a sound file holds two consecutive ids, the even one in page 0. One "
            "meta page is damaged, so LMDB would open an older transaction and silently "
            f"drop the saves of the newer one (it would open txn {max(t0, t1)}, which may "
            "itself be the damaged id). Restore the file from a backup; `ckptlog verify` "
            "reports what is readable"
        )


def _meta(raw: bytes) -> Meta | None:
    for order in ("<", ">"):
        magic, version = struct.unpack_from(order + "II", raw, 16)
        if magic == LMDB_MAGIC and version == 1:
            page = struct.unpack_from(order + "I", raw, 40)[0]
            last, txn = struct.unpack_from(order + "QQ", raw, 136)
            free_root = struct.unpack_from(order + "Q", raw, 80)[0]
            main_root = struct.unpack_from(order + "Q", raw, 128)[0]
            roots = (free_root, main_root)
            ok = page >= 512 and page & (page - 1) == 0
            return Meta(ok, page if ok else 4096, last, txn, roots)
    return None


def _read(fd: int, path: str) -> DataFileState | None:
    first = os.pread(fd, META_BYTES, 0)
    if len(first) < META_BYTES:
        return None
    m0 = _meta(first)
    if m0 is None or not m0.ok:
        return None  # not an LMDB file (or its first page is gone): LMDB says so itself
    second = os.pread(fd, META_BYTES, m0.page_bytes)
    m1 = _meta(second) if len(second) == META_BYTES else None
    size = os.fstat(fd).st_size  # after the metas: pages are written before their meta
    state = DataFileState(path, size, (m0, m1 or Meta(False, m0.page_bytes, 0, 0)))
    if not state.short:
        return state
    beyond = _reachable_beyond(fd, state.newest, size // state.newest.page_bytes)
    return DataFileState(path, size, state.metas, beyond)


def _reachable_beyond(fd: int, meta: Meta, pages: int) -> int | None:
    """The first page reachable from ``meta`` (both B-trees and every named database's,
    overflow pages included) that lies at or past page ``pages`` (the end of the file), or
    ``None``. Plain reads, one page at a time; a page that makes no sense (damage) is not
    followed (LMDB reports it as an error when it reads it, which is no crash)."""
    psize = meta.page_bytes
    order = "<" if struct.pack("=H", 1) == struct.pack("<H", 1) else ">"
    todo = [r for r in meta.roots if r != NO_PAGE]
    seen: set[int] = set()
    while todo:
        pgno = todo.pop()
        if pgno in seen or pgno > meta.last_page:
            continue  # past last_page LMDB refuses the page itself (MDB_PAGE_NOTFOUND)
        seen.add(pgno)
        if pgno >= pages:
            return pgno
        raw = os.pread(fd, psize, pgno * psize)
        if len(raw) < psize:
            return pgno
        _, _, flags, lower, _ = struct.unpack_from(order + "QHHHH", raw, 0)
        if flags & P_OVERFLOW:
            count: int = struct.unpack_from(order + "I", raw, 12)[0]
            if pgno + count > pages and pgno + count - 1 <= meta.last_page:
                return pgno + count - 1
            continue
        if not flags & (P_BRANCH | P_LEAF) or flags & P_LEAF2 or not 16 <= lower <= psize:
            continue
        for i in range((lower - 16) // 2):
            ptr = struct.unpack_from(order + "H", raw, 16 + 2 * i)[0]
            if ptr + 8 > psize:
                continue
            lo, hi, nflags, ksize = struct.unpack_from(order + "HHHH", raw, ptr)
            if flags & P_BRANCH:
                todo.append(lo | hi << 16 | nflags << 32)
                continue
            at = ptr + 8 + ksize
            if nflags & F_BIGDATA and at + 8 <= psize:
                todo.append(struct.unpack_from(order + "Q", raw, at)[0])
            elif nflags & F_SUBDATA and at + 48 <= psize:
                todo.append(struct.unpack_from(order + "Q", raw, at + 40)[0])
    return None


def read_state(path: str, *, lock: bool) -> DataFileState | None:
    """The meta pages and size of ``path`` (a ``data.mdb``); ``None`` when it is empty, too
    short to hold a meta page, or not an LMDB file (LMDB's own open then reports it).

    ``lock``: hold the writers' ``flock`` while reading, so no commit lands in between; else
    re-read until two reads agree (a commit between the two meta reads could pair an old and
    a new id).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                return _read(fd, path)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        state = _read(fd, path)
        for _ in range(STABLE_READS):
            again = _read(fd, path)
            if again == state:
                break
            state = again
        return state
    finally:
        os.close(fd)
