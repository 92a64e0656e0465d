"""The ``lg_latest`` rows: ``get_tuple`` latest reads one row (two on a fallback), no frame.

The rows are a materialized view like the others: written in the put's transaction, kept by
``put_writes``, dropped by removals (readers then fall back to the other tables), rebuilt by
``rebuild`` and checked by ``verify``. Every test compares what ``get_tuple`` latest returns
with the same checkpoint read by id (a path that never reads ``lg_latest``).
"""

from __future__ import annotations

import gzip
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import eventlog.integrations.langgraph_blobs as blobs
import eventlog.integrations.langgraph_store as store
from eventlog import views
from eventlog.integrations.langgraph import CkptlogSaver

DOC_BYTES = 64 << 10
FIXTURES = Path(__file__).parent / "fixtures"


def conf(thread: str, cid: str | None = None) -> Any:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def ckpt(values: dict[str, Any], versions: dict[str, Any], cid: str) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = cid
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def small_state() -> Callable[[int], dict[str, Any]]:
    items: list[Any] = []

    def state(i: int) -> dict[str, Any]:
        nonlocal items
        items = [*items, {"i": i, "text": f"message {i}"}]
        return {"items": items, "n": i}

    return state


def large_state() -> Callable[[int], dict[str, Any]]:
    rng = random.Random(7)
    doc = "".join(rng.choice("abcdefgh \n") for _ in range(DOC_BYTES))

    def state(i: int) -> dict[str, Any]:
        nonlocal doc
        at = rng.randrange(DOC_BYTES - 40)
        doc = doc[:at] + f"edit {i:08d} " + doc[at + 14 :]
        return {"doc": doc, "n": i}

    return state


STATES = {"small": small_state, "large": large_state}


class Thread:
    """Puts through the saver as LangGraph does (every channel changed each step)."""

    def __init__(self, saver: CkptlogSaver, thread: str, state: Callable[[int], Any]) -> None:
        self.saver, self.thread, self.state = saver, thread, state
        self.versions: dict[str, Any] = {}
        self.cfg: Any = conf(thread)
        self.step = 0
        self.last: dict[str, Any] = {}

    def put(self, cid: str | None = None, channels: set[str] | None = None) -> Any:
        values = self.last = self.state(self.step)
        new = {}
        for ch in values:
            if channels is None or ch in channels or ch not in self.versions:
                self.versions[ch] = self.saver.get_next_version(self.versions.get(ch), None)
                new[ch] = self.versions[ch]
        cid = cid or str(uuid6(clock_seq=self.step))
        meta = {"source": "loop", "step": self.step, "parents": {}}
        cp = ckpt(values, dict(self.versions), cid)
        self.cfg = self.saver.put(self.cfg, cp, meta, new)  # type: ignore[arg-type]
        self.step += 1
        return self.cfg


def frames_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = blobs.read_frame

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(blobs, "read_frame", counting)  # as BlobReader looks it up
    return seen


def same_as_by_id(saver: CkptlogSaver, thread: str) -> None:
    """``get_tuple`` latest equals the newest checkpoint read by id (no lg_latest there)."""
    newest = next(iter(saver.list(conf(thread), limit=1)), None)
    got = saver.get_tuple(conf(thread))
    if newest is None:
        assert got is None
        return
    want = saver.get_tuple(newest.config)
    assert got is not None
    assert want is not None
    assert got.config == want.config
    assert got.checkpoint == want.checkpoint
    assert got.metadata == want.metadata
    assert got.parent_config == want.parent_config
    assert got.pending_writes == want.pending_writes


def latest_rows(saver: CkptlogSaver) -> list[tuple[bytes, bytes]]:
    with saver.log.backend.read() as txn:
        return list(txn.scan(store.LATEST))


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[CkptlogSaver]:
    with CkptlogSaver.open(tmp_path / "lg", durability="process") as s:
        yield s


