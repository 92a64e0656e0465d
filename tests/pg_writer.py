"""One worker process of the multi-process PostgreSQL tests and scaling measurement.

Run as ``python tests/pg_writer.py URL W WORKERS SAVES INSTANCES FLUSH_EVERY [own]``; not a test
module (``benchmarks/pg_scale.py`` runs it too). Worker ``W`` of ``WORKERS`` opens the
checkpoint log at ``URL`` (a separate process
with its own connections, as a worker on another host would be) and interleaves:

- ``SAVES`` durable whole-record saves of its own invocation ``own-W``;
- ``save_instance`` of every instance ``i`` of the shared invocation ``shared``'s fan-out ``f``
  (``INSTANCES`` in all) with ``i % WORKERS == W``, batched by ``FLUSH_EVERY``;

then flushes and closes. With ``own``, the instances are those of its own invocation
``job-W`` (fan-out ``f``, saved beforehand with at least ``I // WORKERS + 1`` instances) instead:
the workers share no stream. It prints ``ack own-W N`` after save ``N`` returned, ``inst I`` after
``save_instance`` of instance ``I`` returned when it is durable (``FLUSH_EVERY`` 0), ``flushed K``
after a flush that covered its first ``K`` instances returned, and finally ``elapsed SECONDS``,
``commits N``, ``lockwait SECONDS`` (from beginning a write transaction to the writers' lock's
grant, which comes with its first read) and ``lockheld SECONDS`` (from the grant to the commit's
answer), ``stale N`` (commits that ran on stale assumptions and ran again), ``heldacross N``
(commits that held the lock across a round trip of this client: they read under it), and over
those ``heldclient SECONDS`` (from the lock's answer to sending the COMMIT) and ``heldcpu
SECONDS`` (the committing thread's CPU in that window).
"""

from __future__ import annotations

import os
import sys
import time

from eventlog.checkpoints import CheckpointLog
from eventlog.records import FanOutInternalSaveBatching
from eventlog.testing import NS, done, make_record


def emit(line: str) -> None:
    os.write(1, (line + "\n").encode())


def main() -> int:
    url, w_s, workers_s, saves_s, instances_s, flush_s = sys.argv[1:7]
    w, workers, saves, instances = int(w_s), int(workers_s), int(saves_s), int(instances_s)
    flush_every = int(flush_s)
    own_job = len(sys.argv) > 7 and sys.argv[7] == "own"
    batching = FanOutInternalSaveBatching(flush_every=flush_every) if flush_every > 0 else None
    mine = list(range(w, instances, workers))
    job, index = ("shared", lambda i: i) if not own_job else (f"job-{w}", lambda i: i // workers)
    own = f"own-{w}"
    start = time.perf_counter()
    cl = CheckpointLog.open(url, batching=batching)
    try:
        every = max(1, len(mine) // max(saves, 1))
        n = 0
        for k, i in enumerate(mine):
            cl.save_instance(job, "f", index(i), done({"w": w, "i": i}), namespace=NS)
            if flush_every <= 0:
                emit(f"inst {i}")  # durable: acknowledged
            if k % every == 0 and n < saves:
                n += 1
                cl.save(own, make_record(own, at=float(n)))
                emit(f"ack {own} {n}")
        while n < saves:
            n += 1
            cl.save(own, make_record(own, at=float(n)))
            emit(f"ack {own} {n}")
        cl.flush()
        emit(f"flushed {len(mine)}")
    finally:
        cl.close()
    backend = cl.log.backend
    emit(f"elapsed {time.perf_counter() - start:.4f}")
    emit(f"commits {getattr(backend, 'commits', 0)}")
    emit(f"lockwait {getattr(backend, 'lock_wait_s', 0.0):.4f}")
    emit(f"lockheld {getattr(backend, 'lock_held_s', 0.0):.4f}")
    emit(f"stale {getattr(backend, 'stale', 0)}")
    emit(f"heldacross {getattr(backend, 'held_across_client', 0)}")
    emit(f"heldclient {getattr(backend, 'held_client_s', 0.0):.4f}")
    emit(f"heldcpu {getattr(backend, 'held_client_cpu_s', 0.0):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
