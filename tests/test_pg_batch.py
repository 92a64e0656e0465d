"""A PostgreSQL write transaction's queued assertions and writes go to the server as one
statement (``backends/postgres_batch.py``): what the statements in order would have done, in
fewer statements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_schemas import PgSchemas

from backends.base import WriteTxn
from backends.postgres import PostgresBackend
from backends.postgres_batch import Batch, bytea_array, for_psycopg, param_types, render
from backends.postgres_fast import RawPipeline, failed

TABLES = ("log", "a", "b")


def _open(pg_schemas: PgSchemas, tmp_path: Path, **kw: Any) -> PostgresBackend:
    return PostgresBackend(pg_schemas.url(tmp_path), tables=TABLES, **kw)


def _statements(backend: PostgresBackend, fn: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements the write connection was given while ``backend.run_write(fn)`` ran."""
    sent: list[str] = []
    execute = psycopg.Connection.execute

    def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if self is backend._wconn:
            sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    run = RawPipeline.run

    def raw(self: RawPipeline, statements: Any, out: Any) -> None:  # a commit sent at once
        if self.conn is backend._wconn:
            sent.extend(text for text, _ in statements)
        run(self, statements, out)

    with monkeypatch.context() as m:
        m.setattr(psycopg.Connection, "execute", counting)
        m.setattr(RawPipeline, "run", raw)
        backend.run_write(fn)
    return sent


