"""techrevati-runtime 0.4's ``CheckpointSaver`` contract, on ckptlog's ``LogSaver``.

:class:`SaverContract` pins the protocol's semantics; it runs against ``LogSaver`` (LMDB and
memory) and, unchanged, against techrevati's own ``InMemorySaver`` and ``SqliteSaver``, so the
validation messages and behaviours it pins are upstream's, not our reading of them. What only
ours guarantees (order under timestamp ties and a clock stepping back, history after delete,
``verify``, O(1) reads, storage errors as ``OSError``) is tested on ``LogSaver`` alone, then a
real ``AgentSession`` replays an idempotent turn from the log, and a SIGKILLed agent resumes.

This module is also the crash test's agent: ``python tests/test_techrevati.py agent PATH
--turns N [--hold-turn H]`` runs turns 1..N of thread ``agent-1`` with idempotency keys
``turn-k``, printing ``start k`` when turn k's function runs and ``done k`` once turn k returned
(its checkpoint is durable), then waits for a line on stdin before the next turn; turn H's
function blocks (a long model call), so the test can kill the agent inside a turn.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from techrevati.runtime import (
    AgentFailureClass,
    AgentSession,
    Checkpoint,
    CheckpointSaver,
    InMemorySaver,
    RingBufferEventSink,
    SqliteSaver,
    StepCheckpointSaver,
    StepRecord,
)

from backends.base import WriteTxn
from backends.memory import MemoryBackend
from backends.testing import FaultyBackend
from eventlog.codec import Serializer
from eventlog.errors import CheckpointError, FrameTooLarge, InvalidStreamKey, StorageError
from eventlog.frames import Event, Frame
from eventlog.integrations import techrevati as tr
from eventlog.integrations.techrevati import TABLE, LogSaver
from eventlog.log import EventLog

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]

# -- the contract ----------------------------------------------------------------------------------


class SaverContract:
    """Every ``CheckpointSaver`` here passes these; subclasses implement ``make_saver``."""

    def make_saver(self, tmp_path: Path) -> Any:
        raise NotImplementedError

    def tick(self) -> None:
        """Called between puts whose order a test checks. Upstream savers order by
        ``created_at`` (µs) and break ties by a random id, so they need the clock to move."""

    @pytest.fixture
    def saver(self, tmp_path: Path) -> Iterator[Any]:
        s = self.make_saver(tmp_path)
        yield s
        close = getattr(s, "close", None)
        if close is not None:
            close()

    def puts(self, saver: Any, thread: str, n: int, **kw: Any) -> list[Checkpoint]:
        out = []
        for i in range(n):
            out.append(saver.put(thread, {"i": i}, **kw))
            self.tick()
        return out

    # -- shape -------------------------------------------------------------------------------------

    def test_satisfies_both_protocols(self, saver: Any) -> None:
        assert isinstance(saver, CheckpointSaver)
        assert isinstance(saver, StepCheckpointSaver)

    def test_empty_thread(self, saver: Any) -> None:
        assert saver.get("t") is None
        assert saver.get("t", "0123456789abcdef0123456789abcdef") is None
        assert saver.list("t") == []
        assert saver.list("t", before="0123456789abcdef0123456789abcdef") == []
        assert saver.get_step("t", "k") is None
        assert saver.list_steps("t") == []
        saver.delete("t")  # unknown thread: no error
        assert saver.get("t") is None

    def test_put_returns_the_stored_checkpoint(self, saver: Any) -> None:
        cp = saver.put("t", {"a": 1}, metadata={"m": "x"})
        assert isinstance(cp, Checkpoint)
        assert cp.thread_id == "t"
        assert cp.state == {"a": 1}
        assert cp.metadata == {"m": "x"}
        assert cp.parent_id is None
        assert cp.id
        assert datetime.fromisoformat(cp.created_at).utcoffset() is not None
        assert saver.get("t") == cp
        assert saver.get("t", cp.id) == cp
        child = saver.put("t", {"a": 2}, parent_id=cp.id)
        assert child.parent_id == cp.id
        assert child.metadata == {}
        assert saver.get("t", child.id) == child

    # -- JSON round trip and fresh objects ---------------------------------------------------------

    def test_values_equal_their_json_round_trip(self, saver: Any) -> None:
        state = {
            "tuple": (1, (2, 3)),
            "nested": {"k": [None, True, 1.5, "é", {"deep": ()}]},
            "big": 2**70,
            "neg": -0.0,
        }
        meta = {"tags": ("a", "b")}
        cp = saver.put("t", state, metadata=meta)
        expected = json.loads(json.dumps(state))
        assert expected["tuple"] == [1, [2, 3]]
        for got in (cp, saver.get("t"), saver.get("t", cp.id), saver.list("t")[0]):
            assert got.state == expected
            assert got.metadata == {"tags": ["a", "b"]}

    def test_reads_return_new_objects(self, saver: Any) -> None:
        state: dict[str, Any] = {"items": [1, 2], "map": {"k": "v"}}
        cp = saver.put("t", state)
        state["items"].append(3)  # the caller's object is not the stored one
        cp.state["items"].append(4)  # nor is the returned one
        first = saver.get("t")
        assert first.state == {"items": [1, 2], "map": {"k": "v"}}
        first.state["map"]["k"] = "changed"
        saver.list("t")[0].metadata["x"] = 1
        again = saver.get("t")
        assert again.state == {"items": [1, 2], "map": {"k": "v"}}
        assert again.metadata == {}
        assert again.state is not first.state

    def test_step_values_are_round_tripped(self, saver: Any) -> None:
        rec = saver.put_step("t", "k", {"v": (1, 2)})
        assert isinstance(rec, StepRecord)
        assert rec.state == {"v": [1, 2]}
        assert saver.get_step("t", "k") == StepRecord("t", "k", rec.created_at, {"v": [1, 2]})
        # (upstream's InMemorySaver hands out its stored StepRecord itself, so whether a step
        # read is a new object is tested on LogSaver only: test_step_reads_return_new_objects)

    # -- order -------------------------------------------------------------------------------------

    def test_list_is_newest_first_and_get_is_its_head(self, saver: Any) -> None:
        cps = self.puts(saver, "t", 5)
        listed = saver.list("t")
        assert [c.id for c in listed] == [c.id for c in reversed(cps)]
        assert saver.get("t") == listed[0] == cps[-1]
        stamps = [c.created_at for c in listed]
        assert stamps == sorted(stamps, reverse=True)

    def test_limit_is_a_hard_cap(self, saver: Any) -> None:
        cps = self.puts(saver, "t", 5)
        assert [c.id for c in saver.list("t", limit=2)] == [cps[4].id, cps[3].id]
        assert len(saver.list("t", limit=100)) == 5
        assert saver.list("t", limit=0) == []
        assert saver.list("t", limit=-3) == []

    def test_before_is_strictly_earlier(self, saver: Any) -> None:
        cps = self.puts(saver, "t", 5)
        assert [c.id for c in saver.list("t", before=cps[3].id)] == [
            cps[2].id,
            cps[1].id,
            cps[0].id,
        ]
        assert [c.id for c in saver.list("t", before=cps[3].id, limit=1)] == [cps[2].id]
        assert saver.list("t", before=cps[0].id) == []

    def test_unknown_before_gives_nothing(self, saver: Any) -> None:
        self.puts(saver, "t", 2)
        other = saver.put("u", {"x": 1})
        assert saver.list("t", before="no-such-checkpoint") == []
        assert saver.list("t", before=other.id) == []  # another thread's id is unknown here
        assert saver.get("t", other.id) is None

    # -- threads and delete ------------------------------------------------------------------------

    def test_threads_are_independent(self, saver: Any) -> None:
        a = self.puts(saver, "a", 2)
        b = self.puts(saver, "b", 3)
        assert [c.id for c in saver.list("a")] == [a[1].id, a[0].id]
        assert [c.id for c in saver.list("b")] == [c.id for c in reversed(b)]
        saver.delete("a")
        assert saver.get("a") is None
        assert saver.list("a") == []
        assert saver.get("b") == b[-1]

    def test_delete_removes_checkpoints_and_steps_then_thread_starts_over(self, saver: Any) -> None:
        old = self.puts(saver, "t", 2)
        saver.put_step("t", "k", {"v": 1})
        saver.put_step("u", "k", {"v": 2})
        saver.delete("t")
        assert saver.get("t") is None
        assert saver.get("t", old[0].id) is None
        assert saver.list("t", before=old[1].id) == []
        assert saver.get_step("t", "k") is None
        assert saver.list_steps("t") == []
        assert saver.get_step("u", "k").state == {"v": 2}
        new = self.puts(saver, "t", 2)
        assert [c.id for c in saver.list("t")] == [new[1].id, new[0].id]
        saver.delete("t")
        saver.delete("t")  # twice: still fine
        assert saver.list("t") == []

    # -- steps -------------------------------------------------------------------------------------

    def test_steps_are_keyed_and_overwritten(self, saver: Any) -> None:
        saver.put_step("t", "a", {"v": 1})
        self.tick()
        saver.put_step("t", "b", {"v": 2})
        self.tick()
        saver.put_step("t", "a", {"v": 3})
        assert saver.get_step("t", "a").state == {"v": 3}
        assert saver.get_step("t", "missing") is None
        steps = saver.list_steps("t")
        assert [(s.step_key, s.state) for s in steps] == [("b", {"v": 2}), ("a", {"v": 3})]
        assert saver.get("t") is None  # steps are not checkpoints
        assert saver.list("t") == []

    # -- validation: upstream's exception types and messages ---------------------------------------

    @pytest.mark.parametrize(
        ("call", "exc", "message"),
        [
            (lambda s: s.get(7), TypeError, "thread_id must be a string"),
            (lambda s: s.get("   "), ValueError, "thread_id must not be empty"),
            (lambda s: s.get("t", 5), TypeError, "checkpoint_id must be a string"),
            (lambda s: s.get("t", ""), ValueError, "checkpoint_id must not be empty"),
            (lambda s: s.put(None, {}), TypeError, "thread_id must be a string"),
            (lambda s: s.put("", {}), ValueError, "thread_id must not be empty"),
            (lambda s: s.put("t", [("a", 1)]), TypeError, "state must be a mapping"),
            (lambda s: s.put("t", {1: "x"}), TypeError, "state keys must be strings"),
            (lambda s: s.put("t", {"f": object()}), TypeError, "state must be JSON-serializable"),
            (lambda s: s.put("t", _circular()), TypeError, "state must be JSON-serializable"),
            (lambda s: s.put("t", {}, metadata=[1]), TypeError, "metadata must be a mapping"),
            (
                lambda s: s.put("t", {}, metadata={"s": {1, 2}}),
                TypeError,
                "metadata must be JSON-serializable",
            ),
            (lambda s: s.put("t", {}, parent_id=""), ValueError, "parent_id must not be empty"),
            (lambda s: s.put("t", {}, parent_id=3), TypeError, "parent_id must be a string"),
            # order of the checks: thread id, state, metadata, parent id
            (lambda s: s.put(1, [1], metadata=[1]), TypeError, "thread_id must be a string"),
            (lambda s: s.put("t", [1], metadata=[1]), TypeError, "state must be a mapping"),
            (
                lambda s: s.put("t", {}, metadata=[1], parent_id=""),
                TypeError,
                "metadata must be a mapping",
            ),
            (lambda s: s.list(b"t"), TypeError, "thread_id must be a string"),
            (lambda s: s.list("t", before=""), ValueError, "before must not be empty"),
            (lambda s: s.list("t", limit="3"), TypeError, "limit must be an integer"),
            (lambda s: s.list("t", limit=True), TypeError, "limit must be an integer"),
            (lambda s: s.list("t", limit=2.0), TypeError, "limit must be an integer"),
            (lambda s: s.delete(None), TypeError, "thread_id must be a string"),
            (lambda s: s.delete(" "), ValueError, "thread_id must not be empty"),
            (lambda s: s.put_step("t", "", {}), ValueError, "step_key must not be empty"),
            (lambda s: s.put_step("t", 1, {}), TypeError, "step_key must be a string"),
            (lambda s: s.put_step("t", "k", 5), TypeError, "state must be a mapping"),
            (lambda s: s.put_step(1, "", 5), TypeError, "thread_id must be a string"),
            (lambda s: s.get_step("t", None), TypeError, "step_key must be a string"),
            (lambda s: s.get_step("", "k"), ValueError, "thread_id must not be empty"),
            (lambda s: s.list_steps(None), TypeError, "thread_id must be a string"),
        ],
    )
    def test_validation_errors_are_upstreams(
        self, saver: Any, call: Callable[[Any], Any], exc: type[Exception], message: str
    ) -> None:
        saver.put("t", {"before": True})
        with pytest.raises(exc, match=f"^{message}$"):
            call(saver)
        assert [c.state for c in saver.list("t")] == [{"before": True}]  # nothing written
        assert saver.list_steps("t") == []

    # -- concurrency -------------------------------------------------------------------------------

    def test_concurrent_puts_are_all_kept(self, saver: Any) -> None:
        listed = concurrent_puts(saver, writers=4, per_writer=15)
        assert len({c.id for c in listed}) == 4 * 15
        for w in range(4):  # each writer's own puts keep their order
            mine = [c.state["i"] for c in reversed(listed) if c.state["w"] == w]
            assert mine == list(range(15))
        # (whether get() is list()[0] after concurrent puts is tested on LogSaver only:
        # upstream's InMemorySaver stamps created_at before taking its lock, so its latest
        # insert need not be its newest stamp)


def concurrent_puts(saver: Any, *, writers: int, per_writer: int) -> list[Checkpoint]:
    """``writers`` threads each put ``per_writer`` checkpoints on thread ``t``; its list."""

    def worker(w: int) -> None:
        for i in range(per_writer):
            saver.put("t", {"w": w, "i": i})

    pool = [threading.Thread(target=worker, args=(w,)) for w in range(writers)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    listed: list[Checkpoint] = saver.list("t", limit=10_000)
    return listed


class PersistentSaverContract(SaverContract):
    """Savers that survive a restart: ``make_saver`` on the same path reopens the same store."""

    def test_checkpoints_and_steps_survive_reopen(self, tmp_path: Path) -> None:
        s = self.make_saver(tmp_path)
        cps = self.puts(s, "t", 3, metadata={"m": 1})
        s.put_step("t", "k", {"v": 1})
        s.close()
        s = self.make_saver(tmp_path)
        try:
            assert s.get("t") == cps[-1]
            assert [c.id for c in s.list("t")] == [c.id for c in reversed(cps)]
            assert s.get_step("t", "k").state == {"v": 1}
            after = s.put("t", {"after": True})
            assert s.list("t", limit=1) == [after]
        finally:
            s.close()


def _circular() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["self"] = [d]
    return d


# -- the contract on each saver --------------------------------------------------------------------


class TestLogSaverLmdb(PersistentSaverContract):
    def make_saver(self, tmp_path: Path) -> LogSaver:
        return LogSaver.open(tmp_path / "log")


class TestLogSaverPostgres(PersistentSaverContract):
    """The same contract on a PostgreSQL log (``LogSaver.open(url)``)."""

    @pytest.fixture(autouse=True)
    def _schemas(self, pg_schemas: Any) -> None:
        self.schemas = pg_schemas

    def make_saver(self, tmp_path: Path) -> LogSaver:
        return LogSaver.open(self.schemas.url(tmp_path), durability="process")

    def test_list_reads_its_frames_in_one_read_transaction(
        self, saver: LogSaver, pg_statements: list[str]
    ) -> None:
        """``list(limit=n)`` reads the frames ending at the head at once: one read
        transaction besides locating the thread, where it made one per checkpoint (4 round
        trips each: 44 statements for 10)."""
        for i in range(30):
            saver.put("t", {"i": i})
            if i % 3 == 0:
                saver.put_step("t", f"s{i}", {"i": i})
        pg_statements.clear()
        listed = saver.list("t", limit=10)
        assert [c.state["i"] for c in listed] == list(range(29, 19, -1))
        assert pg_statements.count("BEGIN") == 1, pg_statements  # the frames (locate: below)
        assert len(pg_statements) <= 5, pg_statements

    def test_a_get_is_two_statements_outside_a_transaction(
        self, saver: LogSaver, pg_statements: list[str]
    ) -> None:
        """``get`` (latest or by id) locates the thread (its id and head row: one statement)
        and reads the checkpoint's frame (its index row and log row: one statement), where it
        took two read transactions (7 round trips); ``get_step`` reads the step index row
        between them."""
        for i in range(5):
            saver.put("t", {"i": i})
        saver.put_step("t", "s", {"i": 0})
        latest = saver.get("t")
        assert latest is not None
        pg_statements.clear()
        assert saver.get("t") == latest
        assert saver.get("t", latest.id) == latest
        assert pg_statements.count("BEGIN") == 0, pg_statements
        assert len(pg_statements) == 4, pg_statements
        pg_statements.clear()
        step = saver.get_step("t", "s")
        assert step is not None
        assert step.state == {"i": 0}
        assert len(pg_statements) == 3, pg_statements
        assert "BEGIN" not in pg_statements, pg_statements


class TestLogSaverMemory(SaverContract):
    def make_saver(self, tmp_path: Path) -> LogSaver:
        return LogSaver.on_backend(MemoryBackend())


class TestUpstreamInMemorySaver(SaverContract):
    """The contract is upstream's: techrevati's own savers pass it too."""

    def make_saver(self, tmp_path: Path) -> InMemorySaver:
        return InMemorySaver()

    def tick(self) -> None:
        time.sleep(0.001)


class TestUpstreamSqliteSaver(PersistentSaverContract):
    def make_saver(self, tmp_path: Path) -> SqliteSaver:
        return SqliteSaver(tmp_path / "checkpoints.db")

    def tick(self) -> None:
        time.sleep(0.001)


# -- what only LogSaver guarantees -----------------------------------------------------------------


class SteppingClock:
    """A clock the test moves by hand (seconds since the epoch)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> SteppingClock:
    return SteppingClock()


