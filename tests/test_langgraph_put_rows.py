"""The rows a put and a ``put_writes`` skip reading: a put newer than the ``lg_latest`` ``c``
row reads none of its checkpoint's old rows, and ``put_writes`` against the latest checkpoint
drops duplicates from the ``w`` row. Each test fails when the shortcut is taken where the row
it skips is needed (a re-put, writes against an older checkpoint, a dropped latest row)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from eventlog.integrations.langgraph import LmdbSaver
from eventlog.integrations.langgraph_store import (
    LATEST,
    RUNS,
    latest_key,
    run_prefix,
    thread_key,
)


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[LmdbSaver]:
    s = LmdbSaver.open(tmp_path / "lg", durability="process")
    yield s
    s.close()


def conf(thread: str, cid: str | None = None) -> Any:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def ckpt(cid: str, n: int) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = cid
    cp["channel_values"] = {"n": n}
    cp["channel_versions"] = {"n": n}
    return cp


def runs(saver: LmdbSaver, run: str) -> int:
    with saver.log.backend.read() as txn:
        return len(list(txn.scan_prefix(RUNS, run_prefix(run))))


def frames(saver: LmdbSaver) -> int:
    return saver.stats().frames


def test_a_re_put_replaces_the_rows_a_newer_put_does_not_read(saver: LmdbSaver) -> None:
    a, b, c = (str(uuid6(clock_seq=i)) for i in range(3))
    saver.put(conf("t"), ckpt(a, 1), {"run_id": "r1"}, {"n": 1})
    saver.put(conf("t", a), ckpt(b, 2), {"run_id": "r2"}, {"n": 2})  # newer than the c row
    saver.put(conf("t"), ckpt(a, 1), {"run_id": "r3"}, {"n": 1})  # an older id, stored again
    saver.put(conf("t", a), ckpt(b, 2), {"run_id": "r4"}, {"n": 2})  # the latest, again
    assert (runs(saver, "r1"), runs(saver, "r2"), runs(saver, "r3"), runs(saver, "r4")) == (
        0, 0, 1, 1,
    )  # fmt: skip
    saver.put(conf("t", b), ckpt(c, 3), {"run_id": "r5"}, {"n": 3})
    assert saver.verify().ok
    tup = saver.get_tuple(conf("t"))
    assert tup is not None
    assert tup.checkpoint["id"] == c
    assert [t.metadata.get("run_id") for t in saver.list(conf("t"))] == ["r5", "r4", "r3"]


def test_a_put_without_a_latest_row_reads_the_rows(saver: LmdbSaver) -> None:
    a, b = str(uuid6(clock_seq=0)), str(uuid6(clock_seq=1))
    saver.put(conf("t"), ckpt(b, 2), {"run_id": "r1"}, {"n": 2})
    with saver.log.backend.write() as txn:  # as a removal or a copy leaves it
        txn.delete(LATEST, latest_key(thread_key("t", "")))
    saver.put(conf("t"), ckpt(b, 2), {"run_id": "r2"}, {"n": 2})  # stored again
    saver.put(conf("t"), ckpt(a, 1), {}, {"n": 1})
    assert (runs(saver, "r1"), runs(saver, "r2")) == (0, 1)
    assert saver.verify().ok


def test_duplicate_writes_are_dropped_whichever_checkpoint_they_name(saver: LmdbSaver) -> None:
    a, b = str(uuid6(clock_seq=0)), str(uuid6(clock_seq=1))
    ca = saver.put(conf("t"), ckpt(a, 1), {}, {"n": 1})
    saver.put_writes(ca, [("x", 1), ("y", 2)], "task")  # a latest checkpoint: the w row
    before = frames(saver)
    saver.put_writes(ca, [("x", 9), ("y", 9)], "task")
    assert frames(saver) == before
    saver.put_writes(ca, [("x", 9), ("y", 9)], "other")  # another task: stored
    assert frames(saver) == before + 1
    cb = saver.put(ca, ckpt(b, 2), {}, {"n": 2})
    before = frames(saver)
    saver.put_writes(ca, [("x", 9)], "task")  # an older checkpoint: the write rows say it
    assert frames(saver) == before
    saver.put_writes(ca, [("z", 3)], "task")  # idx 0 of the task is stored
    assert frames(saver) == before
    saver.put_writes(cb, [("x", 5)], "task")
    saver.put_writes(cb, [("x", 6)], "task")
    tup = saver.get_tuple(cb)
    assert tup is not None
    assert tup.pending_writes == [("task", "x", 5)]
    tup = saver.get_tuple(ca)
    assert tup is not None
    assert sorted(tup.pending_writes or []) == [
        ("other", "x", 9), ("other", "y", 9), ("task", "x", 1), ("task", "y", 2),
    ]  # fmt: skip
    assert saver.verify().ok


def test_the_kept_stream_keys_follow_the_thread_and_namespace(saver: LmdbSaver) -> None:
    # The saver keeps the last (thread, ns)'s stream and lg_threads keys: each put and
    # put_writes must land in its own thread and namespace, however the calls alternate.
    targets = [("t", ""), ("u", ""), ("t", "sub"), ("t", ""), ("u", "sub"), ("u", "")]
    for i, (tid, ns) in enumerate(targets):
        cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ns}}
        cid = str(uuid6(clock_seq=i))
        out = saver.put(cfg, ckpt(cid, i), {}, {"n": i})
        assert out["configurable"] == {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}
        saver.put_writes(out, [("n", i)], f"task-{i}")
    for tid, ns in targets:
        last = max(j for j, t in enumerate(targets) if t == (tid, ns))
        got = saver.get_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": ns}})
        assert got is not None
        assert got.checkpoint["channel_values"] == {"n": last}
        assert [w[2] for w in got.pending_writes or []] == [last]
        listed = list(saver.list({"configurable": {"thread_id": tid, "checkpoint_ns": ns}}))
        assert len(listed) == targets.count((tid, ns))
    with saver.log.backend.read() as txn:
        for tid, ns in set(targets):
            assert txn.get(LATEST, latest_key(thread_key(tid, ns))) is not None
