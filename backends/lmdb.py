"""LMDB backend: the only module that imports ``lmdb``.

Invariants:
- One ``lmdb.Environment`` per path per process (LMDB forbids opening an environment twice in
  one process: closing one handle would drop the other's locks). Handles are shared and
  reference-counted through ``_REGISTRY``.
- After ``fork`` the child never touches the parent's environment, not even to close it (closing
  would clear reader slots the parent owns); it opens its own on first use, past py-lmdb's
  "already open in this process" guard (see ``_lift_open_guard``).
- Every transaction lives inside a ``with``; write transactions never cross threads; values
  are returned as ``bytes`` copies (``buffers=False``), so nothing refers to the map after a
  transaction ends.
- ``append`` puts with ``append=True`` only after checking the key is greater than the last key,
  since an out-of-order append corrupts the B-tree.
- The map starts at ``map_size_initial`` and doubles on ``MapFullError`` up to
  ``map_size_max``; growing waits until no transaction of this process is active (an LMDB
  requirement of ``mdb_env_set_mapsize``). Past the bound the write raises ``StorageFull``.
- ``"fsync"`` durability opens the environment with ``sync=True`` (data then meta page flushed
  in order at each commit, LMDB's crash-safe default); ``"process"`` uses ``sync=False``, which
  survives a killed process because committed pages are in the OS page cache, and
  :meth:`LmdbBackend.sync` flushes on demand.
"""

from __future__ import annotations

import importlib
import os
import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any

import lmdb

from backends.base import (
    Backend,
    Durability,
    ReadTxn,
    RetryableWrite,
    WriteTxn,
    check_ascending,
    check_durability,
    current_pid,
    prefix_end,
)
from eventlog.errors import (
    CheckpointError,
    LogClosed,
    NotALog,
    ReadOnlyLog,
    StorageError,
    StorageFull,
    UnsupportedFormat,
)

try:  # py-lmdb 3 refuses to open one environment twice in a process (see _lift_open_guard)
    _lmdb_envid: Any = importlib.import_module("lmdb._envid")
except ImportError:  # pragma: no cover - a py-lmdb without lmdb._envid: nothing to lift
    _lmdb_envid = None

MAP_SIZE_INITIAL = 1 << 30  # 1 GiB of address space; costs nothing until pages are written
MAP_SIZE_MAX = 1 << 40  # 1 TiB: free to reserve on 64-bit without writemap (DESIGN §11)
MAX_DBS = 64
MAX_READERS = 1024
DATA_FILE = "data.mdb"


def _translate(err: lmdb.Error, where: str) -> CheckpointError:
    """Map an lmdb error to our hierarchy, keeping lmdb's own hint text."""
    if isinstance(err, lmdb.MapFullError):
        return StorageFull(f"{where}: the LMDB map is full ({err}); raise map_size_max")
    if isinstance(err, lmdb.VersionMismatchError):
        return UnsupportedFormat(f"{where}: LMDB file version mismatch ({err})")
    if isinstance(err, (lmdb.InvalidError, lmdb.CorruptedError)):
        return NotALog(f"{where}: not a readable LMDB environment ({err})")
    if isinstance(err, lmdb.ReadonlyError):
        return ReadOnlyLog(f"{where}: the log is open read-only ({err})")
    return StorageError(f"{where}: LMDB error {type(err).__name__}: {err}")


