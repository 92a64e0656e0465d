"""Compaction: a new log that keeps heads and a chosen part of history, chains intact.

The property (random histories of several invocations, every policy): the compacted log's
heads equal the original's, its history equals the original's restricted to what the policy
keeps, ``verify`` passes on both, and the original checksums recomputed from the compacted
frames (``provenance``) equal the original log's. Unit tests pin the refusals, that the source
is never modified, that a damaged source is refused, and that the new log takes new saves.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_strategies import save_sequences
from test_corruption import damage, flip

from eventlog import forensics
from eventlog.checkpoints import CheckpointLog
from eventlog.codec import HEADER_BYTES
from eventlog.frames import Event, Snapshot
from eventlog.records import CheckpointRecord, HistoryEntry, NodePosition
from eventlog.testing import save_kind

T0 = 1_700_000_000.0
_n = itertools.count()


def rec(inv: str, step: int, corr: str = "c") -> CheckpointRecord:
    return CheckpointRecord(
        inv, corr, {"step": step, "pad": "p" * (step % 50)},
        tuple(NodePosition((), f"n{i}", i) for i in range(1 + step % 3)), (), T0 + step,
    )  # fmt: skip


def expected_history(hist: list[HistoryEntry], pol: forensics.Policy) -> list[HistoryEntry]:
    """The original history restricted to what ``pol`` keeps, renumbered from 1."""
    n = len(hist)
    if n == 0:
        return []
    if pol.mode == "all":
        k = 1
    elif pol.mode == "heads":
        k = n
    elif pol.mode == "last_n":
        k = max(1, n - pol.last_n + 1)
    else:
        k = next((e.seq for e in hist if e.saved_at >= pol.since), n)
    while k <= n and hist[k - 1].kind == "delete":
        k += 1  # a kept stream never starts with a delete
    return [HistoryEntry(e.seq - k + 1, e.saved_at, e.kind, e.record) for e in hist[k - 1 :]]


def checksums(cl: CheckpointLog, stream: str) -> dict[int, bytes]:
    return {sf.seq: sf.checksum for sf in cl.log.read_stream(stream)}


def checkpoint_streams(cl: CheckpointLog) -> list[str]:
    """Streams of checkpoint frames (application-event streams are copied whole)."""
    return [
        s for s in cl.log.streams()
        if not isinstance(next(iter(cl.log.read_stream(s, 1, 1))).frame, Event)
    ]  # fmt: skip


def assert_compacted(src: CheckpointLog, dest: CheckpointLog, pol: forensics.Policy) -> None:
    assert src.verify().ok
    report = dest.verify()
    assert report.ok, str(report)
    assert dest.list() == src.list()
    for stream in checkpoint_streams(src):
        assert dest.load(stream) == src.load(stream), stream
        original = list(src.history(stream))
        want = expected_history(original, pol)
        # A stream compaction dropped (deleted, under heads) has no frames: history() raises.
        got = list(dest.history(stream)) if dest.log.last_seq(stream) else []
        assert got == want, f"{stream}: kept {len(got)} of {len(original)}, expected {len(want)}"
        for e in got:
            assert dest.record_at(stream, e.seq) == e.record
        prov = forensics.provenance(dest, stream)
        assert len(prov) == len(got)
        orig = checksums(src, stream)
        for p, e in zip(prov, got, strict=True):
            assert p.seq == e.seq
            assert orig[p.original_seq] == p.original_checksum, (stream, p)


policies = st.one_of(
    st.just(forensics.Policy("all")),
    st.just(forensics.Policy("heads")),
    st.integers(1, 6).map(lambda n: forensics.Policy("last_n", last_n=n)),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda t: forensics.Policy("since", since=t)),
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("compact")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _kwargs(pol: forensics.Policy) -> dict[str, Any]:
    if pol.mode == "last_n":
        return {"last_n": pol.last_n}
    if pol.mode == "since":
        return {"since": pol.since}
    return {"keep": pol.mode}


@pytest.mark.slow
@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), pol=policies)
def test_compaction_keeps_heads_and_the_chosen_history(
    root: Path, data: st.DataObject, pol: forensics.Policy
) -> None:
    n = next(_n)
    src_path, dest_path = root / f"src{n}", root / f"dest{n}"
    with CheckpointLog.open(src_path, durability="process") as src:
        for inv in data.draw(
            st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True)
        ):
            for kind, r in data.draw(save_sequences(inv, max_size=8), label=f"ops {inv}"):
                if r is None:
                    src.delete(inv)
                else:
                    save_kind(src, kind, r)
        src.flush()
        forensics.compact(src, dest_path, **_kwargs(pol))
        with CheckpointLog.open(dest_path, readonly=True) as dest:
            assert_compacted(src, dest, pol)
    shutil.rmtree(src_path)
    shutil.rmtree(dest_path)


# -- unit tests --------------------------------------------------------------------------------


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """Three invocations over 30 saves (one deleted, one deleted and saved again), events."""
    path = tmp_path / "src"
    with CheckpointLog.open(path, durability="process") as cl:
        for step in range(30):
            inv = "abc"[step % 3]
            cl.save(inv, rec(inv, step))
            if step == 20:
                cl.delete("b")
        cl.delete("c")
        cl.save("c", rec("c", 99, corr="again"))
        cl.delete("a")
        cl.log.append("events", Event(name="e", data=1, at=T0))
    return path


def digest(path: Path) -> str:
    return hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()


@pytest.mark.parametrize("kw", [{}, {"keep": "heads"}, {"last_n": 3}, {"since": T0 + 25}], ids=str)
def test_source_is_never_modified_and_dest_verifies(
    source: Path, tmp_path: Path, kw: dict[str, Any]
) -> None:
    before = digest(source)
    dest = tmp_path / "dest"
    with CheckpointLog.open(source, readonly=True) as src:
        report = forensics.compact(src, dest, **kw)
        with CheckpointLog.open(dest, readonly=True) as out:
            assert_compacted(src, out, forensics.policy(**kw))
            assert [sf.frame for sf in out.log.read_stream("events")] == [
                Event(name="e", data=1, at=T0)
            ]
            if kw.get("keep") == "heads":
                assert "a" not in out.log.streams()  # deleted: nothing left to keep
    assert digest(source) == before
    assert report.frames_in == 30 + 4 + 1
    assert report.streams_in == 4


def test_first_frame_records_what_it_replaces(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with CheckpointLog.open(source, readonly=True) as src:
        forensics.compact(src, dest, last_n=2)
        orig = checksums(src, "b")
    with CheckpointLog.open(dest, readonly=True) as out:
        first = out.log.read_frame("b", 1)
        assert first is not None
        assert isinstance(first.frame, Snapshot)
        c = first.frame.compacted
        assert c is not None
        assert (c.seq, c.checksum) == (max(orig) - 1, orig[max(orig) - 1])
        assert c.compacted_at > T0


def test_compacted_log_takes_new_saves(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    with CheckpointLog.open(source, readonly=True) as src:
        forensics.compact(src, dest, keep="heads")
    with CheckpointLog.open(dest) as out:
        nxt = rec("b", 100)
        out.save("b", nxt)
        out.save("new", rec("new", 1))
        assert out.load("b") == nxt
        assert [e.seq for e in out.history("b")] == [1, 2]
        assert out.record_at("b", 1) is not None
        assert out.verify().ok


def test_refusals(source: Path, tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("mine")
    with CheckpointLog.open(source, readonly=True) as src:
        with pytest.raises(forensics.CompactionError, match=r"DEST .* exists and is not empty"):
            forensics.compact(src, busy)
        with pytest.raises(forensics.CompactionError, match=r"DEST is the source log"):
            forensics.compact(src, source)
        with pytest.raises(forensics.CompactionError, match=r"one of keep=, last_n= or since="):
            forensics.compact(src, tmp_path / "d1", keep="heads", last_n=2)
        with pytest.raises(forensics.CompactionError, match=r"last_n must be an int >= 1"):
            forensics.compact(src, tmp_path / "d2", last_n=0)
        with pytest.raises(forensics.CompactionError, match=r'keep must be "all" or "heads"'):
            forensics.compact(src, tmp_path / "d3", keep="everything")
    assert (busy / "x").read_text() == "mine"
    assert not (tmp_path / "d1").exists()


def test_damaged_source_is_refused_and_dest_removed(source: Path, tmp_path: Path) -> None:
    damage(source, lambda raw: raw.put_envelope("b", 3, flip(raw.envelope("b", 3), HEADER_BYTES)))
    dest = tmp_path / "dest"
    with (
        CheckpointLog.open(source, readonly=True) as src,
        pytest.raises(forensics.SourceDamaged, match=r"source log is damaged at log #\d+"),
    ):
        forensics.compact(src, dest)
    assert not dest.exists()


def test_compacting_a_compacted_log(source: Path, tmp_path: Path) -> None:
    once, twice = tmp_path / "once", tmp_path / "twice"
    with CheckpointLog.open(source, readonly=True) as src:
        forensics.compact(src, once, last_n=4)
        with CheckpointLog.open(once, readonly=True) as mid:
            forensics.compact(mid, twice, last_n=2)
            with CheckpointLog.open(twice, readonly=True) as out:
                assert out.verify().ok
                assert out.list() == src.list()
                assert [e.record for e in out.history("b")] == [
                    e.record for e in list(src.history("b"))[-2:]
                ]
                prov = forensics.provenance(out, "b")
                mid_sums = checksums(mid, "b")
                assert all(mid_sums[p.original_seq] == p.original_checksum for p in prov)


def test_frames_no_view_claims_are_refused(source: Path, tmp_path: Path) -> None:
    """LangGraph frames in a stream whose key is not a LangGraph key: no registered view
    claims them, so compaction could not rebuild their rows (LangGraph streams themselves are
    compacted: tests/test_views.py)."""
    from eventlog.frames import LgRemove  # noqa: PLC0415

    with CheckpointLog.open(source) as cl:
        cl.log.append("lg:thread", LgRemove(checkpoint_ids=None, reason="test", saved_at=T0))
    dest = tmp_path / "dest"
    with (
        CheckpointLog.open(source, readonly=True) as src,
        pytest.raises(
            forensics.CompactionError,
            match=r"stream 'lg:thread' holds lg_remove frames, which no registered view",
        ),
    ):
        forensics.compact(src, dest)
    assert not dest.exists()
    with CheckpointLog.open(source, readonly=True) as src:
        steps = list(forensics.walk(src.log, "lg:thread"))
        assert [(s.kind, s.frame_type, s.is_record) for s in steps] == [  # type: ignore[union-attr]
            ("lg_remove", "lg_remove", False)
        ]
        assert src.verify().ok


@pytest.mark.parametrize("keep", ["all", "heads"])
def test_an_event_after_the_last_save_keeps_the_invocation(tmp_path: Path, keep: str) -> None:
    """Regression: an application event appended after an invocation's last save made
    compaction drop the invocation (``heads``) or write a head row one seq off (``all``)."""
    with CheckpointLog.open(tmp_path / "src", durability="process") as src:
        for step in range(3):
            src.save("a", rec("a", step))
        src.log.append("a", Event(name="note", data=[1], at=T0 + 9))
        forensics.compact(src, tmp_path / "dest", keep=keep)
        with CheckpointLog.open(tmp_path / "dest") as dest:
            assert dest.load("a") == src.load("a")
            frames = [sf.frame for sf in dest.log.read_stream("a")]
            assert isinstance(frames[-1], Event)
            report = dest.verify()
            assert report.ok, str(report)
