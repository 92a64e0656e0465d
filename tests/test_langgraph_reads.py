"""What a LangGraph read costs, pinned without timing: the frames one read decodes.

``get_tuple`` (latest and by id) and each item of ``list`` must decode a number of frames
bounded by a constant, whatever the thread's length: delta chains are bounded (keyframes) and
``list`` reuses what it already read. Counted at the frame reader
(``read_frame``, where ``langgraph_blobs`` looks it up) on LMDB and on PostgreSQL, for a small
state (a growing list, appended) and a large one (a 64 KiB document edited a little each step,
patched).
"""

from __future__ import annotations

import gzip
import random
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import eventlog.integrations.langgraph_blobs as blobs
import eventlog.integrations.langgraph_reads as reads
import eventlog.integrations.langgraph_store as store
from eventlog import views
from eventlog.errors import CorruptFrame
from eventlog.frames import BLOB_APPEND, BLOB_FULL, LgBlob, LgCheckpoint
from eventlog.integrations.langgraph import CkptlogSaver, LmdbSaver

# A read decodes the checkpoint's frame, for each of its 2 channels at most the frame holding
# the blob and the keyframe it is a delta of, and the frame of the step's writes.
GET_FRAMES_MAX = 1 + 2 * 2 + 1
LIST_FRAMES_PER_ITEM_MAX = 3.0
SHORT, LONG = 12, 200
DOC_BYTES = 64 << 10


def conf(thread: str, cid: str | None = None) -> Any:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def ckpt(values: dict[str, Any], versions: dict[str, Any], step: int) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=step))
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def small_state() -> Callable[[int], dict[str, Any]]:
    items: list[Any] = []

    def state(i: int) -> dict[str, Any]:
        nonlocal items
        items = [*items, {"i": i, "text": f"message {i}"}]  # appended: same element objects
        return {"items": items, "n": i}

    return state


def large_state() -> Callable[[int], dict[str, Any]]:
    rng = random.Random(5)
    doc = "".join(rng.choice("abcdefgh \n") for _ in range(DOC_BYTES))

    def state(i: int) -> dict[str, Any]:
        nonlocal doc
        at = rng.randrange(DOC_BYTES - 40)
        doc = doc[:at] + f"edit {i:08d} " + doc[at + 14 :]  # a small edit of a 64 KiB value
        return {"doc": doc, "n": i}

    return state


STATES = {"small": small_state, "large": large_state}


def next_versions(
    saver: LmdbSaver, versions: dict[str, Any], values: dict[str, Any]
) -> dict[str, Any]:
    """Each channel of ``values`` at its next version (``versions`` updated): a put's
    ``new_versions``."""
    new = {}
    for ch in values:
        versions[ch] = saver.get_next_version(versions.get(ch), None)
        new[ch] = versions[ch]
    return new


def build(
    saver: LmdbSaver, thread: str, steps: int, state: Callable[[int], dict[str, Any]]
) -> tuple[list[str], dict[str, Any]]:
    """``steps`` checkpoints, every channel changed each step, one task's writes on each."""
    versions: dict[str, Any] = {}
    cfg = conf(thread)
    ids = []
    values: dict[str, Any] = {}
    for i in range(steps):
        values = state(i)
        new = next_versions(saver, versions, values)
        meta = {"source": "loop", "step": i, "parents": {}}
        cfg = saver.put(cfg, ckpt(values, dict(versions), i), meta, new)  # type: ignore[arg-type]
        saver.put_writes(cfg, [("n", i + 1)], f"task-{i}")
        ids.append(cfg["configurable"]["checkpoint_id"])
    return ids, values


def put_states(
    saver: LmdbSaver, thread: str, steps: int, state: Callable[[int], dict[str, Any]]
) -> tuple[list[str], list[dict[str, Any]]]:
    """``steps`` checkpoints, every channel changed each step, no writes: their ids and
    values."""
    versions: dict[str, Any] = {}
    cfg = conf(thread)
    ids, states = [], []
    for i in range(steps):
        values = state(i)
        new = next_versions(saver, versions, values)
        cfg = saver.put(cfg, ckpt(values, dict(versions), i), {"step": i}, new)  # type: ignore[arg-type]
        ids.append(cfg["configurable"]["checkpoint_id"])
        states.append(values)
    return ids, states


