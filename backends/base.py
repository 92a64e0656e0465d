"""The backend contract: named tables of ordered ``bytes -> bytes`` with atomic transactions.

Invariants every backend keeps (checked by :mod:`backends.testing`):
- Keys order bytewise (unsigned, lexicographic); ``scan`` yields ``start <= key < stop``.
- A write transaction is all or nothing: committed when its ``with`` block exits normally,
  rolled back when the block raises. Readers never see a partial write transaction.
- Values returned by reads are plain ``bytes`` owned by the caller (never views into storage
  that could change after the transaction ends).
- ``append`` only accepts a key greater than every key already in the table.
- Durability is explicit: ``"fsync"`` means a committed transaction survives power loss;
  ``"process"`` means it survives the writing process being killed, not an OS crash.
  :meth:`Backend.sync` forces everything committed so far to stable storage.
- A transaction that fails for a transient reason (the store had to grow) raises
  :class:`RetryableWrite`; :meth:`Backend.run_write` retries such transactions.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Literal, TypeVar

from eventlog.errors import CheckpointError
from eventlog.errors import RetryableWrite as RetryableWrite  # noqa: PLC0414 - re-exported

Durability = Literal["fsync", "process"]
DURABILITIES: tuple[Durability, ...] = ("fsync", "process")

T = TypeVar("T")
Span = tuple[str, bytes, bytes, bytes]  # (table, lead, start, stop): ReadTxn.get_named_spans


def check_durability(durability: str) -> Durability:
    if durability not in DURABILITIES:
        raise CheckpointError(
            f"durability must be one of {DURABILITIES!r}, got {durability!r}; "
            "'fsync' survives power loss, 'process' survives a killed process only"
        )
    return durability


class ReadTxn(abc.ABC):
    """A consistent snapshot of every table, valid inside its ``with`` block only."""

    @abc.abstractmethod
    def get(self, table: str, key: bytes) -> bytes | None:
        """The value stored under ``key``, or ``None``."""

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        """What :meth:`get` returns for each of ``keys``, in order (one round trip where the
        backend is a server)."""
        return [self.get(table, key) for key in keys]

    @abc.abstractmethod
    def scan(
        self,
        table: str,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with ``start <= key < stop`` in key order (descending when ``reverse``)."""

    @abc.abstractmethod
    def last_key(self, table: str) -> bytes | None:
        """The greatest key in ``table``, or ``None`` when it is empty."""

    def prefetch(self, table: str, keys: list[bytes]) -> None:
        """A hint that :meth:`get` of these keys follows: a backend whose reads are round
        trips may send the lookup now, with whatever read comes next (default: nothing)."""
        del table, keys

    def last_item(self, table: str) -> tuple[bytes, bytes] | None:
        """The pair with the greatest key in ``table``, or ``None`` when it is empty (in a
        write transaction, it also stands for :meth:`last_key`: one round trip where the
        backend is a server)."""
        for pair in self.scan(table, reverse=True, limit=1):
            return pair
        return None

    def scan_prefix(
        self, table: str, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Pairs whose key starts with ``prefix``."""
        return self.scan(table, prefix, prefix_end(prefix), reverse=reverse, limit=limit)

    def prefix_rows(self, table: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every pair whose key starts with ``prefix``, as a list: what :meth:`scan_prefix`
        yields, for a caller that wants them all (a backend may read them in bulk)."""
        return list(self.scan_prefix(table, prefix))

    def rows(self, table: str, start: bytes, stop: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """What :meth:`scan` yields from ``start`` to ``stop`` (at most ``limit`` pairs), as a
        list: for a caller that wants them all (a backend may read them in bulk)."""
        return list(self.scan(table, start, stop, limit=limit))

    def count(self, table: str) -> int:
        return sum(1 for _ in self.scan(table))

    def get_many_linked(
        self,
        table: str,
        keys: list[bytes],
        link: bytes,
        prefix: bytes,
        width: int,
        skip: Collection[bytes] = (),
    ) -> tuple[list[bytes | None], list[tuple[bytes, bytes]]]:
        """What :meth:`get_many` returns for ``keys``, and the rows the row ``link`` names:
        its value is a zero byte then keys of ``width`` bytes, each stored as ``prefix`` + it
        (another first byte: it names none). The named rows come as ``(key, value)`` pairs,
        in no particular order, those absent left out, and those whose key is in ``skip``
        too (rows the caller holds: not read, not sent). One statement where the backend is
        a server: the lookup of the named rows is joined to the row naming them."""
        found = self.get_many(table, [*keys, link])
        raw = found.pop()
        named: list[tuple[bytes, bytes]] = []
        if raw and raw[0] == 0 and width > 0:
            refs = [prefix + raw[i : i + width] for i in range(1, len(raw) - width + 1, width)]
            if skip:
                refs = [r for r in refs if r not in skip]
            for k, v in zip(refs, self.get_many(table, refs), strict=True):
                if v is not None:
                    named.append((k, v))
        return found, named

    def get_named_spans(
        self, names: str, name: bytes, spans: Sequence[Span]
    ) -> tuple[bytes | None, list[list[tuple[bytes, bytes]]]]:
        """The row ``name`` of ``names``, whose value P is a key part (a stream id), and for
        each span ``(table, lead, start, stop)`` the rows of ``table`` from lead + P + start to
        before lead + P + stop, in key order; ``(None, [])`` when ``name`` is absent. The row
        P + ``s`` alone is the span ``(table, b"", s, s + b"\\x00")``. One statement where the
        backend is a server: every span is joined to the row naming P."""
        p = self.get(names, name)
        if p is None:
            return None, []
        return p, [
            list(self.scan(table, lead + p + start, lead + p + stop))
            for table, lead, start, stop in spans
        ]

    def get_indexed(self, index: str, key: bytes, table: str) -> tuple[bytes | None, bytes | None]:
        """The value K of the row ``key`` of ``index`` (a key of ``table``) and the value of the
        row K of ``table``: ``(None, None)`` when ``key`` is absent, ``(K, None)`` when K is.
        One statement where the backend is a server (the lookup of K joined to it)."""
        k = self.get(index, key)
        return (None, None) if k is None else (k, self.get(table, k))

    def get_named(
        self, names: str, name: bytes, table: str, suffix: bytes, ranged: str, tail: bytes
    ) -> tuple[bytes | None, bytes | None, list[tuple[bytes, bytes]]]:
        """The row ``name`` of ``names``, whose value P is a key prefix (a stream id), then the
        row P + ``suffix`` of ``table`` and every row of ``ranged`` whose key starts with P +
        ``tail``, in key order; ``(None, None, [])`` when ``name`` is absent (one statement
        where the backend is a server: the two lookups are joined to the one naming P)."""
        p = self.get(names, name)
        if p is None:
            return None, None, []
        return p, self.get(table, p + suffix), self.prefix_rows(ranged, p + tail)


class WriteTxn(ReadTxn):
    """A read transaction that can also change tables; atomic on commit."""

    @abc.abstractmethod
    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""

    @abc.abstractmethod
    def delete(self, table: str, key: bytes) -> bool:
        """Remove ``key``; ``True`` when it was present."""

    @abc.abstractmethod
    def append(self, table: str, key: bytes, value: bytes) -> None:
        """Store a pair whose key is greater than every key in ``table`` (fast path)."""

    def serial(self) -> int | None:
        """The number this transaction commits as, when the store numbers its commits one
        by one (LMDB's transaction id: every commit that writes takes the next): a writer
        that sees its last commit's plus one knows nothing was committed in between, by any
        process. ``None`` (the default): the store does not tell."""
        return None

    def put_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        """Store several pairs (one backend call where the backend can)."""
        for key, value in pairs:
            self.put(table, key, value)

    def append_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        """Append pairs whose keys ascend and are all greater than every key in ``table``.

        Checked before anything is written: on error the table is unchanged.
        """
        check_ascending(table, self.last_key(table), pairs)
        for key, value in pairs:
            self.append(table, key, value)

    def append_indexed(
        self,
        table: str,
        pairs: list[tuple[bytes, bytes]],
        index: str,
        refs: list[tuple[bytes, bytes]],
    ) -> None:
        """Append ``pairs`` to ``table`` (as :meth:`append_many`; their keys are 8-byte
        big-endian numbers, dense after the table's greatest key) and store ``refs`` in
        ``index``, each ref's value the key of one of ``pairs``. A store whose writers
        share a server may place the pairs at other keys, still dense after the greatest
        key and in order, all moved by one amount, the refs' values moved with them: what
        the transaction read back inside it is what it wrote, and :meth:`moved` tells the
        amount once it committed. Default: :meth:`append_many` and :meth:`put_many`."""
        self.append_many(table, pairs)
        self.put_many(index, refs)

    def moved(self) -> int:
        """Once the transaction committed: how far the keys it appended with
        :meth:`append_indexed` were moved (``0``, the default: they were kept)."""
        return 0

    def discard(self, table: str, key: bytes) -> None:
        """:meth:`delete` without telling whether the key was there: a server backend sends
        it with the transaction's other writes, not as a round trip of its own."""
        self.delete(table, key)

    def delete_prefix(self, table: str, prefix: bytes) -> int:
        keys = [k for k, _ in self.scan_prefix(table, prefix)]
        for k in keys:
            self.delete(table, k)
        return len(keys)


class Backend(abc.ABC):
    """An open store. Thread-safe for reads; write transactions are serialized by the backend."""

    durability: Durability
    readonly: bool
    # Each read is a round trip to a server (PostgreSQL): callers then fetch what they will
    # need in fewer, larger reads; with a local store (LMDB, memory) small reads cost nothing.
    remote: bool = False

    @property
    @abc.abstractmethod
    def max_key_bytes(self) -> int:
        """The longest key the backend accepts."""

    @property
    def tails_checked(self) -> bool:
        """Whether every write transaction inserts the index rows of
        :meth:`WriteTxn.append_indexed` as new rows, so that a key another writer took fails
        the transaction (:class:`RetryableWrite`, run again) instead of being overwritten: a
        writer may then keep what it knows of its streams' tails while other writers append
        to the log, a stale one costing a retry, never a wrong frame. ``False`` (the
        default: LMDB and memory overwrite index rows; the writer keeps tails only while
        nobody else appended)."""
        return False

    @property
    def layout_version(self) -> int:
        """The storage layout this backend keeps the tables in: 1, or more when a ckptlog that
        reads only format 1 would misread it (an LMDB log with folded tables: 2). A new log's
        ``meta`` format record states it, so such a ckptlog refuses the log at open instead of
        writing beside rows it cannot see."""
        return 1

    @abc.abstractmethod
    def read(self) -> AbstractContextManager[ReadTxn]:
        """A read transaction."""

    @abc.abstractmethod
    def write(self) -> AbstractContextManager[WriteTxn]:
        """A write transaction: committed on normal exit, rolled back on exception."""

    def get_many_now(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        """:meth:`ReadTxn.get_many` as a transaction of its own (one consistent snapshot): on a
        server one statement, so one round trip, where a read transaction takes three."""
        with self.read() as txn:
            return txn.get_many(table, keys)

    def get_many_linked_now(
        self,
        table: str,
        keys: list[bytes],
        link: bytes,
        prefix: bytes,
        width: int,
        skip: Collection[bytes] = (),
    ) -> tuple[list[bytes | None], list[tuple[bytes, bytes]]]:
        """:meth:`ReadTxn.get_many_linked` as a transaction of its own (one statement, one
        round trip, on a server)."""
        with self.read() as txn:
            return txn.get_many_linked(table, keys, link, prefix, width, skip)

    def get_named_now(
        self, names: str, name: bytes, table: str, suffix: bytes, ranged: str, tail: bytes
    ) -> tuple[bytes | None, bytes | None, list[tuple[bytes, bytes]]]:
        """:meth:`ReadTxn.get_named` as a transaction of its own (one statement, one round
        trip, on a server)."""
        with self.read() as txn:
            return txn.get_named(names, name, table, suffix, ranged, tail)

    def get_indexed_now(
        self, index: str, key: bytes, table: str
    ) -> tuple[bytes | None, bytes | None]:
        """:meth:`ReadTxn.get_indexed` as a transaction of its own (one statement, one round
        trip, on a server)."""
        with self.read() as txn:
            return txn.get_indexed(index, key, table)

    def get_named_spans_now(
        self, names: str, name: bytes, spans: Sequence[Span]
    ) -> tuple[bytes | None, list[list[tuple[bytes, bytes]]]]:
        """:meth:`ReadTxn.get_named_spans` as a transaction of its own (one statement, one
        round trip, on a server)."""
        with self.read() as txn:
            return txn.get_named_spans(names, name, spans)

    def add_tables(self, tables: Iterable[str], *, create: bool) -> tuple[str, ...]:
        """Make more tables usable after opening (a materialized view's, found in an existing
        log or added to a new one); returns those now usable, in order. ``create=False`` never
        changes the store: tables it does not hold are left out. Stores whose tables need no
        declaring (the memory backend) return them all."""
        return tuple(dict.fromkeys(tables))

    @abc.abstractmethod
    def sync(self) -> None:
        """Force everything committed so far to stable storage."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store; further use raises :class:`eventlog.errors.LogClosed`."""

    @abc.abstractmethod
    def size_bytes(self) -> int:
        """Bytes the store occupies on its medium (0 for memory)."""

    def used_bytes(self) -> int:
        """Bytes of the store's pages in use (its content), when it can tell; otherwise
        :meth:`size_bytes`. LMDB: the file also holds free pages, up to 2 MiB of them kept
        from reuse until the next checkpoint of its write-ahead segment."""
        return self.size_bytes()

    @property
    def location(self) -> str:
        return "<memory>"

    def storage_problems(self) -> list[tuple[str, str]]:
        """Damage below the rows that only the backend can see, as ``(kind, detail)`` pairs
        for ``verify`` (LMDB: meta pages that disagree); none by default."""
        return []

    def run_write(
        self,
        fn: Callable[[WriteTxn], T],
        *,
        attempts: int = 8,
        before_lock: Callable[[WriteTxn], None] | None = None,
    ) -> T:
        """Run ``fn`` in a write transaction, running it again after a :class:`RetryableWrite`.

        ``fn`` must not have effects outside the transaction, since it may run more than once.
        ``before_lock`` runs first in the same transaction and only writes: on a backend whose
        writers share a lock (PostgreSQL), before the lock is taken, so other writers need not
        wait for it; elsewhere simply first.
        """
        attempt = 1  # (counted by hand: no range iterator for the usual single attempt)
        while True:
            try:
                with self.write() as txn:
                    if before_lock is not None:
                        before_lock(txn)
                    return fn(txn)
            except RetryableWrite:
                if attempt >= attempts:
                    raise
                attempt += 1

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_PID = [os.getpid()]


def _forked() -> None:
    _PID[0] = os.getpid()


os.register_at_fork(after_in_child=_forked)


def current_pid() -> int:
    """``os.getpid()`` without the system call: kept current by an at-fork hook.

    Checked around every transaction (LMDB handles must not cross a fork), where a real
    ``getpid`` cost about 1 µs each on these machines. A child forked outside Python's
    ``os.fork`` (no at-fork hooks run) and then running Python is not supported.
    """
    return _PID[0]


def check_ascending(table: str, last: bytes | None, pairs: list[tuple[bytes, bytes]]) -> None:
    """Raise unless the keys of ``pairs`` ascend strictly, starting above ``last``."""
    prev = last
    for key, _ in pairs:
        if prev is not None and key <= prev:
            raise CheckpointError(
                f"append to table {table!r} needs a key greater than the last one "
                f"({prev.hex()}), got {key.hex()}"
            )
        prev = key


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (``None``: no bound)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])
