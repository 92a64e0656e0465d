"""LMDB backend: the environment, its locks and commits (with :mod:`backends.lmdb_txn`, its
transactions, and :mod:`backends.lmdb_errors`, the only modules that import ``lmdb``; the
salvage probe imports it in a forked child).

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
- A log's layout is read from its file at every open: a ``rows:`` sub-database means its
  per-stream tables are folded into it (:mod:`backends.lmdb_fold`), none means one
  sub-database per table; a new log folds (``folded_tables``), an existing one keeps its layout.
- The map starts at ``map_size_initial`` and doubles on ``MapFullError`` up to
  ``map_size_max``; growing waits until no transaction of this process is active (an LMDB
  requirement of ``mdb_env_set_mapsize``). Past the bound the write raises ``StorageFull``.
- ``"fsync"`` durability opens the environment with ``sync=True`` (data then meta page flushed
  in order at each commit, LMDB's crash-safe default); ``"process"`` uses ``sync=False``, which
  survives a killed process because committed pages are in the OS page cache, and
  :meth:`LmdbBackend.sync` flushes on demand.
- Every write transaction (and the one that opens tables) runs under the writers' lock: an
  exclusive ``flock`` on ``data.mdb`` through a descriptor of the writable handle, taken after
  the in-process ``write_lock`` and dropped after commit or abort. So at most one thread of all
  processes ever asks for LMDB's own cross-process writer mutex, which is never contended
  (contended, it could lose a wakeup after writers were killed and hang a survivor forever);
  the kernel drops the lock of a process that dies. Read-only handles never take it. A forked
  child closes its copy of the descriptor at once (``flock`` belongs to the shared open file
  description) and opens its own on first use.
- Under that lock, a write first checks that ``data.mdb`` still has a link (``fstat``): a
  data file deleted since this handle opened it (the directory removed and created again)
  raises :class:`LogReplaced` instead of acknowledging writes no other process can see; a new
  open of the path then gets a handle on the new files.
- A new log's ``data.mdb`` is built under a temporary name in the directory and hard-linked
  into place whole (see :func:`_create_data_file`): a failed or concurrent creation never
  leaves a truncated data file.
- Every name a log relies on is durable before the open returns: each directory created is
  fsynced into its parent, and the log directory is fsynced after ``data.mdb`` is linked
  (:mod:`backends.dirsync`); a writable ``"fsync"`` open of an existing log fsyncs the
  directory and its parent too, since the process that created it may not have yet.
"""

from __future__ import annotations

import errno
import fcntl
import importlib
import os
import secrets
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NoReturn

import lmdb

from backends import lmdb_fold, lmdb_meta, lmdb_wal
from backends.base import (
    Backend,
    Durability,
    RetryableWrite,
    WriteTxn,
    check_durability,
    current_pid,
)
from backends.dirsync import make_dirs, sync_directory
from backends.lmdb_errors import DISK_FULL, FREE_SPACE, translate
from backends.lmdb_fold import Folded
from backends.lmdb_txn import LmdbLoggedWrite, LmdbRead, LmdbWrite
from eventlog.errors import (
    CheckpointError,
    DamagedLog,
    LogClosed,
    LogReplaced,
    NotALog,
    ReadOnlyLog,
    StorageError,
    StorageFull,
)

try:  # py-lmdb 3 refuses to open one environment twice in a process (see _lift_open_guard)
    _lmdb_envid: Any = importlib.import_module("lmdb._envid")
except ImportError:  # pragma: no cover - a py-lmdb without lmdb._envid: nothing to lift
    _lmdb_envid = None

MAP_SIZE_INITIAL = 1 << 30  # 1 GiB of address space; costs nothing until pages are written
MAP_SIZE_MAX = 1 << 40  # 1 TiB: free to reserve on 64-bit without writemap (DESIGN §11)
_flock = fcntl.flock
_links_and_size = lmdb_wal.links_and_size  # (no timestamps read: see there)
_LOCK_EX = fcntl.LOCK_EX
_LOCK_UN = fcntl.LOCK_UN
MAX_DBS = 64
MAX_READERS = 1024
DATA_FILE = "data.mdb"
LOCK_FILE = "lock.mdb"
CREATING_PREFIX = ".ckptlog-creating."  # a data file being created, linked to DATA_FILE when whole


