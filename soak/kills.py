"""Kills: seeded SIGKILLs of real writer processes, each followed by a check of the log.

After each kill the log must open (writable, as the resumed job opens it), ``verify`` must
pass, every acknowledged save must be present exactly once, every buffered run of instance
saves must be committed whole or not at all, and the next round (a new process) resumes the
job from what the log holds.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from eventlog import forensics
from eventlog.checkpoints import CheckpointLog
from soak.common import Child, Tally
from soak.workers import FAN_SIZE, RUN, fan_out, rec

ROUNDS_PER_LOG = 12  # a fresh log after this many kills: checks read whole histories

# kind -> (share of the kills, (shortest, longest) seconds from spawn to kill)
SCENARIOS: dict[str, tuple[float, tuple[float, float]]] = {
    "single": (0.25, (0.2, 1.6)),
    "multi": (0.20, (0.3, 2.0)),
    "async": (0.15, (0.4, 2.0)),
    "compact": (0.10, (0.2, 0.8)),
    "techrevati": (0.10, (0.3, 1.5)),
    "apflow": (0.10, (0.3, 1.5)),
    "langgraph": (0.10, (1.0, 4.0)),
}


class _Log:
    """One scenario's current log and everything acknowledged into it so far."""

    def __init__(self, root: Path, kind: str) -> None:
        self.root = root
        self.kind = kind
        self.generation = 0
        self.rounds = 0
        self.path = root
        self.acks: list[dict[str, Any]] = []
        self.fresh()

    def fresh(self) -> None:
        self.generation += 1
        self.rounds = 0
        self.acks = []
        self.path = self.root / f"{self.kind}-{self.generation}"
        if self.kind == "multi":
            with CheckpointLog.open(self.path) as log:
                log.save("shared", rec("shared", {"n": 0}, fan_out=(fan_out(),)))
        if self.kind == "compact":
            _source_log(self.path)


def _source_log(path: Path) -> None:
    with CheckpointLog.open(path, durability="process") as log:
        for i in range(30_000):  # about a second to compact: kills land mid-way
            inv = f"inv-{i % 40}"
            log.save(inv, rec(inv, {"n": i, "blob": "x" * (i % 7 * 300)}))


def run(seed: int, kills: int, workdir: Path, tally: Tally) -> None:
    rng = random.Random(seed)
    names = list(SCENARIOS)
    weights = [SCENARIOS[k][0] for k in names]
    logs = {k: _Log(workdir / "kills", k) for k in names}
    plan = rng.choices(names, weights, k=kills)
    for k in names:  # every kind at least once, even in the shortest run
        if k not in plan and len(plan) >= len(names):
            plan[names.index(k)] = k
    for kind in plan:
        log = logs[kind]
        if log.rounds >= ROUNDS_PER_LOG:
            shutil.rmtree(log.path, ignore_errors=True)
            log.fresh()
        log.rounds += 1
        low, high = SCENARIOS[kind][1]
        _one_kill(kind, log, rng.uniform(low, high), workdir, tally)
    shutil.rmtree(workdir / "kills", ignore_errors=True)


def _spawn(kind: str, log: _Log, workdir: Path) -> list[Child]:
    p = str(log.path)
    if kind == "single":
        return [Child(workdir, "single", p, "0")]
    if kind == "multi":
        return [Child(workdir, "single", p, str(w), "shared") for w in range(4)]
    if kind == "async":
        return [Child(workdir, "async", p, "0")]
    if kind == "compact":
        return [Child(workdir, "compact", p, str(log.path) + "-dest")]
    return [Child(workdir, kind, p, "0")]


def _one_kill(kind: str, log: _Log, delay: float, workdir: Path, tally: Tally) -> None:
    children = _spawn(kind, log, workdir)
    if kind == "multi":  # four writers killed one after another, at their own moments
        for child in children:
            time.sleep(delay / len(children))
            child.kill()
    else:
        time.sleep(delay)
        for child in children:
            child.kill()
    new: list[dict[str, Any]] = []
    killed = 0
    for child in children:
        code, acks, other = child.finish()
        killed += code == -9
        if code is None:
            tally.fail(f"{kind}: a worker hung after SIGKILL")
        elif code == 0 and kind == "compact":
            tally.add("compact:finished_before_kill")
        elif code != -9:
            tally.fail(f"{kind}: a worker exited with {code} before its kill: {other}")
        new += acks
    tally.add("kills", killed)
    tally.add(f"kills:{kind}", killed)
    tally.add("acked", len(new))
    log.acks += new
    try:
        CHECKS[kind](log, new, tally)
    except Exception as e:  # noqa: BLE001 - a check that cannot run is a failure to report
        tally.fail(f"{kind}: the log could not be checked after a kill: {type(e).__name__}: {e}")


def _check_checkpoints(log: _Log, new: list[dict[str, Any]], tally: Tally) -> None:
    with CheckpointLog.open(log.path) as cl:
        report = cl.verify()
        if not report.ok:
            tally.fail(f"{log.kind}: verify failed after a kill: {report.problems[:3]}")
        acked: dict[str, set[Any]] = defaultdict(set)
        for a in log.acks:
            if "inv" in a:
                acked[a["inv"]].add(a.get("n", a.get("tok")))
        for inv, want in acked.items():
            got = [
                e.record.state.get("n", e.record.state.get("tok"))
                for e in cl.history(inv)
                if e.record is not None
            ]
            _exactly_once(log.kind, inv, want, got, tally)
        fans = {a["fan"] for a in log.acks if "fan" in a}
        if log.kind == "multi":
            fans.add("shared")
        for fan in fans:
            _whole_runs(log, cl, fan, tally)
    tally.add("resumed")  # the next round reopens this log and continues from it


