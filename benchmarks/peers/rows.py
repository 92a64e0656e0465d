"""Hand-rolled per-instance stores: what a user with a large fan-out job writes instead of a
checkpointer. Only the ``instances`` scenario (one row per completed instance) applies.

- ``sqlite-rows``: SQLite WAL, a head row (upsert) and a history row per instance,
  ``executemany`` of both and one commit per batch; ``synchronous=FULL`` (fsync) or ``NORMAL``
  (process: in WAL mode a killed process loses nothing committed).
- ``lmdb-rows``: py-lmdb, a head row and a history row per instance in two tables,
  ``putmulti`` of both in one write transaction per batch; ``sync=True`` (fsync) or
  ``sync=False, metasync=False`` (process).
- ``jsonl``: a JSON line appended per instance; per batch ``flush`` to the OS (process), then
  ``fsync`` (fsync).

Every store encodes a row with ``msgspec.json`` (the fastest encoder at hand, so a peer is never
slowed by its serializer) and stamps it with ``time.time()``, as ckptlog's ``save_instance``
does. A batch is ``batch`` rows; the final partial batch is committed by ``flush``.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import lmdb
import msgspec

from benchmarks.peers.base import INSTANCE_SCENARIOS, Durability, InstanceSink, Peer

U64 = struct.Struct(">Q")
MAP_SIZE = 1 << 36  # sparse: reserves address space only
ONLY_INSTANCES = (
    "a hand-rolled per-instance store: only the instances scenarios (instances, "
    "sustained-instances, openloop) apply"
)
_encode = msgspec.json.encode


class _RowsPeer(Peer):
    """A built-in per-instance store in ``fsync`` or ``process`` mode."""

    family = "rows"
    concurrency = "batch"
    kind = ""  # sqlite-rows | lmdb-rows | jsonl
    details: ClassVar[Mapping[str, str]] = {}

    def __init__(self, durability: str) -> None:
        self.mode = durability
        self.name = f"{self.kind}-{durability}"
        self.durability = Durability(durability, self.details[durability])  # type: ignore[arg-type]

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        return None if scenario in INSTANCE_SCENARIOS else ONLY_INSTANCES

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        raise NotImplementedError(ONLY_INSTANCES)

    async def close(self) -> None:
        """Nothing stays open between runs: each sink owns its store."""


class SqliteRowsPeer(_RowsPeer):
    kind = "sqlite-rows"
    package = "sqlite3"
    api = "sqlite3 executemany (head upsert + history insert), one commit per batch"
    details: ClassVar[Mapping[str, str]] = {
        "fsync": "SQLite WAL, synchronous=FULL: the WAL is fsynced at every commit",
        "process": "SQLite WAL, synchronous=NORMAL: survives a killed process, not power loss",
    }

    def instance_sink(self, path: Path, batch: int) -> InstanceSink:
        return SqliteRowsSink(path, self.mode, batch)


class LmdbRowsPeer(_RowsPeer):
    kind = "lmdb-rows"
    package = "lmdb"
    api = "py-lmdb putmulti into a head and a history table, one write transaction per batch"
    details: ClassVar[Mapping[str, str]] = {
        "fsync": "py-lmdb sync=True, metasync=True: fsync at every commit",
        "process": "py-lmdb sync=False, metasync=False: committed to the page cache "
        "(killed process safe)",
    }

    def instance_sink(self, path: Path, batch: int) -> InstanceSink:
        return LmdbRowsSink(path, self.mode, batch)


class JsonlPeer(_RowsPeer):
    kind = "jsonl"
    package = "msgspec"
    api = "a JSON line written per row; flush (and fsync) per batch"
    details: ClassVar[Mapping[str, str]] = {
        "fsync": "flush + os.fsync per batch",
        "process": "flush to the OS per batch (killed process safe for flushed batches)",
    }

    def instance_sink(self, path: Path, batch: int) -> InstanceSink:
        return JsonlSink(path, self.mode, batch)


class SqliteRowsSink:
    HEAD = (
        "INSERT INTO head (inv, idx, saved_at, result) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (inv, idx) DO UPDATE SET saved_at = excluded.saved_at, "
        "result = excluded.result"
    )
    HISTORY = "INSERT INTO history (inv, idx, saved_at, result) VALUES (?, ?, ?, ?)"

    def __init__(self, path: Path, mode: str, batch: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.batch = batch
        self.inv = ""
        self.pending: list[tuple[str, int, float, bytes]] = []
        self.conn: sqlite3.Connection | None = sqlite3.connect(
            path / "rows.db", isolation_level=None
        )
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={'FULL' if mode == 'fsync' else 'NORMAL'}")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS jobs (inv TEXT PRIMARY KEY, n INTEGER, saved_at REAL)"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS head (inv TEXT, idx INTEGER, saved_at REAL, result BLOB, "
            "PRIMARY KEY (inv, idx)) WITHOUT ROWID"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS history (seq INTEGER PRIMARY KEY, inv TEXT, "
            "idx INTEGER, saved_at REAL, result BLOB)"
        )

    def _conn(self) -> sqlite3.Connection:
        assert self.conn is not None, "closed"
        return self.conn

    def setup(self, inv: str, n: int) -> None:
        self.inv = inv
        self._conn().execute("INSERT INTO jobs VALUES (?, ?, ?)", (inv, n, time.time()))

    def save(self, index: int, result: dict[str, Any]) -> None:
        self.pending.append((self.inv, index, time.time(), _encode(result)))
        if len(self.pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        conn = self._conn()
        conn.execute("BEGIN")
        conn.executemany(self.HEAD, self.pending)
        conn.executemany(self.HISTORY, self.pending)
        conn.execute("COMMIT")
        self.pending = []

    def rows(self) -> tuple[dict[int, Any], int]:
        """The head (index -> result) and the number of history rows."""
        conn = self._conn()
        head = {
            i: msgspec.json.decode(r)
            for i, r in conn.execute("SELECT idx, result FROM head WHERE inv = ?", (self.inv,))
        }
        (hist,) = conn.execute("SELECT count(*) FROM history WHERE inv = ?", (self.inv,)).fetchone()
        return head, int(hist)

    def probe(self, done: int) -> dict[str, float]:
        conn = self._conn()
        (head,) = conn.execute("SELECT count(*) FROM head WHERE inv = ?", (self.inv,)).fetchone()
        (hist,) = conn.execute("SELECT count(*) FROM history WHERE inv = ?", (self.inv,)).fetchone()
        assert head == hist == done, f"sqlite-rows: {head} head / {hist} history rows, saved {done}"
        return {}

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class LmdbRowsSink:
    def __init__(self, path: Path, mode: str, batch: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.batch = batch
        self.inv = ""
        self.prefix = b""
        self.seq = 0
        self.pending: list[tuple[int, bytes]] = []
        fsync = mode == "fsync"
        self.env: Any = lmdb.open(
            str(path), map_size=MAP_SIZE, max_dbs=3, sync=fsync, metasync=fsync
        )
        self.jobs = self.env.open_db(b"jobs")
        self.head = self.env.open_db(b"head")
        self.history = self.env.open_db(b"history")

    def setup(self, inv: str, n: int) -> None:
        self.inv = inv
        self.prefix = inv.encode() + b"\0"
        with self.env.begin(write=True) as txn:
            txn.put(inv.encode(), _encode({"n": n, "saved_at": time.time()}), db=self.jobs)

    def save(self, index: int, result: dict[str, Any]) -> None:
        self.pending.append((index, _encode((time.time(), result))))
        if len(self.pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        prefix, first = self.prefix, self.seq + 1
        head = [(prefix + U64.pack(i), v) for i, v in self.pending]
        hist = [(U64.pack(first + j), prefix + v) for j, (_, v) in enumerate(self.pending)]
        with self.env.begin(write=True) as txn:
            txn.cursor(db=self.head).putmulti(head)
            txn.cursor(db=self.history).putmulti(hist, append=True)
        self.seq += len(self.pending)
        self.pending = []

    def rows(self) -> tuple[dict[int, Any], int]:
        n = len(self.prefix)
        with self.env.begin() as txn:
            head = {
                U64.unpack(k[n:])[0]: msgspec.json.decode(v)[1]
                for k, v in txn.cursor(db=self.head)
                if k.startswith(self.prefix)
            }
            hist = txn.stat(self.history)["entries"]
        return head, int(hist)

    def probe(self, done: int) -> dict[str, float]:
        with self.env.begin() as txn:
            head = txn.stat(self.head)["entries"]
            hist = txn.stat(self.history)["entries"]
        assert head == hist == done, f"lmdb-rows: {head} head / {hist} history rows, saved {done}"
        return {}

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


class JsonlSink:
    def __init__(self, path: Path, mode: str, batch: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.file = path / "rows.jsonl"
        self.fsync = mode == "fsync"
        self.batch = batch
        self.inv = ""
        self.count = 0
        self.f: Any = open(self.file, "ab")  # noqa: SIM115 - closed by close()

    def setup(self, inv: str, n: int) -> None:
        self.inv = inv
        self.f.write(_encode({"inv": inv, "n": n, "saved_at": time.time()}) + b"\n")
        self._commit()

    def save(self, index: int, result: dict[str, Any]) -> None:
        line = {"inv": self.inv, "idx": index, "saved_at": time.time(), "result": result}
        self.f.write(_encode(line) + b"\n")
        self.count += 1
        if self.count >= self.batch:
            self.flush()

    def _commit(self) -> None:
        self.f.flush()
        if self.fsync:
            os.fsync(self.f.fileno())

    def flush(self) -> None:
        if self.count:
            self._commit()
            self.count = 0

    def rows(self) -> tuple[dict[int, Any], int]:
        """The latest result per index and the number of row lines (the job line aside)."""
        head: dict[int, Any] = {}
        hist = 0
        with open(self.file, "rb") as f:
            for line in f:
                obj = msgspec.json.decode(line)
                if "idx" in obj and obj["inv"] == self.inv:
                    head[obj["idx"]] = obj["result"]
                    hist += 1
        return head, hist

    def probe(self, done: int) -> dict[str, float]:
        with open(self.file, "rb") as f:
            lines = sum(1 for _ in f)
        assert lines == done + 1, f"jsonl: {lines - 1} row lines, saved {done}"
        return {}

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