class _Env:
    """One process's handle on one LMDB environment, shared by every backend on that path."""

    def __init__(
        self,
        path: str,
        durability: Durability,
        readonly: bool,
        map_size: int,
        map_max: int,
        seg_fd: int | None = None,
    ) -> None:
        self.path = path
        # The write-ahead segment (backends/lmdb_wal.py): its descriptor (holding a shared
        # flock while this handle is open), the header and record tail last seen, and the pin.
        self.seg_fd = seg_fd
        self.seg_header: lmdb_wal.Header | None = None
        self.seg_tail = 0
        self.seg_last = 0
        self.pin: Any = None
        self.pin_id = -1
        self.pin_generation = 0
        self.seg_base_bytes = 0  # the data file's size at this process's last checkpoint
        self.data_bytes = 0  # its size when this process's current write transaction began
        self.statx_buf = lmdb_wal.statx_buffer()  # (used under write_lock only)
        self.durability = durability
        self.readonly = readonly
        self.map_size_max = map_max
        self.refs = 0
        self.write_lock = threading.Lock()
        # The resize condition's lock, taken directly around every transaction (its C-level
        # ``with`` costs less than the Condition's Python-level one).
        self._mutex = threading.RLock()
        self._cond = threading.Condition(self._mutex)
        self._active = 0  # transactions of this process in progress
        self._resizing = False
        self.pid = current_pid()
        self.env = self._open(map_size)
        self.lock_fd: int | None = None
        try:
            self.ident = _identity(path)
            # The fold (backends/lmdb_fold.py): its sub-database's name and tables, when the
            # log keeps its per-stream tables in one; its keys take a byte of LMDB's key limit.
            self.fold = lmdb_fold.parse(_main_names(self.env, path))
            if not readonly:
                self.lock_fd = _open_lock(path)
        except BaseException:
            self.env.close()
            raise
        _LOCKABLE.add(self)
        self.max_key: int = self.env.max_key_size() - (self.fold is not None)
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
                    sync=False,  # durability comes from the segment (or is "process")
                    metasync=True,
                    max_dbs=MAX_DBS,
                    max_readers=MAX_READERS,
                    lock=self._lock_needed(),
                    readahead=True,
                    writemap=False,
                    max_spare_txns=4,
                )
        except lmdb.Error as e:
            raise translate(e, f"opening {self.path!r}") from e

    def _lock_needed(self) -> bool:
        """LMDB's reader table (``lock.mdb``), except for a read-only open that could not use it:
        no ``lock.mdb`` (nobody has the log open: opening must not create one in evidence) or
        one we may not write (a read-only copy: a writer could not open it either)."""
        if not self.readonly:
            return True
        lock_file = os.path.join(self.path, "lock.mdb")
        return os.path.exists(lock_file) and os.access(lock_file, os.W_OK)

    def check_marker(self, marker: str | None, ours: Iterable[str] = ()) -> None:
        """Refuse an environment that holds data but not ``marker``: it is not ours to change.

        An environment holding only tables we declare is ours mid-creation (another process
        is creating the same log right now and has not written ``marker`` yet).
        """
        if marker is None:
            return
        names = _main_names(self.env, self.path)
        ours = {*ours, *(() if self.fold is None else (self.fold[0],))}
        if names and marker not in names and not set(names) <= ours:
            raise NotALog(
                f"{self.path!r} is an LMDB environment without a {marker!r} table (it holds "
                f"{', '.join(sorted(names)[:5])}): either not a ckptlog log (pass a new or "
                "ckptlog path) or a ckptlog log whose root page is damaged (restore it from a "
                "backup; `ckptlog verify PATH` reports what is readable)"
            )

    def open_tables(self, tables: Iterable[str]) -> None:
        names = [name for name in dict.fromkeys(tables) if name not in self.dbs]
        if not names:
            return
        if self.readonly:
            for name in names:
                try:
                    db = self.env.open_db(name.encode(), create=False)
                    if self.fold is not None and name in self.fold[1]:  # (db: its marker)
                        rows = self.env.open_db(self.fold[0].encode(), create=False)
                        db = Folded(rows, name, self.fold[1].index(name), self.max_key)
                    self.dbs[name] = db
                except lmdb.NotFoundError:
                    self.dbs[name] = None  # absent in a read-only log: reads see it empty
                except lmdb.Error as e:
                    raise translate(e, f"opening table {name!r} in {self.path!r}") from e
            return
        # Creating a table takes a write transaction: one for all, under the writers' lock.
        with self.write_lock:
            self.lock_writers()
            try:
                opened = _create_tables(self.env, names, self.path, self.fold, self.max_key)
            finally:
                self.unlock_writers()
        self.dbs.update(opened)

    def lock_writers(self) -> None:
        """Take the writers' OS lock (held around each write transaction; see the module doc).

        Blocks until every other process's write transaction has ended; the kernel drops the
        lock of a process that dies, so a killed writer never holds it. Raises
        :class:`LogReplaced` when the data file was deleted since this process opened it.
        """
        fd = self.lock_fd
        if fd is None:
            return
        _flock(fd, _LOCK_EX)
        if _links_and_size(fd)[0] == 0:
            self.refuse_replaced()

    def refuse_replaced(self) -> NoReturn:
        """Drop the writers' lock and raise :class:`LogReplaced`."""
        self.unlock_writers()
        raise LogReplaced(
            f"{self.path!r}: the log's {DATA_FILE} was deleted or replaced after this "
            "process opened it (was the directory removed and created again?); a write "
            "now would reach no other process, so nothing was written: close the log and "
            "open it again"
        )

    def unlock_writers(self) -> None:
        if self.lock_fd is not None:
            _flock(self.lock_fd, _LOCK_UN)

    def replaced(self) -> bool:
        """Whether the data file at our path is no longer the one this handle has open."""
        try:
            return _identity(self.path) != self.ident
        except OSError:
            return True

    def close(self) -> None:
        if self.seg_fd is not None and not self.readonly and self.durability == "fsync":
            with suppress(CheckpointError, OSError, lmdb.Error):
                self.checkpoint_now()  # the next open then has nothing to re-apply
        self.drop_pin()
        self.env.close()
        self.drop_lock()
        fd, self.seg_fd = self.seg_fd, None
        if fd is not None:
            os.close(fd)

    def drop_pin(self) -> None:
        pin, self.pin, self.pin_id = self.pin, None, -1
        if pin is not None:
            pin.abort()

    def repin(self, generation: int) -> None:
        """Pin the current snapshot (the caller holds the writers' lock, and that snapshot is
        the checkpoint of header ``generation``)."""
        self.drop_pin()
        self.pin = self.env.begin(write=False)
        self.pin_id = self.pin.id()
        self.pin_generation = generation

    def checkpoint_now(self) -> None:
        """Sync LMDB and record the checkpoint, when records follow the last one."""
        fd = self.seg_fd
        if fd is None or self.lock_fd is None:
            return
        with self.write_lock:
            self.lock_writers()
            try:
                header = lmdb_wal.read_header(fd)
                if header is not None and not lmdb_wal.read_records(fd, header):
                    return
                self.env.sync(True)
                txn_id = self.env.info()["last_txnid"]
                self.seg_header = lmdb_wal.write_checkpoint(fd, self.lock_fd, header, txn_id)
                self.seg_tail, self.seg_last = self.seg_header.records_at, txn_id
            finally:
                self.unlock_writers()

    def drop_lock(self) -> None:
        """Close this handle's lock descriptor (in a forked child: the parent's lock lives on)."""
        fd, self.lock_fd = self.lock_fd, None
        if fd is not None:
            os.close(fd)

    def after_fork(self, tables: Iterable[str]) -> None:
        """Called in a forked child: abandon (never close) the inherited env and open anew."""
        _ABANDONED.append((self.path, self.env))
        if self.pin is not None:  # never aborted here: that would clear the parent's reader slot
            _ABANDONED.append((self.path, self.pin))
        self.pin, self.pin_id, self.seg_header = None, -1, None
        if self.seg_fd is not None:  # the parent's description keeps its own shared lock
            os.close(self.seg_fd)
            self.seg_fd = (
                _open_segment_readonly(self.path)
                if self.readonly
                else lmdb_wal.open_segment(self.path)
            )
            if self.seg_fd is not None:
                lmdb_wal.share(self.seg_fd)
        tables = [*self.dbs, *tables]  # every table any backend sharing this env declared
        self.write_lock = threading.Lock()
        self._mutex = threading.RLock()
        self._cond = threading.Condition(self._mutex)
        self._active = 0
        self._resizing = False
        self.pid = current_pid()
        self.env = self._open(self.map_size)
        self.drop_lock()  # already closed by _after_fork_in_child; a no-op then
        if not self.readonly:
            self.lock_fd = _open_lock(self.path)
        self.max_key = self.env.max_key_size() - (self.fold is not None)
        self.dbs = {}
        self.open_tables(tables)

    def begin(self, write: bool, path: str) -> Any:
        """A transaction (the caller holds :meth:`active`); ``None`` if the map was resized."""
        try:  # (db, parent, write) positional: py-lmdb parses keywords slower
            return self.env.begin(None, None, write)
        except lmdb.MapResizedError:
            return None
        except lmdb.Error as e:
            raise translate(e, f"{'writing' if write else 'reading'} {path!r}") from e

    def active(self) -> _Active:
        """Held around every transaction of this process, so a resize waits for none to run."""
        return _Active(self)

    def enter(self) -> None:
        with self._mutex:
            while self._resizing:
                self._cond.wait()
            self._active += 1

    def leave(self) -> None:
        with self._mutex:
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
                self.drop_pin()  # the next commit checkpoints and pins again
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
                self.drop_pin()
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

    __slots__ = ("env", "ops", "path", "txn")

    def __init__(self, path: str, env: _Env) -> None:
        self.path = path
        self.env = env
        self.txn: Any = None
        self.ops: list[tuple[str, bytes, bytes | None]] | None = None

    def __enter__(self) -> WriteTxn:
        # (env.lock_writers inline, with the data file's size read by the same statx)
        env = self.env
        env.write_lock.acquire()
        try:
            fd = env.lock_fd
            if fd is not None:
                _flock(fd, _LOCK_EX)
                # (the data file's size: the segment's growth bound)
                links, env.data_bytes = _links_and_size(fd, env.statx_buf)
                if links == 0:
                    env.refuse_replaced()
            try:
                env.enter()
                try:
                    self.txn = env.begin(True, self.path)
                except BaseException:
                    env.leave()
                    raise
            except BaseException:
                env.unlock_writers()
                raise
        except BaseException:
            env.write_lock.release()
            raise
        if self.txn is None:  # another process grew the map
            env.leave()
            env.unlock_writers()
            env.write_lock.release()
            env.adopt_resize()
            raise RetryableWrite(f"{self.path!r}: another process grew the map; retry")
        if env.seg_fd is not None and env.durability == "fsync":
            ops: list[tuple[str, bytes, bytes | None]] = []
            self.ops = ops
            return LmdbLoggedWrite(self.txn, env.dbs, env.max_key, ops)
        self.ops = None
        return LmdbWrite(self.txn, env.dbs, env.max_key)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        env, txn = self.env, self.txn
        full: lmdb.Error | None = None
        try:
            if exc is None:
                try:
                    if env.seg_fd is None:
                        txn.commit()
                    else:
                        _commit_with_segment(env, txn, self.path, self.ops)
                    return
                except lmdb.MapFullError as e:
                    txn.abort()
                    full = e
                except lmdb.Error as e:
                    txn.abort()
                    raise translate(e, f"writing {self.path!r}", self.path) from e
            else:
                txn.abort()
                if isinstance(exc, lmdb.MapFullError):
                    full = exc
                elif isinstance(exc, lmdb.Error):
                    raise translate(exc, f"writing {self.path!r}", self.path) from exc
                else:
                    return  # the exception propagates
        finally:
            env.leave()
            if env.lock_fd is not None:
                _flock(env.lock_fd, _LOCK_UN)
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


