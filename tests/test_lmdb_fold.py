"""The fold (backends/lmdb_fold.py): a new log keeps its per-stream tables in one LMDB
sub-database; a log made before keeps one per table and works as it did, through the library,
compaction and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lmdb

from backends import lmdb_fold
from backends.lmdb import LmdbBackend
from backends.lmdb_fold import Folded
from backends.memory import MemoryBackend
from backends.testing import create_unfolded_lmdb
from eventlog import forensics
from eventlog.checkpoints import CheckpointLog
from eventlog.copylog import copy_log
from eventlog.layout import CORE_TABLES
from eventlog.materialized import TABLES as MATERIALIZED
from eventlog.records import CheckpointRecord, NodePosition
from tests.test_cli import ckptlog

FOLD_NAME = "rows:streams,heads,bodies,positions"


def _rec(inv: str, i: int) -> CheckpointRecord:
    state = {"i": i, "pad": "x" * 200}
    return CheckpointRecord(inv, "c", state, (NodePosition((), "n", i),), (), 1.0 + i)


def _names(path: Path) -> dict[str, int]:
    """Each sub-database of the log at ``path`` and its row count (the log closed)."""
    env = lmdb.open(str(path), readonly=True, max_dbs=64, lock=False)
    try:
        with env.begin() as txn:
            names = [bytes(k).decode() for k, _ in txn.cursor()]
        dbs = {n: env.open_db(n.encode(), create=False) for n in names}
        with env.begin() as txn:
            return {n: txn.stat(db)["entries"] for n, db in dbs.items()}
    finally:
        env.close()


def test_a_new_log_keeps_its_per_stream_tables_in_one_sub_database(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with CheckpointLog.open(path, durability="process") as cl:
        for i in range(5):
            cl.save("inv", _rec("inv", i))
    names = _names(path)
    assert names[FOLD_NAME] > 0
    for table in lmdb_fold.FOLDED:  # each name kept, empty: it says the table exists
        assert names[table] == 0, table
    assert names["log"] == 5


def test_a_log_made_before_the_fold_opens_saves_verifies_compacts_and_reads(
    tmp_path: Path,
) -> None:
    old, new = tmp_path / "old", tmp_path / "compacted"
    create_unfolded_lmdb(old, (*CORE_TABLES, *MATERIALIZED))
    with CheckpointLog.open(old) as cl:  # fsync: through the write-ahead segment
        for i in range(40):
            cl.save(f"inv-{i % 4}", _rec(f"inv-{i % 4}", i))
        loaded = cl.load("inv-1")
        assert loaded is not None
        assert loaded.state["i"] == 37
        assert len(list(cl.history("inv-2"))) == 10
        assert cl.verify().ok
        forensics.compact(cl, new)
    names = _names(old)
    assert not any(n.startswith(lmdb_fold.PREFIX) for n in names)  # never mixed
    assert names["streams"] == 40
    assert names["heads"] == 4
    with CheckpointLog.open(old, readonly=True) as cl:
        assert cl.verify().ok
        assert len(list(cl.history("inv-3"))) == 10
    assert FOLD_NAME in _names(new)  # a compacted log gets the fold
    with CheckpointLog.open(new, readonly=True) as cl:
        assert cl.verify().ok
        got = cl.load("inv-1")
        assert got is not None
        assert got.state["i"] == 37
    for path in (old, new):
        verify = ckptlog("verify", str(path))
        assert verify.returncode == 0, verify.stdout + verify.stderr
        history = ckptlog("history", str(path), "inv-0")
        assert history.returncode == 0, history.stderr
        assert history.stdout.count("\n") >= 10, history.stdout


class _Counting:
    """A cursor that counts the rows it is positioned on."""

    def __init__(self, cur: Any) -> None:
        self.cur = cur
        self.seen = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cur, name)

    def key(self) -> bytes:
        self.seen += 1
        key: bytes = self.cur.key()
        return key


def test_a_full_scan_of_heads_jumps_over_the_other_tables_rows(tmp_path: Path) -> None:
    path = tmp_path / "log"
    streams, history = 60, 80
    with LmdbBackend(path, tables=("streams", "heads"), durability="process") as b:
        with b.write() as w:
            for sid in range(1, streams + 1):
                s = sid.to_bytes(8, "big")
                w.put_many("streams", [(s + q.to_bytes(8, "big"), b"g") for q in range(history)])
                w.put("heads", s, b"head %d" % sid)
        with b.read() as r:
            heads = list(r.scan("heads"))
            assert r.count("heads") == streams
            assert r.count("streams") == streams * history
            assert list(r.scan("heads", reverse=True)) == heads[::-1]
    assert heads == [(i.to_bytes(8, "big"), b"head %d" % i) for i in range(1, streams + 1)]
    env = lmdb.open(str(path), readonly=True, max_dbs=64, lock=False)
    try:
        rows = env.open_db(FOLD_NAME.encode(), create=False)
        f = Folded(rows, "heads", 1, env.max_key_size() - 1)
        for reverse in (False, True):
            with env.begin() as txn:
                cur = _Counting(txn.cursor(db=rows))
                got = list(lmdb_fold.scan(cur, f, None, None, reverse))
            assert got == (heads[::-1] if reverse else heads)
            # A head row and at most two jumps per stream id, not its 80 index rows.
            assert cur.seen <= 3 * streams + 2, (reverse, cur.seen)
    finally:
        env.close()


def _format(path: Path) -> dict[str, Any]:
    env = lmdb.open(str(path), readonly=True, max_dbs=64, lock=False)
    try:
        meta = env.open_db(b"meta", create=False)
        with env.begin() as txn:
            raw = txn.get(b"format", db=meta)
        assert raw is not None
        record: dict[str, Any] = json.loads(raw)
        return record
    finally:
        env.close()


def test_a_folded_log_states_format_2_so_a_ckptlog_from_before_the_fold_refuses_it(
    tmp_path: Path,
) -> None:
    """A ckptlog from before the fold would see a folded log's heads, bodies, positions and
    stream index empty (their own names are empty sub-databases) and write beside rows it
    cannot see: the format record says 2, which such a ckptlog refuses at open ("upgrade
    ckptlog"). A log made before the fold, and logs on other backends, stay at 1."""
    new, old = tmp_path / "new", tmp_path / "old"
    with CheckpointLog.open(new, durability="process") as cl:
        cl.save("inv", _rec("inv", 0))
        assert cl.log.backend.layout_version == 2
    create_unfolded_lmdb(old, (*CORE_TABLES, *MATERIALIZED))
    with CheckpointLog.open(old, durability="process") as cl:
        cl.save("inv", _rec("inv", 0))
        assert cl.log.backend.layout_version == 1
    assert _format(new)["format_version"] == 2
    assert _format(old)["format_version"] == 1
    with CheckpointLog.on_backend(MemoryBackend()) as cl:
        cl.save("inv", _rec("inv", 0))
        assert cl.log.backend.layout_version == 1
    for path in (new, old):  # both open and read here
        with CheckpointLog.open(path, readonly=True) as cl:
            got = cl.load("inv")
            assert got is not None
            assert got.state["i"] == 0


def test_a_copy_into_a_folded_log_states_the_fold(tmp_path: Path) -> None:
    old, copy = tmp_path / "old", tmp_path / "copy"
    create_unfolded_lmdb(old, (*CORE_TABLES, *MATERIALIZED))
    with CheckpointLog.open(old, durability="process") as cl:
        for i in range(3):
            cl.save("inv", _rec("inv", i))
    copy_log(old, copy)
    assert _format(old)["format_version"] == 1
    stated = _format(copy)
    assert stated["format_version"] == 2
    assert {k: v for k, v in stated.items() if k != "format_version"} == {
        k: v for k, v in _format(old).items() if k != "format_version"
    }
    with CheckpointLog.open(copy, readonly=True) as cl:
        assert cl.verify().ok
        got = cl.load("inv")
        assert got is not None
        assert got.state["i"] == 2
