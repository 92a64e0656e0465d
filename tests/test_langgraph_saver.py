"""LmdbSaver's own behaviour: delta blobs, serde at call time, logged removals, compaction,
errors, list semantics, group commit, and a seeded random run against InMemorySaver."""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from eventlog.errors import CorruptFrame, LogClosed
from eventlog.frames import BLOB_APPEND, BLOB_EMPTY, BLOB_FULL, BLOB_PATCH, LgCheckpoint, LgRemove
from eventlog.integrations.langgraph import (
    InvalidCheckpoint,
    InvalidConfig,
    InvalidPruneStrategy,
    LmdbSaver,
)
from eventlog.integrations.langgraph_store import (
    CHECKPOINTS,
    KEYFRAME_EVERY,
    READS,
    checkpoint_key,
    parse_stream_key,
    row_of_read,
    stream_key,
)
from projections.langgraph import compaction_plan

SEEDS = [1, 2, 3]


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[LmdbSaver]:
    s = LmdbSaver.open(tmp_path / "lg", durability="process")
    yield s
    s.close()


def conf(thread: str, ns: str = "", cid: str | None = None) -> Any:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid is not None:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def ckpt(values: dict[str, Any], versions: dict[str, Any], step: int = 0) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=step))
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


class Thread:
    """Puts checkpoints on one thread the way Pregel does: each a child of the last."""

    def __init__(self, saver: Any, thread: str, ns: str = "") -> None:
        self.saver, self.thread, self.ns = saver, thread, ns
        self.versions: dict[str, Any] = {}
        self.values: dict[str, Any] = {}
        self.last: Any = conf(thread, ns)
        self.step = 0

    def put(self, md: dict[str, Any] | None = None, **changed: Any) -> Any:
        new = {}
        for k, v in changed.items():
            self.versions[k] = self.saver.get_next_version(self.versions.get(k), None)
            new[k] = self.versions[k]
            if v is None:
                self.values.pop(k, None)
            else:
                self.values[k] = v
        self.step += 1
        cp = ckpt(dict(self.values), dict(self.versions), self.step)
        meta = {"source": "loop", "step": self.step, "parents": {}, **(md or {})}
        self.last = self.saver.put(self.last, cp, meta, new)
        return self.last


def kinds(saver: LmdbSaver, channel: str) -> list[int]:
    out = []
    for stream in saver.log.streams():
        for sf in saver.log.read_stream(stream):
            if isinstance(sf.frame, LgCheckpoint):
                out += [b.kind for b in sf.frame.blobs if b.channel == channel]
    return out


def values_at(saver: Any, config: Any) -> dict[str, Any]:
    tup = saver.get_tuple(config)
    assert tup is not None
    values: dict[str, Any] = tup.checkpoint["channel_values"]
    return values


# -- delta blobs -------------------------------------------------------------------------------


def test_a_growing_list_is_appended_a_changed_one_is_stored_whole(saver: LmdbSaver) -> None:
    t = Thread(saver, "t")
    items: list[Any] = []
    configs = []
    for i in range(20):
        items = [*items, {"i": i}]  # a new list holding the same element objects
        configs.append(t.put(items=items))
    replaced = [{"i": -1}, *items[1:]]  # same length, first element replaced
    configs.append(t.put(items=replaced))
    k = kinds(saver, "items")
    assert k[0] == BLOB_FULL
    assert BLOB_APPEND in k[1:20]
    assert k[20] in (BLOB_FULL, BLOB_PATCH)  # not an append: an element is a new object
    for i, c in enumerate(configs[:20]):
        assert values_at(saver, c)["items"] == [{"i": j} for j in range(i + 1)]
    assert values_at(saver, configs[-1])["items"] == replaced


def test_a_large_value_changed_a_little_is_stored_as_a_patch(saver: LmdbSaver) -> None:
    rng = random.Random(7)
    doc = {"text": "".join(rng.choice("abcdefgh ") for _ in range(20_000)), "rev": 0}
    t = Thread(saver, "t")
    configs = [t.put(doc=doc)]
    for rev in range(1, 6):
        doc = {**doc, "rev": rev, "text": doc["text"][:100] + f"edit {rev}" + doc["text"][110:]}
        configs.append(t.put(doc=doc))
    assert kinds(saver, "doc")[1:] == [BLOB_PATCH] * 5
    assert values_at(saver, configs[-1])["doc"] == doc
    assert values_at(saver, configs[2])["doc"]["rev"] == 2
    assert saver.stats().log_bytes < 20_000  # one full copy (compressed) plus small patches