def _commit_with_segment(
    env: _Env, txn: Any, path: str, ops: list[tuple[str, bytes, bytes | None]] | None
) -> None:
    """Commit ``txn`` (under the writers' lock) by the segment's rules (backends/lmdb_wal.py):
    a redo record appended and fdatasynced, then LMDB committed without sync; or, when a
    record may not be used, a checkpoint (LMDB committed and synced, the header rewritten)."""
    fd = env.seg_fd
    assert fd is not None
    tid: int = txn.id()
    try:
        header = lmdb_wal.read_header(fd)
        if header is None or (header is not env.seg_header and header != env.seg_header):
            env.seg_header = header
            env.seg_tail = 0 if header is None else header.records_at
            env.seg_last = 0 if header is None else header.checkpoint
        if header is not None and tid - 1 != env.seg_last:
            # Another process committed since (else no record can follow ours: at most a
            # record of a transaction that failed to commit, which ours overwrites).
            while True:  # past the records other processes appended since
                end = lmdb_wal.next_record_end(
                    fd, env.seg_tail, header.generation, env.seg_last + 1
                )
                if end is None:
                    break
                env.seg_tail, env.seg_last = end, env.seg_last + 1
        if header is not None and 0 <= env.pin_id < header.checkpoint:
            # Another process checkpointed since this one pinned. An older pin is still safe
            # but keeps every page freed since from reuse: move it to the new checkpoint when
            # nothing was committed after it, or checkpoint here when it lags two behind.
            if tid - 1 == header.checkpoint:
                env.repin(header.generation)
            elif header.generation - env.pin_generation >= 2:
                env.drop_pin()
        pinned = header is not None and 0 <= env.pin_id <= header.checkpoint
        if pinned and header is not None:
            if ops is not None and not ops:
                txn.commit()  # nothing written: LMDB makes no new transaction of it
                return
            if (
                ops is not None
                and env.seg_last == tid - 1
                and env.seg_last - header.checkpoint < lmdb_wal.RECORDS_MAX
                and env.data_bytes - env.seg_base_bytes < lmdb_wal.GROWTH_MAX_BYTES
            ):
                rec = lmdb_wal.record_bytes(header.generation, tid, ops)
                if env.seg_tail + len(rec) <= lmdb_wal.SEGMENT_BYTES:
                    os.pwrite(fd, rec, at := env.seg_tail)
                    os.fdatasync(fd)  # the one device flush of a durable commit
                    try:
                        txn.commit()
                    except BaseException:
                        _unwrite(fd, at)
                        raise
                    env.seg_tail, env.seg_last = at + len(rec), tid
                    lmdb_wal.start_writeback(env.lock_fd, header, tid)
                    return
            elif (
                ops is None
                and env.seg_last == header.checkpoint
                and tid - header.checkpoint <= lmdb_wal.PROCESS_COMMITS_MAX
                and env.data_bytes - env.seg_base_bytes < lmdb_wal.PROCESS_GROWTH_MAX_BYTES
            ):
                _commit_unrecorded(env, txn, header, tid)
                return
        # A checkpoint: this commit synced by LMDB, then recorded as the segment's base.
        txn.commit()
        env.env.sync(True)
        assert env.lock_fd is not None
        env.seg_header = lmdb_wal.write_checkpoint(fd, env.lock_fd, header, tid)
        env.seg_tail, env.seg_last = env.seg_header.records_at, tid
        env.seg_base_bytes = _links_and_size(env.lock_fd)[1]
        env.repin(env.seg_header.generation)
    except OSError as e:
        with suppress(lmdb.Error):
            txn.abort()
        raise _os_error(e, f"writing {path!r}", path) from e


