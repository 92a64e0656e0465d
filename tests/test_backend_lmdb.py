"""The LMDB backend against the shared backend contract, plus what only LMDB has.

LMDB-only behaviour: map growth and its bound, fork safety, durability across a killed process,
refusing paths that are not ckptlog logs (without modifying them), and one shared environment
per path per process.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest

from backends import lmdb as lmdb_backend
from backends.base import WriteTxn
from backends.lmdb import LmdbBackend
from backends.testing import BackendContract
from eventlog.errors import CheckpointError, NotALog, StorageFull

TABLES = ("a", "b")
MiB = 1 << 20
CHILD_WAIT_S = 20.0
REPO = Path(__file__).resolve().parents[1]


def _open(path: Path | str, **kw: Any) -> LmdbBackend:
    kw.setdefault("tables", TABLES)
    return LmdbBackend(path, **kw)


def _put(table: str, key: bytes, value: bytes) -> Callable[[WriteTxn], None]:
    def fn(txn: WriteTxn) -> None:
        txn.put(table, key, value)

    return fn


def _in_child(fn: Callable[[], None]) -> int:
    """Run ``fn`` in a forked child; its exit code (0 when ``fn`` returned)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        except BaseException:  # noqa: BLE001 - the child must reach os._exit; show why it failed
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_WAIT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"forked child {pid} hung for {CHILD_WAIT_S} s")
        time.sleep(0.005)


def _fds_open_under(path: Path) -> int:
    """How many of this process's file descriptors point into ``path`` (Linux only)."""
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        pytest.skip("needs /proc/self/fd")
    root = os.path.realpath(path)
    n = 0
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(root + os.sep):
            n += 1
    return n


def _data_digest(path: Path) -> tuple[list[str], str]:
    """The files in an LMDB directory and the hash of its data file (lock.mdb changes on open)."""
    names = sorted(p.name for p in path.iterdir())
    return names, hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()


