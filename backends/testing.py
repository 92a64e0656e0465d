"""The shared contract test-suite every backend passes unchanged.

Subclass :class:`BackendContract` in a ``Test*`` class and implement :meth:`make_backend`; pytest
then runs every ``test_*`` method here against that backend. :mod:`backends.memory` is the
oracle: a behaviour pinned here is one both the memory and the LMDB backends show.

Invariants the suite relies on:
- ``make_backend(tmp_path, **kw)`` declares at least the tables ``"a"`` and ``"b"``, and calling
  it again with the same ``tmp_path`` after ``close()`` reopens the same store when the backend
  is persistent (a memory backend starts empty, which the suite allows).
- Keyword options passed through are the ones every backend takes: ``durability``, ``readonly``.
- Threads are joined before a test returns (LMDB read transactions are used by the thread that
  opened them only; forking with live threads is unsafe for subclasses that fork).

:class:`FaultyBackend` wraps any backend so that chosen commits fail (every one, the Nth, or
those changing a given table; ``OSError(ENOSPC)`` by default): storage faults for the tests of
the layers above, the one fault injector they all use.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.base import Backend, ReadTxn, RetryableWrite, WriteTxn
from eventlog.errors import CheckpointError, LogClosed, ReadOnlyLog

TABLES = ("a", "b")
THREAD_WAIT_S = 10.0  # a contract test that waits longer than this on a thread has deadlocked

# Keys drawn from bytes at the edges of the order (0x00, 0xff) so prefix and bound arithmetic
# meets its corner cases; three of them make equal keys and shared prefixes frequent.
_KEY_BYTES = st.sampled_from([0x00, 0x01, 0x7F, 0xFE, 0xFF])
_KEYS = st.lists(_KEY_BYTES, min_size=1, max_size=3).map(bytes)
_PREFIXES = st.lists(_KEY_BYTES, min_size=0, max_size=2).map(bytes)
_BOUNDS = st.none() | st.lists(_KEY_BYTES, min_size=0, max_size=3).map(bytes)
_LIMITS = st.none() | st.integers(min_value=0, max_value=4)
_TABLE_NAMES = st.sampled_from(TABLES)


class _Abort(Exception):
    """Raised inside a write block to make it roll back."""


@dataclass(frozen=True)
class _Put:
    table: str
    key: bytes
    value: bytes


@dataclass(frozen=True)
class _Delete:
    table: str
    key: bytes


@dataclass(frozen=True)
class _Append:
    table: str
    key: bytes
    value: bytes


@dataclass(frozen=True)
class _Scan:
    table: str
    start: bytes | None
    stop: bytes | None
    reverse: bool
    limit: int | None


@dataclass(frozen=True)
class _ScanPrefix:
    table: str
    prefix: bytes
    reverse: bool
    limit: int | None


_Op = _Put | _Delete | _Append | _Scan | _ScanPrefix

_OPS: st.SearchStrategy[_Op] = st.one_of(
    st.builds(_Put, _TABLE_NAMES, _KEYS, st.binary(max_size=6)),
    st.builds(_Delete, _TABLE_NAMES, _KEYS),
    st.builds(_Append, _TABLE_NAMES, _KEYS, st.binary(max_size=6)),
    st.builds(_Scan, _TABLE_NAMES, _BOUNDS, _BOUNDS, st.booleans(), _LIMITS),
    st.builds(_ScanPrefix, _TABLE_NAMES, _PREFIXES, st.booleans(), _LIMITS),
)
# Each transaction: its operations, and whether the block raises (rolls back) at the end.
_TXNS = st.lists(st.tuples(st.lists(_OPS, max_size=10), st.booleans()), min_size=1, max_size=6)

_Model = dict[str, dict[bytes, bytes]]


def _model_scan(
    table: dict[bytes, bytes],
    start: bytes | None,
    stop: bytes | None,
    reverse: bool,
    limit: int | None,
) -> list[tuple[bytes, bytes]]:
    pairs = sorted(
        (k, v)
        for k, v in table.items()
        if (start is None or k >= start) and (stop is None or k < stop)
    )
    if reverse:
        pairs.reverse()
    return pairs if limit is None else pairs[:limit]


def _model_prefix(
    table: dict[bytes, bytes], prefix: bytes, reverse: bool, limit: int | None
) -> list[tuple[bytes, bytes]]:
    pairs = sorted((k, v) for k, v in table.items() if k.startswith(prefix))
    if reverse:
        pairs.reverse()
    return pairs if limit is None else pairs[:limit]


def _apply(txn: WriteTxn, model: _Model, op: _Op) -> None:
    """Run ``op`` on ``txn`` and on ``model``; assert they agree on what the op returns."""
    table = model[op.table]
    if isinstance(op, _Put):
        txn.put(op.table, op.key, op.value)
        table[op.key] = op.value
    elif isinstance(op, _Delete):
        assert txn.delete(op.table, op.key) == (op.key in table)
        table.pop(op.key, None)
    elif isinstance(op, _Append):
        if table and op.key <= max(table):
            with pytest.raises(CheckpointError, match="needs a key greater than the last one"):
                txn.append(op.table, op.key, op.value)
        else:
            txn.append(op.table, op.key, op.value)
            table[op.key] = op.value
    elif isinstance(op, _Scan):
        got = list(txn.scan(op.table, op.start, op.stop, reverse=op.reverse, limit=op.limit))
        assert got == _model_scan(table, op.start, op.stop, op.reverse, op.limit)
    else:
        got = list(txn.scan_prefix(op.table, op.prefix, reverse=op.reverse, limit=op.limit))
        assert got == _model_prefix(table, op.prefix, op.reverse, op.limit)


def _run_txn(backend: Backend, work: _Model, ops: list[_Op], *, abort: bool) -> None:
    """Apply ``ops`` in one write transaction (and to ``work``); roll it back when ``abort``."""
    with backend.write() as w:
        for op in ops:
            _apply(w, work, op)
        if abort:
            raise _Abort


def _check_against_model(backend: Backend, model: _Model) -> None:
    with backend.read() as r:
        for name, table in model.items():
            assert list(r.scan(name)) == sorted(table.items())
            assert list(r.scan(name, reverse=True)) == sorted(table.items(), reverse=True)
            assert r.count(name) == len(table)
            assert r.last_key(name) == (max(table) if table else None)
            for k, v in table.items():
                assert r.get(name, k) == v


def _put(table: str, key: bytes, value: bytes) -> Callable[[WriteTxn], None]:
    def fn(txn: WriteTxn) -> None:
        txn.put(table, key, value)

    return fn


def _incr(txn: WriteTxn) -> int:
    n = int(txn.get("a", b"counter") or b"0") + 1
    txn.put("a", b"counter", str(n).encode())
    return n


# A sorted sample whose prefixes end in 0xff, so prefix_end must carry past the trailing 0xff.
_PREFIX_KEYS = [
    b"\x00",
    b"a",
    b"a\xfe",
    b"a\xff",
    b"a\xff\x00",
    b"a\xff\xff",
    b"a\xff\xff\x01",
    b"b",
    b"\xfe\xff",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
    b"\xff\xff\xff",
]


class BackendContract:
    """The backend contract of :mod:`backends.base`, as tests. Not collected by itself."""

    def make_backend(self, tmp_path: Path, **kw: Any) -> Backend:
        """A backend storing under ``tmp_path`` with tables ``"a"`` and ``"b"`` declared."""
        raise NotImplementedError("subclasses of BackendContract implement make_backend")

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Backend]:
        b = self.make_backend(tmp_path)
        yield b
        b.close()

    # -- get / put / delete --------------------------------------------------------------------

    def test_get_put_delete(self, backend: Backend) -> None:
        with backend.read() as r:
            assert r.get("a", b"k") is None
        with backend.write() as w:
            w.put("a", b"k", b"v1")
            assert w.get("a", b"k") == b"v1"  # a txn sees its own writes
            w.put("a", b"k", b"v2")
            w.put("b", b"k", b"other table")
        with backend.read() as r:
            assert r.get("a", b"k") == b"v2"
            assert r.get("b", b"k") == b"other table"
        with backend.write() as w:
            assert w.delete("a", b"k") is True
            assert w.delete("a", b"k") is False
            assert w.delete("a", b"never") is False
            assert w.get("a", b"k") is None
        with backend.read() as r:
            assert r.get("a", b"k") is None
            assert r.get("b", b"k") == b"other table"

    def test_empty_value_is_stored_not_absent(self, backend: Backend) -> None:
        backend.run_write(_put("a", b"k", b""))
        with backend.read() as r:
            assert r.get("a", b"k") == b""
            assert r.count("a") == 1

    def test_values_are_bytes_owned_by_the_caller(self, backend: Backend) -> None:
        backend.run_write(_put("a", b"k", b"first"))
        with backend.write() as w:
            got = w.get("a", b"k")
            assert type(got) is bytes
            w.put("a", b"k", b"second")
            assert got == b"first"  # not a view that followed the overwrite
        with backend.read() as r:
            value = r.get("a", b"k")
            pairs = list(r.scan("a"))
            rev = list(r.scan("a", reverse=True))
            pre = list(r.scan_prefix("a", b"k"))
            last = r.last_key("a")
        backend.run_write(_put("a", b"k", b"third"))
        # Everything read stays valid and unchanged after its transaction ended.
        assert type(value) is bytes
        assert value == b"second"
        for k, v in [*pairs, *rev, *pre]:
            assert type(k) is bytes
            assert type(v) is bytes
            assert (k, v) == (b"k", b"second")
        assert type(last) is bytes
        assert last == b"k"

    def test_keys_order_bytewise_unsigned(self, backend: Backend) -> None:
        keys = [b"\xff", b"\x00", b"\x7f", b"\x80", b"a", b"a\x00", b"ab", b"\x00\xff"]
        with backend.write() as w:
            for k in keys:
                w.put("a", k, k)
        with backend.read() as r:
            assert [k for k, _ in r.scan("a")] == sorted(keys)

    def test_key_longer_than_max_key_bytes_is_rejected(self, backend: Backend) -> None:
        n = backend.max_key_bytes
        assert n >= 64
        longest = b"k" * n
        backend.run_write(_put("a", longest, b"fits"))
        too_long = b"k" * (n + 1)
        message = rf"key of {n + 1} bytes exceeds the .*limit of {n} bytes"
        with backend.write() as w:
            with pytest.raises(CheckpointError, match=message):
                w.put("a", too_long, b"v")
            with pytest.raises(CheckpointError, match=message):
                w.append("b", too_long, b"v")
            # A key the backend cannot store is simply absent.
            assert w.get("a", too_long) is None
            assert w.delete("a", too_long) is False
        with backend.read() as r:
            assert r.get("a", longest) == b"fits"
            assert r.get("a", too_long) is None
            assert list(r.scan("a")) == [(longest, b"fits")]
            assert r.count("b") == 0

    def test_empty_or_non_bytes_key_is_rejected(self, backend: Backend) -> None:
        with backend.write() as w:
            with pytest.raises(CheckpointError, match=r"keys must be non-empty bytes, got b''"):
                w.put("a", b"", b"v")
            with pytest.raises(CheckpointError, match=r"keys must be non-empty bytes, got b''"):
                w.append("a", b"", b"v")
            with pytest.raises(CheckpointError, match=r"keys must be non-empty bytes, got 'k'"):
                w.put("a", "k", b"v")  # type: ignore[arg-type]
            assert w.get("a", b"") is None
            assert w.delete("a", b"") is False
        with backend.read() as r:
            assert r.get("a", b"") is None
            assert r.count("a") == 0

    # -- scans ---------------------------------------------------------------------------------

    def _fill(self, backend: Backend, table: str, keys: list[bytes]) -> None:
        def fn(txn: WriteTxn) -> None:
            for k in keys:
                txn.put(table, k, b"v" + k)

        backend.run_write(fn)

    def test_scan_bounds_direction_and_limit(self, backend: Backend) -> None:
        keys = [b"k%02d" % i for i in range(10)]
        self._fill(backend, "a", keys)
        self._fill(backend, "b", [b"k05x"])  # another table never leaks into "a"
        pairs = [(k, b"v" + k) for k in keys]
        with backend.read() as r:
            assert list(r.scan("a")) == pairs
            assert list(r.scan("a", reverse=True)) == pairs[::-1]
            assert list(r.scan("a", b"k03", b"k07")) == pairs[3:7]
            assert list(r.scan("a", b"k03", b"k07", reverse=True)) == pairs[3:7][::-1]
            # Bounds that fall between keys.
            assert list(r.scan("a", b"k025", b"k065")) == pairs[3:7]
            assert list(r.scan("a", b"k025", b"k065", reverse=True)) == pairs[3:7][::-1]
            assert list(r.scan("a", start=b"k08")) == pairs[8:]
            assert list(r.scan("a", stop=b"k02")) == pairs[:2]
            assert list(r.scan("a", start=b"k08", reverse=True)) == pairs[8:][::-1]
            assert list(r.scan("a", stop=b"k02", reverse=True)) == pairs[:2][::-1]
            assert list(r.scan("a", limit=3)) == pairs[:3]
            assert list(r.scan("a", reverse=True, limit=3)) == pairs[::-1][:3]
            assert list(r.scan("a", b"k02", b"k09", reverse=True, limit=2)) == [
                pairs[8],
                pairs[7],
            ]
            assert list(r.scan("a", limit=0)) == []
            assert list(r.scan("a", limit=100)) == pairs
            # Empty and inverted ranges, ranges past either end.
            assert list(r.scan("a", b"k05", b"k05")) == []
            assert list(r.scan("a", b"k07", b"k03")) == []
            assert list(r.scan("a", b"k07", b"k03", reverse=True)) == []
            assert list(r.scan("a", b"z")) == []
            assert list(r.scan("a", b"z", reverse=True)) == []
            assert list(r.scan("a", stop=b"a")) == []
            assert list(r.scan("a", stop=b"a", reverse=True)) == []
            assert list(r.scan("a", stop=b"z", reverse=True)) == pairs[::-1]
            # Bounds longer than any storable key are still just bounds.
            long_bound = b"k05" + b"\xff" * (backend.max_key_bytes + 10)
            assert list(r.scan("a", long_bound)) == pairs[6:]
            assert list(r.scan("a", stop=long_bound, reverse=True)) == pairs[:6][::-1]
            assert list(r.scan("b")) == [(b"k05x", b"vk05x")]

    def test_scan_of_empty_table(self, backend: Backend) -> None:
        with backend.read() as r:
            assert list(r.scan("a")) == []
            assert list(r.scan("a", reverse=True)) == []
            assert list(r.scan("a", b"x", b"y")) == []
            assert list(r.scan_prefix("a", b"x")) == []
            assert r.last_key("a") is None
            assert r.count("a") == 0

    def test_scan_prefix_including_trailing_ff(self, backend: Backend) -> None:
        self._fill(backend, "a", _PREFIX_KEYS)
        prefixes = [b"", b"a", b"a\xff", b"a\xff\xff", b"\xfe\xff", b"\xff", b"\xff\xff", b"c"]
        with backend.read() as r:
            for prefix in prefixes:
                want = [(k, b"v" + k) for k in _PREFIX_KEYS if k.startswith(prefix)]
                assert list(r.scan_prefix("a", prefix)) == want, prefix
                assert list(r.scan_prefix("a", prefix, reverse=True)) == want[::-1], prefix
                assert list(r.scan_prefix("a", prefix, limit=1)) == want[:1], prefix
                got = list(r.scan_prefix("a", prefix, reverse=True, limit=2))
                assert got == want[::-1][:2], prefix

    def test_rows_equal_a_bounded_scan(self, backend: Backend) -> None:
        keys = [b"k%03d" % i for i in range(300)]
        self._fill(backend, "a", keys)
        self._fill(backend, "b", [b"k100x"])  # another table never leaks into "a"
        with backend.read() as r:
            for start, stop, limit in (
                (b"k000", b"k300", 1000), (b"k010", b"k020", 1000), (b"k010", b"k200", 7),
                (b"k0105", b"k0205", 3), (b"k299", b"k300", 5), (b"k300", b"k400", 5),
                (b"k050", b"k050", 5), (b"", b"\xff", 0), (b"k100", b"k101", 1),
            ):  # fmt: skip
                want = list(r.scan("a", start, stop, limit=limit))
                assert r.rows("a", start, stop, limit) == want, (start, stop, limit)

    def test_prefix_rows_equal_scan_prefix(self, backend: Backend) -> None:
        self._fill(backend, "a", _PREFIX_KEYS)
        # enough rows under one prefix to cross the bulk reader's chunk sizes (64, 256, ...)
        many = [b"m" + i.to_bytes(2, "big") for i in range(700)]
        self._fill(backend, "a", [*many, b"n"])
        prefixes = [b"", b"a", b"a\xff", b"\xff", b"c", b"m", b"m\x01", b"m\x02\xbb", b"n", b"zz"]
        with backend.read() as r:
            for prefix in prefixes:
                assert r.prefix_rows("a", prefix) == list(r.scan_prefix("a", prefix)), prefix
            assert len(r.prefix_rows("a", b"m")) == 700

    def test_last_key_and_count(self, backend: Backend) -> None:
        self._fill(backend, "a", [b"m", b"c", b"x"])
        with backend.write() as w:
            assert w.last_key("a") == b"x"
            assert w.count("a") == 3
            w.put("a", b"z", b"")
            w.delete("a", b"c")
            assert w.last_key("a") == b"z"  # in-txn view
            assert w.count("a") == 3
            assert w.last_key("b") is None
            assert w.count("b") == 0
        with backend.read() as r:
            assert r.last_key("a") == b"z"
            assert r.count("a") == 3

    def test_last_item_stands_for_last_key(self, backend: Backend) -> None:
        """``last_item`` is the greatest pair, in a read and in a write transaction, where it
        also serves as the append check's ``last_key`` (a backend may keep it from there)."""
        with backend.write() as w:
            assert w.last_item("a") is None
            w.append("a", b"k1", b"v1")
            assert w.last_item("a") == (b"k1", b"v1")
        with backend.write() as w:
            assert w.last_item("a") == (b"k1", b"v1")
            with pytest.raises(CheckpointError):
                w.append("a", b"k0", b"older")  # the append check knows the table's end
            w.append("a", b"k2", b"v2")
            assert w.last_item("a") == (b"k2", b"v2")
            assert w.last_key("a") == b"k2"
            w.put("a", b"k9", b"v9")
            assert w.last_item("a") == (b"k9", b"v9")
            assert w.last_key("a") == b"k9"
            assert w.last_item("b") is None
        with backend.read() as r:
            assert r.last_item("a") == (b"k9", b"v9")
            assert r.last_item("b") is None

    def test_prefetched_gets_see_the_transactions_own_writes(self, backend: Backend) -> None:
        """``prefetch`` is only a hint: a get after it returns what a get without it would,
        also after the transaction wrote the key (or the table) in between."""
        self._fill(backend, "a", [b"k1", b"k2", b"k3"])
        with backend.write() as w:
            w.prefetch("a", [b"k1", b"k2", b"nope", b"", b"k" * 600])
            w.prefetch("b", [b"k1"])
            assert w.get("a", b"k1") == b"vk1"
            assert w.get("a", b"nope") is None
            assert w.get("a", b"k3") == b"vk3"  # not prefetched
            assert w.get("b", b"k1") is None
            w.put("a", b"k2", b"changed")
            assert w.get("a", b"k2") == b"changed"
            w.prefetch("a", [b"k1", b"k2"])
            w.delete("a", b"k1")
            assert w.get("a", b"k1") is None
            assert w.get("a", b"k2") == b"changed"
            w.prefetch("a", [b"k3"])
            assert w.get_many("a", [b"k3", b"k2"]) == [b"vk3", b"changed"]
        with backend.read() as r:
            r.prefetch("a", [b"k2"])
            assert r.get("a", b"k2") == b"changed"

    def test_get_many_linked_reads_the_rows_a_link_row_names(self, backend: Backend) -> None:
        """``get_many_linked``: the rows asked for, and the rows whose keys are the prefix plus
        each fixed-width piece of the link row after its zero byte (absent ones left out; a
        link row with another first byte, or none, names nothing), in a read transaction, in
        a write transaction and as a transaction of its own."""

        def fn(txn: WriteTxn) -> None:
            txn.put("a", b"c1", b"one")
            txn.put("a", b"L", b"\x00" + b"aaa" + b"zzz" + b"bbb")
            txn.put("a", b"Laaa", b"A")
            txn.put("a", b"Lbbb", b"")
            txn.put("a", b"old", b"\x91aaa")

        backend.run_write(fn)
        want = ([b"one", None], [(b"Laaa", b"A"), (b"Lbbb", b"")])
        with backend.read() as r:
            got = r.get_many_linked("a", [b"c1", b"c2"], b"L", b"L", 3)
            assert (got[0], sorted(got[1])) == want
            assert r.get_many_linked("a", [b"c1"], b"old", b"L", 3) == ([b"one"], [])
            assert r.get_many_linked("a", [b"c1"], b"none", b"L", 3) == ([b"one"], [])
            assert r.get_many_linked("b", [b"c1"], b"L", b"L", 3) == ([None], [])
        got = backend.get_many_linked_now("a", [b"c1", b"c2"], b"L", b"L", 3)
        assert (got[0], sorted(got[1])) == want
        with backend.write() as w:
            w.put("a", b"Lzzz", b"Z")
            got = w.get_many_linked("a", [b"c2", b"c1"], b"L", b"L", 3)
            assert got[0] == [None, b"one"]
            assert sorted(got[1]) == [(b"Laaa", b"A"), (b"Lbbb", b""), (b"Lzzz", b"Z")]
            got = w.get_many_linked("a", [b"c1"], b"L", b"L", 3, skip={b"Laaa", b"Lnot"})
            assert (got[0], sorted(got[1])) == ([b"one"], [(b"Lbbb", b""), (b"Lzzz", b"Z")])
        with backend.read() as r:  # skip: the rows the caller holds, left out of the answer
            got = r.get_many_linked("a", [b"c1"], b"L", b"L", 3, skip=[b"Lbbb", b"Lzzz"])
            assert got == ([b"one"], [(b"Laaa", b"A")])
        got = backend.get_many_linked_now("a", [b"c1"], b"L", b"L", 3, skip=[b"Laaa"])
        assert (got[0], sorted(got[1])) == ([b"one"], [(b"Lbbb", b""), (b"Lzzz", b"Z")])

    def test_get_named_reads_a_row_and_a_range_under_the_prefix_a_name_holds(
        self, backend: Backend
    ) -> None:
        """``get_named``: the value P of a name row, the row P + suffix, and the rows under P +
        tail in key order (another prefix's rows and keys past the tail left out; a tail of
        0xff bytes too); nothing when the name is absent; in a read transaction, in a write
        transaction (its own writes seen) and as a transaction of its own."""

        def fn(txn: WriteTxn) -> None:
            txn.put("a", b"thread", b"P1")
            txn.put("b", b"P1cid", b"row")
            txn.put("b", b"P2cid", b"other")
            for k in (b"P1w2", b"P1w1", b"P1wz", b"P1x", b"P2w1", b"P1\xff\xff1", b"P1\xff\xff"):
                txn.put("b", k, k[2:])

        backend.run_write(fn)
        want = (b"P1", b"row", [(b"P1w1", b"w1"), (b"P1w2", b"w2"), (b"P1wz", b"wz")])
        with backend.read() as r:
            assert r.get_named("a", b"thread", "b", b"cid", "b", b"w") == want
            assert r.get_named("a", b"nobody", "b", b"cid", "b", b"w") == (None, None, [])
            assert r.get_named("a", b"thread", "b", b"gone", "b", b"q") == (b"P1", None, [])
            got = r.get_named("a", b"thread", "b", b"cid", "b", b"\xff\xff")
            assert got[2] == [(b"P1\xff\xff", b"\xff\xff"), (b"P1\xff\xff1", b"\xff\xff1")]
        assert backend.get_named_now("a", b"thread", "b", b"cid", "b", b"w") == want
        with backend.write() as w:
            w.put("b", b"P1w3", b"w3")
            w.put("b", b"P1cid", b"new")
            got = w.get_named("a", b"thread", "b", b"cid", "b", b"w")
            assert got[:2] == (b"P1", b"new")
            assert [k for k, _ in got[2]] == [b"P1w1", b"P1w2", b"P1w3", b"P1wz"]

    def test_get_named_spans_reads_spans_of_several_tables_under_the_prefix_a_name_holds(
        self, backend: Backend
    ) -> None:
        """``get_named_spans``: the value P of a name row and, per span, the rows of its table
        from P + start to before P + stop in key order (a point lookup as a one-key span, an
        empty span, another prefix's rows left out); ``(None, [])`` when the name is absent; in
        a read transaction, a write transaction (its own writes seen) and on its own."""

        def fn(txn: WriteTxn) -> None:
            txn.put("a", b"inv", b"P1")
            txn.put("a", b"P1", b"head")
            txn.put("a", b"P2", b"other head")
            for k in (b"P1\x00\x02", b"P1\x00\x01", b"P1\xff", b"P2\x00\x01", b"P0\xff"):
                txn.put("b", k, k[2:])
            for k in (b"P1s", b"P1p", b"P1q", b"P2s"):
                txn.put("a", k, k[2:])
            txn.put("b", b"LP1", b"led")  # a key with P in its middle
            txn.put("b", b"LP2", b"other")

        backend.run_write(fn)
        spans = [
            ("a", b"", b"", b"\x00"),
            ("b", b"", b"", b"\xff"),
            ("a", b"", b"p", b"p\x00"),
            ("a", b"", b"x", b"z"),
            ("b", b"L", b"", b"\x00"),
        ]
        want = (
            b"P1",
            [
                [(b"P1", b"head")],
                [(b"P1\x00\x01", b"\x00\x01"), (b"P1\x00\x02", b"\x00\x02")],
                [(b"P1p", b"p")],
                [],
                [(b"LP1", b"led")],
            ],
        )
        with backend.read() as r:
            assert r.get_named_spans("a", b"inv", spans) == want
            assert r.get_named_spans("a", b"nobody", spans) == (None, [])
            got = r.get_named_spans("a", b"inv", [("a", b"", b"p", b"t")])
            assert got == (b"P1", [[(b"P1p", b"p"), (b"P1q", b"q"), (b"P1s", b"s")]])
        assert backend.get_named_spans_now("a", b"inv", spans) == want
        with backend.write() as w:
            w.put("b", b"P1\x00\x03", b"new")
            w.put("a", b"P1", b"new head")
            got = w.get_named_spans("a", b"inv", spans[:2])
            assert got[1][0] == [(b"P1", b"new head")]
            assert [k for k, _ in got[1][1]] == [b"P1\x00\x01", b"P1\x00\x02", b"P1\x00\x03"]

    def test_get_indexed_reads_the_row_an_index_row_names(self, backend: Backend) -> None:
        """``get_indexed``: the key an index row holds and the row of the other table under that
        key (``None`` for it when absent; ``(None, None)`` when the index row is); in a read
        transaction, a write transaction (its own writes seen) and on its own."""

        def fn(txn: WriteTxn) -> None:
            txn.put("a", b"i1", b"k1")
            txn.put("a", b"i2", b"gone")
            txn.put("b", b"k1", b"row one")
            txn.put("b", b"k2", b"row two")

        backend.run_write(fn)
        with backend.read() as r:
            assert r.get_indexed("a", b"i1", "b") == (b"k1", b"row one")
            assert r.get_indexed("a", b"i2", "b") == (b"gone", None)
            assert r.get_indexed("a", b"nope", "b") == (None, None)
        assert backend.get_indexed_now("a", b"i1", "b") == (b"k1", b"row one")
        with backend.write() as w:
            w.put("a", b"i3", b"k2")
            w.put("b", b"k1", b"changed")
            assert w.get_indexed("a", b"i3", "b") == (b"k2", b"row two")
            assert w.get_indexed("a", b"i1", "b") == (b"k1", b"changed")

    def test_discard_deletes_with_the_other_writes(self, backend: Backend) -> None:
        """``discard`` is ``delete`` without an answer: a write after it wins, it wins over a
        write before it, and a discarded absent key is no error."""
        self._fill(backend, "a", [b"k1", b"k2", b"k3"])
        with backend.write() as w:
            w.discard("a", b"k1")
            w.put("a", b"k2", b"new")
            w.discard("a", b"k2")
            w.discard("a", b"k3")
            w.put("a", b"k3", b"again")
            w.discard("a", b"nope")
            assert w.get("a", b"k1") is None
            assert w.get_many("a", [b"k2", b"k3"]) == [None, b"again"]
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"k3", b"again")]

    def test_delete_prefix(self, backend: Backend) -> None:
        self._fill(backend, "a", _PREFIX_KEYS)
        with backend.write() as w:
            assert w.delete_prefix("a", b"a\xff") == 4
            assert w.delete_prefix("a", b"a\xff") == 0
        with backend.read() as r:
            assert [k for k, _ in r.scan("a")] == [
                k for k in _PREFIX_KEYS if not k.startswith(b"a\xff")
            ]

    # -- append --------------------------------------------------------------------------------

    def test_append_accepts_only_ascending_keys(self, backend: Backend) -> None:
        with backend.write() as w:
            w.append("a", b"k1", b"1")
            w.append("a", b"k2", b"2")
            w.append("b", b"a", b"other table has its own order")
        with backend.write() as w:
            w.append("a", b"k3", b"3")  # ascending across transactions too
            for bad in (b"k3", b"k2", b"k0", b"k"):
                with pytest.raises(
                    CheckpointError,
                    match=rf"append to table 'a' needs a key greater than the last one "
                    rf"\(6b33\), got {bad.hex()}",
                ):
                    w.append("a", bad, b"bad")
            # The failed appends changed nothing; the transaction still commits its own writes.
            assert w.get("a", b"k3") == b"3"
            w.put("a", b"k0", b"put may go anywhere")
        with backend.read() as r:
            assert list(r.scan("a")) == [
                (b"k0", b"put may go anywhere"),
                (b"k1", b"1"),
                (b"k2", b"2"),
                (b"k3", b"3"),
            ]
            assert list(r.scan("b")) == [(b"a", b"other table has its own order")]

    def test_append_many_refuses_keys_out_of_order_and_writes_none(self, backend: Backend) -> None:
        self._fill(backend, "a", [b"k1", b"k5"])
        for bad in (
            [(b"k3", b"below the last key")],
            [(b"k5", b"equal to the last key")],
            [(b"k6", b"fine"), (b"k9", b"fine"), (b"k7", b"out of order within")],
            [(b"k0", b"below"), (b"k8", b"fine")],
        ):

            def fn(txn: WriteTxn, pairs: list[tuple[bytes, bytes]] = bad) -> None:
                txn.append_many("a", pairs)

            with pytest.raises(CheckpointError, match="needs a key greater than the last one"):
                backend.run_write(fn)
            with backend.read() as r:
                assert list(r.scan("a")) == [(b"k1", b"vk1"), (b"k5", b"vk5")]
        with backend.write() as w:
            w.append_many("a", [(b"k6", b"6"), (b"k7", b"7")])
            w.append_many("a", [(b"k8", b"8")])
        with backend.read() as r:
            assert [k for k, _ in r.scan("a")] == [b"k1", b"k5", b"k6", b"k7", b"k8"]

    def test_failed_append_leaves_table_unchanged(self, backend: Backend) -> None:
        self._fill(backend, "a", [b"k1", b"k5"])

        def fn(txn: WriteTxn) -> None:
            txn.append("a", b"k9", b"ok")
            txn.append("a", b"k2", b"out of order")

        with pytest.raises(CheckpointError, match="needs a key greater than the last one"):
            backend.run_write(fn)
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"k1", b"vk1"), (b"k5", b"vk5")]
        with backend.write() as w:
            w.append("a", b"k6", b"6")
        with backend.read() as r:
            assert r.last_key("a") == b"k6"
            assert r.count("a") == 3

    # -- atomicity and isolation ---------------------------------------------------------------

    def test_commit_is_atomic_and_rollback_leaves_nothing(self, backend: Backend) -> None:
        self._fill(backend, "a", [b"keep", b"gone"])

        def fn(txn: WriteTxn) -> None:
            txn.put("a", b"new", b"1")
            txn.put("a", b"keep", b"overwritten")
            assert txn.delete("a", b"gone")
            txn.append("b", b"z", b"z")
            assert txn.get("a", b"new") == b"1"
            assert txn.count("a") == 2
            raise _Abort

        with pytest.raises(_Abort):
            backend.run_write(fn)
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"gone", b"vgone"), (b"keep", b"vkeep")]
            assert r.count("b") == 0
            assert r.last_key("b") is None
        # The backend is fully usable after a rollback.
        backend.run_write(_put("a", b"after", b"x"))
        with backend.read() as r:
            assert r.get("a", b"after") == b"x"
            assert r.count("a") == 3

    def test_rollback_of_bare_write_block(self, backend: Backend) -> None:
        def body() -> None:
            with backend.write() as w:
                w.put("a", b"k", b"v")
                raise _Abort

        with pytest.raises(_Abort):
            body()
        with backend.read() as r:
            assert r.get("a", b"k") is None

    def test_read_txn_is_a_snapshot(self, backend: Backend) -> None:
        self._fill(backend, "a", [b"k"])

        def change(txn: WriteTxn) -> None:
            txn.put("a", b"k", b"new")
            txn.put("a", b"k2", b"added")
            txn.put("b", b"k3", b"added")

        with backend.read() as r:
            assert r.get("a", b"k") == b"vk"
            # Commit from another thread while this read txn stays open in this one.
            with ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(backend.run_write, change).result(timeout=THREAD_WAIT_S)
            assert r.get("a", b"k") == b"vk"
            assert r.get("a", b"k2") is None
            assert list(r.scan("a")) == [(b"k", b"vk")]
            assert r.count("a") == 1
            assert r.last_key("a") == b"k"
            assert r.count("b") == 0
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"k", b"new"), (b"k2", b"added")]
            assert r.get("b", b"k3") == b"added"

    def test_readers_never_see_an_uncommitted_write(self, backend: Backend) -> None:
        written = threading.Event()
        release = threading.Event()

        def writer() -> None:
            with backend.write() as w:
                w.put("a", b"k1", b"1")
                w.put("a", b"k2", b"2")
                written.set()
                assert release.wait(THREAD_WAIT_S)

        with ThreadPoolExecutor(max_workers=1) as pool:
            fut = pool.submit(writer)
            try:
                assert written.wait(THREAD_WAIT_S)
                with backend.read() as r:
                    assert list(r.scan("a")) == []
            finally:
                release.set()
            fut.result(timeout=THREAD_WAIT_S)
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"k1", b"1"), (b"k2", b"2")]

    def test_concurrent_writers_lose_no_update(self, tmp_path: Path) -> None:
        backend = self.make_backend(tmp_path, durability="process")
        threads, increments = 8, 200
        seen: list[int] = []
        stop_reading = threading.Event()

        def writer() -> list[int]:
            return [backend.run_write(_incr) for _ in range(increments)]

        def reader() -> None:
            while not stop_reading.is_set():
                with backend.read() as r:
                    seen.append(int(r.get("a", b"counter") or b"0"))
                # Yield the GIL: a tight read loop starves the 8 writers on a loaded machine.
                time.sleep(0.0005)

        try:
            with ThreadPoolExecutor(max_workers=threads + 1) as pool:
                read_fut = pool.submit(reader)
                futs = [pool.submit(writer) for _ in range(threads)]
                results = [n for f in futs for n in f.result(timeout=THREAD_WAIT_S * 3)]
                stop_reading.set()
                read_fut.result(timeout=THREAD_WAIT_S)
            total = threads * increments
            # Each increment saw the previous one: every count from 1 to total exactly once.
            assert sorted(results) == list(range(1, total + 1))
            assert seen == sorted(seen)  # a reader never goes back in time
            with backend.read() as r:
                assert r.get("a", b"counter") == str(total).encode()
        finally:
            stop_reading.set()
            backend.close()

    # -- run_write -----------------------------------------------------------------------------

    def test_run_write_returns_the_result(self, backend: Backend) -> None:
        def fn(txn: WriteTxn) -> tuple[str, int]:
            txn.put("a", b"k", b"v")
            return ("done", txn.count("a"))

        assert backend.run_write(fn) == ("done", 1)

    def test_run_write_retries_retryable_writes(self, backend: Backend) -> None:
        calls: list[int] = []

        def fn(txn: WriteTxn) -> int:
            calls.append(len(calls))
            txn.put("a", b"attempt%d" % len(calls), b"")
            if len(calls) < 3:
                raise RetryableWrite("transient: try again")
            return len(calls)

        assert backend.run_write(fn) == 3
        with backend.read() as r:
            # The failed attempts were rolled back; only the last one's write is there.
            assert [k for k, _ in r.scan("a")] == [b"attempt3"]

    def test_run_write_gives_up_after_attempts(self, backend: Backend) -> None:
        calls = itertools.count()

        def fn(txn: WriteTxn) -> None:
            next(calls)
            txn.put("a", b"k", b"v")
            raise RetryableWrite("still transient")

        with pytest.raises(RetryableWrite, match="still transient"):
            backend.run_write(fn, attempts=3)
        assert next(calls) == 3
        with backend.read() as r:
            assert r.count("a") == 0

    def test_run_write_does_not_retry_other_errors(self, backend: Backend) -> None:
        calls = itertools.count()

        def fn(txn: WriteTxn) -> None:
            next(calls)
            txn.put("a", b"k", b"v")
            raise CheckpointError("permanent")

        with pytest.raises(CheckpointError, match="permanent"):
            backend.run_write(fn)
        assert next(calls) == 1
        with backend.read() as r:
            assert r.count("a") == 0

    # -- lifecycle -----------------------------------------------------------------------------

    def test_use_after_close_raises_log_closed(self, tmp_path: Path) -> None:
        backend = self.make_backend(tmp_path)
        backend.run_write(_put("a", b"k", b"v"))
        backend.close()
        backend.close()  # closing twice is harmless
        with pytest.raises(LogClosed, match=r"is closed"):
            backend.read().__enter__()
        with pytest.raises(LogClosed, match=r"is closed"):
            backend.write().__enter__()
        with pytest.raises(LogClosed, match=r"is closed"):
            backend.run_write(_put("a", b"k", b"v"))
        with pytest.raises(LogClosed, match=r"is closed"):
            backend.sync()

    def test_context_manager_closes(self, tmp_path: Path) -> None:
        with self.make_backend(tmp_path) as backend:
            backend.run_write(_put("a", b"k", b"v"))
        with pytest.raises(LogClosed):
            backend.read().__enter__()

    def test_readonly_rejects_writes(self, tmp_path: Path) -> None:
        rw = self.make_backend(tmp_path)
        rw.run_write(_put("a", b"k", b"v"))
        rw.close()
        ro = self.make_backend(tmp_path, readonly=True)
        try:
            assert ro.readonly is True
            message = r"opened read-only; .*open it writable"
            with pytest.raises(ReadOnlyLog, match=message):
                ro.write().__enter__()
            with pytest.raises(ReadOnlyLog, match=message):
                ro.run_write(_put("a", b"k", b"changed"))
            with ro.read() as r:
                assert r.get("a", b"k") in (b"v", None)  # None: a memory store starts empty
            ro.sync()
        finally:
            ro.close()
        with pytest.raises(LogClosed, match=r"is closed"):
            ro.write().__enter__()  # closed wins over read-only

    def test_tables_added_after_opening_are_read_and_written(self, tmp_path: Path) -> None:
        """``add_tables``: ``create=True`` makes a table usable in a writable store; a store
        opened again (read-only too) reads it once added with ``create=False``, which never
        creates one (a table it leaves out reads as if absent, never an error); the tables
        declared at opening stay as they were (the CLI reads an integration's tables this
        way, on every backend)."""
        rw = self.make_backend(tmp_path)
        try:
            assert rw.add_tables(["c", "a"], create=True) == ("c", "a")
            rw.run_write(_put("c", b"k", b"in c"))
            with rw.read() as r:
                assert r.get("c", b"k") == b"in c"
                assert r.get("a", b"k") is None
        finally:
            rw.close()
        ro = self.make_backend(tmp_path, readonly=True)
        try:
            assert ro.add_tables(["c"], create=False) == ("c",)
            added = ro.add_tables(["c", "never"], create=False)
            assert added[:1] == ("c",)
            assert set(added) <= {"c", "never"}
            with ro.read() as r:
                assert r.get("c", b"k") in (b"in c", None)  # None: a memory store starts empty
                for table in added[1:]:
                    assert r.get(table, b"k") is None
                assert r.get("a", b"k") is None
        finally:
            ro.close()

    def test_durability_is_checked(self, tmp_path: Path) -> None:
        with pytest.raises(
            CheckpointError,
            match=re.escape("durability must be one of ('fsync', 'process'), got 'never'"),
        ):
            self.make_backend(tmp_path, durability="never")
        for durability in ("fsync", "process"):
            sub = tmp_path / durability
            sub.mkdir()
            backend = self.make_backend(sub, durability=durability)
            try:
                assert backend.durability == durability
                backend.run_write(_put("a", b"k", b"v"))
                backend.sync()
                assert backend.size_bytes() >= 0
                with backend.read() as r:
                    assert r.get("a", b"k") == b"v"
            finally:
                backend.close()

    # -- model-based ---------------------------------------------------------------------------

    # Every subclass runs this one function against the same model, so sharing its example
    # database across backends (what differing_executors warns about) is intended: a sequence
    # that broke one backend is worth replaying on the others.
    @settings(
        deadline=None,
        suppress_health_check=[HealthCheck.differing_executors],
    )
    @given(txns=_TXNS)
    def test_agrees_with_dict_model(
        self, tmp_path_factory: pytest.TempPathFactory, txns: list[tuple[list[_Op], bool]]
    ) -> None:
        backend = self.make_backend(tmp_path_factory.mktemp("model"), durability="process")
        try:
            model: _Model = {name: {} for name in TABLES}
            for ops, abort in txns:
                # A RetryableWrite runs the transaction again on a fresh copy, as run_write
                # does: a backend may answer a read from what it expects (PostgreSQL's
                # assuming transactions), provided a wrong guess fails the commit and
                # never lets it through.
                for _attempt in range(3):
                    work = {name: dict(table) for name, table in model.items()}
                    try:
                        _run_txn(backend, work, ops, abort=abort)
                    except _Abort:
                        break
                    except RetryableWrite:
                        continue
                    model = work
                    break
                else:
                    pytest.fail("the transaction raised RetryableWrite three times in a row")
                _check_against_model(backend, model)
        finally:
            backend.close()


