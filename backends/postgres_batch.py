"""What a PostgreSQL write transaction queues between two reads, sent as one statement.

A write transaction that runs on what its process knows (``backends.postgres._Known``) queues
assertions (a row holds a value, a range is empty, a table's greatest key) and writes (upserts,
plain inserts of rows assumed new). Sent one statement each, a LangGraph ``put`` was ~16
statements, and psycopg's client-side cost per statement (~100 us of the process's CPU:
building the cursor, dumping, the pipeline's communication) was most of the save's CPU.
:class:`Batch` collects them instead and renders one statement:

    WITH w0 AS (INSERT INTO t0 (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[])
                ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v),
         w1 AS (INSERT INTO t1 (k, v) SELECT * FROM unnest($3::bytea[], $4::bytea[])),
         w2 AS (DELETE FROM t2 WHERE k = ANY($5::bytea[])), ...
    SELECT 1 / (<assertion> AND <assertion> ...)::int

Its data-modifying ``WITH`` clauses always run to completion, and every part of the statement
reads one snapshot: the one from before the statement's own writes. That is what the
assertions mean: each is about a row this transaction has not written (the transaction answers
a read of a row it wrote from what it wrote, and never assumes the greatest key or an empty
range of a table it wrote to). A failed assertion divides by zero, a row assumed new that
exists fails its plain ``INSERT`` (``unique_violation``): either fails the statement, and the
transaction runs again reading for real, as before.

One statement may not change a row twice, so the writes are folded per key first: the last
value wins (as the statements in order would have left it), a key written both ways is
upserted, and a deletion (``WriteTxn.discard``, which needs no answer) replaces the writes of
its key before it, as a write after it replaces it. Keys are checked by the caller
(non-empty, at most 511 bytes).

A key asserted to hold a value and then written is neither asserted nor upserted: it is
updated where it still holds that value (compare and set), and the statement checks that
every such row was updated (a division by zero when not, as for a failed assertion):

    w0 AS (UPDATE t0 AS r SET v = u.n FROM unnest($1::bytea[], $2::bytea[], $3::bytea[])
           AS u(k, o, n) WHERE r.k = u.k AND r.v = u.o RETURNING 1)
    ... SELECT 1 / ((SELECT count(*) FROM w0) = cardinality($1::bytea[]) AND ...)::int

It checks the same as the assertion and the upsert did, with one index lookup instead of
two, and without the upsert's speculative insertion (whose tuple lock is a WAL record of
its own): a LangGraph step's rewritten rows (its thread's latest checkpoint) are such rows.

Rows the server numbers (:meth:`Batch.number`: the log's frames and the stream index rows
naming them) come first, moved by how far the log's greatest key, in the statement's
snapshot, is past the key the client put them after; the statement's row says how far:

    WITH w0 AS (SELECT coalesce((SELECT <k as int8> FROM log ORDER BY k DESC LIMIT 1), 0)
                       - <$1 as int8> AS d),
         w1 AS (INSERT INTO log (k, v) SELECT int8send(<u.k as int8> + w0.d), u.v
                FROM unnest($2::bytea[], $3::bytea[]) AS u(k, v), w0),
         w2 AS (INSERT INTO streams (k, v) SELECT u.k, int8send(<u.v as int8> + w0.d) ...), ...
    SELECT 1 / (...)::int, (SELECT d FROM w0)
"""

from __future__ import annotations

import functools
import itertools
import re
import struct
from collections.abc import Iterable
from typing import Any

BYTEA_OID = 17
BYTEA_ARRAY_OID = 1001
STATEMENTS_CACHED_MAX = 256  # rendered statement texts kept per backend

_ARRAY_HEADER = struct.Struct("!iiiii")  # dimensions, has nulls, element type; size, lower bound
_ITEM_LEN = struct.Struct("!i")
_NULL_ITEM = _ITEM_LEN.pack(-1)
_ONE_HEADER = _ARRAY_HEADER.pack(1, 0, BYTEA_OID, 1, 1)
_U64 = "('x' || encode({}, 'hex'))::bit(64)::int8"  # an 8-byte big-endian key as int8
_SIZED: tuple[type, ...] = (list, tuple, dict, type({}.keys()), type({}.values()))


class ByteaArray(bytes):
    """A ``bytea[]`` parameter already in PostgreSQL's binary array format
    (:func:`bytea_array`): sent as it is, without psycopg's per-item array dumping, which
    cost more than the rest of writing a batch."""


