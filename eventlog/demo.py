"""Demo: a fan-out batch job that is SIGKILLed part-way and resumes from its checkpoints.

``python -m eventlog.demo --path DIR`` (what ``make demo`` runs):

1. replaces ``DIR`` only if it is missing, empty, or a log this demo made (it leaves a
   ``.ckptlog-demo`` marker there; anything else is refused with exit status 2, nothing
   deleted), then starts a worker subprocess (``--worker``) that saves a record holding a
   fan-out of ``--items`` instances (all not started), then computes each item and saves its
   result with ``save_instance`` under ``FanOutInternalSaveBatching(flush_every=256)``; at item
   ``--kill-at`` the worker kills itself with SIGKILL (no clean-up, no flush);
2. resumes in this process from ``load()``: completed instances are skipped, the others re-run,
   and a final durable ``save`` holds the merged results;
3. checks that every item's result is present exactly once and correct, that no more than one
   batch of saves was lost, and that ``verify()`` is clean; prints what happened.

Exit status 0 when every check passes, 1 otherwise, 2 when DIR is not the demo's to replace.
Progress bars (rich) are drawn only on a terminal: a log file of the run gets none.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from eventlog.checkpoints import CheckpointLog
from eventlog.cli_render import ProgressBar
from eventlog.errors import DirNotOurs
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    HistoryEntry,
    NodePosition,
)
from eventlog.reports import Stats, VerifyReport

INVOCATION: Final = "fanout-demo-1"
CORRELATION: Final = "demo"
FAN_OUT: Final = "process_items"
ITEMS: Final = 10_000
KILL_AT: Final = 8_470
FLUSH_EVERY: Final = 256
PROGRESS_EVERY: Final = 97


def work(item: int) -> int:
    """The per-item "work": cheap and deterministic (the first 4 bytes of a BLAKE2b digest)."""
    digest = hashlib.blake2b(f"item-{item}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


MARKER: Final = ".ckptlog-demo"  # in a DIR this demo made: it may replace that DIR


def prepare_dir(path: str) -> None:
    """Make ``path`` an empty directory holding the demo's marker, deleting a previous demo
    run there; refuse (:class:`DirNotOurs`) anything else: the demo never deletes data it
    did not write."""
    p = Path(path)
    if p.exists() or p.is_symlink():
        if not p.is_dir() or p.is_symlink():
            raise DirNotOurs(f"--path {path!r} exists and is not a directory; choose a new path")
        entries = list(p.iterdir())
        if entries:
            if not (p / MARKER).is_file():
                names = ", ".join(sorted(e.name for e in entries)[:5])
                raise DirNotOurs(
                    f"--path {path!r} is not empty ({names}) and is not a log this demo made "
                    f"(no {MARKER} file in it): nothing was deleted; choose a new or empty path"
                )
            shutil.rmtree(p)
    CheckpointLog.open(p).close()  # a new, empty log (creating one needs an empty directory)
    (p / MARKER).write_text("made by python -m eventlog.demo; it may delete this directory\n")


def progress(bar: ProgressBar, done: int, total: int) -> None:
    """Progress on stderr: a rich bar on a terminal, nothing at all in a pipe or a file."""
    bar(done, total)


def start_record(items: int) -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id=INVOCATION,
        correlation_id=CORRELATION,
        state={"phase": "fan_out", "items": items},
        completed_positions=(NodePosition((), "plan", 0),),
        parent_states=(),
        last_saved_at=time.time(),
        fan_out_progress=(FanOutProgress(FAN_OUT, (), items, (NOT_STARTED,) * items),),
    )


def open_log(path: str) -> CheckpointLog:
    return CheckpointLog.open(path, batching=FanOutInternalSaveBatching(flush_every=FLUSH_EVERY))


# -- the worker (killed part-way) --------------------------------------------------------------


def run_worker(path: str, items: int, kill_at: int) -> int:
    """Save the fan-out, then one instance save per item; SIGKILL ourselves at ``kill_at``."""
    log = open_log(path)
    log.save(INVOCATION, start_record(items))
    started = time.perf_counter()
    bar = ProgressBar("worker", unit="saves", stream=sys.stderr)
    for i in range(items):
        if i == kill_at:
            elapsed = time.perf_counter() - started
            st = log.stats()
            # One write, so the parent sees the whole line or nothing.
            line = f"worker {i} {elapsed:.6f} {st.log_bytes} {st.frames_appended} {st.commits}\n"
            os.write(sys.stdout.fileno(), line.encode())
            bar.close()
            os.kill(os.getpid(), signal.SIGKILL)
        log.save_instance(INVOCATION, FAN_OUT, i, FanOutInstanceProgress("completed", work(i)))
        if i % PROGRESS_EVERY == 0:
            progress(bar, i, items)
    bar.close()
    log.close()
    return 0  # only reached when kill_at >= items


# -- the parent: run the worker, resume, check, report -----------------------------------------


def completed_count(entry: HistoryEntry) -> int:
    rec = entry.record
    if rec is None:
        return 0
    if not rec.fan_out_progress:
        state = rec.state
        return len(state.get("results", ())) if isinstance(state, dict) else 0
    return sum(1 for p in rec.fan_out_progress[0].instances if p.state == "completed")


def fmt_entry(entry: HistoryEntry) -> str:
    when = dt.datetime.fromtimestamp(entry.saved_at).strftime("%H:%M:%S.%f")[:-3]
    return (
        f"  seq {entry.seq:>6}  {entry.kind:<17} saved_at {when}  "
        f"completed {completed_count(entry):>6,}"
    )


class WorkerRun(msgspec.Struct):
    """What the killed worker did, from its exit status and its last stdout line."""

    returncode: int
    saves: int = 0  # instance saves issued before the kill
    seconds: float = 0.0
    log_bytes: int = 0  # bytes its EventLog appended (committed) before the kill
    frames: int = 0  # frames it committed before the kill


class Resume(msgspec.Struct):
    """What the resume found and did."""

    skipped: int
    rerun: list[int]
    results: list[Any]
    seconds: float
    before: Stats
    after: Stats
    loaded: CheckpointRecord | None
    entries: list[HistoryEntry]
    report: VerifyReport


def run_worker_process(path: str, items: int, kill_at: int) -> WorkerRun:
    cmd = [sys.executable, "-m", "eventlog.demo", "--worker", "--path", path]
    cmd += ["--items", str(items), "--kill-at", str(kill_at)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    run = WorkerRun(proc.returncode)
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "worker":
            run.saves, run.seconds = int(parts[1]), float(parts[2])
            run.log_bytes, run.frames = int(parts[3]), int(parts[4])
    return run


def resume(path: str) -> Resume | None:
    """Load the last durable checkpoint, re-run what is not completed, save the merged results."""
    with open_log(path) as log:
        before = log.stats()
        rec = log.load(INVOCATION)
        if rec is None or not rec.fan_out_progress:
            return None
        instances = rec.fan_out_progress[0].instances
        results: list[Any] = [p.result if p.state == "completed" else None for p in instances]
        todo = [i for i, p in enumerate(instances) if p.state != "completed"]
        started = time.perf_counter()
        bar = ProgressBar("resume", unit="saves", stream=sys.stderr)
        for n, i in enumerate(todo):
            results[i] = work(i)
            done = FanOutInstanceProgress("completed", results[i])
            log.save_instance(INVOCATION, FAN_OUT, i, done)
            if n % PROGRESS_EVERY == 0:
                progress(bar, n, len(todo))
        progress(bar, len(todo), len(todo))
        bar.close()
        final = CheckpointRecord(
            invocation_id=INVOCATION,
            correlation_id=CORRELATION,
            state={"phase": "done", "items": len(instances), "results": results},
            completed_positions=(NodePosition((), "plan", 0), NodePosition((), FAN_OUT, 1)),
            parent_states=(),
            last_saved_at=time.time(),
        )
        log.save(INVOCATION, final)
        seconds = time.perf_counter() - started
        return Resume(
            skipped=len(instances) - len(todo),
            rerun=todo,
            results=results,
            seconds=seconds,
            before=before,
            after=log.stats(),
            loaded=log.load(INVOCATION),
            entries=list(log.history(INVOCATION)),
            report=log.verify(),
        )


def check(worker: WorkerRun, res: Resume, items: int, kill_at: int) -> list[str]:
    """Print each check; return the failed ones."""
    failed: list[str] = []

    def expect(ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            failed.append(what)

    expected = [work(i) for i in range(items)]
    print("checks:")
    expect(
        worker.returncode == -signal.SIGKILL,
        f"worker was SIGKILLed (exit status {worker.returncode})",
    )
    expect(worker.saves == kill_at, f"worker issued {worker.saves:,} instance saves, then died")
    lost = kill_at - res.skipped
    expect(
        0 <= lost < FLUSH_EVERY,
        f"lost at most one batch: {lost} buffered saves lost (< flush_every={FLUSH_EVERY})",
    )
    expect(
        res.rerun == list(range(res.skipped, items)),
        "resume re-ran exactly the items after the last durable batch, each once",
    )
    expect(
        res.skipped + len(res.rerun) == items,
        f"skipped + re-run = {res.skipped + len(res.rerun):,} = {items:,} items",
    )
    expect(res.results == expected, "merged results exact (every item once, correct value)")
    state = res.loaded.state if res.loaded is not None else None
    expect(
        isinstance(state, dict) and list(state.get("results", ())) == expected,
        "load() after the final save holds the merged results",
    )
    expect(bool(res.entries) and res.entries[-1].kind == "save", "history ends with the final save")
    expect(res.report.ok, f"verify(): {res.report}")
    return failed


def report(worker: WorkerRun, res: Resume, items: int, kill_at: int) -> None:
    rerun = len(res.rerun)
    print("job:")
    print(
        f"  items {items:,}: killed at item {kill_at:,}; skipped {res.skipped:,}, re-run {rerun:,}"
    )
    if worker.seconds > 0:
        rate = worker.saves / worker.seconds
        print(f"  worker: {worker.saves:,} saves in {worker.seconds:.2f} s = {rate:,.0f} saves/s")
    if res.seconds > 0:
        rate = (rerun + 1) / res.seconds
        print(f"  resume: {rerun + 1:,} saves in {res.seconds:.2f} s = {rate:,.0f} saves/s")
    after, before = res.after, res.before
    appended = worker.log_bytes + after.log_bytes - before.log_bytes
    frames = worker.frames + after.frames_appended - before.frames_appended
    per_save = appended / frames if frames else 0.0
    print("log:")
    print(
        f"  bytes appended per committed save: {per_save:,.1f} "
        f"({appended:,} B over {frames:,} saves, from stats().log_bytes)"
    )
    print(f"  bytes on disk: {after.disk_bytes:,}")
    print(f"  frames: {after.frames:,}")
    entries = res.entries
    print(f"history of {INVOCATION!r}: {len(entries):,} entries")
    shown: Sequence[HistoryEntry] = entries if len(entries) <= 6 else [*entries[:3], *entries[-3:]]
    for k, entry in enumerate(shown):
        if len(entries) > 6 and k == 3:
            print("  ...")
        print(fmt_entry(entry))
    print(f"verify: {res.report}")


def run_demo(path: str, items: int, kill_at: int) -> int:
    try:
        prepare_dir(path)
    except DirNotOurs as e:
        print(f"demo: error: {e}", file=sys.stderr)
        return 2
    worker = run_worker_process(path, items, kill_at)
    res = resume(path)
    if res is None:
        print(f"FAILED: nothing to resume from (worker exit status {worker.returncode})")
        return 1
    failed = check(worker, res, items, kill_at)
    report(worker, res, items, kill_at)
    if failed:
        print(f"FAILED: {len(failed)} check(s): {'; '.join(failed)}")
        return 1
    print("OK")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--path",
        required=True,
        help="log directory: new, empty, or one this demo made (then it is replaced)",
    )
    parser.add_argument("--items", type=int, default=ITEMS)
    parser.add_argument("--kill-at", type=int, default=KILL_AT)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 0 < args.kill_at < args.items:
        parser.error("--kill-at must be between 0 and --items")
    if args.worker:
        return run_worker(args.path, args.items, args.kill_at)
    return run_demo(args.path, args.items, args.kill_at)


if __name__ == "__main__":
    sys.exit(main())
