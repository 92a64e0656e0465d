"""LangGraph steps read at a seq (``read.step_at``, ``read.steps(from_seq=...)``: what
``ckptlog show/diff --thread`` and the viewer's ``/api/steps`` pages read) equal the replay
of the stream from its first frame, and cost a number of frames independent of the
thread's length (counted at the frame decoder, never timed)."""

from __future__ import annotations

import io
import json
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base.id import uuid6
from test_langgraph_reads import ckpt, conf  # the same thread config and checkpoint builders

from eventlog import read
from eventlog.cli import main
from eventlog.integrations import langgraph_steps
from eventlog.integrations import langgraph_store as store
from eventlog.integrations.langgraph import CkptlogSaver
from eventlog.log import EventLog
from eventlog.viewer.api import Viewer
from eventlog.walker import Unreadable

# show --thread at a seq reads: the frame before and the frame at it, the walk back to its
# checkpoint (one writes frame per step here), that checkpoint's writes frame, and for each of
# 2 channels the blob's frame and its keyframe.
STEP_FRAMES_MAX = 12
SHORT, LONG = 60, 600


class _State(TypedDict):
    items: Annotated[list[str], operator.add]
    n: int


def build(saver: CkptlogSaver, thread: str, steps: int) -> list[str]:
    """``steps`` checkpoints (a growing list and a counter), one task's writes on each."""
    versions: dict[str, Any] = {}
    cfg = conf(thread)
    items: list[Any] = []
    ids = []
    for i in range(steps):
        items = [*items, {"i": i, "text": f"message {i}"}]
        values = {"items": items, "n": i}
        new = {}
        for ch in values:
            versions[ch] = saver.get_next_version(versions.get(ch), None)
            new[ch] = versions[ch]
        meta = {"source": "loop", "step": i, "parents": {}}
        cfg = saver.put(cfg, ckpt(values, dict(versions), i), meta, new)  # type: ignore[arg-type]
        saver.put_writes(cfg, [("n", i + 1)], f"task-{i}", "node-a")
        ids.append(cfg["configurable"]["checkpoint_id"])
    return ids


def graph_runs(saver: CkptlogSaver, thread: str) -> None:
    """A real graph, run three times on one thread (LangGraph's own puts and writes, its
    background durability: writes can land before their checkpoint), and a fork."""
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    def plan(s: _State) -> dict[str, Any]:
        return {"items": ["plan"], "n": s["n"] + 1}

    def fetch(s: _State) -> dict[str, Any]:
        return {"items": ["fetch"], "n": s["n"] * 10}

    g = StateGraph(_State)
    g.add_node("plan", plan)
    g.add_node("fetch", fetch)
    g.add_edge(START, "plan")
    g.add_edge("plan", "fetch")
    g.add_edge("fetch", END)
    app = g.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": thread}}
    for n in (1, 5, 7):
        app.invoke({"items": [], "n": n}, config)
    history = list(app.get_state_history(config))
    app.update_state(history[3].config, {"n": 100})  # a fork from an older checkpoint


def steps_of(log: EventLog, stream: str) -> list[Any]:
    """The replay: every frame walked from the first, as the view's ``steps`` does."""
    return list(store.VIEW.steps(log, stream))


REPLAYS = [0]  # walks of a LangGraph stream from its first frame (with count_replays)


@pytest.fixture
def count_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    real = langgraph_steps.steps

    def counting(*args: Any) -> Any:
        REPLAYS[0] += 1
        return real(*args)

    monkeypatch.setattr(langgraph_steps, "steps", counting)


