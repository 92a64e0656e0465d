"""PostgreSQL backend (psycopg 3): the only module that imports ``psycopg``.

Located by a URL, ``postgresql://[user[:password]@]host[:port]/db?schema=NAME`` (``schema``
defaults to ``ckptlog``; every other query parameter goes to libpq). Each named table is a
table ``schema."name" (k bytea PRIMARY KEY, v bytea NOT NULL)``.

Invariants:
- Keys order bytewise: ``bytea`` compares with ``memcmp`` then length (no collation), exactly
  LMDB's default order (pinned by the shared contract suite). Keys are at most
  ``POSTGRES_KEY_BYTES_MAX`` (511, LMDB's bound: a log copies between engines unchanged).
- Every write transaction (and the one that creates the tables) runs on this process's one
  write connection, under the in-process ``write_lock``, and takes the log's writers' lock
  first: ``pg_advisory_xact_lock(key of the schema)``, released by PostgreSQL only after the
  commit is visible (or the rollback). So writers of all processes and hosts are serialized,
  as LMDB's writer lock serializes them on one host, and the write runs at READ COMMITTED: each
  statement after the lock sees every earlier commit (REPEATABLE READ would have fixed its
  snapshot before waiting for the lock). Commit order is therefore visibility order: a reader
  that sees a commit sees every commit before it (no gap seen and then filled). Inside the
  transaction psycopg's pipeline mode queues statements: ``BEGIN`` and the lock go to the
  server with the first read (with it, what :meth:`ReadTxn.prefetch` asked for), writes with
  the next read or the COMMIT (an error one meets is raised there; the transaction is then
  rolled back). So the lock is held for two round trips of a commit that reads.
- One round trip for a commit whose process knows what it reads (``_Known``: what its own
  write transactions wrote and read as they committed, and each table's greatest key): such a
  transaction answers its reads from it and queues, after the lock, an assertion per read that
  the server holds exactly that (a division by zero when not), then its writes, the COMMIT and
  the flush; all of it goes out at once, the assertions and writes queued between two
  statements it must send as one statement (:mod:`backends.postgres_batch`). Such a
  transaction queues nothing on the connection until it first needs it (a real read): one that
  never does (and appended a row) sends ``BEGIN`` to the flush at its end through libpq's
  pipeline directly (:mod:`backends.postgres_fast`), without psycopg's per-statement work.
  The log's rows are numbered by the server (``WriteTxn.append_indexed``): such a transaction
  puts them after the log's greatest key it knows, asserts nothing about that key, and its
  statement moves them (and the stream index values naming them) after the greatest key it
  finds, read under the lock (:meth:`backends.postgres_batch.Batch.number`); the answer says
  how far (``WriteTxn.moved``). So another writer's commit in between does not make it stale:
  a stream's tail another writer moved still does, by the plain insert of its index row. The
  global seq stays dense and in commit order (the lock orders the commits). A transaction that
  reads something for real asserts the log's end as before (its rows then stay where it put
  them): what it read and what it wrote never mix numberings. Once the server numbers the log
  (``PostgresBackend.numbering``, set by the process's first stale commit), every write
  transaction inserts its stream index rows as new, one that reads for real too, so a stream
  tail the writer kept while other writers appended is checked by the server
  (``Backend.tails_checked``): a stale one fails the commit, which runs again.
  A failed assertion aborts the pipeline: the transaction is rolled back and runs again reading
  for real (:class:`_StaleAssumption`, counted in ``stale``), and the next ones read for real
  for a while (1, 2, 4 ... 64 transactions), so writers that keep meeting each other's
  commits pay a third round trip rarely. A key never seen is assumed absent (it is read in a
  table rows are appended to). Correctness never rests on the guess: every value a
  transaction used was asserted under the lock, in the same transaction.
- A read transaction is ``REPEATABLE READ READ ONLY`` on a pooled connection, its snapshot
  pinned when it begins. Reads stream in keyset chunks (64, 256, ... rows): no server-side
  cursor, so an abandoned iterator costs nothing. A read whose connection is lost before the
  transaction returned anything begins again once on a new connection; later, it raises
  :class:`StorageError` (the caller reads again).
- Every write transaction commits with ``synchronous_commit = off``: visible at once, the
  writers' lock released without waiting for the disk. ``"fsync"`` then runs a flush transaction
  (``_FLUSH``: one statement writing WAL, committed synchronously) in the same round trip, after
  the lock is free: the WAL is flushed in order, so the write is on disk when it returns, and
  the flushes of all writers overlap. It survives a killed client, a crashed server and a power
  loss of the server (given honest disks and ``fsync = on`` there); a reader may see it for the
  moment before its flush (a server crash then loses it; its writer was not yet answered).
  ``"process"`` stops there: it survives a killed client (the server has it) but a crash of the
  server or its machine loses the last commits not yet flushed by the WAL writer (up to 3 x
  ``wal_writer_delay``, 600 ms by default), never a partial one and never an earlier one while
  keeping a later one. :meth:`PostgresBackend.sync` flushes them.
- A write whose connection fails before COMMIT was rolled back by the server: it raises
  :class:`RetryableWrite` (``run_write`` retries it, bounded, with backoff, logged); so does a
  write that cannot set up its connection. Opening retries the schema check likewise. A connection
  lost *during* COMMIT (or during the flush after it) is ambiguous: the backend reconnects and
  asks the server for the transaction's fate by its id (``txid_status``, the id taken in the
  same transaction, known before the COMMIT is sent): committed is success once flushed again,
  aborted is retried, and if it cannot find out it raises
  :class:`CommitOutcomeUnknown` and refuses every later write of this backend (a retry could
  duplicate the batch): reopen the log and read what landed. A one-round-trip commit sends its
  COMMIT before the id comes back; cut off before it did, it is resolved by a row it appended
  (keys appended are new): the backend ends its old session (``pg_terminate_backend`` of its
  process id and start), and once that session is gone, so that nothing of it can still
  commit, the row there with its value means committed, absent means rolled back. Rows the
  server numbered are found through the stream index row the transaction inserted (its key
  is the client's): there, naming a log row that holds the frame sent, means committed, and
  that row's key says where the frames landed (a cut commit of such rows is always resolved
  this way, its id notwithstanding).
- After ``fork`` the child never uses the parent's connections (they share its sockets); it
  opens its own on first use. psycopg never finishes a connection in another process.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from itertools import repeat
from operator import is_
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import Format

from backends.base import (
    Backend,
    Durability,
    ReadTxn,
    RetryableWrite,
    Span,
    WriteTxn,
    check_ascending,
    check_durability,
    current_pid,
    prefix_end,
)
from backends.postgres_batch import (
    BYTEA_ARRAY_OID,
    STATEMENTS_CACHED_MAX,
    Batch,
    ByteaArray,
    bytea_array,
    for_psycopg,
    render,
)
from backends.postgres_fast import RawPipeline
from backends.postgres_fast import error_of as raw_error
from backends.postgres_fast import failed as raw_failed
from backends.postgres_known import Known as _Known
from eventlog.errors import (
    CheckpointError,
    CommitOutcomeUnknown,
    LogClosed,
    NotALog,
    ReadOnlyLog,
    StorageError,
)

log = logging.getLogger("ckptlog.postgres")
T = TypeVar("T")

POSTGRES_KEY_BYTES_MAX = 511
DEFAULT_SCHEMA = "ckptlog"
URL_SCHEMES = ("postgresql", "postgres")
IDLE_READERS_MAX = 4  # pooled read connections kept open between reads
CHUNK_FIRST = 64
CHUNK_MAX = 4096
RESOLVE_ATTEMPTS = 6  # reconnections tried at least to learn an ambiguous commit's fate,
RESOLVE_BUDGET_S = 45.0  # and for this long: past the server's noticing a dead client (below)
# The write session's server side: a client host that died (power, network) mid-transaction is
# noticed within ~25 s (keepalives) or 30 s of unacknowledged data, and its session ends,
# releasing the writers' lock; the kernel's defaults would hold it for over two hours.
SERVER_KEEPALIVES = (
    "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; "
    "SET tcp_keepalives_count = 3; SET tcp_user_timeout = 30000"
)
OPEN_ATTEMPTS = 5  # opens tried when the connection drops while checking the schema
RETRY_SLEEP_S = 0.05  # first backoff between write attempts; doubles, capped at 1 s
# After a transaction's assumptions failed, this many transactions at most read for real
# before one runs on assumptions again (doubling from 1 while they keep failing).
ASSUME_BACKOFF_MAX = 64
_GRAVEYARD: list[Any] = []  # a forked child's inherited connections: never used, never finished


class _ByteaArrayDumper(Dumper):
    format = Format.BINARY
    oid = BYTEA_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


_bytea_array = bytea_array


def is_postgres_url(location: object) -> bool:
    return isinstance(location, str) and location.split("://", 1)[0] in URL_SCHEMES


def split_url(url: str) -> tuple[str, str]:
    """``(libpq conninfo URL without the schema parameter, schema)``."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = DEFAULT_SCHEMA
    rest = []
    for k, v in query:
        if k == "schema":
            schema = v
        else:
            rest.append((k, v))
    if not schema:
        raise CheckpointError(f"{redact(url)!r}: the schema parameter is empty; name a schema")
    return urlunsplit(parts._replace(query=urlencode(rest))), schema