def _commit_unrecorded(env: _Env, txn: Any, header: lmdb_wal.Header, tid: int) -> None:
    """A "process" commit under the pin: nothing to re-apply depends on it, so no record;
    its pages start on their way to the device, so that the checkpoint's sync finds few left
    (as a durable commit's do)."""
    txn.commit()
    lmdb_wal.start_writeback(env.lock_fd, header, tid)


def _unwrite(fd: int, at: int) -> None:
    """Erase a record whose transaction did not commit (best effort, synced)."""
    with suppress(OSError):
        os.pwrite(fd, bytes(32), at)
        os.fdatasync(fd)


def _os_error(e: OSError, where: str, path: str) -> CheckpointError:
    if e.errno == errno.ENOSPC:
        return StorageError(errno.ENOSPC, f"{where}: {DISK_FULL} ({e}). {FREE_SPACE}")
    return StorageError(
        e.errno or errno.EIO,
        f"{where}: the write-ahead segment could not be written ({e}): nothing of this write "
        "was committed. Check the device (dmesg, SMART) before writing again",
    )


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
_LOCKABLE: weakref.WeakSet[_Env] = weakref.WeakSet()  # every handle that may hold a lock fd


def _after_fork_in_child() -> None:
    """A forked child closes its copies of the parent's lock descriptors at once.

    ``flock`` belongs to the open file description, which the child shares: holding a copy
    would keep the parent's lock alive after the parent died, and unlocking through it would
    drop the parent's lock. The child opens its own description when it first writes.
    """
    for env in list(_LOCKABLE):
        env.drop_lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def check_data_file(path: str, *, writable: bool) -> None:
    """Refuse, before LMDB maps it, a ``data.mdb`` that is shorter than its newest
    transaction (reading past its end would kill the process with SIGBUS) and, for a writable
    open, one whose meta pages disagree (LMDB would open an older transaction, and the next
    commit would overwrite the evidence). A writable open reads under the writers' lock."""
    state = lmdb_meta.read_state(os.path.join(path, DATA_FILE), lock=writable)
    if state is None:
        return
    why = state.meta_damage() if writable else None
    if why is not None:
        raise DamagedLog(why + "; it was not opened for writing (open it read-only)", kind="meta")
    why = state.truncated()
    if why is not None:
        raise DamagedLog(why, kind="truncated")


