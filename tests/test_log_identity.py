"""A log stays the log it was opened as, and creating one is all or nothing (issue 12 §4).

- A process holding a log open while the directory is deleted and created again must not keep
  acknowledging saves into the deleted file: its writes raise :class:`LogReplaced`, and a new
  open in the same process gets the new log.
- Creating a log that fails midway (a full disk) leaves nothing that bricks the path: the next
  open creates the log, and nothing else in or beside the directory is touched.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import lmdb
import pytest

from backends import lmdb as lmdb_backend
from backends import lmdb_txn
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import CheckpointError, LogReplaced, StorageError
from eventlog.frames import Event
from eventlog.log import EventLog

REPO = Path(__file__).resolve().parents[1]


def _run(code: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, cwd=REPO)


# -- deleted and created again -----------------------------------------------------------------


def test_log_recreated_by_another_process_refuses_writes(log_path: Path) -> None:
    log = EventLog.open(log_path, durability="process")
    try:
        assert log.append("s", Event(name="before")) is not None
        _run(f"""
            import shutil
            from eventlog.frames import Event
            from eventlog.log import EventLog
            shutil.rmtree({str(log_path)!r})
            with EventLog.open({str(log_path)!r}) as log:
                log.append("other", Event(name="theirs"))
        """)
        for _ in range(3):  # every attempt is refused, none acknowledged
            with pytest.raises(LogReplaced, match=r"deleted or replaced .* open it again"):
                log.append("s", Event(name="lost"))
        with pytest.raises(LogReplaced):
            log.append_many([("s", Event(name="lost")), ("t", Event(name="lost"))])
    finally:
        log.close()
    with EventLog.open(log_path) as fresh:
        assert fresh.streams() == ["other"]
        assert [f.frame.name for f in fresh.read_stream("other")] == ["theirs"]


def test_log_recreated_in_this_process_is_a_new_log(log_path: Path) -> None:
    old = CheckpointLog.open(log_path, durability="process")
    try:
        shutil.rmtree(log_path)
        with EventLog.open(log_path, durability="process") as new:
            assert new.append("s", Event(name="new")) is not None
            with pytest.raises(LogReplaced):
                old.log.append("s", Event(name="old"))
            assert [f.frame.name for f in new.read_stream("s")] == ["new"]
            assert new.verify().ok
    finally:
        old.close()
    _run(f"""
        from eventlog.log import EventLog
        with EventLog.open({str(log_path)!r}, readonly=True) as log:
            assert [f.frame.name for f in log.read_stream("s")] == ["new"], log.streams()
    """)


def test_log_replaced_is_a_storage_error() -> None:
    assert issubclass(LogReplaced, StorageError)
    assert issubclass(LogReplaced, CheckpointError)


# -- creation that fails midway ----------------------------------------------------------------


def _truncating_open(real: Any) -> Any:
    """``lmdb.open`` that runs out of disk while writing the new data file's meta pages: it
    leaves the first page only (what a full disk left), then fails."""

    def fake(path: str, **kw: Any) -> Any:
        real(path, **kw).close()
        data = Path(path) / "data.mdb" if kw.get("subdir", True) else Path(path)
        with data.open("r+b") as f:
            f.truncate(4096)
        raise lmdb.DiskError(f"{path}: No space left on device")

    return fake


def _failing_meta_put(real: Any) -> Any:
    def fake(self: Any, table: str, key: bytes, value: bytes) -> None:
        if table == "meta":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, table, key, value)

    return fake


@pytest.mark.parametrize("existing_dir", [False, True], ids=["new-path", "empty-dir"])
@pytest.mark.parametrize("where", ["data-file", "meta"])
def test_creation_failing_midway_leaves_a_creatable_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, existing_dir: bool
) -> None:
    path = tmp_path / "log"
    (tmp_path / "beside.txt").write_text("not ours")
    if existing_dir:
        path.mkdir()
    with monkeypatch.context() as m:
        if where == "data-file":
            m.setattr(lmdb, "open", _truncating_open(lmdb.open))
        else:
            # Both write transactions' puts (a durable log's is the logged one, which does
            # not go through the plain one's).
            for cls in (lmdb_txn.LmdbWrite, lmdb_txn.LmdbLoggedWrite):
                m.setattr(cls, "put", _failing_meta_put(cls.put))
        with pytest.raises(OSError):
            EventLog.open(path)
    assert (tmp_path / "beside.txt").read_text() == "not ours"
    if where == "data-file":  # nothing is left of the failed creation
        assert path.exists() == existing_dir
        assert not path.exists() or list(path.iterdir()) == []
    with EventLog.open(path) as log:
        assert log.append("s", Event(name="after")) is not None
        assert log.verify().ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beside.txt", "log"]
    assert sorted(p.name for p in path.iterdir()) == ["data.mdb", "lock.mdb", "wal.ckptlog"]


def test_leftovers_of_a_killed_creator_do_not_block_the_path(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.mkdir()
    leftover = path / f"{lmdb_backend.CREATING_PREFIX}12345.0123456789ab"
    leftover.write_bytes(b"\0" * 4096)
    (path / "lock.mdb").write_bytes(b"\0" * 64)  # an older version's half-made log
    with EventLog.open(path) as log:
        assert log.append("s", Event(name="x")) is not None
    assert leftover.read_bytes() == b"\0" * 4096  # not ours to remove: another pid's


def test_a_directory_with_other_files_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.mkdir()
    (path / "lock.mdb").write_bytes(b"")
    (path / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match=r"non-empty directory without data\.mdb"):
        EventLog.open(path)
    assert sorted(p.name for p in path.iterdir()) == ["lock.mdb", "notes.txt"]


def test_a_log_created_by_another_process_meanwhile_is_used(tmp_path: Path) -> None:
    """Regression: an opener that found no data.mdb, then (another creator's link landing in
    between) a directory holding one, refused it as a non-empty non-log directory."""
    path = tmp_path / "log"
    with EventLog.open(path, durability="process") as first:
        first.append("s", Event(name="a"))
    before = (path / "data.mdb").read_bytes()
    # what the late opener runs after its own look found no data.mdb
    lmdb_backend._create_data_file(path, ("log",), 1 << 20, ())
    assert (path / "data.mdb").read_bytes() == before
    assert sorted(c.name for c in path.iterdir()) == ["data.mdb", "lock.mdb"]
    with EventLog.open(path, durability="process") as second:
        assert [sf.frame.name for sf in second.read_stream("s")] == ["a"]