@pytest.fixture
def saver(tmp_path: Path, clock: SteppingClock) -> Iterator[LogSaver]:
    s = LogSaver.open(tmp_path / "log", clock=clock)
    yield s
    s.close()


def test_ties_keep_log_order(saver: LogSaver, clock: SteppingClock) -> None:
    cps = [saver.put("t", {"i": i}) for i in range(20)]  # the clock never moves
    listed = saver.list("t", limit=100)
    assert [c.state["i"] for c in listed] == list(range(19, -1, -1))
    assert saver.get("t") == listed[0] == cps[-1]
    stamps = [c.created_at for c in cps]
    assert stamps == sorted(set(stamps))  # strictly increasing, one µs apart
    assert [c.id for c in cps] == sorted(c.id for c in cps)
    assert stamps[0] == "2023-11-14T22:13:20.000000+00:00"
    assert stamps[1] == "2023-11-14T22:13:20.000001+00:00"


def test_clock_stepping_back_keeps_log_order(saver: LogSaver, clock: SteppingClock) -> None:
    first = saver.put("t", {"i": 0})
    clock.now -= 3600  # NTP steps the clock back an hour
    second = saver.put("t", {"i": 1})
    step = saver.put_step("t", "k", {"v": 1})
    clock.now += 7200
    third = saver.put("t", {"i": 2})
    assert first.created_at < second.created_at < step.created_at < third.created_at
    assert saver.get("t") == third
    assert [c.id for c in saver.list("t")] == [third.id, second.id, first.id]
    assert saver.list("t", before=second.id) == [first]
    assert saver.verify().ok


