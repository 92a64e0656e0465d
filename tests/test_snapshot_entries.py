"""A snapshot's instances joined from the entries cached beside the writer's head slots
(eventlog.materialized.started_array) encode exactly as the record's started instances do,
whether an instance was set by a batch (cached_change_array) or any other way."""

from __future__ import annotations

import random

from eventlog.frames import FanOutHeader
from eventlog.materialized import _enc, cached_change_array, change_array, started_array
from eventlog.records import NOT_STARTED, FanOutInstanceProgress
from projections.records import Slot, started_changes


def _progress(rng: random.Random) -> FanOutInstanceProgress:
    return rng.choice(
        [
            NOT_STARTED,
            FanOutInstanceProgress("not_started"),  # equal to NOT_STARTED, another object
            FanOutInstanceProgress("in_flight"),
            FanOutInstanceProgress("completed", {"a": rng.random(), "n": rng.randrange(9)}),
            FanOutInstanceProgress("completed", 2**40, result_is_error=True),
        ]
    )


def test_started_array_matches_started_changes() -> None:
    rng = random.Random(7)
    slots = [
        Slot(FanOutHeader(1, "a", (), 300), [NOT_STARTED] * 300),
        Slot(FanOutHeader(70_000, "b", ("ns",), 20), [FanOutInstanceProgress("not_started")] * 20),
    ]
    snapshots = 0
    for _ in range(300):
        for s in slots:
            if rng.random() < 0.3:  # set apart from a batch (a fold, a whole-record save)
                for _ in range(rng.randint(0, 5)):
                    s.instances[rng.randrange(len(s.instances))] = _progress(rng)
                continue
            indices = [rng.randrange(len(s.instances)) for _ in range(rng.randint(1, 40))]
            progs = [_progress(rng) for _ in indices]
            raws = [_enc.encode(p) for p in progs]
            for i, p in zip(indices, progs, strict=True):  # in order: the later wins
                s.instances[i] = p
            array = cached_change_array(s, indices, progs, raws)
            assert array == change_array(s.header.fid, indices, raws)
        if rng.random() < 0.3:
            snapshots += 1
            assert started_array(slots) == _enc.encode(started_changes(slots))
    assert snapshots > 50
    assert all(s.objs is not None for s in slots)  # the batches went through the cache


def test_started_array_of_a_fresh_and_an_empty_head() -> None:
    slot = Slot(FanOutHeader(3, "c", (), 5), [NOT_STARTED] * 5)
    assert started_array([slot]) == _enc.encode(())
    assert started_array([]) == _enc.encode(())
    slot.instances[4] = done = FanOutInstanceProgress("completed", "x")
    assert started_array([slot]) == _enc.encode(started_changes([slot]))
    slot.instances.append(done)  # another length: the cache starts again
    assert started_array([slot]) == _enc.encode(started_changes([slot]))
