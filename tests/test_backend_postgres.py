"""The PostgreSQL backend against the shared backend contract, plus what only it has.

Runs against the machine's real server (see ``pg_schemas``); each test works in schemas of its
own, dropped afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_schemas import PgSchemas

from backends.base import RetryableWrite, WriteTxn
from backends.postgres import PostgresBackend, _PgRead
from backends.testing import BackendContract
from eventlog.errors import CheckpointError, CommitOutcomeUnknown

TABLES = ("a", "b")


class TestPostgresBackend(BackendContract):
    schemas: PgSchemas

    @pytest.fixture(autouse=True)
    def _fresh_schemas(self, pg_schemas: PgSchemas) -> None:
        self.schemas = pg_schemas

    def make_backend(self, tmp_path: Path, **kw: Any) -> PostgresBackend:
        kw.setdefault("tables", TABLES)
        return PostgresBackend(self.schemas.url(tmp_path), **kw)

    def test_a_range_assumed_empty_that_holds_a_row_is_read_again(self, tmp_path: Path) -> None:
        """A bounded existence check in a transaction that runs on what the process knows is
        answered "empty" without a round trip; a row there fails the commit (nothing of it is
        written) and run_write runs it again reading for real (the example hypothesis found
        for test_agrees_with_dict_model)."""
        backend = self.make_backend(tmp_path)
        try:
            with backend.write() as w:
                w.put("a", b"\x00\x00", b"v")
                w.append("b", b"\x01", b"x")  # a last key looked up: the next one assumes
            seen: list[list[tuple[bytes, bytes]]] = []

            def check(txn: WriteTxn) -> list[tuple[bytes, bytes]]:
                seen.append(list(txn.scan("a", b"", b"\x00\x00\x00", limit=1)))
                txn.put("b", b"k%d" % len(seen), seen[-1][0][1] if seen[-1] else b"none")
                return seen[-1]

            assert backend.run_write(check) == [(b"\x00\x00", b"v")]
            assert seen == [[], [(b"\x00\x00", b"v")]]  # assumed empty, then read
            with backend.read() as r:  # only the attempt that read the truth committed
                assert list(r.scan("b", b"k")) == [(b"k%d" % len(seen), b"v")]
        finally:
            backend.close()

    def test_a_put_over_an_appended_row_is_an_upsert_not_an_assumed_insert(
        self, tmp_path: Path
    ) -> None:
        """Rows of a table appended to are not kept in what the process knows, so a put of a
        key there cannot be assumed new: a plain INSERT of it failed at the next read
        (UniqueViolation) instead of the append's own error (the example hypothesis found for
        test_agrees_with_dict_model)."""
        backend = self.make_backend(tmp_path)
        try:
            with backend.write() as w:
                w.append("a", b"\x00", b"")
            with backend.write() as w:
                w.put("a", b"\x00", b"again")
                with pytest.raises(CheckpointError, match="needs a key greater than the last one"):
                    w.append("a", b"\x00", b"")
                w.put("a", b"\x01", b"new")
            with backend.read() as r:
                assert list(r.scan("a")) == [(b"\x00", b"again"), (b"\x01", b"new")]
        finally:
            backend.close()

    def test_get_many_equals_get_for_each_key(self, tmp_path: Path) -> None:
        backend = self.make_backend(tmp_path)
        try:
            with backend.write() as w:
                for i in range(20):
                    w.put("a", b"k%02d" % i, b"v%d" % i)
                w.put("a", b"\x00", b"")
            keys = [b"k03", b"missing", b"k03", b"\x00", b"k19", b"k" * 600, b"k00"]
            with backend.read() as r:
                assert r.get_many("a", keys) == [r.get("a", k) for k in keys]
                assert r.get_many("a", keys)[:4] == [b"v3", None, b"v3", b""]
                assert r.get_many("b", keys) == [None] * len(keys)
                assert r.get_many("a", []) == []
        finally:
            backend.close()

    def test_bytea_orders_like_lmdb(self, tmp_path: Path) -> None:
        """The server's own comparison of bytea is bytewise unsigned, shorter prefix first."""
        backend = self.make_backend(tmp_path)
        try:
            keys = [b"\xff", b"\x00", b"\x7f", b"\x80", b"a", b"a\x00", b"\x00\xff", b"\x01"]
            with backend.write() as w:
                for k in keys:
                    w.put("a", k, b"")
            with backend.read() as r:
                assert isinstance(r, _PgRead)
                rows = r._q("SELECT k FROM {} ORDER BY k".format(f'"{backend.schema}"."a"'))
            assert [k for (k,) in rows] == sorted(keys)
        finally:
            backend.close()


