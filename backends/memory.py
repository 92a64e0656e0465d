"""In-memory backend: the oracle the LMDB backend is tested against.

Invariants:
- Committed tables are immutable snapshots: a commit builds new table objects for the tables it
  changed and swaps them in under a lock, so a read transaction that captured the previous
  snapshot keeps seeing it unchanged (snapshot isolation, like LMDB).
- One write transaction at a time (a lock held from begin to commit or rollback).
- Nothing is durable: the data lives as long as the object. ``durability`` is recorded only so
  code written against the contract runs unchanged.

Commits cost O(size of each changed table); it is meant for tests and small in-process logs.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import islice

from backends.base import Backend, Durability, ReadTxn, WriteTxn, check_durability
from eventlog.errors import CheckpointError, LogClosed, ReadOnlyLog

MEMORY_KEY_BYTES_MAX = 511  # same bound as LMDB's default build, so tests behave alike


class _Table:
    __slots__ = ("data", "keys")

    def __init__(self, data: dict[bytes, bytes], keys: list[bytes]) -> None:
        self.data = data
        self.keys = keys


_EMPTY = _Table({}, [])


def _scan_sorted(
    keys: list[bytes],
    data: Mapping[bytes, bytes],
    start: bytes | None,
    stop: bytes | None,
    reverse: bool,
    limit: int | None,
) -> Iterator[tuple[bytes, bytes]]:
    lo = 0 if start is None else bisect.bisect_left(keys, start)
    hi = len(keys) if stop is None else bisect.bisect_left(keys, stop)
    idx = range(hi - 1, lo - 1, -1) if reverse else range(lo, hi)
    it = ((keys[i], data[keys[i]]) for i in idx)
    return islice(it, limit) if limit is not None else it


class _MemRead(ReadTxn):
    def __init__(self, tables: dict[str, _Table]) -> None:
        self._tables = tables

    def _table(self, table: str) -> _Table:
        return self._tables.get(table, _EMPTY)

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._table(table).data.get(key)

    def scan(
        self,
        table: str,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        t = self._table(table)
        return _scan_sorted(t.keys, t.data, start, stop, reverse, limit)

    def last_key(self, table: str) -> bytes | None:
        keys = self._table(table).keys
        return keys[-1] if keys else None


class _MemWrite(_MemRead, WriteTxn):
    """Changes go to per-table copies made on first touch; the commit swaps them in."""

    def __init__(self, tables: dict[str, _Table], max_key: int) -> None:
        super().__init__(tables)
        self._changed: dict[str, _Table] = {}
        self._max_key = max_key

    def _table(self, table: str) -> _Table:
        return self._changed.get(table) or self._tables.get(table, _EMPTY)

    def _mutable(self, table: str) -> _Table:
        t = self._changed.get(table)
        if t is None:
            base = self._tables.get(table, _EMPTY)
            t = _Table(dict(base.data), list(base.keys))
            self._changed[table] = t
        return t

    def _check_key(self, key: bytes) -> None:
        if not isinstance(key, bytes) or not key:
            raise CheckpointError(f"backend keys must be non-empty bytes, got {key!r}")
        if len(key) > self._max_key:
            raise CheckpointError(
                f"key of {len(key)} bytes exceeds the backend limit of {self._max_key} bytes"
            )

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._check_key(key)
        t = self._mutable(table)
        if key not in t.data:
            bisect.insort(t.keys, key)
        t.data[key] = bytes(value)

    def delete(self, table: str, key: bytes) -> bool:
        if key not in self._table(table).data:
            return False
        t = self._mutable(table)
        del t.data[key]
        t.keys.pop(bisect.bisect_left(t.keys, key))
        return True

    def append(self, table: str, key: bytes, value: bytes) -> None:
        self._check_key(key)
        t = self._mutable(table)
        if t.keys and key <= t.keys[-1]:
            raise CheckpointError(
                f"append to table {table!r} needs a key greater than the last one "
                f"({t.keys[-1].hex()}), got {key.hex()}"
            )
        t.keys.append(key)
        t.data[key] = bytes(value)


class MemoryBackend(Backend):
    """A process-local store with the same semantics as :class:`backends.lmdb.LmdbBackend`."""

    def __init__(self, *, durability: Durability | str = "fsync", readonly: bool = False) -> None:
        self.durability = check_durability(durability)
        self.readonly = readonly
        self._tables: dict[str, _Table] = {}
        self._write_lock = threading.Lock()
        self._closed = False

    @property
    def max_key_bytes(self) -> int:
        return MEMORY_KEY_BYTES_MAX

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed("this in-memory backend is closed; create a new MemoryBackend")

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        self._check_open()
        yield _MemRead(self._tables)

    @contextmanager
    def write(self) -> Iterator[WriteTxn]:
        self._check_open()
        if self.readonly:
            raise ReadOnlyLog("this backend was opened read-only; reopen it writable to change it")
        with self._write_lock:
            txn = _MemWrite(self._tables, MEMORY_KEY_BYTES_MAX)
            yield txn
            # Only reached when the block did not raise: commit by swapping in new snapshots.
            if txn._changed:
                merged = dict(self._tables)
                merged.update(txn._changed)
                self._tables = merged

    def sync(self) -> None:
        self._check_open()

    def close(self) -> None:
        self._closed = True

    def size_bytes(self) -> int:
        return 0
