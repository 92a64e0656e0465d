"""Names that survive a power cut (issue 28), and a log created on a nearly full disk.

Whether a name is durable can only be seen by cutting the power, which
``tests/test_power_loss.py`` does with the project's FUSE simulator; here: the directory
helpers' contract, and a real size-limited file system (a tmpfs mounted as root) on which
creating a log and saving into it with 0 to 64 KiB free either works or says "disk full" as a
typed :class:`StorageError`, never ``Input/output error``, and leaves a log that opens and
verifies once space is freed.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.dirsync import make_dirs, sync_directory
from eventlog import CheckpointRecord, NodePosition
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import StorageError

FS_BYTES = 2 << 20


def record(i: int) -> CheckpointRecord:
    return CheckpointRecord(
        "inv", "corr", {"i": i, "pad": "x" * 200}, (NodePosition((), "n", i),), (),
        1_700_000_000.0 + i,
    )  # fmt: skip


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, mounted for this test (root needed: fails loudly without it)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"mounting a tmpfs failed ({done.stderr.strip()}): this test needs root and "
            "mount(8), as CI has"
        )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path, free_bytes: int) -> Path:
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    used = (st.f_blocks - st.f_bavail) * st.f_frsize
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, FS_BYTES - used - free_bytes)
    finally:
        os.close(fd)
    st = os.statvfs(mnt)
    assert abs(st.f_bavail * st.f_frsize - free_bytes) <= 4096
    return filler


@pytest.mark.parametrize("free_kib", [0, 8, 16, 32, 64])
def test_a_log_created_on_a_nearly_full_disk_says_disk_full(small_fs: Path, free_kib: int) -> None:
    filler = fill(small_fs, free_kib << 10)
    path = small_fs / "deep" / "run.ckpt"
    saved = 0

    def save_until_full() -> None:
        nonlocal saved
        with CheckpointLog.open(path) as log:
            for i in range(40):
                log.save("inv", record(i))
                saved += 1

    with pytest.raises(StorageError, match="the disk is full") as e:
        save_until_full()
    assert e.value.errno == errno.ENOSPC
    assert "Input/output error" not in str(e.value).split("(LMDB reported")[0]
    filler.unlink()  # space again: whatever exists is a whole log with every save it acknowledged
    with CheckpointLog.open(path) as log:
        assert log.verify().ok
        if saved:
            loaded = log.load("inv")
            assert loaded is not None
            assert loaded.state["i"] == saved - 1
        log.save("inv", record(saved))


def test_make_dirs_creates_each_missing_directory(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    assert make_dirs(target) is True
    assert target.is_dir()
    assert make_dirs(target) is False  # existing: nothing created, nothing raised


def test_sync_directory_says_which_directory_it_could_not_open(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"opening the directory .*missing.* durable") as e:
        sync_directory(tmp_path / "missing")
    assert e.value.errno == errno.ENOENT