def _other_txn(url: str, *, commit: bool | None) -> tuple[int, psycopg.Connection[Any]]:
    """A transaction on another connection that wrote nothing: ``(its id, the connection)``;
    committed, rolled back, or (``None``) left open."""
    conn = psycopg.connect(url.split("?", maxsplit=1)[0], autocommit=True)
    conn.execute("BEGIN")
    row = conn.execute("SELECT txid_current()").fetchone()
    assert row is not None
    if commit is True:
        conn.execute("COMMIT")
    elif commit is False:
        conn.execute("ROLLBACK")
    return int(row[0]), conn


def test_a_commit_cut_off_is_resolved_by_its_transaction_id(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    url = pg_schemas.url(tmp_path)
    backend = PostgresBackend(url, tables=TABLES)
    cause = psycopg.OperationalError("the connection was lost during COMMIT")
    try:
        xid, conn = _other_txn(url, commit=True)
        conn.close()
        backend._resolve(xid, cause)  # committed: success, nothing raised
        xid, conn = _other_txn(url, commit=False)
        conn.close()
        with pytest.raises(RetryableWrite, match=r"rolled transaction \d+ back; run it again"):
            backend._resolve(xid, cause)
        backend.run_write(lambda txn: txn.put("a", b"k", b"still writable"))
        # Still in progress every time it asks: the outcome is unknown, so no more writes.
        backend.resolve_budget_s = 0.5  # (45 s by default: past the server's keepalives)
        xid, conn = _other_txn(url, commit=None)
        try:
            with pytest.raises(CommitOutcomeUnknown, match=r"may or may not have committed"):
                backend._resolve(xid, cause)
        finally:
            conn.close()
        with pytest.raises(CommitOutcomeUnknown, match=r"refuses further writes.*reopen"):
            backend.run_write(lambda txn: txn.put("a", b"k", b"refused"))
        with backend.read() as r:
            assert r.get("a", b"k") == b"still writable"
    finally:
        backend.close()


def test_a_connection_killed_mid_transaction_is_retried(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    url = pg_schemas.url(tmp_path)
    backend = PostgresBackend(url, tables=TABLES)
    killer = psycopg.connect(url.split("?")[0], autocommit=True)
    attempts: list[int] = []

    def fn(txn: WriteTxn) -> int:
        attempts.append(len(attempts))
        txn.put("a", b"k%d" % len(attempts), b"v")
        if len(attempts) == 1:
            assert isinstance(txn, _PgRead)
            pid = txn._conn.info.backend_pid
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            txn.put("a", b"after", b"lost")  # the server is gone: this fails
        return len(attempts)

    try:
        assert backend.run_write(fn) == 2
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"k2", b"v")]  # the first attempt left nothing
    finally:
        killer.close()
        backend.close()


def test_a_forked_child_uses_connections_of_its_own(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    """The child writes through new connections; the parent's, which share nothing with the
    child's, keep working afterwards (the child never used or closed them)."""
    import os  # noqa: PLC0415

    backend = PostgresBackend(pg_schemas.url(tmp_path), tables=TABLES)
    try:
        backend.run_write(lambda txn: txn.put("a", b"parent", b"1"))
        with backend.read() as r:
            assert r.get("a", b"parent") == b"1"
        assert backend._wconn is not None
        parent_server_pid = backend._wconn.info.backend_pid
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            code = 1
            try:
                backend.run_write(lambda txn: txn.put("a", b"child", b"2"))
                with backend.read() as r:
                    code = 0 if r.get("a", b"parent") == b"1" else 3
                wconn = backend._wconn
                if wconn is None or wconn.info.backend_pid == parent_server_pid:
                    code = 4  # the child wrote through the parent's session
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        backend.run_write(lambda txn: txn.put("a", b"parent", b"after"))
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"child", b"2"), (b"parent", b"after")]
    finally:
        backend.close()