def bytea_array(items: Iterable[bytes | bytearray | memoryview | None]) -> ByteaArray:
    """``items`` as one binary ``bytea[]`` (one dimension, lower bound 1; ``None`` is NULL)."""
    return ByteaArray(_array(items))


def _array(items: Iterable[bytes | bytearray | memoryview | None]) -> bytes:
    """:func:`bytea_array`'s bytes, as :meth:`Batch.params` passes them: plain ``bytes``, whose
    construction costs a fraction of a ``bytes`` subclass's (:func:`for_psycopg` wraps them)."""
    if type(items) in _SIZED and len(items) == 1:  # type: ignore[arg-type]
        # most of a LangGraph step's arrays: one key, one value
        (v,) = items
        if v is not None:
            return _ONE_HEADER + _ITEM_LEN.pack(len(v)) + v
    pack = _ITEM_LEN.pack
    parts: list[bytes | bytearray | memoryview] = [b""]
    n = nulls = 0
    for v in items:
        n += 1
        if v is None:
            parts.append(_NULL_ITEM)
            nulls = 1
        else:
            parts.append(pack(len(v)))
            parts.append(v)
    if not n:
        return struct.pack("!iii", 0, 0, BYTEA_OID)
    parts[0] = _ARRAY_HEADER.pack(1, nulls, BYTEA_OID, n, 1)
    return b"".join(parts)


def _pairs(rows: dict[bytes, Any], out: list[Any]) -> None:
    """Append ``rows``' keys and values to ``out`` as two ``bytea[]`` (:func:`_array`); one
    row, the most common, without building either through the general path."""
    if len(rows) == 1:
        pack = _ITEM_LEN.pack
        for k, v in rows.items():
            out.append(_ONE_HEADER + pack(len(k)) + k)
            out.append(_array((None,)) if v is None else _ONE_HEADER + pack(len(v)) + v)
        return
    out.append(_array(rows))
    out.append(_array(rows.values()))


_PARAM = re.compile(r"%b(::bytea\[\])?")


@functools.lru_cache(maxsize=2 * STATEMENTS_CACHED_MAX)
def param_types(text: str) -> tuple[int, ...]:
    """The type of each parameter of a statement :func:`render` made: ``bytea[]`` where the
    statement casts it so, else ``bytea``."""
    return tuple(BYTEA_ARRAY_OID if m.group(1) else BYTEA_OID for m in _PARAM.finditer(text))


def for_psycopg(text: str, params: list[Any]) -> list[Any]:
    """:meth:`Batch.params` of statement ``text`` as psycopg sends them: each ``bytea[]`` a
    :class:`ByteaArray` (psycopg's dumper of plain ``bytes`` says ``bytea``)."""
    return [
        ByteaArray(p) if t == BYTEA_ARRAY_OID else p
        for p, t in zip(params, param_types(text), strict=True)
    ]


