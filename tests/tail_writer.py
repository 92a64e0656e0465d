"""A writer in its own process for the live-tail tests (tests/test_tail_sql.py) and the tail
lag benchmark: ``python tests/tail_writer.py LOCATION KIND [UNITS]`` writes, through each
integration's own API, ``UNITS`` units of work of one kind of stream (``checkpoint``,
``langgraph``, ``techrevati``, ``apflow``, ``events``, or ``mixed``: all of them in turn),
pausing ``PAUSE_S`` between units; every frame is stamped with the real time it was built
(before its commit). Prints ``done`` when finished.

``create(location)`` makes an empty log holding every integration's tables.
"""

from __future__ import annotations

import asyncio
import operator
import sys
import time
from typing import Annotated, Any, Final, TypedDict

from eventlog.checkpoints import CheckpointLog
from eventlog.frames import Event
from eventlog.log import EventLog
from eventlog.materialized import TABLES as CHECKPOINT_TABLES
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutProgress,
    NodePosition,
)

PAUSE_S: Final = 0.005
KINDS: Final = ("checkpoint", "langgraph", "techrevati", "apflow", "events")


def tables() -> list[str]:
    from eventlog.integrations.apflow import TABLES as APFLOW_TABLES  # noqa: PLC0415
    from eventlog.integrations.langgraph_store import TABLES as LG_TABLES  # noqa: PLC0415
    from eventlog.integrations.techrevati import TABLES as TR_TABLES  # noqa: PLC0415

    return [*CHECKPOINT_TABLES, *LG_TABLES, *TR_TABLES, *APFLOW_TABLES]


def create(location: str) -> None:
    EventLog.open(location, durability="process", extra_tables=tables()).close()


def checkpoint(log: EventLog, units: int) -> None:
    cl = CheckpointLog(log)
    n = max(units, 1)
    rec = CheckpointRecord(
        invocation_id="job-live",
        correlation_id="batch-live",
        state={"phase": "fan_out", "items": n},
        completed_positions=(NodePosition((), "plan", 0),),
        parent_states=(),
        last_saved_at=time.time(),
        fan_out_progress=(FanOutProgress("work", (), n, (NOT_STARTED,) * n),),
    )
    cl.save("job-live", rec)
    for i in range(units):
        time.sleep(PAUSE_S)
        done = FanOutInstanceProgress("completed", {"value": i})
        cl.save_instance("job-live", "work", i, done, saved_at=time.time())
    cl.flush()


class Loop(TypedDict):
    n: int
    items: Annotated[list[int], operator.add]


def langgraph(log: EventLog, units: int) -> None:
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    def step(s: Loop) -> dict[str, Any]:
        time.sleep(PAUSE_S)
        return {"n": s["n"] + 1, "items": [s["n"]]}

    b = StateGraph(Loop)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < max(units, 1) else END)
    graph = b.compile(checkpointer=LmdbSaver(log))
    graph.invoke({"n": 0, "items": []}, {"configurable": {"thread_id": "lg-live"}})


def techrevati(log: EventLog, units: int) -> None:
    from eventlog.integrations.techrevati import LogSaver  # noqa: PLC0415

    saver = LogSaver(log)
    for i in range(units):
        time.sleep(PAUSE_S)
        if i % 3 == 1:
            saver.put_step("tr-live", f"step-{i}", {"i": i})
        else:
            saver.put("tr-live", {"i": i})


def apflow(log: EventLog, units: int) -> None:
    from eventlog.integrations.apflow import LogCheckpointManager  # noqa: PLC0415

    manager = LogCheckpointManager(log=log)

    async def attempts() -> None:
        for i in range(units):
            await asyncio.sleep(PAUSE_S)
            await manager.save_checkpoint("task-live", {"i": i}, "fetch", attempt=i + 1)

    asyncio.run(attempts())


def events(log: EventLog, units: int) -> None:
    for i in range(units):
        time.sleep(PAUSE_S)
        log.append("events:live", Event(name="tick", data={"i": i}, at=time.time()))


WRITERS: Final = {
    "checkpoint": checkpoint,
    "langgraph": langgraph,
    "techrevati": techrevati,
    "apflow": apflow,
    "events": events,
}


def write(location: str, kind: str, units: int) -> None:
    log = EventLog.open(location, durability="process", extra_tables=tables())
    try:
        for k in KINDS if kind == "mixed" else (kind,):
            WRITERS[k](log, units)
        log.flush()
    finally:
        log.close()


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 20)
    print("done", flush=True)