def test_delta_chains_are_bounded(saver: LmdbSaver) -> None:
    """Every delta is taken against a full blob (the keyframe), and a new keyframe comes after
    ``KEYFRAME_EVERY`` deltas: any version reads from at most two frames."""
    t = Thread(saver, "t")
    items: list[int] = list(range(10_000))  # big, so appends stay under the 2x byte budget
    configs = []
    for i in range(3 * KEYFRAME_EVERY + 10):
        items = [*items, i]
        configs.append(t.put(items=items))
    k = kinds(saver, "items")
    run = longest = 0
    for kind in k:
        run = run + 1 if kind == BLOB_APPEND else 0
        longest = max(longest, run)
    assert longest == KEYFRAME_EVERY
    blobs = {
        sf.seq: b
        for sf in saver.log.read_stream(stream_key("t", ""))
        if isinstance(sf.frame, LgCheckpoint)
        for b in sf.frame.blobs
    }
    assert all(blobs[b.base].kind == BLOB_FULL for b in blobs.values() if b.kind == BLOB_APPEND)
    assert values_at(saver, t.last)["items"] == items
    for i, c in enumerate(configs):
        assert values_at(saver, c)["items"][10_000:] == list(range(i + 1))


def test_a_delta_whose_base_was_deleted_is_stored_whole(saver: LmdbSaver) -> None:
    t = Thread(saver, "t")
    items = [1, 2, 3]
    t.put(items=items)
    saver.delete_thread("t")
    t.last = conf("t")  # the thread starts over, but this process remembers the old blob
    items = [*items, 4]
    cfg = t.put(items=items)
    assert kinds(saver, "items")[-1] == BLOB_FULL
    assert values_at(saver, cfg)["items"] == [1, 2, 3, 4]


def test_a_delta_whose_base_version_was_re_put_is_stored_whole(saver: LmdbSaver) -> None:
    items = [1, 2]
    first = saver.put(conf("t"), ckpt({"items": items}, {"items": 1}), {}, {"items": 1})
    # Another writer stores version 1 again with other content (the blob key is reused).
    saver.put(conf("t"), ckpt({"items": ["x"]}, {"items": 1}, 1), {}, {"items": 1})
    grown = [*items, 3]
    cfg = saver.put(first, ckpt({"items": grown}, {"items": 2}, 2), {}, {"items": 2})
    assert kinds(saver, "items")[-1] == BLOB_FULL  # not an append onto ["x"]
    assert values_at(saver, cfg)["items"] == [1, 2, 3]


def test_a_channel_without_a_value_gets_an_empty_blob(saver: LmdbSaver) -> None:
    cfg = saver.put(conf("t"), ckpt({"a": 1}, {"a": 1, "b": 1}), {}, {"a": 1, "b": 1})
    assert kinds(saver, "b") == [BLOB_EMPTY]
    assert values_at(saver, cfg) == {"a": 1}


# -- serde, event loops ------------------------------------------------------------------------


class CountingSerde(JsonPlusSerializer):
    def __init__(self) -> None:
        super().__init__()
        self.dumps = 0
        self.loads = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self.dumps += 1
        return super().dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        self.loads += 1
        return super().loads_typed(data)


def test_serialization_uses_the_serde_set_at_call_time(saver: LmdbSaver) -> None:
    counting = CountingSerde()
    saver.serde = counting  # after construction, as with_allowlist clones do
    cfg = saver.put(conf("t"), ckpt({"a": [1]}, {"a": 1}), {"step": 1}, {"a": 1})
    saver.put_writes(cfg, [("a", 2)], "task")
    assert counting.dumps == 4  # the blob, the checkpoint, the metadata, the write
    assert values_at(saver, cfg) == {"a": [1]}
    assert counting.loads >= 3