def _prepare_segment(path: str, durability: Durability, readonly: bool) -> int | None:
    """The write-ahead segment's descriptor, holding its shared ``flock`` (``None``: the log
    has none yet; a writable ``"fsync"`` open creates it once the log is known to be ours,
    :func:`_attach_segment`). The first process to open the log (no other holds the flock)
    recovers from it first."""
    fd = lmdb_wal.open_segment(path) if not readonly else _open_segment_readonly(path)
    if fd is None:
        return None
    try:
        if readonly:
            lmdb_wal.share(fd)
            return fd
        lock_fd = _open_lock(path)
        try:
            _flock(lock_fd, _LOCK_EX)
            if lmdb_wal.try_exclusive(fd):
                _recover(path, fd, lock_fd)
            lmdb_wal.share(fd)
        finally:
            os.close(lock_fd)  # (closing drops the writers' flock)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _attach_segment(env: _Env) -> None:
    """Give a writable ``"fsync"`` handle on a log without a segment a new one (its first
    commit is then a checkpoint)."""
    lmdb_wal.create_segment(env.path)
    fd = lmdb_wal.open_segment(env.path)
    if fd is not None:
        lmdb_wal.share(fd)
    env.seg_fd = fd


def _open_segment_readonly(path: str) -> int | None:
    try:
        return os.open(os.path.join(path, lmdb_wal.SEGMENT_FILE), os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, PermissionError):
        return None  # (a copy without its segment, or one we may not read: LMDB's state as is)


