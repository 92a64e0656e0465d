"""Regression tests for what the reliability campaign (issue 15, ``make soak``) found.

Each test failed before its fix: a truncated ``data.mdb`` killed the interpreter with SIGBUS; a
flipped meta-page txnid rolled the log back silently; options, deep states, a closed log and a
damaged head row raised untyped errors; a full disk read as "Input/output error"; a damaged
root page was called "not a ckptlog log".
"""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

from backends import lmdb_errors
from backends.lmdb_meta import read_state
from eventlog import (
    CheckpointFilter,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
    forensics,
)
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.errors import (
    CheckpointError,
    DamagedLog,
    DamagedRow,
    EncodingError,
    InvalidOption,
    InvalidRecord,
    LogClosed,
    NotALog,
    StorageError,
)
from eventlog.log import EventLog
from eventlog.materialized import HEADS

ENOSPC = 28


def record(state: Any = None, *, seq: int = 0, **kw: Any) -> CheckpointRecord:
    return CheckpointRecord(
        "inv", "corr", {"i": seq} if state is None else state,
        (NodePosition((), "n", seq),), (), 1_700_000_000.0 + seq, **kw,
    )  # fmt: skip


def make_log(path: Path, saves: int = 12) -> None:
    with CheckpointLog.open(path) as log:
        for i in range(saves):
            log.save("inv", record(seq=i))


# -- a truncated data.mdb: a typed error, never SIGBUS -------------------------------------------

OPEN_TRUNCATED = """
import sys
import time
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import DamagedLog
for readonly in (True, False):
    try:
        log = CheckpointLog.open(sys.argv[1], readonly=readonly)
        for s in log.list():
            log.load(s.invocation_id)
        log.verify()
        print("opened")
        log.close()
    except DamagedLog as e:
        assert e.kind == "truncated", e.kind
        print("DamagedLog", e)
"""


