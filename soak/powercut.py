"""Power cuts: writer processes on the power-loss simulator (``soak/powerfs.py``), killed at a
seeded random moment, everything unsynced dropped (whole, or a random subset with a torn
write), and the log reopened (issue 28).

After each cut the log must open, ``verify`` must pass, every acknowledged save must be present
exactly once, every buffered run committed whole or not at all, and a ``compact`` that returned
must have its DEST, whole. Each name model of the simulator (``posix``: a name is durable only
after an fsync of its directory; ``ordered``: any fsync commits every name) gets half the cuts.
The workers and the checks are the kill campaign's (``soak/kills.py``); only the file system
under them and the cut after each kill are new.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

from backends.dirsync import sync_directory
from eventlog.checkpoints import CheckpointLog
from soak import kills
from soak.common import Child, Tally
from soak.powerfs import PowerFS
from soak.workers import rec

# kind -> (share of the cuts, (shortest, longest) seconds from spawn to kill). Slower than the
# kill campaign's: every file operation is a round trip to the simulator's Python process.
SCENARIOS: dict[str, tuple[float, tuple[float, float]]] = {
    "single": (0.25, (0.3, 2.5)),
    "multi": (0.20, (0.5, 3.0)),
    "async": (0.15, (0.8, 3.0)),
    "compact": (0.10, (0.3, 2.5)),
    "techrevati": (0.10, (0.5, 2.5)),
    "apflow": (0.10, (0.5, 2.5)),
    "langgraph": (0.10, (1.5, 5.0)),
}
COMPACT_SOURCE_SAVES = 2_000  # the compaction's source: about a second to compact here


class _CutLog(kills._Log):
    def fresh(self) -> None:
        if self.kind != "compact":
            super().fresh()
            return
        self.generation += 1
        self.rounds = 0
        self.acks = []
        self.path = self.root / f"{self.kind}-{self.generation}"
        with CheckpointLog.open(self.path, durability="process") as log:
            for i in range(COMPACT_SOURCE_SAVES):
                inv = f"inv-{i % 40}"
                log.save(inv, rec(inv, {"n": i, "blob": "x" * (i % 7 * 300)}))
        # (closing a "process" log syncs it; its names were synced when it was created)


def run(
    seed: int,
    cuts: int,
    workdir: Path,
    tally: Tally,
    *,
    kinds: tuple[str, ...] = tuple(SCENARIOS),
    models: tuple[str, ...] = ("posix", "ordered"),
) -> None:
    rng = random.Random(seed)
    weights = [SCENARIOS[k][0] for k in kinds]
    for m, model in enumerate(models):
        share = cuts // len(models) + (m < cuts % len(models))
        plan = rng.choices(kinds, weights, k=share)
        for i, k in enumerate(kinds):  # every kind at least once when there is room
            if k not in plan and len(plan) >= len(kinds):
                plan[i] = k
        mnt = workdir / f"powerfs-{model}"
        with PowerFS(mnt, names=model) as fs:
            logs = {k: _CutLog(mnt / "cuts", k) for k in kinds}
            for kind in plan:
                log = logs[kind]
                if log.rounds >= kills.ROUNDS_PER_LOG:
                    shutil.rmtree(log.path, ignore_errors=True)
                    log.fresh()
                log.rounds += 1
                low, high = SCENARIOS[kind][1]
                _one_cut(fs, model, kind, log, rng, rng.uniform(low, high), workdir, tally)
            tally.add(f"fsyncs:{model}", fs.stats()["fsyncs"])
            tally.add(f"dir_fsyncs:{model}", fs.stats()["dir_fsyncs"])


def _one_cut(
    fs: PowerFS,
    model: str,
    kind: str,
    log: kills._Log,
    rng: random.Random,
    delay: float,
    workdir: Path,
    tally: Tally,
) -> None:
    children: list[Child] = kills._spawn(kind, log, workdir)
    if kind == "multi":
        for child in children:
            time.sleep(delay / len(children))
            child.kill()
    else:
        time.sleep(delay)
        for child in children:
            child.kill()
    new: list[dict[str, Any]] = []
    for child in children:
        code, acks, other = child.finish()
        if code is None:
            tally.fail(f"{model}/{kind}: a worker hung after SIGKILL")
        elif code == 0 and kind == "compact":
            tally.add("compact:finished_before_cut")
        elif code != -9:
            tally.fail(f"{model}/{kind}: a worker exited with {code} before its cut: {other}")
        new += acks
    torn = rng.random() < 0.5
    dropped = fs.cut(rng.randrange(1 << 32), torn=torn)
    tally.add("cuts")
    tally.add(f"cuts:{model}")
    tally.add(f"cuts:{kind}")
    tally.add("cuts:torn" if torn else "cuts:whole")
    tally.add("unsynced_writes_dropped", dropped["ops_dropped"])
    tally.add("unsynced_writes_kept", dropped["ops_kept"])
    tally.add("torn_writes", dropped["torn"])
    tally.add("names_undone", dropped["names_undone"])
    tally.add("acked", len([a for a in new if "compacted" not in a]))
    if kind == "compact":
        _check_compacted(model, log, new, tally)
    log.acks += [a for a in new if "compacted" not in a]
    try:
        kills.CHECKS[kind](log, new, tally)
    except Exception as e:  # noqa: BLE001 - a check that cannot run is a failure to report
        tally.fail(f"{model}/{kind}: the log could not be checked after a cut: "
                   f"{type(e).__name__}: {e}")  # fmt: skip
    # The check removes a compaction's DEST and hidden builds: make that durable, or the next
    # cut brings them back and the next compaction refuses its DEST (a harness artefact).
    sync_directory(log.path.parent)


def _check_compacted(model: str, log: kills._Log, new: list[dict[str, Any]], tally: Tally) -> None:
    """A ``compact`` that returned before the cut has its DEST after it, whole."""
    if not any("compacted" in a for a in new):
        return
    tally.add("compact:returned_before_cut")
    dest = Path(str(log.path) + "-dest")
    if not (dest / "data.mdb").exists():
        tally.add("lost")
        tally.fail(f"{model}/compact: compact returned, and after the cut DEST is gone")
        return
    with CheckpointLog.open(log.path, readonly=True) as src:
        heads = {s.invocation_id: src.load(s.invocation_id) for s in src.list()}
    with CheckpointLog.open(dest, readonly=True) as out:
        got = {s.invocation_id: out.load(s.invocation_id) for s in out.list()}
        ok = out.verify().ok
    if not ok or got != heads:
        tally.fail(f"{model}/compact: the DEST of a returned compact is not whole after a cut")
    else:
        tally.add("compact:dest_whole_after_cut")
