"""Logs for the viewer's tests (tests/test_serve*.py): one holding every kind of stream.

``build_mixed(path)`` writes, through each integration's own API, into one log:
- ``job-1``: a fan-out of ``instances`` saved with ``save_instance`` under batching (so its
  changes land as batch frames with per-instance times), every ``FAIL_EVERY``-th instance
  failing, a ``PAUSE_S`` pause half-way, and a last save marking an in-flight failure;
- ``job-2``: three saves, then a delete;
- ``XSS_ID``: an invocation whose id, correlation id and state hold HTML;
- ``events:app``: application events;
- a LangGraph thread ``lg-thread`` with a fork (``update_state`` on a past checkpoint);
- a techrevati thread ``tr-1`` (checkpoints, a step, a delete) and an apflow task ``task-1``
  (three attempts, a delete).
"""

from __future__ import annotations

import asyncio
import operator
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Final, TypedDict

from eventlog.checkpoints import CheckpointLog
from eventlog.frames import Event
from eventlog.log import EventLog
from eventlog.materialized import TABLES as CHECKPOINT_TABLES
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)

FAIL_EVERY: Final = 97
PAUSE_S: Final = 30.0
T0: Final = 1_750_000_000.0
XSS_ID: Final = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
XSS_CORR: Final = "<b>corr</b>"
XSS_KEY: Final = "<img src=x onerror=window.__xss=3>"


def fan_record(inv: str, n: int, *, state: Any = None, corr: str = "batch-7") -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id=inv,
        correlation_id=corr,
        state=state if state is not None else {"phase": "fan_out", "items": n},
        completed_positions=(NodePosition((), "plan", 0),),
        parent_states=(),
        last_saved_at=T0,
        fan_out_progress=(FanOutProgress("work", (), n, (NOT_STARTED,) * n),),
    )


def outcome(i: int) -> FanOutInstanceProgress:
    if i % FAIL_EVERY == FAIL_EVERY - 1:
        return FanOutInstanceProgress("completed", {"error": f"item {i} timed out"}, True)
    return FanOutInstanceProgress("completed", {"value": i * i})


def write_fan_out(cl: CheckpointLog, inv: str, n: int, *, pause_at: int | None = None) -> None:
    """The fan-out of ``inv``: instance ``i`` saved at ``T0 + i / 100`` (plus ``PAUSE_S`` from
    ``pause_at`` on), through ``save_instance``."""
    cl.save(inv, fan_record(inv, n))
    for i in range(n):
        t = T0 + i / 100 + (PAUSE_S if pause_at is not None and i >= pause_at else 0.0)
        cl.save_instance(inv, "work", i, outcome(i), saved_at=t)
    cl.flush()