def test_concurrent_puts_chain_in_commit_order(saver: LogSaver) -> None:
    listed = concurrent_puts(saver, writers=4, per_writer=15)
    assert saver.get("t") == listed[0]
    stamps = [c.created_at for c in listed]
    assert stamps == sorted(set(stamps), reverse=True)
    assert [c.id for c in listed] == sorted((c.id for c in listed), reverse=True)
    assert saver.verify().ok


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_operations_agree_with_a_model(tmp_path: Path, seed: int) -> None:
    """Puts, steps and deletes on a few threads (seeded); after each one, every read agrees
    with a plain Python model, and ``get`` is ``list(...)[0]``."""
    rng = random.Random(seed)
    clock = SteppingClock()
    model: dict[str, list[Checkpoint]] = {}
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    with LogSaver.open(tmp_path / "log", clock=clock) as s:
        for _ in range(120):
            thread = rng.choice(["a", "b", "c"])
            clock.now += rng.choice([0.0, 0.0, -5.0, 0.000001, 3.0])
            roll = rng.random()
            if roll < 0.55:
                cp = s.put(thread, {"n": rng.randrange(1000), "t": (1, 2)})
                model.setdefault(thread, []).append(cp)
            elif roll < 0.8:
                key = rng.choice(["x", "y", "z"])
                s.put_step(thread, key, {"v": rng.randrange(100)})
                steps.setdefault(thread, {})[key] = s.get_step(thread, key).state
            else:
                s.delete(thread)
                model.pop(thread, None)
                steps.pop(thread, None)
            for t in ("a", "b", "c"):
                expected = list(reversed(model.get(t, [])))
                listed = s.list(t, limit=1000)
                assert listed == expected
                assert s.get(t) == (expected[0] if expected else None)
                if expected:
                    pick = rng.randrange(len(expected))
                    assert s.list(t, before=expected[pick].id, limit=1000) == expected[pick + 1 :]
                    assert s.get(t, expected[pick].id) == expected[pick]
                assert {r.step_key: r.state for r in s.list_steps(t)} == steps.get(t, {})
        assert s.verify().ok