# -- fault injection ---------------------------------------------------------------------------


def disk_full() -> OSError:
    """The error a commit meets on a full disk: ``OSError(ENOSPC)``."""
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _WriteRecorder:
    """A write transaction that notes which tables it changes (``FaultyBackend.fail_tables``)."""

    _MUTATORS = frozenset(("put", "delete", "append", "put_many", "append_many", "delete_prefix"))

    def __init__(self, txn: WriteTxn) -> None:
        self._txn = txn
        self.tables: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._txn, name)
        if name not in self._MUTATORS:
            return attr

        def mutate(table: str, *args: Any) -> Any:
            self.tables.add(table)
            return attr(table, *args)

        return mutate


class _FaultyWrite:
    """``with faulty.write() as txn``: the inner transaction, whose commit may be made to fail
    (it is then rolled back and the injected error raised, as a failed commit would)."""

    __slots__ = ("owner", "recorder", "scope")

    def __init__(self, owner: FaultyBackend) -> None:
        self.owner = owner
        self.scope = owner.inner.write()
        self.recorder: _WriteRecorder | None = None

    def __enter__(self) -> WriteTxn:
        txn = self.scope.__enter__()
        if not self.owner.fail_tables:
            return txn
        self.recorder = _WriteRecorder(txn)
        return self.recorder  # type: ignore[return-value]  # a WriteTxn by duck typing

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool | None:
        if exc is None:
            touched = self.recorder.tables if self.recorder is not None else set()
            injected = self.owner._next_commit(touched)
            if injected is not None:
                self.scope.__exit__(type(injected), injected, None)  # roll back
                raise injected
        return self.scope.__exit__(exc_type, exc, tb)


