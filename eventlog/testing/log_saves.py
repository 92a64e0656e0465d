"""The sync checkpointer contract, part one: save / load, list, delete, invalid input,
batching and reopen (combined into :class:`~eventlog.testing.CheckpointLogContract`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import msgspec
import pytest

from eventlog.checkpoints import CheckpointLog
from eventlog.errors import (
    EncodingError,
    InvalidRecord,
    InvalidStreamKey,
    UnknownInvocation,
)
from eventlog.records import (
    NOT_STARTED,
    CheckpointFilter,
    EnclosingFanOutInstance,
    FanOutInternalSaveBatching,
)
from eventlog.testing.helpers import (
    BATCH_EVERY,
    NS,
    UNENCODABLE_STATE_PATH,
    LogContractBase,
    Opener,
    _DataclassState,
    _DuckFanOut,
    _DuckInstance,
    _DuckLineage,
    _DuckPosition,
    _DuckRecord,
    _StructState,
    assert_history_consistent,
    assert_tuples,
    done,
    fan_out,
    fan_out_script,
    make_record,
    pos,
    rich_record,
    save_kind,
    summary_of,
)


class SavesContract(LogContractBase):
    """Saving, loading, listing and deleting whole records; batching; reopening."""

    # -- save / load ---------------------------------------------------------------------------

    def test_save_load_round_trip(self, cl: CheckpointLog) -> None:
        rec = rich_record("inv-1")
        cl.save("inv-1", rec)
        loaded = cl.load("inv-1")
        assert loaded == rec
        assert loaded is not None
        assert_tuples(loaded)
        assert loaded.state["big"] == 2**64 - 1

    def test_load_of_unknown_is_none(self, cl: CheckpointLog) -> None:
        assert cl.load("nobody") is None
        with pytest.raises(UnknownInvocation, match="no invocation 'nobody'"):
            cl.record_at("nobody", 1)
        with pytest.raises(UnknownInvocation, match="no invocation 'nobody'"):
            list(cl.history("nobody"))
        assert cl.list() == []
        cl.save("a", make_record("a"))
        assert cl.load("nobody") is None

    def test_save_replaces_the_head(self, cl: CheckpointLog) -> None:
        first = rich_record("a", at=1.0)
        second = make_record("a", state={"v": 2}, positions=[pos("b", 5)], at=2.0)
        cl.save("a", first)
        cl.save("a", second)
        assert cl.load("a") == second
        cl.save("a", first)  # going back to an earlier record is a change like any other
        assert cl.load("a") == first

    def test_state_is_captured_at_call_time(self, cl: CheckpointLog) -> None:
        state: dict[str, Any] = {"items": [1]}
        cl.save("a", make_record("a", state=state))
        state["items"].append(2)
        loaded = cl.load("a")
        assert loaded is not None
        assert loaded.state == {"items": [1]}

    def test_invocations_are_independent(self, cl: CheckpointLog) -> None:
        recs = {f"inv-{i}": make_record(f"inv-{i}", state={"i": i}, at=float(i)) for i in range(5)}
        for k, r in recs.items():
            cl.save(k, r)
        cl.delete("inv-2")
        for k, r in recs.items():
            assert cl.load(k) == (None if k == "inv-2" else r)

    def test_duck_typed_records_are_accepted(self, cl: CheckpointLog) -> None:
        p = _DuckPosition(NS, "n", 1)
        duck = _DuckRecord(
            "d",
            "c",
            {"k": "v"},
            (p,),
            ({"parent": 1},),
            3.5,
            "v9",
            (
                _DuckFanOut(
                    "f",
                    NS,
                    2,
                    (
                        _DuckInstance("completed", {"r": 1}, False, (p,)),
                        _DuckInstance("not_started"),
                    ),
                    (_DuckLineage(NS, "outer", 0),),
                ),
            ),
        )
        ours = make_record(
            "d",
            correlation_id="c",
            state={"k": "v"},
            positions=[pos("n", 1)],
            parent_states=[{"parent": 1}],
            at=3.5,
            schema_version="v9",
            fan_outs=[
                fan_out(
                    "f",
                    [done({"r": 1}, pos("n", 1)), NOT_STARTED],
                    lineage=(EnclosingFanOutInstance(NS, "outer", 0),),
                )
            ],
        )
        cl.save("d", duck)
        assert cl.load("d") == ours
        cl.save_fan_out_internal("d", dataclasses.replace(duck, last_saved_at=4.0))
        assert cl.load("d") == msgspec.structs.replace(ours, last_saved_at=4.0)

    # -- list ----------------------------------------------------------------------------------

    def test_list_summaries_oldest_first_and_by_correlation(self, cl: CheckpointLog) -> None:
        recs = [
            make_record("c", correlation_id="x", at=3.0, positions=[pos("a", 1)]),
            make_record("a", correlation_id="y", at=1.0),
            make_record("b", correlation_id="x", at=2.0, positions=[pos("a", 1), pos("b", 2)]),
            make_record("d", correlation_id="x\x00y", at=4.0),
        ]
        for r in recs:
            cl.save(r.invocation_id, r)
        by_age = sorted(recs, key=lambda r: r.last_saved_at)
        assert cl.list() == [summary_of(r) for r in by_age]
        assert cl.list(None) == cl.list(CheckpointFilter())
        assert cl.list(CheckpointFilter(correlation_id="x")) == [
            summary_of(recs[2]),
            summary_of(recs[0]),
        ]
        assert cl.list(CheckpointFilter(correlation_id="x\x00y")) == [summary_of(recs[3])]
        assert cl.list(CheckpointFilter(correlation_id="nope")) == []
        assert cl.list(CheckpointFilter(correlation_id="")) == []

    def test_list_follows_changes_of_the_head(self, cl: CheckpointLog) -> None:
        cl.save("a", make_record("a", correlation_id="x", at=1.0))
        cl.save("b", make_record("b", correlation_id="x", at=2.0))
        moved = make_record("a", correlation_id="y", at=3.0, positions=[pos("n", 1)] * 3)
        cl.save("a", moved)  # a new correlation id and a newer time
        b = make_record("b", correlation_id="x", at=2.0)
        assert cl.list() == [summary_of(b), summary_of(moved)]
        assert cl.list(CheckpointFilter(correlation_id="x")) == [summary_of(b)]
        assert cl.list(CheckpointFilter(correlation_id="y")) == [summary_of(moved)]
        cl.delete("a")
        assert cl.list() == [summary_of(b)]
        assert cl.list(CheckpointFilter(correlation_id="y")) == []

    # -- delete --------------------------------------------------------------------------------

    def test_delete_of_unknown_id_is_a_no_op(self, cl: CheckpointLog) -> None:
        cl.delete("ghost")
        assert cl.load("ghost") is None
        with pytest.raises(UnknownInvocation):  # a no-op writes no frame
            list(cl.history("ghost"))
        cl.save("a", make_record("a"))
        cl.delete("a")
        cl.delete("a")  # already deleted: nothing more is logged
        assert [e.kind for e in cl.history("a")] == ["save", "delete"]
        assert cl.stats().frames == 2

    def test_delete_hides_the_head_but_keeps_history(self, cl: CheckpointLog) -> None:
        r1 = make_record("a", at=1.0)
        r2 = rich_record("a", at=2.0)
        cl.save("a", r1)
        cl.save("a", r2)
        before = time.time()
        cl.delete("a")
        after = time.time()
        assert cl.load("a") is None
        assert cl.list() == []
        hist = list(cl.history("a"))
        assert [(e.seq, e.kind, e.record) for e in hist] == [
            (1, "save", r1),
            (2, "save", r2),
            (3, "delete", None),
        ]
        assert before - 1 <= hist[2].saved_at <= after + 1
        assert cl.record_at("a", 2) == r2
        assert cl.record_at("a", 3) is None
        assert_history_consistent(cl, "a")

    def test_saving_again_after_delete(self, cl: CheckpointLog) -> None:
        cl.save("a", rich_record("a", at=1.0))
        cl.delete("a")
        again = make_record("a", correlation_id="new", at=5.0, positions=[pos("z", 1)])
        cl.save("a", again)
        assert cl.load("a") == again
        assert cl.list() == [summary_of(again)]
        assert cl.list(CheckpointFilter(correlation_id="corr-🙂")) == []
        assert [e.kind for e in cl.history("a")] == ["save", "delete", "save"]
        assert cl.record_at("a", 3) == again
        assert_history_consistent(cl, "a")

    # -- invalid input -------------------------------------------------------------------------

    @pytest.mark.parametrize("kind", ["save", "fan_out_internal", "fan_out_in_flight_failure"])
    def test_mismatched_invocation_id_is_invalid_record(
        self, batched: CheckpointLog, kind: str
    ) -> None:
        method = {
            "save": batched.save,
            "fan_out_internal": batched.save_fan_out_internal,
            "fan_out_in_flight_failure": batched.save_fan_out_in_flight_failure,
        }[kind]
        with pytest.raises(InvalidRecord) as info:
            method("a", make_record("b"))
        assert str(info.value) == (
            "record.invocation_id is 'b' but the save is for 'a'; "
            "pass the record under its own invocation id"
        )
        batched.flush()
        assert batched.load("a") is None
        with pytest.raises(UnknownInvocation):  # nothing was written
            list(batched.history("a"))
        assert batched.stats().frames == 0

    def test_invalid_invocation_ids_are_rejected(self, cl: CheckpointLog) -> None:
        with pytest.raises(InvalidStreamKey):
            cl.save("", make_record(""))
        too_long = "x" * (cl.log.backend.max_key_bytes + 1)
        with pytest.raises(InvalidStreamKey):
            cl.save(too_long, make_record(too_long))
        with pytest.raises(InvalidStreamKey):
            cl.delete("")
        assert cl.stats().frames == 0

    def test_unencodable_state_is_encoding_error_with_path(self, cl: CheckpointLog) -> None:
        good = make_record("a", state={"items": [1, 2, 3]})
        cl.save("a", good)
        bad = make_record("a", state={"items": [1, 2, 3, object()]}, at=2.0)
        for method in (cl.save, cl.save_fan_out_internal, cl.save_fan_out_in_flight_failure):
            with pytest.raises(EncodingError) as info:
                method("a", bad)
            assert info.value.path == UNENCODABLE_STATE_PATH
            assert UNENCODABLE_STATE_PATH in str(info.value)
        with pytest.raises(EncodingError) as info:
            cl.save("a", make_record("a", parent_states=[{}, {"y": object()}]))
        assert info.value.path == "parent_states[1].y"
        assert cl.load("a") == good
        assert [e.kind for e in cl.history("a")] == ["save"]
        later = make_record("a", state={"items": [4]}, at=3.0)
        cl.save("a", later)  # still usable
        assert cl.load("a") == later
        assert_history_consistent(cl, "a")

    def test_pydantic_state_loads_as_plain_data(self, cl: CheckpointLog) -> None:
        try:
            from pydantic import BaseModel  # noqa: PLC0415 - an optional (dev) dependency
        except ImportError:  # pragma: no cover
            pytest.skip("pydantic is not installed")

        class Inner(BaseModel):
            tags: tuple[str, ...]
            weight: float

        class State(BaseModel):
            name: str
            inner: Inner
            items: list[Inner]
            maybe: int | None = None

        model = State(name="ü", inner=Inner(tags=("a",), weight=0.5), items=[])
        cl.save("p", make_record("p", state=model, parent_states=[model]))
        loaded = cl.load("p")
        assert loaded is not None
        dumped = model.model_dump(mode="json")
        assert loaded.state == dumped
        assert loaded.parent_states == (dumped,)
        assert type(loaded.state) is dict
        assert State.model_validate(loaded.state) == model

    def test_unencodable_field_inside_a_pydantic_model_is_named(self, cl: CheckpointLog) -> None:
        try:
            from pydantic import BaseModel, ConfigDict  # noqa: PLC0415 - a dev dependency
        except ImportError:  # pragma: no cover
            pytest.skip("pydantic is not installed")

        class Blob:
            pass

        class Inner(BaseModel):
            model_config = ConfigDict(arbitrary_types_allowed=True)
            ok: int
            blob: Blob

        class State(BaseModel):
            model_config = ConfigDict(arbitrary_types_allowed=True)
            name: str
            inner: Inner

        bad = State(name="x", inner=Inner(ok=1, blob=Blob()))
        with pytest.raises(EncodingError) as info:
            cl.save("p", make_record("p", state={"model": bad}))
        assert info.value.path == "state.model.inner.blob"
        assert "cannot encode state.model.inner.blob (a Blob)" in str(info.value)
        assert cl.load("p") is None

    def test_dataclass_and_struct_state_load_as_plain_data(self, cl: CheckpointLog) -> None:
        state = _DataclassState("n", [1, 2], {"s": _StructState("x", [0.5])})
        cl.save("d", make_record("d", state=state))
        loaded = cl.load("d")
        assert loaded is not None
        assert loaded.state == {
            "name": "n",
            "items": [1, 2],
            "inner": {"s": {"name": "x", "values": [0.5]}},
        }
        assert type(loaded.state) is dict

    # -- batching ------------------------------------------------------------------------------

    def test_batched_fan_out_saves_flush_every_n(self, batched: CheckpointLog) -> None:
        base = make_record("a", at=0.5)
        batched.save("a", base)
        recs = [make_record("a", state={"i": i}, at=float(i)) for i in range(1, 4)]
        batched.save_fan_out_internal("a", recs[0])
        batched.save_fan_out_internal("a", recs[1])
        assert batched.load("a") == base
        assert len(list(batched.history("a"))) == 1
        batched.save_fan_out_internal("a", recs[2])  # the third: everything is committed
        assert batched.load("a") == recs[2]
        assert [e.record for e in batched.history("a")] == [base, *recs]
        assert_history_consistent(batched, "a")

    def test_buffered_saves_are_invisible_to_load_and_list(self, batched: CheckpointLog) -> None:
        batched.save_fan_out_internal("new", make_record("new"))
        assert batched.load("new") is None
        assert batched.list() == []
        with pytest.raises(UnknownInvocation):  # not committed: no frame to read yet
            batched.record_at("new", 1)
        batched.flush()
        assert batched.list() == [summary_of(make_record("new"))]

    def test_in_flight_failure_saves_do_not_count(self, batched: CheckpointLog) -> None:
        recs = [make_record("a", state={"i": i}, at=float(i)) for i in range(6)]
        batched.save_fan_out_internal("a", recs[0])
        batched.save_fan_out_in_flight_failure("a", recs[1])
        batched.save_fan_out_in_flight_failure("a", recs[2])
        batched.save_fan_out_internal("a", recs[3])
        batched.save_fan_out_in_flight_failure("a", recs[4])
        assert batched.load("a") is None  # four buffered saves, but only two count
        batched.save_fan_out_internal("a", recs[5])
        assert batched.load("a") == recs[5]
        kinds = [e.kind for e in batched.history("a")]
        assert kinds == [
            "fan_out_internal",
            "fan_out_in_flight_failure",
            "fan_out_in_flight_failure",
            "fan_out_internal",
            "fan_out_in_flight_failure",
            "fan_out_internal",
        ]
        assert [e.record for e in batched.history("a")] == recs

    def test_save_commits_the_invocations_buffered_saves_first(
        self, batched: CheckpointLog
    ) -> None:
        a1 = make_record("a", state={"i": 1}, at=1.0)
        a2 = make_record("a", state={"i": 2}, at=2.0)
        b1 = make_record("b", state={"i": 1}, at=1.5)
        batched.save_fan_out_internal("a", a1)
        batched.save_fan_out_in_flight_failure("a", a2)
        batched.save_fan_out_in_flight_failure("b", b1)
        final = make_record("a", state={"i": 3}, at=3.0)
        batched.save("a", final)
        assert [(e.kind, e.record) for e in batched.history("a")] == [
            ("fan_out_internal", a1),
            ("fan_out_in_flight_failure", a2),
            ("save", final),
        ]
        assert batched.load("a") == final
        assert batched.load("b") is None  # another invocation's buffer stays buffered
        batched.flush()
        assert batched.load("b") == b1

    def test_flush_commits_everything(self, batched: CheckpointLog) -> None:
        a = make_record("a", at=1.0)
        b = make_record("b", at=2.0)
        batched.save_fan_out_internal("a", a)
        batched.save_fan_out_in_flight_failure("b", b)
        assert batched.list() == []
        batched.flush()
        assert batched.load("a") == a
        assert batched.load("b") == b
        assert batched.list() == [summary_of(a), summary_of(b)]
        batched.flush()  # nothing buffered: a no-op
        assert batched.stats().frames == 2

    def test_flush_resets_the_count(self, batched: CheckpointLog) -> None:
        recs = [make_record("a", state={"i": i}, at=float(i)) for i in range(5)]
        batched.save_fan_out_internal("a", recs[0])
        batched.save_fan_out_internal("a", recs[1])
        batched.flush()
        batched.save_fan_out_internal("a", recs[2])
        batched.save_fan_out_internal("a", recs[3])
        assert batched.load("a") == recs[1]  # two since the flush: still buffered
        batched.save_fan_out_internal("a", recs[4])
        assert batched.load("a") == recs[4]

    def test_delete_drops_the_invocations_buffered_saves(self, batched: CheckpointLog) -> None:
        first = make_record("a", at=1.0)
        batched.save("a", first)
        batched.save_fan_out_internal("a", make_record("a", at=2.0))
        batched.save_fan_out_in_flight_failure("a", make_record("a", at=3.0))
        other = make_record("b", at=4.0)
        batched.save_fan_out_in_flight_failure("b", other)
        batched.delete("a")
        batched.flush()
        assert batched.load("a") is None
        assert [e.kind for e in batched.history("a")] == ["save", "delete"]
        assert batched.load("b") == other

    @pytest.mark.parametrize("flush_every", [None, 0, -1, 1])
    def test_without_batching_fan_out_saves_are_durable(
        self, opener: Opener, flush_every: int | None
    ) -> None:
        kw: dict[str, Any] = {}
        if flush_every is not None:
            kw["batching"] = FanOutInternalSaveBatching(flush_every=flush_every)
        cl = opener(**kw)
        r1 = make_record("a", at=1.0)
        cl.save_fan_out_internal("a", r1)
        assert cl.load("a") == r1
        r2 = make_record("a", at=2.0, state={"failed": True})
        cl.save_fan_out_in_flight_failure("a", r2)
        if flush_every == 1:
            assert cl.load("a") == r1  # batching on: in-flight failures wait for a flush
            cl.flush()
        assert cl.load("a") == r2

    def test_close_commits_buffered_saves(self, opener: Opener) -> None:
        self._require_persistent()
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))
        r = make_record("a", at=1.0)
        cl.save_fan_out_internal("a", r)
        cl.save_fan_out_in_flight_failure("b", make_record("b"))
        cl.close()
        cl = opener()
        assert cl.load("a") == r
        assert cl.load("b") == make_record("b")

    # -- reopen --------------------------------------------------------------------------------

    def test_delete_after_reopen(self, opener: Opener) -> None:
        """The first call on an invocation after reopening may be a delete (nothing cached)."""
        self._require_persistent()
        cl = opener()
        cl.save("a", make_record("a"))
        cl.save("b", make_record("b"))
        cl.close()
        cl = opener()
        cl.delete("a")
        assert cl.load("a") is None
        assert cl.load("b") == make_record("b")
        assert [e.kind for e in cl.history("a")] == ["save", "delete"]
        cl.save("a", make_record("a", at=2.0))
        assert cl.load("a") == make_record("a", at=2.0)
        assert_history_consistent(cl, "a")

    def test_reopen_keeps_everything(self, opener: Opener) -> None:
        self._require_persistent()
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))
        for kind, rec in fan_out_script("fan"):
            save_kind(cl, kind, rec)
        cl.save("gone", rich_record("gone"))
        cl.delete("gone")
        cl.save("x", rich_record("x", at=7.0))
        cl.flush()
        expected = {
            "loads": {k: cl.load(k) for k in ("fan", "gone", "x")},
            "list": cl.list(),
            "history": {k: list(cl.history(k)) for k in ("fan", "gone", "x")},
        }
        cl.close()
        cl = opener(batching=FanOutInternalSaveBatching(flush_every=BATCH_EVERY))
        assert {k: cl.load(k) for k in ("fan", "gone", "x")} == expected["loads"]
        assert cl.list() == expected["list"]
        assert {k: list(cl.history(k)) for k in ("fan", "gone", "x")} == expected["history"]
        # The reopened log continues the streams (its head cache starts empty).
        for kind, rec in fan_out_script("fan"):
            save_kind(cl, kind, rec)
            if kind == "save":
                assert cl.load("fan") == rec
        cl.flush()
        assert_history_consistent(cl, "fan")
        assert_history_consistent(cl, "gone")