def _exactly_once(kind: str, key: str, want: set[Any], got: list[Any], tally: Tally) -> None:
    present = set(got)
    lost = want - present
    if lost:
        tally.add("lost", len(lost))
        tally.fail(f"{kind}: {key}: {len(lost)} acknowledged save(s) missing: {sorted(lost)[:5]}")
    if len(got) != len(present):
        tally.add("duplicated", len(got) - len(present))
        tally.fail(f"{kind}: {key}: a save is present more than once")


def _whole_runs(log: _Log, cl: CheckpointLog, fan: str, tally: Tally) -> None:
    head = cl.load(fan)
    if head is None:
        return
    insts = head.fan_out_progress[0].instances
    done = [i for i, x in enumerate(insts) if x.state == "completed"]
    if any(insts[i].result != i for i in done):
        tally.fail(f"{log.kind}: {fan}: an instance's result is not the one saved")
    acked = {i for a in log.acks if a.get("fan") == fan for i in a["idx"]}
    if acked - set(done):
        tally.add("lost", len(acked - set(done)))
        tally.fail(f"{log.kind}: {fan}: acknowledged instance saves missing")
    groups = [range(w, FAN_SIZE, 4) for w in range(4)] if fan == "shared" else [range(FAN_SIZE)]
    for group in groups:
        mine = [i for i in done if i in group]
        if mine != list(group)[: len(mine)] or len(mine) % RUN:
            tally.add("half_applied")
            tally.fail(f"{log.kind}: {fan}: a buffered run is half-applied: {mine[-RUN:]}")
    tally.add("runs_checked", len(done) // RUN)


def _check_compact(log: _Log, new: list[dict[str, Any]], tally: Tally) -> None:
    dest = Path(str(log.path) + "-dest")
    with CheckpointLog.open(log.path, readonly=True) as src:
        if not src.verify().ok:
            tally.fail("compact: the source log does not verify after a killed compaction")
        heads = {s.invocation_id: src.load(s.invocation_id) for s in src.list()}
        tally.add("acked", len(heads))
        if dest.exists() and any(dest.iterdir()):
            try:
                with CheckpointLog.open(dest, readonly=True) as out:
                    got = {s.invocation_id: out.load(s.invocation_id) for s in out.list()}
                    ok = out.verify().ok
            except Exception as e:  # noqa: BLE001 - a refused DEST is reported, not a crash
                got, ok = {}, False
                tally.add("compact:dest_refused")
                del e
            if got == heads and ok:
                tally.add("compact:dest_complete")
            elif ok:
                tally.add("compact:dest_partial")
                tally.fail(
                    f"compact: a killed compaction left a DEST that opens and verifies but "
                    f"holds {len(got)} of {len(heads)} invocations"
                )
        else:
            tally.add("compact:dest_absent")
            forensics.compact(
                src, dest
            )  # the job resumes: the same compaction, run again, completes
            with CheckpointLog.open(dest, readonly=True) as out:
                if {s.invocation_id: out.load(s.invocation_id) for s in out.list()} != heads:
                    tally.fail("compact: the compaction run after a kill is not the source's")
        shutil.rmtree(dest, ignore_errors=True)
    for junk in dest.parent.glob(f".{dest.name}.compacting-*"):
        shutil.rmtree(junk, ignore_errors=True)  # what a killed compaction leaves
        tally.add("compact:left_hidden_build")
    tally.add("resumed")


def _check_techrevati(log: _Log, new: list[dict[str, Any]], tally: Tally) -> None:
    from eventlog.integrations.techrevati import LogSaver  # noqa: PLC0415

    with LogSaver.open(log.path) as saver:
        if not saver.verify().ok:
            tally.fail("techrevati: verify failed after a kill")
        for thread in {a["thread"] for a in log.acks}:
            want = {a["tok"] for a in log.acks if a["thread"] == thread}
            got = [h.checkpoint.state["tok"] for h in saver.history(thread) if h.checkpoint]
            _exactly_once("techrevati", thread, want, got, tally)
    tally.add("resumed")


def _check_apflow(log: _Log, new: list[dict[str, Any]], tally: Tally) -> None:
    from eventlog.integrations.apflow import LogCheckpointManager  # noqa: PLC0415

    mgr = LogCheckpointManager.open(log.path)
    try:
        if not mgr.verify().ok:
            tally.fail("apflow: verify failed after a kill")
        for task in {a["task"] for a in log.acks}:
            want = {a["tok"] for a in log.acks if a["task"] == task}
            got = [h.data["tok"] for h in mgr.history(task) if h.data is not None]
            _exactly_once("apflow", task, want, got, tally)
    finally:
        asyncio.run(mgr.aclose())
    tally.add("resumed")


def _check_langgraph(log: _Log, new: list[dict[str, Any]], tally: Tally) -> None:
    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415

    if not log.path.exists():
        return  # killed before it created the log
    saver = LmdbSaver.open(log.path)
    try:
        if not saver.verify().ok:
            tally.fail("langgraph: verify failed after a kill")
        for thread in {a["thread"] for a in log.acks}:
            best = max(a["n"] for a in log.acks if a["thread"] == thread)
            tup = saver.get_tuple({"configurable": {"thread_id": thread}})
            n = 0 if tup is None else int(tup.checkpoint["channel_values"].get("n", 0))
            if n < best:
                tally.add("lost", best - n)
                tally.fail(f"langgraph: {thread} holds n={n}, but n={best} was acknowledged")
    finally:
        saver.close()
    tally.add("resumed")


CHECKS = {
    "single": _check_checkpoints,
    "multi": _check_checkpoints,
    "async": _check_checkpoints,
    "compact": _check_compact,
    "techrevati": _check_techrevati,
    "apflow": _check_apflow,
    "langgraph": _check_langgraph,
}