class Batch:
    """Assertions and writes queued by one write transaction since its last statement."""

    __slots__ = ("checks", "deletes", "expects", "inserts", "numbered", "updates", "upserts")

    def __init__(self) -> None:
        # table -> key -> the value assumed (None: absent)
        self.expects: dict[str, dict[bytes, bytes | None]] = {}
        # ("none", table, (start, stop)) / ("last", table, (key or None,))
        self.checks: list[tuple[str, str, tuple[bytes | None, ...]]] = []
        # table -> key -> value; plain INSERT (rows assumed new) or upsert
        self.inserts: dict[str, dict[bytes, bytes]] = {}
        self.upserts: dict[str, dict[bytes, bytes]] = {}
        self.deletes: dict[str, dict[bytes, None]] = {}  # table -> keys deleted, in order
        # table -> key -> (the value asserted, the value written): compare and set
        self.updates: dict[str, dict[bytes, tuple[bytes, bytes]]] = {}
        # rows numbered on the server (:meth:`number`): (table, index, the key the first
        # row follows, the rows, the index rows naming them)
        self.numbered: tuple[str, str, bytes, dict[bytes, bytes], dict[bytes, bytes]] | None = None

    def __bool__(self) -> bool:
        return bool(
            self.numbered
            or self.expects
            or self.checks
            or self.inserts
            or self.upserts
            or self.deletes
            or self.updates
        )

    def number(
        self,
        table: str,
        after: bytes,
        rows: list[tuple[bytes, bytes]],
        index: str,
        refs: list[tuple[bytes, bytes]],
    ) -> None:
        """Queue ``rows`` (8-byte big-endian keys, dense after ``after``) and the ``refs``
        naming them (each ref's value one of those keys), all moved by the server by the
        same amount: where ``table``'s greatest key, read by the statement, is above
        ``after`` (``0`` when the table is empty). The statement's row says the amount.
        Neither table may hold other writes of this batch (the caller's to ensure); a
        later call for the same tables extends the rows (they follow on from the first's)."""
        if self.numbered is None:
            self.numbered = (table, index, after, dict(rows), dict(refs))
            return
        assert self.numbered[:2] == (table, index)
        self.numbered[3].update(rows)
        self.numbered[4].update(refs)

    def expect(self, table: str, key: bytes, value: bytes | None) -> None:
        self.expects.setdefault(table, {})[key] = value

    def expect_none(self, table: str, start: bytes, stop: bytes) -> None:
        self.checks.append(("none", table, (start, stop)))

    def expect_last(self, table: str, key: bytes | None) -> None:
        self.checks.append(("last", table, (key,)))

    def delete(self, table: str, key: bytes) -> None:
        """Queue the deletion of ``key``: it replaces a write of it queued before (a compare
        and set's comparison stays, as the assertion it was)."""
        for queued in (self.upserts.get(table), self.inserts.get(table)):
            if queued:
                queued.pop(key, None)
        updates = self.updates.get(table)
        if updates and key in updates:
            old, _ = updates.pop(key)
            if not updates:
                del self.updates[table]
            self.expect(table, key, old)
        self.deletes.setdefault(table, {})[key] = None

    def insert(self, table: str, key: bytes, value: bytes) -> None:
        """Queue one row assumed new whose key this batch holds no write, deletion or
        assertion of (:meth:`write` with ``new``, without its folding)."""
        rows = self.inserts.get(table)
        if rows is None:
            self.inserts[table] = {key: value}
        else:
            rows[key] = value

    def write(self, table: str, rows: dict[bytes, bytes], *, new: bool) -> None:
        """Queue ``rows``; ``new``: assumed absent, written by a plain ``INSERT``."""
        updates = self.updates.get(table)
        if updates:
            # compared and set, then written again: still the compare and set, of the last
            # value (a plain INSERT after it would have failed; an upsert is folded the same)
            again = [k for k in rows if k in updates]
            if again:
                for k in again:
                    updates[k] = (updates[k][0], rows[k])
                rows = {k: v for k, v in rows.items() if k not in updates}
                if not rows:
                    return
        deletes = self.deletes.get(table)
        if deletes:
            for k in rows:
                if k in deletes:  # deleted, then written: the write, as an upsert
                    del deletes[k]
                    new = False
        upserts = self.upserts.get(table)
        if new:
            if upserts:
                fresh = {}
                for k, v in rows.items():
                    if k in upserts:
                        upserts[k] = v
                    else:
                        fresh[k] = v
                rows = fresh
            self.inserts.setdefault(table, {}).update(rows)
            return
        if table in self.expects:
            rows = self._asserted(table, rows)
            if not rows:
                return
        inserts = self.inserts.get(table)
        if inserts:
            # inserted, then written again: still the INSERT (it fails where a row was, as the
            # statements in order would have), of the last value
            again = [k for k in rows if k in inserts]
            if again:
                for k in again:
                    inserts[k] = rows[k]
                rows = {k: v for k, v in rows.items() if k not in inserts}
                if not rows:
                    return
        if upserts is None:
            self.upserts[table] = dict(rows)
        else:
            upserts.update(rows)

    def _asserted(self, table: str, rows: dict[bytes, bytes]) -> dict[bytes, bytes]:
        """Queue the rows of ``rows`` whose keys this batch asserts, without their assertions;
        the others are returned. A key asserted absent: a plain INSERT checks the same (a row
        there fails it, unique_violation) and costs the server less than the upsert and the
        assertion's lookup. A key asserted to hold a value: compare and set (an UPDATE where
        the row holds that value, the rows updated counted)."""
        assumed = self.expects[table]
        fresh = {}
        held = {}
        for k, v in rows.items():
            if k in assumed:
                old = assumed.pop(k)
                if old is None:
                    fresh[k] = v
                else:
                    held[k] = (old, v)
        if not fresh and not held:
            return rows
        if not assumed:
            del self.expects[table]
        if held:
            self.updates.setdefault(table, {}).update(held)
        if fresh:
            self.write(table, fresh, new=True)
        return {k: v for k, v in rows.items() if k not in fresh and k not in held}

    def signature(self) -> tuple[Any, ...]:
        return (
            tuple(self.upserts),
            tuple(self.inserts),
            tuple(self.updates),
            tuple(t for t, keys in self.deletes.items() if keys) if self.deletes else (),
            tuple(self.expects),
            tuple((kind, table) for kind, table, _ in self.checks) if self.checks else (),
            self.numbered[:2] if self.numbered else None,
        )

    def params(self) -> list[Any]:
        """The parameters of the statement :func:`render` makes of :meth:`signature`, each
        ``bytea[]`` as plain ``bytes`` (:func:`param_types`, :func:`for_psycopg`)."""
        out: list[Any] = []
        if self.numbered:
            _, _, after, rows, refs = self.numbered
            out.append(after)
            _pairs(rows, out)
            _pairs(refs, out)
        for rows in itertools.chain(self.upserts.values(), self.inserts.values()):
            _pairs(rows, out)
        updated = []  # each compare and set's keys, again for its count
        for pairs in self.updates.values():
            keys = _array(pairs)
            updated.append(keys)
            out.append(keys)
            out.append(_array([old for old, _ in pairs.values()]))
            out.append(_array([new for _, new in pairs.values()]))
        out.extend(_array(keys) for keys in self.deletes.values() if keys)
        out.extend(updated)
        for assumed in self.expects.values():
            _pairs(assumed, out)
        for _, _, args in self.checks:
            out.extend(args)
        return out