class _Env:
    """One process's handle on one LMDB environment, shared by every backend on that path."""

    def __init__(
        self, path: str, durability: Durability, readonly: bool, map_size: int, map_max: int
    ) -> None:
        self.path = path
        self.durability = durability
        self.readonly = readonly
        self.map_size_max = map_max
        self.refs = 0
        self.write_lock = threading.Lock()
        self._cond = threading.Condition()
        self._active = 0  # transactions of this process in progress
        self._resizing = False
        self.pid = current_pid()
        self.env = self._open(map_size)
        self.max_key: int = self.env.max_key_size()
        self.map_size: int = self.env.info()["map_size"]
        self.dbs: dict[str, Any] = {}

    def _open(self, map_size: int) -> Any:
        inherited = any(path == self.path for path, _ in _ABANDONED)
        try:
            with _lift_open_guard(inherited):
                return lmdb.open(
                    self.path,
                    map_size=map_size,
                    subdir=True,
                    readonly=self.readonly,
                    create=not self.readonly,
                    sync=self.durability == "fsync",
                    metasync=True,
                    max_dbs=MAX_DBS,
                    max_readers=MAX_READERS,
                    lock=True,
                    readahead=True,
                    writemap=False,
                    max_spare_txns=4,
                )
        except lmdb.Error as e:
            raise _translate(e, f"opening {self.path!r}") from e

    def check_marker(self, marker: str | None, ours: Iterable[str] = ()) -> None:
        """Refuse an environment that holds data but not ``marker``: it is not ours to change.

        An environment holding only tables we declare is ours mid-creation (another process
        is creating the same log right now and has not written ``marker`` yet).
        """
        if marker is None:
            return
        try:
            with self.env.begin(write=False) as txn:
                names = [bytes(k).decode("utf-8", "replace") for k, _ in txn.cursor()]
        except lmdb.Error as e:
            raise _translate(e, f"opening {self.path!r}") from e
        if names and marker not in names and not set(names) <= set(ours):
            raise NotALog(
                f"{self.path!r} is an LMDB environment but not a ckptlog log (it holds "
                f"{', '.join(sorted(names)[:5])}, no {marker!r} table); pass a new or ckptlog path"
            )

    def open_tables(self, tables: Iterable[str]) -> None:
        for name in tables:
            if name in self.dbs:
                continue
            try:
                if self.readonly:
                    try:
                        self.dbs[name] = self.env.open_db(name.encode(), create=False)
                    except lmdb.NotFoundError:
                        self.dbs[name] = None  # absent in a read-only log: reads see it empty
                else:
                    self.dbs[name] = self.env.open_db(name.encode(), create=True)
            except lmdb.Error as e:
                raise _translate(e, f"opening table {name!r} in {self.path!r}") from e

    def after_fork(self, tables: Iterable[str]) -> None:
        """Called in a forked child: abandon (never close) the inherited env and open anew."""
        _ABANDONED.append((self.path, self.env))
        tables = [*self.dbs, *tables]  # every table any backend sharing this env declared
        self.write_lock = threading.Lock()
        self._cond = threading.Condition()
        self._active = 0
        self._resizing = False
        self.pid = current_pid()
        self.env = self._open(self.map_size)
        self.max_key = self.env.max_key_size()
        self.dbs = {}
        self.open_tables(tables)

    def begin(self, write: bool, path: str) -> Any:
        """A transaction (the caller holds :meth:`active`); ``None`` if the map was resized."""
        try:
            return self.env.begin(write=write)
        except lmdb.MapResizedError:
            return None
        except lmdb.Error as e:
            raise _translate(e, f"{'writing' if write else 'reading'} {path!r}") from e

    def active(self) -> _Active:
        """Held around every transaction of this process, so a resize waits for none to run."""
        return _Active(self)

    def enter(self) -> None:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._active += 1

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            if self._resizing:  # only a resize waits for the count to drop
                self._cond.notify_all()

    def grow(self) -> bool:
        """Double the map (bounded); ``False`` when already at the bound."""
        with self._cond:
            if self.map_size >= self.map_size_max:
                return False
            self._resizing = True
            try:
                while self._active > 0:
                    self._cond.wait()
                self.map_size = min(self.map_size * 2, self.map_size_max)
                self.env.set_mapsize(self.map_size)
            finally:
                self._resizing = False
                self._cond.notify_all()
        return True

    def adopt_resize(self) -> None:
        """Another process grew the map: adopt its size (``set_mapsize(0)``)."""
        with self._cond:
            self._resizing = True
            try:
                while self._active > 0:
                    self._cond.wait()
                self.env.set_mapsize(0)
                self.map_size = self.env.info()["map_size"]
            finally:
                self._resizing = False
                self._cond.notify_all()


