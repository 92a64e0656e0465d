"""The anchored head (issue 25): ``ckptlog head PATH`` and ``ckptlog verify PATH --expect-head
DIGEST`` on every kind of log (checkpoint, LangGraph, techrevati, apflow, and one mixing them),
on LMDB and PostgreSQL.

Each case takes the digest, then: the log only grows (passes); the log is put back to a copy
taken before the last commits (a truncated tail / a restored backup: fails, though every
chain still verifies); the newest LMDB meta page is rolled back to the transaction before it
(fails, though LMDB opens the file and every chain verifies); and on PostgreSQL the same log
copied there answers the same digest, and an older copy of it fails.
"""

from __future__ import annotations

import asyncio
import operator
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, TypedDict

import pytest

from backends.lmdb_meta import read_state
from eventlog import anchor
from eventlog.checkpoints import CheckpointLog
from eventlog.copylog import copy_log
from eventlog.errors import InvalidHeadDigest
from eventlog.frames import Event
from eventlog.log import EventLog
from eventlog.materialized import TABLES as CHECKPOINT_TABLES
from eventlog.records import CheckpointRecord, NodePosition

REPO = Path(__file__).resolve().parents[1]
KINDS: Final = ("checkpoint", "langgraph", "techrevati", "apflow", "mixed")


def tables() -> list[str]:
    from eventlog.integrations.apflow import TABLES as APFLOW_TABLES  # noqa: PLC0415
    from eventlog.integrations.langgraph_store import TABLES as LG_TABLES  # noqa: PLC0415
    from eventlog.integrations.techrevati import TABLES as TR_TABLES  # noqa: PLC0415

    return [*CHECKPOINT_TABLES, *LG_TABLES, *TR_TABLES, *APFLOW_TABLES]


def open_log(where: str | Path) -> EventLog:
    return EventLog.open(where, durability="process", extra_tables=tables())


# -- writers: a round of frames of one kind, under ids of round ``r`` --------------------------


def write_checkpoints(log: EventLog, r: int) -> None:
    cl = CheckpointLog(log)
    inv = f"inv-{r}"
    for step in range(1, 4):
        cl.save(
            inv,
            CheckpointRecord(
                inv, "corr", {"step": step}, (NodePosition((), "n", step),), (), float(step)
            ),
        )
    cl.save("inv-0", CheckpointRecord("inv-0", "corr", {"round": r}, (), (), float(r)))


class Loop(TypedDict):
    n: int
    items: Annotated[list[int], operator.add]


def write_langgraph(log: EventLog, r: int) -> None:
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    def step(s: Loop) -> dict[str, Any]:
        return {"n": s["n"] + 1, "items": [s["n"]]}

    b = StateGraph(Loop)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < 3 else END)
    graph = b.compile(checkpointer=LmdbSaver(log))
    for thread in (f"t-{r}", "t-0"):
        graph.invoke({"n": 0, "items": []}, {"configurable": {"thread_id": thread}})


def write_techrevati(log: EventLog, r: int) -> None:
    from eventlog.integrations.techrevati import LogSaver  # noqa: PLC0415

    saver = LogSaver(log)
    cp = saver.put(f"tr-{r}", {"plan": [r]}, metadata={"round": r})
    saver.put_step(f"tr-{r}", "fetch", {"rows": r})
    saver.put(f"tr-{r}", {"plan": []}, parent_id=cp.id)
    saver.put("tr-0", {"round": r})


def write_apflow(log: EventLog, r: int) -> None:
    from eventlog.integrations.apflow import LogCheckpointManager  # noqa: PLC0415

    manager = LogCheckpointManager(log=log)

    async def go() -> None:
        for attempt in (1, 2):
            await manager.save_checkpoint(f"task-{r}", {"a": attempt}, "fetch", attempt=attempt)
        await manager.save_checkpoint("task-0", {"round": r}, "load")

    asyncio.run(go())


def write_mixed(log: EventLog, r: int) -> None:
    for write in (write_checkpoints, write_langgraph, write_techrevati, write_apflow):
        write(log, r)
    log.append("events:app", Event(name="tick", data={"round": r}))


WRITERS: Final[dict[str, Callable[[EventLog, int], None]]] = {
    "checkpoint": write_checkpoints,
    "langgraph": write_langgraph,
    "techrevati": write_techrevati,
    "apflow": write_apflow,
    "mixed": write_mixed,
}


def grow(where: str | Path, kind: str, r: int) -> None:
    log = open_log(where)
    try:
        WRITERS[kind](log, r)
        log.flush()
    finally:
        log.close()


def ckptlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventlog.cli", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def head(where: str | Path) -> str:
    done = ckptlog("head", str(where))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def verify(where: str | Path, digest: str | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--expect-head", digest] if digest is not None else []
    return ckptlog("verify", str(where), *extra)


def failed_on_head(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode == 1 and "[head]" in done.stdout


# -- the token ---------------------------------------------------------------------------------


def test_the_token_is_compact_and_self_describing(tmp_path: Path) -> None:
    grow(tmp_path / "log", "checkpoint", 1)
    token = head(tmp_path / "log")
    digest = anchor.parse(token)
    assert token == digest.token
    assert token.startswith("ckh1:")
    assert (digest.global_seq, digest.frames, digest.streams) == (4, 4, 2)
    assert len(token) < 90
    assert head(tmp_path / "log") == token  # the same log, the same digest
    for bad in (
        "",
        "ckh1:4:4:2",
        token[:-1],
        token.replace("ckh1", "ckh2"),
        "ckh1:1:2:1:" + "0" * 64,
    ):
        with pytest.raises(InvalidHeadDigest, match="is not a head digest"):
            anchor.parse(bad)
    refused = verify(tmp_path / "log", "not-a-digest")
    assert refused.returncode == 2
    assert "is not a head digest" in refused.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_a_log_that_only_grew_passes(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "log"
    grow(path, kind, 1)
    digest = head(path)
    assert verify(path, digest).returncode == 0
    grow(path, kind, 2)  # new streams and new frames of old ones
    assert head(path) != digest
    done = verify(path, digest)
    assert done.returncode == 0, done.stdout
    with CheckpointLog.open(path, readonly=True) as cl:
        assert anchor.check(cl.log, anchor.parse(digest)) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_truncated_tail_fails(tmp_path: Path, kind: str) -> None:
    """The log put back to a copy taken before the last commits (a restored backup, a cut
    tail): every chain verifies, the head digest does not."""
    path, backup = tmp_path / "log", tmp_path / "backup"
    grow(path, kind, 1)
    shutil.copytree(path, backup)
    grow(path, kind, 2)
    digest = head(path)
    shutil.rmtree(path)
    shutil.copytree(backup, path)
    assert verify(path).returncode == 0  # the chains alone cannot tell
    done = verify(path, digest)
    assert failed_on_head(done), done.stdout + done.stderr
    assert "removed" in done.stdout
    # grown again past the digest's global seq with other frames: still fails
    grow(path, kind, 3)
    grow(path, kind, 4)
    assert verify(path).returncode == 0
    again = verify(path, digest)
    assert failed_on_head(again), again.stdout
    assert "does not extend the head digest" in again.stdout


def roll_back_newest_meta(data: Path) -> tuple[int, int]:
    """Give the newest meta page the id two below it: LMDB then opens the other page (the
    transaction before), and the pair still looks sound (consecutive ids, right parity)."""
    raw = data.read_bytes()[: 2 * 65536 + 160]
    page = struct.unpack_from("<I", raw, 40)[0]
    txns = [struct.unpack_from("<Q", raw, i * page + 144)[0] for i in (0, 1)]
    newest = 0 if txns[0] > txns[1] else 1
    with open(data, "r+b") as f:
        f.seek(newest * page + 144)
        f.write(struct.pack("<Q", txns[newest] - 2))
    return txns[newest], txns[1 - newest]


@pytest.mark.parametrize("kind", KINDS)
def test_an_lmdb_meta_rollback_fails(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "log"
    grow(path, kind, 1)
    grow(path, kind, 2)
    digest = head(path)
    frames = anchor.parse(digest).frames
    was, opens = roll_back_newest_meta(path / "data.mdb")
    state = read_state(str(path / "data.mdb"), lock=False)
    assert state is not None
    assert state.meta_damage() is None  # the meta pages look sound
    assert state.newest.txn_id == opens == was - 1
    with CheckpointLog.open(path, readonly=True) as cl:
        assert cl.stats().frames < frames  # LMDB opened the transaction before the last
    assert verify(path).returncode == 0  # and every chain verifies
    done = verify(path, digest)
    assert failed_on_head(done), done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["checkpoint", "mixed"])
def test_on_postgresql(tmp_path: Path, kind: str, pg_schemas: Any) -> None:
    """The same log on PostgreSQL (``ckptlog copy``: byte for byte) answers the same digest;
    an older copy fails it; a PostgreSQL log that grew passes."""
    path, backup = tmp_path / "log", tmp_path / "backup"
    grow(path, kind, 1)
    shutil.copytree(path, backup)
    grow(path, kind, 2)
    digest = head(path)
    now, old = pg_schemas.url(tmp_path / "now"), pg_schemas.url(tmp_path / "old")
    copy_log(path, now)
    copy_log(backup, old)
    assert head(now) == digest
    assert verify(now, digest).returncode == 0
    done = verify(old, digest)
    assert failed_on_head(done), done.stdout + done.stderr
    grow(now, kind, 3)
    assert head(now) != digest
    assert verify(now, digest).returncode == 0
