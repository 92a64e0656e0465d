"""One fan-out worker "host" of ``tests/test_postgres_hosts.py``; not a test module.

Run as ``python tests/pg_host_worker.py URL W WORKERS INSTANCES FLUSH_EVERY SAVES``. Worker
``W`` of ``WORKERS`` opens the checkpoint log at ``URL`` (its own process and connections, as a
worker on another host) and saves, with ``save_instance`` batched by
``FanOutInternalSaveBatching(flush_every=FLUSH_EVERY)``, every instance ``i`` of the shared
invocation ``shared``'s fan-out ``f`` (``INSTANCES`` in all) with ``i % WORKERS == W``, in
batches of ``FLUSH_EVERY``: batch ``B`` is its instances ``B * FLUSH_EVERY ..`` of that list.
``SAVES`` durable whole-record saves of its own invocation ``own-W`` are spread between the
batches. It prints, one line each, flushed at once:

- ``flushing B`` just before the call that fills batch ``B`` (and commits it);
- ``flushed B`` after the durable ``flush()`` that followed batch ``B`` returned: acknowledged;
- ``ack own-W N`` after whole-record save ``N`` returned: acknowledged;
- ``done`` after the last flush and close.

A typed storage error (``CommitOutcomeUnknown``, ``StorageError`` and its kinds: the log
could not learn or make a commit durable) stops it with ``stopped TYPE: message`` and exit
code 3: the job resumes its share elsewhere. Any other error is a bug: traceback, exit 1.
Warnings of the ``ckptlog.postgres`` logger go to stderr as ``TIME LOGGER: message`` lines
(``TIME`` is the wall clock, so the test can tell which fault a warning followed).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback

from pg_writer import emit  # the same line-at-once output

from eventlog.checkpoints import CheckpointLog
from eventlog.errors import CommitOutcomeUnknown, StorageError
from eventlog.records import FanOutInternalSaveBatching
from eventlog.testing import NS, done, make_record

STOPPED = 3


def main() -> int:
    url, w_s, workers_s, instances_s, flush_s, saves_s = sys.argv[1:7]
    w, workers, instances = int(w_s), int(workers_s), int(instances_s)
    flush_every, saves = int(flush_s), int(saves_s)
    logging.basicConfig(
        level=logging.WARNING, format="%(created).3f %(name)s: %(message)s", stream=sys.stderr
    )
    mine = list(range(w, instances, workers))
    batches = [mine[b : b + flush_every] for b in range(0, len(mine), flush_every)]
    # Whole-record save n (1-based) follows batch save_after[n - 1].
    save_after = [(k * len(batches)) // max(saves, 1) for k in range(saves)]
    own = f"own-{w}"
    try:
        cl = CheckpointLog.open(url, batching=FanOutInternalSaveBatching(flush_every=flush_every))
    except (CommitOutcomeUnknown, StorageError) as e:
        emit(f"stopped {type(e).__name__}: {' '.join(str(e).split())}")
        return STOPPED
    n = 0
    try:
        for b, batch in enumerate(batches):
            for k, i in enumerate(batch):
                if k == len(batch) - 1:
                    emit(f"flushing {b}")
                cl.save_instance("shared", "f", i, done({"w": w, "i": i}), namespace=NS)
            cl.flush()
            emit(f"flushed {b}")
            while n < saves and save_after[n] == b:
                n += 1
                cl.save(own, make_record(own, at=float(n)))
                emit(f"ack {own} {n}")
        while n < saves:
            n += 1
            cl.save(own, make_record(own, at=float(n)))
            emit(f"ack {own} {n}")
        cl.flush()
    except (CommitOutcomeUnknown, StorageError) as e:
        emit(f"stopped {type(e).__name__}: {' '.join(str(e).split())}")
        traceback.print_exc()
        with contextlib.suppress(StorageError):  # buffered frames it cannot write: not acked
            cl.close()
        return STOPPED
    cl.close()
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