def test_with_allowlist_clones_share_the_log(tmp_path: Path) -> None:
    serde = JsonPlusSerializer(allowed_msgpack_modules=[("collections", "OrderedDict")])
    with LmdbSaver.open(tmp_path / "lg", durability="process", serde=serde) as saver:
        cfg = saver.put(conf("t"), ckpt({"a": [1]}, {"a": 1}), {}, {"a": 1})
        clone = saver.with_allowlist([("mymodule", "MyType")])
        assert clone is not saver
        assert clone.serde is not saver.serde
        assert clone.log is saver.log
        assert values_at(clone, cfg) == {"a": [1]}
        clone.put(cfg, ckpt({"a": [1, 2]}, {"a": 2}, 1), {}, {"a": 2})
        assert values_at(saver, conf("t"))["a"] == [1, 2]


def test_no_event_loop_is_bound_at_construction(saver: LmdbSaver) -> None:
    async def put_and_read(thread: str) -> Any:
        cfg = await saver.aput(conf(thread), ckpt({"a": 1}, {"a": 1}), {}, {"a": 1})
        await saver.aput_writes(cfg, [("a", 2)], "task")
        return await saver.aget_tuple(cfg)

    # Two loops one after the other, then one in another thread: none is remembered.
    assert asyncio.run(put_and_read("one")) is not None
    assert asyncio.run(put_and_read("two")) is not None
    box: list[Any] = []
    th = threading.Thread(target=lambda: box.append(asyncio.run(put_and_read("three"))))
    th.start()
    th.join()
    assert box[0].pending_writes == [("task", "a", 2)]


# -- writes ------------------------------------------------------------------------------------


def test_writes_come_back_in_writes_sort_key_order_with_task_path(saver: LmdbSaver) -> None:
    cfg = saver.put(conf("t"), ckpt({}, {}), {}, {})
    saver.put_writes(cfg, [("c", "b0"), ("c", "b1")], "task-1", task_path="~b")
    saver.put_writes(cfg, [("c", "a0")], "task-2", task_path="~a")
    saver.put_writes(cfg, [("c", "none")], "task-3")  # no task path: sorts first
    saver.put_writes(cfg, [("c", "a-1")], "task-0", task_path="~a")
    tup = saver.get_tuple(cfg)
    assert tup is not None
    assert tup.pending_writes == [
        ("task-3", "c", "none"),
        ("task-0", "c", "a-1"),
        ("task-2", "c", "a0"),
        ("task-1", "c", "b0"),
        ("task-1", "c", "b1"),
    ]


def test_regular_writes_are_idempotent_special_ones_upserted(saver: LmdbSaver) -> None:
    cfg = saver.put(conf("t"), ckpt({}, {}), {}, {})
    saver.put_writes(cfg, [("c", 1), (ERROR, "first")], "task")
    frames_before = saver.stats().frames
    saver.put_writes(cfg, [("c", 99)], "task")  # idx 0 is stored: ignored, nothing logged
    assert saver.stats().frames == frames_before
    saver.put_writes(cfg, [(ERROR, "second"), (INTERRUPT, "stop")], "task")
    tup = saver.get_tuple(cfg)
    assert tup is not None
    assert sorted(tup.pending_writes or []) == [
        ("task", ERROR, "second"),
        ("task", INTERRUPT, "stop"),
        ("task", "c", 1),
    ]