def test_step_reads_return_new_objects(saver: LogSaver) -> None:
    rec = saver.put_step("t", "k", {"v": [1, 2]})
    rec.state["v"].append(3)
    got = saver.get_step("t", "k")
    assert got is not None
    got.state["v"].append(4)
    saver.list_steps("t")[0].state["v"].append(5)
    assert saver.get_step("t", "k") == StepRecord("t", "k", rec.created_at, {"v": [1, 2]})


def test_reads_cost_frames_independent_of_history(saver: LogSaver) -> None:
    """``get`` reads one frame and ``list(limit=n)`` at most 2n (the frames ending at the
    head, read at once; here half are steps), however long the history."""
    for i in range(300):
        saver.put("t", {"i": i})
        saver.put_step("t", f"s{i % 7}", {"i": i})
    reads: list[int] = []
    real = saver.log.decode_stored  # (every frame read, however it is read, is decoded here)

    def counting(stream: str, gseq: int, data: bytes, where: Any = None) -> Any:
        sf = real(stream, gseq, data, where)
        reads.append(sf.seq)
        return sf

    saver.log.decode_stored = counting  # type: ignore[method-assign]
    latest = saver.get("t")
    assert latest is not None
    assert len(reads) == 1
    reads.clear()
    assert len(saver.list("t", limit=5)) == 5
    assert len(reads) == 10
    reads.clear()
    assert saver.get("t", latest.id) == latest
    assert len(reads) == 1
    reads.clear()
    assert saver.get_step("t", "s3") is not None
    assert len(reads) == 1