def check_no_frame(writer: CkptlogSaver, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    t = Thread(writer, kind, STATES[kind]())
    for i in range(40):
        cfg = t.put()
        writer.put_writes(cfg, [("n", i), ("__interrupt__", "stop")], f"task-{i}")
    reader = CkptlogSaver(writer.log)  # kept nothing: a new process
    seen = frames_read(monkeypatch)
    tup = reader.get_tuple(conf(kind))
    assert seen == [], f"get_tuple latest read frames {seen}"
    assert tup is not None
    assert tup.pending_writes == [("task-39", "__interrupt__", "stop"), ("task-39", "n", 39)]
    assert tup.checkpoint["channel_values"] == t.last
    same_as_by_id(reader, kind)


@pytest.mark.parametrize("kind", sorted(STATES))
def test_get_tuple_latest_decodes_no_frame_on_lmdb(
    saver: CkptlogSaver, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    check_no_frame(saver, monkeypatch, kind)
    assert saver.verify().ok


@pytest.mark.parametrize("kind", sorted(STATES))
def test_get_tuple_latest_decodes_no_frame_on_postgres(
    pg_schemas: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_statements: list[str],
    kind: str,
) -> None:
    with CkptlogSaver.open(pg_schemas.url(tmp_path / "pg"), durability="process") as s:
        check_no_frame(s, monkeypatch, kind)
        assert s.verify().ok
        pg_statements.clear()
        tup = CkptlogSaver(s.log).get_tuple(conf(kind))
        assert tup is not None
        assert len(pg_statements) == 1, f"get_tuple latest: one round trip, not {pg_statements}"


@pytest.mark.parametrize("kind", sorted(STATES))
def test_the_latest_rows_follow_every_change(saver: CkptlogSaver, kind: str) -> None:
    """Random puts (new, older ids, re-puts, some channels only), writes, prunes, copies and
    deletes: after each, get_tuple latest equals the newest checkpoint read by id, verify is
    clean, and rebuild writes the same rows (or leaves one absent: readers fall back)."""
    rng = random.Random(27)
    t = Thread(saver, "t", STATES[kind]())
    early = [str(uuid6(clock_seq=i)) for i in range(40)]  # ids older than any put below
    for step in range(120):
        op = rng.random()
        if op < 0.45 or t.step == 0:
            t.put(channels={"n"} if rng.random() < 0.3 else None)
        elif op < 0.55:
            t.put(cid=early.pop())  # an older id: the newest checkpoint stays
        elif op < 0.62:
            latest = saver.get_tuple(conf("t"))
            assert latest is not None
            t.put(cid=latest.config["configurable"]["checkpoint_id"])  # a re-put
        elif op < 0.82:
            target = saver.get_tuple(conf("t"))
            assert target is not None
            saver.put_writes(
                target.config, [("n", step), ("__error__", f"e{step}")], f"task-{step % 3}"
            )
        elif op < 0.88:
            saver.prune(["t"], strategy="keep_latest")
        elif op < 0.94:
            saver.copy_thread("t", "copy")
            same_as_by_id(saver, "copy")
        else:
            saver.delete_thread("copy")
            assert saver.get_tuple(conf("copy")) is None
        same_as_by_id(saver, "t")
        if step % 20 == 19:
            assert saver.verify().ok, str(saver.verify())
            before = dict(latest_rows(saver))
            views.rebuild(saver.log)  # it reads no frame: a row it cannot take from the
            after = dict(latest_rows(saver))  # frames in order stays absent
            assert {k: before[k] for k in after} == after
            assert saver.verify().ok
            same_as_by_id(saver, "t")
            same_as_by_id(saver, "copy")
    saver.prune(["t"], strategy="keep_latest")
    assert latest_rows(saver), "a prune that keeps the newest checkpoint keeps its rows"
    t.put()
    same_as_by_id(saver, "t")
    saver.delete_thread("t")
    assert saver.get_tuple(conf("t")) is None
    same_as_by_id(saver, "copy")
    assert saver.verify().ok


def growing_state() -> Callable[[int], dict[str, Any]]:
    """A list that grows by a 300-byte message a step: its value outgrows ``INLINE_MAX``
    within a few steps and keeps growing (a chat thread's messages)."""
    rng = random.Random(11)
    items: list[Any] = []

    def state(i: int) -> dict[str, Any]:
        nonlocal items
        text = "".join(rng.choice("abcdefgh ") for _ in range(300))
        items = [*items, {"i": i, "text": text}]
        return {"items": items, "n": i}

    return state


def check_no_large_rewrite(saver: CkptlogSaver, kind: str, puts: int) -> dict[bytes, bytes]:
    """Puts ``puts`` checkpoints; after each, every ``lg_latest`` row that changed value is
    small (under ``2 * INLINE_MAX``: the ``c``, ``w`` and ``k`` rows), no data row changed
    (one may be deleted) and the data rows are those the ``k`` row names; ``get_tuple``
    latest equals the read by id. Returns the last rows."""
    t = Thread(saver, "t", {"large": large_state, "growing": growing_state}[kind]())
    tkey = store.thread_key("t", "")
    before: dict[bytes, bytes] = {}
    for _ in range(puts):
        t.put()
        rows = dict(latest_rows(saver))
        for key, value in before.items():
            if rows.get(key) == value:
                continue
            if key[:1] == b"d":
                assert key not in rows, "a data row changed"  # (deleted once, when unlinked)
                continue
            assert len(value) < 2 * store.INLINE_MAX, f"a {len(value)}-byte row was rewritten"
            assert len(rows.get(key, b"")) < 2 * store.INLINE_MAX
        assert len(rows[store.latest_key(tkey)]) < 2 * store.INLINE_MAX
        link_row = rows.get(store.latest_blobs_key(tkey), b"")
        assert len(link_row) < 2 * store.INLINE_MAX
        named = {b"d" + link_row[i : i + 24] for i in range(1, len(link_row), 24)}
        assert {k for k in rows if k[:1] == b"d"} == named
        before = rows
    same_as_by_id(saver, "t")
    tup = CkptlogSaver(saver.log).get_tuple(conf("t"))  # a reader that kept nothing
    assert tup is not None
    assert tup.checkpoint["channel_values"] == t.last
    assert saver.verify().ok
    return before


@pytest.mark.parametrize("kind", ["large", "growing"])
def test_no_put_rewrites_a_large_latest_row(saver: CkptlogSaver, kind: str) -> None:
    """Issue #27's storage regression: the data of the newest checkpoint's large links (a
    64 KiB keyframe, a growing list's keyframe and delta) is in data rows written once; a put
    rewrites only the small ``c``, ``w`` and ``k`` rows. (A row rewritten with the growing
    value left a dead TOAST copy on PostgreSQL at every put.)"""
    puts = 3 * store.KEYFRAME_EVERY
    rows = check_no_large_rewrite(saver, kind, puts)
    data = [v for k, v in rows.items() if k[:1] == b"d"]
    assert data, "the large links' data is in data rows"
    assert len(data) <= 2  # the keyframe's, and a delta's over INLINE_MAX


def test_no_put_rewrites_a_large_latest_row_on_postgres(pg_schemas: Any, tmp_path: Path) -> None:
    with CkptlogSaver.open(pg_schemas.url(tmp_path / "pg"), durability="process") as s:
        check_no_large_rewrite(s, "growing", 2 * store.KEYFRAME_EVERY)


def test_verify_reports_a_data_row_the_link_row_does_not_name(saver: CkptlogSaver) -> None:
    t = Thread(saver, "t", growing_state())
    for _ in range(8):
        t.put()
    assert saver.verify().ok
    rows = dict(latest_rows(saver))
    raw_c = rows[store.latest_key(store.thread_key("t", ""))]
    sid = msgspec.msgpack.decode(raw_c, type=store.LatestRow).sid
    stray = store.link_key(sid, 1, "items")
    assert stray not in rows

    def tamper(txn: Any) -> None:
        txn.put(store.LATEST, stray, b"\x00\x05items\x00junk")

    saver.log.backend.run_write(tamper)
    report = saver.verify()
    assert not report.ok
    assert any("data rows its link row does not name" in p.detail for p in report.problems)
    views.rebuild(saver.log)
    assert saver.verify().ok
    assert stray not in dict(latest_rows(saver))


def test_a_latest_row_from_before_data_rows_falls_back_and_moves(saver: CkptlogSaver) -> None:
    """A ``k`` row written before data rows held the links' data itself: readers read it as
    naming no data row (so they fall back), and the next put moves what it carries over
    into data rows."""
    t = Thread(saver, "t", large_state())
    for _ in range(3):
        t.put()
    tkey = store.thread_key("t", "")
    got = store.read_latest(saver.log.backend, tkey)
    assert got is not None
    lr = got[0]
    links = {(s, b.channel): b.data for _, chain in lr.values for s, b in chain}
    raw_c = dict(latest_rows(saver))[store.latest_key(tkey)]
    apart = msgspec.msgpack.decode(raw_c, type=store.LatestRow).apart
    assert apart
    old_k = msgspec.msgpack.encode(
        store.LatestBlobs(tuple((s, ch, links[s, ch]) for s, ch in apart))
    )

    def as_before(txn: Any) -> None:
        txn.delete_prefix(store.LATEST, store.LINK_PREFIX)
        txn.put(store.LATEST, store.latest_blobs_key(tkey), old_k)

    saver.log.backend.run_write(as_before)
    assert store.read_latest(saver.log.backend, tkey) is None  # readers fall back
    reader = CkptlogSaver(saver.log)
    tup = reader.get_tuple(conf("t"))
    assert tup is not None
    assert tup.checkpoint["channel_values"] == t.last
    t.put(channels={"n"})  # the doc's chain is carried over: its data from the old k row
    rows = dict(latest_rows(saver))
    assert rows[store.latest_blobs_key(tkey)][:1] == b"\x00"
    assert any(k[:1] == b"d" for k in rows)
    assert store.read_latest(saver.log.backend, tkey) is not None
    same_as_by_id(CkptlogSaver(saver.log), "t")
    assert saver.verify().ok


def test_verify_reports_a_wrong_latest_row_and_rebuild_repairs_it(saver: CkptlogSaver) -> None:
    t = Thread(saver, "t", small_state())
    for _ in range(5):
        t.put()
    key, raw = latest_rows(saver)[0]
    row = msgspec.msgpack.decode(raw, type=store.LatestRow)
    wrong = msgspec.structs.replace(row, values=())

    def tamper(txn: Any) -> None:
        txn.put(store.LATEST, key, msgspec.msgpack.encode(wrong))

    saver.log.backend.run_write(tamper)
    report = saver.verify()
    assert not report.ok
    assert any("lg_latest" in p.detail for p in report.problems), str(report)
    views.rebuild(saver.log)
    assert saver.verify().ok
    same_as_by_id(saver, "t")
    assert latest_rows(saver)[0] == (key, raw)


def test_a_log_without_latest_rows_falls_back_and_its_next_put_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log written before keyframes (tests/fixtures/lg-chain-log.mdb.gz) has no lg_latest
    table: get_tuple latest reads the other tables; the next put writes the rows, reading the
    unchanged channel's old chain through the blob index."""
    (tmp_path / "log").mkdir()
    with (
        gzip.open(FIXTURES / "lg-chain-log.mdb.gz", "rb") as src,
        (tmp_path / "log" / "data.mdb").open("wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    with CkptlogSaver.open(tmp_path / "log", durability="process") as saver:
        assert latest_rows(saver) == []
        latest = saver.get_tuple(conf("old"))
        assert latest is not None
        same_as_by_id(saver, "old")
        values = dict(latest.checkpoint["channel_values"])
        values["n"] = -1
        versions = dict(latest.checkpoint["channel_versions"])
        versions["n"] = saver.get_next_version(versions["n"], None)  # "items" is unchanged
        cid = str(uuid6(clock_seq=999))
        saver.put(latest.config, ckpt(values, versions, cid), {"step": 999}, {"n": versions["n"]})
        kinds = {key[:1] for key, _ in latest_rows(saver)}
        assert {b"c", b"w"} <= kinds <= {b"c", b"w", b"k", b"d"}  # k, d: its large links
        seen = frames_read(monkeypatch)
        tup = CkptlogSaver(saver.log).get_tuple(conf("old"))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == values
        assert seen == []
        same_as_by_id(saver, "old")
        assert saver.verify().ok


def linked_reads(monkeypatch: pytest.MonkeyPatch, saver: CkptlogSaver) -> list[tuple[int, int]]:
    """``(data rows skipped, data rows returned)`` of each latest read's one statement."""
    seen: list[tuple[int, int]] = []
    backend = saver.log.backend
    real = type(backend).get_many_linked_now

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        got = real(self, *args, **kwargs)
        skip = kwargs.get("skip", args[5] if len(args) > 5 else ())
        seen.append((len(skip), len(got[1])))
        return got

    monkeypatch.setattr(type(backend), "get_many_linked_now", spy)
    return seen


def check_skipped_data_rows(saver: CkptlogSaver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A latest read leaves out the data rows of the links whose values the saver keeps (the
    keyframe under a kept head: the last read's, or the put's); when the head is no longer
    kept it reads again without skipping, and every read returns the newest values."""
    t = Thread(saver, "big", large_state())
    for _ in range(3):
        t.put()
    seen = linked_reads(monkeypatch, saver)

    def newest() -> Any:
        tup = saver.get_tuple(conf("big"))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == t.last
        return tup

    newest()
    assert seen[-1][0] == 0  # nothing remembered yet for this thread
    newest()
    assert seen[-1][0] >= 1, f"the second read skipped no data row: {seen}"
    assert seen[-1][1] == 0, f"the second read fetched data rows it holds: {seen}"
    for _ in range(40):  # across keyframes: a put keeps its head, the read skips under it
        t.put()
        newest()
        assert len(seen) == 3 or seen[-1][1] <= 1
    skipping = sum(1 for s, _ in seen if s)
    assert skipping >= 35, f"only {skipping} of {len(seen)} reads skipped: {seen}"
    saver._patches = blobs.Patches(saver.log.frame_bytes_max)  # the kept values evicted
    seen.clear()
    newest()
    assert [s > 0 for s, _ in seen] == [True, False], f"no second statement: {seen}"
    assert seen[-1][1] >= 1
    same_as_by_id(saver, "big")
    assert saver.verify().ok


def test_a_latest_read_skips_the_data_rows_its_kept_values_cover(
    saver: CkptlogSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_skipped_data_rows(saver, monkeypatch)


def test_a_latest_read_skips_the_data_rows_its_kept_values_cover_on_postgres(
    pg_schemas: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with CkptlogSaver.open(pg_schemas.url(tmp_path / "pg"), durability="process") as s:
        check_skipped_data_rows(s, monkeypatch)
