"""Crash-test writer: appends to a log from several threads until it is killed.

A helper run as a subprocess by ``tests/test_crash.py`` (not a test module: pytest collects only
``test_*.py``)::

    python tests/crash_writer.py PATH --seed N --run K [--durability fsync|process]

Everything it does follows from ``--seed`` and ``--run`` (``random.Random``, one per thread);
only the thread interleaving and the kill moment are not reproducible.

Protocol on stdout (each line written by one ``os.write``, so a line is whole or absent):

- ``ready`` once the log is open;
- ``ack STREAM SEQ GLOBAL_SEQ CHECKSUM_HEX`` for each frame, written only after its durable
  append returned, i.e. after the log acknowledged it. Every such frame must survive the kill.

Frames are :class:`eventlog.frames.Event` whose ``data`` records who wrote it and, for frames
appended together by one ``append_many``, the group's id and size, so the test can check that
no group was committed in part. Some frames are buffered (never acknowledged, may be lost), some
are large (compressed), and some go to streams created on the fly.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
from typing import Any

from eventlog.frames import Event
from eventlog.log import Appended, EventLog

STREAMS = ("alpha", "beta", "gamma", "delta", "épsilon", "流")
THREADS = 4
GROUP_FRAMES_MAX = 6
RUN_SECONDS_MAX = 30.0  # a writer nobody kills stops by itself (the test then fails)

_out_lock = threading.Lock()


def emit(line: str) -> None:
    data = (line + "\n").encode()
    with _out_lock:
        os.write(sys.stdout.fileno(), data)


def ack(done: Appended) -> None:
    emit(f"ack {done.stream} {done.seq} {done.global_seq} {done.checksum.hex()}")


def make_frame(rng: random.Random, who: dict[str, Any], group: str | None, size: int) -> Event:
    pad_kind = rng.random()
    if pad_kind < 0.1:
        pad = "compressible " * rng.randint(50, 400)  # compressed by zstd
    elif pad_kind < 0.2:
        pad = rng.randbytes(rng.randint(100, 3000)).hex()  # large, incompressible
    else:
        pad = ""
    return Event(name="crash", data={**who, "group": group, "group_size": size, "pad": pad})


def work(log: EventLog, seed: int, run: int, thread: int, stop: threading.Event) -> None:
    rng = random.Random(f"{seed}/{run}/{thread}")
    n = 0
    while not stop.is_set():
        n += 1
        who = {"run": run, "thread": thread, "n": n}
        roll = rng.random()
        if roll < 0.05:
            # A new stream: exercises stream-id allocation at the moment of the kill.
            stream = f"new-{run}-{thread}-{n}"
            done = log.append(stream, make_frame(rng, who, None, 1))
            assert done is not None
            ack(done)
        elif roll < 0.15:
            # Buffered: not acknowledged, may be lost; committed before the next durable
            # append to its stream, so it must never leave a gap.
            log.append(rng.choice(STREAMS), make_frame(rng, who, None, 1), durable=False)
        elif roll < 0.45:
            size = rng.randint(2, GROUP_FRAMES_MAX)
            group = f"{seed}/{run}/{thread}/{n}"
            items = [
                (rng.choice(STREAMS), make_frame(rng, {**who, "k": k}, group, size))
                for k in range(size)
            ]
            for done in log.append_many(items) or []:
                ack(done)
        else:
            done = log.append(rng.choice(STREAMS), make_frame(rng, who, None, 1))
            assert done is not None
            ack(done)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--run", type=int, default=0, help="which restart of the writer this is")
    parser.add_argument("--durability", default="fsync", choices=("fsync", "process"))
    parser.add_argument("--threads", type=int, default=THREADS)
    args = parser.parse_args(argv)

    log = EventLog.open(args.path, durability=args.durability)
    stop = threading.Event()
    failures: list[BaseException] = []

    def run(thread: int) -> None:
        try:
            work(log, args.seed, args.run, thread, stop)
        except BaseException as e:
            failures.append(e)
            stop.set()
            raise

    workers = [
        threading.Thread(target=run, args=(t,), name=f"crash-writer-{t}", daemon=True)
        for t in range(args.threads)
    ]
    for w in workers:
        w.start()
    emit("ready")
    stop.wait(RUN_SECONDS_MAX)
    stop.set()
    for w in workers:
        w.join()
    log.close()
    if failures:
        return 2
    print("crash_writer: ran out its time without being killed", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
