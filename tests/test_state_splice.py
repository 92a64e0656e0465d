"""State splices: a changed state stored as an edit of the previous state's bytes.

- ``splice_of``/``apply_splice`` round-trip for any pair of byte strings, and a splice is only
  made when it is at most half the new state;
- a splice that cannot apply (a frame before it missing) raises ``CorruptFrame``, which the
  projection checks of ``verify`` report;
- on a log: a 64 KiB state edited in one place per save appends small frames, and ``load``,
  ``record_at`` at every seq, ``diff``, ``scan`` and ``verify`` all see the full states.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.memory import MemoryBackend
from eventlog import forensics
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import CorruptFrame
from eventlog.frames import Save, StateSplice
from eventlog.records import CheckpointRecord
from projections.records import SPLICE_MIN_BYTES, apply_splice, splice_of


@given(
    base=st.binary(min_size=0, max_size=2048),
    cut=st.integers(0, 2048),
    drop=st.integers(0, 64),
    insert=st.binary(max_size=64),
)
def test_splice_round_trips_an_edit(base: bytes, cut: int, drop: int, insert: bytes) -> None:
    cut = min(cut, len(base))
    new = base[:cut] + insert + base[cut + drop :]
    if new == base:
        return
    sp = splice_of(base, new)
    if sp is None:
        # declined only when small, or when even ``insert`` alone is over half the new state
        assert len(new) < SPLICE_MIN_BYTES or len(insert) + 16 > len(new) // 2
        return
    assert apply_splice(base, sp) == new
    assert len(sp.middle) <= len(insert)  # the common ends are at least the untouched ones
    assert len(sp.middle) + 16 <= len(new) // 2
    assert sp.keep_head + sp.keep_tail <= min(len(base), len(new))


@given(old=st.binary(max_size=1024), new=st.binary(min_size=SPLICE_MIN_BYTES, max_size=1024))
def test_splice_of_any_two_states_applies_or_declines(old: bytes, new: bytes) -> None:
    if old == new:
        return
    sp = splice_of(old, new)
    if sp is not None:
        assert apply_splice(old, sp) == new


def test_a_splice_keeps_the_longest_common_ends() -> None:
    old = b"A" * 300 + b"0123" + b"Z" * 300
    new = b"A" * 300 + b"45" + b"Z" * 300
    assert splice_of(old, new) == StateSplice(300, 300, b"45")


def test_small_or_unlike_states_are_stored_whole() -> None:
    assert splice_of(b"a" * 10, b"b" * 10) is None  # below SPLICE_MIN_BYTES
    rng = random.Random(1)
    old, new = rng.randbytes(1000), rng.randbytes(1000)
    assert splice_of(old, new) is None  # nothing in common


def test_a_splice_on_the_wrong_state_raises_corrupt_frame() -> None:
    with pytest.raises(CorruptFrame, match=r"keeps 300 \+ 300 bytes of a previous state of 10"):
        apply_splice(b"x" * 10, StateSplice(300, 300, b"45"))


def _record(k: int, pad: dict[str, str]) -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id="inv",
        correlation_id="c",
        state={"step": k, "cursor": f"page-{k:08d}", **pad},
        completed_positions=(),
        parent_states=(),
        last_saved_at=1000.0 + k,
        schema_version="1",
    )


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
def test_large_states_edited_in_one_place_append_small_frames(tmp_path: Path, backend: str) -> None:
    rng = random.Random(0)
    pad = {f"f{j:04d}": rng.randbytes(32).hex() for j in range(870)}  # ~64 KiB of msgpack
    if backend == "lmdb":
        cl = CheckpointLog.open(tmp_path / "log", durability="process")
    else:
        cl = CheckpointLog.on_backend(MemoryBackend())
    with cl:
        saved = [_record(k, pad) for k in range(40)]
        for rec in saved:
            cl.save("inv", rec)
        frames = list(cl.log.read_stream("inv"))
        splices = [sf for sf in frames if isinstance(sf.frame, Save) and sf.frame.state_splice]
        assert len(splices) >= 30, "an edit in one place of a 64 KiB state should splice"
        assert max(sf.stored_bytes for sf in splices) < 200
        loaded = cl.load("inv")
        assert loaded is not None
        assert loaded.state == saved[-1].state
        for seq, rec in enumerate(saved, 1):
            at = cl.record_at("inv", seq)
            assert at is not None
            assert at.state == rec.state, f"record_at({seq})"
        d = forensics.diff(cl, "inv", 5, 6)
        assert {c.path for c in d.state} == {"state.step", "state.cursor"}
        assert all(e.state_changed for e in forensics.scan(cl))
        report = cl.verify()
        assert report.ok, str(report)