def redact(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def _lock_key(schema: str) -> int:
    digest = hashlib.blake2b(f"ckptlog writers:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _lost(e: BaseException | None) -> bool:
    """The connection failed (closed, reset, server gone), as opposed to a statement error."""
    return isinstance(e, psycopg.OperationalError) and not isinstance(
        e, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable
    )


def _transient(e: BaseException) -> bool:
    return isinstance(
        e, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected
    ) or _lost(e)


def _refused_hint(text: str) -> str | None:
    """What to fix when a connection attempt was refused for good (``None``: unreachable)."""
    if "password authentication failed" in text or "no password supplied" in text:
        return "check the user and password in the URL"
    if "role" in text and "does not exist" in text:
        return "check the user name in the URL (or create that role on the server)"
    if "does not exist" in text:
        return "create the database first, or fix its name in the URL"
    return None


def _storage_error(e: psycopg.Error, where: str) -> StorageError:
    if isinstance(e, psycopg.errors.DiskFull):
        import errno  # noqa: PLC0415 - only on this path

        return StorageError(errno.ENOSPC, f"{where}: the database server's disk is full ({e})")
    return StorageError(
        f"{where}: PostgreSQL error {type(e).__name__}: {' '.join(str(e).split())}; check that the "
        "server is up and reachable, then try again"
    )


class _Sql:
    """The statements of one table, rendered once."""

    __slots__ = (
        "count",
        "delete",
        "delete_range",
        "get",
        "get_many",
        "ident",
        "last",
        "linked",
        "scans",
    )

    def __init__(self, schema: str, table: str) -> None:
        t = sql.Identifier(schema, table)
        self.ident = t.as_string(None)

        def r(q: str) -> str:
            return sql.SQL(q).format(t=t).as_string(None)

        self.get = r("SELECT v FROM {t} WHERE k = %b")
        self.get_many = r("SELECT k, v FROM {t} WHERE k = ANY(%b::bytea[])")
        # get_many_linked: the rows asked for, then those the link row names, in the one
        # statement (its value: a zero byte, then keys of a width, each stored after a prefix).
        # The named keys are built first, as an array the primary key is then probed with: a
        # join on them was planned as a scan of the whole table (the planner counts 1,000 rows
        # for generate_series), so a read grew with the rows the table holds (issue #27).
        self.linked = r(
            "SELECT k, v, false FROM {t} WHERE k = ANY(%b::bytea[]) UNION ALL "
            "SELECT d.k, d.v, true FROM {t} AS d WHERE d.k = ANY(ARRAY("
            "SELECT %b::bytea || substring(r.v FROM i FOR %b::int) FROM {t} AS r "
            "CROSS JOIN LATERAL generate_series(2, length(r.v) - %b::int + 1, %b::int) AS i "
            "WHERE r.k = %b AND substring(r.v FROM 1 FOR 1) = '\\x00'::bytea)) "
            "AND NOT d.k = ANY(%b::bytea[])"  # rows the caller holds: never detoasted or sent
        )
        self.last = r("SELECT k FROM {t} ORDER BY k DESC LIMIT 1")
        self.count = r("SELECT count(*) FROM {t}")
        self.delete = r("DELETE FROM {t} WHERE k = %b")
        self.delete_range = r("DELETE FROM {t} WHERE k >= %b AND (%b::bytea IS NULL OR k < %b)")
        # (has start, has stop, reverse) -> scan statement taking (bounds..., limit)
        self.scans: dict[tuple[bool, bool, bool], str] = {}
        for lo in (False, True):
            for hi in (False, True):
                for rev in (False, True):
                    where = [c for c, on in (("k >= %b", lo), ("k < %b", hi)) if on]
                    cond = (" WHERE " + " AND ".join(where)) if where else ""
                    order = "DESC" if rev else "ASC"
                    self.scans[lo, hi, rev] = r(
                        f"SELECT k, v FROM {{t}}{cond} ORDER BY k {order} LIMIT %b"
                    )


def _ddl(schema: str, table: str) -> list[sql.Composed]:
    t = sql.Identifier(schema, table)
    return [
        sql.SQL("CREATE TABLE IF NOT EXISTS {t} (k bytea PRIMARY KEY, v bytea NOT NULL)").format(
            t=t
        ),
        # Frames are compressed already (zstd): no second compression by TOAST.
        sql.SQL("ALTER TABLE {t} ALTER COLUMN v SET STORAGE EXTERNAL").format(t=t),
    ]


def _indexed_sql(i: _Sql, t: _Sql) -> str:
    """:meth:`_PgRead.get_indexed`'s statement (the index row, its named row joined to it)."""
    return (
        f"SELECT i.v, t.v FROM {i.ident} AS i LEFT JOIN {t.ident} AS t ON t.k = i.v WHERE i.k = %b"
    )


_SPANS: dict[tuple[str, ...], str] = {}


def _spans_sql(n: _Sql, tables: tuple[_Sql, ...]) -> str:
    """:meth:`_PgRead.get_named_spans`'s statement for its tables (rendered once): the row
    naming P tagged -1, each span's rows tagged with its index."""
    key = (n.ident, *(t.ident for t in tables))
    got = _SPANS.get(key)
    if got is None:
        parts = [
            f"WITH p AS (SELECT v FROM {n.ident} WHERE k = %b) SELECT -1, NULL::bytea, p.v FROM p"
        ]
        parts += [
            f"SELECT {i}, t.k, t.v FROM {t.ident} AS t, p "
            "WHERE t.k >= %b::bytea || p.v || %b::bytea AND t.k < %b::bytea || p.v || %b::bytea"
            for i, t in enumerate(tables)
        ]
        got = _SPANS[key] = " UNION ALL ".join(parts)
    return got


class _PgRead(ReadTxn):
    _what = "reading"

    def __init__(
        self, conn: psycopg.Connection[Any], owner: PostgresBackend, scope: _ReadScope | None = None
    ) -> None:
        self._conn = conn
        self._owner = owner
        self.scope = scope

    def _sql(self, table: str) -> _Sql | None:
        try:
            return self._owner._sql[table]
        except KeyError:
            raise CheckpointError(
                f"table {table!r} is not one of this backend's tables "
                f"{sorted(self._owner._sql)}; declare it when opening"
            ) from None

    def _q(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            cur = self._conn.execute(query, params, binary=True)
            rows = cur.fetchall()
        except psycopg.Error as e:
            if self._what == "writing":
                raise self._owner._failed(e, self._what) from e
            if not (self.scope is not None and self.scope.fresh and _lost(e)):
                raise _storage_error(e, f"reading {self._owner.location!r}") from e
            # Lost before this transaction returned anything: a new one, begun now, is as good.
            log.warning("%s: read connection lost (%s); reading again", self._owner.location, e)
            self._conn = self.scope.begin_again()
            rows = self._q(query, params)
        if self.scope is not None:
            self.scope.fresh = False
        return rows

    def _readable(self, table: str) -> _Sql | None:
        s = self._sql(table)
        return s if table in self._owner._present else None

    def get(self, table: str, key: bytes) -> bytes | None:
        s = self._readable(table)
        if s is None or not isinstance(key, bytes) or not key:
            return None
        if len(key) > POSTGRES_KEY_BYTES_MAX:
            return None
        rows = self._q(s.get, (key,))
        return rows[0][0] if rows else None

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        s = self._readable(table)
        if s is None or not keys:
            return [None] * len(keys)
        if len(keys) == 1:
            return [self.get(table, keys[0])]
        ok = [k for k in keys if isinstance(k, bytes) and 0 < len(k) <= POSTGRES_KEY_BYTES_MAX]
        found: dict[bytes, bytes] = dict(self._q(s.get_many, (_bytea_array(ok),)))
        return [found.get(k) for k in keys]

    def get_many_linked(
        self,
        table: str,
        keys: list[bytes],
        link: bytes,
        prefix: bytes,
        width: int,
        skip: Collection[bytes] = (),
    ) -> tuple[list[bytes | None], list[tuple[bytes, bytes]]]:
        """One statement: the lookup of the rows ``link`` names is joined to it."""
        s = self._readable(table)
        if s is None:
            return [None] * len(keys), []
        ok = [k for k in keys if isinstance(k, bytes) and 0 < len(k) <= POSTGRES_KEY_BYTES_MAX]
        args = (_bytea_array(ok), prefix, width, width, width, link, _bytea_array(list(skip)))
        rows = self._q(s.linked, args)
        found = {bytes(k): v for k, v, named in rows if not named}
        return [found.get(k) for k in keys], [(bytes(k), v) for k, v, named in rows if named]

    def get_named_spans(
        self, names: str, name: bytes, spans: Sequence[Span]
    ) -> tuple[bytes | None, list[list[tuple[bytes, bytes]]]]:
        """One statement: the row ``name`` of ``names`` (its value P) and every span's rows,
        joined to it (a span over a table the log lacks is empty)."""
        n = self._readable(names)
        if n is None or not isinstance(name, bytes) or not 0 < len(name) <= POSTGRES_KEY_BYTES_MAX:
            return None, []
        present: list[tuple[int, _Sql]] = []
        params: list[bytes] = [name]
        for i, (table, lead, start, stop) in enumerate(spans):
            t = self._readable(table)
            if t is not None:
                present.append((i, t))
                params += (lead, start, lead, stop)
        read = [i for i, _ in present]
        got = self._q(_spans_sql(n, tuple(t for _, t in present)), tuple(params))
        p = next((bytes(v) for tag, _, v in got if tag == -1), None)
        if p is None:
            return None, []
        out: list[list[tuple[bytes, bytes]]] = [[] for _ in spans]
        for tag, k, v in got:
            if tag >= 0:
                out[read[tag]].append((bytes(k), v))
        for rows in out:
            rows.sort()
        return p, out

    def get_indexed(self, index: str, key: bytes, table: str) -> tuple[bytes | None, bytes | None]:
        """One statement: the row ``key`` of ``index`` and the row of ``table`` it names."""
        i, t = self._readable(index), self._readable(table)
        if i is None or t is None or not isinstance(key, bytes) or not key:
            return super().get_indexed(index, key, table)
        if len(key) > POSTGRES_KEY_BYTES_MAX:
            return None, None
        rows = self._q(_indexed_sql(i, t), (key,))
        return (bytes(rows[0][0]), rows[0][1]) if rows else (None, None)

    def get_named(
        self, names: str, name: bytes, table: str, suffix: bytes, ranged: str, tail: bytes
    ) -> tuple[bytes | None, bytes | None, list[tuple[bytes, bytes]]]:
        """One statement (:meth:`get_named_spans`): the row ``name`` of ``names`` (its value
        P), the row P + ``suffix`` of ``table`` and the rows of ``ranged`` under P + ``tail``."""
        end = prefix_end(tail)
        if end is None:
            return super().get_named(names, name, table, suffix, ranged, tail)
        p, got = self.get_named_spans(
            names, name, ((table, b"", suffix, suffix + b"\x00"), (ranged, b"", tail, end))
        )
        if p is None:
            return None, None, []
        return p, got[0][0][1] if got[0] else None, got[1]

    def scan(
        self,
        table: str,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        s = self._readable(table)
        if s is None or (limit is not None and limit <= 0):
            return iter(())
        if start is not None and stop is not None and start >= stop:
            return iter(())
        return self._scan(s, start, stop, reverse, limit)

    def _scan(
        self, s: _Sql, start: bytes | None, stop: bytes | None, reverse: bool, limit: int | None
    ) -> Iterator[tuple[bytes, bytes]]:
        chunk = CHUNK_FIRST
        left = limit
        while True:
            n = chunk if left is None else min(chunk, left)
            params = (*tuple(b for b in (start, stop) if b is not None), n)
            rows = self._q(s.scans[start is not None, stop is not None, reverse], params)
            yield from rows
            if len(rows) < n:
                return
            if left is not None:
                left -= n
                if left <= 0:
                    return
            last = rows[-1][0]
            if reverse:
                stop = last
            else:
                start = last + b"\x00"  # the least key above ``last``
            chunk = min(chunk * 4, CHUNK_MAX)

    def prefix_rows(self, table: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        s = self._readable(table)
        if s is None:
            return []
        stop = prefix_end(prefix)
        key = (bool(prefix), stop is not None, False)
        params = tuple(b for b in (prefix or None, stop) if b is not None)
        query = s.scans[key].replace("LIMIT %b", "")
        return [(k, v) for k, v in self._q(query, params)]

    def last_key(self, table: str) -> bytes | None:
        s = self._readable(table)
        if s is None:
            return None
        rows = self._q(s.last)
        return rows[0][0] if rows else None

    def count(self, table: str) -> int:
        s = self._readable(table)
        if s is None:
            return 0
        n: int = self._q(s.count)[0][0]
        return n


class _StaleAssumption(RetryableWrite):
    """A transaction that ran on what this process last knew (:class:`_Known`) found the
    server had changed: it was rolled back and runs again, reading what is stored."""


_ONLY_BYTES: frozenset[type] = frozenset((bytes,))
# From this many rows a put_many checks and notes them in C-speed passes over the batch (an
# instance batch's 256), below it row by row (a LangGraph commit's few): measured per call,
# the passes cost about twice the loop at 2-3 rows and about 0.6x of it at 256.
BULK_ROWS_MIN = 16


def _checked_in_bulk(pairs: list[tuple[bytes, bytes]]) -> dict[bytes, bytes] | None:
    """``pairs`` as one row per key (the last value of a key wins), when every key is
    ``bytes`` of a storable length, the values made ``bytes``; ``None`` when some pair needs
    the check key by key (a bad key, an unhashable one, a bytes subclass, not a pair)."""
    try:
        rows = dict(pairs)
    except (TypeError, ValueError):
        return None
    keys = rows.keys()
    if (
        set(map(type, keys)) != _ONLY_BYTES
        or min(map(len, keys)) < 1
        or max(map(len, keys)) > POSTGRES_KEY_BYTES_MAX
    ):
        return None
    if set(map(type, rows.values())) != _ONLY_BYTES:
        return {k: bytes(v) for k, v in rows.items()}
    return rows


class _PgWrite(_PgRead, WriteTxn):
    _what = "writing"

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        owner: PostgresBackend,
        scope: _WriteScope,
        *,
        assuming: bool = False,
    ) -> None:
        super().__init__(conn, owner)
        self._last: dict[str, bytes | None] = {}  # greatest key per table, once looked up
        self._last_value: dict[str, bytes | None] = {}  # the value of that row, when known
        self._wscope = scope
        # table -> (the queued lookup, its keys, what it found once read); dropped when the
        # transaction writes to the table
        self._pre: dict[str, tuple[Any, set[bytes], dict[bytes, bytes] | None]] = {}
        # Reads answered from what the process knew, their assertions queued (see _Known).
        self.assuming = assuming
        self.assumed = 0
        # What this transaction wrote or read, for _Known once it commits.
        self.seen: dict[tuple[str, bytes], bytes | None] = {}
        self.touched: set[str] = set()  # tables written
        self.pruned: list[str] = []  # tables a range was deleted from
        # One row this transaction appended: if its COMMIT is cut off, the row tells whether
        # it committed (_WriteScope.__exit__); see _Witness.
        self.witness: _Witness | None = None
        # Assertions and writes queued since the last statement: sent as one (_send).
        self._batch = Batch()
        # Greatest keys answered from what is known, their assertions not queued yet: queued
        # with the next statement, except the final one's of a table the server numbers.
        self._unchecked: dict[str, bytes | None] = {}
        self.read_for_real = False  # a statement was sent for its answer
        # (table, index) whose rows the server numbers (append_indexed), and the index rows
        # this transaction wrote there (key -> the table's key as sent)
        self.numbering: tuple[str, str] | None = None
        self._refs: dict[bytes, bytes] = {}
        # The final statement numbers rows on the server with no assertion of the table's end:
        # how far it moved them is learned from its answer (or, cut off, from the witness).
        self.numbered_final = False
        self.moved_by: int | None = None
        # Index rows inserted as new in a transaction that reads for real (_insert_refs): a
        # key another writer took fails it as a failed assumption does.
        self.inserted_refs = False

    @property
    def _conn(self) -> psycopg.Connection[Any]:
        """The write connection, the transaction's ``BEGIN`` and lock queued on it first
        (:meth:`_WriteScope.begin`)."""
        scope = self._wscope
        if not scope.begun:
            scope.begin()
        return self._wc

    @_conn.setter
    def _conn(self, conn: psycopg.Connection[Any]) -> None:
        self._wc = conn

    def _expect(self, table: str, key: bytes, value: bytes | None) -> None:
        self._batch.expect(table, key, value)
        self.assumed += 1

    def take_batch(self, *, final: bool = False) -> Batch:
        """What :attr:`_batch` holds, with the assertions of the greatest keys assumed
        (:meth:`_assumed_last`); a new batch in its place. The ``final`` statement of a
        transaction that read nothing for real leaves out that of the table whose rows the
        server numbers (:meth:`append_indexed`): the server puts them after its greatest key,
        whatever it is, and the statement answers how far they moved."""
        batch = self._batch
        if self._unchecked:
            numbered = batch.numbered[0] if batch.numbered else None
            for table, key in self._unchecked.items():
                if final and not self.read_for_real and table == numbered:
                    self.numbered_final = True
                    continue
                batch.expect_last(table, key)
            self._unchecked.clear()
        if batch:
            self._batch = Batch()
        return batch

    def _send(self, *, final: bool = False) -> Any:
        """Queue what :attr:`_batch` holds as one statement in the pipeline (no round trip;
        an error it meets is raised with the next read or the COMMIT); returns its cursor
        (``None``: nothing to send). Raises :class:`psycopg.Error`."""
        batch = self.take_batch(final=final)
        if not batch:
            return None
        text = self._owner._batch_text(batch)
        return self._conn.execute(text, for_psycopg(text, batch.params()), binary=True)

    def _flush(self) -> None:
        """:meth:`_send`, its error as the backend's."""
        try:
            self._send()
        except psycopg.Error as e:
            raise self._owner._failed(e, "writing") from e

    def scan(
        self,
        table: str,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """A bounded existence check (``limit=1`` between two keys) in a transaction that runs
        on assumptions is assumed empty when this transaction wrote nothing there: an
        assertion that the range holds no row is queued (no round trip; a row there makes the
        transaction run again reading for real). Any other scan reads."""
        if (
            self.assuming
            and limit == 1
            and not reverse
            and start is not None
            and stop is not None
            and start < stop
            and table not in self.pruned
            and table not in self.touched
            and table in self._owner._present
            and table not in self._owner._known.appended
        ):
            self._batch.expect_none(table, start, stop)
            self.assumed += 1
            return iter(())
        return super().scan(table, start, stop, reverse=reverse, limit=limit)

    def prefetch(self, table: str, keys: list[bytes]) -> None:
        if self.assuming and table in self._owner._sql:
            return  # get() answers from what is known, or assumes absent
        s = self._readable(table)  # raises for a table not declared
        if s is None:
            return
        ok = [k for k in keys if isinstance(k, bytes) and 0 < len(k) <= POSTGRES_KEY_BYTES_MAX]
        if not ok:
            return
        self.read_for_real = True
        try:
            # queued, no round trip
            self._send()
            cur = self._conn.execute(s.get_many, (_bytea_array(ok),), binary=True)
        except psycopg.Error as e:
            raise self._owner._failed(e, "writing") from e
        self._pre[table] = (cur, set(ok), None)

    def get(self, table: str, key: bytes) -> bytes | None:
        if (
            self.assuming
            and table not in self.pruned
            and table in self._owner._present
            and isinstance(key, bytes)
            and 0 < len(key) <= POSTGRES_KEY_BYTES_MAX
        ):
            k = (table, key)
            if k in self.seen:
                return self.seen[k]  # written (or asserted) in this transaction
            known, value = self._owner._known.get(table, key)
            # Unknown: assumed absent, except in a table rows are appended to (a log: its
            # keys are read once they exist) and a row known to hold a value too big to
            # keep, which are read.
            if known or (
                table not in self._owner._known.appended and k not in self._owner._known.opaque
            ):
                self._expect(table, key, value)
                self.seen[k] = value
                return value
        pre = self._pre.get(table)
        if pre is None or key not in pre[1]:
            value = super().get(table, key)
            if isinstance(key, bytes) and key:
                self.seen.setdefault((table, key), value)
            return value
        cur, keys, found = pre
        if found is None:
            try:
                found = {bytes(k): v for k, v in cur.fetchall()}
            except psycopg.Error as e:
                raise self._owner._failed(e, "writing") from e
            self._pre[table] = (cur, keys, found)
            for asked in keys:
                self.seen.setdefault((table, asked), found.get(asked))
            if self._wscope.lock is not None:
                self._wscope.locked()
        return found.get(key)

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        self._pre.pop(table, None)
        return super().get_many(table, keys)

    def _q(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        self.read_for_real = True
        self._flush()
        rows = super()._q(query, params)
        if self._wscope.lock is not None:  # the first read brought the lock's result too
            self._wscope.locked()
        return rows

    def _x(self, query: str, params: tuple[Any, ...]) -> None:
        """Queue a write in the pipeline: sent with the next read or the COMMIT, no round trip
        of its own (an error it meets is raised there), after what :attr:`_batch` holds."""
        try:
            self._send()
            self._conn.execute(query, params, binary=True)
        except psycopg.Error as e:
            raise self._owner._failed(e, "writing") from e

    def _n(self, query: str, params: tuple[Any, ...]) -> int:
        """Run a write now and return how many rows it changed."""
        self.read_for_real = True
        try:
            self._send()
            cur = self._conn.execute(query, params, binary=True)
            pipeline = self._conn._pipeline
            if pipeline is not None:
                pipeline.sync()
            n = cur.rowcount
            if self._wscope.lock is not None:
                self._wscope.locked()
            return n
        except psycopg.Error as e:
            raise self._owner._failed(e, "writing") from e

    @staticmethod
    def _check_key(key: bytes) -> None:
        if not isinstance(key, bytes) or not key:
            raise CheckpointError(f"backend keys must be non-empty bytes, got {key!r}")
        if len(key) > POSTGRES_KEY_BYTES_MAX:
            raise CheckpointError(
                f"key of {len(key)} bytes exceeds the PostgreSQL backend's limit of "
                f"{POSTGRES_KEY_BYTES_MAX} bytes"
            )

    def _saw(self, table: str, key: bytes, value: bytes) -> None:
        self.touched.add(table)
        if table in self._last:
            last = self._last[table]
            if last is None or key >= last:
                self._last[table] = key
                self._last_value[table] = value

    def _assumed_last(self, table: str) -> bool:
        """Take the table's greatest key from what is known (its assertion queued), when
        this transaction runs on assumptions and it is known."""
        if (
            not self.assuming
            or table in self._last
            or table in self.touched  # its greatest key may be one this transaction wrote
            or table not in self._owner._present
        ):
            return False
        if table not in self._owner._known.last:
            return False
        known = self._owner._known.last[table]
        key, value = (None, None) if known is None else known
        self._unchecked[table] = key  # asserted with the next statement (take_batch)
        self.assumed += 1
        self._last[table] = key
        self._last_value[table] = value
        return True

    def last_key(self, table: str) -> bytes | None:
        if table not in self._last and not self._assumed_last(table):
            # kept: only this transaction writes while it runs
            self._last[table] = super().last_key(table)
            self._last_value[table] = None
        return self._last[table]

    def last_item(self, table: str) -> tuple[bytes, bytes] | None:
        s = self._readable(table)
        if s is None:
            return None
        if self._assumed_last(table) or (table in self._last and self._last[table] is None):
            key, value = self._last[table], self._last_value.get(table)
            if key is None:
                return None
            if value is not None:
                return key, value
        rows = self._q(s.scans[False, False, True], (1,))
        self._last[table] = rows[0][0] if rows else None
        self._last_value[table] = rows[0][1] if rows else None
        return (rows[0][0], rows[0][1]) if rows else None

    def _last_known(self, table: str) -> bytes | None:
        return self.last_key(table)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if self._pre:
            self._pre.pop(table, None)  # a prefetched value may be stale now
        if type(key) is not bytes or not 0 < len(key) <= POSTGRES_KEY_BYTES_MAX:
            self._check_key(key)
        if table not in self._owner._sql:
            self._sql(table)  # raises
        if type(value) is not bytes:
            value = bytes(value)
        if self._new_key(table, key):
            # as put_many's: a plain INSERT (no speculative insertion, no tuple lock, no
            # confirmation record); a key there after all fails it and the transaction runs
            # again with the upsert
            self._batch.insert(table, key, value)
            self.assumed += 1
        else:
            self._batch.write(table, {key: value}, new=False)
        self.seen[table, key] = value
        self._saw(table, key, value)

    def put_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        self._pre.pop(table, None)  # a prefetched value may be stale now
        if len(pairs) < 2:
            for k, v in pairs:
                self.put(table, k, v)
            return
        last_wins = self._rows(table, pairs)
        # A plain INSERT when no key is known: as fast as binary COPY (which pipeline mode
        # cannot send), where ON CONFLICT costs 2-3x; a key that exists after all fails it
        # (unique_violation) and the transaction runs again with the upsert (_StaleAssumption).
        new = self._all_new(table, last_wins)
        self._queue(table, last_wins, new=new)
        if new:
            self.assumed += 1

    def _rows(self, table: str, pairs: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
        """``pairs`` checked, as one row per key (one INSERT may not change a row twice):
        from ``BULK_ROWS_MIN`` pairs in C-speed passes (:func:`_checked_in_bulk`), else (or
        when those refuse them) key by key, the first bad key named by :meth:`_check_key`."""
        rows = _checked_in_bulk(pairs) if len(pairs) >= BULK_ROWS_MIN else None
        if rows is None:
            for k, _ in pairs:
                self._check_key(k)
            rows = {k: bytes(v) for k, v in pairs}
        self._sql(table)
        return rows

    def _queue(self, table: str, rows: dict[bytes, bytes], *, new: bool) -> None:
        """Queue ``rows`` (``new``: as a plain INSERT, else an upsert), seen by this
        transaction and by what the process knows once it commits."""
        self._batch.write(table, rows, new=new)
        if len(rows) < BULK_ROWS_MIN:
            for k, v in rows.items():
                self.seen[table, k] = v
                self._saw(table, k, v)
            return
        self.seen.update(zip(zip(repeat(table), rows), rows.values(), strict=False))
        top = max(rows)  # what _saw of each row in turn leaves: the greatest key
        self._saw(table, top, rows[top])

    def _all_new(self, table: str, rows: dict[bytes, bytes]) -> bool:
        """Whether this transaction assumes none of ``rows``' keys exists (none known to):
        :meth:`_new_key` of each (from ``BULK_ROWS_MIN`` rows, in C-speed passes)."""
        if len(rows) < BULK_ROWS_MIN:
            return all(self._new_key(table, k) for k in rows)
        if not self._may_assume_absent(table):
            return False
        known = self._owner._known
        keys = list(zip(repeat(table), rows))
        seen = self.seen
        return (
            not any(map(seen.__contains__, keys))
            and all(map(is_, map(known.rows.get, keys), repeat(None)))
            and not (known.opaque and any(map(known.opaque.__contains__, keys)))
        )

    def _new_key(self, table: str, key: bytes) -> bool:
        """Whether this transaction assumes ``key`` absent from ``table``: it runs on what is
        known, and neither it (a write, a deletion, an assertion) nor what is known holds a
        value of the key. Such a key is in none of the queued batch's writes. A table rows
        are appended to is never assumed: what is known does not keep its rows (as get())."""
        if not self._may_assume_absent(table):
            return False
        k = (table, key)
        if k in self.seen:
            return False  # written, deleted or asserted in this transaction: upsert
        known = self._owner._known
        return known.rows.get(k) is None and k not in known.opaque

    def _may_assume_absent(self, table: str) -> bool:
        """Whether a key of ``table`` may be assumed absent at all (:meth:`_new_key`): this
        transaction runs on what is known, the table is present and not pruned by it, and
        rows are not appended to it."""
        return (
            self.assuming
            and table not in self.pruned
            and table in self._owner._present
            and table not in self._owner._known.appended
        )

    def delete(self, table: str, key: bytes) -> bool:
        self._pre.pop(table, None)  # a prefetched value may be stale now
        s = self._sql(table)
        assert s is not None
        if not isinstance(key, bytes) or not key or len(key) > POSTGRES_KEY_BYTES_MAX:
            return False
        self.touched.add(table)
        gone = self._n(s.delete, (key,)) > 0
        self.seen[table, key] = None
        if gone and self._last.get(table) == key:
            del self._last[table]
        return gone

    def discard(self, table: str, key: bytes) -> None:
        """Queued with the other writes (one statement, no round trip of its own)."""
        self._pre.pop(table, None)  # a prefetched value may be stale now
        self._sql(table)
        if not isinstance(key, bytes) or not key or len(key) > POSTGRES_KEY_BYTES_MAX:
            return
        self.touched.add(table)
        self._batch.delete(table, key)
        self.seen[table, key] = None
        if self._last.get(table) == key:
            del self._last[table]

    def delete_prefix(self, table: str, prefix: bytes) -> int:
        self._pre.pop(table, None)  # a prefetched value may be stale now
        s = self._sql(table)
        assert s is not None
        stop = prefix_end(prefix)
        self.touched.add(table)
        self.pruned.append(table)
        for k in [k for k in self.seen if k[0] == table]:
            del self.seen[k]
        n = self._n(s.delete_range, (prefix, stop, stop))
        if n:
            self._last.pop(table, None)
        return n

    def _appended(self, table: str, key: bytes, value: bytes) -> None:
        self.touched.add(table)
        self.seen[table, key] = value
        self._owner._known.appended.add(table)
        self._last[table] = key
        self._last_value[table] = value
        if self.witness is None:
            self.witness = (table, key, value, None)

    def append(self, table: str, key: bytes, value: bytes) -> None:
        self._pre.pop(table, None)  # a prefetched value may be stale now
        self._check_key(key)
        check_ascending(table, self._last_known(table), [(key, b"")])
        self._sql(table)
        value = bytes(value)
        self._batch.write(table, {key: value}, new=True)
        self._appended(table, key, value)

    def append_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        if len(pairs) == 1:  # append's checks are these
            self.append(table, pairs[0][0], pairs[0][1])
            return
        self._pre.pop(table, None)  # a prefetched value may be stale now
        if not pairs:
            return
        for k, _ in pairs:
            self._check_key(k)
        check_ascending(table, self._last_known(table), pairs)
        self._sql(table)
        values = [bytes(v) for _, v in pairs]
        self._batch.write(table, dict(zip([k for k, _ in pairs], values, strict=True)), new=True)
        for (key, _), value in zip(pairs, values, strict=True):
            self._appended(table, key, value)
        self._last[table] = pairs[-1][0]
        self._last_value[table] = values[-1]

    def append_indexed(
        self,
        table: str,
        pairs: list[tuple[bytes, bytes]],
        index: str,
        refs: list[tuple[bytes, bytes]],
    ) -> None:
        """In a transaction on assumptions, the rows are numbered by the server
        (:meth:`backends.postgres_batch.Batch.number`): the transaction puts them after the
        greatest key known, and unless it reads something for real (its greatest key then
        asserted as before), its statement moves them after the greatest key it finds,
        under the writers' lock, so that another writer's commit in between does not fail
        it. The index rows are plain inserts: a key another writer took (a stream's seq)
        fails them, and the transaction runs again reading what is stored."""
        numbering = self.numbering
        if (
            not pairs
            or not self.assuming
            or not self._owner.numbering
            or (numbering is None and (table in self.touched or index in self.touched))
            or (numbering is not None and numbering != (table, index))
            or index in self.pruned
            or table in self.pruned
            or table not in self._owner._present
            or index not in self._owner._present
        ):
            if not refs or not self._owner.numbering:
                super().append_indexed(table, pairs, index, refs)
                return
            # The writer may have kept a stream's tail another writer moved
            # (PostgresBackend.tails_checked): the index rows are plain inserts here too, so
            # such a tail fails the transaction (it runs again reading what is stored).
            self.append_many(table, pairs)
            self._insert_refs(index, refs)
            return
        self._pre.pop(table, None)
        self._pre.pop(index, None)
        for k, _ in pairs:
            self._check_key(k)
            if len(k) != 8:
                raise CheckpointError(f"append_indexed keys are 8 bytes, got {k.hex()}")
        for k, _ in refs:
            self._check_key(k)
        after = self._last_known(table)
        check_ascending(table, after, pairs)
        self._sql(table)
        self._sql(index)
        rows = [(k, bytes(v)) for k, v in pairs]
        links = [(k, bytes(v)) for k, v in refs]
        values = dict(rows)
        self.numbering = (table, index)
        self._batch.number(table, after or bytes(8), rows, index, links)
        self.assumed += 1
        if self.witness is None and links:
            k, v = links[0]
            self.witness = (index, k, values[v], (table, v))
        for key, value in rows:
            self._appended(table, key, value)
        self.touched.add(index)
        for k, v in links:
            self.seen[index, k] = v
            self._refs[k] = v
            self._saw(index, k, v)

    def checks(self) -> bool:
        """Whether a failure of this transaction may be a failed assumption (or a row
        inserted as new that another writer took): then it runs again reading for real."""
        return self.assumed > 0 or self.inserted_refs

    def _insert_refs(self, index: str, refs: list[tuple[bytes, bytes]]) -> None:
        """Queue ``refs`` as rows assumed new (a plain ``INSERT``), in any transaction: a key
        there already fails it, and it runs again reading for real (:class:`_StaleAssumption`,
        :attr:`inserted_refs`)."""
        self._pre.pop(index, None)  # a prefetched value may be stale now
        self._queue(index, self._rows(index, refs), new=True)
        self.inserted_refs = True

    def moved(self) -> int:
        return self.moved_by or 0

    def committed(self) -> None:
        """Tell :class:`_Known` what this transaction wrote and read, now that it holds."""
        known = self._owner._known
        moved = self.moved_by
        if moved and self.numbering is not None:
            # the rows the server numbered, where they landed
            self._owner.moved_commits += 1
            table, index = self.numbering
            for k, v in self._refs.items():
                self.seen[index, k] = _u64_moved(v, moved)
            last = self._last.get(table)
            if last is not None:
                self._last[table] = _u64_moved(last, moved)
            last = self._last.get(index)
            if last is not None and last in self._refs:
                self._last_value[index] = self.seen[index, last]
        # A pruned table's rows known before are dropped; what this transaction wrote or read
        # in it after the prune is exact (delete_prefix forgot the table's earlier ones).
        known.merge(self.seen, self.pruned)
        lasts, values = self._last, self._last_value
        for t, key in lasts.items():
            known.last[t] = None if key is None else (key, values.get(t))
        for t in self.touched:
            if t not in lasts:
                known.last.pop(t, None)


# A row a transaction wrote, to learn after a cut COMMIT whether it committed: ``(table, key,
# value, None)``, the row itself (a key appended is new); or ``(index, key, value, (table,
# key as sent))``, an index row whose key is the client's and whose value names the row of
# ``table`` holding ``value`` (the server numbered it: its key was not known when it was
# sent); where it landed tells how far the server moved it.
_Witness = tuple[str, bytes, bytes, tuple[str, bytes] | None]


def _u64_moved(key: bytes, by: int) -> bytes:
    """An 8-byte big-endian key, ``by`` further."""
    return (int.from_bytes(key, "big") + by).to_bytes(8, "big")


# What a failed assumption of a transaction raises (the assertion itself, or a later statement
# of its pipeline).
_STALE_ERRORS = (
    psycopg.errors.DivisionByZero,
    psycopg.errors.UniqueViolation,  # rows assumed new (_PgWrite.put_many)
    psycopg.errors.PipelineAborted,
)


def _end_quietly(pipeline: Any) -> None:
    """Leave pipeline mode (the ``conn.pipeline()`` context) without an exception passed in:
    psycopg logs "error ignored terminating <psycopg.Pipeline [BAD]>" to stderr when one is
    passed (or when a pipeline left open is finalized) on a broken connection. The error it
    raises instead is the one the caller handles already."""
    if pipeline is not None:
        with contextlib.suppress(Exception):
            pipeline.__exit__(None, None, None)


class _Answered:
    """The COMMIT's result, as :meth:`_WriteScope._commit_failed` reads it from a cursor."""

    __slots__ = ("pgresult",)

    def __init__(self, pgresult: Any) -> None:
        self.pgresult = pgresult


class _WriteScope:
    """``with backend.write() as txn``: the writers' lock, the transaction, its commit.

    ``BEGIN`` and the lock are queued in the pipeline, not sent on their own: they go to the
    server with the transaction's first read (one round trip for both), whose answer comes
    once the lock is granted. A transaction that reads nothing for real (it runs on what the
    process knows, :class:`_Known`, its assertions queued) sends everything, the COMMIT and
    the flush included, in one round trip.

    A cut ``COMMIT`` is resolved by the transaction id (the lock query returns it; read before
    the COMMIT is sent unless the transaction appended a row) or, when the id never came back,
    by the row it appended (:attr:`_PgWrite.witness`) once its server session is gone.
    """

    __slots__ = (
        "before_lock",
        "began",
        "begun",
        "granted",
        "granted_cpu",
        "lock",
        "owner",
        "pipeline",
        "txn",
        "xid",
    )

    def __init__(
        self, owner: PostgresBackend, before_lock: Callable[[WriteTxn], None] | None = None
    ) -> None:
        self.owner = owner
        self.before_lock = before_lock
        self.begun = False  # BEGIN and the lock queued in psycopg's pipeline (begin)
        self.xid = 0
        self.pipeline: Any = None
        self.lock: Any = None  # the lock query's cursor until its result is read
        self.began = 0.0
        self.granted = 0.0
        self.granted_cpu = 0.0
        self.txn: _PgWrite | None = None

    def __enter__(self) -> WriteTxn:
        owner = self.owner
        owner._write_lock.acquire()
        try:
            owner._refuse_after_unknown()
            conn = owner._writer()
            self.began = time.perf_counter()
        except BaseException:
            owner._write_lock.release()
            raise
        # From here on, __exit__ cleans up: rolls back, releases the in-process lock.
        self.txn = txn = _PgWrite(conn, owner, self, assuming=owner._assume_now())
        try:
            if self.before_lock is not None:
                # Writes that need no lock (rows of this writer's own keys) go to the server
                # first: their work overlaps the other writers' locked commits.
                self.before_lock(txn)
                if txn._batch:
                    self.begin(before_lock=True)  # its statement goes before the lock's
            if not txn.assuming:
                self.begin()  # it reads: BEGIN and the lock go with its first read
        except BaseException as e:
            self.__exit__(type(e), e, e.__traceback__)
            raise
        return txn

    def begin(self, *, before_lock: bool = False) -> None:
        """Queue ``BEGIN`` (``before_lock``: then what the transaction queued so far, its
        writes that need no lock) and the lock in psycopg's pipeline (no round trip); what
        it queues later goes after the lock. A transaction on assumptions calls it only when it
        first uses the connection (a read, a write that needs an answer): one that never does
        sends everything at its end (:meth:`_at_once`)."""
        owner = self.owner
        txn = self.txn
        assert txn is not None
        self.begun = True
        conn = owner._wconn
        assert conn is not None
        try:
            # Pipeline mode: statements are queued and go out with the next read or the COMMIT.
            self.pipeline = conn.pipeline()
            self.pipeline.__enter__()
            conn.execute(_BEGIN_WRITE)
            if before_lock:
                txn._send()
            self.lock = conn.execute(owner._take_lock)
        except psycopg.Error as e:
            raise owner._failed(e, "beginning a write") from e

    def locked(self) -> None:
        """Read the lock query's result (a round trip only when nothing was read since):
        the transaction id, and how long the lock took."""
        cur, self.lock = self.lock, None
        if cur is None:
            return
        row = cur.fetchone()
        self.granted = time.perf_counter()
        self.granted_cpu = time.thread_time()
        self.owner.lock_wait_s += self.granted - self.began
        assert row is not None
        self.xid = int(row[1])

    def _stale(self, conn: Any, pipeline: Any, e: BaseException | None) -> _StaleAssumption:
        """The transaction's assumptions failed (or could not be checked): roll it back, keep
        the connection, and run it again reading for real."""
        owner = self.owner
        _end_quietly(pipeline)
        # psycopg takes statements the failed pipeline prepared for prepared ("prepared
        # statement ... does not exist" later): after the ROLLBACK its cache is emptied and
        # the server's too (DEALLOCATE ALL), so they are prepared again. The connection is
        # kept: a new one costs the server a process (~50 ms on a loaded machine), and
        # stale assumptions are common where writers share a stream. (psycopg empties the
        # cache itself only on the first ROLLBACK it meets; its cache is private API, so a
        # psycopg without it gets a new connection, as before.)
        prepared: Any = getattr(conn, "_prepared", None)
        try:
            if conn is None or conn.closed or conn.broken or not hasattr(prepared, "clear"):
                raise psycopg.OperationalError("the write connection is not reusable")
            conn.execute("ROLLBACK")
            prepared.clear()
            conn.execute("DEALLOCATE ALL")
            owner._raw = None  # its statements too
        except psycopg.Error:
            owner._drop_writer()
        owner._stale_assumption()
        what = "" if e is None else f" ({type(e).__name__}: {' '.join(str(e).split())})"
        return _StaleAssumption(
            f"a write at {owner.location!r} ran on rows another writer has changed since{what};"
            " it was rolled back and runs again on what is stored"
        )

    def _abort(self, conn: Any, pipeline: Any, exc: BaseException, assumed: bool) -> None:
        """Roll back after ``exc``; raise :class:`_StaleAssumption` instead when the
        transaction's assumptions did not hold (what failed may have followed from one)."""
        if (
            assumed
            and isinstance(exc, Exception)
            and not isinstance(exc, _StaleAssumption)
            and conn is not None
            and not conn.closed
        ):
            # the error itself (a write before the lock, raised in __enter__) or its cause
            stale = isinstance(exc, _STALE_ERRORS) or isinstance(exc.__cause__, _STALE_ERRORS)
            active = conn._pipeline
            if not stale and pipeline is not None and active is not None:
                try:
                    # The failure may follow from an assumption not sent yet (a row assumed
                    # absent made the caller refuse its input): its assertions decide.
                    if self.txn is not None:
                        self.txn._send()
                    active.sync()
                except psycopg.Error as e:
                    stale = not _lost(e)
            if stale:
                raise self._stale(conn, pipeline, None) from None
        _end_quietly(pipeline)  # what was queued fails
        if isinstance(exc, psycopg.Error) or isinstance(exc.__cause__, psycopg.Error):
            # The server failed a statement of the pipeline: a new connection (see _stale).
            self.owner._drop_writer()
        elif conn is not None and not conn.closed:
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error:
                self.owner._drop_writer()  # the server rolls back a lost session

    def _unsent(self, txn: _PgWrite, exc: BaseException | None, assumed: bool) -> bool:
        """The end of a transaction that never used the connection: whether that is all
        (committed at once, or nothing to roll back); if not, it was begun (:meth:`begin`)
        and ends as the others do."""
        if exc is None and txn.witness is not None:
            self._at_once(txn)
            return True
        if exc is not None and not assumed:
            return True  # nothing was sent
        # Begun now: an assertion decides whether the failure followed from an assumption;
        # a commit without a row to resolve a cut COMMIT by reads its id before the COMMIT.
        try:
            self.begin()
        except CheckpointError as e:
            pipeline, self.pipeline = self.pipeline, None
            _end_quietly(pipeline)
            self.owner._drop_writer()  # nothing committed: the COMMIT was never sent
            if exc is None:
                raise
            log.warning("%s: %s", self.owner.location, e)
            return True
        return False

    def _at_once(self, txn: _PgWrite) -> None:
        """Commit a transaction that never used the connection: ``BEGIN``, the lock, its one
        statement, ``COMMIT`` and the flush in one round trip through libpq's pipeline
        (:mod:`backends.postgres_fast`), the same statements :meth:`begin` and the COMMIT
        below send through psycopg's. Its appended row (:attr:`_PgWrite.witness`) resolves a
        cut COMMIT whose id did not come back."""
        owner = self.owner
        statements: list[tuple[str, Any]] = [(_BEGIN_WRITE, None), (owner._take_lock, None)]
        batch = txn.take_batch(final=True)
        if batch:
            statements.append((owner._batch_text(batch), batch.params()))
        at_commit = len(statements)
        statements.append(("COMMIT", None))
        if owner._flush_after:
            statements += _FLUSH_RAW
        results: list[Any] = []
        error: psycopg.Error | None = None
        try:
            owner._raw_pipeline().run(statements, results)
        except psycopg.Error as e:
            error = e
        else:
            bad = raw_failed(results, len(statements))
            if bad is not None:
                assert owner._wconn is not None
                error = raw_error(results[bad] if bad < len(results) else None, owner._wconn)
        if len(results) > 1 and results[1] is not None and results[1].ntuples == 1:
            self.granted = time.perf_counter()
            owner.lock_wait_s += self.granted - self.began
            value = results[1].get_value(0, 1)  # txid_current(): a binary int8
            self.xid = 0 if value is None else int.from_bytes(value, "big", signed=True)
        if error is not None:
            commit = results[at_commit] if len(results) > at_commit else None
            self._commit_failed(error, owner._wconn, None, _Answered(commit), txn.checks())
            return
        if txn.numbered_final:
            value = results[2].get_value(0, 1)  # how far the server moved the rows: int8
            assert value is not None
            txn.moved_by = int.from_bytes(value, "big", signed=True)
        owner.commits += 1
        owner.lock_held_s += time.perf_counter() - self.granted
        txn.committed()
        if txn.assumed > 0:
            owner._assume_backoff = 0

    def _commit_failed(
        self, e: psycopg.Error, conn: Any, pipeline: Any, commit: Any, assumed: bool
    ) -> None:
        """The COMMIT's round trip failed: a failed assumption runs the transaction again; a
        lost connection is resolved (:meth:`PostgresBackend._resolve`)."""
        owner = self.owner
        pid, started = owner._wsession
        witness = None if self.txn is None else self.txn.witness
        status = None if commit is None else commit.pgresult
        done = status is not None and status.command_status == b"COMMIT"
        if assumed and not done and isinstance(e, _STALE_ERRORS):
            raise self._stale(conn, pipeline, e) from None
        _end_quietly(pipeline)
        owner._drop_writer()
        owner._known.clear()
        if not done and isinstance(
            e, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure
        ):
            raise owner._failed(e, "committing") from e  # the server rolled it back: retried
        if done and not self.xid:
            with contextlib.suppress(psycopg.Error):
                self.locked()  # its result came before the COMMIT's
        # Rows the server numbered, how far it moved them not known: only the witness tells.
        learn = self.txn is not None and self.txn.numbered_final and self.txn.moved_by is None
        by_xid = (self.xid or witness is None) and not learn
        landed: bytes | None = None
        if done and by_xid:
            # Committed (and visible); only its flush failed: make it durable.
            owner._resolve(self.xid, e, committed=True)
        elif done:
            assert witness is not None
            landed = owner._resolve(0, e, committed=True, witness=(witness, pid, started))
        elif not _lost(e):
            raise owner._failed(e, "committing") from e
        elif by_xid:
            owner._resolve(self.xid, e)  # returns when it committed (and is durable)
        else:
            assert witness is not None
            landed = owner._resolve(0, e, witness=(witness, pid, started))
        if learn:
            assert self.txn is not None
            assert witness is not None
            assert witness[3] is not None
            assert landed is not None
            sent = witness[3][1]
            self.txn.moved_by = int.from_bytes(landed, "big") - int.from_bytes(sent, "big")

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        owner = self.owner
        txn = self.txn
        assumed = txn is not None and txn.checks()
        try:
            conn = owner._wconn
            if not self.begun and txn is not None and self._unsent(txn, exc, assumed):
                return
            pipeline, self.pipeline = self.pipeline, None
            if exc is not None:
                self._abort(conn, pipeline, exc, assumed)
                return
            assert conn is not None
            assert txn is not None
            witness = txn.witness
            final: Any = None
            try:
                final = txn._send(final=True)
                if witness is None or not assumed:
                    self.locked()  # before the COMMIT goes out: its id resolves a cut COMMIT
            except psycopg.Error as e:
                if assumed and isinstance(e, _STALE_ERRORS):
                    raise self._stale(conn, pipeline, e) from None
                _end_quietly(pipeline)
                owner._drop_writer()  # nothing committed: the COMMIT was never sent
                raise owner._failed(e, "writing") from e
            if self.lock is None:
                # The lock's answer came before the COMMIT was sent: the lock is held across
                # this client's round trip (its wake-up, its work, the next statement's trip).
                owner.held_across_client += 1
                owner.held_client_s += time.perf_counter() - self.granted
                owner.held_client_cpu_s += time.thread_time() - self.granted_cpu
            commit: Any = None
            try:
                commit = conn.execute("COMMIT")  # visible now; the writers' lock is released
                if owner._flush_after:
                    # The durable flush, queued behind the COMMIT in the same round trip and run
                    # once the lock is free: WAL flushes of all writers overlap (group commit).
                    for statement in _FLUSH:
                        conn.execute(statement)
                if pipeline is not None:
                    pipeline.__exit__(None, None, None)  # sends the writes, COMMIT and flush
                self.locked()  # its result came back before the COMMIT's: no round trip
                if txn.numbered_final:
                    row = final.fetchone()  # how far the server moved the rows it numbered
                    txn.moved_by = int(row[-1])
                owner.commits += 1
                owner.lock_held_s += time.perf_counter() - self.granted
            except psycopg.Error as e:
                self._commit_failed(e, conn, pipeline, commit, assumed)
                return
            txn.committed()
            if txn.assumed > 0:
                owner._assume_backoff = 0
        finally:
            owner._write_lock.release()


class PostgresBackend(Backend):
    """Named tables in one schema of a PostgreSQL database."""

    remote = True

    def __init__(
        self,
        url: str,
        *,
        tables: Iterable[str],
        durability: Durability | str = "fsync",
        readonly: bool = False,
        marker_table: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.durability = check_durability(durability)
        self.readonly = readonly
        self._url = url
        self._conninfo, self.schema = split_url(url)
        # Connections are named "ckptlog" in pg_stat_activity unless the URL names them.
        if "application_name" not in dict(parse_qsl(urlsplit(url).query)):
            self._conninfo = make_conninfo(self._conninfo, application_name="ckptlog")
        self._connect_timeout = connect_timeout
        self._url_timeout = "connect_timeout" in conninfo_to_dict(self._conninfo)
        self._tables = tuple(dict.fromkeys(tables))
        self._sql = {t: _Sql(self.schema, t) for t in self._tables}
        self._key = _lock_key(self.schema)
        # Write transactions always commit asynchronously (the writers' lock is released
        # without waiting for the disk); "fsync" then flushes outside the lock (_FLUSH).
        self._sync_setting = f"SET synchronous_commit = off; {SERVER_KEEPALIVES}"
        self._flush_after = self.durability == "fsync"
        # Queued after _BEGIN_WRITE: wait for the writers' lock, take the transaction id.
        self._take_lock = f"SELECT pg_advisory_xact_lock({self._key}), txid_current()"
        self._closed = False
        self._unknown: CommitOutcomeUnknown | None = None
        self.resolve_budget_s = RESOLVE_BUDGET_S
        # Seconds spent beginning write transactions (mostly waiting for the writers' lock)
        # and commits made: what the scaling benchmark reports.
        self.lock_wait_s = 0.0
        self.commits = 0
        # Seconds from the lock's grant to the commit's answer (an upper bound of the time the
        # lock was held: in "fsync" mode the answer also waits for the flush after it).
        self.lock_held_s = 0.0
        # Transactions that ran on what the process knew and found it stale (run again).
        self.stale = 0
        # Commits whose lock was held across a round trip of this client (its first read's
        # answer came back before the COMMIT went out: the commit read under the lock), and,
        # summed over them, the seconds from that answer to sending the COMMIT and this
        # thread's CPU seconds in that window: the rest of the window the client was not
        # running (waiting for a core, or for its process's other threads).
        self.held_across_client = 0
        # Commits whose log rows the server numbered after another writer's (moved them).
        self.moved_commits = 0
        # Whether a commit on assumptions lets the server number the log's rows: once one of
        # this process's commits went stale (another writer shares the log). A lone writer
        # keeps asserting the log's end it knows, which costs the server and this client less
        # (a single-writer append: ~213 against ~250 µs, client CPU ~132 against ~148 µs).
        self.numbering = False
        self.held_client_s = 0.0
        self.held_client_cpu_s = 0.0
        # rendered statements of the write batches met (postgres_batch.render)
        self._batches: dict[tuple[Any, ...], str] = {}
        self._raw: RawPipeline | None = None  # the write connection's, once used
        self._reset_connections()
        self._present: set[str] = set()
        delay = RETRY_SLEEP_S
        for attempt in range(OPEN_ATTEMPTS):
            conn = self._connect()
            try:
                self._open_schema(conn, marker_table)
            except StorageError as e:
                conn.close()
                if not _lost(e.__cause__) or attempt == OPEN_ATTEMPTS - 1:
                    raise
                log.warning("%s: opening failed transiently (%s); retrying", self.location, e)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            except BaseException:
                conn.close()
                raise
            self._idle.append(conn)
            break

    # -- connections ---------------------------------------------------------------------------

    def _reset_connections(self) -> None:
        self._pid = current_pid()
        self._write_lock = threading.Lock()
        self._pool_lock = threading.Lock()
        self._wconn: psycopg.Connection[Any] | None = None
        # (server process id, its start) of the write connection's session
        self._wsession: tuple[int, Any] = (0, None)
        self._idle: list[psycopg.Connection[Any]] = []
        self._known = _Known()
        self._assume_skip = 0  # transactions left to read for real before assuming again
        self._assume_backoff = 0

    def _check(self) -> None:
        if self._closed:
            raise LogClosed(f"the PostgreSQL backend at {self.location!r} is closed; open it again")
        if self._pid != current_pid():  # forked: the parent's sockets are not ours
            _GRAVEYARD.extend([self._wconn, *self._idle])
            self._reset_connections()

    def _connect(self) -> psycopg.Connection[Any]:
        # A connect_timeout in the URL wins over the constructor's (libpq takes the last one).
        timeout: dict[str, Any] = {}
        if not self._url_timeout:
            timeout["connect_timeout"] = max(1, round(self._connect_timeout))
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True, **timeout)
        except psycopg.OperationalError as e:
            text = " ".join(str(e).split())
            hint = _refused_hint(text) or (
                "check that PostgreSQL is running and reachable at that address"
            )
            raise StorageError(
                f"cannot connect to PostgreSQL at {self.location!r}: {text}; {hint}"
            ) from e
        conn.adapters.register_dumper(ByteaArray, _ByteaArrayDumper)
        return conn

    def _writer(self) -> psycopg.Connection[Any]:
        conn = self._wconn
        if conn is None or conn.closed or conn.broken:
            try:
                conn = self._connect()
            except StorageError as e:
                if _refused_hint(str(e.__cause__)) is not None:
                    raise  # a wrong password or database: no retry helps
                log.warning("%s: connecting for a write failed: %s", self.location, e)
                raise RetryableWrite(f"{e}; the write was not begun") from e  # unreachable: retried
            try:
                conn.execute(self._sync_setting)
                row = conn.execute(
                    "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                ).fetchone()
            except psycopg.Error as e:
                conn.close()
                raise self._failed(e, "connecting") from e  # lost again: retried
            self._wconn = conn
            self._wsession = (0, None) if row is None else (int(row[0]), row[1])
        return conn

    def _drop_writer(self) -> None:
        conn, self._wconn = self._wconn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _failed(self, e: psycopg.Error, what: str) -> CheckpointError:
        if _transient(e):
            log.warning("%s %s failed transiently: %s", self.location, what, e)
            return RetryableWrite(
                f"{what} at {self.location!r} failed transiently "
                f"({type(e).__name__}: {str(e).strip()}); the transaction was rolled back"
            )
        if isinstance(e, psycopg.errors.InsufficientPrivilege):
            return ReadOnlyLog(f"{what} at {self.location!r}: {str(e).strip()}")
        return _storage_error(e, f"{what} at {self.location!r}")

    def _resolve(
        self,
        xid: int,
        cause: BaseException,
        *,
        committed: bool = False,
        witness: tuple[_Witness, int, Any] | None = None,
    ) -> bytes | None:
        """The connection failed during COMMIT of transaction ``xid`` (or, ``committed``, during
        the durable flush after it): learn its fate; in ``fsync`` mode a committed ``xid`` is
        made durable before this returns (its status first, then a flush: the flush then
        covers its commit record).

        Without the id (the COMMIT was sent with the rest, before the id came back),
        ``witness`` is ``(_Witness of the transaction, the server process id and start of
        its session)``: that session is ended (``pg_terminate_backend``) and, once it is
        gone, so that nothing of it can commit any more, the row tells: there with that
        value, committed; absent, rolled back (an appended key was new). A witness through an
        index row (rows the server numbered): the index row there, and the row it names
        holding the value, committed; returns that row's key (where the rows landed)."""
        delay = RETRY_SLEEP_S
        status: str | None = "unknown"
        what = "flush after the commit" if committed else "commit"
        start = time.monotonic()
        attempt = 0
        landed: bytes | None = None
        while attempt < RESOLVE_ATTEMPTS or time.monotonic() - start < self.resolve_budget_s:
            attempt += 1
            try:
                with self._connect() as conn:
                    if witness is None:
                        row = conn.execute("SELECT txid_status(%s)", (xid,)).fetchone()
                        status = None if row is None else row[0]
                    else:
                        status, landed = self._witness_status(conn, *witness)
                    if status == "committed" and self._flush_after:
                        conn.execute(_FLUSH_NOW)
            except (psycopg.Error, StorageError) as e:
                log.warning(
                    "%s: resolving %s of %d, attempt %d: %s", self.location, what, xid, attempt, e
                )
                status = "unknown"
            if status == "committed":
                log.warning("%s: %s of %d was cut off; it had committed", self.location, what, xid)
                return landed
            if status == "aborted":
                log.warning(
                    "%s: %s of %d was cut off; it was rolled back", self.location, what, xid
                )
                raise RetryableWrite(
                    f"the connection to {self.location!r} failed during COMMIT and the server "
                    f"rolled transaction {xid} back; run it again"
                ) from cause
            time.sleep(delay)  # "in progress": the server has not noticed yet; or unreachable
            delay = min(delay * 2, 2.0)
        self._unknown = CommitOutcomeUnknown(
            f"the connection to {self.location!r} failed during COMMIT of transaction {xid} "
            f"and its outcome could not be learned in {time.monotonic() - start:.0f} s "
            f"(last status: {status}); it may or may not "
            "have committed, so this log refuses further writes (a retry could save twice): "
            "reopen the log, read the streams' last seqs to see what landed, then save again"
        )
        raise self._unknown from cause

    def _witness_status(
        self, conn: psycopg.Connection[Any], row: _Witness, pid: int, start: Any
    ) -> tuple[str, bytes | None]:
        """``(status, the key of the row the witness names)`` (see :meth:`_resolve`)."""
        alive = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid = %s AND backend_start = %s",
            (pid, start),
        ).fetchall()
        if alive or not pid:
            return "in progress", None  # ended now (or unknown): looked at again after a pause
        table, key, value, link = row
        found = conn.execute(self._sql[table].get, (key,), binary=True).fetchone()
        if link is not None and found is not None:
            landed = bytes(found[0])
            found = conn.execute(self._sql[link[0]].get, (landed,), binary=True).fetchone()
            if found is not None and bytes(found[0]) == value:
                return "committed", landed
            return "aborted", None
        return ("committed" if found is not None and bytes(found[0]) == value else "aborted"), None

    def _assume_now(self) -> bool:
        """Whether the next write transaction runs on what this process knows (_Known)."""
        if self._assume_skip > 0:
            self._assume_skip -= 1
            return False
        return bool(self._known.last)

    def _batch_text(self, batch: Batch) -> str:
        """The statement of ``batch`` (rendered once per kind of batch)."""
        signature = batch.signature()
        text = self._batches.get(signature)
        if text is None:
            if len(self._batches) >= STATEMENTS_CACHED_MAX:
                self._batches.clear()
            text = self._batches[signature] = render(
                signature, {t: s.ident for t, s in self._sql.items()}
            )
        return text

    def _raw_pipeline(self) -> RawPipeline:
        """The statements prepared on the write connection for :meth:`_WriteScope._at_once`."""
        raw = self._raw
        if raw is None or raw.conn is not self._wconn:
            assert self._wconn is not None
            raw = self._raw = RawPipeline(self._wconn)
        return raw

    def _stale_assumption(self) -> None:
        self.stale += 1
        self.numbering = True  # another writer: let the server number the log from now on
        self._assume_backoff = min(max(1, 2 * self._assume_backoff), ASSUME_BACKOFF_MAX)
        self._assume_skip = self._assume_backoff

    def _refuse_after_unknown(self) -> None:
        if self._unknown is not None:
            raise CommitOutcomeUnknown(str(self._unknown))

    # -- schema --------------------------------------------------------------------------------

    def _open_schema(
        self,
        conn: psycopg.Connection[Any],
        marker: str | None,
        names: Sequence[str] | None = None,
        *,
        create: bool = True,
    ) -> None:
        """Check every table name the log would use (``names``: those added after opening),
        then create the missing ones (unless ``create`` is false or the log is read-only):
        nothing is created or written in a schema that holds a table of one of those names
        that ckptlog did not create (:meth:`_check_foreign`). The tables found or created
        become usable (:attr:`_present`)."""
        names = self._tables if names is None else names
        where = f"opening {self.location!r}"
        try:
            found = self._existing(conn)
            if found is None and self.readonly:
                raise NotALog(
                    f"no ckptlog log at {self.location!r}: schema {self.schema!r} does not "
                    "exist; check the URL's schema, or open it writable to create a new log"
                )
            self._check_foreign(found or {}, marker, names)
            missing = [t for t in names if t not in (found or {})]
            if missing and create and not self.readonly:
                # One transaction under the writers' lock: the schema is checked again once
                # the lock is held (another process may have created tables meanwhile), and
                # the tables are created only if it still passes. Not flushed at its commit:
                # the first durable write flushes the WAL up to and past it.
                with conn.transaction():
                    conn.execute(
                        f"SET LOCAL synchronous_commit = off; "
                        f"SELECT pg_advisory_xact_lock({self._key})"
                    )
                    found = self._existing(conn)
                    self._check_foreign(found or {}, marker, names)
                    missing = [t for t in names if t not in (found or {})]
                    statements = [
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                            sql.Identifier(self.schema)
                        ),
                        *(stmt for t in missing for stmt in _ddl(self.schema, t)),
                    ]
                    conn.execute(sql.SQL("; ").join(statements).as_string(conn))
                found = self._existing(conn)
        except psycopg.Error as e:
            raise _storage_error(e, where) from e
        self._present = self._present | {t for t in names if t in (found or {})}

    def _existing(
        self, conn: psycopg.Connection[Any]
    ) -> dict[str, list[tuple[str, str, str]]] | None:
        """Tables of the schema with their (column, type, storage) triples; ``None``: no
        such schema."""
        rows = conn.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attstorage "
            "FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid "
            "AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
            "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
            "AND NOT a.attisdropped WHERE n.nspname = %s ORDER BY c.relname, a.attnum",
            (self.schema,),
        ).fetchall()
        if not rows:
            return None  # no such schema
        tables: dict[str, list[tuple[str, str, str]]] = {}
        for name, col, typ, storage in rows:
            if name is None:
                continue  # the schema holds no table
            tables.setdefault(name, [])
            if col is not None:
                tables[name].append((col, typ, str(storage)))
        return tables

    def _check_foreign(
        self,
        found: dict[str, list[tuple[str, str, str]]],
        marker: str | None,
        names: Sequence[str],
    ) -> None:
        """Refuse a schema that holds, under a name this log uses (``names``), a table
        ckptlog did not create. ckptlog's tables are ``(k bytea, v bytea)`` with ``v`` stored
        ``EXTERNAL`` (:func:`_ddl`, since the first version): a table of that shape with the
        default storage was made by someone else, however alike."""
        for t in names:
            if t not in found:
                continue
            cols = [(c, ty) for c, ty, _ in found[t]]
            if cols != [("k", "bytea"), ("v", "bytea")]:
                shown = ", ".join(f"{c} {ty}" for c, ty in cols)
                raise NotALog(
                    f"{self.location!r}: table {self.schema}.{t} has columns ({shown}), not the "
                    "(k bytea, v bytea) of a ckptlog table; it belongs to something else: use "
                    "another schema (?schema=...) for the log"
                )
            if found[t][1][2] != "e":
                raise NotALog(
                    f"{self.location!r}: table {self.schema}.{t} has ckptlog's columns "
                    "(k bytea, v bytea) but was not created by ckptlog (its v column is not "
                    "stored EXTERNAL, as ckptlog's are); it belongs to something else and was "
                    "left as it is: use another schema (?schema=...) for the log"
                )
        if (
            marker is not None
            and found
            and marker not in found
            and not set(found) <= set(self._tables)
        ):
            raise NotALog(
                f"{self.location!r}: schema {self.schema!r} holds tables "
                f"{', '.join(sorted(found)[:5])} but no {marker!r} table: not a ckptlog log; "
                "use a new schema (?schema=...) for the log"
            )

    # -- the contract --------------------------------------------------------------------------

    @property
    def location(self) -> str:
        return redact(self._url)

    def add_tables(self, tables: Iterable[str], *, create: bool) -> tuple[str, ...]:
        """Tables usable from now on besides those declared at opening (a view's): those the
        schema holds, checked as at opening, and with ``create`` (a writable log) the missing
        ones created; returns those now usable, in order. A table declared and absent reads
        as empty, as at opening."""
        names = tuple(dict.fromkeys(tables))
        todo = [t for t in names if t not in self._present]
        if todo:
            self._check()
            for t in todo:
                if t not in self._sql:
                    self._sql[t] = _Sql(self.schema, t)
            self._tables = (*self._tables, *(t for t in todo if t not in self._tables))
            conn = self._reader()
            try:
                self._open_schema(conn, None, todo, create=create)
            finally:
                self._give_back(conn)
        return tuple(t for t in names if t in self._present)

    @property
    def tails_checked(self) -> bool:
        """Once the server numbers the log (:attr:`numbering`), every write transaction
        inserts its stream index rows as new (:meth:`_PgWrite.append_indexed`)."""
        return self.numbering

    @property
    def max_key_bytes(self) -> int:
        return POSTGRES_KEY_BYTES_MAX

    def _reader(self) -> psycopg.Connection[Any]:
        with self._pool_lock:
            while self._idle:
                conn = self._idle.pop()
                if not (conn.closed or conn.broken):
                    return conn
        return self._connect()

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        if conn.closed or conn.broken:
            return
        with self._pool_lock:
            if (
                len(self._idle) < IDLE_READERS_MAX
                and not self._closed
                and self._pid == current_pid()
            ):
                self._idle.append(conn)
                return
        conn.close()

    def read(self) -> _ReadScope:
        self._check()
        return _ReadScope(self)

    def _now(self, read: Callable[[_PgRead], T]) -> T:
        """``read`` as one statement on an idle reader (autocommit: the statement is its
        transaction); a reader that failed is closed, not given back."""
        self._check()
        conn = self._reader()
        try:
            got = read(_PgRead(conn, self))
        except BaseException:
            conn.close()
            raise
        self._give_back(conn)
        return got

    def get_many_now(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        """One statement on an idle reader."""
        return self._now(lambda r: r.get_many(table, keys))

    def get_many_linked_now(
        self,
        table: str,
        keys: list[bytes],
        link: bytes,
        prefix: bytes,
        width: int,
        skip: Collection[bytes] = (),
    ) -> tuple[list[bytes | None], list[tuple[bytes, bytes]]]:
        """One statement on an idle reader."""
        return self._now(lambda r: r.get_many_linked(table, keys, link, prefix, width, skip))

    def get_named_now(
        self, names: str, name: bytes, table: str, suffix: bytes, ranged: str, tail: bytes
    ) -> tuple[bytes | None, bytes | None, list[tuple[bytes, bytes]]]:
        """One statement on an idle reader."""
        return self._now(lambda r: r.get_named(names, name, table, suffix, ranged, tail))

    def get_indexed_now(
        self, index: str, key: bytes, table: str
    ) -> tuple[bytes | None, bytes | None]:
        """One statement on an idle reader."""
        return self._now(lambda r: r.get_indexed(index, key, table))

    def get_named_spans_now(
        self, names: str, name: bytes, spans: Sequence[Span]
    ) -> tuple[bytes | None, list[list[tuple[bytes, bytes]]]]:
        """One statement on an idle reader."""
        return self._now(lambda r: r.get_named_spans(names, name, spans))

    def write(self, before_lock: Callable[[WriteTxn], None] | None = None) -> _WriteScope:
        self._check()
        if self.readonly:
            raise ReadOnlyLog(
                f"{self.location!r} was opened read-only; open it writable to change it"
            )
        return _WriteScope(self, before_lock)

    def run_write(
        self,
        fn: Callable[[WriteTxn], T],
        *,
        attempts: int = 8,
        before_lock: Callable[[WriteTxn], None] | None = None,
    ) -> T:
        """:meth:`Backend.run_write`, with a growing pause between attempts (a server that
        dropped the connection may need a moment), each retry logged."""
        delay = RETRY_SLEEP_S
        for attempt in range(attempts):
            try:
                with self.write(before_lock) as txn:
                    return fn(txn)
            except RetryableWrite as e:
                if attempt == attempts - 1:
                    raise
                if isinstance(e, _StaleAssumption):  # the expected cost of assuming: no noise
                    log.debug("%s: %s; running it again", self.location, e)
                    continue
                log.warning(
                    "%s: write attempt %d of %d failed (%s); retrying",
                    self.location,
                    attempt + 1,
                    attempts,
                    e,
                )
                if e.__cause__ is not None:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

    def sync(self) -> None:
        self._check()
        if self.readonly:
            return
        with self._write_lock:
            conn = self._writer()
            try:
                conn.execute(_FLUSH_NOW)
            except psycopg.Error as e:
                self._drop_writer()
                raise _storage_error(e, f"syncing {self.location!r}") from e

    def close(self) -> None:
        if self._closed:
            return
        if self._pid == current_pid():
            if self.durability == "process" and not self.readonly:
                try:
                    self.sync()
                except StorageError as e:
                    log.warning("%s: flush on close failed: %s", self.location, e)
            with self._write_lock, self._pool_lock:
                self._closed = True
                for conn in [self._wconn, *self._idle]:
                    if conn is not None:
                        conn.close()
                self._wconn = None
                self._idle = []
        self._closed = True

    def size_bytes(self) -> int:
        self._check()
        with self.read() as txn:
            assert isinstance(txn, _PgRead)
            rows = txn._q(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'",
                (self.schema,),
            )
        n: int = rows[0][0]
        return n


_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1"
_BEGIN_WRITE = "BEGIN ISOLATION LEVEL READ COMMITTED"
# A durable flush of the WAL up to now: a transaction with an id (so a commit record) that
# commits synchronously. PostgreSQL flushes the WAL in order, so every commit inserted before
# this one is durable once it returns; concurrent flushers share one disk flush.
# In the pipeline, behind the COMMIT: one statement, run in the implicit transaction that ends
# at the pipeline's sync, committed synchronously (``set_config`` with ``is_local``: SET LOCAL).
# PostgreSQL flushes at a commit only when the transaction wrote WAL before its commit record
# (``RecordTransactionCommit``: an id alone is not enough, so ``SELECT txid_current()`` in a
# synchronous transaction returns before anything is flushed): a non-transactional logical
# message (prefix "ckptlog", ignored by logical decoding consumers that do not ask for
# messages) is that WAL, written by any role at ``wal_level = replica``.
_FLUSH_WAL = "pg_current_xact_id(), pg_logical_emit_message(false, 'ckptlog', 'flush')"
_FLUSH = (f"SELECT set_config('synchronous_commit', 'on', true), {_FLUSH_WAL}",)
_FLUSH_RAW = [(statement, None) for statement in _FLUSH]  # as RawPipeline.run takes them
# The same as one simple query (outside a pipeline).
_FLUSH_NOW = f"BEGIN; SET LOCAL synchronous_commit = on; SELECT {_FLUSH_WAL}; COMMIT"


class _ReadScope:
    """``with backend.read() as txn``. While the transaction has returned nothing (``fresh``),
    a connection the server dropped is replaced once by a new transaction: nothing was
    observed of the old snapshot, so the caller cannot tell."""

    __slots__ = ("conn", "fresh", "owner")

    def __init__(self, owner: PostgresBackend) -> None:
        self.owner = owner
        self.conn: psycopg.Connection[Any] | None = None
        self.fresh = True

    def __enter__(self) -> ReadTxn:
        owner = self.owner
        conn = owner._reader()
        try:
            # SELECT 1 pins the snapshot now (REPEATABLE READ takes it at the first statement).
            conn.execute(_BEGIN_READ)
        except psycopg.Error as e:
            conn.close()
            if not _lost(e):
                raise _storage_error(e, f"reading {owner.location!r}") from e
            self.conn = conn
            conn = self.begin_again()  # an idle pooled connection the server dropped
        self.conn = conn
        return _PgRead(conn, owner, self)

    def begin_again(self) -> psycopg.Connection[Any]:
        """Drop this scope's connection; a new one with a new transaction (once only)."""
        owner = self.owner
        if self.conn is not None:
            self.conn.close()
        self.fresh = False  # no second time
        conn = owner._connect()
        try:
            conn.execute(_BEGIN_READ)
        except psycopg.Error as e:
            conn.close()
            raise _storage_error(e, f"reading {owner.location!r}") from e
        self.conn = conn
        return conn

    def __exit__(self, *exc: object) -> None:
        conn = self.conn
        assert conn is not None
        try:
            conn.execute("COMMIT")
        except psycopg.Error:
            conn.close()
            return
        self.owner._give_back(conn)
