"""A snapshot's instances joined from the entries cached beside the writer's head slots
(eventlog.materialized.started_array) encode exactly as the record's started instances do,
whether an instance was set by a batch (cached_change_array) or any other way."""

from __future__ import annotations

import random

from backends.memory import MemoryBackend
from eventlog.checkpoints import CheckpointLog
from eventlog.frames import FanOutHeader, InstanceChange, InstancePage, Snapshot
from eventlog.materialized import _enc, cached_change_array, change_array, started_array
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
)
from eventlog.testing import NS, assert_history_consistent, done, fan_out, make_record
from projections.records import Head, Slot, _apply_instances, _apply_page, started_changes


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
                    s.synced = False  # as every writer but a cached batch does
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
    slot.synced = False
    assert started_array([slot]) == _enc.encode(started_changes([slot]))
    slot.instances.append(done)  # another length: the cache starts again
    assert started_array([slot]) == _enc.encode(started_changes([slot]))


def test_a_synced_slot_skips_the_scan_until_another_write_clears_it() -> None:
    slot = Slot(FanOutHeader(1, "a", (), 4), [NOT_STARTED] * 4)
    started_array([slot])
    assert slot.synced
    x = FanOutInstanceProgress("completed", "x")
    slot.instances[1] = x  # a cached batch sets instances and entries together
    cached_change_array(slot, [1], [x], [_enc.encode(x)])
    assert slot.synced
    assert started_array([slot]) == _enc.encode(started_changes([slot]))
    head = Head("i", "c", "1", b"\xc0", b"\x90", [], 0.0, "save", [slot])
    _apply_instances(head, (InstanceChange(1, 2, x),))  # a fold
    assert not slot.synced
    assert started_array([slot]) == _enc.encode(started_changes([slot]))
    assert slot.synced
    _apply_page(head, InstancePage(0, 1, 0, 4, (InstanceChange(1, 3, x),)), 2)  # a page
    assert not slot.synced
    assert started_array([slot]) == _enc.encode(started_changes([slot]))


def test_snapshots_hold_whole_saves_and_mixed_batches_between_cached_batches() -> None:
    """The writer's snapshots stay exact when instances change by a whole-record save or a
    batch of two fan-outs (each clears the slot's mark) between single-fan-out batches."""
    rng = random.Random(11)
    cl = CheckpointLog.on_backend(
        MemoryBackend(), batching=FanOutInternalSaveBatching(flush_every=1000)
    )
    insts = {"a": [NOT_STARTED] * 6, "b": [NOT_STARTED] * 3}

    def record() -> CheckpointRecord:
        return make_record("i", fan_outs=[fan_out(k, tuple(v)) for k, v in insts.items()])

    cl.save("i", record())
    for step in range(60):
        kind = rng.choice(["batch", "batch", "whole", "mixed"])
        if kind == "whole":
            insts["a"][rng.randrange(6)] = done(f"whole {step}")
            cl.save("i", record())
            continue
        names = ["a", "b"] if kind == "mixed" else ["a"]
        for name in names:
            i = rng.randrange(len(insts[name]))
            insts[name][i] = done({"step": step, "r": "x" * rng.randrange(200)})
            cl.save_instance("i", name, i, insts[name][i], namespace=NS)
        cl.flush()
    snaps = [sf.seq for sf in cl.log.read_stream("i") if isinstance(sf.frame, Snapshot)]
    assert len(snaps) > 3
    loaded = cl.load("i")
    assert loaded is not None
    assert loaded.fan_out_progress == record().fan_out_progress
    assert_history_consistent(cl, "i")