def _recover(path: str, fd: int, lock_fd: int) -> None:
    """First open after the last process closed, was killed or lost power: when records follow
    the checkpoint, open the checkpoint's snapshot and re-apply them in order, then
    checkpoint (backends/lmdb_wal.py). Runs under the writers' lock, before LMDB maps the
    file in this process."""
    header = lmdb_wal.read_header(fd)
    if header is None:
        return
    records = lmdb_wal.read_records(fd, header)
    if not records:
        return
    lmdb_wal.restore_metas(fd, os.path.join(path, DATA_FILE), header)
    try:
        env = lmdb.open(path, subdir=True, sync=False, max_dbs=MAX_DBS, lock=True,
                        max_readers=MAX_READERS, map_size=MAP_SIZE_INITIAL)  # fmt: skip
    except lmdb.Error as e:
        raise translate(e, f"recovering {path!r}", path) from e
    try:
        last = header.checkpoint
        fold = lmdb_fold.parse(_main_names(env, path))
        limit = env.max_key_size() - (fold is not None)
        for rec in records:
            while True:
                try:
                    with env.begin(write=True) as txn:
                        if txn.id() != rec.txn_id:
                            break
                        # (the records name logical tables: put through the log's layout)
                        tables = list(dict.fromkeys(op[0] for op in rec.ops))
                        dbs = _create_tables_in(env, txn, tables, fold, limit)
                        _apply_ops(LmdbWrite(txn, dbs, limit), rec.ops)
                    break
                except lmdb.MapFullError:
                    env.set_mapsize(env.info()["map_size"] * 2)
            if env.info()["last_txnid"] != rec.txn_id:
                break  # (a mismatch: the records after it are not this snapshot's)
            last = rec.txn_id
        env.sync(True)
        lmdb_wal.write_checkpoint(fd, lock_fd, header, last)
    except lmdb.Error as e:
        raise translate(e, f"recovering {path!r}", path) from e
    finally:
        env.close()


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(os.path.join(path, DATA_FILE))
    return st.st_dev, st.st_ino


