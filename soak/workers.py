"""The processes the soak kills: ``python -m soak.workers KIND PATH [ARGS]``.

Each worker resumes the job it finds in the log, works until it is killed, and prints one line
``ACK <json>`` (flushed) after each operation the library acknowledged: a durable save that
returned, or a run of buffered instance saves whose flush returned. The parent checks every
acknowledged operation against the log after the kill.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from eventlog import (
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
    forensics,
)
from eventlog.checkpoints import Checkpointer, CheckpointLog

RUN = 8  # instance saves per buffered run (flush_every): committed whole or not at all
FAN_SIZE = 4096  # instances in each fan-out a worker completes


def ack(**fields: Any) -> None:
    sys.stdout.write("ACK " + json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def rec(inv: str, state: Any, *, fan_out: tuple[FanOutProgress, ...] = ()) -> CheckpointRecord:
    return CheckpointRecord(
        inv, "soak", state, (NodePosition((), "step", 0),), (), time.time(),
        fan_out_progress=fan_out,
    )  # fmt: skip


def fan_out(size: int = FAN_SIZE) -> FanOutProgress:
    return FanOutProgress("work", (), size, (FanOutInstanceProgress("not_started"),) * size)


def _next_n(log: CheckpointLog, inv: str) -> int:
    head = log.load(inv)
    return 0 if head is None else int(head.state["n"]) + 1


def single(path: str, wid: str, shared: str | None) -> None:
    """Durable saves of ``inv-WID`` (state ``{"n": n}``) interleaved with buffered runs of
    instance saves on a fan-out (``fan-WID``, or ``shared`` whose residue ``WID mod 4``)."""
    log = CheckpointLog.open(path, batching=FanOutInternalSaveBatching(flush_every=RUN))
    inv = f"inv-{wid}"
    fan = shared or f"fan-{wid}"
    if shared is None and log.load(fan) is None:
        log.save(fan, rec(fan, {"n": 0}, fan_out=(fan_out(),)))
    pending = log.pending_instances(fan, "work") or []
    if shared is not None:
        pending = [i for i in pending if i % 4 == int(wid)]
    n = _next_n(log, inv)
    step = 0
    while True:
        log.save(inv, rec(inv, {"n": n}))
        ack(inv=inv, n=n)
        n += 1
        step += 1
        if step % 3 == 0 and len(pending) >= RUN:
            run, pending = pending[:RUN], pending[RUN:]
            for i in run:
                log.save_instance(fan, "work", i, FanOutInstanceProgress("completed", result=i))
            log.flush()
            ack(fan=fan, idx=run)


async def _async_saves(path: str, wid: str) -> None:
    cp = Checkpointer.open(path)
    round_no = 0
    while True:  # 1,000 concurrent saves a round, over 50 invocations
        tok = f"{os.getpid()}-{round_no}"

        async def one(k: int, tok: str = tok) -> None:
            inv = f"a-{wid}-{k % 50}"
            await cp.save(inv, rec(inv, {"tok": f"{tok}-{k}"}))
            ack(inv=inv, tok=f"{tok}-{k}")

        await asyncio.gather(*(one(k) for k in range(1000)))
        round_no += 1


def async_saves(path: str, wid: str) -> None:
    asyncio.run(_async_saves(path, wid))


def compact(path: str, dest: str) -> None:
    with CheckpointLog.open(path, readonly=True) as log:
        forensics.compact(log, dest)
    ack(compacted=dest)


def techrevati(path: str, wid: str) -> None:
    from eventlog.integrations.techrevati import LogSaver  # noqa: PLC0415

    saver = LogSaver.open(path)
    n = 0
    while True:
        thread = f"t-{wid}-{n % 5}"
        saver.put(thread, {"tok": f"{os.getpid()}-{n}"})
        ack(thread=thread, tok=f"{os.getpid()}-{n}")
        n += 1


async def _apflow(path: str, wid: str) -> None:
    from eventlog.integrations.apflow import LogCheckpointManager  # noqa: PLC0415

    mgr = LogCheckpointManager.open(path)
    n = 0
    while True:
        task = f"task-{wid}-{n % 5}"
        await mgr.save_checkpoint(task, {"tok": f"{os.getpid()}-{n}"}, "step")
        ack(task=task, tok=f"{os.getpid()}-{n}")
        n += 1


def apflow(path: str, wid: str) -> None:
    asyncio.run(_apflow(path, wid))


def langgraph(path: str, wid: str) -> None:
    """A one-node LangGraph graph that counts; each invoke resumes from the thread's state."""
    from typing import TypedDict  # noqa: PLC0415

    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    class State(TypedDict):
        n: int

    def bump(state: State) -> State:
        return {"n": state["n"] + 1}

    graph = StateGraph(State)
    graph.add_node("bump", bump)
    graph.add_edge(START, "bump")
    graph.add_edge("bump", END)
    saver = LmdbSaver.open(path)
    app = graph.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": f"lg-{wid}"}}
    while True:
        snap = app.get_state(config)
        n = int(snap.values.get("n", 0)) if snap.values else 0
        out = app.invoke({"n": n}, config)
        ack(thread=f"lg-{wid}", n=int(out["n"]))


