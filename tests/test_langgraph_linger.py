"""LmdbSaver.put_writes on an ``"fsync"`` log lingers for the step's ``put`` (issue 28): the
two share one commit, so a ``durability="sync"`` step costs one device flush, not two; a
put_writes that no put joins still commits (durable on return), and two such in a row stop
the lingering for a while (``LINGER_BACKOFF`` calls)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph

from eventlog.integrations.langgraph import LINGER_BACKOFF, LINGER_S, LmdbSaver


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[LmdbSaver]:
    s = LmdbSaver.open(tmp_path / "lg")  # "fsync", the default
    yield s
    s.close()


def _put(saver: LmdbSaver, config: Any, i: int) -> Any:
    cp = empty_checkpoint()
    cp["id"] = f"{i:032d}"
    cp["channel_values"] = {"n": i}
    cp["channel_versions"] = {"n": i + 1}
    return saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {"n": i + 1})


def test_lingers_only_on_fsync_logs(saver: LmdbSaver, tmp_path: Path) -> None:
    assert saver._linger == LINGER_S > 0
    other = LmdbSaver.open(tmp_path / "p", durability="process")
    try:
        assert other._linger == 0.0
    finally:
        other.close()


def test_put_writes_and_the_next_put_share_one_commit(saver: LmdbSaver) -> None:
    saver._linger = 10.0  # long: the put below surely comes while put_writes waits
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    shared = 0
    for attempt in range(5):
        c0 = _put(saver, config, 2 * attempt)
        # The writer thread may have committed that put (it races the caller for the lead) and
        # still be finishing, or have been woken by its end and not yet run: an append queued
        # then is taken by its next commit, not lingered on. On a loaded machine that can
        # happen whatever the test waits for, so an attempt where it did is made again.
        deadline = time.monotonic() + 10
        while saver.log._committing and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)
        done: list[float] = []

        def writes(c: Any = c0, k: int = attempt, out: list[float] = done) -> None:
            t = time.monotonic()
            saver.put_writes(c, [("n", 41 + k)], f"task-{k}")
            out.append(time.monotonic() - t)

        th = threading.Thread(target=writes)
        th.start()
        time.sleep(0.2)  # put_writes has queued its frame and waits
        if done:  # taken by a commit the writer thread had been woken for: not lingered on
            th.join(10)
            config = c0
            continue
        before = saver.log.stats().commits
        config = _put(saver, c0, 2 * attempt + 1)
        th.join(10)
        assert done
        assert done[0] < 5.0  # ended by the put's commit, not by its linger
        assert saver.log.stats().commits == before + 1
        got = saver.get_tuple(c0)
        assert got is not None
        assert [(t, c, v) for t, c, v in got.pending_writes or []] == [
            (f"task-{attempt}", "n", 41 + attempt)
        ]
        shared += 1
        break
    assert shared == 1, "every put_writes was committed before the next put came"


def test_put_writes_nobody_joins_commits_after_its_linger_then_backs_off(
    saver: LmdbSaver,
) -> None:
    saver._linger = 0.05
    c0 = _put(saver, {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, 0)
    for k in range(2):
        before = saver.log.stats().commits
        t = time.monotonic()
        saver.put_writes(c0, [("n", k)], f"task-{k}")
        assert time.monotonic() - t >= 0.05
        assert saver.log.stats().commits == before + 1  # committed by itself, on return
    assert saver._linger_skip == LINGER_BACKOFF
    saver.put_writes(c0, [("n", 2)], "task-2")  # without lingering
    assert saver._linger_skip == LINGER_BACKOFF - 1
    got = saver.get_tuple(c0)
    assert got is not None
    assert sorted(t for t, _, _ in got.pending_writes or []) == ["task-0", "task-1", "task-2"]


class _Count(TypedDict):
    n: int


def test_a_sync_graph_run_makes_one_commit_a_step(saver: LmdbSaver) -> None:
    saver._linger = 0.5  # generous on a loaded machine; a step that did not share waits it out
    steps = 20

    def bump(s: _Count) -> _Count:
        return {"n": s["n"] + 1}

    graph = StateGraph(_Count)
    graph.add_node("bump", bump)
    graph.add_edge(START, "bump")
    graph.add_conditional_edges("bump", lambda s: END if s["n"] >= steps else "bump")
    app = graph.compile(checkpointer=saver)
    before = saver.log.stats().commits
    app.invoke({"n": 0}, {"configurable": {"thread_id": "loop"}}, durability="sync")
    commits = saver.log.stats().commits - before
    # each step: the node's put_writes and the step's put; the input step and the first
    # put have no partner
    assert commits <= steps + 4, commits
    assert saver._linger_skip == 0
