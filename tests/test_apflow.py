"""apflow 0.24's ``CheckpointManager`` contract, on ckptlog's ``LogCheckpointManager``.

:class:`ManagerContract` pins the methods apflow's ``TaskManager`` and ``RetryManager`` call; it
runs against ``LogCheckpointManager`` (LMDB and memory) and, unchanged, against apflow's own
``CheckpointManager`` on a SQLite session, so the messages it pins are apflow's. Then a real
``TaskManager`` runs a task with ours injected (a retryable failure, a checkpoint saved, a retry
that resumes from it, a delete on success), apflow's ``TaskExecutor`` builds its managers with
ours in place of its own, and a worker killed with SIGKILL between a save and the next attempt
resumes from the log.

This module is also the crash test's worker: ``python tests/test_apflow.py worker DB LOG
--hold-after N`` runs task ``t1`` (two retryable failures) and prints ``saved <id>`` after each
checkpoint save returned (durable); after the N-th it waits inside apflow's retry callback,
before the next attempt, for the test's SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import errno
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
from apflow import create_session
from apflow.core.base import BaseTask
from apflow.core.config import set_durability_enabled
from apflow.core.execution.errors import ExecutorError, http_error_info
from apflow.core.execution.task_creator import TaskCreator
from apflow.core.execution.task_executor import TaskExecutor
from apflow.core.execution.task_manager import TaskManager
from apflow.core.extensions.decorators import executor_register
from apflow.core.storage.sqlalchemy.models import TaskCheckpointModel, TaskModel
from apflow.core.storage.sqlalchemy.task_repository import TaskRepository
from apflow.durability import CheckpointManager, RetryManager

from backends.base import WriteTxn
from backends.memory import MemoryBackend
from backends.testing import FaultyBackend
from eventlog.codec import Serializer
from eventlog.errors import CheckpointError, InvalidStreamKey, StorageError
from eventlog.frames import Event, Frame
from eventlog.integrations import apflow as ap
from eventlog.integrations.apflow import TABLE, LogCheckpointManager, install_in_task_executor
from eventlog.log import EventLog

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


# -- the contract ----------------------------------------------------------------------------------


class ManagerContract:
    """Every checkpoint manager here passes these; subclasses implement ``make_manager``."""

    def make_manager(self, tmp_path: Path) -> Any:
        raise NotImplementedError

    def close_manager(self, manager: Any) -> None:
        """Release what ``make_manager`` opened."""

    def tick(self) -> None:
        """Called between saves whose order a test checks. apflow's own manager loads the
        newest by ``created_at``, so it needs the clock to move between two saves."""

    @pytest.fixture
    def manager(self, tmp_path: Path) -> Iterator[Any]:
        m = self.make_manager(tmp_path)
        yield m
        self.close_manager(m)

    async def saves(self, manager: Any, task_id: str, n: int) -> list[str]:
        ids = []
        for i in range(n):
            ids.append(await manager.save_checkpoint(task_id, {"i": i}))
            self.tick()
        return ids

    def test_save_returns_a_uuid(self, manager: Any) -> None:
        checkpoint_id = run(manager.save_checkpoint("t", {"step": 1}))
        assert isinstance(checkpoint_id, str)
        assert len(checkpoint_id) == 36
        assert str(uuid.UUID(checkpoint_id)) == checkpoint_id

    def test_load_is_none_without_checkpoints(self, manager: Any) -> None:
        assert run(manager.load_checkpoint("t")) is None

    def test_load_returns_the_newest_save(self, manager: Any) -> None:
        run(self.saves(manager, "t", 4))
        assert run(manager.load_checkpoint("t")) == {"i": 3}
        run(manager.save_checkpoint("u", {"other": True}))
        assert run(manager.load_checkpoint("t")) == {"i": 3}

    def test_load_returns_a_new_dict_equal_to_the_json_round_trip(self, manager: Any) -> None:
        data: dict[Any, Any] = {1: (2, 3), "nested": {"k": [None, 1.5, "é"]}, "big": 2**70}
        run(manager.save_checkpoint("t", data))
        data["nested"]["k"].append("after")  # the caller's dict is not what was stored
        first = run(manager.load_checkpoint("t"))
        assert first == {"1": [2, 3], "nested": {"k": [None, 1.5, "é"]}, "big": 2**70}
        first["nested"]["k"].clear()
        assert run(manager.load_checkpoint("t"))["nested"]["k"] == [None, 1.5, "é"]

    def test_step_name_and_base64_binary_are_accepted(self, manager: Any) -> None:
        blob = base64.b64encode(b"\x00\xffhello").decode()
        run(manager.save_checkpoint("t", {"binary": blob}, step_name="fetch"))
        loaded = run(manager.load_checkpoint("t"))
        assert base64.b64decode(loaded["binary"]) == b"\x00\xffhello"

    def test_delete_counts_and_hides_every_checkpoint(self, manager: Any) -> None:
        run(self.saves(manager, "t", 3))
        run(manager.save_checkpoint("u", {"keep": True}))
        assert run(manager.delete_checkpoints("t")) == 3
        assert run(manager.load_checkpoint("t")) is None
        assert run(manager.delete_checkpoints("t")) == 0
        assert run(manager.delete_checkpoints("never-saved")) == 0
        assert run(manager.load_checkpoint("u")) == {"keep": True}
        run(manager.save_checkpoint("t", {"again": 1}))
        assert run(manager.load_checkpoint("t")) == {"again": 1}
        assert run(manager.delete_checkpoints("t")) == 1

    @pytest.mark.parametrize(
        ("call", "exc", "message"),
        [
            (lambda m: m.save_checkpoint("", {}), ValueError, r"task_id must be non-empty"),
            (lambda m: m.save_checkpoint(None, {}), ValueError, r"task_id must be non-empty"),
            (lambda m: m.load_checkpoint(""), ValueError, r"task_id must be non-empty"),
            (lambda m: m.delete_checkpoints(""), ValueError, r"task_id must be non-empty"),
            (
                lambda m: m.save_checkpoint("t", [("a", 1)]),
                TypeError,
                r"data must be a dict, got <class 'list'>",
            ),
            (
                lambda m: m.save_checkpoint("t", {"f": object()}),
                ValueError,
                r"Checkpoint data is not JSON-serializable: Object of type object is not "
                r"JSON serializable",
            ),
            (
                lambda m: m.save_checkpoint("t", _circular()),
                ValueError,
                r"Checkpoint data is not JSON-serializable: Circular reference detected",
            ),
            (  # the task id is checked first
                lambda m: m.save_checkpoint("", [1]),
                ValueError,
                r"task_id must be non-empty",
            ),
        ],
    )
    def test_validation_errors_are_apflows(
        self,
        manager: Any,
        call: Callable[[Any], Awaitable[Any]],
        exc: type[Exception],
        message: str,
    ) -> None:
        run(manager.save_checkpoint("t", {"before": True}))
        with pytest.raises(exc, match=f"^{message}$"):
            run(call(manager))
        assert run(manager.load_checkpoint("t")) == {"before": True}  # nothing written


class PersistentManagerContract(ManagerContract):
    """Managers whose checkpoints survive closing and reopening (apflow's ``test_checkpoint_
    persists_across_sessions``)."""

    def test_checkpoints_survive_reopen(self, tmp_path: Path) -> None:
        m = self.make_manager(tmp_path)
        run(self.saves(m, "t", 2))
        self.close_manager(m)
        m = self.make_manager(tmp_path)
        try:
            assert run(m.load_checkpoint("t")) == {"i": 1}
            assert run(m.delete_checkpoints("t")) == 2
        finally:
            self.close_manager(m)


def _circular() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["self"] = [d]
    return d


class TestLogManagerLmdb(PersistentManagerContract):
    def make_manager(self, tmp_path: Path) -> LogCheckpointManager:
        return LogCheckpointManager.open(tmp_path / "log")

    def close_manager(self, manager: Any) -> None:
        manager.close()


class TestLogManagerMemory(ManagerContract):
    def make_manager(self, tmp_path: Path) -> LogCheckpointManager:
        return LogCheckpointManager.on_backend(MemoryBackend())

    def close_manager(self, manager: Any) -> None:
        manager.close()


class TestLogManagerPostgres(PersistentManagerContract):
    """The same contract on a PostgreSQL log (``LogCheckpointManager.open(url)``)."""

    @pytest.fixture(autouse=True)
    def _schemas(self, pg_schemas: Any) -> None:
        self.schemas = pg_schemas

    def make_manager(self, tmp_path: Path) -> LogCheckpointManager:
        return LogCheckpointManager.open(self.schemas.url(tmp_path), durability="process")

    def close_manager(self, manager: Any) -> None:
        manager.close()

    def test_a_load_is_two_statements_outside_a_transaction(
        self, manager: LogCheckpointManager, pg_statements: list[str]
    ) -> None:
        """``load_checkpoint`` locates the task (its id and head row: one statement) and reads
        the checkpoint's frame (its index row and log row: one statement), where it took two
        read transactions (8 round trips)."""
        run(self.saves(manager, "t", 3))
        pg_statements.clear()
        assert run(manager.load_checkpoint("t")) == {"i": 2}
        assert run(manager.load_checkpoint("nobody")) is None
        assert len(pg_statements) == 3, pg_statements
        assert "BEGIN" not in pg_statements, pg_statements


class TestApflowCheckpointManager(PersistentManagerContract):
    """The contract is apflow's: its own SQLAlchemy manager passes it too (its table has a
    foreign key to the tasks table, so the tasks are created first)."""

    def make_manager(self, tmp_path: Path) -> CheckpointManager:
        session = create_session(path=str(tmp_path / "apflow.db"))
        for task_id in ("t", "u"):
            if session.get(TaskModel, task_id) is None:
                session.add(TaskModel(id=task_id, name=task_id))
        session.commit()
        return CheckpointManager(session)

    def close_manager(self, manager: Any) -> None:
        manager._db.close()
        manager._db.get_bind().dispose()

    def tick(self) -> None:
        time.sleep(0.001)


# -- what only LogCheckpointManager guarantees -----------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LogCheckpointManager]:
    m = LogCheckpointManager.open(tmp_path / "log")
    yield m
    m.close()


def test_call_order_is_commit_order(store: LogCheckpointManager) -> None:
    """Concurrent saves of one task: the last one called is the one loaded."""

    async def main() -> None:
        await asyncio.gather(*(store.save_checkpoint("t", {"i": i}) for i in range(50)))

    run(main())
    assert run(store.load_checkpoint("t")) == {"i": 49}
    assert [a.n for a in store.history("t")] == list(range(1, 51))


def test_history_keeps_every_attempt_after_delete(store: LogCheckpointManager) -> None:
    first = run(store.save_checkpoint("t", {"done": ["a"]}, "fetch", attempt=1))
    second = run(store.save_checkpoint("t", {"done": ["a", "b"]}, step_name="parse", attempt=2))
    assert run(store.delete_checkpoints("t")) == 2
    third = run(store.save_checkpoint("t", {"done": []}))
    history = store.history("t")
    assert [(a.kind, a.checkpoint_id, a.step_name, a.attempt, a.n) for a in history] == [
        ("checkpoint", first, "fetch", 1, 1),
        ("checkpoint", second, "parse", 2, 2),
        ("delete", None, None, None, 2),
        ("checkpoint", third, None, None, 1),
    ]
    assert history[1].data == {"done": ["a", "b"]}  # hidden from load, kept for replay
    assert run(store.load_checkpoint("t")) == {"done": []}
    frames = store.log.stats().frames
    assert run(store.delete_checkpoints("never-saved")) == 0
    assert store.log.stats().frames == frames  # nothing live: nothing appended
    assert store.history("never-saved") == []
    report = store.verify()
    assert report.ok, str(report)


def test_verify_finds_a_head_row_that_is_not_the_fold(store: LogCheckpointManager) -> None:
    run(store.save_checkpoint("t", {"i": 0}))
    run(store.save_checkpoint("t", {"i": 1}))
    assert store.verify().ok
    with store.log.backend.read() as txn:
        ((key, _),) = txn.scan(TABLE)

    def tamper(txn: WriteTxn) -> None:
        txn.put(TABLE, key, b"\x92\x01\x01")  # msgpack [1, 1]: latest seq 1, one live

    store.log.backend.run_write(tamper)
    assert run(store.load_checkpoint("t")) == {"i": 0}  # reads trust the row...
    report = store.verify()  # ...verify does not
    assert any("apflow head row is" in p.detail for p in report.problems), str(report)


# Frames as stored (format of eventlog.integrations.apflow): any change to these bytes is a
# format change, so old logs must still decode through the structs below.
GOLDEN = [
    (
        "94a26576b16170666c6f772e636865636b706f696e7485a26964d92431323334353637382d31323334"
        "2d343233342d383233342d313233343536373839616263a464617461c4137b22646f6e65223a205b22"
        "6665746368225d7da9737465705f6e616d65a56665746368a7617474656d707402a16e01cb3ff80000"
        "00000000",
        Event(
            name=ap.CHECKPOINT,
            data=ap._Saved(
                id="12345678-1234-4234-8234-123456789abc",
                data=b'{"done": ["fetch"]}',
                step_name="fetch",
                attempt=2,
                n=1,
            ),
            at=1.5,
        ),
    ),
    (
        "94a26576ad6170666c6f772e64656c65746581a5636f756e7402cb4004000000000000",
        Event(name=ap.DELETE, data=ap._Deleted(count=2), at=2.5),
    ),
]


@pytest.mark.parametrize(("golden", "frame"), GOLDEN, ids=["checkpoint", "delete"])
def test_frame_bytes_are_pinned(golden: str, frame: Event) -> None:
    serializer: Serializer[Any] = Serializer(Frame)
    assert serializer.encode(frame).hex() == golden
    decoded = serializer.decode(bytes.fromhex(golden))
    assert decoded.name == frame.name
    assert msgspec.convert(decoded.data, type(frame.data)) == frame.data
    assert msgspec.msgpack.encode(ap._Head(latest=3, live=2)).hex() == "920302"


def test_extension_argument_errors(store: LogCheckpointManager) -> None:
    with pytest.raises(TypeError, match=r"^step_name must be a str or None, got int$"):
        run(store.save_checkpoint("t", {}, 5))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^attempt must be an int or None, got str$"):
        run(store.save_checkpoint("t", {}, attempt="2"))  # type: ignore[arg-type]
    with pytest.raises(InvalidStreamKey, match=r"^task_id must be a str, got int"):
        run(store.save_checkpoint(7, {}))  # type: ignore[arg-type]
    with pytest.raises(InvalidStreamKey, match="above the backend limit of 510"):  # (the fold)
        run(store.save_checkpoint("t" * 600, {}))
    assert run(store.load_checkpoint("t" * 600)) is None
    assert run(store.delete_checkpoints("t" * 600)) == 0
    assert store.log.stats().frames == 0


def test_a_log_without_the_table_is_refused(tmp_path: Path) -> None:
    log = EventLog.open(tmp_path / "plain")
    try:
        with pytest.raises(CheckpointError, match=r"has no 'apflow' table .*extra_tables="):
            LogCheckpointManager(log=log)
    finally:
        log.close()


def _failing_backend() -> FaultyBackend:
    """A memory store whose commits fail while ``failing`` (a full or broken disk)."""
    return FaultyBackend(
        MemoryBackend(), error=lambda: OSError(errno.EIO, "injected: " + os.strerror(errno.EIO))
    )


def test_storage_failures_are_oserrors() -> None:
    backend = _failing_backend()
    with LogCheckpointManager.on_backend(backend) as m:
        run(m.save_checkpoint("t", {"ok": True}))
        backend.failing = True
        with pytest.raises(OSError, match="Input/output error") as caught:
            run(m.save_checkpoint("t", {"lost": True}))
        assert isinstance(caught.value, StorageError)
        backend.failing = False
        assert run(m.load_checkpoint("t")) == {"ok": True}


# -- a real apflow task ----------------------------------------------------------------------------

STEPS_EXECUTOR = "ckptlog_steps"


@dataclass
class Plan:
    """How a task's executor behaves, and what it saw (keyed by task id)."""

    fail: dict[str, int]  # step -> how many more times it fails (retryably)
    resumed: list[Any] = field(default_factory=list)  # the checkpoint each attempt resumed from