def render(signature: tuple[Any, ...], ident: dict[str, str]) -> str:
    """The statement of a batch of ``signature`` (:meth:`Batch.signature`); ``ident``: each
    table's quoted ``schema."name"``."""
    upserts, inserts, updates, deletes, expects, checks, numbered = signature
    rows = "INSERT INTO {} (k, v) SELECT * FROM unnest(%b::bytea[], %b::bytea[])"
    writes = []
    moved = ""
    if numbered:
        # the table's greatest key, in the statement's snapshot (taken after the writers'
        # lock, which orders the commits), less the key the client put its rows after
        t, index = ident[numbered[0]], ident[numbered[1]]
        writes.append(
            f"SELECT coalesce((SELECT {_U64.format('k')} FROM {t} ORDER BY k DESC LIMIT 1), 0)"
            f" - {_U64.format('%b::bytea')} AS d"
        )
        writes.append(
            f"INSERT INTO {t} (k, v) SELECT int8send({_U64.format('u.k')} + w0.d), u.v"
            " FROM unnest(%b::bytea[], %b::bytea[]) AS u(k, v), w0"
        )
        writes.append(
            f"INSERT INTO {index} (k, v) SELECT u.k, int8send({_U64.format('u.v')} + w0.d)"
            " FROM unnest(%b::bytea[], %b::bytea[]) AS u(k, v), w0"
        )
        moved = ", (SELECT d FROM w0)"
    writes += [
        rows.format(ident[t]) + " ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v" for t in upserts
    ]
    writes += [rows.format(ident[t]) for t in inserts]
    first = len(writes)
    writes += [
        f"UPDATE {ident[t]} AS r SET v = u.n FROM unnest(%b::bytea[], %b::bytea[], %b::bytea[])"
        " AS u(k, o, n) WHERE r.k = u.k AND r.v = u.o RETURNING 1"
        for t in updates
    ]
    writes += [f"DELETE FROM {ident[t]} WHERE k = ANY(%b::bytea[])" for t in deletes]
    # every row compared and set was updated (its keys are distinct: one per key)
    conds = [
        f"(SELECT count(*) FROM w{first + i}) = (SELECT count(*) FROM unnest(%b::bytea[]))"
        for i in range(len(updates))
    ]
    conds += [
        "NOT EXISTS (SELECT 1 FROM unnest(%b::bytea[], %b::bytea[]) AS e(k, v) "
        f"WHERE (SELECT r.v FROM {ident[t]} AS r WHERE r.k = e.k) IS DISTINCT FROM e.v)"
        for t in expects
    ]
    for kind, t in checks:
        if kind == "none":
            conds.append(f"NOT EXISTS (SELECT 1 FROM {ident[t]} WHERE k >= %b AND k < %b)")
        else:
            conds.append(
                f"(SELECT k FROM {ident[t]} ORDER BY k DESC LIMIT 1) IS NOT DISTINCT FROM %b::bytea"
            )
    head = ""
    if writes:
        head = "WITH " + ", ".join(f"w{i} AS ({w})" for i, w in enumerate(writes)) + " "
    tail = "SELECT 1" if not conds else f"SELECT 1 / ({' AND '.join(conds)})::int"
    tail += moved
    return head + tail