def test_delete_keeps_history_for_forensics(saver: LogSaver) -> None:
    a = saver.put("t", {"i": 0})
    saver.put_step("t", "k", {"v": 1})
    b = saver.put("t", {"i": 1}, parent_id=a.id)
    saver.delete("t")
    c = saver.put("t", {"i": 2})
    history = list(saver.history("t"))
    assert [h.kind for h in history] == ["checkpoint", "step", "checkpoint", "delete", "checkpoint"]
    assert [h.seq for h in history] == [1, 2, 3, 4, 5]
    assert [h.checkpoint for h in history if h.checkpoint] == [a, b, c]
    assert history[1].step is not None
    assert history[1].step.state == {"v": 1}
    assert saver.list("t") == [c]
    assert saver.get("t", a.id) is None
    assert list(saver.history("never-saved")) == []
    with pytest.raises(TypeError, match=r"^thread_id must be a string$"):
        saver.history(None)  # type: ignore[arg-type]
    report = saver.verify()
    assert report.ok, str(report)


def test_verify_finds_a_head_row_that_is_not_the_fold(saver: LogSaver) -> None:
    saver.put("t", {"i": 0})
    saver.put("t", {"i": 1})
    assert saver.verify().ok
    (key, row), *_ = _rows(saver, b"h")

    def tamper(txn: WriteTxn) -> None:
        txn.put(TABLE, key, row[:1] + b"\x01" + row[2:])  # the head now points at seq 1

    saver.log.backend.run_write(tamper)
    report = saver.verify()
    assert not report.ok
    assert any(
        p.kind == "projection" and "the fold of the frames gives" in p.detail
        for p in report.problems
    )


