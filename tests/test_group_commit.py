"""Group commit of async saves on the event loop's thread uses only the loop's public API
(issue 13): tasks saving in one loop step share a commit on any loop, a lone save commits at
once. A loop without asyncio's private ``_ready`` queue (uvloop has none) is stood in for by
a proxy of the running loop that refuses private attributes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import eventlog.log as log_module
from eventlog.frames import Event
from eventlog.log import EventLog

EVENT = Event(name="x", data=b"y" * 100, at=1.0)


class PublicLoop:
    """The running loop, without its private attributes."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"{name}: private to the loop")
        return getattr(self._loop, name)

    def __hash__(self) -> int:
        return hash(self._loop)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicLoop) and other._loop is self._loop


@pytest.fixture(params=["asyncio", "public-api-only"])
def log(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    if request.param == "public-api-only":
        real = asyncio.get_running_loop
        monkeypatch.setattr(log_module.asyncio, "get_running_loop", lambda: PublicLoop(real()))
    with EventLog.open(tmp_path / "log", durability="process") as opened:
        yield opened


def test_tasks_saving_in_one_loop_step_share_a_commit(log: EventLog) -> None:
    async def run() -> None:
        await log.append_async("warm", EVENT)
        before = log.stats().commits
        done = await asyncio.gather(*(log.append_async(f"s{i % 7}", EVENT) for i in range(500)))
        assert len(done) == 500
        commits = log.stats().commits - before
        # The step's first save at once, the other 499 together (the writer thread, if it is
        # awake, may take part of the queue: a few commits, never one per save).
        assert commits <= 10, commits

    asyncio.run(run())
    assert sum(1 for _ in log.scan()) == 501


def test_a_lone_save_commits_at_once(log: EventLog) -> None:
    async def run() -> None:
        for i in range(20):
            before = log.stats().commits
            appended = await log.append_async("lone", EVENT)
            assert appended.seq == i + 1
            assert log.stats().commits == before + 1

    asyncio.run(run())