def _open_lock(path: str) -> int:
    """A descriptor of the data file for ``flock`` (read-only: flock needs no write access)."""
    try:
        return os.open(os.path.join(path, DATA_FILE), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise StorageError(f"opening {path!r} for its writers' lock: {e}") from e


def _create_data_file(
    p: Path, tables: Iterable[str], map_size: int, folded: tuple[str, ...]
) -> None:
    """Create a new log's data file whole, or leave the directory as it was.

    The environment is built under a temporary name in the directory, with every table, and
    then hard-linked to ``data.mdb``, which therefore appears complete or not at all (a full
    disk used to leave a truncated ``data.mdb`` that every later open refused). ``link`` does
    not replace: when several processes create one log at once, the first link wins and the
    others open it. Only the temporary file this call made is removed on failure, and the
    directory only when this call made it and it is empty again. A creator killed midway leaves
    its temporary file, which later opens ignore. ``folded``: the tables the new log keeps
    in one sub-database (backends/lmdb_fold.py; empty: one sub-database per table).
    """
    made = False
    if p.is_dir():
        foreign = sorted(
            c.name
            for c in p.iterdir()
            if c.name != LOCK_FILE
            and not c.name.startswith((CREATING_PREFIX, lmdb_wal.SEGMENT_FILE))
        )
        if foreign == [DATA_FILE]:
            sync_names(p)  # another process created the log since the caller looked: use
            return  # theirs, once its name is durable (it may not have synced it yet)
        if foreign:
            raise NotALog(
                f"{str(p)!r} is a non-empty directory without {DATA_FILE}, so not a ckptlog "
                "log; pass a new path or an existing log"
            )
    else:
        made = make_dirs(p)  # each new directory fsynced into its parent
    tmp = p / f"{CREATING_PREFIX}{os.getpid()}.{secrets.token_hex(6)}"
    try:
        try:
            env = lmdb.open(
                str(tmp),
                map_size=map_size,
                subdir=False,
                lock=False,
                sync=True,
                max_dbs=MAX_DBS,
                create=True,
            )
        except lmdb.Error as e:
            raise translate(e, f"creating {str(p)!r}", str(p)) from e
        try:
            fold = (lmdb_fold.db_name(folded), folded) if folded else None
            _create_tables(env, list(dict.fromkeys(tables)), str(p), fold, 0)
        finally:
            env.close()
        try:
            os.link(tmp, p / DATA_FILE)
        except FileExistsError:
            pass  # another process created the log first: this open uses theirs
        except OSError as e:
            raise StorageError(f"creating {str(p / DATA_FILE)!r}: {e}") from e
        _remove_quietly(tmp)
        sync_names(p)  # data.mdb's name (and the temporary one's removal) now durable
    except BaseException:
        _remove_quietly(tmp)
        if made:
            with suppress(OSError):
                p.rmdir()  # only if empty: nothing of anyone else's is removed
        raise
    finally:
        _remove_quietly(tmp)


def sync_names(p: Path) -> None:
    """Make the log directory's names durable: its entries, and its own entry in its parent."""
    sync_directory(p)
    sync_directory(p.parent)


def _remove_quietly(path: Path) -> None:
    with suppress(FileNotFoundError):
        path.unlink()


def _create_tables(
    env: Any,
    names: list[str],
    path: str,
    fold: tuple[str, tuple[str, ...]] | None,
    limit: int,
) -> dict[str, Any]:
    """Open (creating when absent) ``names`` in one write transaction (see
    :func:`_create_tables_in`)."""
    try:
        with env.begin(write=True) as txn:
            return _create_tables_in(env, txn, names, fold, limit)
    except lmdb.Error as e:
        raise translate(e, f"opening tables {names} in {path!r}", path) from e


def _create_tables_in(
    env: Any, txn: Any, names: list[str], fold: tuple[str, tuple[str, ...]] | None, limit: int
) -> dict[str, Any]:
    """Open (creating when absent) ``names`` in the write transaction ``txn``; with a
    ``fold``, its sub-database too, and its tables (each also created under its own name,
    empty: see backends/lmdb_fold.py) as :class:`Folded` views of it, whose logical keys are
    at most ``limit`` bytes."""
    opened: dict[str, Any] = {}
    rows = None if fold is None else env.open_db(fold[0].encode(), txn=txn, create=True)
    for name in names:
        opened[name] = env.open_db(name.encode(), txn=txn, create=True)
        if fold is not None and name in fold[1]:
            opened[name] = Folded(rows, name, fold[1].index(name), limit)
    return opened


def _apply_ops(txn: WriteTxn, ops: list[tuple[str, bytes, bytes | None]]) -> None:
    """Re-apply a segment record's operations (backends/lmdb_wal.py) through ``txn``."""
    for table, key, value in ops:
        if value is None:
            txn.delete(table, key)
        else:
            txn.put(table, key, value)


def _main_names(env: Any, path: str) -> list[str]:
    """The names in the main database of ``env``: its sub-databases."""
    try:
        with env.begin(write=False) as txn:
            return [bytes(k).decode("utf-8", "replace") for k, _ in txn.cursor()]
    except lmdb.Error as e:
        raise translate(e, f"opening {path!r}") from e


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


class _ReadScope:
    """``with backend.read() as txn`` (a plain class: cheaper than a generator context manager,
    and a LangGraph ``get_tuple`` latest is one such read). Held inside the environment's
    :meth:`_Env.active` count; a map resized by another process is adopted and the
    transaction begun again (three times at most)."""

    __slots__ = ("backend", "env", "txn")

    def __init__(self, backend: LmdbBackend) -> None:
        self.backend = backend

    def __enter__(self) -> LmdbRead:
        backend = self.backend
        env = backend._handle()
        for _ in range(3):
            env.enter()
            try:
                txn = env.begin(False, backend._path)
            except BaseException:
                env.leave()
                raise
            if txn is not None:
                self.env, self.txn = env, txn
                return LmdbRead(txn, env.dbs)
            env.leave()
            env.adopt_resize()
        raise StorageError(f"{backend._path!r}: the map kept being resized by another process")

    def __exit__(self, *exc: Any) -> None:
        try:
            self.txn.__exit__(*exc)
        finally:
            self.env.leave()


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
        folded_tables: Iterable[str] = lmdb_fold.FOLDED,
    ) -> None:
        """``folded_tables``: the tables a new log keeps in one sub-database, in this order
        (backends/lmdb_fold.py; ``()``: one each, the layout of logs made before the fold).
        An existing log keeps the layout it was created with."""
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
        if not readonly and not (p / DATA_FILE).exists():
            folded = tuple(dict.fromkeys(folded_tables))
            if len(folded) > lmdb_fold.MAX_TABLES or any("," in t for t in folded):
                raise CheckpointError(
                    f"folded_tables: expected at most {lmdb_fold.MAX_TABLES} names without "
                    f"commas, got {folded!r}; pass fewer tables (or () for none)"
                )
            _create_data_file(p, self._tables, max(map_size_initial, 1 << 20), folded)
        elif not readonly and self.durability == "fsync":
            sync_names(p)  # its creator may still be between its link and its fsync
        self._path = os.path.realpath(p)
        with _REGISTRY_LOCK:
            env = _REGISTRY.get(self._path)
            if env is not None and env.pid != current_pid():
                env.after_fork(())
            if env is None or env.refs == 0 or env.replaced():
                # (replaced: the directory was deleted and created again while this process
                # held the old one open; the old handle stays with its backends, which refuse
                # to write, and this path gets a handle on the new files.)
                seg_fd = _prepare_segment(self._path, self.durability, readonly)
                try:
                    check_data_file(self._path, writable=not readonly)
                    env = _Env(
                        self._path,
                        self.durability,
                        readonly,
                        max(map_size_initial, 1 << 20),
                        map_size_max,
                        seg_fd,
                    )
                except BaseException:
                    if seg_fd is not None:
                        os.close(seg_fd)
                    raise
                try:
                    env.check_marker(marker_table, self._tables)
                    if env.seg_fd is None and not readonly and self.durability == "fsync":
                        _attach_segment(env)
                except BaseException:
                    env.close()
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

    @property
    def layout_version(self) -> int:
        """2 for a log whose per-stream tables are folded (backends/lmdb_fold.py): a ckptlog
        from before the fold would see them empty."""
        return 1 if self._handle().fold is None else 2

    def _handle(self) -> _Env:
        env = self._env
        if env is None:
            raise LogClosed(f"the LMDB backend at {self._path!r} is closed; open it again")
        if env.pid != current_pid():
            with _REGISTRY_LOCK:
                if env.pid != current_pid():
                    env.after_fork(self._tables)
        return env

    def read(self) -> _ReadScope:
        return _ReadScope(self)

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
            raise translate(e, f"syncing {self._path!r}", self._path) from e

    def close(self) -> None:
        env, self._env = self._env, None
        if env is None:
            return
        with _REGISTRY_LOCK:
            env.refs -= 1
            if env.refs == 0 and env.pid == current_pid():
                if not env.readonly and env.durability == "process":
                    env.env.sync(True)
                env.close()
                if _REGISTRY.get(self._path) is env:
                    del _REGISTRY[self._path]

    def storage_problems(self) -> list[tuple[str, str]]:
        """Damage below the frames that LMDB cannot see: meta pages that disagree (a
        read-only open maps such a file so that ``verify`` can report it)."""
        self._handle()
        state = lmdb_meta.read_state(os.path.join(self._path, DATA_FILE), lock=False)
        why = None if state is None else state.meta_damage()
        return [] if why is None else [("meta", why)]

    def size_bytes(self) -> int:
        try:
            return os.stat(os.path.join(self._path, DATA_FILE)).st_size
        except FileNotFoundError:
            return 0

    def used_bytes(self) -> int:
        """Pages of every table and of the table directory (LMDB's stats), two meta pages."""
        env = self._handle()
        try:
            with env.active(), env.env.begin(write=False) as txn:
                dbs = {id(d): d for d in (getattr(db, "db", db) for db in env.dbs.values()) if d}
                stats = [env.env.stat()] + [txn.stat(db) for db in dbs.values()]
        except lmdb.Error as e:
            raise translate(e, f"reading the page counts of {self._path!r}", self._path) from e
        pages = sum(int(s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]) for s in stats)
        return (pages + 2) * int(stats[0]["psize"])

    def add_tables(self, tables: Iterable[str], *, create: bool) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(tables))
        env = self._handle()
        if not create or self.readonly:
            try:
                with env.active(), env.env.begin(write=False) as txn:
                    held = {bytes(k).decode("utf-8", "replace") for k, _ in txn.cursor()}
            except lmdb.Error as e:
                raise translate(e, f"listing the tables of {self._path!r}") from e
            names = tuple(n for n in names if n in held)
        with _REGISTRY_LOCK:
            env.open_tables(names)
        self._tables = (*self._tables, *(n for n in names if n not in self._tables))
        return names

    @property
    def map_size(self) -> int:
        return self._handle().map_size
