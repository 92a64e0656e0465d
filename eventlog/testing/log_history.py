"""The sync checkpointer contract, part two: history and record_at, instance saves, threads,
the head cache and verify (combined into :class:`~eventlog.testing.CheckpointLogContract`)."""

from __future__ import annotations

import random
import threading
from typing import Any

import msgspec
import pytest

from eventlog import forensics
from eventlog.checkpoint_frames import HEAD_CACHE_MAX
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import (
    EncodingError,
    InvalidRecord,
    SeqOutOfRange,
)
from eventlog.frames import Event, Save
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
)
from eventlog.testing.helpers import (
    BATCH_EVERY,
    NS,
    LogContractBase,
    Opener,
    assert_history_consistent,
    assert_tuples,
    done,
    fan_out,
    fan_out_script,
    in_flight,
    make_record,
    pos,
    save_kind,
    with_instance,
)


class HistoryContract(LogContractBase):
    """The folds over the saves (history, record_at), save_instance(s), concurrency, verify."""

    # -- history and record_at -----------------------------------------------------------------

    def test_events_beside_the_saves_are_skipped_by_every_fold(self, cl: CheckpointLog) -> None:
        # Application events may share an invocation's stream; the record ignores them.
        first, second = make_record("a", at=1.0), make_record("a", state={"n": 2}, at=3.0)
        cl.save("a", first)
        cl.log.append("a", Event(name="node.completed", data={"node": "x"}, at=2.0))
        cl.save("a", second)
        cl.log.append("a", Event(name="run.paused", at=4.0))
        assert cl.load("a") == second
        assert [(e.seq, e.kind, e.record) for e in cl.history("a")] == [
            (1, "save", first),
            (3, "save", second),
        ]
        assert [e.seq for e in cl.history("a", kinds=["save"])] == [1, 3]
        assert [cl.record_at("a", seq) for seq in range(1, 5)] == [first, first, second, second]
        assert forensics.diff(cl, "a", 1, 2).empty  # the event changed nothing
        report = cl.verify()
        assert report.ok, str(report)
        only_events = "events-only"
        cl.log.append(only_events, Event(name="x"))
        assert list(cl.history(only_events)) == []
        assert cl.record_at(only_events, 1) is None
        assert cl.load(only_events) is None

    def test_history_kinds_and_seqs(self, batched: CheckpointLog) -> None:
        script = [
            ("save", make_record("a", at=1.0)),
            ("fan_out_internal", make_record("a", at=2.0)),
            ("fan_out_in_flight_failure", make_record("a", at=3.0)),
            ("save", make_record("a", at=4.0)),
        ]
        for kind, rec in script:
            save_kind(batched, kind, rec)
        batched.delete("a")
        batched.save("a", make_record("a", at=6.0))
        hist = list(batched.history("a"))
        assert [(e.seq, e.kind) for e in hist] == [
            (1, "save"),
            (2, "fan_out_internal"),
            (3, "fan_out_in_flight_failure"),
            (4, "save"),
            (5, "delete"),
            (6, "save"),
        ]
        assert [e.saved_at for e in hist[:4]] == [1.0, 2.0, 3.0, 4.0]
        assert hist[5].saved_at == 6.0
        assert [e.record for e in hist[:4]] == [r for _, r in script]
        assert_history_consistent(batched, "a")

    def test_fan_out_progressions_load_equals_last_save(self, cl: CheckpointLog) -> None:
        script = fan_out_script("fan")
        for i, (kind, rec) in enumerate(script):
            save_kind(cl, kind, rec)
            assert cl.load("fan") == rec, f"after step {i + 1} ({kind})"
            loaded = cl.load("fan")
            assert loaded is not None
            assert_tuples(loaded)
        hist = list(cl.history("fan"))
        assert [(e.kind, e.record) for e in hist] == script
        assert_history_consistent(cl, "fan")

    def test_fan_out_progressions_with_batching(self, batched: CheckpointLog) -> None:
        script = fan_out_script("fan")
        for kind, rec in script:
            save_kind(batched, kind, rec)
            if kind == "save":
                assert batched.load("fan") == rec
        batched.flush()
        assert batched.load("fan") == script[-1][1]
        assert [(e.kind, e.record) for e in batched.history("fan")] == script
        assert_history_consistent(batched, "fan")

    def test_record_at_across_ratio_snapshots_and_deletes(self, cl: CheckpointLog) -> None:
        rng = random.Random(20240501)
        items: list[int] = []
        for i in range(1, 301):
            items.append(rng.randrange(-(2**63), 2**63))
            positions = [pos("n", k) for k in range(rng.randrange(0, 6))]
            cl.save(
                "grow",
                make_record("grow", state={"items": list(items)}, at=float(i), positions=positions),
            )
            if i == 150:
                cl.delete("grow")
        hist = list(cl.history("grow"))
        assert len(hist) == 301
        assert hist[150].kind == "delete"
        assert_history_consistent(cl, "grow")

    # -- save_instance -------------------------------------------------------------------------

    def test_save_instance_updates_one_instance(self, cl: CheckpointLog) -> None:
        lin = (EnclosingFanOutInstance(NS, "outer", 1),)
        base = make_record(
            "a",
            fan_outs=[
                fan_out("outer", [NOT_STARTED] * 5),
                fan_out("inner", [NOT_STARTED] * 2, namespace=(*NS, "outer"), lineage=lin),
            ],
        )
        cl.save("a", base)
        cl.save_instance("a", "outer", 3, in_flight(pos("x", 1)), namespace=NS, saved_at=2.0)
        expected = msgspec.structs.replace(
            with_instance(base, 0, 3, in_flight(pos("x", 1))), last_saved_at=2.0
        )
        assert cl.load("a") == expected
        cl.save_instance(
            "a", "inner", 1, done({"r": 1}), namespace=(*NS, "outer"), lineage=lin, saved_at=3.0
        )
        expected = msgspec.structs.replace(
            with_instance(expected, 1, 1, done({"r": 1})), last_saved_at=3.0
        )
        assert cl.load("a") == expected
        assert [e.kind for e in cl.history("a")] == ["save", "fan_out_internal", "fan_out_internal"]
        # A whole-record save afterwards is compared with the head, not with its own past.
        cl.save("a", base)
        assert cl.load("a") == base
        assert_history_consistent(cl, "a")

    def test_save_instance_needs_the_fan_out_in_the_head(self, cl: CheckpointLog) -> None:
        with pytest.raises(InvalidRecord):
            cl.save_instance("a", "outer", 0, done(1), namespace=NS)
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 2)])
        cl.save("a", base)
        with pytest.raises(InvalidRecord):
            cl.save_instance("a", "other", 0, done(1), namespace=NS)
        with pytest.raises(InvalidRecord):
            cl.save_instance("a", "outer", 2, done(1), namespace=NS)
        with pytest.raises(InvalidRecord):
            cl.save_instance("a", "outer", -1, done(1), namespace=NS)
        with pytest.raises(EncodingError) as info:
            cl.save_instance("a", "outer", 1, done(object()), namespace=NS)
        assert info.value.path == "instances[1].result"
        assert cl.load("a") == base
        assert [e.kind for e in cl.history("a")] == ["save"]
        assert_history_consistent(cl, "a")

    def test_save_instance_is_batched_like_fan_out_internal(self, batched: CheckpointLog) -> None:
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 3)])
        batched.save("a", base)
        batched.save_instance("a", "outer", 0, done(0), namespace=NS, saved_at=2.0)
        batched.save_fan_out_internal("a", with_instance(base, 0, 1, done(1)))
        assert batched.load("a") == base
        batched.save_instance("a", "outer", 2, done(2), namespace=NS, saved_at=4.0)
        expected = with_instance(with_instance(base, 0, 1, done(1)), 0, 2, done(2))
        assert batched.load("a") == msgspec.structs.replace(expected, last_saved_at=4.0)
        assert_history_consistent(batched, "a")

    def test_buffered_instance_saves_commit_as_one_frame(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 6)])
        cl.save("a", base)
        expected = base
        for i, at in ((4, 2.0), (1, 3.0), (4, 4.0), (0, 5.0)):
            progress = in_flight(pos("x", i)) if at == 2.0 else done({"i": i, "at": at})
            cl.save_instance("a", "outer", i, progress, namespace=NS, saved_at=at)
            expected = msgspec.structs.replace(
                with_instance(expected, 0, i, progress), last_saved_at=at
            )
        assert cl.log.buffered_count("a") == 4  # four saves, however they are framed
        cl.flush()
        assert cl.load("a") == expected
        frames = [sf.frame for sf in cl.log.read_stream("a")]
        assert len(frames) == 2  # the record, then one frame for the four buffered calls
        batch = frames[1]
        assert [(c.index, c.progress.state) for c in batch.instances] == [
            (4, "in_flight"), (1, "completed"), (4, "completed"), (0, "completed")
        ]  # fmt: skip
        assert batch.instance_saved_at == (2.0, 3.0, 4.0, 5.0)
        assert [e.kind for e in cl.history("a")] == ["save", "fan_out_internal"]
        assert cl.record_at("a", 2) == expected
        assert_history_consistent(cl, "a")
        report = cl.verify()
        assert report.ok, str(report)

    def test_save_instances_saves_a_call_as_one_batch(self, opener: Opener) -> None:
        cl = opener()
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 6)])
        cl.save("a", base)
        items = [
            (4, in_flight(pos("x", 4))),
            (1, done({"i": 1})),
            (4, done([4, 4.5])),
            (0, done(0)),
        ]
        cl.save_instances("a", "outer", iter(items), namespace=NS, saved_at=2.0)
        expected = base
        for i, progress in items:
            expected = with_instance(expected, 0, i, progress)
        assert cl.load("a") == msgspec.structs.replace(expected, last_saved_at=2.0)
        frames = [sf.frame for sf in cl.log.read_stream("a")]
        assert len(frames) == 2  # durable on return, as one frame
        assert [c.index for c in frames[1].instances] == [4, 1, 4, 0]
        cl.save_instances("a", "outer", [], namespace=NS)  # nothing: nothing logged
        assert len(list(cl.log.read_stream("a"))) == 2
        assert_history_consistent(cl, "a")

    def test_save_instances_checks_the_whole_call_first(self, opener: Opener) -> None:
        """A bad item (its index and field named) or an index or fan-out the head lacks: the
        call raises what save_instance would, and nothing of it is saved."""
        cl = opener()
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 4)])
        cl.save("a", base)
        good = [(0, done(0)), (1, done(1))]
        bad_state = FanOutInstanceProgress(state="finished")  # type: ignore[arg-type]
        cases: list[tuple[Any, type[Exception], str]] = [
            ([*good, (2, bad_state)], InvalidRecord, r"items\[2\] \(index 2\).*progress\.state"),
            ([*good, (-1, done(2))], InvalidRecord, r"items\[2\] \(index -1\).*index"),
            ([*good, (True, done(2))], InvalidRecord, r"items\[2\]"),
            ([*good, (2, done(object()))], EncodingError, r"instances\[2\]\.result"),
            ([*good, (3, done({1, 2}))], EncodingError, r"instances\[3\]\.result"),
            ([*good, (2,)], InvalidRecord, r"items\[2\]"),
            ([*good, (9, done(9))], InvalidRecord, r"items\[2\] has index 9, outside"),
            ("not items", InvalidRecord, r"items"),
        ]
        for items, error, match in cases:
            with pytest.raises(error, match=match):
                cl.save_instances("a", "outer", items, namespace=NS)
        with pytest.raises(InvalidRecord, match="no fan-out 'other'"):
            cl.save_instances("a", "other", good, namespace=NS)
        with pytest.raises(InvalidRecord, match="nothing is saved"):
            cl.save_instances("b", "outer", good, namespace=NS)
        assert cl.load("a") == base
        assert [e.kind for e in cl.history("a")] == ["save"]
        batched = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        batched.save_fan_out_internal("a", base)  # buffered: the head check is the writer's
        batched.save_instances("a", "outer", [(0, done(0)), (7, done(7))], namespace=NS)
        with pytest.raises(InvalidRecord, match="none of this call's 2 changes"):
            batched.flush()
        assert batched.load("a") == base
        assert_history_consistent(batched, "a")

    def test_save_instances_is_batched_by_item_count(self, batched: CheckpointLog) -> None:
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * BATCH_EVERY * 2)])
        batched.save("a", base)
        batched.save_instances(
            "a", "outer", [(i, done(i)) for i in range(BATCH_EVERY - 1)], namespace=NS
        )
        assert batched.load("a") == base  # buffered
        batched.save_instances(
            "a", "outer", [(BATCH_EVERY - 1, done(-1))], namespace=NS, saved_at=5.0
        )
        record = batched.load("a")  # the count reached flush_every: flushed
        assert record is not None
        assert record.fan_out_progress[0].instances[BATCH_EVERY - 1] == done(-1)
        assert record.last_saved_at == 5.0
        assert_history_consistent(batched, "a")

    def test_paged_snapshots_keep_every_frame_small(self, opener: Opener) -> None:
        """A head with more instances than one snapshot frame should hold is snapshotted in
        pages riding on later saves (small thresholds here stand in for the defaults, which
        need ~100,000 instances): no frame holds the whole fan-out, the writer keeps no head
        of it in memory, and record_at, history, load, verify and a rebuild all agree."""
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=40))
        cl.snapshot_instances_max = cl.head_rows_cached_max = 100
        cl.page_rows_max = 150
        n = 3000
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * n)])
        cl.save("a", base)
        rng = random.Random(20261126)
        for i in range(n):
            cl.save_instance("a", "outer", i, done({"i": i, "pad": "x" * 20}), namespace=NS)
            if i % 5 == 0:
                j = rng.randrange(n)
                cl.save_instance("a", "outer", j, in_flight(pos("x", i)), namespace=NS)
            if i == 1700:  # a whole-record save in the middle of it all
                cl.flush()
                current = cl.load("a")
                assert current is not None
                cl.save("a", msgspec.structs.replace(current, state={"half": True}))
        cl.flush()
        assert "a" not in cl._cache  # the writer holds no head of a fan-out this size
        frames = [sf.frame for sf in cl.log.read_stream("a")]
        pages = [f.page for f in frames if isinstance(f, Save) and f.page is not None]
        assert sum(1 for p in pages if p.last) >= 2  # paged snapshots completed
        assert max(len(p.instances) for p in pages) <= cl.page_rows_max + 40 + 8
        assert max(len(getattr(f, "instances", ())) for f in frames) < n // 4
        assert_history_consistent(cl, "a")
        report = cl.verify()
        assert report.ok, str(report)

    def test_a_refused_instance_save_leaves_the_rest_of_its_batch(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 3)])
        cl.save("a", base)
        cl.save_instance("a", "outer", 0, done(0), namespace=NS, saved_at=2.0)
        cl.save_instance("a", "outer", 7, done(7), namespace=NS, saved_at=3.0)  # no index 7
        cl.save_instance("a", "nope", 1, done(1), namespace=NS, saved_at=4.0)  # no such fan-out
        cl.save_instance("a", "outer", 2, done(2), namespace=NS, saved_at=5.0)
        with pytest.raises(InvalidRecord, match="index 7") as info:
            cl.flush()
        assert any("1 more buffered" in n for n in getattr(info.value, "__notes__", []))
        expected = with_instance(with_instance(base, 0, 0, done(0)), 0, 2, done(2))
        assert cl.load("a") == msgspec.structs.replace(expected, last_saved_at=5.0)
        cl.flush()  # reported once
        assert_history_consistent(cl, "a")
        report = cl.verify()
        assert report.ok, str(report)

    def test_save_instance_reads_a_reused_namespace_list_afresh(self, opener: Opener) -> None:
        """The fan-out key is cached only for immutable arguments: a list mutated between
        calls names another fan-out."""
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        other = (*NS, "deeper")
        base = make_record(
            "a",
            fan_outs=[
                fan_out("outer", [NOT_STARTED] * 2),
                fan_out("outer", [NOT_STARTED] * 2, namespace=other),
            ],
        )
        cl.save("a", base)
        ns = list(NS)
        cl.save_instance("a", "outer", 0, done("first"), namespace=ns, saved_at=2.0)  # type: ignore[arg-type]
        ns.append("deeper")
        cl.save_instance("a", "outer", 1, done("second"), namespace=ns, saved_at=3.0)  # type: ignore[arg-type]
        cl.flush()
        expected = with_instance(with_instance(base, 0, 0, done("first")), 1, 1, done("second"))
        assert cl.load("a") == msgspec.structs.replace(expected, last_saved_at=3.0)

    def test_pending_instances(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        assert cl.pending_instances("a", "outer", namespace=NS) is None
        base = make_record("a", fan_outs=[fan_out("outer", [NOT_STARTED] * 8)])
        cl.save("a", base)
        assert cl.pending_instances("a", "outer", namespace=NS) == list(range(8))
        cl.save_instance("a", "outer", 0, done(0), namespace=NS)
        cl.save_instance("a", "outer", 3, in_flight(pos("x", 1)), namespace=NS)
        cl.save_instance("a", "outer", 5, done("boom", error=True), namespace=NS)
        cl.save_instance("a", "outer", 7, done(7), namespace=NS)
        assert cl.pending_instances("a", "outer", namespace=NS) == list(range(8))  # buffered
        cl.flush()
        assert cl.pending_instances("a", "outer", namespace=NS) == [1, 2, 3, 4, 6]
        assert cl.pending_instances("a", "outer", namespace=NS, errors=True) == [1, 2, 3, 4, 5, 6]
        head = cl.load("a")
        assert head is not None
        assert [
            i for i, p in enumerate(head.fan_out_progress[0].instances) if p.state != "completed"
        ] == cl.pending_instances("a", "outer", namespace=NS)
        with pytest.raises(InvalidRecord, match="no fan-out 'other'"):
            cl.pending_instances("a", "other", namespace=NS)

    def test_record_at_before_the_first_seq_is_none(self, cl: CheckpointLog) -> None:
        cl.save("a", make_record("a"))
        assert cl.record_at("a", 0) is None

    @pytest.mark.parametrize("seq", [-1, -2, -(2**70), 2, 999])
    def test_record_at_outside_the_stream_raises(self, cl: CheckpointLog, seq: object) -> None:
        """The API answers as the CLI does: a seq the stream does not have is an error, never
        ``None`` (before the first save) or the latest record."""
        cl.save("a", make_record("a"))
        with pytest.raises(SeqOutOfRange, match=r"outside 'a', whose seqs run 1\.\.1"):
            cl.record_at("a", seq)  # type: ignore[arg-type]

    @pytest.mark.parametrize("seq", [True, "1", None, 1.0])
    def test_record_at_of_a_seq_that_is_no_int_raises(self, cl: CheckpointLog, seq: object) -> None:
        cl.save("a", make_record("a"))
        with pytest.raises(InvalidRecord, match=r"seq must be an int"):
            cl.record_at("a", seq)  # type: ignore[arg-type]

    def test_saves_from_many_threads(self, opener: Opener) -> None:
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=5))
        n_threads = 8
        calls: dict[str, list[tuple[str, CheckpointRecord]]] = {
            inv: [] for inv in ["shared", *(f"t{t}" for t in range(n_threads))]
        }
        shared_lock = threading.Lock()  # the shared invocation's call order is the lock order
        kinds = ["save", "fan_out_internal", "fan_out_in_flight_failure"]

        def worker(t: int) -> None:
            rng = random.Random(t)
            for i in range(40):
                inv = f"t{t}" if i % 4 else "shared"
                kind = rng.choice(kinds)
                rec = make_record(inv, state={"t": t, "i": i}, at=float(i))
                if inv == "shared":
                    with shared_lock:
                        calls[inv].append((kind, rec))
                        save_kind(cl, kind, rec)
                else:
                    calls[inv].append((kind, rec))
                    save_kind(cl, kind, rec)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=60)
        cl.flush()
        for inv, expected in calls.items():
            assert [(e.kind, e.record) for e in cl.history(inv)] == expected, inv
            assert cl.load(inv) == expected[-1][1]
        report = cl.verify()
        assert report.ok, str(report)

    def test_more_invocations_than_the_head_cache(self, opener: Opener) -> None:
        """Heads evicted from the writer's cache are rebuilt from the materialized rows."""
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=1000))
        n = HEAD_CACHE_MAX + 100
        base = {i: make_record(f"i{i}", positions=[pos("a", 1)], at=1.0) for i in range(n)}
        for rec in base.values():
            cl.save_fan_out_internal(rec.invocation_id, rec)
        cl.flush()
        later = {
            i: make_record(f"i{i}", positions=[pos("a", 1), pos("b", i)], at=2.0)
            for i in range(0, n, 7)
        }
        for rec in later.values():
            cl.save_fan_out_internal(rec.invocation_id, rec)
        cl.flush()
        for i in range(n):
            assert cl.load(f"i{i}") == later.get(i, base[i])
        assert len(cl.list()) == n
        report = cl.verify()
        assert report.ok, str(report)

    # -- verify --------------------------------------------------------------------------------

    def test_verify_after_a_mixed_workload(self, batched: CheckpointLog) -> None:
        rng = random.Random(99)
        for i in range(200):
            inv = f"inv-{rng.randrange(8)}"
            op = rng.random()
            if op < 0.1:
                batched.delete(inv)
            elif op < 0.15:
                batched.flush()
            else:
                kind = rng.choice(["save", "fan_out_internal", "fan_out_in_flight_failure"])
                rec = make_record(
                    inv,
                    state={"i": i},
                    at=float(i),
                    positions=[pos("n", k) for k in range(rng.randrange(4))],
                )
                save_kind(batched, kind, rec)
        batched.flush()
        report = batched.verify()
        assert report.ok, str(report)
        for inv in {f"inv-{k}" for k in range(8)}:
            assert_history_consistent(batched, inv)
