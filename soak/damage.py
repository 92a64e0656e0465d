"""Damage: seeded single-bit flips and truncations of copies of a log's ``data.mdb``.

Each damaged copy is opened read-only, verified and read (every head, every history) in a
worker process, and, when that finds nothing wrong, opened writable for one more save and a
second verify. Outcomes: ``reported`` (verify names a problem, or a typed error), ``harmless``
(everything reads back exactly as from the pristine copy: the flip hit free space or unused
bytes), ``undetected`` (reads differ, yet nothing was reported), ``untyped`` (an error that
is not a ``CheckpointError``), ``crash`` (the worker died of a signal) and ``hang`` (no answer
within :data:`CASE_TIMEOUT_S`). The campaign asserts zero crashes, hangs and untyped errors.

Also every bit of both meta pages' transaction ids is flipped once: how many of those rollbacks
the meta-page check catches (LMDB 0.9's meta pages have no checksum).

Worker: ``python -m soak.damage PRISTINE_DIR SCRATCH_DIR``, reading ``flip OFFSET BIT`` or
``cut SIZE`` lines on stdin and answering one ``RESULT outcome detail`` line each.
"""

from __future__ import annotations

import hashlib
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import msgspec

from soak.common import Tally

CASE_TIMEOUT_S = 30.0
DATA = "data.mdb"


def _digest(path: Path) -> str:
    """What a user reads from the log: every head and every history, hashed."""
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415

    h = hashlib.blake2b(digest_size=16)
    with CheckpointLog.open(path, readonly=True) as log:
        for s in log.list():
            h.update(msgspec.msgpack.encode(log.load(s.invocation_id)))
            for e in log.history(s.invocation_id):
                h.update(msgspec.msgpack.encode(e))
    return h.hexdigest()


def build_log(path: Path) -> None:
    """A log with durable saves, fan-outs, batch frames and a delete: every kind of row."""
    from eventlog import FanOutInstanceProgress, FanOutInternalSaveBatching  # noqa: PLC0415
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from soak.workers import fan_out, rec  # noqa: PLC0415

    with CheckpointLog.open(path, batching=FanOutInternalSaveBatching(flush_every=8)) as log:
        for i in range(6):
            log.save(f"fan-{i}", rec(f"fan-{i}", {"i": i}, fan_out=(fan_out(64),)))
            for k in range(40):
                log.save_instance(
                    f"fan-{i}", "work", k, FanOutInstanceProgress("completed", result=k * i)
                )
            log.flush()
        for n in range(120):
            inv = f"inv-{n % 9}"
            log.save(inv, rec(inv, {"n": n, "text": "z" * (n % 5 * 200)}))
        log.delete("inv-3")


def _case(pristine: Path, scratch: Path, line: str) -> tuple[str, str]:
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from eventlog.errors import CheckpointError  # noqa: PLC0415
    from soak.workers import rec  # noqa: PLC0415

    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    raw = bytearray((pristine / DATA).read_bytes())
    op, *args = line.split()
    if op == "flip":
        offset, bit = int(args[0]), int(args[1])
        raw[offset] ^= 1 << bit
    else:
        del raw[int(args[0]) :]
    (scratch / DATA).write_bytes(bytes(raw))
    try:
        with CheckpointLog.open(scratch, readonly=True) as log:
            report = log.verify()
        if not report.ok:
            return "reported", report.problems[0].kind
        digest = _digest(scratch)
        with CheckpointLog.open(scratch) as log:  # and a writer carries on
            log.save("after", rec("after", {"n": 1}))
            if not log.verify().ok:
                return "reported", "after a save"
        return ("harmless" if digest == PRISTINE_DIGEST else "undetected"), ""
    except CheckpointError as e:
        return "reported", type(e).__name__
    except Exception as e:  # noqa: BLE001 - the campaign counts these
        return "untyped", f"{type(e).__name__}: {e}"[:200]


PRISTINE_DIGEST = ""


def worker(pristine: Path, scratch: Path) -> None:
    global PRISTINE_DIGEST  # noqa: PLW0603 - computed once per worker process
    PRISTINE_DIGEST = _digest(pristine)
    for line in sys.stdin:
        outcome, detail = _case(pristine, scratch, line.strip())
        sys.stdout.write(f"RESULT {outcome} {detail}\n".replace("\n", " ").rstrip() + "\n")
        sys.stdout.flush()


class _Worker:
    def __init__(self, pristine: Path, scratch: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "soak.damage", str(pristine), str(scratch)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def ask(self, line: str) -> tuple[str, str]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], CASE_TIMEOUT_S)
        if not ready:
            self.proc.kill()
            self.proc.wait()
            return "hang", line
        answer = self.proc.stdout.readline()
        if not answer:
            code = self.proc.wait()
            name = signal.Signals(-code).name if code < 0 else f"exit {code}"
            return "crash", f"{line}: {name}"
        _, outcome, *detail = answer.rstrip("\n").split(" ", 2)
        return outcome, " ".join(detail)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)


def run(seed: int, flips: int, cuts: int, work: Path, tally: Tally) -> None:
    rng = random.Random(seed + 2)
    pristine = work / "damage-pristine"
    build_log(pristine)
    size = (pristine / DATA).stat().st_size
    page = struct.unpack_from("=I", (pristine / DATA).read_bytes(), 40)[0]
    cases = [f"flip {rng.randrange(size)} {rng.randrange(8)}" for _ in range(flips)]
    cases += [f"cut {rng.randrange(size)}" for _ in range(cuts)]
    # every bit of both meta pages' mm_txnid (offset 144 of each meta page)
    txnid_cases = [f"flip {m * page + 144 + b // 8} {b % 8}" for m in (0, 1) for b in range(64)]
    w = _Worker(pristine, work / "damage-scratch")
    for i, line in enumerate(cases + txnid_cases):
        outcome, detail = w.ask(line)
        kind = "txnid" if i >= len(cases) else line.split()[0]
        tally.add(f"{kind}:{outcome}")
        tally.add(f"{kind}:cases")
        if outcome in ("crash", "hang", "untyped"):
            tally.fail(f"damage {line}: {outcome} {detail}")
        if outcome in ("crash", "hang"):
            w = _Worker(pristine, work / "damage-scratch")
        if outcome == "undetected" and kind != "txnid" and len(tally.notes) < 10:
            tally.notes.append(f"changed what reads back, yet nothing reported: {line}")
    w.close()
    tally.add("meta_pages_bytes", 2 * page)
    shutil.rmtree(pristine, ignore_errors=True)
    shutil.rmtree(work / "damage-scratch", ignore_errors=True)


if __name__ == "__main__":
    worker(Path(sys.argv[1]), Path(sys.argv[2]))
