"""The ``instances`` scenario: a batch job appending every fan-out instance's result.

A fan-out of N instances; row i is instance i's result ``{"item": i, "ok": True, "score":
i * 0.5, "tag": "r12"}``, saved as it completes, N rows in all, committed every 256 rows (and
once at the end). ckptlog ``CheckpointLog.save``s an N-instance fan-out record first (untimed),
then calls ``save_instance`` per row under ``FanOutInternalSaveBatching(flush_every=256)`` and
``flush``es at the end; the hand-rolled peers (:mod:`benchmarks.peers.rows`) commit their own
batches of 256. Timed: the N saves and the final flush.

Each run (a *cell*: one row, one N, one repeat) runs in a fresh subprocess
(``python -m benchmarks.instances CELL_JSON``), so its peak RSS (``VmHWM``) and the bytes it
hands to ``write`` are its own. A cell stops at the first batch boundary after ``budget_s``
seconds and reports rows/s from the rows it did, marked ``partial``, so a store that slows down
with N cannot hold up the run. After the timed section (untimed): the peer checks its store holds
exactly the rows saved; ckptlog reopens the log and times ``load`` of the head and ``record_at``
of the middle seq. Peak RSS is read before that check.

There is no warm-up run (each cell is a new process: nothing would stay warm).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from benchmarks.common import process_write_bytes
from benchmarks.harness import Param, Row, Sample
from benchmarks.peers.base import InstanceSink, Peer

BATCH = 256
SIZES = (10_000, 200_000, 1_000_000, 10_000_000)
PEER_N_MAX = 1_000_000  # peers run up to here; the 10,000,000 row is ckptlog's scale run
HUGE_N = 5_000_000  # from here: one run per row, a budget that lets it finish
HUGE_BUDGET_S = 1200.0
MILLION = 1_000_000  # rows/s is also taken over the first and the last million of a run
QUICK_SIZES = (1000,)
BUDGET_S = 60.0  # per cell; --cell-budget
QUICK_BUDGET_S = 20.0
CELL_TIMEOUT_MARGIN_S = 600.0  # set-up (an N-instance record) and the probe, beyond the budget
INV = "job"

NA_BY_FAMILY = {
    "openarmature": "openarmature's Checkpointer has no per-instance save: the engine saves all "
    "N instances per row (save / save_fan_out_internal; see the fanout scenario)",
    "langgraph": "LangGraph has no batching: put_writes commits every row (see the fanout "
    "scenario); bring a saver with --peer to measure it here",
    "techrevati": "no batching: put_step commits every row (see the fanout scenario)",
    "lmdb-raw": "the raw ceiling replays ckptlog's frames; see lmdb-rows-* for raw py-lmdb rows",
}


def result_of(i: int) -> dict[str, Any]:
    return {"item": i, "ok": True, "score": i * 0.5, "tag": "r12"}


class Instances:
    name = "instances"
    title = "Per-instance results of a large fan-out (rows/s)"
    description = (
        "A batch job's fan-out of N instances appends each instance's ~60-byte result as it "
        "completes, N rows, committed every 256 rows. ckptlog: CheckpointLog.save of the "
        "N-instance record, then save_instance per row under "
        "FanOutInternalSaveBatching(flush_every=256) and a final flush (save_instance rows), "
        "or one save_instances call per 256 rows (save_instances rows). Peers: a hand-rolled "
        "SQLite table, raw py-lmdb rows, a JSON Lines file (see Peers), and any --peer store, "
        "up to N = 1,000,000; N = 10,000,000 is ckptlog's scale run (one invocation, default "
        "options, one run per row; after it: the largest frame written, head load, verify). "
        "Each run is a fresh subprocess and store; a run stops at its time budget and reports "
        "the rows it did (marked partial)."
    )
    mode: Literal["write", "read"] = "write"
    metric = "rows/s"
    primary: Literal["rate_median", "p50_us"] = "rate_median"
    higher_is_better = True
    warmup = False

    def __init__(self) -> None:
        self.budget_s: float | None = None  # None: BUDGET_S, or QUICK_BUDGET_S with --quick
        self.sizes: tuple[int, ...] | None = None  # None: SIZES, or QUICK_SIZES with --quick

    def budget(self, quick: bool) -> float:
        if self.budget_s is not None:
            return self.budget_s
        return QUICK_BUDGET_S if quick else BUDGET_S

    def params(self, quick: bool) -> list[Param]:
        ns = self.sizes or (QUICK_SIZES if quick else SIZES)
        budget = self.budget(quick)
        return [
            Param(
                f"n={n}",
                f"N={n:,}",
                {
                    "n": n,
                    "batch": BATCH,
                    "budget_s": max(budget, HUGE_BUDGET_S) if n >= HUGE_N else budget,
                },
            )
            for n in ns
        ]

    def settings(self, quick: bool) -> dict[str, Any]:
        return {p.key: p.values for p in self.params(quick)}

    def repeats(self, param: Param, default: int) -> int:
        """Timed runs per row: at most 3 from N = 200,000 (a run there takes up to the budget),
        one from ``HUGE_N``."""
        n = param.values["n"]
        if n >= HUGE_N:
            return 1
        return min(default, 3) if n >= 200_000 else default

    def applicable(self, peer: Peer) -> str | None:
        if type(peer).instance_sink is Peer.instance_sink:
            return NA_BY_FAMILY.get(peer.family, f"{peer.name} has no per-instance store")
        return None

    def unsupported_at(self, row: Row, values: dict[str, Any]) -> str | None:
        """Only ckptlog runs past ``PEER_N_MAX`` (issue 22's scale goal is ckptlog's), with
        default options (``fsync``)."""
        if values["n"] > PEER_N_MAX and row.peer.family != "ckptlog":
            return f"peers run up to N={PEER_N_MAX:,}; this size measures ckptlog's scale"
        if values["n"] > PEER_N_MAX and row.peer.name != "ckptlog-fsync":
            return "the scale run uses the default options (durability fsync): see ckptlog-fsync"
        return None

    def forget(self) -> None:
        """Nothing is cached between cells."""

    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample:
        budget = float(param.values["budget_s"])
        spec = {
            "peer": row.peer.origin,
            "variant": row.variant,
            "n": param.values["n"],
            "batch": param.values["batch"],
            "budget_s": budget,
            "path": str(path),
        }
        return run_cell_subprocess(spec, timeout=budget + CELL_TIMEOUT_MARGIN_S)

    async def build(self, peer: Peer, param: Param, budget_s: float) -> None:
        raise NotImplementedError("instances is a write scenario")

    async def measure(self, row: Row, param: Param, warmup: bool) -> Sample:
        raise NotImplementedError("instances is a write scenario")


def _child_env() -> dict[str, str]:
    """This process's import path for the child, so it imports the same code (and a --peer
    module found through the current directory)."""
    env = dict(os.environ)
    path = [p or os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def run_cell_subprocess(spec: dict[str, Any], *, timeout: float) -> Sample:
    """Run one cell in a fresh interpreter; its :class:`Sample`."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.instances", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_child_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(
            f"the cell ran past {timeout:.0f} s (budget {spec['budget_s']:.0f} s plus set-up and "
            "probe): raise --cell-budget or look at the peer's set-up"
        ) from e
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"the cell failed (exit {proc.returncode}): {last}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return Sample(
        out["ops"],
        out["seconds"],
        [],
        out["bytes_written"],
        extra=out["extra"],
        partial=out["partial"],
    )


