"""Properties of checkpoint records on the log and of the record projection (STYLE §5).

- a saved record loads back equal (every kind, both backends);
- for any sequence of saves and deletes, ``record_at`` at every seq and ``history()`` equal the
  record saved at that seq, and ``load`` the last one;
- the projection: ``apply`` (pure) and ``apply_inplace`` agree, ``apply`` leaves its input alone,
  and folding from any snapshot (one in the stream, or one taken of any prefix) equals the fold
  of the whole stream.
Each example uses its own invocation id on a store shared by the module, so opening LMDB is
paid once.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from record_strategies import SAVE_KINDS, Op, ids, records, save_sequences

from backends.memory import MemoryBackend
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import CheckpointError, NotACheckpointFrame
from eventlog.frames import Event, Snapshot
from eventlog.testing import assert_tuples, save_kind
from projections.records import Head, _differing, apply, apply_inplace, snapshot, to_record

_ids = itertools.count()


def _fresh_id(prefix: str = "inv") -> str:
    """Unique per example: examples share the module's store."""
    return f"{prefix}#{next(_ids)}"


@pytest.fixture(scope="module", params=["memory", "lmdb"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CheckpointLog]:
    if request.param == "memory":
        cl = CheckpointLog.on_backend(MemoryBackend())
    else:
        cl = CheckpointLog.open(tmp_path_factory.mktemp("props") / "log", durability="process")
    yield cl
    report = cl.verify()
    cl.close()
    assert report.ok, str(report)


def _run(cl: CheckpointLog, inv: str, ops: list[Op]) -> list[tuple[str, Any]]:
    """Apply ``ops``; the expected history: every save, and deletes of a saved head."""
    expected: list[tuple[str, Any]] = []
    live = False
    for kind, rec in ops:
        if rec is None:
            cl.delete(inv)
            if live:
                expected.append(("delete", None))
            live = False
        else:
            save_kind(cl, kind, rec)
            expected.append((kind, rec))
            live = True
    return expected


@given(data=st.data(), kind=st.sampled_from(SAVE_KINDS))
def test_load_after_save_equals_the_record(
    store: CheckpointLog, data: st.DataObject, kind: str
) -> None:
    inv = _fresh_id(data.draw(ids, label="invocation id prefix"))
    rec = data.draw(records(inv))
    save_kind(store, kind, rec)
    loaded = store.load(inv)
    assert loaded == rec
    assert loaded is not None
    assert_tuples(loaded)
    assert store.record_at(inv, 1) == rec


@given(data=st.data())
def test_record_at_every_seq_equals_the_saved_record(
    store: CheckpointLog, data: st.DataObject
) -> None:
    inv = _fresh_id()
    ops = data.draw(save_sequences(inv))
    expected = _run(store, inv, ops)
    hist = list(store.history(inv)) if store.log.last_seq(inv) else []  # unknown id: raises
    assert [(e.kind, e.record) for e in hist] == expected
    assert [e.seq for e in hist] == list(range(1, len(expected) + 1))
    for seq, (_, rec) in enumerate(expected, start=1):
        note(f"seq {seq}")
        assert store.record_at(inv, seq) == rec
    assert store.load(inv) == (expected[-1][1] if expected else None)


# -- the projection ----------------------------------------------------------------------------


def _view(head: Head | None) -> Any:
    """What a head means (the caller-object caches ``src`` / ``pos_src`` aside)."""
    if head is None:
        return None
    return (to_record(head), head.seq, head.kind, head.next_fid, [s.header for s in head.slots])


def _fold(
    frames: list[Any], inv: str, start: Head | None = None, step: Callable[..., Any] = apply_inplace
) -> Head | None:
    head = start
    for seq, frame in frames:
        head = step(head, frame, seq, inv)
    return head


@pytest.fixture(scope="module")
def memory_store() -> Iterator[CheckpointLog]:
    cl = CheckpointLog.on_backend(MemoryBackend())
    yield cl
    cl.close()


@given(data=st.data())
def test_apply_and_apply_inplace_agree_and_apply_is_pure(
    memory_store: CheckpointLog, data: st.DataObject
) -> None:
    inv = _fresh_id()
    _run(memory_store, inv, data.draw(save_sequences(inv)))
    pure: Head | None = None
    inplace: Head | None = None
    for sf in memory_store.log.read_stream(inv):
        before = copy.deepcopy(pure)
        after = apply(pure, sf.frame, sf.seq, inv)
        assert pure == before, f"apply changed its input at seq {sf.seq}"
        assert after is not pure or after is None
        inplace = apply_inplace(inplace, sf.frame, sf.seq, inv)
        assert _view(after) == _view(inplace), f"seq {sf.seq}"
        pure = after


@pytest.mark.slow
@given(data=st.data())
def test_fold_from_any_snapshot_equals_the_full_fold(
    memory_store: CheckpointLog, data: st.DataObject
) -> None:
    inv = _fresh_id()
    _run(memory_store, inv, data.draw(save_sequences(inv, max_size=16)))
    frames = [(sf.seq, sf.frame) for sf in memory_store.log.read_stream(inv)]
    full = _view(_fold(frames, inv))
    assert full == _view(_fold(frames, inv, step=apply))
    for k, (seq, frame) in enumerate(frames):
        if isinstance(frame, Snapshot):  # a snapshot in the stream: fold its tail from it
            assert _view(_fold(frames[k:], inv)) == full, f"from stored snapshot at seq {seq}"
        # A snapshot taken of the prefix ending at seq, then the tail after it.
        prefix = _fold(frames[: k + 1], inv)
        start = None if prefix is None else apply_inplace(None, snapshot(prefix), seq, inv)
        assert _view(start) == _view(prefix)
        assert _view(_fold(frames[k + 1 :], inv, start)) == full, f"split after seq {seq}"


@given(
    old=st.lists(st.sampled_from(["not_started", "in_flight", "completed", None, 1]), max_size=300),
    data=st.data(),
)
def test_differing_finds_exactly_the_changed_indices(old: list[Any], data: st.DataObject) -> None:
    new = list(old)
    for i in data.draw(st.lists(st.integers(0, max(len(old) - 1, 0)), max_size=8)):
        if new:
            new[i] = data.draw(st.sampled_from(["not_started", "in_flight", "completed", 2]))
    assert _differing(new, old) == [
        i for i, (a, b) in enumerate(zip(new, old, strict=True)) if a != b
    ]


def test_the_fold_names_a_frame_that_is_not_a_checkpoint_frame() -> None:
    with pytest.raises(NotACheckpointFrame, match=r"'a' seq 4: Event is not a checkpoint frame"):
        apply(None, Event(name="x"), 4, "a")
    assert issubclass(NotACheckpointFrame, CheckpointError)