class Counter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = blobs.read_frame

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(blobs, "read_frame", counting)

    def __call__(self, read: Callable[[], Any]) -> tuple[int, Any]:
        self.n = 0
        out = read()
        return self.n, out


def check_reads(writer: LmdbSaver, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    count = Counter(monkeypatch)
    for steps in (SHORT, LONG):
        thread = f"{kind}-{steps}"
        ids, last = build(writer, thread, steps, STATES[kind]())
        saver = LmdbSaver(writer.log)  # a reader that kept nothing of the writes (cold)
        frames, tup = count(lambda: saver.get_tuple(conf(thread)))  # noqa: B023
        assert tup is not None
        assert tup.checkpoint["channel_values"] == last
        assert tup.pending_writes == [(f"task-{steps - 1}", "n", steps)]
        assert frames <= GET_FRAMES_MAX, f"get_tuple latest at {steps} steps: {frames} frames"
        for cid in (ids[0], ids[len(ids) // 2], ids[-2]):
            frames, tup = count(lambda: saver.get_tuple(conf(thread, cid)))  # noqa: B023
            assert tup is not None
            assert tup.config["configurable"]["checkpoint_id"] == cid
            assert frames <= GET_FRAMES_MAX, f"get_tuple by id at {steps} steps: {frames} frames"
        frames, page = count(lambda: list(saver.list(conf(thread), limit=20)))  # noqa: B023
        assert [t.config["configurable"]["checkpoint_id"] for t in page] == ids[::-1][:20]
        assert frames / len(page) <= LIST_FRAMES_PER_ITEM_MAX, f"list(limit=20): {frames}"
        frames, every = count(lambda: list(saver.list(conf(thread))))  # noqa: B023
        assert len(every) == steps
        assert every[0].checkpoint["channel_values"] == last
        assert frames / steps <= LIST_FRAMES_PER_ITEM_MAX, f"full list at {steps}: {frames}"


@pytest.fixture
def lmdb_saver(tmp_path: Path) -> Iterator[LmdbSaver]:
    with LmdbSaver.open(tmp_path / "lg", durability="process") as saver:
        yield saver


@pytest.mark.parametrize("kind", sorted(STATES))
def test_reads_decode_a_bounded_number_of_frames_on_lmdb(
    lmdb_saver: LmdbSaver, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    check_reads(lmdb_saver, monkeypatch, kind)
    assert lmdb_saver.verify().ok


@pytest.mark.parametrize("kind", sorted(STATES))
def test_reads_decode_a_bounded_number_of_frames_on_postgres(
    pg_schemas: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    with CkptlogSaver.open(pg_schemas.url(tmp_path / "pg"), durability="process") as saver:
        check_reads(saver, monkeypatch, kind)
        assert saver.verify().ok


def test_a_log_with_the_old_long_chains_reads_and_new_writes_start_a_keyframe(
    lmdb_saver: LmdbSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logs written before keyframes chain each append onto the previous version (up to 256
    links): they still read, and the next put of the thread stores a keyframe."""
    saver = lmdb_saver
    frames: list[tuple[int, Any]] = []
    items: list[int] = []
    parent = None
    for seq in range(1, 301):
        items.append(seq)
        cid = str(uuid6(clock_seq=seq))
        blob = (
            LgBlob("items", seq, BLOB_FULL, *saver.serde.dumps_typed([seq]))
            if seq == 1
            else LgBlob("items", seq, BLOB_APPEND, *saver.serde.dumps_typed([seq]), seq - 1)
        )
        body = {k: v for k, v in ckpt({}, {}, seq).items() if k != "channel_values"}
        body["id"] = cid
        frames.append(
            (
                seq,
                LgCheckpoint(
                    checkpoint_id=cid,
                    parent_id=parent,
                    checkpoint_type=saver.serde.dumps_typed(body)[0],
                    checkpoint=saver.serde.dumps_typed(body)[1],
                    versions={"items": seq},
                    metadata_type="msgpack",
                    metadata=saver.serde.dumps_typed({"step": seq})[1],
                    run_id=None,
                    blobs=(blob,),
                    saved_at=0.0,
                ),
            )
        )
        parent = cid
    saver.import_frames("old", "", frames)
    tup = saver.get_tuple(conf("old"))
    assert tup is not None
    assert tup.checkpoint["channel_values"]["items"] == items
    assert [len(t.checkpoint["channel_values"]["items"]) for t in saver.list(conf("old"))] == list(
        range(300, 0, -1)
    )
    count = Counter(monkeypatch)
    grown = [*items, 301]
    cfg = saver.put(
        tup.config, ckpt({"items": grown}, {"items": 301}, 301), {"step": 301}, {"items": 301}
    )
    frames_read, tup = count(lambda: saver.get_tuple(cfg))
    assert tup is not None
    assert tup.checkpoint["channel_values"]["items"] == grown
    assert frames_read <= GET_FRAMES_MAX
    assert saver.verify().ok


def test_the_saver_keeps_its_first_name() -> None:
    assert LmdbSaver is CkptlogSaver


FIXTURES = Path(__file__).parent / "fixtures"


def test_a_log_written_before_keyframes_reads_every_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/fixtures/lg-chain-log.mdb.gz was written by the code before keyframes (appends and
    patches chained onto the previous version, 80 links): every checkpoint reads as written,
    the views need no rebuild, and the next put starts a keyframe."""
    sys.path.insert(0, str(FIXTURES))
    try:
        from make_lg_chain_log import states  # noqa: PLC0415
    finally:
        sys.path.remove(str(FIXTURES))
    (tmp_path / "log").mkdir()
    with (
        gzip.open(FIXTURES / "lg-chain-log.mdb.gz", "rb") as src,
        (tmp_path / "log" / "data.mdb").open("wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    with LmdbSaver.open(tmp_path / "log", durability="process") as saver:
        assert saver.verify().ok
        want = list(states())
        got = [t.checkpoint["channel_values"] for t in saver.list(conf("old"))][::-1]
        assert got == want
        latest = saver.get_tuple(conf("old"))
        assert latest is not None
        assert latest.pending_writes == [(f"task-{len(want) - 1}", "n", len(want))]
        values = {**want[-1], "items": [*want[-1]["items"], {"i": -1}], "n": -1}
        versions = {
            ch: saver.get_next_version(v, None)
            for ch, v in latest.checkpoint["channel_versions"].items()
        }
        cfg = saver.put(latest.config, ckpt(values, versions, 999), {"step": 999}, versions)
        count = Counter(monkeypatch)
        frames, tup = count(lambda: LmdbSaver(saver.log).get_tuple(cfg))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == values
        assert frames <= GET_FRAMES_MAX
        assert saver.verify().ok


def test_a_small_state_reads_by_id_and_lists_from_its_read_rows_alone(
    lmdb_saver: LmdbSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state of values under INLINE_MAX, no writes: a read by id and a page of ``list``
    decode no frame at all (each checkpoint's read row holds its values), through a reader that
    kept nothing; ``rebuild`` writes the same read rows."""
    versions: dict[str, Any] = {}
    cfg = conf("t")
    ids, states = [], []
    for i in range(150):
        values = {"items": [f"item {j}" for j in range(i, i + 20)], "n": i, "same": "x"}
        new = {}
        for ch in values:
            if ch != "same" or ch not in versions:  # "same" is unchanged after its first put
                versions[ch] = lmdb_saver.get_next_version(versions.get(ch), None)
                new[ch] = versions[ch]
        cfg = lmdb_saver.put(cfg, ckpt(values, dict(versions), i), {"step": i}, new)  # type: ignore[arg-type]
        ids.append(cfg["configurable"]["checkpoint_id"])
        states.append(values)
    count = Counter(monkeypatch)
    saver = LmdbSaver(lmdb_saver.log)
    for i in (0, 75, 148):
        frames, tup = count(lambda: saver.get_tuple(conf("t", ids[i])))  # noqa: B023
        assert tup is not None
        assert tup.checkpoint["channel_values"] == states[i]
        assert frames == 0
    frames, page = count(lambda: list(saver.list(conf("t"), limit=20)))
    assert [t.checkpoint["channel_values"] for t in page] == states[::-1][:20]
    assert frames == 0
    frames, every = count(lambda: list(saver.list(conf("t"), before=conf("t", ids[100]))))
    assert [t.config["configurable"]["checkpoint_id"] for t in every] == ids[:100][::-1]
    assert frames == 0
    with saver.log.backend.read() as txn:
        before = list(txn.scan(store.READS))
    views.rebuild(saver.log)
    with saver.log.backend.read() as txn:
        assert list(txn.scan(store.READS)) == before
    assert saver.verify().ok


def test_a_patch_reads_its_keyframe_from_its_raw_row_not_its_frame(
    lmdb_saver: LmdbSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 64 KiB value edited each step: every keyframe after the first (it replaces a patch)
    gets an ``f`` row of its raw bytes, so a cold reader reads a patch against it by id
    decoding no frame (a page of ``list``: only the frame of the keyframe's own checkpoint);
    ``rebuild`` writes the same rows, ``verify`` finds a changed one, deleting the thread
    removes them."""
    steps = 2 * store.PATCH_KEYFRAME_EVERY + 20
    ids, states = put_states(lmdb_saver, "t", steps, large_state())

    def f_rows() -> list[tuple[bytes, bytes]]:
        with lmdb_saver.log.backend.read() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.scan(store.LATEST) if k[:1] == b"f"]

    rows = f_rows()
    assert len(rows) == 2  # the keyframes at steps 65 and 130 (the first one replaced none)
    count = Counter(monkeypatch)
    saver = LmdbSaver(lmdb_saver.log)  # kept nothing of the writes (cold)
    for i in (store.PATCH_KEYFRAME_EVERY + 3, steps - 2):
        frames, tup = count(lambda: saver.get_tuple(conf("t", ids[i])))  # noqa: B023
        assert tup is not None
        assert tup.checkpoint["channel_values"] == states[i]
        assert frames == 0, f"get_tuple by id of step {i}: {frames} frames"
    frames, page = count(lambda: list(LmdbSaver(lmdb_saver.log).list(conf("t"), limit=20)))
    assert [t.checkpoint["channel_values"] for t in page] == states[::-1][:20]
    assert frames == 1  # the keyframe's own checkpoint (step 130) reads its value from its frame
    views.rebuild(lmdb_saver.log)
    assert f_rows() == rows
    assert lmdb_saver.verify().ok
    key, raw = rows[0]
    with lmdb_saver.log.backend.write() as txn:
        txn.put(store.LATEST, key, raw[:-1] + b"?")
    problems = lmdb_saver.verify().problems
    assert any("keyframe rows differ" in p.detail for p in problems), problems
    lmdb_saver.delete_thread("t")
    assert f_rows() == []
    assert lmdb_saver.verify().ok


@pytest.mark.parametrize("n", [0, 1, 5000, (128 << 10) - 1, 128 << 10, (300 << 10) + 7])
def test_a_patch_applies_to_its_base_in_place_alike_from_bytes_and_views(n: int) -> None:
    """A patch applies to its keyframe's bytes and to a view of them (an ``f`` row as read),
    again and again on the thread's one decoder, and in another thread; a patch that does not
    apply (truncated, not zstd, or larger than the frame limit) is a CorruptFrame."""
    rng = random.Random(n)
    base = bytes(rng.randrange(256) for _ in range(n))
    new = bytearray(base + b"tail")
    for i in range(0, n, 4096):
        new[i : i + 3] = b"xyz"
    patch = blobs.make_patch(base, bytes(new))
    patches = blobs.Patches(1 << 30)
    key = (1, 2, "doc")
    row = memoryview(b"\x00\x07msgpack" + base)[9:]
    assert patches.apply(key, base, patch) == new
    assert patches.apply(key, row, patch) == new
    assert patches.apply(key, base, patch) == new
    got: list[bytes] = []
    worker = threading.Thread(target=lambda: got.append(patches.apply(key, row, patch)))
    worker.start()
    worker.join()
    assert got == [new]
    with pytest.raises(CorruptFrame):
        blobs.Patches(len(new) - 1).apply(key, base, patch)  # over the frame limit
    with pytest.raises(CorruptFrame):
        blobs.Patches(1 << 30).apply(key, base, patch[:-3])  # truncated
    with pytest.raises(CorruptFrame):
        blobs.Patches(1 << 30).apply(key, base, b"not a zstd frame")


def test_patched_values_read_by_id_stay_whole_after_later_reads(tmp_path: Path) -> None:
    """A patched msgpack value is decoded from the patch's scratch buffer (LangGraph's serde
    copies what it builds); a patched ``bytes`` value (the serde returns the bytes it is
    given) and every value under a serde of another class get their own copy. So what one
    read by id returned is unchanged by the reads after it, which reuse that buffer."""

    class OwnSerde(JsonPlusSerializer):  # another class: no scratch decoding
        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            return super().loads_typed(data)

    rng = random.Random(9)
    doc = "".join(rng.choice("abcdefgh \n") for _ in range(DOC_BYTES))
    raw = bytes(rng.randrange(256) for _ in range(DOC_BYTES))
    for serde in (None, OwnSerde()):
        with LmdbSaver.open(tmp_path / f"lg-{serde is None}", durability="process") as saver:
            if serde is not None:
                saver.serde = serde
            cfg, versions, ids, states = conf("t"), {"doc": 0, "raw": 0}, [], []
            for i in range(40):
                at = rng.randrange(DOC_BYTES - 40)
                doc = doc[:at] + f"edit {i:08d} " + doc[at + 14 :]
                raw = raw[:at] + i.to_bytes(4, "big") + raw[at + 4 :]
                versions = {ch: v + 1 for ch, v in versions.items()}
                values = {"doc": doc, "raw": raw}
                cfg = saver.put(cfg, ckpt(values, dict(versions), i), {"step": i}, versions)  # type: ignore[arg-type]
                ids.append(cfg["configurable"]["checkpoint_id"])
                states.append(values)
            reader = LmdbSaver(saver.log)  # nothing kept: every value is patched on read
            if serde is not None:
                reader.serde = serde
            got = [reader.get_tuple(conf("t", ids[i])) for i in range(5, 40, 3)]
            for i, tup in zip(range(5, 40, 3), got, strict=True):
                assert tup is not None
                assert tup.checkpoint["channel_values"] == states[i]
                assert type(tup.checkpoint["channel_values"]["raw"]) is bytes


def test_checkpoints_stored_before_read_rows_replaced_their_rows_read_alike(
    lmdb_saver: LmdbSaver,
) -> None:
    """A put stores a checkpoint's read row only. A log may also hold checkpoints with an
    ``lg_checkpoints`` row only (stored before read rows) or with both rows (stored before the
    read row replaced the other): all of them read, list (in id order, merged), filter,
    verify, are removed and stored again alike, and ``rebuild`` leaves read rows only."""
    saver = lmdb_saver
    ids, _ = build(saver, "t", 9, small_state())
    build(saver, "u", 3, small_state())
    want = {t.config["configurable"]["checkpoint_id"]: t for t in saver.list(conf("t"))}
    sid = saver.log._ids[store.stream_key("t", "")]
    with saver.log.backend.write() as txn:
        assert not list(txn.scan(store.CHECKPOINTS))
        for i, cid in enumerate(ids[:6]):
            key = store.checkpoint_key(sid, cid)
            raw = txn.get(store.READS, key)
            assert raw is not None
            txn.put(store.CHECKPOINTS, key, msgspec.msgpack.encode(store.row_of_read(raw)))
            if i < 3:  # the oldest three: as stored before read rows existed
                txn.delete(store.READS, key)
    assert saver.verify().ok

    def same(got: Any, cid: str) -> None:
        assert got is not None
        assert got.config == want[cid].config
        assert got.checkpoint == want[cid].checkpoint
        assert got.metadata == want[cid].metadata
        assert got.parent_config == want[cid].parent_config
        assert got.pending_writes == want[cid].pending_writes

    listed = list(saver.list(conf("t")))
    assert [t.config["configurable"]["checkpoint_id"] for t in listed] == ids[::-1]
    for t in listed:
        same(t, t.config["configurable"]["checkpoint_id"])
    for cid in ids:
        same(saver.get_tuple(conf("t", cid)), cid)
    page = list(saver.list(conf("t"), before=conf("t", ids[5]), limit=4))
    assert [t.config["configurable"]["checkpoint_id"] for t in page] == ids[4:0:-1]
    assert [t.metadata["step"] for t in saver.list(conf("t"), filter={"step": 2})] == [2]
    assert len(list(saver.list(None))) == 12  # every thread: merged by id
    with saver.log.backend.write() as txn:  # the newest rows gone: latest reads the views
        store.drop_latest(txn, store.thread_key("t", ""))
    same(saver.get_tuple(conf("t")), ids[-1])
    history = saver.get_delta_channel_history(config=conf("t", ids[4]), channels=["n"])
    assert history["n"] == {"writes": [("task-3", "n", 4)], "seed": 3}  # its parent's
    # Stored again (an old checkpoint's id): its read row replaces its lg_checkpoints row.
    t2 = want[ids[1]]
    saver.put(
        conf("t", ids[0]), t2.checkpoint, t2.metadata, dict(t2.checkpoint["channel_versions"])
    )
    with saver.log.backend.read() as txn:
        key = store.checkpoint_key(sid, ids[1])
        assert txn.get(store.CHECKPOINTS, key) is None
        assert txn.get(store.READS, key) is not None
    assert saver.verify().ok
    saver.delete_for_runs([])  # no run: nothing removed
    saver.prune(["t"], strategy="keep_latest")
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(conf("t"))] == [ids[-1]]
    assert saver.verify().ok
    views.rebuild(saver.log)
    with saver.log.backend.read() as txn:
        assert not list(txn.scan(store.CHECKPOINTS))
    assert saver.verify().ok
    same(saver.get_tuple(conf("t")), ids[-1])
    saver.delete_thread("t")
    assert saver.get_tuple(conf("t")) is None
    assert saver.verify().ok


def check_keyframe_rows(writer: LmdbSaver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold reader applies a patch to its keyframe's ``f`` row as read; a local row (LMDB) is
    not kept (the next patch against it reads the row again, and no frame), a remote one
    (PostgreSQL: a round trip) is; a keyframe without an ``f`` row (the thread's first) is read
    from its frame once and kept as bytes, so the next patch against it reads nothing; the
    keyframes' own checkpoints and a page of ``list`` read alike."""
    ids, states = put_states(writer, "t", store.PATCH_KEYFRAME_EVERY + 20, large_state())
    f_reads = []
    real = blobs.read_keyframe

    def counting(*args: Any) -> Any:
        row = real(*args)
        if row is not None:
            f_reads.append(args[2])
        return row

    monkeypatch.setattr(blobs, "read_keyframe", counting)
    real_now = reads.read_keyframes_now

    def counting_now(backend: Any, sid: int, want: list[tuple[int, str]]) -> Any:
        rows = real_now(backend, sid, want)
        f_reads.extend(seq for (seq, _), row in zip(want, rows, strict=True) if row is not None)
        return rows

    monkeypatch.setattr(reads, "read_keyframes_now", counting_now)  # by id on a server
    count = Counter(monkeypatch)
    saver = LmdbSaver(writer.log)  # kept nothing of the writes (cold)
    remote = writer.log.backend.remote
    second = store.PATCH_KEYFRAME_EVERY + 1  # the second keyframe (it has an f row)
    expected = [
        (second + 2, 0, 1),  # its f row read, applied in place
        (second + 9, 0, 0 if remote else 1),  # local: read again (cheaper than keeping it)
        (3, 1, 0),  # the first keyframe has no f row: its frame read, its bytes kept
        (7, 0, 0),  # kept: no row, no frame
    ]
    for step, frames_read, rows_read in expected:
        f_reads.clear()
        frames, tup = count(lambda: saver.get_tuple(conf("t", ids[step])))  # noqa: B023
        assert tup is not None
        assert tup.checkpoint["channel_values"] == states[step]
        assert (frames, len(f_reads)) == (frames_read, rows_read), step
    assert len(saver._patches._full) == (2 if remote else 1)  # the keyframes kept
    for step in (second, 0):  # the keyframes' own checkpoints
        tup = saver.get_tuple(conf("t", ids[step]))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == states[step]
    page = list(saver.list(conf("t"), limit=30))
    assert [t.checkpoint["channel_values"] for t in page] == states[::-1][:30]
    assert writer.verify().ok


def test_a_patch_reads_its_keyframe_row_in_place_and_a_keyframe_from_a_frame_is_kept(
    lmdb_saver: LmdbSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_keyframe_rows(lmdb_saver, monkeypatch)


def test_a_keyframe_row_read_over_a_round_trip_is_kept_on_postgres(
    pg_schemas: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with CkptlogSaver.open(pg_schemas.url(tmp_path / "pg"), durability="process") as saver:
        check_keyframe_rows(saver, monkeypatch)


def test_a_read_by_id_on_postgres_is_one_statement_when_nothing_needs_a_frame(
    pg_schemas: Any, tmp_path: Path, pg_statements: list[str]
) -> None:
    """``get_tuple(checkpoint_id)`` on PostgreSQL reads the stream id, the read row and the
    write rows in one statement (``read_named``), with no transaction around it; a keyframe
    row the saver did not keep is read by one more statement, outside a transaction too, and
    kept; a read transaction follows only for what needs a frame (writes); an unknown thread
    or checkpoint reads nothing."""
    with CkptlogSaver.open(pg_schemas.url(tmp_path / "pg"), durability="process") as writer:
        ids, states = put_states(writer, "p", store.PATCH_KEYFRAME_EVERY + 20, large_state())
        wids, last = build(writer, "w", 3, small_state())
        saver = CkptlogSaver(writer.log)  # kept nothing of the writes (cold)
        second = store.PATCH_KEYFRAME_EVERY + 1  # the second keyframe (it has an f row)
        statements = pg_statements
        for step, n in ((second + 2, 2), (second + 5, 1), (second + 9, 1)):
            statements.clear()
            tup = saver.get_tuple(conf("p", ids[step]))
            assert tup is not None
            assert tup.checkpoint["channel_values"] == states[step]
            assert len(statements) == n, (step, statements)  # named, then its f row
            assert statements[0].startswith("WITH p AS")  # the stream, read and write rows
            assert "BEGIN" not in statements
        statements.clear()
        tup = saver.get_tuple(conf("w", wids[-1]))  # writes: their frames in a transaction
        assert tup is not None
        assert tup.checkpoint["channel_values"] == last
        assert [w[2] for w in tup.pending_writes] == [3]
        assert statements[0].startswith("WITH p AS")
        assert statements[1] == "BEGIN"
        statements.clear()
        assert saver.get_tuple(conf("nobody", ids[0])) is None
        assert len(statements) == 1
        assert statements[0].startswith("WITH p AS")
        assert saver.get_tuple(conf("p", wids[0])) is None  # another thread's id
        assert saver.verify().ok


def test_kept_bytes_stay_within_their_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Patches`` keeps bytes least recently used out, within ``RESOLVED_BYTES_MAX``; a
    value over an eighth of it is not kept; a touch-free lookup does not refresh an entry."""
    monkeypatch.setattr(blobs, "RESOLVED_BYTES_MAX", 1 << 20)
    rng = random.Random(3)
    patches = blobs.Patches(1 << 30)
    for seq in range(1, 80):
        base = rng.randbytes(20_000)
        patches.keep((1, seq, "doc"), ("msgpack", base))
        assert patches.known((1, seq, "doc")) == ("msgpack", base)
        assert patches._full_bytes == sum(len(v) for _, v in patches._full.values()) <= 1 << 20
    assert len(patches._full) == (1 << 20) // 20_000
    patches.keep((1, 999, "big"), ("msgpack", bytes((1 << 17) + 1)))
    assert patches.known((1, 999, "big")) is None
    oldest = next(iter(patches._full))
    assert patches.known(oldest, touch=False) is not None
    patches.keep((1, 1000, "doc"), ("msgpack", bytes(20_000)))
    assert patches.known(oldest) is None  # not refreshed by the scan: dropped first