def assert_seeks_equal_the_replay(log: EventLog, stream: str) -> int:
    """Every step read at its seq, and pages from the start, the middle and the end, equal
    the replay's; returns how many times the steps read at their seq replayed the stream."""
    info = read.describe(log, stream)
    replay = steps_of(log, stream)
    assert replay, stream
    assert not any(isinstance(s, Unreadable) for s in replay)
    before = REPLAYS[0]
    for s in replay:
        got, unreadable = read.step_at(log, stream, info, s.seq)
        assert unreadable == []
        assert got == s, f"{stream} seq {s.seq}"
    replayed = REPLAYS[0] - before
    for start in (1, 2, len(replay) // 2, len(replay)):
        assert list(read.steps(log, stream, info, from_seq=start)) == replay[start - 1 :]
        page = list(read.steps(log, stream, info, from_seq=start, to_seq=start + 2))
        assert page == replay[start - 1 : start + 2]
    return replayed


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[CkptlogSaver]:
    with CkptlogSaver.open(tmp_path / "lg", durability="process") as s:
        yield s


@pytest.mark.usefixtures("count_replays")
def test_a_step_read_at_its_seq_is_the_step_the_replay_yields(saver: CkptlogSaver) -> None:
    build(saver, "loop", 90)  # longer than a chunk of steps_from
    graph_runs(saver, "graph")
    saver.put_writes(  # writes for a checkpoint not stored yet (LangGraph's background put)
        conf("loop", str(uuid6(clock_seq=999))), [("n", 0)], "early", "node-b"
    )
    for thread in ("loop", "graph"):
        replayed = assert_seeks_equal_the_replay(saver.log, f"lg:{len(thread)}:{thread}:")
        assert replayed == 0, f"{thread}: the rows were not read, the stream was replayed"


@pytest.mark.usefixtures("count_replays")
def test_where_the_rows_cannot_stand_for_the_replay_it_replays(saver: CkptlogSaver) -> None:
    """Special writes that overwrite, pruned and deleted checkpoints: the steps read at a seq
    are still the replay's (the rows no longer hold what the frames did then)."""
    ids = build(saver, "pruned", 30)
    saver.put_writes(conf("pruned", ids[5]), [("__error__", "boom")], "task-5", "node-a")
    saver.put_writes(conf("pruned", ids[5]), [("__error__", "again")], "task-5", "node-a")
    saver.prune(["pruned"], strategy="keep_latest")
    build(saver, "pruned", 5)
    build(saver, "gone", 10)
    saver.delete_thread("gone")
    build(saver, "gone", 4)
    for thread in ("pruned", "gone"):
        replayed = assert_seeks_equal_the_replay(saver.log, f"lg:{len(thread)}:{thread}:")
        assert replayed > 0, f"{thread}: the rows were read where they cannot stand for it"


class FrameCount:
    """Frames decoded (every read of a frame, by any path, decodes its envelope)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = EventLog.decode_envelope

        def counting(log: EventLog, data: bytes, **kwargs: Any) -> Any:
            self.n += 1
            return real(log, data, **kwargs)

        monkeypatch.setattr(EventLog, "decode_envelope", counting)


def cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main([*argv], out=out, err=err)
    return code, out.getvalue()


def test_show_and_a_page_of_steps_read_a_bounded_number_of_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "lg"
    with CkptlogSaver.open(path, durability="process") as s:
        for steps in (SHORT, LONG):
            build(s, f"t{steps}", steps)
    count = FrameCount(monkeypatch)
    seen: dict[str, list[int]] = {}
    for steps in (SHORT, LONG):
        thread, last = f"t{steps}", 2 * steps
        for what, args in (
            ("latest", ()),
            ("at", ("--at", str(last - 7))),
        ):
            count.n = 0
            code, out = cli("show", str(path), "--thread", thread, "--json", *args)
            assert code == 0, out
            doc = json.loads(out)
            assert doc["seq"] == (last if what == "latest" else last - 7)
            n = steps - 1 if what == "latest" else steps - 4
            assert doc["view"]["channel_values"]["n"] == n
            seen.setdefault(what, []).append(count.n)
        opened = read.open_log(path)
        try:
            stream = f"lg:{len(thread)}:{thread}:"
            count.n = 0
            log = opened.log.log
            page = list(read.steps(log, stream, from_seq=last - 30, to_seq=last - 11))
            assert [p.seq for p in page] == list(range(last - 30, last - 10))
            seen.setdefault("page of 20", []).append(count.n)
        finally:
            opened.log.close()
        viewer = Viewer(str(path))
        try:
            with viewer.session():
                count.n = 0
                doc = viewer.steps(f"lg:{len(thread)}:{thread}:", last - 100, 100)
                assert [r["seq"] for r in doc["rows"]] == list(range(last - 99, last + 1))
                seen.setdefault("/api/steps, last page of 100", []).append(count.n)
        finally:
            viewer.close()
    for what, (short, long) in seen.items():
        # a page of N steps: its N frames, plus what one step reads (the frames it shares
        # with its neighbours are read once)
        bound = {"page of 20": 20, "/api/steps, last page of 100": 100}.get(what, 0)
        bound += STEP_FRAMES_MAX
        assert long <= bound, f"{what} at {LONG} steps: {long} frames decoded"
        assert long <= short + 2, f"{what}: {short} frames at {SHORT} steps, {long} at {LONG}"


def test_a_page_past_the_end_and_a_missing_stream_are_empty(saver: CkptlogSaver) -> None:
    build(saver, "t", 3)
    log = saver.log
    assert list(read.steps(log, "lg:1:t:", from_seq=7)) == []
    assert list(langgraph_steps.steps_from(log, "lg:1:x:", 1, object, store.ROWS)) == []


def test_the_seq_as_of_a_time_is_the_last_step_saved_by_then(saver: CkptlogSaver) -> None:
    build(saver, "t", 30)
    log, stream = saver.log, "lg:1:t:"
    replay = steps_of(log, stream)
    times = sorted({s.saved_at for s in replay})
    for when in (times[0] - 1, times[0], times[len(times) // 2], times[-1], times[-1] + 1):
        expected = max((s.seq for s in replay if s.saved_at <= when), default=0)
        assert read.seq_as_of(log, stream, None, when) == expected