def _rows(saver: LogSaver, prefix: bytes) -> list[tuple[bytes, bytes]]:
    with saver.log.backend.read() as txn:
        return list(txn.scan_prefix(TABLE, prefix))


# Frames as stored (format of eventlog.integrations.techrevati): any change to these bytes is a
# format change, so old logs must still decode through the structs below.
GOLDEN = [
    (
        "94a26576b5746563687265766174692e636865636b706f696e7486a26964d920303030303030303030"
        "3030303030303261626162616261626162616261626162aa637265617465645f6174d920323032332d"
        "31312d31345432323a31333a32302e3030303030312b30303a3030a57374617465c4087b2269223a20"
        "317da86d65746164617461c4027b7da9706172656e745f6964c0a47072657601cb3ff8000000000000",
        Event(
            name=tr.CHECKPOINT,
            data=tr._Checkpoint(
                id="0000000000000002" + "ab" * 8,
                created_at="2023-11-14T22:13:20.000001+00:00",
                state=b'{"i": 1}',
                metadata=b"{}",
                prev=1,
            ),
            at=1.5,
        ),
    ),
    (
        "94a26576af746563687265766174692e7374657083a36b6579a16baa637265617465645f6174d92032"
        "3032332d31312d31345432323a31333a32302e3030303030322b30303a3030a57374617465c4087b22"
        "76223a20317dcb4004000000000000",
        Event(
            name=tr.STEP,
            data=tr._Step(
                key="k", created_at="2023-11-14T22:13:20.000002+00:00", state=b'{"v": 1}'
            ),
            at=2.5,
        ),
    ),
    (
        "94a26576b1746563687265766174692e64656c657465c0cb400c000000000000",
        Event(name=tr.DELETE, data=None, at=3.5),
    ),
]


