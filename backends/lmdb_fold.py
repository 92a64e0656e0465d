"""Folded tables: several logical tables of the LMDB backend kept in one sub-database (issue 28).

A durable save writes rows in a stream's ``streams``, ``heads``, ``bodies`` and ``positions``
rows. Kept as four LMDB sub-databases, each commit copies four root-to-leaf paths and four
records of the main database; folded into one sub-database, a stream's rows sit on one leaf
(or neighbouring ones) under one root, and a save dirties fewer pages.

Layout (a log folds or does not, decided when it is created; never mixed):
- The folded rows live in the sub-database named ``rows:`` + the folded table names, comma
  separated, in slot order (``rows:streams,heads,bodies,positions`` for a new log). Its
  presence is what marks a log as folded; an older log (no such name) keeps one sub-database
  per table. Each folded table also keeps its own sub-database name, created empty and never
  written: it says the table exists (a table declared by a materialized view), as before.
- The table in slot ``i`` owns the tag bytes ``8i`` to ``8i + 7``. A logical key ``k`` of 8 bytes
  or more is stored as ``k[:8] + (8i + 7) + k[8:]``; a shorter one (only tests use those) as
  ``k`` padded with zero bytes to 8, then ``8i + len(k) - 1``. Within a table this map keeps
  bytewise order both ways, and the tag (byte 8) tells which table a stored key belongs to: a
  logical range is the stored range between the bounds' images, with other tables' rows
  jumped over (cursor ``set_range``) rather than walked.
- All four tables' keys start with the stream id (a big-endian u64), so a stream's rows are
  neighbours: its index rows (slot 0) and then its head, body and positions.
- A folded key is one byte longer than its logical key, so a folded log's keys are limited to
  LMDB's key limit minus one (``max_key_bytes`` reports it; the folded tables' keys are 8 to
  16 bytes long).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

PREFIX: Final = "rows:"
FOLDED: Final = ("streams", "heads", "bodies", "positions")  # a new log's fold, in slot order
MAX_TABLES: Final = 31  # slot i owns tags 8i..8i+7; 8 * 31 + 7 < 255 keeps hi + 1 a byte
_END8: Final = 1 << 64
MEMO_MAX: Final = 4096  # stored keys remembered per folded table (then forgotten at once)


def db_name(tables: tuple[str, ...]) -> str:
    """The sub-database name of a fold of ``tables`` (slot order)."""
    return PREFIX + ",".join(tables)


def parse(names: list[str]) -> tuple[str, tuple[str, ...]] | None:
    """The fold among the main database's ``names`` (its sub-database name and its tables),
    or ``None``: an unfolded log."""
    for name in names:
        if name.startswith(PREFIX):
            return name, tuple(name[len(PREFIX) :].split(","))
    return None


class Folded:
    """One logical table stored in a fold: the fold's sub-database and this table's tags."""

    __slots__ = ("db", "hi", "hi_next", "limit", "lo", "lo_tag", "memo", "table", "tag")

    def __init__(self, db: Any, table: str, slot: int, limit: int) -> None:
        self.db = db
        self.table = table
        self.lo = slot * 8
        self.hi = self.lo + 7
        self.tag = bytes((self.hi,))  # (the tag of a key of 8 bytes or more)
        self.lo_tag = bytes((self.lo,))
        self.hi_next = bytes((self.hi + 1,))
        self.limit = limit  # the longest logical key
        # Stored keys by logical key: a save puts a stream's head, body and positions rows
        # under the same keys each time, and building a key costs ~2.5k instructions where a
        # lookup costs ~0.5k. Callers look up ``memo.get(k) or stored(k)`` inline. (Shared by
        # threads: a dict's get, set and clear are each atomic, and its values immutable.)
        self.memo: dict[bytes, bytes] = {}

    def key(self, k: bytes) -> bytes:
        """The stored key of the logical key ``k`` (1 to :attr:`limit` bytes)."""
        if len(k) >= 8:
            return k[:8] + self.tag + k[8:]
        return k + bytes(8 - len(k)) + bytes((self.lo + len(k) - 1,))

    def stored(self, k: bytes) -> bytes | None:
        """:meth:`key` of ``k``, remembered in :attr:`memo`; ``None`` when ``k`` is empty or
        longer than :attr:`limit` (no stored key: nothing can be stored under it)."""
        n = len(k)
        if n >= 8:  # (key(), inline: a save's index row misses here every time)
            if n > self.limit:
                return None
            pk = k[:8] + self.tag + k[8:]
        elif n:
            pk = self.key(k)
        else:
            return None
        memo = self.memo
        if len(memo) >= MEMO_MAX:
            memo.clear()
        memo[k] = pk
        return pk

    def logical(self, stored: bytes) -> bytes:
        """The logical key of one of this table's stored keys."""
        c = stored[8]
        if c == self.hi:
            return stored[:8] + stored[9:]
        return stored[: c - self.lo + 1]

    def bounds(self, start: bytes | None, stop: bytes | None) -> tuple[bytes | None, bytes | None]:
        """The stored range of the logical ``start <= key < stop`` (``None``: unbounded; an
        empty ``start`` bounds nothing; the caller has already answered an empty ``stop``)."""
        return (self.key(start) if start else None), (None if stop is None else self.key(stop))

    def contiguous(self, pstart: bytes | None, pstop: bytes | None) -> bool:
        """Whether the stored range holds only this table's rows (one stream id, long keys)."""
        tag = self.hi
        return (
            pstart is not None
            and pstop is not None
            and pstart[8] == tag
            and pstop[8] == tag
            and pstart[:8] == pstop[:8]
        )