class _Recorder:
    """Records every statement the backend's connections are given (a spy on ``_connect``)."""

    def __init__(self, backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements: list[str] = []
        connect = backend._connect

        def recording_connect() -> psycopg.Connection[Any]:
            conn = connect()
            execute = conn.execute

            def spy(query: Any, *args: Any, **kw: Any) -> Any:
                self.statements.append(str(query))
                return execute(query, *args, **kw)

            conn.execute = spy  # type: ignore[method-assign]
            return conn

        backend._drop_writer()
        monkeypatch.setattr(backend, "_connect", recording_connect)


@pytest.mark.parametrize("durability", ["fsync", "process"])
def test_writes_commit_under_the_lock_and_flush_after_it(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """Every write transaction commits asynchronously, so the writers' lock (released at its
    COMMIT) is never held through a disk flush; in ``fsync`` mode a synchronous flush
    transaction follows in the same round trip, after the lock is free: the save returns only
    once the WAL holding it is on disk (PostgreSQL flushes the WAL in order)."""
    backend = PostgresBackend(pg_schemas.url(tmp_path), tables=TABLES, durability=durability)
    try:
        rec = _Recorder(backend, monkeypatch)
        backend.run_write(lambda txn: txn.put("a", b"k", b"v"))
        s = rec.statements
        assert s[0].startswith("SET synchronous_commit = off;")  # the write connection's
        assert "pg_stat_activity" in s[1]  # its session, should a cut COMMIT need it
        assert s[2] == "BEGIN ISOLATION LEVEL READ COMMITTED"
        assert "pg_advisory_xact_lock" in s[3]  # queued: sent with the first read or COMMIT
        commit = s.index("COMMIT")
        from backends.postgres import _FLUSH  # noqa: PLC0415

        flush = list(_FLUSH)  # one statement (test_the_flush_puts_the_wal_on_disk)
        if durability == "fsync":
            assert s[commit + 1 :] == flush
        else:
            assert s[commit + 1 :] == []
        conn = backend._writer()
        row = conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None
        assert row[0] == "off"
        # Its server side notices a dead client host within ~30 s, not the kernel's 2 hours.
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()
            for name in ("tcp_keepalives_idle", "tcp_user_timeout")
        }
        assert settings == {"tcp_keepalives_idle": ("10",), "tcp_user_timeout": ("30000",)}
    finally:
        backend.close()


def test_a_flush_cut_off_after_its_commit_is_made_durable_not_retried(
    pg_schemas: PgSchemas,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The connection dies after the COMMIT succeeded, during the flush behind it: the write is
    neither retried (it would save twice) nor reported failed; the backend flushes on a new
    connection and returns. Whether the client read the COMMIT's answer before the connection
    died is a race (on a loaded machine the server often ends the session first): then it
    resolves a cut COMMIT by the transaction's status instead of a cut flush, and the outcome
    must be the same."""
    import backends.postgres as pg  # noqa: PLC0415

    backend = PostgresBackend(pg_schemas.url(tmp_path), tables=TABLES)
    calls: list[int] = []

    def fn(txn: WriteTxn) -> None:
        calls.append(1)
        txn.put("a", b"k%d" % len(calls), b"v")

    try:
        # The pipelined flush kills its own connection; the flush of the resolution (run as
        # one query, _FLUSH_NOW) is left as it is.
        killing = ("BEGIN", "SELECT pg_terminate_backend(pg_backend_pid())", "COMMIT")
        monkeypatch.setattr(pg, "_FLUSH", killing)
        with caplog.at_level("WARNING", logger="ckptlog.postgres"):
            backend.run_write(fn)
        assert calls == [1]  # not retried
        # "flush after the commit of N" (the COMMIT's answer came back) or "commit of N"
        assert "was cut off; it had committed" in caplog.text
        assert "rolled back" not in caplog.text
        monkeypatch.undo()
        backend.run_write(fn)  # still writable
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"k1", b"v"), (b"k2", b"v")]
    finally:
        backend.close()


def test_bytea_arrays_are_sent_in_binary_as_the_server_reads_them(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """The hand-built binary ``bytea[]`` parameter reads back on the server as the items,
    for any bytes (empty, zero bytes, long), bytes-likes, and the empty list."""
    from hypothesis import given, settings  # noqa: PLC0415
    from hypothesis import strategies as st  # noqa: PLC0415

    from backends.postgres import _bytea_array  # noqa: PLC0415

    backend = PostgresBackend(pg_schemas.url(tmp_path), tables=TABLES)
    conn = backend._connect()
    try:

        @settings(max_examples=60, deadline=None)
        @given(st.lists(st.binary(max_size=300), max_size=40), st.booleans())
        def roundtrip(items: list[bytes], as_views: bool) -> None:
            sent: list[Any] = [memoryview(b) if as_views else bytearray(b) for b in items]
            row = conn.execute(
                "SELECT %b::bytea[], cardinality(%b::bytea[])",
                (_bytea_array(sent), _bytea_array(items)),
                binary=True,
            ).fetchone()
            assert row is not None
            assert [bytes(v) for v in row[0]] == items
            assert row[1] == len(items)

        roundtrip()
        big = [b"\x00" * 70_000, b"", b"\xff"]
        row = conn.execute("SELECT %b::bytea[]", (_bytea_array(big),), binary=True).fetchone()
        assert row is not None
        assert [bytes(v) for v in row[0]] == big
    finally:
        conn.close()
        backend.close()


@pytest.mark.parametrize("when", ["between", "during"])
def test_a_cut_connection_leaves_no_psycopg_noise(
    pg_schemas: PgSchemas, tmp_path: Path, caplog: pytest.LogCaptureFixture, when: str
) -> None:
    """A write connection cut between transactions or in the middle of one is retried, and
    psycopg logs nothing about the pipeline it was in (it used to print "error ignored
    terminating <psycopg.Pipeline [BAD]>" to stderr whenever a connection was cut mid-write)."""
    import gc  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    backend = PostgresBackend(url, tables=TABLES)
    killer = psycopg.connect(url.split("?")[0], autocommit=True)
    calls: list[int] = []

    def cut(txn: WriteTxn) -> None:
        assert isinstance(txn, _PgRead)
        killer.execute("SELECT pg_terminate_backend(%s)", (txn._conn.info.backend_pid,))

    def fn(txn: WriteTxn) -> None:
        calls.append(1)
        if when == "during" and len(calls) == 1:
            cut(txn)
        txn.put("a", b"k%d" % len(calls), b"v")  # only writes: the commit meets the cut

    try:
        backend.run_write(lambda txn: txn.put("a", b"k0", b"v"))
        with caplog.at_level("WARNING", logger="psycopg"):
            for _ in range(3):
                if when == "between":
                    assert backend._wconn is not None
                    pid = backend._wconn.info.backend_pid
                    killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
                calls.clear()
                backend.run_write(fn)
                gc.collect()  # a pipeline left open would log as it is finalized
        assert "error ignored" not in caplog.text
        assert not [r for r in caplog.records if r.name.startswith("psycopg")], caplog.text
        with backend.read() as r:
            assert r.count("a") >= 2
    finally:
        killer.close()
        backend.close()


def test_the_flush_puts_the_wal_on_disk(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    """The flush behind an asynchronous COMMIT (one statement in the pipeline, or the simple
    query ``sync()`` and a resolution run) returns only once the WAL up to it is on disk. (A
    transaction that only takes an id commits without flushing, whatever synchronous_commit
    says: the flush used to be that, and returned before the WAL was on disk.)"""
    from backends.postgres import _FLUSH, _FLUSH_NOW  # noqa: PLC0415

    base = pg_schemas.url(tmp_path).split("?")[0]
    conn = psycopg.connect(base, autocommit=True)
    other = psycopg.connect(base, autocommit=True)

    def on_disk(lsn: object) -> bool:
        row = other.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (str(lsn),))
        return bool(row.fetchone()[0])  # type: ignore[index]

    try:
        conn.execute("SET synchronous_commit = off")
        (flush,) = _FLUSH
        probe = flush.replace(
            "pg_current_xact_id()", "pg_current_xact_id(), pg_current_wal_insert_lsn()"
        )
        for _ in range(5):
            with conn.pipeline():
                conn.execute("BEGIN")
                conn.execute("SELECT pg_logical_emit_message(true, 'ckptlog-test', 'x')")
                conn.execute("COMMIT")
                cur = conn.execute(probe)
            row = cur.fetchone()
            assert row is not None
            assert on_disk(row[2])
            lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
            assert lsn is not None
            conn.execute(_FLUSH_NOW)
            assert on_disk(lsn[0])
    finally:
        conn.close()
        other.close()


def test_index_rows_are_inserted_as_new_once_the_server_numbers_the_log(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """Once the server numbers the log (``tails_checked``), ``append_indexed`` inserts its
    index rows as new in every write transaction, one that reads for real too: an index key
    another writer took (a stream tail the writer kept, stale) fails the transaction, which
    ``run_write`` runs again, instead of being overwritten."""
    url = pg_schemas.url(tmp_path)
    backend = PostgresBackend(url, tables=("log", "idx"))
    other = PostgresBackend(url, tables=("log", "idx"))

    def u64(n: int) -> bytes:
        return n.to_bytes(8, "big")

    try:
        assert not backend.tails_checked  # a lone writer: index rows are upserted
        backend.numbering = True  # as after its first stale commit (it met another writer)
        assert backend.tails_checked
        with other.write() as t:
            t.append_indexed("log", [(u64(1), b"x")], "idx", [(b"s1", u64(1))])
        attempts: list[bool] = []

        def fn(txn: WriteTxn) -> None:
            attempts.append(txn.assuming)  # type: ignore[attr-defined]
            last = txn.last_key("log")  # read for real: this process knows nothing yet
            n = int.from_bytes(last or bytes(8), "big") + 1
            seq = b"s1" if len(attempts) == 1 else b"s2"  # a stale kept tail, then the stored
            txn.append_indexed("log", [(u64(n), b"ours")], "idx", [(seq, u64(n))])

        backend.run_write(fn)
        assert attempts == [False, False]
        assert backend.stale == 1
        with backend.read() as r:
            assert list(r.scan("idx")) == [(b"s1", u64(1)), (b"s2", u64(2))]
            assert list(r.scan("log")) == [(u64(1), b"x"), (u64(2), b"ours")]
    finally:
        other.close()
        backend.close()