@pytest.mark.parametrize(("golden", "frame"), GOLDEN, ids=["checkpoint", "step", "delete"])
def test_frame_bytes_are_pinned(golden: str, frame: Event) -> None:
    serializer: Serializer[Any] = Serializer(Frame)
    assert serializer.encode(frame).hex() == golden
    decoded = serializer.decode(bytes.fromhex(golden))
    assert decoded.name == frame.name
    if frame.data is not None:
        assert msgspec.convert(decoded.data, type(frame.data)) == frame.data
    head = tr._Head(cp=3, base=2, clock=1_700_000_000_000_001)
    assert msgspec.msgpack.encode(head).hex() == "930302cf00060a24181e4001"


def test_thread_ids_longer_than_the_key_limit(saver: LogSaver) -> None:
    long_id = "t" * 600
    with pytest.raises(InvalidStreamKey, match="above the backend limit of 510"):  # (the fold)
        saver.put(long_id, {})
    assert saver.get(long_id) is None
    assert saver.list(long_id) == []
    assert saver.list_steps(long_id) == []
    saver.delete(long_id)
    assert saver.log.stats().frames == 0


def test_a_state_too_large_for_a_frame_is_refused_alone() -> None:
    with LogSaver.on_backend(MemoryBackend(), frame_bytes_max=4096) as s:
        s.put("t", {"small": 1})
        with pytest.raises(FrameTooLarge, match="above frame_bytes_max=4096"):
            s.put("t", {"big": "x" * 10_000})
        assert [c.state for c in s.list("t")] == [{"small": 1}]
        assert s.put("t", {"small": 2}).state == {"small": 2}
        assert s.verify().ok


def test_a_log_without_the_table_is_refused(tmp_path: Path) -> None:
    log = EventLog.open(tmp_path / "plain")
    try:
        with pytest.raises(CheckpointError, match=r"has no 'techrevati' table .*extra_tables="):
            LogSaver(log)
    finally:
        log.close()
    shared = EventLog.open(tmp_path / "shared", extra_tables=("techrevati",))
    saver = LogSaver(shared)
    saver.put("t", {"x": 1})
    saver.close()  # not its log: still open
    assert saver.get("t") is not None
    shared.close()


def _failing_backend() -> FaultyBackend:
    """A memory store whose commits fail while ``failing`` (a full or broken disk)."""
    return FaultyBackend(
        MemoryBackend(),
        error=lambda: OSError(errno.ENOSPC, "injected: " + os.strerror(errno.ENOSPC)),
    )


def test_storage_failures_are_oserrors_and_runtime_dependency_failures() -> None:
    backend = _failing_backend()
    saver = LogSaver.on_backend(backend)
    sink = RingBufferEventSink()
    agent = AgentSession(role="writer", phase="draft", saver=saver, event_sink=sink)
    saver.put("t", {"ok": True})
    backend.failing = True
    with pytest.raises(OSError, match="No space left on device") as caught:
        saver.put("t", {"lost": True})
    assert isinstance(caught.value, StorageError)
    with (
        pytest.raises(StorageError, match="No space left on device"),
        agent.session(thread_id="t") as session,
    ):
        session.run_turn(lambda: "answer", model="m", idempotency_key="k1")
    failed = [e for e in sink.events if e.failure_class is not None]
    assert [e.failure_class for e in failed] == [AgentFailureClass.DEPENDENCY_FAILED]
    backend.failing = False
    assert [c.state for c in saver.list("t")] == [{"ok": True}]
    saver.close()


# -- a real AgentSession ---------------------------------------------------------------------------


def test_agent_session_replays_an_idempotent_turn_from_the_log(tmp_path: Path) -> None:
    calls: list[str] = []

    def answer() -> dict[str, Any]:
        calls.append("called")
        return {"text": "hello", "pair": (1, 2)}

    with LogSaver.open(tmp_path / "log") as saver:
        agent = AgentSession(role="writer", phase="draft", saver=saver)
        with agent.session(thread_id="conv-1") as session:
            first, _ = session.run_turn(answer, model="m", idempotency_key="turn-1")
        assert calls == ["called"]
        assert first == {"text": "hello", "pair": (1, 2)}
    with LogSaver.open(tmp_path / "log") as saver:  # a new process would do the same
        agent = AgentSession(role="writer", phase="draft", saver=saver)
        with agent.session(thread_id="conv-1") as session:
            again, usage = session.run_turn(answer, model="m", idempotency_key="turn-1")
            other, _ = session.run_turn(answer, model="m", idempotency_key="turn-2")
        assert calls == ["called", "called"]  # turn-1 replayed from the log, turn-2 ran
        assert again == {"text": "hello", "pair": [1, 2]}  # the JSON round trip
        assert usage.input_tokens == 0
        assert other == {"text": "hello", "pair": (1, 2)}  # ran live: the function's value
        latest = saver.get("conv-1")
        assert latest is not None
        assert latest.metadata == {"status": "completed", "model": "m", "idempotency_key": "turn-2"}
        assert [c.metadata["idempotency_key"] for c in saver.list("conv-1")] == ["turn-2", "turn-1"]