PLANS: dict[str, Plan] = {}


@executor_register(override=True)
class StepsExecutor(BaseTask):
    """Runs ``inputs["steps"]`` in order; a step may fail with a retryable upstream 503. Its
    checkpoint is the list of steps done, so a retry resumes after them."""

    id = STEPS_EXECUTOR
    name = "Steps (ckptlog tests)"
    description = "runs named steps, failing where the test's plan says"

    def __init__(self, inputs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(inputs=inputs, **kwargs)
        self.done: list[str] = []
        self.resumed: dict[str, Any] | None = None

    def supports_checkpoint(self) -> bool:
        return True

    def get_checkpoint(self) -> dict[str, Any]:
        return {"done": list(self.done)}

    async def resume_from_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.resumed = checkpoint
        self.done = list(checkpoint["done"])

    async def execute(self, inputs: dict[str, Any]) -> dict[str, Any]:
        plan = PLANS[str(self.task_id)]
        plan.resumed.append(self.resumed)
        for step in inputs["steps"]:
            if step in self.done:
                continue
            if plan.fail.get(step, 0) > 0:
                plan.fail[step] -= 1
                raise ExecutorError(
                    f"upstream 503 during {step}", error_info=http_error_info(503, "GET")
                )
            self.done.append(step)
        return {"done": self.done}

    def get_input_schema(self) -> dict[str, Any]:
        return {}

    def get_output_schema(self) -> dict[str, Any]:
        return {}


def task_spec(task_id: str, *, backoff_seconds: float = 0.1) -> dict[str, Any]:
    return {
        "id": task_id,
        "name": task_id,
        "params": {"executor_id": STEPS_EXECUTOR},
        "inputs": {"steps": ["fetch", "parse", "store"]},
        "max_attempts": 3,
        "backoff_base_seconds": backoff_seconds,
    }


def apflow_checkpoint_rows(session: Any) -> int:
    return int(session.query(TaskCheckpointModel).count())


def test_task_manager_retries_and_resumes_from_the_log(tmp_path: Path) -> None:
    """Two retryable failures: after each, apflow's retry callback saves the executor's
    checkpoint to our store, the next attempt resumes from it, and success deletes it."""
    session = create_session(path=str(tmp_path / "apflow.db"))
    store = LogCheckpointManager.open(tmp_path / "log", session)
    PLANS["tm-1"] = Plan(fail={"parse": 1, "store": 1})
    try:
        manager = TaskManager(
            session, checkpoint_manager=store, retry_manager=RetryManager(checkpoint_manager=store)
        )

        async def main() -> None:
            tree = await TaskCreator(session).create_task_tree_from_array([task_spec("tm-1")])
            await manager.distribute_task_tree(tree)

        run(main())
        task = run(TaskRepository(session).get_task_by_id("tm-1"))
        assert task is not None
        assert (task.status, task.result) == ("completed", {"done": ["fetch", "parse", "store"]})
        assert PLANS["tm-1"].resumed == [None, {"done": ["fetch"]}, {"done": ["fetch", "parse"]}]
        assert run(store.load_checkpoint("tm-1")) is None  # deleted on success
        retries = [(a.kind, a.n, a.data) for a in store.history("tm-1")]
        assert retries == [
            ("checkpoint", 1, {"done": ["fetch"]}),
            ("checkpoint", 2, {"done": ["fetch", "parse"]}),
            ("delete", 2, None),
        ]
        assert apflow_checkpoint_rows(session) == 0  # ours stood in for apflow's table
        assert store.verify().ok
    finally:
        store.close()
        session.close()


def test_task_executor_builds_its_managers_with_ours(tmp_path: Path) -> None:
    """apflow's own wiring (``TaskExecutor`` with durability enabled, as ``create_app`` sets
    it) builds ``CheckpointManager(session)`` per execution; installed, ours stands there."""
    session = create_session(path=str(tmp_path / "apflow.db"))
    store = LogCheckpointManager.open(tmp_path / "log")
    PLANS["te-1"] = Plan(fail={"parse": 1})
    set_durability_enabled(True)
    restore = install_in_task_executor(store)
    try:

        async def main() -> dict[str, Any]:
            tree = await TaskCreator(session).create_task_tree_from_array([task_spec("te-1")])
            result: dict[str, Any] = await TaskExecutor().execute_task_tree(
                tree, "te-1", db_session=session
            )
            return result

        result = run(main())
    finally:
        restore()
        set_durability_enabled(False)
    try:
        assert result["status"] == "completed"
        assert result["result"] == {"done": ["fetch", "parse", "store"]}
        assert PLANS["te-1"].resumed == [None, {"done": ["fetch"]}]
        assert [(a.kind, a.data) for a in store.history("te-1")] == [
            ("checkpoint", {"done": ["fetch"]}),
            ("delete", None),
        ]
        assert apflow_checkpoint_rows(session) == 0
        built = TaskExecutor()._build_execution_components(session)
        assert built == {}  # restored: apflow's own wiring, durability off again
    finally:
        store.close()
        session.close()


# -- the docs run -------------------------------------------------------------------------------

DOC = REPO / "docs" / "integrations" / "apflow.md"


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(code, id=f"{DOC.name}-{n}")
        for n, code in enumerate(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S))
    ],
)
def test_doc_block_runs(code: str) -> None:
    exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_test__"})