class FaultyBackend(Backend):
    """Any backend, with commits that fail on demand: storage faults for tests.

    ``failing = True`` makes every commit fail (a full disk) until set back to ``False``;
    ``fail_at`` holds commit numbers (1-based, counting every commit attempt) that fail once;
    ``fail_tables`` names tables a commit that changed any of them fails on (a damaged
    table). A failing commit rolls its transaction back and raises ``error()`` (by default
    ``OSError(ENOSPC)``; :func:`disk_full`). Everything else is the inner backend's, unchanged.
    """

    def __init__(self, inner: Backend, *, error: Callable[[], BaseException] = disk_full) -> None:
        self.inner = inner
        self.error = error
        self.durability = inner.durability
        self.readonly = inner.readonly
        self.failing = False
        self.fail_at: set[int] = set()
        self.fail_tables: set[str] = set()
        self.commits = 0  # commit attempts
        self.failed = 0  # commits made to fail
        self._lock = threading.Lock()

    def _next_commit(self, tables: set[str]) -> BaseException | None:
        with self._lock:
            self.commits += 1
            hit = not self.fail_tables.isdisjoint(tables)
            if not (self.failing or self.commits in self.fail_at or hit):
                return None
            self.failed += 1
        return self.error()

    @property
    def max_key_bytes(self) -> int:
        return self.inner.max_key_bytes

    @property
    def location(self) -> str:
        return self.inner.location

    def read(self) -> AbstractContextManager[ReadTxn]:
        return self.inner.read()

    def write(self) -> AbstractContextManager[WriteTxn]:
        return _FaultyWrite(self)

    def add_tables(self, tables: Iterable[str], *, create: bool) -> tuple[str, ...]:
        return self.inner.add_tables(tables, create=create)

    def sync(self) -> None:
        self.inner.sync()

    def close(self) -> None:
        self.inner.close()

    def size_bytes(self) -> int:
        return self.inner.size_bytes()


# -- layouts -------------------------------------------------------------------------------------


def create_unfolded_lmdb(path: str | os.PathLike[str], tables: Iterable[str]) -> None:
    """Create an empty LMDB store at ``path`` declaring ``tables``, in the layout of the logs
    made before the fold (one sub-database per table, backends/lmdb_fold.py): an old log for
    the tests that open one."""
    from backends.lmdb import LmdbBackend  # noqa: PLC0415 - lmdb only where asked for

    LmdbBackend(path, tables=tables, folded_tables=()).close()