class TestLmdbBackend(BackendContract):
    """The contract and LMDB's own behaviour on a log of the layout made before the fold:
    one sub-database per table (and, in the subclass below, on tables kept in the fold)."""

    folded: tuple[str, ...] = ()

    def open(self, path: Path | str, **kw: Any) -> LmdbBackend:
        return _open(path, folded_tables=self.folded, **kw)

    def make_backend(self, tmp_path: Path, **kw: Any) -> LmdbBackend:
        return self.open(tmp_path / "log", **kw)

    # -- map growth ----------------------------------------------------------------------------

    def test_map_grows_on_demand(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        backend = self.open(path, durability="process", map_size_initial=MiB)
        assert backend.map_size == MiB
        calls = 0
        txns, per_txn, value_bytes = 10, 32, 64 * 1024  # 20 MiB in all

        def value(i: int, j: int) -> bytes:
            return bytes([i, j]) * (value_bytes // 2)

        def chunk(i: int) -> Callable[[WriteTxn], int]:
            def fn(txn: WriteTxn) -> int:
                nonlocal calls
                calls += 1
                for j in range(per_txn):
                    txn.put("a", b"%02d-%02d" % (i, j), value(i, j))
                return i

            return fn

        try:
            for i in range(txns):
                assert backend.run_write(chunk(i)) == i
            assert calls > txns  # some transactions ran again after the map grew
            assert backend.map_size >= txns * per_txn * value_bytes
            assert backend.map_size <= lmdb_backend.MAP_SIZE_MAX
            assert backend.size_bytes() >= txns * per_txn * value_bytes
            with backend.read() as r:
                assert r.count("a") == txns * per_txn
                for i in range(txns):
                    for j in range(per_txn):
                        assert r.get("a", b"%02d-%02d" % (i, j)) == value(i, j)
        finally:
            backend.close()
        # Reopened with the small initial size, the map covers the data and still grows.
        backend = self.open(path, durability="process", map_size_initial=MiB)
        try:
            before = backend.map_size
            assert before >= txns * per_txn * value_bytes
            backend.run_write(chunk(txns))
            backend.run_write(chunk(txns + 1))
            with backend.read() as r:
                assert r.count("a") == (txns + 2) * per_txn
                assert r.get("a", b"00-00") == value(0, 0)
        finally:
            backend.close()

    def test_storage_full_past_map_size_max(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        backend = self.open(path, durability="process", map_size_initial=MiB, map_size_max=2 * MiB)
        backend.run_write(_put("a", b"small", b"v"))

        def big(txn: WriteTxn) -> None:
            for j in range(64):  # 4 MiB: more than the bound
                txn.put("a", b"big%02d" % j, b"x" * (64 * 1024))

        try:
            with pytest.raises(
                StorageFull,
                match=r"reached map_size_max=2097152 bytes; open it with a larger map_size_max",
            ):
                backend.run_write(big)
            assert backend.map_size == 2 * MiB
            # Still usable: the failed transaction left nothing, reads and smaller writes work.
            with backend.read() as r:
                assert list(r.scan("a")) == [(b"small", b"v")]
            backend.run_write(_put("a", b"medium", b"m" * (256 * 1024)))
            backend.run_write(_put("b", b"tiny", b"t"))
            with backend.read() as r:
                assert r.get("a", b"medium") == b"m" * (256 * 1024)
                assert r.get("b", b"tiny") == b"t"
                assert list(r.scan_prefix("a", b"big")) == []
        finally:
            backend.close()
        backend = self.open(path, durability="process", map_size_initial=MiB, map_size_max=16 * MiB)
        try:
            backend.run_write(big)  # a larger bound lets the same write through
            with backend.read() as r:
                assert r.count("a") == 66
        finally:
            backend.close()

    # -- fork ----------------------------------------------------------------------------------

    def test_fork_child_uses_the_same_backend_object(self, tmp_path: Path) -> None:
        backend = self.make_backend(tmp_path)
        try:
            backend.run_write(_put("a", b"parent", b"1"))
            with backend.read() as r:
                assert r.get("a", b"parent") == b"1"

            def child() -> None:
                with backend.read() as r:
                    assert r.get("a", b"parent") == b"1"
                backend.run_write(_put("a", b"child", str(os.getpid()).encode()))
                with backend.read() as r:
                    assert r.count("a") == 2

            assert _in_child(child) == 0
            with backend.read() as r:
                assert r.get("a", b"parent") == b"1"
                child_pid = r.get("a", b"child")
                assert child_pid is not None
                assert int(child_pid) != os.getpid()
            backend.run_write(_put("a", b"after", b"2"))
            with backend.read() as r:
                assert [k for k, _ in r.scan("a")] == [b"after", b"child", b"parent"]
        finally:
            backend.close()

    def test_fork_while_parent_holds_a_read_txn(self, tmp_path: Path) -> None:
        backend = self.make_backend(tmp_path)
        try:
            backend.run_write(_put("a", b"k", b"old"))
            with backend.read() as r:

                def child() -> None:
                    backend.run_write(_put("a", b"k", b"new"))
                    backend.close()

                assert _in_child(child) == 0
                assert r.get("a", b"k") == b"old"  # the parent's snapshot is intact
            with backend.read() as r:
                assert r.get("a", b"k") == b"new"
            backend.run_write(_put("a", b"k", b"newer"))
            with backend.read() as r:
                assert r.get("a", b"k") == b"newer"
        finally:
            backend.close()

    def test_fork_child_opens_the_path_again(self, tmp_path: Path) -> None:
        backend = self.make_backend(tmp_path)
        try:
            backend.run_write(_put("a", b"parent", b"1"))

            def child() -> None:
                other = self.make_backend(tmp_path)
                with other.read() as r:
                    assert r.get("a", b"parent") == b"1"
                other.run_write(_put("b", b"child", b"2"))
                other.close()
                backend.run_write(_put("b", b"child-old-object", b"3"))

            assert _in_child(child) == 0
            with backend.read() as r:
                assert list(r.scan("b")) == [(b"child", b"2"), (b"child-old-object", b"3")]
            backend.run_write(_put("a", b"after", b"4"))
        finally:
            backend.close()

    def test_fork_keeps_every_table_of_a_shared_env(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        only_a = self.open(path, tables=("a",))
        only_b = self.open(path, tables=("b",))
        try:

            def child() -> None:
                only_a.run_write(_put("a", b"ka", b"1"))  # reopens the env in the child
                only_b.run_write(_put("b", b"kb", b"2"))  # its table must still be open

            assert _in_child(child) == 0
            with only_a.read() as r:
                assert r.get("a", b"ka") == b"1"
            with only_b.read() as r:
                assert r.get("b", b"kb") == b"2"
        finally:
            only_a.close()
            only_b.close()

    def test_forked_child_does_not_keep_a_dead_parents_writer_lock(self, tmp_path: Path) -> None:
        """The writers' lock is an ``flock``, owned by the open file description a forked child
        shares: the child closes its copy at once, so the lock dies with the parent."""
        path = tmp_path / "log"
        self.open(path).close()
        code = f"""
            import os, time
            from backends.lmdb import LmdbBackend
            backend = LmdbBackend({str(path)!r}, tables=("a", "b"))
            with backend.write() as txn:
                txn.put("a", b"k", b"never committed")
                pid = os.fork()
                if pid == 0:
                    os.write(1, b"child\\n")  # past the at-fork hook: its copy is closed
                    time.sleep(60)
                    os._exit(0)
                os.write(1, b"%d\\n" % pid)  # one write each: the lines never interleave
                time.sleep(60)
        """
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, cwd=REPO
        )
        assert proc.stdout is not None
        lines = sorted(proc.stdout.readline().strip() for _ in range(2))  # both have forked
        assert lines[1] == b"child", lines
        child = int(lines[0])
        try:
            proc.kill()  # dies inside its write transaction, holding the lock
            proc.wait(timeout=CHILD_WAIT_S)
            fd = os.open(path / "data.mdb", os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
            finally:
                os.close(fd)
            backend = self.open(path)
            try:
                backend.run_write(_put("a", b"k2", b"after"))
                with backend.read() as r:
                    assert list(r.scan("a")) == [(b"k2", b"after")]
            finally:
                backend.close()
        finally:
            os.kill(child, signal.SIGKILL)
            proc.stdout.close()

    # -- durability ----------------------------------------------------------------------------

    def test_process_durability_then_sync(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        backend = self.open(path, durability="process")
        try:
            for i in range(20):
                backend.run_write(_put("a", b"k%02d" % i, b"v%02d" % i))
            backend.sync()
            backend.sync()  # idempotent
            assert backend.durability == "process"
        finally:
            backend.close()
        backend = self.open(path)  # fsync now that no handle is open
        try:
            assert backend.durability == "fsync"
            with backend.read() as r:
                assert r.count("a") == 20
                assert r.get("a", b"k19") == b"v19"
        finally:
            backend.close()

    def test_process_durability_survives_sigkill(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        script = textwrap.dedent(
            f"""
            import os, signal
            from backends.lmdb import LmdbBackend
            b = LmdbBackend({str(path)!r}, tables=("a",), durability="process")
            for i in range(50):
                b.run_write(lambda txn, i=i: txn.put("a", b"k%02d" % i, b"v"))
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
        proc = subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
        assert proc.returncode == -signal.SIGKILL
        backend = self.open(path)
        try:
            with backend.read() as r:
                assert r.count("a") == 50
        finally:
            backend.close()

    # -- refusing what is not a log ------------------------------------------------------------

    def test_regular_file_is_not_a_log(self, tmp_path: Path) -> None:
        path = tmp_path / "file"
        path.write_bytes(b"not a log")
        with pytest.raises(NotALog, match=r"is a file, but a ckptlog log is a directory"):
            self.open(path)
        with pytest.raises(NotALog, match=r"no ckptlog log at .*expected a directory"):
            self.open(path, readonly=True)
        assert path.read_bytes() == b"not a log"

    def test_non_empty_directory_without_data_is_not_a_log(self, tmp_path: Path) -> None:
        path = tmp_path / "dir"
        path.mkdir()
        (path / "notes.txt").write_text("mine")
        with pytest.raises(NotALog, match=r"is a non-empty directory without data\.mdb"):
            self.open(path)
        assert [p.name for p in path.iterdir()] == ["notes.txt"]

    def test_readonly_open_of_missing_path_is_not_a_log(self, tmp_path: Path) -> None:
        path = tmp_path / "missing"
        with pytest.raises(NotALog, match=r"no ckptlog log at .*open it writable to create"):
            self.open(path, readonly=True)
        assert not path.exists()

    def test_garbage_data_file_is_not_a_log(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        path.mkdir()
        garbage = bytes(range(256)) * 64
        (path / "data.mdb").write_bytes(garbage)
        with pytest.raises(NotALog, match=r"not a readable LMDB environment"):
            self.open(path)
        assert (path / "data.mdb").read_bytes() == garbage

    def test_foreign_lmdb_env_is_refused_and_left_alone(self, tmp_path: Path) -> None:
        path = tmp_path / "foreign"
        env = lmdb.open(str(path), max_dbs=4)
        other = env.open_db(b"other")
        with env.begin(write=True) as txn:
            txn.put(b"key", b"value", db=other)
        env.close()
        before = _data_digest(path)
        fds = _fds_open_under(path)
        with pytest.raises(
            NotALog,
            match=r"without a 'meta' table \(it holds other\): either not a ckptlog",
        ) as refused:
            self.open(path, tables=("meta", "a"), marker_table="meta")
        # Checked while the traceback still holds the refused handle: it was closed, not left
        # for the garbage collector (which could close it after this process reopened the path).
        assert _fds_open_under(path) == fds
        del refused
        assert _data_digest(path) == before
        env = lmdb.open(str(path), max_dbs=4, readonly=True)
        try:
            with env.begin() as txn:
                assert [bytes(k) for k, _ in txn.cursor()] == [b"other"]
        finally:
            env.close()

    def test_marker_table_accepts_new_and_own_logs(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        backend = self.open(path, tables=("meta", "a"), marker_table="meta")
        backend.run_write(_put("a", b"k", b"v"))
        backend.close()
        backend = self.open(path, tables=("meta", "a"), marker_table="meta")
        try:
            with backend.read() as r:
                assert r.get("a", b"k") == b"v"
        finally:
            backend.close()

    # -- one env per path per process ----------------------------------------------------------

    def test_two_backends_on_one_path_share_the_env(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        first = self.open(path, tables=("a",))
        second = self.open(str(path), tables=("b",))
        try:
            assert first._env is second._env
            assert first.location == second.location == os.path.realpath(path)
            first.run_write(_put("a", b"k", b"from first"))
            second.run_write(_put("b", b"k", b"from second"))
            with second.read() as r:
                assert r.get("a", b"k") == b"from first"
            first.close()
            # Closing one handle leaves the shared environment open for the other.
            with second.read() as r:
                assert r.get("b", b"k") == b"from second"
            second.run_write(_put("b", b"k2", b"still writable"))
        finally:
            first.close()
            second.close()
        assert os.path.realpath(path) not in lmdb_backend._REGISTRY

    def test_same_path_with_other_settings_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        backend = self.open(path)
        try:
            with pytest.raises(
                CheckpointError,
                match=r"already open in this process with durability='fsync', readonly=False",
            ):
                self.open(path, durability="process")
            with pytest.raises(CheckpointError, match=r"already open in this process"):
                self.open(path, readonly=True)
            backend.run_write(_put("a", b"k", b"v"))  # the refusal did not disturb it
        finally:
            backend.close()
        backend = self.open(path, durability="process")  # once closed, any setting is fine
        try:
            with backend.read() as r:
                assert r.get("a", b"k") == b"v"
        finally:
            backend.close()

    # -- tables --------------------------------------------------------------------------------

    def test_undeclared_table_is_an_error(self, backend: LmdbBackend) -> None:
        with (
            backend.read() as r,
            pytest.raises(CheckpointError, match=r"table 'c' was not declared"),
        ):
            r.get("c", b"k")

    def test_readonly_sees_absent_table_as_empty(self, tmp_path: Path) -> None:
        path = tmp_path / "log"
        backend = self.open(path, tables=("a",))
        backend.run_write(_put("a", b"k", b"v"))
        backend.close()
        ro = self.open(path, tables=("a", "b"), readonly=True)
        try:
            with ro.read() as r:
                assert r.get("a", b"k") == b"v"
                assert r.get("b", b"k") is None
                assert list(r.scan("b")) == []
                assert r.last_key("b") is None
                assert r.count("b") == 0
        finally:
            ro.close()


class TestLmdbBackendFolded(TestLmdbBackend):
    """The same tests with ``a`` and ``b`` kept in one sub-database (backends/lmdb_fold.py),
    as a new log keeps its per-stream tables."""

    folded = TABLES


class _Key(bytes):
    """A bytes subclass: ``put`` and ``put_many`` take it as a key."""


_BAD_KEYS = [  # what a write refuses, with the message naming it
    (b"", r"keys must be non-empty bytes, got b''"),
    ("k9", r"keys must be non-empty bytes, got 'k9'"),
    (b"k" * 600, r"key of 600 bytes exceeds the LMDB limit of \d+ bytes"),
]


@pytest.mark.parametrize(("bad", "message"), _BAD_KEYS)
@pytest.mark.parametrize("durability", ["process", "fsync"])
def test_put_many_names_the_bad_key_and_writes_nothing(
    tmp_path: Path, bad: Any, message: str, durability: str
) -> None:
    """``put_many``'s key check at C speed refuses what ``put`` refuses, with its message for
    the offending key, and the transaction writes nothing; a bytes subclass passes as before
    (a logged write, ``fsync``, lists the pairs for its redo record)."""
    backend = _open(tmp_path / "log", durability=durability)
    try:
        pairs = [(b"k%d" % i, b"v") for i in range(8)]
        pairs.insert(5, (bad, b"v"))
        with pytest.raises(CheckpointError, match=message), backend.write() as w:
            w.put_many("a", pairs)
        with backend.read() as r:
            assert r.count("a") == 0
        with backend.write() as w:
            w.put_many("a", [(_Key(b"s%d" % i), b"v%d" % i) for i in range(8)])
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"s%d" % i, b"v%d" % i) for i in range(8)]
    finally:
        backend.close()


@pytest.mark.parametrize(("bad", "message"), _BAD_KEYS)
@pytest.mark.parametrize("durability", ["process", "fsync"])
def test_one_row_writes_name_the_bad_key_and_the_transaction_goes_on(
    tmp_path: Path, bad: Any, message: str, durability: str
) -> None:
    """``put``, and ``put_many`` / ``append_many`` of one row (a commit's rows), leave a key's
    length to LMDB (which refuses it before writing anything) and name it as before; the
    transaction stays usable, and an undeclared table is named too. A bytes subclass of a
    storable length passes."""
    backend = _open(tmp_path / "log", durability=durability)
    try:
        with backend.write() as w:
            with pytest.raises(CheckpointError, match=message):
                w.put("a", bad, b"v")
            with pytest.raises(CheckpointError, match=message):
                w.put_many("a", [(bad, b"v")])
            with pytest.raises(CheckpointError, match=message):
                w.append_many("b", [(bad, b"v")])
            with pytest.raises(CheckpointError, match=r"table 'c' was not declared"):
                w.put("c", b"k", b"v")
            with pytest.raises(CheckpointError, match=r"table 'c' was not declared"):
                w.put_many("c", [(b"k", b"v")])
            w.put("a", _Key(b"s1"), b"v1")
            w.put_many("a", [(_Key(b"s2"), b"v2")])
            w.append_many("b", [(b"t1", b"w1")])
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"s1", b"v1"), (b"s2", b"v2")]
            assert list(r.scan("b")) == [(b"t1", b"w1")]
    finally:
        backend.close()
    if durability == "fsync":  # the redo records hold what committed, and replay it
        backend = _open(tmp_path / "log", durability=durability)
        try:
            with backend.read() as r:
                assert r.count("a") == 2
        finally:
            backend.close()


@pytest.mark.parametrize("durability", ["process", "fsync"])
def test_put_built_writes_and_logs_the_rows_unchecked(tmp_path: Path, durability: str) -> None:
    """``put_built`` (rows whose keys the caller built: a fan-out batch's) writes what
    ``put_many`` would, overwriting in place, and a logged write (``fsync``) lists the pairs
    for its redo record as ``put_many`` does."""
    backend = _open(tmp_path / "log", durability=durability)
    try:
        pairs = [(b"k%03d" % i, b"v%d" % i) for i in range(40)]
        with backend.write() as w:
            w.put_built("a", pairs[:30])  # type: ignore[attr-defined]
            w.put_built("a", [(k, b"w" + v) for k, v in pairs[20:]])  # type: ignore[attr-defined]
            ops = getattr(w, "ops", None)
            if durability == "fsync":
                assert ops is not None
                assert len(ops) == 50
                assert ops[-1] == ("a", b"k039", b"wv39")
        with backend.read() as r:
            assert list(r.scan("a")) == pairs[:20] + [(k, b"w" + v) for k, v in pairs[20:]]
    finally:
        backend.close()