class _WriteScope:
    """``with backend.write() as txn``: commit on a clean exit, abort on an exception.

    A plain class rather than a generator context manager: it runs around every commit. A
    transaction aborted for lack of map space grows the map (outside any transaction) and
    raises :class:`RetryableWrite`, as does one that found the map resized by another process.
    """

    __slots__ = ("env", "path", "txn")

    def __init__(self, path: str, env: _Env) -> None:
        self.path = path
        self.env = env
        self.txn: Any = None

    def __enter__(self) -> WriteTxn:
        env = self.env
        env.write_lock.acquire()
        try:
            env.enter()
            try:
                self.txn = env.begin(True, self.path)
            except BaseException:
                env.leave()
                raise
        except BaseException:
            env.write_lock.release()
            raise
        if self.txn is None:  # another process grew the map
            env.leave()
            env.write_lock.release()
            env.adopt_resize()
            raise RetryableWrite(f"{self.path!r}: another process grew the map; retry")
        return _LmdbWrite(self.txn, env.dbs, env.max_key)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        env, txn = self.env, self.txn
        full: lmdb.Error | None = None
        try:
            if exc is None:
                try:
                    txn.commit()
                    return
                except lmdb.MapFullError as e:
                    txn.abort()
                    full = e
                except lmdb.Error as e:
                    txn.abort()
                    raise _translate(e, f"writing {self.path!r}") from e
            else:
                txn.abort()
                if isinstance(exc, lmdb.MapFullError):
                    full = exc
                elif isinstance(exc, lmdb.Error):
                    raise _translate(exc, f"writing {self.path!r}") from exc
                else:
                    return  # the exception propagates
        finally:
            env.leave()
            env.write_lock.release()
        # Aborted for lack of space: grow outside any transaction, then let the caller retry.
        if env.grow():
            raise RetryableWrite(
                f"{self.path!r}: the map grew to {env.map_size} bytes; retry"
            ) from full
        raise StorageFull(
            f"{self.path!r}: the log reached map_size_max={env.map_size_max} bytes; "
            "open it with a larger map_size_max, or compact it"
        ) from full


class _Active:
    """``with env.active():`` (a plain class: cheaper than a generator context manager, and
    it runs around every transaction)."""

    __slots__ = ("env",)

    def __init__(self, env: _Env) -> None:
        self.env = env

    def __enter__(self) -> None:
        self.env.enter()

    def __exit__(self, *exc: object) -> None:
        self.env.leave()


_REGISTRY: dict[str, _Env] = {}
_REGISTRY_LOCK = threading.Lock()
_ABANDONED: list[tuple[str, Any]] = []  # (path, env) inherited envs a forked child never closes


def _no_env_keys(path: str, subdir: bool) -> tuple[()]:
    return ()


@contextmanager
def _lift_open_guard(lift: bool) -> Iterator[None]:
    """Let one ``lmdb.open`` past py-lmdb's "already open in this process" guard.

    A forked child keeps the parent's environment open (abandoned: closing it would clear the
    parent's reader slots in the shared lock file) and must open its own on the same files, which
    py-lmdb 3 refuses by file identity, with no public way around it. The guard asks
    ``lmdb._envid.env_keys`` for that identity, so answering "no files" for this one open lets it
    through; the new handle is the only one the child uses, which is what the guard protects.
    """
    if not lift or _lmdb_envid is None:
        yield
        return
    env_keys = _lmdb_envid.env_keys
    _lmdb_envid.env_keys = _no_env_keys
    try:
        yield
    finally:
        _lmdb_envid.env_keys = env_keys