# -- SIGKILL between a save and the next attempt ---------------------------------------------------

CRASH_TASK = "t1"
LINE_SECONDS_MAX = 30.0


class _AnnouncingManager(LogCheckpointManager):
    """Prints ``saved <id>`` once a save returned, i.e. once it is durable; after the
    ``hold_after``-th save it waits there (the test kills it before the next attempt)."""

    hold_after = 0
    saves = 0

    async def save_checkpoint(
        self,
        task_id: str,
        data: dict[str, Any],
        step_name: str | None = None,
        *,
        attempt: int | None = None,
    ) -> str:
        checkpoint_id = await super().save_checkpoint(task_id, data, step_name, attempt=attempt)
        os.write(sys.stdout.fileno(), f"saved {checkpoint_id}\n".encode())
        self.saves += 1
        if self.saves == self.hold_after:
            await asyncio.sleep(LINE_SECONDS_MAX)
        return checkpoint_id


def worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("log")
    parser.add_argument("--hold-after", type=int, required=True)
    args = parser.parse_args(argv)
    session = create_session(path=args.db)
    store = _AnnouncingManager.open(args.log, session)
    store.hold_after = args.hold_after
    PLANS[CRASH_TASK] = Plan(fail={"parse": 1, "store": 1})
    manager = TaskManager(
        session, checkpoint_manager=store, retry_manager=RetryManager(checkpoint_manager=store)
    )

    async def main() -> None:
        tree = await TaskCreator(session).create_task_tree_from_array([task_spec(CRASH_TASK)])
        await manager.distribute_task_tree(tree)

    asyncio.run(main())
    store.close()
    return 0


