"""Power cuts on the project's simulator (``soak/powerfs.py``, issue 28): the short form of the
campaign ``make soak`` runs at length (``soak/powercut.py``, figures in docs/reliability.md).

The simulator is proven by controls first: what was not fsynced is gone after a cut, a name
is gone unless its directory was fsynced (``posix`` model) or any fsync followed (``ordered``),
and raw LMDB without sync loses acknowledged commits while LMDB with sync keeps them. Then
ckptlog: a new log, its first save acknowledged and the power cut, still holds the save (before
the directory fsyncs the whole log vanished and reopening made a new, empty one); a returned
``compact`` has its DEST; and seeded writer processes of every kind, killed and cut, lose
nothing acknowledged. The tests mount FUSE as root and fail, never skip, when they cannot.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from eventlog.checkpoints import CheckpointLog
from soak import powercut
from soak.common import Child, Tally
from soak.powerfs import PowerFS
from soak.workers import rec

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("posix", "ordered")


@pytest.fixture(params=MODELS)
def fs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PowerFS]:
    with PowerFS(tmp_path / "mnt", names=request.param) as mounted:
        yield mounted


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_the_simulator_forgets_what_was_not_synced(fs: PowerFS) -> None:
    m = fs.mountpoint
    d = m / "dir"
    d.mkdir()
    with open(d / "synced", "wb") as f:
        f.write(b"a" * 10_000)
        f.flush()
        os.fsync(f.fileno())
        f.write(b"b" * 5_000)  # after the fsync: volatile
    with open(d / "unsynced", "wb") as f:
        f.write(b"c" * 100)
    fsync_dir(m)
    fs.cut(1, torn=False)
    if fs.names == "posix":  # the directory's entries were never fsynced: both names gone
        assert d.is_dir()
        assert os.listdir(d) == []
    else:  # the directory fsync committed every name, the unsynced file's too (empty)
        assert sorted(os.listdir(d)) == ["synced", "unsynced"]
        assert (d / "synced").read_bytes() == b"a" * 10_000
        assert (d / "unsynced").read_bytes() == b""  # its name, made before the dir fsync
    with open(d / "f", "wb") as f:
        f.write(b"x" * 4096)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(d)
    fd = os.open(d / "f", os.O_WRONLY)
    try:
        for i in range(64):  # unsynced rewrites: a torn cut keeps some, in any combination
            os.pwrite(fd, bytes([65 + i % 26]) * 2048, (i % 2) * 2048)
    finally:
        os.close(fd)
    out = fs.cut(7, torn=True)
    assert out["ops_dropped"] + out["ops_kept"] == 64
    assert 0 < out["ops_kept"] < 64
    data = (d / "f").read_bytes()
    assert len(data) == 4096


def _lmdb_commits(path: Path, *, sync: bool, n: int) -> None:
    env = lmdb.open(str(path), sync=sync, map_size=1 << 24)
    try:
        for i in range(n):
            with env.begin(write=True) as txn:
                txn.put(b"k%05d" % i, b"v" * 100)
    finally:
        env.close()


def test_control_lmdb_without_sync_loses_acknowledged_commits(fs: PowerFS) -> None:
    """The control that shows the simulator can fail a store: raw LMDB with ``sync=False``
    loses commits it returned from; with ``sync=True`` (and its directory fsynced) it keeps
    every one."""
    for sync in (False, True):
        path = fs.mountpoint / f"raw-{sync}"
        path.mkdir()
        fsync_dir(fs.mountpoint)
        _lmdb_commits(path, sync=sync, n=50)  # creates data.mdb and lock.mdb
        fsync_dir(path)
        _lmdb_commits(path, sync=sync, n=200)
        fs.cut(3, torn=False)
        env = lmdb.open(str(path), map_size=1 << 24)
        try:
            with env.begin() as txn:
                kept = txn.stat()["entries"]
        finally:
            env.close()
        assert kept == 200 if sync else kept < 200, (sync, kept)


def _wait_for_acks(child: Child, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.out_path.read_bytes().count(b"ACK ") >= n:
            return
        if child.proc.poll() is not None:
            break
        time.sleep(0.01)
    child.kill()
    raise AssertionError(f"the writer acknowledged fewer than {n} saves: {child.finish()[2]}")


def test_a_new_log_survives_a_cut_right_after_its_first_save(fs: PowerFS, tmp_path: Path) -> None:
    """Before the directory fsyncs (issue 28), in the posix model the whole log vanished and
    reopening it silently created a new, empty one."""
    path = fs.mountpoint / "logs" / "run.ckpt"
    child = Child(tmp_path / "work", "single", str(path), "0")
    _wait_for_acks(child, 1)
    child.kill()
    _, acks, _ = child.finish()
    fs.cut(11, torn=True)
    assert (path / "data.mdb").exists()
    with CheckpointLog.open(path) as log:
        assert log.verify().ok
        got = {e.record.state["n"] for e in log.history("inv-0") if e.record is not None}
    want = {a["n"] for a in acks if "inv" in a}
    assert want
    assert want <= got


def test_a_returned_compact_has_its_dest_after_a_cut(fs: PowerFS) -> None:
    src = fs.mountpoint / "src"
    with CheckpointLog.open(src) as log:
        for i in range(30):
            log.save(f"inv-{i % 3}", rec(f"inv-{i % 3}", {"n": i}))
    dest = fs.mountpoint / "out" / "compacted"
    (fs.mountpoint / "out").mkdir()
    fsync_dir(fs.mountpoint)
    code = (
        "import sys; from eventlog.checkpoints import CheckpointLog\n"
        "with CheckpointLog.open(sys.argv[1], readonly=True) as log: log.compact(sys.argv[2])\n"
    )
    subprocess.run([sys.executable, "-c", code, str(src), str(dest)], check=True, cwd=ROOT)
    fs.cut(5, torn=True)
    with CheckpointLog.open(dest, readonly=True) as out:
        assert out.verify().ok
        assert sorted(s.invocation_id for s in out.list()) == ["inv-0", "inv-1", "inv-2"]


@pytest.mark.slow
def test_power_cuts_of_every_writer_kind_lose_nothing_acknowledged(tmp_path: Path) -> None:
    """The campaign's short form: seeded kills of single, multi-process, async, batching
    (the buffered runs in every single/multi worker) and compacting writers, each followed by
    a cut, in both name models."""
    tally = Tally()
    powercut.run(28, 8, tmp_path, tally, kinds=("single", "multi", "async", "compact"))
    assert tally.counts["cuts"] == 8
    assert tally.counts["acked"] > 0
    assert tally.failures == []
    assert tally.counts["lost"] == 0
