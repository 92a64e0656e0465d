"""The LMDB backend's transactions: reads, writes, and the writes that also list their changes
(the redo record of a durable commit). Opened by :mod:`backends.lmdb`, which owns the
environment, its locks and its commits.

Invariants:
- Values are returned as ``bytes`` copies (``buffers=False``), so nothing refers to the map
  after a transaction ends.
- ``append`` puts with ``append=True`` only after checking the key is greater than the last key,
  since an out-of-order append corrupts the B-tree.
- A table kept in the fold (:mod:`backends.lmdb_fold`) is a :class:`Folded` in the tables map:
  every method maps its keys there and back, so callers see the logical table.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import islice
from operator import itemgetter
from typing import Any

import lmdb

from backends import lmdb_fold
from backends.base import ReadTxn, WriteTxn, check_ascending, prefix_end
from backends.lmdb_errors import translate
from backends.lmdb_fold import Folded
from eventlog.errors import CheckpointError


class LmdbRead(ReadTxn):
    def __init__(self, txn: Any, dbs: dict[str, Any]) -> None:
        self._txn = txn
        self._dbs = dbs

    def _db(self, table: str) -> Any:
        try:
            return self._dbs[table]
        except KeyError:
            raise CheckpointError(
                f"table {table!r} was not declared when this backend was opened; "
                f"declared: {sorted(self._dbs)}"
            ) from None

    def get(self, table: str, key: bytes) -> bytes | None:
        try:  # (self._db(table), inline for a declared table)
            db = self._dbs[table]
        except KeyError:
            db = self._db(table)  # raises
        if db is None or not key:  # LMDB rejects an empty key; none can be stored anyway
            return None
        if db.__class__ is Folded:
            pk = db.memo.get(key) or db.stored(key)
            if pk is None:
                return None  # (none can be stored)
            key, db = pk, db.db
        try:
            value: bytes | None = self._txn.get(key, None, db)  # (positional: no keyword parse)
        except lmdb.Error as e:
            raise translate(e, "reading") from e
        return value

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        """:meth:`get` of each key in one comprehension (a LangGraph read's rows: no method
        call of ours per key)."""
        db = self._db(table)
        if db is None:
            return [None] * len(keys)
        get = self._txn.get
        if db.__class__ is Folded:
            memo_get, stored, db = db.memo.get, db.stored, db.db
            keys = [memo_get(k) or stored(k) or b"" for k in keys]
        try:
            return [get(k, None, db) if k else None for k in keys]
        except lmdb.Error as e:
            raise translate(e, "reading") from e

    def scan(
        self,
        table: str,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        db = self._db(table)
        if db is None:
            return iter(())
        it = self._scan(db, start, stop, reverse)
        return islice(it, limit) if limit is not None else it

    def _scan(
        self, db: Any, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        try:
            yield from self._scan_raw(db, start, stop, reverse)
        except lmdb.Error as e:  # a damaged page: say so in our terms
            raise translate(e, "scanning") from e

    def _scan_raw(
        self, db: Any, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        if db.__class__ is Folded:
            pstart, pstop = (None, None) if stop == b"" else db.bounds(start, stop)
            if not db.contiguous(pstart, pstop):
                yield from lmdb_fold.scan(self._txn.cursor(db=db.db), db, start, stop, reverse)
                return
            f = db
            for k, v in self._scan_raw(db.db, pstart, pstop, reverse):
                yield f.logical(k), v
            return
        cur = self._txn.cursor(db=db)
        if not reverse:
            positioned = cur.set_range(start) if start is not None else cur.first()
            if not positioned:
                return
            for k, v in cur.iternext(keys=True, values=True):
                if stop is not None and k >= stop:
                    return
                yield k, v
        else:
            if stop is not None:
                positioned = cur.prev() if cur.set_range(stop) else cur.last()
            else:
                positioned = cur.last()
            if not positioned:
                return
            for k, v in cur.iterprev(keys=True, values=True):
                if start is not None and k < start:
                    return
                yield k, v

    def rows(self, table: str, start: bytes, stop: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        # One islice over iternext, in C, cut at ``stop`` by a bisection (issue 22: the pages
        # of a paged snapshot read thousands of rows per frame).
        db = self._db(table)
        if db is None or limit <= 0:
            return []
        if db.__class__ is Folded:
            pstart, pstop = db.bounds(start, stop) if stop else (None, None)
            if not db.contiguous(pstart, pstop):
                return list(self.scan(table, start, stop, limit=limit))
            return lmdb_fold.unfold(self._rows(db.db, pstart or b"", pstop or b"", limit))
        return self._rows(db, start, stop, limit)

    def _rows(self, db: Any, start: bytes, stop: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        try:
            cur = self._txn.cursor(db=db)
            if not cur.set_range(start):
                return []
            if limit == 1:  # (whether a range holds a row: the cursor's own, no iterator)
                key: bytes = cur.key()
                return [(key, cur.value())] if key < stop else []
            got = list(islice(cur.iternext(keys=True, values=True), limit))
        except lmdb.Error as e:  # a damaged page: say so in our terms
            raise translate(e, "scanning") from e
        if got and got[-1][0] >= stop:
            got = got[: bisect_left(got, (stop,))]
        return got

    def prefix_rows(self, table: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        # Chunks of growing size read in C (islice over iternext), each cut at the end of the
        # prefix by a bisection: about 0.1 us a row instead of a generator step per row.
        db = self._db(table)
        if db is None:
            return []
        if db.__class__ is Folded:
            stored = lmdb_fold.stored_prefix(db, prefix)
            if stored is None:
                return list(self.scan_prefix(table, prefix))
            return lmdb_fold.unfold(self._prefix_rows(db.db, stored))
        return self._prefix_rows(db, prefix)

    def scan_prefix(
        self, table: str, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        db = self._db(table)
        stored = lmdb_fold.stored_prefix(db, prefix) if db.__class__ is Folded else None
        if stored is None:  # (the scan of the prefix's range)
            return super().scan_prefix(table, prefix, reverse=reverse, limit=limit)
        it = self._scan(db.db, stored, prefix_end(stored), reverse)
        f = db
        return ((f.logical(k), v) for k, v in (islice(it, limit) if limit is not None else it))

    def _prefix_rows(self, db: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
        stop = prefix_end(prefix)
        rows: list[tuple[bytes, bytes]] = []
        try:
            cur = self._txn.cursor(db=db)
            if not cur.set_range(prefix):
                return rows
            it = cur.iternext(keys=True, values=True)
            chunk = 64
            while True:
                got = list(islice(it, chunk))
                if stop is not None and got and got[-1][0] >= stop:
                    got = got[: bisect_left(got, (stop,))]
                    rows += got
                    return rows
                rows += got
                if len(got) < chunk:
                    return rows
                chunk = min(chunk * 4, 1 << 16)
        except lmdb.Error as e:  # a damaged page: say so in our terms
            raise translate(e, "scanning") from e

    def last_key(self, table: str) -> bytes | None:
        db = self._db(table)
        if db is None:
            return None
        if db.__class__ is Folded:
            for last, _ in self.scan(table, reverse=True, limit=1):
                return last
            return None
        try:
            cur = self._txn.cursor(db=db)
            if not cur.last():
                return None
            key: bytes = cur.key()
        except lmdb.Error as e:  # a damaged page: say so in our terms
            raise translate(e, "finding the last key") from e
        return key

    def count(self, table: str) -> int:
        db = self._db(table)
        if db is None:
            return 0
        if db.__class__ is Folded:
            try:
                return lmdb_fold.count(self._txn.cursor(db=db.db), db)
            except lmdb.Error as e:  # a damaged page: say so in our terms
                raise translate(e, "counting") from e
        n: int = self._txn.stat(db)["entries"]
        return n


class LmdbWrite(LmdbRead, WriteTxn):
    def __init__(
        self,
        txn: Any,
        dbs: dict[str, Any],
        max_key: int,
        ops: list[tuple[str, bytes, bytes | None]] | None = None,
    ) -> None:
        super().__init__(txn, dbs)
        self._max_key = max_key
        # The puts and deletes, in order, when the transaction keeps its redo record
        # (:class:`LmdbLoggedWrite`, which is given a list); ``None``: it keeps none.
        self.ops = ops

    def serial(self) -> int:
        tid: int = self._txn.id()
        return tid

    def _check_key(self, key: bytes) -> None:
        if not isinstance(key, bytes) or not key:
            raise CheckpointError(f"backend keys must be non-empty bytes, got {key!r}")
        if len(key) > self._max_key:
            raise CheckpointError(
                f"key of {len(key)} bytes exceeds the LMDB limit of {self._max_key} bytes"
            )

    def put(self, table: str, key: bytes, value: bytes) -> None:
        # (dupdata, overwrite, append, db) positional: py-lmdb parses keywords ~0.6k
        # instructions slower a call (the same holds for get's (default, db)).
        try:
            db = self._dbs[table]
        except KeyError:
            self._db(table)  # raises: the table was not declared
            raise
        if db.__class__ is Folded:  # (its stored key exists only for a storable key)
            if key.__class__ is not bytes:
                self._check_key(key)  # raises, unless a bytes subclass
            pk = db.memo.get(key) or db.stored(key)
            if pk is None:
                self._check_key(key)  # raises
                return
            self._txn.put(pk, value, True, True, False, db.db)
        else:
            if key.__class__ is not bytes:
                self._check_key(key)  # raises, unless a bytes subclass of a storable length
            # An empty key, or one over LMDB's limit, LMDB refuses before writing anything
            # (MDB_BAD_VALSIZE, and the transaction stays usable): named then, rather than
            # measured at every put.
            try:
                self._txn.put(key, value, True, True, False, db)
            except lmdb.BadValsizeError:
                self._check_key(key)  # raises, naming the key
                raise
        ops = self.ops  # (logged here, not by an override: a put is one call of ours)
        if ops is not None:
            ops.append((table, key, value if value.__class__ is bytes else bytes(value)))

    def delete(self, table: str, key: bytes) -> bool:
        if not key:  # LMDB rejects an empty key; none can be stored anyway
            return False
        db = self._db(table)
        if db.__class__ is Folded:
            pk = db.memo.get(key) or db.stored(key)
            if pk is None:
                return False  # (none can be stored)
            key, db = pk, db.db
        deleted: bool = self._txn.delete(key, db=db)
        return deleted

    def append(self, table: str, key: bytes, value: bytes) -> None:
        self._check_key(key)
        last = self.last_key(table)
        if last is not None and key <= last:
            raise CheckpointError(
                f"append to table {table!r} needs a key greater than the last one "
                f"({last.hex()}), got {key.hex()}"
            )
        db = self._db(table)
        if db.__class__ is Folded:  # last of the table, not of the fold: a plain put
            self._txn.put(db.key(key), value, True, True, False, db.db)
            return
        self._txn.put(key, value, db=db, append=True)

    def _check_keys(self, pairs: list[tuple[bytes, bytes]]) -> None:
        limit = self._max_key
        if len(pairs) <= _CURSOR_FROM:  # a save's one or two rows: a plain loop costs less
            for pair in pairs:
                key = pair[0]
                if key.__class__ is not bytes or not 0 < len(key) <= limit:
                    self._check_key(key)  # raises with the message for the offending key
            return
        keys = list(map(_first, pairs))
        if _BYTES.issuperset(map(type, keys)):  # the usual batch, proven at C speed
            lens = set(map(len, keys))
            if not lens or (min(lens) > 0 and max(lens) <= limit):
                return
        for key in keys:
            if type(key) is not bytes or not 0 < len(key) <= limit:
                self._check_key(key)  # raises with the message for the offending key

    def put_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        if len(pairs) == 1:  # a save's index row: one put (no multi-row checks)
            key, value = pairs[0]
            LmdbWrite.put(self, table, key, value)
            return
        self._check_keys(pairs)
        LmdbWrite.put_built(self, table, pairs)

    def put_built(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        """:meth:`put_many` of rows whose keys the caller built (each an exact ``bytes`` of
        1 to ``max_key_bytes``), without checking them: a fan-out batch's rows (eventlog.
        materialized.write_instance_rows), ~0.4k instructions a row less."""
        db = self._db(table)
        if db.__class__ is Folded:
            f, db = db, db.db
            pairs = [(f.key(k), v) for k, v in pairs]
        if len(pairs) <= _CURSOR_FROM:
            put = self._txn.put
            for key, value in pairs:
                put(key, value, True, True, False, db)  # (positional: see put)
            return
        with self._txn.cursor(db=db) as cur:
            cur.putmulti(pairs, dupdata=True, overwrite=True, append=False)

    def append_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        if not pairs:
            return
        if len(pairs) == 1:  # a commit's one frame: its key checked, and put, inline
            key, value = pairs[0]
            if key.__class__ is not bytes or not 0 < len(key) <= self._max_key:
                self._check_key(key)  # raises
            dbs = self._dbs
            db = dbs[table] if table in dbs else self._db(table)
            if db.__class__ is Folded:
                self._append_folded(table, pairs)
                return
            if not self._txn.put(key, value, True, True, True, db):  # (as _append_first)
                self._append_first(table, db, pairs)  # refused again: raises, naming the keys
            return
        self._check_keys(pairs)
        if len(pairs) > 1:
            check_ascending(table, None, pairs)  # among themselves; LMDB checks the first below
        db = self._db(table)
        if db.__class__ is Folded:
            self._append_folded(table, pairs)
            return
        self._append_first(table, db, pairs)
        if len(pairs) > 1:
            with self._txn.cursor(db=db) as cur:
                cur.putmulti(pairs[1:], dupdata=True, overwrite=True, append=True)

    def _append_folded(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        """Append to a folded table (keys checked): above its last key, but not the fold's
        last, so plain puts (MDB_APPEND would refuse most)."""
        check_ascending(table, self.last_key(table), pairs)  # raises, naming the keys
        LmdbWrite.put_built(self, table, pairs)

    def _append_first(self, table: str, db: Any, pairs: list[tuple[bytes, bytes]]) -> None:
        """Append ``pairs[0]`` (keys checked). MDB_APPEND refuses (returns False, writes
        nothing) a key not above the table's last: so the first put proves the whole run lands
        at the end, and the rest may follow."""
        key, value = pairs[0]
        if not self._txn.put(key, value, True, True, True, db):  # (append=True, positional)
            check_ascending(table, self.last_key(table), pairs)  # raises, naming the keys
            raise CheckpointError(f"LMDB refused to append key {key.hex()} to {table!r}")


_CURSOR_FROM = 4  # put_many of more pairs than this goes through one cursor's putmulti
_BYTES = frozenset((bytes,))
_first = itemgetter(0)  # of a (key, value) pair, at C speed


class LmdbLoggedWrite(LmdbWrite):
    """A write transaction that also lists its puts and deletes, in order: the redo record
    of a durable commit (backends/lmdb_wal.py). Values are copied by ``bytes`` already.
    Opened with the list to fill: ``LmdbLoggedWrite(txn, dbs, max_key, [])``."""

    ops: list[tuple[str, bytes, bytes | None]]  # (given by the opener; put, inherited, logs)

    def delete(self, table: str, key: bytes) -> bool:
        deleted = super().delete(table, key)
        if deleted:
            self.ops.append((table, key, None))
        return deleted

    def append(self, table: str, key: bytes, value: bytes) -> None:
        super().append(table, key, value)
        self.ops.append((table, key, bytes(value)))

    # One row (a save's index row, its frame: every durable save) skips the multi-row path:
    # 13.6k of a 200 B save's ~350k instructions (durable_ir, issue 28).
    def put_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        if len(pairs) == 1:
            key, value = pairs[0]
            self.put(table, key, value)  # (which logs it)
            return
        super().put_many(table, pairs)
        self.ops += [(table, k, v if v.__class__ is bytes else bytes(v)) for k, v in pairs]

    def put_built(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        super().put_built(table, pairs)
        self.ops += [(table, k, v if v.__class__ is bytes else bytes(v)) for k, v in pairs]

    def append_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        if len(pairs) != 1:
            super().append_many(table, pairs)
            self.ops += [(table, k, v if v.__class__ is bytes else bytes(v)) for k, v in pairs]
            return
        LmdbWrite.append_many(self, table, pairs)  # (its one-row case)
        key, value = pairs[0]
        self.ops.append((table, key, value if value.__class__ is bytes else bytes(value)))