@pytest.mark.parametrize("kill_after_saves", [1, 2])
def test_worker_killed_between_save_and_next_attempt_resumes(
    tmp_path: Path, kill_after_saves: int
) -> None:
    db, log = tmp_path / "apflow.db", tmp_path / "log"
    worker_cmd = [sys.executable, str(HERE), "worker"]
    proc = subprocess.Popen(
        [*worker_cmd, str(db), str(log), "--hold-after", str(kill_after_saves)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # apflow logs each failed attempt's traceback
        cwd=REPO,
    )
    saved: list[str] = []
    try:
        assert proc.stdout is not None
        timer = threading.Timer(LINE_SECONDS_MAX * 2, proc.kill)
        timer.start()
        try:
            while len(saved) < kill_after_saves:
                line = proc.stdout.readline().decode()
                assert line.startswith("saved "), f"worker printed {line!r}"
                saved.append(line.split()[1])
        finally:
            timer.cancel()
    finally:
        proc.send_signal(signal.SIGKILL)  # the worker is between the save and the next attempt
        proc.wait(timeout=LINE_SECONDS_MAX)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL

    session = create_session(path=str(db))
    store = LogCheckpointManager.open(log, session)
    try:
        report = store.verify()
        assert report.ok, str(report)
        done = ["fetch", "parse", "store"][:kill_after_saves]
        assert run(store.load_checkpoint(CRASH_TASK)) == {"done": done}
        assert [a.checkpoint_id for a in store.history(CRASH_TASK)] == saved

        # apflow leaves the killed worker's task in_progress; an operator (or a recovery
        # sweep) puts it back to pending, and the next run resumes from the log.
        task = session.get(TaskModel, CRASH_TASK)
        assert task is not None
        assert task.status == "in_progress"
        task.status = "pending"
        session.commit()
        PLANS[CRASH_TASK] = Plan(fail={})
        manager = TaskManager(
            session, checkpoint_manager=store, retry_manager=RetryManager(checkpoint_manager=store)
        )

        async def resume() -> None:
            repo = TaskRepository(session)
            root = await repo.get_task_by_id(CRASH_TASK)
            assert root is not None
            await manager.distribute_task_tree(await repo.build_task_tree(root))

        run(resume())
        task = run(TaskRepository(session).get_task_by_id(CRASH_TASK))
        assert task is not None
        assert (task.status, task.result) == ("completed", {"done": ["fetch", "parse", "store"]})
        assert PLANS[CRASH_TASK].resumed[0] == {"done": done}
        assert run(store.load_checkpoint(CRASH_TASK)) is None
        assert [a.kind for a in store.history(CRASH_TASK)] == [
            *["checkpoint"] * kill_after_saves,
            "delete",
        ]
        assert store.verify().ok
    finally:
        store.close()
        session.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        raise SystemExit(worker_main(sys.argv[2:]))
    raise SystemExit(f"usage: {sys.argv[0]} worker DB LOG")