class _LmdbRead(ReadTxn):
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
        db = self._db(table)
        if db is None or not key:  # LMDB rejects an empty key; none can be stored anyway
            return None
        try:
            value: bytes | None = self._txn.get(key, db=db)
        except lmdb.Error as e:
            raise _translate(e, "reading") from e
        return value

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
            raise _translate(e, "scanning") from e

    def _scan_raw(
        self, db: Any, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
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

    def prefix_rows(self, table: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        # Chunks of growing size read in C (islice over iternext), each cut at the end of the
        # prefix by a bisection: about 0.1 us a row instead of a generator step per row.
        db = self._db(table)
        if db is None:
            return []
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
            raise _translate(e, "scanning") from e

    def last_key(self, table: str) -> bytes | None:
        db = self._db(table)
        if db is None:
            return None
        cur = self._txn.cursor(db=db)
        if not cur.last():
            return None
        key: bytes = cur.key()
        return key

    def count(self, table: str) -> int:
        db = self._db(table)
        if db is None:
            return 0
        n: int = self._txn.stat(db)["entries"]
        return n


class _LmdbWrite(_LmdbRead, WriteTxn):
    def __init__(self, txn: Any, dbs: dict[str, Any], max_key: int) -> None:
        super().__init__(txn, dbs)
        self._max_key = max_key

    def _check_key(self, key: bytes) -> None:
        if not isinstance(key, bytes) or not key:
            raise CheckpointError(f"backend keys must be non-empty bytes, got {key!r}")
        if len(key) > self._max_key:
            raise CheckpointError(
                f"key of {len(key)} bytes exceeds the LMDB limit of {self._max_key} bytes"
            )

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._check_key(key)
        self._txn.put(key, value, db=self._db(table))

    def delete(self, table: str, key: bytes) -> bool:
        if not key:  # LMDB rejects an empty key; none can be stored anyway
            return False
        deleted: bool = self._txn.delete(key, db=self._db(table))
        return deleted

    def append(self, table: str, key: bytes, value: bytes) -> None:
        self._check_key(key)
        last = self.last_key(table)
        if last is not None and key <= last:
            raise CheckpointError(
                f"append to table {table!r} needs a key greater than the last one "
                f"({last.hex()}), got {key.hex()}"
            )
        self._txn.put(key, value, db=self._db(table), append=True)

    def _check_keys(self, pairs: list[tuple[bytes, bytes]]) -> None:
        limit = self._max_key
        for key, _ in pairs:
            if type(key) is not bytes or not 0 < len(key) <= limit:
                self._check_key(key)  # raises with the message for the offending key

    def put_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        self._check_keys(pairs)
        db = self._db(table)
        if len(pairs) <= _CURSOR_FROM:
            put = self._txn.put
            for key, value in pairs:
                put(key, value, db=db)
            return
        with self._txn.cursor(db=db) as cur:
            cur.putmulti(pairs, dupdata=True, overwrite=True, append=False)

    def append_many(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        if not pairs:
            return
        self._check_keys(pairs)
        check_ascending(table, None, pairs)  # among themselves; LMDB checks the first below
        db = self._db(table)
        first_key, first_value = pairs[0]
        # MDB_APPEND refuses (returns False, writes nothing) a key not above the table's last:
        # so the first put proves the whole run lands at the end, and the rest may follow.
        if not self._txn.put(first_key, first_value, db=db, append=True):
            check_ascending(table, self.last_key(table), pairs)  # raises, naming the keys
            raise CheckpointError(f"LMDB refused to append key {first_key.hex()} to {table!r}")
        if len(pairs) > 1:
            with self._txn.cursor(db=db) as cur:
                cur.putmulti(pairs[1:], dupdata=True, overwrite=True, append=True)


_CURSOR_FROM = 4  # put_many of more pairs than this goes through one cursor's putmulti


class LmdbBackend(Backend):
    """Named tables in one LMDB environment (a directory holding ``data.mdb``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        tables: Iterable[str],
        durability: Durability | str = "fsync",
        readonly: bool = False,
        map_size_initial: int = MAP_SIZE_INITIAL,
        map_size_max: int = MAP_SIZE_MAX,
        marker_table: str | None = None,
    ) -> None:
        self.durability = check_durability(durability)
        self.readonly = readonly
        self._tables = tuple(tables)
        p = Path(path)
        if readonly and not (p / DATA_FILE).exists():
            raise NotALog(
                f"no ckptlog log at {str(p)!r}: expected a directory holding {DATA_FILE}; "
                "check the path, or open it writable to create a new log"
            )
        if p.exists() and not p.is_dir():
            raise NotALog(
                f"{str(p)!r} is a file, but a ckptlog log is a directory holding {DATA_FILE}; "
                "pass the directory (a new path creates a new log)"
            )
        if not readonly:
            if p.is_dir() and not (p / DATA_FILE).exists() and any(p.iterdir()):
                raise NotALog(
                    f"{str(p)!r} is a non-empty directory without {DATA_FILE}, so not a ckptlog "
                    "log; pass a new path or an existing log"
                )
            p.mkdir(parents=True, exist_ok=True)
        self._path = os.path.realpath(p)
        with _REGISTRY_LOCK:
            env = _REGISTRY.get(self._path)
            if env is not None and env.pid != current_pid():
                env.after_fork(())
            if env is None or env.refs == 0:
                env = _Env(
                    self._path,
                    self.durability,
                    readonly,
                    max(map_size_initial, 1 << 20),
                    map_size_max,
                )
                try:
                    env.check_marker(marker_table, self._tables)
                except BaseException:
                    env.env.close()
                    raise
                _REGISTRY[self._path] = env
            elif env.durability != self.durability or env.readonly != readonly:
                raise CheckpointError(
                    f"{self._path!r} is already open in this process with "
                    f"durability={env.durability!r}, readonly={env.readonly}; one process "
                    "opens a path with one setting: share that log object instead"
                )
            env.open_tables(self._tables)
            env.refs += 1
        self._env: _Env | None = env

    @property
    def location(self) -> str:
        return self._path

    @property
    def max_key_bytes(self) -> int:
        return self._handle().max_key

    def _handle(self) -> _Env:
        env = self._env
        if env is None:
            raise LogClosed(f"the LMDB backend at {self._path!r} is closed; open it again")
        if env.pid != current_pid():
            with _REGISTRY_LOCK:
                if env.pid != current_pid():
                    env.after_fork(self._tables)
        return env

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        env = self._handle()
        for _ in range(3):
            with env.active():
                txn = env.begin(False, self._path)
                if txn is not None:
                    with txn:
                        yield _LmdbRead(txn, env.dbs)
                    return
            env.adopt_resize()
        raise StorageError(f"{self._path!r}: the map kept being resized by another process")

    def write(self) -> _WriteScope:
        env = self._handle()  # first, so a closed backend says LogClosed even when read-only
        if self.readonly:
            raise ReadOnlyLog(f"{self._path!r} was opened read-only; open it writable to change it")
        return _WriteScope(self._path, env)

    def sync(self) -> None:
        env = self._handle()
        if self.readonly:
            return
        try:
            env.env.sync(True)
        except lmdb.Error as e:
            raise _translate(e, f"syncing {self._path!r}") from e

    def close(self) -> None:
        env, self._env = self._env, None
        if env is None:
            return
        with _REGISTRY_LOCK:
            env.refs -= 1
            if env.refs == 0 and env.pid == current_pid():
                if not env.readonly and env.durability == "process":
                    env.env.sync(True)
                env.env.close()
                if _REGISTRY.get(self._path) is env:
                    del _REGISTRY[self._path]

    def size_bytes(self) -> int:
        try:
            return os.stat(os.path.join(self._path, DATA_FILE)).st_size
        except FileNotFoundError:
            return 0

    @property
    def map_size(self) -> int:
        return self._handle().map_size
