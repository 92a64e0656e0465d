"""Fork server for the multi-process kill test (``tests/test_multi_writer_kill.py``).

Run as ``python tests/multi_writer.py``; not a test module. It imports ckptlog once and then, per
command read from stdin, forks writer processes, so a round costs a ``fork`` rather than an
interpreter start and the test can run hundreds of rounds. It never opens a log itself, so each
child opens its own LMDB environment (as a separately started process would).

Command (one line on stdin)::

    round PATH SEED WRITERS FRAMES DURABILITY KILLS

forks ``WRITERS`` children that each append ``FRAMES`` durable frames per thread (two threads)
to the log at ``PATH``, then close the log and exit 0. ``KILLS`` is ``W:SECONDS,...`` (or
``-``): child ``W`` gets SIGKILL that long after it was forked, unless it has already exited
(the server kills only children it has not reaped, so a reused pid is never hit). Output (one
``os.write`` per line, so a line is whole or absent)::

    pid W PID          child W started
    ack W STREAM SEQ GSEQ CHECKSUM   after an append of child W returned (it must survive)
    exit W STATUS      how child W ended: ``0``, ``-9`` (killed), ``hung`` (still running
                       HANG_SECONDS after the round started: killed by the server, the test fails)
    done               the round is over
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
import traceback

from eventlog.frames import Event
from eventlog.log import Appended, EventLog

HANG_SECONDS = 20.0  # a round takes well under a second; a loaded CI disk gets margin
THREADS = 2
STREAMS = ("a", "b", "c", "d", "e", "f")


def emit(line: str) -> None:
    os.write(1, (line + "\n").encode())


def child(w: int, path: str, seed: int, frames: int, durability: str) -> None:
    log = EventLog.open(path, durability=durability)

    def ack(done: Appended) -> None:
        emit(f"ack {w} {done.stream} {done.seq} {done.global_seq} {done.checksum.hex()}")

    def work(t: int) -> None:
        rng = random.Random(f"{seed}/{w}/{t}")
        for n in range(frames):
            data = {"w": w, "t": t, "n": n}
            if rng.random() < 0.2:
                items = [(rng.choice(STREAMS), Event(name="m", data=data)) for _ in range(3)]
                for done in log.append_many(items) or []:
                    ack(done)
            else:
                done = log.append(rng.choice(STREAMS), Event(name="m", data=data))
                assert done is not None
                ack(done)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    log.close()


def run_round(
    path: str, seed: int, writers: int, frames: int, durability: str, kills: dict[int, float]
) -> None:
    pids: dict[int, int] = {}
    for w in range(writers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                child(w, path, seed, frames, durability)
            except BaseException:  # noqa: BLE001 - reported through the exit status
                traceback.print_exc()
                code = 2
            finally:
                os._exit(code)
        pids[pid] = w
        emit(f"pid {w} {pid}")
    start = time.monotonic()
    deadline = start + HANG_SECONDS
    kill_at = {pid: start + kills[w] for pid, w in pids.items() if w in kills}
    while pids:
        now = time.monotonic()
        for pid, at in list(kill_at.items()):
            if now >= at:
                del kill_at[pid]
                if pid in pids:  # not reaped yet, so the pid is still this child's
                    os.kill(pid, signal.SIGKILL)
        for pid in list(pids):
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == 0:
                continue
            code = os.waitstatus_to_exitcode(status)
            emit(f"exit {pids.pop(pid)} {code}")
        if pids and time.monotonic() > deadline:
            for pid, w in pids.items():
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                emit(f"exit {w} hung")
            pids.clear()
        time.sleep(0.001)
    emit("done")


def main() -> int:
    for line in sys.stdin:
        cmd, path, seed, writers, frames, durability, kill_spec = line.split()
        assert cmd == "round", line
        kills = {}
        if kill_spec != "-":
            for part in kill_spec.split(","):
                w, at = part.split(":")
                kills[int(w)] = float(at)
        run_round(path, int(seed), int(writers), int(frames), durability, kills)
    return 0


if __name__ == "__main__":
    sys.exit(main())