@pytest.mark.parametrize("percent", [25, 50, 75, 85])
def test_truncated_data_file_raises_damaged_log_not_sigbus(tmp_path: Path, percent: int) -> None:
    path = tmp_path / "log"
    with CheckpointLog.open(path) as log:  # enough pages that the cut lands among used ones
        for i in range(200):
            inv = f"inv-{i % 7}"
            log.save(inv, CheckpointRecord(inv, "corr", {"blob": "x" * 3000, "i": i}, (), (), 1.0))
    data = path / "data.mdb"
    os.truncate(data, data.stat().st_size * percent // 100)
    proc = subprocess.run(
        [sys.executable, "-c", OPEN_TRUNCATED, str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -7 was SIGBUS
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert all(x.startswith("DamagedLog") for x in lines), proc.stdout
    assert "truncated" in lines[0]
    assert "restore the file from a backup" in lines[0]


def test_sound_log_passes_the_file_check(tmp_path: Path) -> None:
    make_log(tmp_path / "log")
    state = read_state(str(tmp_path / "log" / "data.mdb"), lock=True)
    assert state is not None
    assert state.truncated() is None
    assert state.meta_damage() is None
    with CheckpointLog.open(tmp_path / "log") as log:
        assert log.verify().ok


# -- a flipped meta-page txnid ------------------------------------------------------------------


def newest_meta_offset(data: Path) -> tuple[int, int]:
    """(byte offset of the newest meta page's mm_txnid, its value)."""
    raw = data.read_bytes()[: 2 * 4096 + 160]
    page = struct.unpack_from("<I", raw, 40)[0]
    txns = [struct.unpack_from("<Q", raw, i * page + 144)[0] for i in (0, 1)]
    newest = 0 if txns[0] > txns[1] else 1
    return newest * page + 144, txns[newest]


@pytest.mark.parametrize("bit", [0, 2, 5, 13, 40])
def test_flipped_meta_txnid_is_refused_for_writing_and_reported_by_verify(
    tmp_path: Path, bit: int
) -> None:
    path = tmp_path / "log"
    make_log(path)
    with CheckpointLog.open(path, readonly=True) as log:
        assert log.load("inv") == record(seq=11)
    data = path / "data.mdb"
    offset, _ = newest_meta_offset(data)
    with open(data, "r+b") as f:
        f.seek(offset + bit // 8)
        byte = f.read(1)[0]
        f.seek(offset + bit // 8)
        f.write(bytes([byte ^ (1 << (bit % 8))]))
    with pytest.raises(DamagedLog, match="meta pages hold transaction ids") as info:
        CheckpointLog.open(path)
    assert info.value.kind == "meta"
    with CheckpointLog.open(path, readonly=True) as log:
        report = log.verify()
    assert not report.ok
    assert report.problems[0].kind == "meta"


# -- untyped errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"frobnicate": 1},
        {"batching": 5},
        {"batching": FanOutInternalSaveBatching(flush_every="3")},  # type: ignore[arg-type]
        {"map_size_max": -1},
        {"map_size_initial": 0},
        {"map_size_max": "big"},
        {"frame_bytes_max": None},
        {"chain_key": "secret"},
        {"flush_interval": "1s"},
        {"readonly": "no"},
    ],
    ids=repr,
)
def test_open_refuses_unknown_and_mistyped_options(tmp_path: Path, options: Any) -> None:
    path = tmp_path / "log"
    with pytest.raises(InvalidOption, match="nothing was opened") as info:
        CheckpointLog.open(path, **options)
    assert next(iter(options)) in str(info.value)
    assert not path.exists()
    with pytest.raises(InvalidOption):
        asyncio.run(_open_checkpointer(path, options))
    assert not path.exists()


async def _open_checkpointer(path: Path, options: Any) -> None:
    cp = Checkpointer.open(path, **options)
    await cp.close()


def test_event_log_open_refuses_unknown_options(tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match="frobnicate"):
        EventLog.open(tmp_path / "log", frobnicate=1)
    assert not (tmp_path / "log").exists()


def _deep(depth: int) -> Any:
    value: dict[str, Any] = {}
    cur = value
    for _ in range(depth):
        cur["x"] = {}
        cur = cur["x"]
    return value


def _recursive() -> Any:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize("make", [lambda: _deep(5000), _recursive], ids=["5000-deep", "cycle"])
def test_deep_or_recursive_values_raise_encoding_error(tmp_path: Path, make: Any) -> None:
    bad = make()
    fan_out = FanOutProgress("work", (), 2, (FanOutInstanceProgress("not_started"),) * 2)
    with CheckpointLog.open(tmp_path / "log") as log:
        log.save("inv", record(seq=0, fan_out_progress=(fan_out,)))
        for rec in (
            record(bad, seq=1),
            CheckpointRecord("inv", "corr", {}, (), (bad,), 1.0, fan_out_progress=(fan_out,)),
            record(seq=1, fan_out_progress=(FanOutProgress(
                "work", (), 2, (FanOutInstanceProgress("completed", result=bad),) * 2,
            ),)),
        ):  # fmt: skip
            with pytest.raises(EncodingError, match="contains itself"):
                log.save("inv", rec)
        with pytest.raises(EncodingError, match="contains itself"):
            log.save_instance("inv", "work", 1, FanOutInstanceProgress("completed", result=bad))
        assert log.load("inv") == record(seq=0, fan_out_progress=(fan_out,))
        assert log.verify().ok


def test_verify_after_close_raises_log_closed(tmp_path: Path) -> None:
    log = CheckpointLog.open(tmp_path / "log")
    log.save("inv", record())
    log.close()
    with pytest.raises(LogClosed, match="verify after close"):
        log.verify()
    with pytest.raises(LogClosed):
        log.log.verify()


@pytest.mark.parametrize(
    "raw",
    [b"\xc1garbage", msgspec.msgpack.encode(["inv", "corr", 2, 1.0, "save", 1, 0, [], 1, 1, 0, 0])],
    ids=["garbage", "old layout"],
)
def test_damaged_head_row_raises_damaged_row(tmp_path: Path, raw: bytes) -> None:
    fan_out = FanOutProgress("work", (), 1, (FanOutInstanceProgress("not_started"),))
    with CheckpointLog.open(tmp_path / "log") as log:
        log.save("inv", record(seq=0, fan_out_progress=(fan_out,)))
        with log.log.backend.read() as txn:
            sid = log.log.stream_id(txn, "inv")
        assert sid is not None
        log.log.backend.run_write(lambda txn: txn.put(HEADS, struct.pack(">Q", sid), raw))
        for call in (
            lambda: log.load("inv"),
            lambda: asyncio.run(log.load_async("inv")),
            lambda: log.pending_instances("inv", "work"),
            lambda: log.save("inv", record(seq=1)),
        ):
            with pytest.raises(DamagedRow, match="'inv': its materialized head row"):
                call()
        assert log.record_at("inv", 1) == record(seq=0, fan_out_progress=(fan_out,))
        assert not log.verify().ok
        log.delete("inv")
        log.save("inv", record(seq=2))
        assert log.load("inv") == record(seq=2)


# -- messages -----------------------------------------------------------------------------------


def test_io_error_on_a_full_disk_says_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = lmdb.Error("mdb_txn_commit: Input/output error")
    monkeypatch.setattr(lmdb_errors, "free_bytes", lambda path: 8192)
    full = lmdb_errors.translate(err, "writing 'x'", str(tmp_path))
    assert isinstance(full, StorageError)
    assert full.errno == ENOSPC
    assert "the disk is full" in str(full)
    assert "Free space on the disk" in str(full)
    monkeypatch.setattr(lmdb_errors, "free_bytes", lambda path: 50 << 30)
    failing = lmdb_errors.translate(err, "writing 'x'", str(tmp_path))
    assert "I/O error" in str(failing)
    assert "Check the device" in str(failing)
    assert "disk is full" not in str(failing)
    enospc = lmdb_errors.translate(lmdb.DiskError("No space left on device"), "w", None)
    assert enospc.errno == ENOSPC
    assert "Free space on the disk" in str(enospc)


def test_damaged_root_page_is_called_damaged(tmp_path: Path) -> None:
    path = tmp_path / "log"
    make_log(path)
    data = path / "data.mdb"
    raw = bytearray(data.read_bytes())
    offset, _ = newest_meta_offset(data)
    root = struct.unpack_from("<Q", raw, offset - 144 + 128)[0]  # the main database's md_root
    raw[root * 4096 : (root + 1) * 4096] = bytes(4096)
    data.write_bytes(bytes(raw))
    for readonly in (True, False):
        with pytest.raises((DamagedLog, NotALog)) as info:
            CheckpointLog.open(path, readonly=readonly)
        assert isinstance(info.value, CheckpointError)
        assert "damaged" in str(info.value)
        assert "backup" in str(info.value)


def test_the_root_message_names_damage_as_a_cause(tmp_path: Path) -> None:
    path = tmp_path / "foreign"
    env = lmdb.open(str(path), max_dbs=4)
    env.open_db(b"other")
    env.close()
    with pytest.raises(NotALog, match="root page is damaged"):
        CheckpointLog.open(path)


def test_a_file_short_only_by_unused_pages_opens(tmp_path: Path) -> None:
    """Pages a transaction allocated and freed again count in the meta's last page but are
    never written, so a sound file may end early (seen in the CLI's test log): only a page the
    B-trees reach past the end is damage. Simulated by raising both metas' last page."""
    path = tmp_path / "log"
    make_log(path)
    data = path / "data.mdb"
    raw = bytearray(data.read_bytes())
    for meta in (0, 4096):
        last = struct.unpack_from("<Q", raw, meta + 136)[0]
        struct.pack_into("<Q", raw, meta + 136, last + 3)
    data.write_bytes(bytes(raw))
    state = read_state(str(data), lock=False)
    assert state is not None
    assert state.short
    assert state.truncated() is None
    for readonly in (True, False):
        with CheckpointLog.open(path, readonly=readonly) as log:
            assert log.load("inv") == record(seq=11)
            assert log.verify().ok


# -- compaction killed midway -------------------------------------------------------------------

COMPACT = """
import sys
import time
from eventlog import forensics
from eventlog.checkpoints import CheckpointLog
with CheckpointLog.open(sys.argv[1], readonly=True) as log:
    forensics.compact(log, sys.argv[2])
"""


def test_a_killed_compaction_leaves_no_dest_and_runs_again(tmp_path: Path) -> None:
    """A compaction killed midway left a DEST holding frames but no heads, which the next
    compaction to the same DEST refused; DEST now appears whole or not at all."""
    src, dest = tmp_path / "src", tmp_path / "dest"
    with CheckpointLog.open(src, durability="process") as log:
        for i in range(20_000):
            inv = f"inv-{i % 40}"
            log.save(inv, CheckpointRecord(inv, "c", {"i": i}, (), (), 1.0))
        heads = {s.invocation_id: log.load(s.invocation_id) for s in log.list()}
    proc = subprocess.Popen([sys.executable, "-c", COMPACT, str(src), str(dest)])
    try:
        while proc.poll() is None and not list(tmp_path.glob(".dest.compacting-*/data.mdb")):
            time.sleep(0.001)  # until the compaction is writing
    finally:
        proc.kill()
    assert proc.wait() == -9, "the compaction finished before it could be killed"
    assert not dest.exists()
    with CheckpointLog.open(src, readonly=True) as log:
        forensics.compact(log, dest)
    with CheckpointLog.open(dest, readonly=True) as out:
        assert {s.invocation_id: out.load(s.invocation_id) for s in out.list()} == heads
        assert out.verify().ok


# -- read and delete arguments of the wrong type -----------------------------------------------

READS = [
    ("load", lambda log: log.load({"a": 1})),
    ("load_async", lambda log: asyncio.run(log.load_async(None))),
    ("delete", lambda log: log.delete(3)),
    ("history", lambda log: list(log.history({"a": 1}))),
    ("history since", lambda log: list(log.history("inv", since=b"x"))),
    ("history until", lambda log: list(log.history("inv", until=float("nan")))),
    ("history kinds", lambda log: list(log.history("inv", kinds=5))),
    ("record_at", lambda log: log.record_at("inv", None)),
    ("record_at huge", lambda log: log.record_at("inv", 2**64)),
    ("record_at id", lambda log: log.record_at({"a": 1}, 1)),
    ("record_as_of", lambda log: forensics.record_as_of(log, "inv", "now")),
    ("diff", lambda log: forensics.diff(log, "inv", "1", 2)),
    ("list", lambda log: log.list("corr")),
    ("list filter", lambda log: log.list(CheckpointFilter(correlation_id={"a": 1}))),
    ("pending_instances", lambda log: log.pending_instances("inv", None)),
    ("pending_instances ns", lambda log: log.pending_instances("inv", "work", namespace=None)),
]


@pytest.mark.parametrize("call", [c for _, c in READS], ids=[n for n, _ in READS])
def test_read_arguments_of_the_wrong_type_raise_typed_errors(tmp_path: Path, call: Any) -> None:
    """Found by the soak's bad-input section: these raised TypeError/AttributeError from
    inside a lookup (``unhashable type: 'dict'``, ``'<' not supported``)."""
    with CheckpointLog.open(tmp_path / "log") as log:
        log.save("inv", record())
        with pytest.raises(CheckpointError, match="must be"):
            call(log)
        assert log.load("inv") == record()
        assert log.verify().ok


@pytest.mark.parametrize("config", [b"x", [1], "thread", {"configurable": 5}])
def test_langgraph_config_that_is_not_a_mapping_raises_invalid_config(
    tmp_path: Path, config: Any
) -> None:
    from eventlog.integrations.langgraph import InvalidConfig, LmdbSaver  # noqa: PLC0415

    saver = LmdbSaver.open(tmp_path / "lg")
    try:
        with pytest.raises(InvalidConfig, match="config must be a dict"):
            saver.get_tuple(config)
        with pytest.raises(InvalidConfig, match="config must be a dict"):
            list(saver.list(config))
    finally:
        saver.close()


@pytest.mark.parametrize(
    "pos",
    [NodePosition("\ud800", "n", 0), NodePosition(("\ud800",), "n", 0)],  # type: ignore[arg-type]
    ids=["namespace a surrogate str", "namespace holding one"],
)
def test_a_lone_surrogate_in_a_position_is_a_typed_error(tmp_path: Path, pos: Any) -> None:
    """Found by the soak: ``msgspec.convert`` raised UnicodeEncodeError from validation."""
    with CheckpointLog.open(tmp_path / "log") as log:
        log.save("inv", record())
        with pytest.raises((InvalidRecord, EncodingError), match="namespace"):
            log.save("inv", CheckpointRecord("inv", "corr", {}, (pos,), (), 1.0))
        assert log.verify().ok
        assert log.load("inv") == record()