def hold_read(path: str, seconds: str) -> None:
    """Hold a read transaction open (for the map-growth fault) and say when it is held."""
    with CheckpointLog.open(path, readonly=True) as log, log.log.backend.read() as txn:
        txn.count("log")
        ack(holding=True)
        time.sleep(float(seconds))
    ack(released=True)


def reader(path: str, seconds: str) -> None:
    """Read heads, histories and points in time while writers run; report any head whose
    state disagrees with its fan-out (a half-applied record) and the reads made."""
    end = time.monotonic() + float(seconds)
    reads = torn = 0
    with CheckpointLog.open(path, readonly=True) as log:
        while time.monotonic() < end:
            for s in log.list():
                head = log.load(s.invocation_id)
                if head is None:
                    continue
                reads += 1
                if "done" in head.state and head.fan_out_progress:
                    done = sum(i.state == "completed" for i in head.fan_out_progress[0].instances)
                    torn += done != head.state["done"]
                if reads % 25 == 0:  # whole histories grow long: now and then
                    entries = list(log.history(s.invocation_id))
                    if entries:
                        log.record_at(s.invocation_id, entries[len(entries) // 2].seq)
    ack(reads=reads, torn=torn)


def consistent_writer(path: str, wid: str) -> None:
    """Full saves whose state counts the fan-out's completed instances (``done``), for the
    readers to check: a record is committed whole, so the two always agree."""
    log = CheckpointLog.open(path, durability="process")
    inv = f"c-{wid}"
    size = 64
    done = 0
    insts = [FanOutInstanceProgress("not_started")] * size
    while True:
        i = done % size
        insts[i] = FanOutInstanceProgress(
            "not_started" if insts[i].state == "completed" else "completed"
        )
        done = sum(x.state == "completed" for x in insts)
        fo = FanOutProgress("work", (), size, tuple(insts))
        log.save(inv, rec(inv, {"done": done}, fan_out=(fo,)))
        ack(inv=inv, done=done)


KINDS = {
    "single": lambda a: single(a[0], a[1], a[2] if len(a) > 2 else None),
    "async": lambda a: async_saves(a[0], a[1]),
    "compact": lambda a: compact(a[0], a[1]),
    "techrevati": lambda a: techrevati(a[0], a[1]),
    "apflow": lambda a: apflow(a[0], a[1]),
    "langgraph": lambda a: langgraph(a[0], a[1]),
    "hold_read": lambda a: hold_read(a[0], a[1]),
    "reader": lambda a: reader(a[0], a[1]),
    "consistent_writer": lambda a: consistent_writer(a[0], a[1]),
}


if __name__ == "__main__":
    KINDS[sys.argv[1]](sys.argv[2:])
