"""Kill a checkpoint writer with SIGKILL at seeded random moments; acknowledged saves survive.

The writer is this module run as a script (``python tests/test_checkpoint_crash.py PATH --seed S
--run K``). It opens a :class:`CheckpointLog` with fan-out batching and, for invocation
``inv-K``, makes a deterministic sequence of operations (``ops(seed, run)``): durable ``save``,
buffered ``save_fan_out_internal`` / ``save_fan_out_in_flight_failure`` / ``save_instance``, and
explicit ``flush``. Operation ``n`` stamps ``last_saved_at = n`` on the record, so the record
after each operation is known to the test (``model``).

Protocol on stdout (one ``os.write`` per line, so a line is whole or absent): ``ready`` once the
first durable save returned, then ``ack N`` after a durable save ``N`` (or a flush following
operation ``N``) returned.

After each kill the test reopens the log and checks, for every invocation written so far:

- ``load()`` equals the model's record after some operation ``m`` (never a half-applied head),
  with ``m`` at least the last acknowledged ``N`` (buffered saves after it may be lost);
- the invocation's state did not change after its writer died;
- ``verify()`` is OK (checksums, chains, and every head equal to the fold of its frames).

The seed is in the test id; ``--long`` makes ten times as many kills.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from backends.testing import create_unfolded_lmdb
from eventlog.checkpoints import CheckpointLog
from eventlog.layout import CORE_TABLES
from eventlog.materialized import TABLES as MATERIALIZED
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
FAN_OUT = "work"
INSTANCES = 24
FLUSH_EVERY = 8
READY_SECONDS_MAX = 20.0
KILL_AFTER_READY_SECONDS_MAX = 0.25
EARLY_KILL_CHANCE = 0.1  # some kills land before the first save is acknowledged
RUN_SECONDS_MAX = 30.0  # a writer nobody kills stops by itself (the test then fails)


# -- the deterministic operation sequence, shared by the writer and the test --------------------


@dataclass(frozen=True)
class Op:
    n: int
    kind: str  # save | internal | failure | instance | flush
    pad: str = ""
    index: int = 0


def ops(seed: int, run: int) -> Iterator[Op]:
    """Operation 1 is always a durable save of the record holding the fan-out."""
    rng = random.Random(f"ckpt-crash/{seed}/{run}")
    yield Op(1, "save")
    n = 1
    while True:
        n += 1
        roll = rng.random()
        pad = ""
        if rng.random() < 0.1:
            pad = rng.randbytes(rng.randint(100, 2000)).hex()  # large, incompressible
        elif rng.random() < 0.1:
            pad = "compressible " * rng.randint(50, 300)
        if roll < 0.2:
            yield Op(n, "save", pad)
        elif roll < 0.4:
            yield Op(n, "internal", pad)
        elif roll < 0.45:
            yield Op(n, "failure", pad)
        elif roll < 0.95:
            yield Op(n, "instance", index=rng.randrange(INSTANCES))
        else:
            yield Op(n, "flush")


class Model:
    """The record an invocation holds after each operation."""

    def __init__(self, seed: int, run: int) -> None:
        self.inv = f"inv-{run}"
        self.run = run
        self.instances: list[FanOutInstanceProgress] = [NOT_STARTED] * INSTANCES
        self.record: CheckpointRecord | None = None
        self._ops = ops(seed, run)

    def whole(self, op: Op) -> CheckpointRecord:
        return CheckpointRecord(
            invocation_id=self.inv,
            correlation_id=f"crash-{self.run % 3}",
            state={"n": op.n, "run": self.run, "pad": op.pad},
            completed_positions=tuple(NodePosition((), f"node{k}", k) for k in range(op.n % 4)),
            parent_states=({"parent": op.n},) if op.n % 5 == 0 else (),
            last_saved_at=float(op.n),
            fan_out_progress=(FanOutProgress(FAN_OUT, (), INSTANCES, tuple(self.instances)),),
        )

    def step(self) -> Op:
        """Advance by one operation; ``self.record`` is the record after it."""
        op = next(self._ops)
        if op.kind in ("save", "internal", "failure"):
            self.record = self.whole(op)
        elif op.kind == "instance":
            assert self.record is not None
            self.instances[op.index] = FanOutInstanceProgress("completed", op.n)
            self.record = CheckpointRecord(
                invocation_id=self.inv,
                correlation_id=self.record.correlation_id,
                state=self.record.state,
                completed_positions=self.record.completed_positions,
                parent_states=self.record.parent_states,
                last_saved_at=float(op.n),
                fan_out_progress=(FanOutProgress(FAN_OUT, (), INSTANCES, tuple(self.instances)),),
            )
        return op


def model_after(seed: int, run: int, m: int) -> CheckpointRecord | None:
    model = Model(seed, run)
    rec: CheckpointRecord | None = None
    while True:
        op = model.step()
        rec = model.record
        if op.n >= m:
            return rec


# -- the writer (a subprocess) -----------------------------------------------------------------


def emit(line: str) -> None:
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def writer_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--run", type=int, required=True)
    args = parser.parse_args(argv)
    log = CheckpointLog.open(args.path, batching=FanOutInternalSaveBatching(FLUSH_EVERY))
    model = Model(args.seed, args.run)
    deadline = time.monotonic() + RUN_SECONDS_MAX
    while time.monotonic() < deadline:
        op = model.step()
        rec = model.record
        assert rec is not None
        if op.kind == "save":
            log.save(model.inv, rec)
            emit("ready" if op.n == 1 else f"ack {op.n}")
        elif op.kind == "internal":
            log.save_fan_out_internal(model.inv, rec)
        elif op.kind == "failure":
            log.save_fan_out_in_flight_failure(model.inv, rec)
        elif op.kind == "instance":
            progress = FanOutInstanceProgress("completed", op.n)
            log.save_instance(model.inv, FAN_OUT, op.index, progress, saved_at=float(op.n))
        else:
            log.flush()  # changes no record: acknowledges the last operation's stamp
            emit(f"ack {int(rec.last_saved_at)}")
    log.close()
    print("checkpoint crash writer: ran out its time without being killed", file=sys.stderr)
    return 3


# -- the test ----------------------------------------------------------------------------------


@dataclass
class Writer:
    proc: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

    def collect(self, out: IO[bytes]) -> None:
        for raw in out:
            if not raw.endswith(b"\n"):
                break  # cut short by the kill
            line = raw.decode().rstrip("\n")
            if line == "ready":
                self.ready.set()
            self.lines.append(line)

    def acked(self) -> int:
        """The last operation acknowledged as durable (1 once ``ready``; 0 before)."""
        best = 0
        for line in self.lines:
            if line == "ready":
                best = max(best, 1)
            elif line.startswith("ack "):
                best = max(best, int(line.split()[1]))
        return best


def run_writer_until_killed(
    path: Path, seed: int, run: int, rng: random.Random, err: IO[bytes]
) -> Writer:
    cmd = [sys.executable, str(HERE), str(path), f"--seed={seed}", f"--run={run}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=REPO)
    writer = Writer(proc)
    assert proc.stdout is not None
    writer.reader = threading.Thread(target=writer.collect, args=(proc.stdout,), daemon=True)
    writer.reader.start()
    try:
        if rng.random() < EARLY_KILL_CHANCE:
            time.sleep(rng.uniform(0.0, 0.3))
        else:
            assert writer.ready.wait(READY_SECONDS_MAX), "writer never became ready"
            time.sleep(rng.uniform(0.0, KILL_AFTER_READY_SECONDS_MAX))
        assert proc.poll() is None, f"writer exited by itself with status {proc.returncode}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        writer.reader.join(10)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return writer


def check_log(
    path: Path, seed: int, survivors: dict[int, tuple[int, CheckpointRecord | None]]
) -> None:
    with CheckpointLog.open(path) as log:
        for run, (acked, before) in survivors.items():
            loaded = log.load(f"inv-{run}")
            if acked == 0 and loaded is None:
                continue
            assert loaded is not None, (
                f"run {run}: durable save {acked} acknowledged, load() is None"
            )
            m = int(loaded.last_saved_at)
            assert m >= acked, f"run {run}: load() is as of op {m}, but op {acked} was acknowledged"
            assert loaded == model_after(seed, run, m), (
                f"run {run}: load() is no saved record (op {m})"
            )
            if before is not None:
                assert loaded == before, f"run {run}: its record changed after its writer died"
            survivors[run] = (acked, loaded)
        report = log.verify()
        assert report.ok, str(report)


def crash_loop(tmp_path: Path, seed: int, kills: int, *, unfolded: bool = False) -> None:
    rng = random.Random(seed)
    path = tmp_path / "ckpt"
    if unfolded:  # a log made before the fold (backends/lmdb_fold.py); new ones fold
        create_unfolded_lmdb(path, (*CORE_TABLES, *MATERIALIZED))
    survivors: dict[int, tuple[int, CheckpointRecord | None]] = {}
    with open(tmp_path / "writer.stderr", "wb") as err:
        for run in range(kills):
            writer = run_writer_until_killed(path, seed, run, rng, err)
            survivors[run] = (writer.acked(), None)
            if path.exists():
                check_log(path, seed, survivors)
    stderr = (tmp_path / "writer.stderr").read_text(errors="replace")
    assert "Traceback" not in stderr, stderr
    # Most runs got past their first durable save (else the test tests little).
    assert sum(1 for a, _ in survivors.values() if a > 1) >= kills // 2, survivors


def kills_per_seed(long_run: bool) -> int:
    return 80 if long_run else 8


@pytest.mark.parametrize("seed", [7, 8], ids=lambda s: f"seed={s}")
def test_killed_checkpoint_writer_keeps_acknowledged_saves(
    tmp_path: Path, seed: int, long_run: bool
) -> None:
    crash_loop(tmp_path, seed, kills_per_seed(long_run))


def test_killed_checkpoint_writer_on_a_log_made_before_the_fold(
    tmp_path: Path, long_run: bool
) -> None:
    crash_loop(tmp_path, 9, kills_per_seed(long_run), unfolded=True)


if __name__ == "__main__":
    sys.exit(writer_main(sys.argv[1:]))
