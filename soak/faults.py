"""Faults, cancellation and readers under load.

- Faults injected at the backend seam (``backends.testing.FaultyBackend`` around LMDB): a commit
  that fails once, every Nth commit failing, ``OSError(ENOSPC)``, ``OSError(EIO)``, a read that
  fails. Several threads save at once; the caller whose commit failed gets a typed error, the
  others are unaffected, the log is usable once the fault clears, nothing acknowledged is lost.
- For real: a tmpfs that fills up (root only: skipped, and said so, where mounting fails), and
  map growth while another process holds a read transaction.
- Asyncio cancellation at random moments.
- Reader processes (``load``, ``history``, ``record_at``, the CLI) against writers at full speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from backends.base import ReadTxn
from backends.lmdb import LmdbBackend
from backends.testing import FaultyBackend
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.errors import CheckpointError, StorageError
from eventlog.layout import CORE_TABLES, META
from eventlog.materialized import TABLES
from soak.common import Child, Tally
from soak.workers import rec

THREADS = 4
SAVES_PER_THREAD = 60


class ReadFaults(FaultyBackend):
    """A :class:`FaultyBackend` whose reads fail too: ``fail_reads`` holds read numbers."""

    def __init__(self, inner: Any, **kw: Any) -> None:
        super().__init__(inner, **kw)
        self.reads = 0
        self.fail_reads: set[int] = set()

    @contextlib.contextmanager
    def _read(self) -> Iterator[ReadTxn]:
        with self._lock:
            self.reads += 1
            fail = self.reads in self.fail_reads
        if fail:  # what a backend raises for a failed read (LMDB's are translated so)
            raise StorageError(errno.EIO, "injected read failure: Input/output error")
        with self.inner.read() as txn:
            yield txn

    def read(self) -> AbstractContextManager[ReadTxn]:
        return self._read()


def _kinds(rng: random.Random) -> dict[str, Callable[[ReadFaults], None]]:
    def fail_once(b: ReadFaults) -> None:
        b.fail_at = {b.commits + rng.randint(2, 40)}

    def every_nth(b: ReadFaults) -> None:
        n = rng.randint(3, 9)
        b.fail_at = set(range(b.commits + n, b.commits + 400, n))

    def enospc(b: ReadFaults) -> None:
        b.error = lambda: OSError(errno.ENOSPC, "No space left on device")
        b.fail_at = set(range(b.commits + 5, b.commits + 60, 7))

    def eio(b: ReadFaults) -> None:
        b.error = lambda: OSError(errno.EIO, "Input/output error")
        b.fail_at = set(range(b.commits + 3, b.commits + 60, 11))

    def read_fails(b: ReadFaults) -> None:
        b.fail_reads = set(range(b.reads + 2, b.reads + 200, 13))

    return {
        "commit_fails_once": fail_once,
        "every_nth_commit_fails": every_nth,
        "enospc": enospc,
        "eio": eio,
        "read_fails": read_fails,
    }


def run(seed: int, rounds: int, work: Path, tally: Tally) -> None:
    rng = random.Random(seed)
    for r in range(rounds):
        for kind, arm in _kinds(rng).items():
            _seam(work / f"seam-{r}-{kind}", kind, arm, tally)
    for r in range(rounds):
        _full_tmpfs(work / f"tmpfs-{r}", tally)
        _map_growth(work / f"grow-{r}", work, tally)


def _seam(  # noqa: PLR0915 - one scenario, read top to bottom
    path: Path, kind: str, arm: Callable[[ReadFaults], None], tally: Tally
) -> None:
    inner = LmdbBackend(path, tables=(*CORE_TABLES, *TABLES), marker_table=META)
    backend = ReadFaults(inner)
    log = CheckpointLog.on_backend(backend)
    acked: dict[str, set[int]] = {}
    typed = untyped = 0
    lock = threading.Lock()
    arm(backend)

    def saver(t: int) -> None:
        nonlocal typed, untyped
        inv = f"inv-{t}"
        acked[inv] = set()
        for n in range(SAVES_PER_THREAD):
            try:
                log.save(inv, rec(inv, {"n": n}))
                acked[inv].add(n)
                if n % 5 == 0:
                    log.load(inv)
            except CheckpointError:
                with lock:
                    typed += 1
            except Exception as e:  # noqa: BLE001 - counted: the campaign's point
                with lock:
                    untyped += 1
                    tally.fail(f"fault {kind}: untyped {type(e).__name__}: {e}")

    threads = [threading.Thread(target=saver, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    injected = backend.failed + len([r for r in backend.fail_reads if r <= backend.reads])
    backend.failing, backend.fail_at, backend.fail_reads = False, set(), set()  # the fault clears
    tally.add("faults", injected)
    tally.add(f"faults:{kind}", injected)
    tally.add("typed_errors", typed)
    if injected and not typed:
        tally.fail(f"fault {kind}: {injected} injected, but no caller heard of one")
    try:
        for inv in acked:
            log.save(inv, rec(inv, {"n": SAVES_PER_THREAD}))  # usable again
        for inv, want in acked.items():
            got = [e.record.state["n"] for e in log.history(inv) if e.record is not None]
            lost = want - set(got)
            if lost or len(got) != len(set(got)):
                tally.add("lost", len(lost))
                tally.fail(f"fault {kind}: {inv}: lost {sorted(lost)[:5]} or duplicated")
            tally.add("acked", len(want))
        if not log.verify().ok:
            tally.fail(f"fault {kind}: verify failed after the fault cleared")
        tally.add("recovered", injected)
    except CheckpointError as e:
        tally.fail(f"fault {kind}: the log is not usable after the fault cleared: {e}")
    finally:
        log.close()
        shutil.rmtree(path, ignore_errors=True)


def _full_tmpfs(mount: Path, tally: Tally) -> None:
    """Fill a 6 MiB tmpfs with saves from four threads, then free space and go on."""
    mount.mkdir(parents=True)
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        tally.add("faults:tmpfs_not_run")
        return
    try:
        filler = mount / "filler"
        filler.write_bytes(b"\0" * (1 << 20))
        log = CheckpointLog.open(mount / "log")
        acked: dict[str, set[int]] = {}
        errors: list[BaseException] = []

        def saver(t: int) -> None:
            inv = f"inv-{t}"
            acked[inv] = set()
            for n in range(10_000):
                try:
                    log.save(inv, rec(inv, {"n": n, "blob": os.urandom(3000).hex()}))
                    acked[inv].add(n)
                except BaseException as e:  # noqa: BLE001 - inspected below
                    errors.append(e)
                    if len(errors) > 20:
                        return

        threads = [threading.Thread(target=saver, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        tally.add("faults", len(errors))
        tally.add("faults:disk_full", len(errors))
        for e in errors:
            if not isinstance(e, CheckpointError) or getattr(e, "errno", None) != errno.ENOSPC:
                tally.fail(f"full disk: {type(e).__name__} errno={getattr(e, 'errno', None)}")
            elif "disk is full" not in str(e):
                tally.fail(f"full disk: the message does not say the disk is full: {e}")
        filler.unlink()  # the fault clears
        for inv in acked:
            log.save(inv, rec(inv, {"n": -1}))
        for inv, want in acked.items():
            got = {e.record.state["n"] for e in log.history(inv) if e.record is not None}
            if want - got:
                tally.add("lost", len(want - got))
                tally.fail(f"full disk: {inv}: acknowledged saves lost")
            tally.add("acked", len(want))
        if not log.verify().ok:
            tally.fail("full disk: verify failed after space was freed")
        tally.add("recovered", len(errors))
        log.close()
    except CheckpointError as e:
        tally.fail(f"full disk: the log is not usable after space was freed: {e}")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _map_growth(path: Path, work: Path, tally: Tally) -> None:
    """Grow the map from 1 MiB past 16 MiB while another process holds a read transaction."""
    with CheckpointLog.open(path, map_size_initial=1 << 20) as log:
        log.save("inv", rec("inv", {"n": -1}))
    holder = Child(work, "hold_read", str(path), "4")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and b"holding" not in holder.out_path.read_bytes():
        time.sleep(0.01)
    try:
        with CheckpointLog.open(path, map_size_initial=1 << 20) as log:
            for n in range(600):
                log.save("inv", rec("inv", {"n": n, "blob": "y" * 30_000}))
            grown = log.log.backend.map_size  # type: ignore[attr-defined]
            ok = log.verify().ok and log.load("inv") is not None
        tally.add("map_growths", max(0, grown.bit_length() - 21))
        if not ok:
            tally.fail("map growth: verify failed")
    except CheckpointError as e:
        tally.fail(f"map growth under a reader: {type(e).__name__}: {e}")
    code, acks, other = holder.finish(30)
    if code != 0 or not any(a.get("released") for a in acks):
        tally.fail(f"map growth: the reader process failed ({code}): {other}")
    shutil.rmtree(path, ignore_errors=True)


# -- asyncio cancellation ------------------------------------------------------------------------


def cancellation(seed: int, rounds: int, work: Path, tally: Tally) -> None:
    rng = random.Random(seed + 1)
    for r in range(rounds * 5):
        asyncio.run(_cancel_round(rng, work / f"cancel-{r}", tally))


async def _cancel_round(rng: random.Random, path: Path, tally: Tally) -> None:
    cp = Checkpointer.open(path)
    returned: set[tuple[str, int]] = set()

    async def one(k: int) -> None:
        inv = f"inv-{k % 10}"
        await cp.save(inv, rec(inv, {"n": k}))
        returned.add((inv, k))

    tasks = [asyncio.ensure_future(one(k)) for k in range(200)]
    victims = rng.sample(tasks, 80)
    for task in victims:
        await asyncio.sleep(rng.choice([0, 0, 0.0002, 0.001]))
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    cancelled = sum(isinstance(x, asyncio.CancelledError) for x in results)
    others = [x for x in results if isinstance(x, BaseException)]
    for x in others:
        if not isinstance(x, asyncio.CancelledError):
            tally.fail(f"cancellation: a save raised {type(x).__name__}: {x}")
    tally.add("cancelled", cancelled)
    tally.add("acked", len(returned))
    try:
        await cp.save("after", rec("after", {"n": 0}))  # the writer still serves
        log = cp.sync
        for i in range(10):
            inv = f"inv-{i}"
            got = [e.record for e in log.history(inv) if e.record is not None]
            ns = [x.state["n"] for x in got]
            want = {k for (v, k) in returned if v == inv}
            if want - set(ns) or len(ns) != len(set(ns)):
                tally.add("lost", len(want - set(ns)))
                tally.fail(f"cancellation: {inv}: a returned save is missing or doubled")
            whole = rec(inv, {}).completed_positions
            if any(x.completed_positions != whole or set(x.state) != {"n"} for x in got):
                tally.fail(f"cancellation: {inv}: a record is not whole")
        if not log.verify().ok:
            tally.fail("cancellation: verify failed")
    finally:
        await cp.aclose()
        shutil.rmtree(path, ignore_errors=True)


# -- readers under load --------------------------------------------------------------------------


def readers(seed: int, rounds: int, work: Path, tally: Tally) -> None:
    for r in range(rounds):
        _readers_round(work / f"readers-{r}", work, 4.0 * rounds, tally)


def _readers_round(path: Path, work: Path, seconds: float, tally: Tally) -> None:
    with CheckpointLog.open(path):
        pass
    writers = [Child(work, "consistent_writer", str(path), str(w)) for w in range(2)]
    time.sleep(0.5)
    readers_ = [Child(work, "reader", str(path), str(seconds)) for _ in range(2)]
    cli_runs = cli_fail = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for args in (["ls", str(path), "--json"], ["verify", str(path)]):
            proc = subprocess.run(
                [sys.executable, "-m", "eventlog.cli", *args],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            cli_runs += 1
            if proc.returncode != 0:
                cli_fail += 1
                said = (proc.stderr + proc.stdout)[-2000:]  # verify reports on stdout
                tally.fail(f"readers: ckptlog {args[0]} exited {proc.returncode}: {said}")
    reads = torn = 0
    for child in readers_:
        code, acks, other = child.finish(120)
        if code != 0:
            tally.fail(f"readers: a reader process failed ({code}): {other}")
        for a in acks:
            reads += a["reads"]
            torn += a["torn"]
    gaps: list[float] = []
    for child in writers:
        child.kill()
        code, acks, other = child.finish()
        if code != -9:
            tally.fail(f"readers: a writer failed ({code}): {other}")
        tally.add("writer_saves", len(acks))
        gaps.append(len(acks) / seconds)
    tally.add("reader_reads", reads + cli_runs)
    tally.add("torn_reads", torn)
    if torn:
        tally.fail(f"readers: {torn} head(s) whose state disagrees with their fan-out")
    if min(gaps) < 5:
        tally.fail(f"readers: a writer made under 5 saves a second while readers ran: {gaps}")
    shutil.rmtree(path, ignore_errors=True)