def build_mixed(path: Path, *, instances: int = 2000, integrations: bool = True) -> None:
    tables: list[str] = list(CHECKPOINT_TABLES)
    if integrations:
        from eventlog.integrations.apflow import TABLES as APFLOW_TABLES  # noqa: PLC0415
        from eventlog.integrations.langgraph_store import TABLES as LG_TABLES  # noqa: PLC0415
        from eventlog.integrations.techrevati import TABLES as TR_TABLES  # noqa: PLC0415

        tables += [*LG_TABLES, *TR_TABLES, *APFLOW_TABLES]
    log = EventLog.open(path, durability="process", extra_tables=tables)
    try:
        cl = CheckpointLog(log, batching=FanOutInternalSaveBatching(flush_every=256))
        write_fan_out(cl, "job-1", instances, pause_at=instances // 2)
        last = cl.load("job-1")
        assert last is not None
        cl.save_fan_out_in_flight_failure("job-1", last)
        cl.flush()
        rec = fan_record("job-2", 0, state={"step": 0})
        for step in range(3):
            cl.save("job-2", msgspec_replace(rec, state={"step": step}, fan_out_progress=()))
        cl.delete("job-2")
        cl.save(
            XSS_ID,
            msgspec_replace(
                fan_record(XSS_ID, 3, corr=XSS_CORR), state={XSS_KEY: "<script>x</script>"}
            ),
        )
        cl.save_instance(XSS_ID, "work", 1, FanOutInstanceProgress("completed", "<i>html</i>"))
        for i in range(3):
            log.append("events:app", Event(name="tick", data={"i": i}, at=T0 + i))
        if integrations:
            _langgraph(log)
            _techrevati(log)
            _apflow(log)
        log.flush()
    finally:
        log.close()


def msgspec_replace(rec: CheckpointRecord, **changes: Any) -> CheckpointRecord:
    import msgspec  # noqa: PLC0415

    return msgspec.structs.replace(rec, **changes)


class Loop(TypedDict):
    n: int
    items: Annotated[list[int], operator.add]


def _langgraph(log: EventLog) -> None:
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    def step(s: Loop) -> dict[str, Any]:
        return {"n": s["n"] + 1, "items": [s["n"]]}

    b = StateGraph(Loop)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < 4 else END)
    graph = b.compile(checkpointer=LmdbSaver(log))
    cfg: Any = {"configurable": {"thread_id": "lg-thread"}}
    graph.invoke({"n": 0, "items": []}, cfg)
    at_2 = next(s for s in graph.get_state_history(cfg) if s.values.get("n") == 2)
    fork = graph.update_state(at_2.config, {"n": 3, "items": [99]})
    graph.invoke(None, fork)


def _techrevati(log: EventLog) -> None:
    from eventlog.integrations.techrevati import LogSaver  # noqa: PLC0415

    saver = LogSaver(log)
    cp = saver.put("tr-1", {"plan": ["a", "b"]}, metadata={"who": "agent"})
    saver.put_step("tr-1", "fetch", {"rows": 3})
    saver.put("tr-1", {"plan": ["b"]}, parent_id=cp.id)
    saver.put("tr-2", {"other": True})
    saver.delete("tr-2")


def _apflow(log: EventLog) -> None:
    from eventlog.integrations.apflow import LogCheckpointManager  # noqa: PLC0415

    manager = LogCheckpointManager(log=log)

    async def attempts() -> None:
        for attempt in range(1, 4):
            await manager.save_checkpoint(
                "task-1", {"attempt": attempt, "ok": attempt == 3}, "fetch", attempt=attempt
            )
        await manager.delete_checkpoints("task-1")
        await manager.save_checkpoint("task-2", {"fresh": True}, "load")

    asyncio.run(attempts())


def build_big_fan_out(path: Path, instances: int) -> float:
    """One invocation with a fan-out of ``instances`` instances, all saved; returns seconds."""
    started = time.perf_counter()
    cl = CheckpointLog.open(
        path, durability="process", batching=FanOutInternalSaveBatching(flush_every=256)
    )
    try:
        write_fan_out(cl, "big", instances, pause_at=instances // 2)
    finally:
        cl.close()
    return time.perf_counter() - started


def build_many_saves(path: Path, saves: int) -> float:
    """One invocation with ``saves`` plain saves (a counter in its state); returns seconds."""
    started = time.perf_counter()
    cl = CheckpointLog.open(
        path, durability="process", batching=FanOutInternalSaveBatching(flush_every=4096)
    )
    try:
        rec = fan_record("many", 0, state={"i": 0})
        rec = msgspec_replace(rec, fan_out_progress=())
        for i in range(saves):
            t = T0 + i * 0.001 + (PAUSE_S if i >= saves // 2 else 0.0)
            cl.save_fan_out_internal("many", msgspec_replace(rec, state={"i": i}, last_saved_at=t))
        cl.flush()
    finally:
        cl.close()
    return time.perf_counter() - started


if __name__ == "__main__":  # python tests/viewer_logs.py DIR: a log to look at
    target = Path(sys.argv[1])
    build_mixed(target, instances=int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