@pytest.mark.parametrize("durability", ["fsync", "process"])
def test_a_commit_on_assumptions_is_begin_lock_one_statement_commit(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """Assertions of three kinds and writes to three tables, plain and upserted: BEGIN, the
    lock, one statement, COMMIT (and the flush)."""
    backend = _open(pg_schemas, tmp_path, durability=durability)
    try:
        backend.run_write(lambda t: (t.append("log", b"\x01", b"f1"), t.put("a", b"x", b"1")))

        def commit(txn: WriteTxn) -> None:
            assert txn.get("a", b"x") == b"1"  # known: asserted
            assert txn.get("a", b"y") is None  # never seen: assumed absent, asserted
            assert next(iter(txn.scan("b", b"p", b"q", limit=1)), None) is None
            txn.append("log", b"\x02", b"f2")  # the log's greatest key: asserted
            txn.put("a", b"x", b"2")
            txn.put_many("b", [(b"p1", b"v1"), (b"p2", b"v2")])  # assumed new: plain INSERT

        sent = _statements(backend, commit, monkeypatch)
        assert len(sent) == (5 if durability == "fsync" else 4), sent
        assert sent[0].startswith("BEGIN")
        assert "pg_advisory_xact_lock" in sent[1]
        assert sent[2].startswith("WITH ")
        assert sent[3] == "COMMIT"
        assert backend.stale == 0
        with backend.read() as r:
            assert list(r.scan("log")) == [(b"\x01", b"f1"), (b"\x02", b"f2")]
            assert r.get("a", b"x") == b"2"
            assert list(r.scan("b")) == [(b"p1", b"v1"), (b"p2", b"v2")]
    finally:
        backend.close()


def test_a_row_written_twice_in_one_statement_keeps_the_last_value(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """One statement may not change a row twice: rows written twice (inserted as new, then
    upserted; upserted, then in a batch assumed new) are folded, the last value winning."""
    backend = _open(pg_schemas, tmp_path)
    try:
        backend.run_write(lambda t: t.put("a", b"seed", b"s"))

        def commit(txn: WriteTxn) -> None:
            txn.put_many("b", [(b"k1", b"old"), (b"k2", b"v2")])  # assumed new
            txn.put("b", b"k1", b"new")
            txn.put("a", b"u", b"first")
            txn.put("a", b"u", b"second")
            txn.put_many("a", [(b"u", b"third"), (b"w", b"w")])

        backend.run_write(commit)
        assert backend.stale == 0
        with backend.read() as r:
            assert list(r.scan("b")) == [(b"k1", b"new"), (b"k2", b"v2")]
            assert r.get("a", b"u") == b"third"
            assert r.get("a", b"w") == b"w"
    finally:
        backend.close()


def test_a_discard_goes_in_the_statement_and_folds_with_the_writes(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``discard`` is queued with the writes: no statement (no round trip) of its own; a
    write of the key before it is dropped, one after it wins (as an upsert)."""
    backend = _open(pg_schemas, tmp_path, durability="process")
    try:
        backend.run_write(
            lambda t: (
                t.append("log", b"\x01", b"f1"),
                t.put_many("a", [(b"d1", b"1"), (b"d2", b"2"), (b"d3", b"3")]),
            )
        )

        def commit(txn: WriteTxn) -> None:
            assert txn.get("a", b"d1") == b"1"  # known: asserted
            txn.discard("a", b"d1")
            txn.put("a", b"d2", b"changed")
            txn.discard("a", b"d2")
            txn.discard("a", b"d3")
            txn.put_many("a", [(b"d3", b"back"), (b"d4", b"new")])
            assert txn.get("a", b"d1") is None

        sent = _statements(backend, commit, monkeypatch)
        assert len(sent) == 4, sent  # BEGIN, the lock, one statement, COMMIT
        assert sent[2].startswith("WITH ")
        assert "DELETE FROM" in sent[2]
        assert backend.stale == 0
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"d3", b"back"), (b"d4", b"new")]
        backend.run_write(lambda t: t.discard("a", b"d4"))  # reading for real too
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"d3", b"back")]
    finally:
        backend.close()


@pytest.mark.parametrize("what", ["changed", "created", "range", "last", "inserted"])
def test_an_assumption_another_writer_broke_runs_the_transaction_again(
    pg_schemas: PgSchemas, tmp_path: Path, what: str
) -> None:
    """Each kind of assertion in the one statement fails when another writer changed what it
    assumed: nothing of the attempt commits, and the transaction runs again on what is
    stored."""
    ours = _open(pg_schemas, tmp_path)
    other = _open(pg_schemas, tmp_path)
    try:
        ours.run_write(lambda t: (t.append("log", b"\x01", b"f1"), t.put("a", b"x", b"1")))
        if what == "changed":
            other.run_write(lambda t: t.put("a", b"x", b"2"))
        elif what == "created":
            other.run_write(lambda t: t.put("a", b"y", b"other's"))
        elif what == "range":
            other.run_write(lambda t: t.put("b", b"p5", b"other's"))
        elif what == "last":
            other.run_write(lambda t: t.append("log", b"\x02", b"other's"))
        else:
            other.run_write(lambda t: t.put("b", b"n1", b"other's"))
        seen: list[tuple[Any, ...]] = []

        def commit(txn: WriteTxn) -> None:
            got = (
                txn.get("a", b"x"),
                txn.get("a", b"y"),
                next(iter(txn.scan("b", b"p", b"q", limit=1)), None),
                txn.last_key("log"),
            )
            seen.append(got)
            txn.put("a", b"z", repr(got).encode())
            txn.put_many("b", [(b"n1", b"ours"), (b"n2", b"ours")])

        ours.run_write(commit)
        assert ours.stale == 1
        assert len(seen) == 2
        with ours.read() as r:
            assert r.get("a", b"z") == repr(seen[-1]).encode()
            assert r.get("b", b"n1") == b"ours"
            truth = (
                r.get("a", b"x"),
                r.get("a", b"y"),
                next(iter(r.scan("b", b"p", b"q", limit=1)), None),
                r.last_key("log"),
            )
        assert seen[-1] == truth
        assert seen[0] != truth or what == "inserted"
    finally:
        ours.close()
        other.close()


def test_bytea_arrays_with_nulls_read_back_as_sent(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    """``None`` items go as NULL elements (an assertion that a row is absent)."""
    backend = _open(pg_schemas, tmp_path)
    conn = backend._connect()
    try:
        items = [b"a", None, b"", None, b"\x00" * 5000]
        row = conn.execute("SELECT %b::bytea[]", (bytea_array(items),), binary=True).fetchone()
        assert row is not None
        assert [None if v is None else bytes(v) for v in row[0]] == items
    finally:
        conn.close()
        backend.close()


def test_a_batch_of_every_kind_runs_through_psycopg_and_the_raw_pipeline(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """The batch's ``bytea[]`` parameters are plain bytes, typed by the statement's casts
    (``param_types``): psycopg is given them wrapped (``for_psycopg``), the raw pipeline
    prepares them with those types; both run the statement, its assertions holding."""
    backend = _open(pg_schemas, tmp_path)
    backend.run_write(
        lambda t: (t.append("log", b"\x01", b"f1"), t.put("a", b"x", b"1"), t.put("b", b"y", b"2"))
    )
    batch = Batch()
    batch.write("a", {b"k1": b"v1", b"k2": b"v2"}, new=False)
    batch.insert("b", b"n1", b"w1")
    batch.expect("a", b"x", b"1")
    batch.expect("a", b"gone", None)
    batch.expect_none("b", b"p", b"q")
    batch.expect_last("log", b"\x01")
    batch.delete("b", b"y")
    text = render(batch.signature(), {t: s.ident for t, s in backend._sql.items()})
    params = batch.params()
    types = param_types(text)
    assert len(types) == len(params)
    assert set(types) == {17, 1001}  # bytea, bytea[]
    conn = backend._connect()
    try:
        conn.execute("BEGIN")
        conn.execute(text, for_psycopg(text, params), binary=True)
        assert conn.execute("SELECT count(*) FROM " + backend._sql["b"].ident).fetchone() == (1,)
        conn.execute("ROLLBACK")
        out: list[Any] = []
        raw = RawPipeline(conn)
        raw.run([("BEGIN", None), (text, params), ("ROLLBACK", None)], out)
        assert failed(out, 3) is None, [r.error_message for r in out]
        batch.expect("b", b"y", b"no")  # a failed assertion still fails the statement
        text = render(batch.signature(), {t: s.ident for t, s in backend._sql.items()})
        out = []
        raw.run([("BEGIN", None), (text, batch.params()), ("ROLLBACK", None)], out)
        assert failed(out, 3) == 1
        assert out[1].error_message.startswith(b"ERROR:  division by zero")
    finally:
        conn.close()
        backend.close()


def test_an_error_that_followed_from_an_assumption_runs_the_transaction_again(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """A row never seen is assumed absent; the caller, finding it absent, refuses its input
    (raises). The assertion, not sent yet when the caller raised, decides: another writer had
    created the row, so the transaction runs again reading what is stored and succeeds (a
    worker saving an instance of a fan-out another process saved first)."""
    ours = _open(pg_schemas, tmp_path)
    other = _open(pg_schemas, tmp_path)
    try:
        ours.run_write(lambda t: (t.append("log", b"\x01", b"f1"), t.put("a", b"mine", b"1")))
        other.run_write(lambda t: t.put("a", b"shared", b"saved"))

        def commit(txn: WriteTxn) -> bytes:
            found = txn.get("a", b"shared")
            if found is None:
                raise LookupError("nothing is saved for 'shared'")
            txn.put("a", b"mine", b"2")
            return found

        assert ours.run_write(commit) == b"saved"
        assert ours.stale == 1

        def absent(txn: WriteTxn) -> None:
            if txn.get("a", b"never") is None:
                raise LookupError("nothing is saved for 'never'")

        with pytest.raises(LookupError):  # absent for real: the caller's error stands
            ours.run_write(absent)
        assert ours.stale == 1
    finally:
        ours.close()
        other.close()


def test_a_row_too_big_to_keep_is_read_not_assumed_absent(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value over what the process keeps of the rows it wrote is remembered as there: a
    transaction that reads it reads it (the LangGraph saver's latest row of a 64 KiB state,
    read by every put), instead of assuming it absent and running again every time."""
    from backends import postgres_known  # noqa: PLC0415

    monkeypatch.setattr(postgres_known, "KNOWN_VALUE_BYTES_MAX", 64)
    backend = _open(pg_schemas, tmp_path)
    try:
        big = b"s" * 1000
        backend.run_write(lambda t: (t.append("log", b"\x01", b"f1"), t.put("a", b"big", big)))
        for i in range(3):
            got = backend.run_write(
                lambda t, i=i: (t.get("a", b"big"), t.put("a", b"big", big + bytes([i])))[0]
            )
            assert got == (big if i == 0 else big + bytes([i - 1]))
            assert backend.stale == 0
    finally:
        backend.close()


def test_stale_transactions_keep_the_connection_and_its_statements_prepare_again(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """A transaction whose assumptions failed is rolled back on its connection (no new
    session), and the statements psycopg had prepared, or took as prepared in the failed
    pipeline, work after it: 30 rounds, each stale once, each statement past psycopg's
    threshold for preparing it."""
    ours = _open(pg_schemas, tmp_path)
    other = _open(pg_schemas, tmp_path)
    try:
        ours.run_write(lambda t: (t.append("log", b"\x00", b"f"), t.put("a", b"x", b"0")))
        conn = ours._wconn
        for i in range(1, 31):
            other.run_write(lambda t, i=i: t.put("a", b"x", b"%d" % i))

            def commit(txn: WriteTxn, i: int = i) -> None:
                assert txn.get("a", b"x") in (b"%d" % (i - 1), b"%d" % i)
                last = txn.last_key("log")
                assert last is not None
                txn.append("log", last + b"\x00", b"f%d" % i)
                txn.put("a", b"y", b"%d" % i)

            ours._assume_skip = 0  # assume at once (not after the backoff): stale each time
            ours.run_write(commit)
            assert ours._wconn is conn
        assert ours.stale == 30
        with ours.read() as r:
            assert r.get("a", b"y") == b"30"
            assert r.count("log") == 31
    finally:
        ours.close()
        other.close()


@pytest.mark.parametrize("twice", [False, True])
def test_a_row_read_absent_then_written_is_inserted_and_checked(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, twice: bool
) -> None:
    """A key the transaction read as absent (assumed, asserted), then wrote: a plain INSERT
    stands for the assertion (no lookup of its own). Another writer's row there fails it (also
    when written twice, the last value kept): nothing of the attempt commits and it runs again
    on what is stored."""
    ours = _open(pg_schemas, tmp_path)
    other = _open(pg_schemas, tmp_path)
    try:
        ours.run_write(lambda t: (t.append("log", b"\x01", b"f1"), t.put("a", b"x", b"1")))
        seen: list[bytes | None] = []

        def commit(txn: WriteTxn) -> None:
            got = txn.get("a", b"y")
            seen.append(got)
            if twice:
                txn.put("a", b"y", b"first")
            txn.put("a", b"y", b"ours after " + repr(got).encode())

        sent = _statements(ours, commit, monkeypatch)
        assert ours.stale == 0
        assert len(sent) == 5, sent  # BEGIN, the lock, one statement, COMMIT, the flush
        assert sent[2].startswith("WITH ")
        assert "ON CONFLICT" not in sent[2], sent[2]
        assert "IS DISTINCT FROM" not in sent[2], sent[2]
        with ours.read() as r:
            assert r.get("a", b"y") == b"ours after None"
        ours.run_write(lambda t: t.put("a", b"x", b"2"))  # y is known now
        other.run_write(lambda t: t.put("a", b"z", b"other's"))
        seen.clear()

        def again(txn: WriteTxn) -> None:
            got = txn.get("a", b"z")
            seen.append(got)
            if twice:
                txn.put("a", b"z", b"first")
            txn.put("a", b"z", b"ours after " + repr(got).encode())

        ours.run_write(again)
        assert ours.stale == 1
        assert seen == [None, b"other's"]
        with ours.read() as r:
            assert r.get("a", b"z") == b'ours after b"other\'s"'
    finally:
        ours.close()
        other.close()


@pytest.mark.parametrize("then", ["put", "put twice", "discard", "discard and put"])
def test_a_row_read_then_written_is_compared_and_set(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """A key the transaction read (known, asserted to hold that value), then wrote: an UPDATE
    where the row still holds the value read, its rows counted, stands for the assertion and
    the upsert (no speculative insertion). Another writer's change of the row fails it (also
    when written twice, or deleted and written again; a deletion after it keeps the
    comparison): nothing of the attempt commits and it runs again on what is stored."""
    ours = _open(pg_schemas, tmp_path)
    other = _open(pg_schemas, tmp_path)
    try:
        ours.run_write(
            lambda t: (
                t.append("log", b"\x01", b"f1"),
                t.put_many("a", [(b"x", b"1"), (b"w", b"w")]),
            )
        )
        seen: list[bytes | None] = []

        def commit(txn: WriteTxn) -> None:
            got = txn.get("a", b"x")
            seen.append(got)
            assert txn.get("a", b"w") == b"w"  # read, not written: asserted as before
            if then == "put twice":
                txn.put("a", b"x", b"first")
            if then.startswith("discard"):
                txn.discard("a", b"x")
            if then != "discard":
                txn.put("a", b"x", b"ours after " + repr(got).encode())

        sent = _statements(ours, commit, monkeypatch)
        assert ours.stale == 0
        assert len(sent) == 5, sent  # BEGIN, the lock, one statement, COMMIT, the flush
        statement = sent[2]
        assert statement.startswith("WITH ")
        assert "ON CONFLICT" not in statement, statement
        if then == "discard":
            assert "UPDATE" not in statement, statement  # x asserted, as w is
        else:
            assert "UPDATE" in statement, statement  # x compared and set, w asserted
        assert statement.count("IS DISTINCT FROM") == 1, statement
        expected = None if then == "discard" else b"ours after b'1'"
        with ours.read() as r:
            assert r.get("a", b"x") == expected
        # another writer changes x (or creates it again): ours runs on what it knew, fails
        other.run_write(lambda t: t.put("a", b"x", b"other's"))
        seen.clear()
        ours.run_write(commit)
        assert ours.stale == 1
        assert seen == [expected, b"other's"]
        with ours.read() as r:
            want = None if then == "discard" else b'ours after b"other\'s"'
            assert r.get("a", b"x") == want
            assert r.get("a", b"w") == b"w"
    finally:
        ours.close()
        other.close()


def test_a_compare_and_set_of_rows_in_several_tables_counts_each(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """Rows compared and set in two tables, one of them changed by another writer: the count
    of that table's UPDATE fails the statement; the run again sets both."""
    ours = _open(pg_schemas, tmp_path)
    other = _open(pg_schemas, tmp_path)
    try:
        ours.run_write(
            lambda t: (
                t.append("log", b"\x01", b"f1"),
                t.put_many("a", [(b"a1", b"1"), (b"a2", b"2")]),
                t.put_many("b", [(b"b1", b"1"), (b"b2", b"2")]),
            )
        )

        def commit(txn: WriteTxn) -> None:
            for table, keys in (("a", (b"a1", b"a2")), ("b", (b"b1", b"b2"))):
                for k in keys:
                    v = txn.get(table, k)
                    assert v is not None
                    txn.put(table, k, v + b"+")

        ours.run_write(commit)
        assert ours.stale == 0
        other.run_write(lambda t: t.put("b", b"b2", b"9"))
        ours.run_write(commit)
        assert ours.stale == 1
        with ours.read() as r:
            assert list(r.scan("a")) == [(b"a1", b"1++"), (b"a2", b"2++")]
            assert list(r.scan("b")) == [(b"b1", b"1++"), (b"b2", b"9+")]
    finally:
        ours.close()
        other.close()


@pytest.mark.parametrize("how", ["put", "put_many"])
def test_a_key_written_unread_and_unknown_is_inserted_and_a_row_there_reruns(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A key the transaction writes without reading it, that neither it nor its process knows
    of (a LangGraph step's new stream index, blob, read and write rows): a plain INSERT, no
    upsert (issue #24: no speculative insertion and its confirmation record per row). A row
    another writer put there fails it: nothing of the attempt commits and it runs again,
    upserting, and the value written is this transaction's; a key known to hold a value is
    upserted."""
    ours = _open(pg_schemas, tmp_path)
    other = _open(pg_schemas, tmp_path)
    try:
        ours.run_write(lambda t: (t.append("log", b"\x01", b"f1"), t.put("a", b"x", b"1")))

        def write(keys: list[bytes], value: bytes) -> Any:
            def fn(txn: WriteTxn) -> None:
                if how == "put":
                    for k in keys:
                        txn.put("b", k, value)
                else:
                    txn.put_many("b", [(k, value) for k in keys])

            return fn

        keys = [b"n1", b"n2"]
        sent = _statements(ours, write(keys, b"ours"), monkeypatch)
        assert ours.stale == 0
        assert len(sent) == 5, sent  # BEGIN, the lock, one statement, COMMIT, the flush
        assert "ON CONFLICT" not in sent[2], sent[2]
        # known now to hold a value: upserted (a plain INSERT would fail on it)
        sent = _statements(ours, write(keys, b"again"), monkeypatch)
        assert ours.stale == 0
        assert "ON CONFLICT" in sent[2], sent[2]
        other.run_write(lambda t: t.put("b", b"n3", b"other's"))
        ours.run_write(write([b"n3", b"n4"], b"ours over"))
        assert ours.stale == 1
        with ours.read() as r:
            assert list(r.scan("b")) == [
                (b"n1", b"again"),
                (b"n2", b"again"),
                (b"n3", b"ours over"),
                (b"n4", b"ours over"),
            ]
            assert r.count("log") == 1
    finally:
        ours.close()
        other.close()


def test_a_large_put_many_is_checked_noted_and_assumed_as_row_by_row(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put_many of ``BULK_ROWS_MIN`` rows or more (an instance batch) is checked and noted
    in passes over the whole batch: the same keys refused with the same errors and nothing
    written, the last value of a repeated key kept, the transaction's greatest key known, new
    keys inserted plainly and known ones upserted, as row by row."""
    from backends.postgres import BULK_ROWS_MIN  # noqa: PLC0415
    from eventlog.errors import CheckpointError  # noqa: PLC0415

    n = BULK_ROWS_MIN * 2
    keys = [b"k%04d" % i for i in range(n)]
    backend = _open(pg_schemas, tmp_path)
    try:
        backend.run_write(lambda t: t.append("log", b"\x01", b"f1"))
        greatest: list[bytes | None] = []

        def write(value: bytes) -> Any:
            def fn(txn: WriteTxn) -> None:
                txn.last_key("b")  # (now followed by the transaction's own writes)
                txn.put_many("b", [*[(k, value) for k in keys], (keys[3], value + b"!")])
                greatest.append(txn.last_key("b"))

            return fn

        def writes_of_b(sent: list[str]) -> str:
            (statement,) = [x for x in sent if '"b" (k, v)' in x]
            return statement

        sent = _statements(backend, write(b"one"), monkeypatch)
        assert backend.stale == 0
        assert greatest == [keys[-1]]
        assert "ON CONFLICT" not in writes_of_b(sent)  # new keys: a plain INSERT
        sent = _statements(backend, write(b"two"), monkeypatch)
        assert backend.stale == 0
        assert greatest == [keys[-1]] * 2
        assert "ON CONFLICT" in writes_of_b(sent)  # known to hold values: upserted
        for bad, says in ((b"", "non-empty bytes"), (b"x" * 512, "exceeds"), ("str", "bytes")):

            def refused(txn: WriteTxn, bad: Any = bad) -> None:
                txn.put_many("b", [(k, b"bad") for k in keys] + [(bad, b"bad")])

            with pytest.raises(CheckpointError, match=says):
                backend.run_write(refused)
        with backend.read() as r:
            got = dict(r.scan("b"))
        assert got == {**dict.fromkeys(keys, b"two"), keys[3]: b"two!"}
    finally:
        backend.close()
