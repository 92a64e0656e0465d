"""Kill writers with SIGKILL at seeded random moments; the reopened log must have lost nothing.

Each test restarts ``tests/crash_writer.py`` on one log again and again, killing it each time,
and after every kill reopens the log and checks:

- ``verify()`` is OK (checksums, chains, seqs, index, stream names);
- every acknowledged ``(stream, seq)`` (an ``ack`` line the writer printed after its append
  returned, from this run or any earlier one) is there, at the same global seq, with the same
  checksum;
- every stream's seqs are 1..N and every frame is indexed; global seqs are 1..N;
- every frame in the log reads and decodes, and each ``append_many`` group is either wholly in
  the log or wholly absent (no partial group commit).

The kill moments come from ``random.Random(seed)``; the seed is in the test id. The normal suite
makes 50 kills with ``durability="fsync"`` plus smaller ``"process"`` and two-writer runs;
``--long`` makes 300 (and more of the others).
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from backends.testing import create_unfolded_lmdb
from eventlog.frames import Event
from eventlog.layout import CORE_TABLES
from eventlog.log import EventLog

pytestmark = pytest.mark.slow

WRITER = Path(__file__).with_name("crash_writer.py")
REPO = Path(__file__).resolve().parents[1]
READY_SECONDS_MAX = 20.0  # a cold interpreter on a loaded CI machine
KILL_AFTER_READY_SECONDS_MAX = 0.3
EARLY_KILL_CHANCE = 0.15  # some kills land while the writer is still starting or opening


@dataclass(frozen=True)
class Ack:
    stream: str
    seq: int
    global_seq: int
    checksum: str
    run: int


@dataclass
class Writer:
    """One writer subprocess and the thread collecting its stdout."""

    proc: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

    def collect(self, out: IO[bytes]) -> None:
        for raw in out:
            if not raw.endswith(b"\n"):
                break  # cut short by the kill: not a complete acknowledgement line
            line = raw.decode().rstrip("\n")
            if line == "ready":
                self.ready.set()
            self.lines.append(line)


def start_writer(path: Path, seed: int, run: int, durability: str, err: IO[bytes]) -> Writer:
    cmd = [sys.executable, str(WRITER), str(path), f"--seed={seed}", f"--run={run}"]
    proc = subprocess.Popen(
        [*cmd, f"--durability={durability}"], stdout=subprocess.PIPE, stderr=err, cwd=REPO
    )
    writer = Writer(proc)
    assert proc.stdout is not None
    writer.reader = threading.Thread(target=writer.collect, args=(proc.stdout,), daemon=True)
    writer.reader.start()
    return writer


def kill_after(writer: Writer, rng: random.Random) -> None:
    if rng.random() < EARLY_KILL_CHANCE:
        time.sleep(rng.uniform(0.0, 0.15))
    else:
        assert writer.ready.wait(READY_SECONDS_MAX), "the writer never became ready"
        time.sleep(rng.uniform(0.0, KILL_AFTER_READY_SECONDS_MAX))
    writer.proc.send_signal(signal.SIGKILL)


def reap(writer: Writer, run: int, err_path: Path) -> list[Ack]:
    code = writer.proc.wait(timeout=30)
    assert writer.reader is not None
    writer.reader.join(timeout=30)
    assert writer.proc.stdout is not None
    writer.proc.stdout.close()
    # Killed by us, and only by us: any other exit means the writer failed on its own.
    assert code == -signal.SIGKILL, f"writer exited with {code}: {err_path.read_text()}"
    acks = []
    for line in writer.lines:
        if line.startswith("ack "):
            stream, seq, gseq, checksum = line.split(" ")[1:]
            acks.append(Ack(stream, int(seq), int(gseq), checksum, run))
    return acks


def check_log(path: Path, durability: str, acked: list[Ack], where: str) -> int:
    """Every check of the module docstring; returns the number of frames in the log."""
    with EventLog.open(path, durability=durability) as log:
        report = log.verify()
        assert report.ok, f"{where}: {report}"
        frames = list(log.scan())  # raises CorruptFrame if any frame does not read back
        assert [f.global_seq for f in frames] == list(range(1, len(frames) + 1)), where
        assert log.stats().frames == len(frames), where
        indexed = 0
        for stream in log.streams():
            seqs = [f.seq for f in log.read_stream(stream)]
            assert seqs == list(range(1, len(seqs) + 1)), f"{where}: {stream!r} has {seqs}"
            assert log.last_seq(stream) == len(seqs), where
            indexed += len(seqs)
        assert indexed == len(frames), f"{where}: {indexed} indexed, {len(frames)} in the log"

        stored = {(f.stream, f.seq): f for f in frames}
        for a in acked:
            got = stored.get((a.stream, a.seq))
            assert got is not None, f"{where}: acknowledged {a} is missing"
            assert (got.checksum.hex(), got.global_seq) == (a.checksum, a.global_seq), (
                f"{where}: acknowledged {a} is stored as {got}"
            )

        groups: collections.Counter[str] = collections.Counter()
        sizes: dict[str, int] = {}
        for f in frames:
            assert isinstance(f.frame, Event), where
            data = f.frame.data
            if data["group"] is not None:
                groups[data["group"]] += 1
                sizes[data["group"]] = data["group_size"]
        partial = {g: (n, sizes[g]) for g, n in groups.items() if n != sizes[g]}
        assert not partial, f"{where}: append_many groups committed in part: {partial}"
        return len(frames)


def crash_loop(
    tmp_path: Path,
    seed: int,
    kills: int,
    *,
    durability: str = "fsync",
    writers: int = 1,
    unfolded: bool = False,
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "log"
    if unfolded:  # a log made before the fold (backends/lmdb_fold.py); new ones fold
        create_unfolded_lmdb(path, CORE_TABLES)
    acked: list[Ack] = []
    frames = 0
    for run in range(kills):
        where = f"seed={seed} run={run}"
        err_paths = [tmp_path / f"writer-{run}-{w}.err" for w in range(writers)]
        errs = [p.open("wb") for p in err_paths]
        try:
            procs = [
                start_writer(path, seed * 1000 + w, run, durability, err)
                for w, err in enumerate(errs)
            ]
            killers = [
                threading.Thread(target=kill_after, args=(p, random.Random(rng.random())))
                for p in procs
            ]
            for k in killers:
                k.start()
            for k in killers:
                k.join()
            for proc, err_path in zip(procs, err_paths, strict=True):
                acked += reap(proc, run, err_path)
        finally:
            for err in errs:
                err.close()
        now = check_log(path, durability, acked, where)
        assert now >= frames, f"{where}: the log shrank from {frames} to {now} frames"
        frames = now
    assert acked, f"seed={seed}: no writer ever acknowledged a frame; nothing was tested"

    # The crashed log still takes appends, continuing a stream's seq and chain.
    with EventLog.open(path, durability=durability) as log:
        before = log.last_seq("alpha")
        done = log.append("alpha", Event(name="after-crashes"))
        assert done is not None
        assert done.seq == before + 1
        assert log.verify().ok


def kills_per_seed(long_run: bool) -> int:
    return 30 if long_run else 5


@pytest.mark.parametrize("seed", range(10), ids=lambda s: f"seed={s}")
def test_killed_writer_keeps_acknowledged_frames(tmp_path: Path, seed: int, long_run: bool):
    crash_loop(tmp_path, seed, kills_per_seed(long_run))


@pytest.mark.parametrize("seed", range(100, 102), ids=lambda s: f"seed={s}")
def test_killed_writer_process_durability(tmp_path: Path, seed: int, long_run: bool):
    crash_loop(tmp_path, seed, kills_per_seed(long_run), durability="process")


@pytest.mark.parametrize("seed", range(200, 202), ids=lambda s: f"seed={s}")
def test_two_killed_writers_on_one_log(tmp_path: Path, seed: int, long_run: bool):
    """Two processes append to one log (the writer reads tails inside its transaction)."""
    crash_loop(tmp_path, seed, kills_per_seed(long_run), writers=2)


@pytest.mark.parametrize("seed", range(300, 302), ids=lambda s: f"seed={s}")
def test_killed_writer_on_a_log_made_before_the_fold(tmp_path: Path, seed: int, long_run: bool):
    """Recovery re-applies the segment's records to a log with one sub-database per table."""
    crash_loop(tmp_path, seed, kills_per_seed(long_run), unfolded=True)


def test_writer_is_not_collected_as_a_test() -> None:
    assert not WRITER.name.startswith("test_")
    assert os.access(WRITER, os.R_OK)
