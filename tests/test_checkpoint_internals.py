"""This implementation's snapshot cadence, checked on both backends.

The shared contract (eventlog.testing) holds only what any checkpointer must do; these tests pin
how this one does it (when snapshot frames are written, SNAPSHOT_FRAMES_MAX, a batch kept in a
snapshot), so another implementation need not pass them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.memory import MemoryBackend
from eventlog.checkpoints import SNAPSHOT_FRAMES_MAX, CheckpointLog
from eventlog.frames import Snapshot
from eventlog.records import NOT_STARTED, FanOutInternalSaveBatching, NodePosition
from eventlog.testing import (
    NS,
    assert_history_consistent,
    done,
    fan_out,
    in_flight,
    incompressible,
    make_record,
    pos,
)

Opener = Callable[..., CheckpointLog]


class Internals:
    def make_log(self, tmp_path: Path, **kw: Any) -> CheckpointLog:
        raise NotImplementedError

    @pytest.fixture
    def opener(self, tmp_path: Path) -> Iterator[Opener]:
        opened: list[CheckpointLog] = []

        def _open(**kw: Any) -> CheckpointLog:
            cl = self.make_log(tmp_path, **kw)
            opened.append(cl)
            return cl

        yield _open
        for cl in reversed(opened):
            cl.close()

    def test_growing_states_and_deletes_make_snapshots(self, opener: Opener) -> None:
        cl = opener()
        rng = random.Random(20240501)
        items: list[int] = []
        for i in range(1, 301):
            items.append(rng.randrange(-(2**63), 2**63))
            cl.save("grow", make_record("grow", state={"items": list(items)}, at=float(i)))
            if i == 150:
                cl.delete("grow")
        snaps = [sf.seq for sf in cl.log.read_stream("grow") if isinstance(sf.frame, Snapshot)]
        assert len(snaps) > 3, "growing states must make snapshots"
        assert 152 in snaps, "the first save after a delete starts from a snapshot"

    @pytest.mark.slow
    def test_record_at_every_seq_across_snapshot_frames(self, opener: Opener) -> None:
        # A large incompressible state that never changes keeps each delta tiny against the
        # snapshot, so snapshots come from the SNAPSHOT_FRAMES_MAX bound, not the byte ratio.
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=SNAPSHOT_FRAMES_MAX // 4))
        n = 2 * SNAPSHOT_FRAMES_MAX + 60
        state = {"blob": incompressible(7, 60_000)}
        positions: list[NodePosition] = []
        for i in range(1, n + 1):
            if i % 50 == 0:
                positions.append(pos("n", i))
            rec = make_record(
                "long",
                state=state,
                positions=positions,
                at=float(i),
                fan_outs=[fan_out("f", [done(i), NOT_STARTED])],
            )
            if i % 97 == 0:
                cl.save("long", rec)
            else:
                cl.save_fan_out_internal("long", rec)
        cl.flush()
        snaps = [sf.seq for sf in cl.log.read_stream("long") if isinstance(sf.frame, Snapshot)]
        assert snaps[0] == 1
        assert len(snaps) >= n // SNAPSHOT_FRAMES_MAX + 1
        gaps = [b - a for a, b in zip(snaps, [*snaps[1:], n + 1], strict=True)]
        assert max(gaps) <= SNAPSHOT_FRAMES_MAX
        assert cl.load("long") == rec
        assert_history_consistent(cl, "long")

    def test_a_batch_written_as_a_snapshot_keeps_its_changes(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 4)])
        cl.save("a", base)
        for i in (0, 1):  # large results: the next frame outweighs the first snapshot
            big = random.Random(i).randbytes(1500).hex()  # does not compress away
            cl.save_instance("a", "outer", i, done(big), namespace=NS, saved_at=2.0)
        cl.flush()
        cl.save_instance("a", "outer", 3, in_flight(pos("x", 1)), namespace=NS, saved_at=3.0)
        cl.save_instance("a", "outer", 3, done(3), namespace=NS, saved_at=4.0)
        cl.flush()
        frames = [sf.frame for sf in cl.log.read_stream("a")]
        assert [type(f).__name__ for f in frames] == ["Snapshot", "Save", "Snapshot"]
        last = frames[-1]
        assert [(c.index, c.progress.state) for c in last.batch] == [
            (3, "in_flight"), (3, "completed")
        ]  # fmt: skip
        assert last.instance_saved_at == (3.0, 4.0)
        head = cl.load("a")
        assert head is not None
        assert head.fan_out_progress[0].instances[3] == done(3)
        assert_history_consistent(cl, "a")
        report = cl.verify()
        assert report.ok, str(report)

    def test_a_single_instance_save_written_as_a_snapshot_keeps_its_change(
        self, opener: Opener
    ) -> None:
        """One ``save_instance`` call stored as a snapshot names its instance and time too
        (the record alone would not say which instance the call saved)."""
        cl = opener()
        cl.save("a", make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 4)]))
        big = random.Random(7).randbytes(1500).hex()  # outweighs the first snapshot
        cl.save_instance("a", "outer", 1, done(big), namespace=NS, saved_at=2.0)
        cl.save_instance("a", "outer", 2, done(2), namespace=NS, saved_at=3.0)
        frames = [sf.frame for sf in cl.log.read_stream("a")]
        assert [type(f).__name__ for f in frames] == ["Snapshot", "Save", "Snapshot"]
        last = frames[-1]
        assert [(c.index, c.progress) for c in last.batch] == [(2, done(2))]
        assert last.instance_saved_at == (3.0,)
        entries = list(cl.history("a"))
        assert entries[-1].record.fan_out_progress[0].instances[2] == done(2)
        assert_history_consistent(cl, "a")


class TestInternalsLmdb(Internals):
    def make_log(self, tmp_path: Path, **kw: Any) -> CheckpointLog:
        return CheckpointLog.open(tmp_path / "log", durability="process", **kw)


class TestInternalsMemory(Internals):
    def make_log(self, tmp_path: Path, **kw: Any) -> CheckpointLog:
        return CheckpointLog.on_backend(MemoryBackend(), **kw)
