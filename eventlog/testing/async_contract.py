"""The async checkpointer contract (openarmature's ``Checkpointer`` protocol), as tests."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from eventlog.checkpoint_frames import INLINE_LOAD_ROWS_MAX
from eventlog.checkpointer import Checkpointer
from eventlog.errors import (
    EncodingError,
    InvalidRecord,
    UnknownInvocation,
)
from eventlog.records import (
    NOT_STARTED,
    CheckpointFilter,
    CheckpointRecord,
    FanOutInternalSaveBatching,
)
from eventlog.testing.helpers import (
    BATCH_EVERY,
    NS,
    UNENCODABLE_STATE_PATH,
    asave_kind,
    assert_history_consistent,
    assert_tuples,
    done,
    fan_out,
    fan_out_script,
    in_flight,
    make_record,
    pos,
    rich_record,
    summary_of,
    with_instance,
)

# -- the async contract ------------------------------------------------------------------------

Body = Callable[[Checkpointer], Awaitable[None]]


class CheckpointerContract:
    """The async :class:`Checkpointer` contract (openarmature's protocol), as tests.

    Each test runs its coroutine with ``asyncio.run`` (no pytest-asyncio needed).
    """

    persistent: ClassVar[bool]
    """``True`` when ``make_checkpointer`` on the same ``tmp_path`` after close sees the data."""

    def make_checkpointer(self, tmp_path: Path, **kw: Any) -> Checkpointer:
        """A checkpointer stored under ``tmp_path``; ``kw`` may hold ``batching=...``."""
        raise NotImplementedError("subclasses of CheckpointerContract implement make_checkpointer")

    def run(self, tmp_path: Path, body: Body, **kw: Any) -> None:
        """Open a checkpointer, run ``body`` on it in a fresh event loop, always close it."""

        async def main() -> None:
            cp = self.make_checkpointer(tmp_path, **kw)
            try:
                await body(cp)
            finally:
                await cp.aclose()

        asyncio.run(main())

    def test_protocol_surface(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            assert cp.supports_state_migration is True
            for name in (
                "save",
                "save_fan_out_internal",
                "save_fan_out_in_flight_failure",
                "load",
                "list",
                "delete",
            ):
                assert asyncio.iscoroutinefunction(getattr(cp, name)), name

        self.run(tmp_path, body)

    def test_save_load_round_trip_and_replace(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            assert await cp.load("a") is None
            rec = rich_record("a")
            await cp.save("a", rec)
            loaded = await cp.load("a")
            assert loaded == rec
            assert loaded is not None
            assert_tuples(loaded)
            newer = make_record("a", at=2.0, positions=[pos("q", 1)])
            await cp.save("a", newer)
            assert await cp.load("a") == newer

        self.run(tmp_path, body)

    def test_load_inline_when_small_on_a_thread_when_big(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A small record loads on the loop's thread; a wide fan-out or a large state takes a
        # worker thread (the loop is never held for long). Both equal the synchronous load.
        hops: list[Any] = []
        real = asyncio.to_thread

        async def counting(fn: Any, *args: Any, **kwargs: Any) -> Any:
            hops.append(fn)
            return await real(fn, *args, **kwargs)

        monkeypatch.setattr(asyncio, "to_thread", counting)
        small = make_record("small", positions=[pos("a", 1)])
        wide = make_record(
            "wide", fan_outs=[fan_out("f", [done(i) for i in range(10)] + [NOT_STARTED] * 300)]
        )
        big = make_record("big", state={"blob": "x" * (INLINE_LOAD_ROWS_MAX * 1024 + 1)})

        async def body(cp: Checkpointer) -> None:
            for rec in (small, wide, big):
                await cp.save(rec.invocation_id, rec)
            hops.clear()
            assert await cp.load("small") == small
            assert await cp.load("missing") is None
            assert hops == []
            assert await cp.load("wide") == wide
            assert await cp.load("big") == big
            assert len(hops) == 2
            for rec in (small, wide, big):
                assert cp.sync.load(rec.invocation_id) == rec

        self.run(tmp_path, body)

    def test_list_and_filter(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            recs = [
                make_record("b", correlation_id="x", at=2.0, positions=[pos("a", 1)]),
                make_record("a", correlation_id="y", at=1.0),
                make_record("c", correlation_id="x", at=3.0),
            ]
            for r in recs:
                await cp.save(r.invocation_id, r)
            assert await cp.list() == [summary_of(recs[i]) for i in (1, 0, 2)]
            assert await cp.list(CheckpointFilter(correlation_id="x")) == [
                summary_of(recs[0]),
                summary_of(recs[2]),
            ]
            assert await cp.list(CheckpointFilter(correlation_id="z")) == []

        self.run(tmp_path, body)

    def test_delete(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            await cp.delete("ghost")  # unknown: a no-op
            r = make_record("a")
            await cp.save("a", r)
            await cp.delete("a")
            assert await cp.load("a") is None
            assert await cp.list() == []
            assert [(e.kind, e.record) for e in cp.sync.history("a")] == [
                ("save", r),
                ("delete", None),
            ]
            again = make_record("a", at=3.0)
            await cp.save("a", again)
            assert await cp.load("a") == again
            with pytest.raises(UnknownInvocation):  # the no-op wrote nothing
                list(cp.sync.history("ghost"))

        self.run(tmp_path, body)

    def test_invalid_records(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            with pytest.raises(InvalidRecord) as info:
                await cp.save("a", make_record("b"))
            assert str(info.value) == (
                "record.invocation_id is 'b' but the save is for 'a'; "
                "pass the record under its own invocation id"
            )
            good = make_record("a")
            await cp.save("a", good)
            with pytest.raises(EncodingError) as enc:
                await cp.save_fan_out_internal(
                    "a", make_record("a", state={"items": [1, 2, 3, object()]})
                )
            assert enc.value.path == UNENCODABLE_STATE_PATH
            assert await cp.load("a") == good
            assert cp.sync.stats().frames == 1
            later = make_record("a", at=2.0)
            await cp.save("a", later)
            assert await cp.load("a") == later

        self.run(tmp_path, body)

    def test_batching(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            recs = [make_record("a", state={"i": i}, at=float(i)) for i in range(8)]
            await cp.save_fan_out_internal("a", recs[0])
            await cp.save_fan_out_in_flight_failure("a", recs[1])
            await cp.save_fan_out_internal("a", recs[2])
            assert await cp.load("a") is None
            await cp.save_fan_out_internal("a", recs[3])
            assert await cp.load("a") == recs[3]
            await cp.save_fan_out_internal("a", recs[4])
            await cp.save_fan_out_internal("b", make_record("b"))
            await cp.save("a", recs[5])  # commits a's buffered save first, not b's
            assert [e.record for e in cp.sync.history("a")] == recs[:6]
            assert await cp.load("b") is None
            await cp.save_fan_out_in_flight_failure("a", recs[6])
            await cp.flush()
            assert await cp.load("a") == recs[6]
            assert await cp.load("b") == make_record("b")

        self.run(tmp_path, body, batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))

    def test_without_batching_fan_out_saves_are_durable(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            r1 = make_record("a", at=1.0)
            await cp.save_fan_out_internal("a", r1)
            assert await cp.load("a") == r1
            r2 = make_record("a", at=2.0)
            await cp.save_fan_out_in_flight_failure("a", r2)
            assert await cp.load("a") == r2

        self.run(tmp_path, body)

    def test_fan_out_progressions(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            script = fan_out_script("fan")
            for kind, rec in script:
                await asave_kind(cp, kind, rec)
                assert await cp.load("fan") == rec
            assert [(e.kind, e.record) for e in cp.sync.history("fan")] == script
            assert_history_consistent(cp.sync, "fan")

        self.run(tmp_path, body)

    def test_reopen_keeps_everything(self, tmp_path: Path) -> None:
        if not self.persistent:
            pytest.skip("the store is not persistent: nothing survives close()")
        kept: dict[str, Any] = {}

        async def first(cp: Checkpointer) -> None:
            for kind, rec in fan_out_script("fan"):
                await asave_kind(cp, kind, rec)
            await cp.flush()  # the count restarts: the next fan-out save stays buffered
            await cp.save_fan_out_internal("buffered", make_record("buffered"))
            assert await cp.load("buffered") is None
            kept["load"] = await cp.load("fan")
            kept["list"] = await cp.list()

        async def second(cp: Checkpointer) -> None:
            assert await cp.load("fan") == kept["load"]
            assert await cp.load("buffered") == make_record("buffered")  # aclose flushed it
            assert await cp.list() == sorted(
                [*kept["list"], summary_of(make_record("buffered"))],
                key=lambda s: (s.last_saved_at, s.invocation_id),
            )
            assert_history_consistent(cp.sync, "fan")

        batching = FanOutInternalSaveBatching(flush_every=BATCH_EVERY)
        self.run(tmp_path, first, batching=batching)
        self.run(tmp_path, second, batching=batching)

    def test_concurrent_saves_on_many_invocations(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            async def one(i: int) -> None:
                inv = f"inv-{i:03d}"
                await cp.save(inv, make_record(inv, correlation_id=f"c{i % 3}", at=float(i)))
                await cp.save_fan_out_internal(
                    inv,
                    make_record(
                        inv, correlation_id=f"c{i % 3}", at=float(i) + 0.5, positions=[pos("n", i)]
                    ),
                )

            await asyncio.gather(*(one(i) for i in range(200)))
            expected = [
                make_record(
                    f"inv-{i:03d}",
                    correlation_id=f"c{i % 3}",
                    at=float(i) + 0.5,
                    positions=[pos("n", i)],
                )
                for i in range(200)
            ]
            loads = await asyncio.gather(*(cp.load(r.invocation_id) for r in expected))
            assert loads == expected
            assert await cp.list() == [summary_of(r) for r in expected]
            assert await cp.list(CheckpointFilter(correlation_id="c1")) == [
                summary_of(r) for r in expected if r.correlation_id == "c1"
            ]
            report = cp.sync.verify()
            assert report.ok, str(report)

        self.run(tmp_path, body)

    def test_concurrent_saves_on_one_invocation_last_call_wins(self, tmp_path: Path) -> None:
        rng = random.Random(100)

        async def body(cp: Checkpointer) -> None:
            recs = [
                make_record(
                    "one",
                    state={"i": i},
                    at=float(rng.randrange(1000)),
                    positions=[pos("n", k) for k in range(rng.randrange(5))],
                    fan_outs=[fan_out("f", [done(i)] * rng.randrange(1, 4))],
                )
                for i in range(100)
            ]
            calls: list[int] = []

            async def one(i: int) -> None:
                calls.append(i)  # recorded right before the call, with no await in between
                await cp.save("one", recs[i])

            order = list(range(100))
            rng.shuffle(order)
            await asyncio.gather(*(one(i) for i in order))
            assert await cp.load("one") == recs[calls[-1]]
            assert [e.record for e in cp.sync.history("one")] == [recs[i] for i in calls]
            assert_history_consistent(cp.sync, "one")

        self.run(tmp_path, body)

    def test_concurrent_batched_saves_on_one_invocation(self, tmp_path: Path) -> None:
        rng = random.Random(101)

        async def body(cp: Checkpointer) -> None:
            kinds = ["save", "fan_out_internal", "fan_out_in_flight_failure"]
            script = [
                (rng.choice(kinds), make_record("one", state={"i": i}, at=float(i)))
                for i in range(100)
            ]
            calls: list[int] = []

            async def one(i: int) -> None:
                calls.append(i)
                await asave_kind(cp, *script[i])

            await asyncio.gather(*(one(i) for i in range(100)))
            await cp.flush()
            assert await cp.load("one") == script[calls[-1]][1]
            assert [(e.kind, e.record) for e in cp.sync.history("one")] == [
                script[i] for i in calls
            ]

        self.run(tmp_path, body, batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))

    def test_concurrent_saves_and_deletes_on_one_invocation(self, tmp_path: Path) -> None:
        rng = random.Random(102)

        async def body(cp: Checkpointer) -> None:
            ops: list[CheckpointRecord | None] = [
                None if rng.random() < 0.2 else make_record("one", state={"i": i}, at=float(i))
                for i in range(60)
            ]
            calls: list[int] = []

            async def one(i: int) -> None:
                calls.append(i)
                rec = ops[i]
                if rec is None:
                    await cp.delete("one")
                else:
                    await cp.save("one", rec)

            await asyncio.gather(*(one(i) for i in range(60)))
            expected: list[tuple[str, CheckpointRecord | None]] = []
            live = False
            for i in calls:  # a delete of nothing is not logged
                rec = ops[i]
                if rec is not None or live:
                    expected.append(("save" if rec is not None else "delete", rec))
                live = rec is not None
            assert [(e.kind, e.record) for e in cp.sync.history("one")] == expected
            assert await cp.load("one") == ops[calls[-1]]
            assert_history_consistent(cp.sync, "one")

        self.run(tmp_path, body)

    def test_a_failing_save_fails_alone_in_its_group_commit(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            base = make_record("a", fan_outs=[fan_out("f", [NOT_STARTED] * 2)])
            await cp.save("a", base)
            r1 = make_record("a", at=2.0, fan_outs=[fan_out("f", [in_flight(), NOT_STARTED])])
            r2 = make_record("a", at=3.0, fan_outs=[fan_out("f", [in_flight(), done(1)])])
            results = await asyncio.gather(
                cp.save("a", r1),
                cp.save_instance("a", "f", 5, done(0), namespace=NS),  # no instance 5
                cp.save("b", make_record("b")),
                cp.save("a", r2),
                return_exceptions=True,
            )
            assert results[0] is None
            assert isinstance(results[1], InvalidRecord)
            assert list(results[2:]) == [None, None]
            assert [e.record for e in cp.sync.history("a")] == [base, r1, r2]
            assert await cp.load("b") == make_record("b")
            assert_history_consistent(cp.sync, "a")

        self.run(tmp_path, body)

    def test_save_instances_async(self, tmp_path: Path) -> None:
        async def body(cp: Checkpointer) -> None:
            base = make_record("a", fan_outs=[fan_out("f", [NOT_STARTED] * 5)])
            await cp.save("a", base)
            with pytest.raises(InvalidRecord, match=r"items\[1\]"):
                await cp.save_instances("a", "f", [(0, done(0)), (-3, done(1))], namespace=NS)
            assert await cp.load("a") == base
            await cp.save_instances("a", "f", [(3, done(3)), (0, done(0))], namespace=NS)
            await cp.flush()
            expected = with_instance(with_instance(base, 0, 3, done(3)), 0, 0, done(0))
            record = await cp.load("a")
            assert record is not None
            assert record.fan_out_progress == expected.fan_out_progress
            assert_history_consistent(cp.sync, "a")

        self.run(tmp_path, body)
        self.run(tmp_path / "batched", body, batching=FanOutInternalSaveBatching(flush_every=1000))

    def test_delete_after_reopen(self, tmp_path: Path) -> None:
        if not self.persistent:
            pytest.skip("the store is not persistent: nothing survives close()")

        async def first(cp: Checkpointer) -> None:
            await cp.save("a", make_record("a"))

        async def second(cp: Checkpointer) -> None:
            await cp.delete("a")
            assert await cp.load("a") is None
            assert [e.kind for e in cp.sync.history("a")] == ["save", "delete"]

        self.run(tmp_path, first)
        self.run(tmp_path, second)