# -- the docs run -------------------------------------------------------------------------------

DOC = REPO / "docs" / "integrations" / "techrevati.md"


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(code, id=f"{DOC.name}-{n}")
        for n, code in enumerate(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S))
    ],
)
def test_doc_block_runs(code: str) -> None:
    exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_test__"})


# -- resume after SIGKILL --------------------------------------------------------------------------

AGENT_THREAD = "agent-1"
TURNS = 4
LINE_SECONDS_MAX = 30.0


def turn_result(k: int) -> dict[str, Any]:
    return {"turn": k, "text": f"answer {k}", "pair": (k, -k)}


def emit(line: str) -> None:
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def agent_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--hold-turn", type=int, default=0, help="block inside this turn")
    args = parser.parse_args(argv)
    saver = LogSaver.open(args.path)
    agent = AgentSession(role="writer", phase="draft", saver=saver)
    with agent.session(thread_id=AGENT_THREAD) as session:
        for k in range(1, args.turns + 1):

            def work(k: int = k) -> dict[str, Any]:
                emit(f"start {k}")
                if k == args.hold_turn:
                    time.sleep(LINE_SECONDS_MAX)  # a long model call: the test kills us here
                return turn_result(k)

            session.run_turn(work, model="m", idempotency_key=f"turn-{k}")
            emit(f"done {k}")
            if not sys.stdin.readline():  # the test says when to take the next turn
                break
    saver.close()
    return 0


class Agent:
    def __init__(self, path: Path, hold_turn: int) -> None:
        cmd = [sys.executable, str(HERE), "agent", str(path), "--turns", str(TURNS)]
        self.proc = subprocess.Popen(
            [*cmd, "--hold-turn", str(hold_turn)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
        )

    def expect(self, line: str) -> None:
        assert self.proc.stdout is not None
        timer = threading.Timer(LINE_SECONDS_MAX, self.proc.kill)
        timer.start()
        try:
            got = self.proc.stdout.readline().decode().strip()
        finally:
            timer.cancel()
        assert got == line, f"agent printed {got!r}, expected {line!r}"

    def next_turn(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"next\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=LINE_SECONDS_MAX)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        assert self.proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("seed", [2, 5, 6, 7])  # kills after turns 1, 3 (mid-turn), 3, 2
def test_agent_resumes_after_sigkill(tmp_path: Path, seed: int) -> None:
    """The agent is killed after turn ``k`` returned (between turns) or while turn ``k + 1``
    runs (seeded). A new session replays every acknowledged turn from the log without calling
    its function, and runs the rest."""
    rng = random.Random(seed)
    acked = rng.randint(1, TURNS - 1)
    mid_turn = rng.random() < 0.5
    path = tmp_path / "log"
    agent = Agent(path, hold_turn=acked + 1 if mid_turn else 0)
    try:
        for k in range(1, acked + 1):
            agent.expect(f"start {k}")
            agent.expect(f"done {k}")
            if k < acked:
                agent.next_turn()
        if mid_turn:
            agent.next_turn()
            agent.expect(f"start {acked + 1}")  # killed inside the model call
    finally:
        agent.kill()

    calls: list[int] = []
    with LogSaver.open(path) as saver:
        report = saver.verify()
        assert report.ok, str(report)
        keys = [c.metadata["idempotency_key"] for c in saver.list(AGENT_THREAD)]
        assert keys == [f"turn-{k}" for k in range(acked, 0, -1)]  # durable when acknowledged
        agent_session = AgentSession(role="writer", phase="draft", saver=saver)
        with agent_session.session(thread_id=AGENT_THREAD) as session:
            for k in range(1, TURNS + 1):

                def work(k: int = k) -> dict[str, Any]:
                    calls.append(k)
                    return turn_result(k)

                result, _ = session.run_turn(work, model="m", idempotency_key=f"turn-{k}")
                live = turn_result(k)
                assert result == (live if k in calls else json.loads(json.dumps(live)))
        assert calls == list(range(acked + 1, TURNS + 1))
        assert len(saver.list(AGENT_THREAD, limit=100)) == TURNS
        assert saver.verify().ok


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "agent":
        raise SystemExit(agent_main(sys.argv[2:]))
    raise SystemExit(f"usage: {sys.argv[0]} agent PATH --turns N")