def test_concurrent_put_writes_share_commits(tmp_path: Path) -> None:
    threads = 32
    with LmdbSaver.open(tmp_path / "lg") as saver:  # fsync: commits are slow enough to share
        cfg = saver.put(conf("t"), ckpt({}, {}), {}, {})
        barrier = threading.Barrier(threads)
        commits_before = saver.stats().commits

        def task(i: int) -> None:
            barrier.wait()
            saver.put_writes(cfg, [("c", i)], f"task-{i}", task_path=f"~{i:03d}")

        workers = [threading.Thread(target=task, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        commits = saver.stats().commits - commits_before
        assert commits < threads
        tup = saver.get_tuple(cfg)
        assert tup is not None
        assert [w[2] for w in tup.pending_writes or []] == list(range(threads))


# -- removals are logged; compaction reclaims them ---------------------------------------------


def removes(saver: LmdbSaver, thread: str, ns: str = "") -> list[LgRemove]:
    return [
        sf.frame
        for sf in saver.log.read_stream(stream_key(thread, ns))
        if isinstance(sf.frame, LgRemove)
    ]


def test_removals_are_logged_and_the_history_stays(saver: LmdbSaver) -> None:
    t = Thread(saver, "t")
    for i in range(3):
        t.put(md={"run_id": f"run-{i}"}, a=i)
    frames = saver.stats().frames
    saver.delete_for_runs(["run-0"])
    saver.prune(["t"], strategy="keep_latest")
    saver.delete_thread("t")
    saver.delete_thread("t")  # nothing left: a no-op, nothing logged
    assert [(r.reason, r.checkpoint_ids is None) for r in removes(saver, "t")] == [
        ("delete_for_runs", False),
        ("prune_keep_latest", False),
        ("delete_thread", True),
    ]
    assert saver.stats().frames == frames + 3  # nothing was erased: every frame is still there
    assert saver.get_tuple(conf("t")) is None
    assert list(saver.list(None)) == []
    assert saver.verify().ok


def build_history(saver: LmdbSaver) -> None:
    """A thread with deltas, writes, removals and re-puts, over two namespaces."""
    rng = random.Random(11)
    for ns in ("", "sub:1"):
        t = Thread(saver, "t", ns)
        items: list[Any] = []
        for i in range(60):
            items = [*items, {"i": i, "pad": rng.random()}]
            cfg = t.put(md={"run_id": f"run-{i % 4}"}, items=items, n=i)
            saver.put_writes(cfg, [("items", [{"i": -i}]), (ERROR, f"e{i}")], f"task-{i}")
    saver.delete_for_runs(["run-1"])
    tup = saver.get_tuple(conf("t", "sub:1"))
    assert tup is not None
    saver.copy_thread("t", "t2")
    saver.prune(["t2"], strategy="keep_latest")


def every_tuple(saver: LmdbSaver) -> list[tuple[Any, ...]]:
    return sorted(
        (
            t.config["configurable"]["thread_id"],
            t.config["configurable"]["checkpoint_ns"],
            t.checkpoint["id"],
            repr(t.checkpoint["channel_values"]),
            repr(t.metadata),
            None if t.parent_config is None else t.parent_config["configurable"]["checkpoint_id"],
            repr(t.pending_writes),
        )
        for t in saver.list(None)
    )


def test_compacting_into_a_fresh_log_keeps_every_read(saver: LmdbSaver, tmp_path: Path) -> None:
    build_history(saver)
    before = every_tuple(saver)
    with LmdbSaver.open(tmp_path / "compacted", durability="process") as fresh:
        for stream in saver.log.streams():
            parsed = parse_stream_key(stream)
            assert parsed is not None
            frames = [(sf.seq, sf.frame) for sf in saver.log.read_stream(stream)]
            fresh.import_frames(*parsed, frames)
        assert every_tuple(fresh) == before
        assert fresh.verify().ok
        assert fresh.stats().frames < saver.stats().frames
        # The compacted streams hold only live frames: compacting them again keeps all.
        for stream in fresh.log.streams():
            frames = [(sf.seq, sf.frame) for sf in fresh.log.read_stream(stream)]
            plan = compaction_plan(frames)
            live = [s for s, f in frames if not isinstance(f, LgRemove)]
            assert list(plan.keep) == live


def _ids_of_run(saver: LmdbSaver, thread: str, run: str) -> set[str]:
    return {
        sf.frame.checkpoint_id
        for sf in saver.log.read_stream(stream_key(thread, ""))
        if isinstance(sf.frame, LgCheckpoint) and sf.frame.run_id == run
    }


def test_copy_thread_carries_only_the_live_history(saver: LmdbSaver) -> None:
    t = Thread(saver, "src")
    for i in range(10):
        t.put(md={"run_id": "old" if i < 5 else "new"}, a=list(range(100 + i)))
    saver.delete_for_runs(["old"])
    saver.copy_thread("src", "dst")
    src = [(x.checkpoint["id"], x.checkpoint["channel_values"]) for x in saver.list(conf("src"))]
    dst = [(x.checkpoint["id"], x.checkpoint["channel_values"]) for x in saver.list(conf("dst"))]
    assert src == dst
    assert len(dst) == 5
    # The first (removed) checkpoint holds the keyframe of the survivors' appends, so it
    # comes along for its blob and is removed again at the end; its writes do not.
    old = _ids_of_run(saver, "src", "old")
    (again,) = removes(saver, "dst")
    assert again.reason == "copy_thread"
    assert set(again.checkpoint_ids or ()) <= old
    saver.copy_thread("dst", "dst")  # onto itself: nothing to do
    assert len(list(saver.list(conf("dst")))) == 5


# -- list --------------------------------------------------------------------------------------


def test_list_across_threads_and_namespaces(saver: LmdbSaver) -> None:
    ids = {}
    for thread in ("a", "b"):
        for ns in ("", "child:1"):
            t = Thread(saver, thread, ns)
            ids[thread, ns] = [t.put(md={"tag": thread})["configurable"]["checkpoint_id"]]
            ids[thread, ns].append(t.put()["configurable"]["checkpoint_id"])
    everything = [x.checkpoint["id"] for x in saver.list(None)]
    assert everything == sorted(everything, reverse=True)
    assert len(everything) == 8
    a_all = {x.checkpoint["id"] for x in saver.list({"configurable": {"thread_id": "a"}})}
    assert a_all == set(ids["a", ""] + ids["a", "child:1"])
    assert [x.checkpoint["id"] for x in saver.list(conf("a", "child:1"))] == list(
        reversed(ids["a", "child:1"])
    )
    assert len(list(saver.list(None, filter={"tag": "b"}))) == 2
    assert len(list(saver.list(None, limit=3))) == 3
    newest_a = max(a_all)
    before = list(saver.list({"configurable": {"thread_id": "a"}}, before=conf("a", "", newest_a)))
    assert {x.checkpoint["id"] for x in before} == a_all - {newest_a}
    assert list(saver.list(conf("a"), limit=0)) == []
    assert [x.checkpoint["id"] for x in saver.list(conf("a", "", ids["a", ""][0]))] == [
        ids["a", ""][0]
    ]


def test_thread_ids_are_strings_and_any_text(saver: LmdbSaver) -> None:
    for thread in (7, "a:b:c", "naïve\x00thread", "x" * 200):
        cfg = saver.put(conf(thread), ckpt({"v": 1}, {"v": 1}), {}, {"v": 1})  # type: ignore[arg-type]
        assert cfg["configurable"]["thread_id"] == str(thread)
        assert values_at(saver, conf(str(thread))) == {"v": 1}
        assert parse_stream_key(stream_key(str(thread), "ns:x")) == (str(thread), "ns:x")
    saver.delete_thread(7)  # type: ignore[arg-type]
    assert saver.get_tuple(conf("7")) is None


def test_next_versions_increase_and_never_repeat(saver: LmdbSaver) -> None:
    v1 = saver.get_next_version(None, None)
    v2 = saver.get_next_version(v1, None)
    forked = saver.get_next_version(v1, None)  # a fork from the same parent version
    assert v1 < v2
    assert v1 < forked
    assert forked != v2
    assert saver.get_next_version(4, None).startswith(f"{5:032}.")  # type: ignore[arg-type]


# -- errors ------------------------------------------------------------------------------------


def test_a_config_without_thread_id_is_refused(saver: LmdbSaver) -> None:
    with pytest.raises(InvalidConfig, match=r"put: config\['configurable'\]\['thread_id'\] is"):
        saver.put({"configurable": {}}, ckpt({}, {}), {}, {})
    with pytest.raises(InvalidConfig, match=r"get_tuple: .*thread_id.* is missing"):
        saver.get_tuple({"configurable": {"checkpoint_ns": ""}})


def test_put_writes_needs_a_checkpoint_id(saver: LmdbSaver) -> None:
    with pytest.raises(InvalidConfig, match="checkpoint_id'\\] is missing; pass the config"):
        saver.put_writes(conf("t"), [("c", 1)], "task")


def test_an_unknown_prune_strategy_is_refused(saver: LmdbSaver) -> None:
    with pytest.raises(InvalidPruneStrategy, match=r"must be one of .*got 'oldest'"):
        saver.prune(["t"], strategy="oldest")


def test_a_version_that_is_not_plain_data_is_refused(saver: LmdbSaver) -> None:
    with pytest.raises(InvalidCheckpoint, match=r"channel_versions\['a'\] is a tuple"):
        saver.put(conf("t"), ckpt({"a": 1}, {"a": (1, 2)}), {}, {"a": 1})
    assert saver.get_tuple(conf("t")) is None  # nothing was written


def test_a_closed_saver_refuses_writes(tmp_path: Path) -> None:
    s = LmdbSaver.open(tmp_path / "lg", durability="process")
    s.close()
    with pytest.raises(LogClosed, match="closed"):
        s.put(conf("t"), ckpt({}, {}), {}, {})


def test_a_damaged_view_is_reported_and_refused(saver: LmdbSaver) -> None:
    t = Thread(saver, "t")
    first = t.put(a=1)
    t.put(a=2)
    sid = next(iter(saver.log._ids.values()))
    first_key = checkpoint_key(sid, first["configurable"]["checkpoint_id"])
    with saver.log.backend.read() as txn:
        assert not list(txn.scan(CHECKPOINTS))  # a put stores the checkpoint's read row only
        second = [value for key, value in txn.scan(READS) if key != first_key]
    assert len(second) == 1

    def damage(table: str, value: bytes) -> None:  # the first checkpoint's row is the second's
        saver.log.backend.run_write(lambda txn: txn.put(table, first_key, value))

    damage(READS, second[0])  # the read row (its checkpoint row too): verify says so both ways
    report = saver.verify()
    assert not report.ok
    details = [p.detail for p in report.problems if p.kind == "projection"]
    assert any("checkpoints rows differ" in d for d in details), details
    assert any("lg_reads rows differ" in d for d in details), details
    with pytest.raises(CorruptFrame, match=r"its read row \(lg_reads\) holds checkpoint"):
        saver.get_tuple(first)
    # A checkpoint stored before read rows replaced lg_checkpoints rows has the row only: a
    # read by id reads its frame, which the row's seq must name.
    with saver.log.backend.write() as txn:
        txn.delete(READS, first_key)
    damage(CHECKPOINTS, msgspec.msgpack.encode(row_of_read(second[0])))
    assert any("checkpoints rows differ" in p.detail for p in saver.verify().problems)
    with pytest.raises(CorruptFrame, match=r"its index points at seq .* which holds another frame"):
        saver.get_tuple(first)


# -- a seeded random run against InMemorySaver -------------------------------------------------


def comparable(t: CheckpointTuple | None) -> Any:
    if t is None:
        return None
    return (
        t.checkpoint["id"],
        t.checkpoint["channel_values"],
        t.checkpoint["channel_versions"],
        dict(t.metadata),
        None if t.parent_config is None else t.parent_config["configurable"]["checkpoint_id"],
        t.pending_writes,
    )


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed={s}" for s in SEEDS])
def test_random_operations_agree_with_in_memory_saver(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    path = tmp_path / "lg"
    ours = LmdbSaver.open(path, durability="process")
    oracle = InMemorySaver()
    names = ("a", "b", "c")
    threads: dict[str, dict[str, Any]] = {}

    def reset(name: str) -> None:
        threads[name] = {"values": {}, "versions": {}, "ours": conf(name), "oracle": conf(name)}

    for name in names:
        reset(name)
    try:
        for step in range(300):
            name = rng.choice(names)
            th = threads[name]
            op = rng.random()
            if op < 0.6:
                items = th["values"].get("items", [])
                r = rng.random()
                if r < 0.6:  # grows: an append
                    items = [*items, {"step": step, "text": "w" * rng.randrange(50)}]
                elif r < 0.8 and items:  # first element replaced
                    items = [{"step": -step}, *items[1:]]
                else:  # shrinks
                    items = items[: len(items) // 2]
                change: dict[str, Any] = {"items": items}
                if rng.random() < 0.3:  # large and a little different: a patch
                    change["big"] = "z" * 3000 + str(step)
                if rng.random() < 0.1:  # a version without a value
                    change["gone"] = None
                new = {}
                for k, v in change.items():
                    th["versions"][k] = ours.get_next_version(th["versions"].get(k), None)
                    new[k] = th["versions"][k]
                    if v is None:
                        th["values"].pop(k, None)
                    else:
                        th["values"][k] = v
                cp = ckpt(dict(th["values"]), dict(th["versions"]), step)
                md = {"source": "loop", "step": step, "parents": {}}
                th["ours"] = ours.put(th["ours"], cp, md, new)
                th["oracle"] = oracle.put(th["oracle"], cp, md, new)
            elif op < 0.85 and "checkpoint_id" in th["ours"]["configurable"]:
                writes = [("items", rng.randrange(100)) for _ in range(rng.randrange(1, 3))]
                task = f"task-{rng.randrange(3)}"
                ours.put_writes(th["ours"], writes, task, task_path=f"~{task}")
                oracle.put_writes(th["oracle"], writes, task, task_path=f"~{task}")
            elif op < 0.9:
                ours.delete_thread(name)
                oracle.delete_thread(name)
                reset(name)
            else:  # a restart: this process forgets its blob memos
                ours.close()
                ours = LmdbSaver.open(path, durability="process")
            for n in names:
                assert comparable(ours.get_tuple(conf(n))) == comparable(
                    oracle.get_tuple(conf(n))
                ), f"seed={seed} step={step} thread={n}"
        for n in names:
            assert [comparable(x) for x in ours.list(conf(n))] == [
                comparable(x) for x in oracle.list(conf(n))
            ], f"seed={seed} thread={n}"
        assert ours.verify().ok
    finally:
        ours.close()


def test_identity_appends_can_be_turned_off(tmp_path: Path) -> None:
    with LmdbSaver.open(tmp_path / "lg", durability="process", identity_appends=False) as s:
        t = Thread(s, "t")
        items: list[Any] = []
        for i in range(10):
            items = [*items, {"i": i}]
            t.put(items=items)
        items[0]["i"] = "mutated in place"  # stored whole every time: the next put sees it
        t.put(items=[*items, {"i": 10}])
        assert BLOB_APPEND not in kinds(s, "items")
        assert values_at(s, t.last)["items"][0] == {"i": "mutated in place"}


class StreamCipher:
    """A test cipher shaped like AES-EAX use: a fresh nonce per message, keyed keystream."""

    def __init__(self, key: bytes, seed: int) -> None:
        self.key = key
        self.rng = random.Random(seed)

    def _stream(self, nonce: bytes, n: int) -> bytes:
        out = b"".join(
            hashlib.blake2b(nonce + i.to_bytes(8, "big"), key=self.key).digest()
            for i in range(n // 64 + 1)
        )
        return out[:n]

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        nonce = self.rng.randbytes(16)
        return "xs", nonce + bytes(
            a ^ b for a, b in zip(plaintext, self._stream(nonce, len(plaintext)), strict=True)
        )

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xs"
        nonce, body = ciphertext[:16], ciphertext[16:]
        return bytes(a ^ b for a, b in zip(body, self._stream(nonce, len(body)), strict=True))


@pytest.mark.parametrize("seed", [5], ids=["seed=5"])
def test_encrypted_serializer_end_to_end(seed: int, tmp_path: Path) -> None:
    serde = EncryptedSerializer(StreamCipher(b"k" * 32, seed))
    with LmdbSaver.open(tmp_path / "lg", durability="process", serde=serde) as saver:
        t = Thread(saver, "t")
        items: list[Any] = []
        for i in range(30):
            items = [*items, {"secret": f"plaintext-marker-{i}"}]
            t.put(items=items)
        assert values_at(saver, t.last)["items"] == items
        assert BLOB_APPEND in kinds(saver, "items")  # appends work through any serde
        raw = (tmp_path / "lg" / "data.mdb").read_bytes()
        assert b"plaintext-marker" not in raw