def scan(
    cur: Any, f: Folded, start: bytes | None, stop: bytes | None, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """The logical pairs of ``f`` with ``start <= key < stop``, through the cursor ``cur`` on
    the fold: runs of this table's rows read one by one, the other tables' rows jumped over."""
    if stop is not None and not stop:
        return
    pstart, pstop = f.bounds(start, stop)
    lo, hi, logical = f.lo, f.hi, f.logical
    if not reverse:
        ok = cur.set_range(pstart) if pstart is not None else cur.first()
        while ok:
            k = cur.key()
            if pstop is not None and k >= pstop:
                return
            c = k[8]
            if c < lo:  # another table's rows of this stream id, before ours
                ok = cur.set_range(k[:8] + f.lo_tag)
            elif c > hi:  # past ours in this stream id: on to the next
                nxt = int.from_bytes(k[:8], "big") + 1
                if nxt >= _END8:
                    return
                ok = cur.set_range(nxt.to_bytes(8, "big") + f.lo_tag)
            else:
                yield logical(k), cur.value()
                ok = cur.next()
        return
    ok = cur.prev() if pstop is not None and cur.set_range(pstop) else cur.last()
    while ok:
        k = cur.key()
        if pstart is not None and k < pstart:
            return
        c = k[8]
        if c > hi:  # to the last row under our tags of this stream id (set_range finds k)
            ok = cur.set_range(k[:8] + f.hi_next) and cur.prev()
        elif c < lo:  # to the previous stream id
            ok = cur.set_range(k[:8]) and cur.prev()
        else:
            yield logical(k), cur.value()
            ok = cur.prev()


def stored_prefix(f: Folded, prefix: bytes) -> bytes | None:
    """The stored prefix of every key of ``f`` starting with ``prefix``, when there is one
    (``prefix`` of 8 bytes or more: one stream id's run); otherwise ``None``."""
    return f.key(prefix) if len(prefix) >= 8 else None


def unfold(rows: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Stored pairs of a folded table's long keys, with their logical keys."""
    return [(k[:8] + k[9:], v) for k, v in rows]


def count(cur: Any, f: Folded) -> int:
    """How many rows ``f`` holds (its runs walked, the rest jumped over)."""
    return sum(1 for _ in scan(cur, f, None, None, False))