def _rss_bytes() -> int:
    """This process's peak RSS: ``VmHWM`` of ``/proc/self/status`` on Linux (``ru_maxrss``
    there also counts the parent's RSS at fork, carried through exec), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError):
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux: KiB


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def run_cell(spec: dict[str, Any], peer: Peer) -> dict[str, Any]:
    """One cell of ``peer`` in this process (the subprocess's body; tests call it directly)."""
    n, batch, budget = int(spec["n"]), int(spec["batch"]), float(spec["budget_s"])
    path = Path(spec["path"])
    variant = spec.get("variant") or ""
    takes_variant = "variant" in inspect.signature(peer.instance_sink).parameters
    sink: InstanceSink = (
        peer.instance_sink(path, batch, variant)  # type: ignore[call-arg]  # ckptlog's rows
        if variant and takes_variant
        else peer.instance_sink(path, batch)
    )
    try:
        await _maybe(sink.setup(INV, n))
        gc.collect()
        size0 = _dir_bytes(path)
        w0 = process_write_bytes()
        marks: list[float] = []
        if inspect.iscoroutinefunction(sink.save):
            done, seconds = await _rows_async(sink, n, batch, budget, marks)
        else:
            done, seconds = _rows_sync(sink, n, batch, budget, marks)
        written = process_write_bytes()
        rss = _rss_bytes()
        extra: dict[str, float] = {"peak_rss_bytes": rss}
        if len(marks) >= 3:  # the first and the last full million (marks[0]: the start)
            extra["first_million_rows_s"] = MILLION / (marks[1] - marks[0])
            extra["last_million_rows_s"] = MILLION / (marks[-1] - marks[-2])
        extra.update(await _maybe(sink.probe(done)))
    finally:
        await _maybe(sink.close())
    extra["store_bytes_per_row"] = (_dir_bytes(path) - size0) / max(done, 1)
    return {
        "ops": done,
        "seconds": seconds,
        "bytes_written": None if w0 is None or written is None else written - w0,
        "partial": done < n,
        "extra": extra,
    }


def _rows_sync(
    sink: InstanceSink, n: int, batch: int, budget: float, marks: list[float]
) -> tuple[int, float]:
    """Save rows until ``n`` or the budget; ``marks`` gets the time at the start and after
    each full million rows."""
    save = sink.save
    t0 = time.perf_counter()
    marks.append(t0)
    deadline = t0 + budget
    done = n
    for i in range(n):
        save(i, result_of(i))
        if i % batch == batch - 1:
            now = time.perf_counter()
            if (i + 1) // MILLION >= len(marks):  # the first batch end past each million
                marks.append(now)
            if now > deadline:
                done = i + 1
                break
    sink.flush()
    return done, time.perf_counter() - t0


async def _rows_async(
    sink: InstanceSink, n: int, batch: int, budget: float, marks: list[float]
) -> tuple[int, float]:
    save = sink.save
    t0 = time.perf_counter()
    marks.append(t0)
    deadline = t0 + budget
    done = n
    for i in range(n):
        await save(i, result_of(i))
        if i % batch == batch - 1:
            now = time.perf_counter()
            if (i + 1) // MILLION >= len(marks):  # the first batch end past each million
                marks.append(now)
            if now > deadline:
                done = i + 1
                break
    await sink.flush()
    return done, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.instances CELL_JSON", file=sys.stderr)
        return 2
    from benchmarks.peers import peer_from_origin  # noqa: PLC0415 - the child's import

    spec = json.loads(args[0])
    peer = peer_from_origin(spec["peer"])  # before the loop: a --peer's factory is probed here
    out = asyncio.run(run_cell(spec, peer))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
