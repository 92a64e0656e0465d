"""An apflow 0.24 ``CheckpointManager`` stand-in on the ckptlog log.

:class:`LogCheckpointManager` has the async methods apflow's ``TaskManager`` and
``RetryManager`` call (``save_checkpoint``, ``load_checkpoint``, ``delete_checkpoints``) and
accepts apflow's database session as an optional first argument, so it can stand wherever
apflow builds its own ``CheckpointManager(session)``. apflow has no registry hook for it: pass
it as ``TaskManager(..., checkpoint_manager=...)``, or let :func:`install_in_task_executor` put
it into the managers apflow's ``TaskExecutor`` builds. Retries and circuit breakers stay
apflow's.

Each task is one stream of the log, ``apflow:<task_id>``, of :class:`eventlog.frames.Event`
frames named ``apflow.checkpoint`` (one per saved attempt: id, JSON text, step name, attempt
number when given, ordinal since the last delete) and ``apflow.delete``.

Invariants:
- A save or delete is one frame built inside the write transaction against the task's head row
  (table ``apflow``: the latest live save and how many are live), written in that transaction;
  so ``load_checkpoint`` reads one row and one frame (the newest save in log order, whatever
  the clocks say) and ``delete_checkpoints`` counts exactly what it hides.
- Data is stored as apflow's own ``json.dumps(data)`` text and decoded on every load, so a
  load returns a new dict equal to the JSON round trip of the save (int keys become strings).
- Validation raises apflow's exception types and messages before anything is written; a save
  returns its 36-character id once it is durable. Storage failures raise
  :class:`eventlog.errors.StorageError` (an ``OSError``).
- ``delete_checkpoints`` appends a delete frame: loads no longer see the task's checkpoints, but
  :meth:`LogCheckpointManager.history` (and any reader of the log) still shows every saved
  attempt. Deleting a task with nothing live appends nothing and returns 0.
- Reads run in a worker thread; saves and deletes await a future the log's committer resolves.
- ``Event.data`` shapes evolve like frames: fields are only added, each with a default
  (decoding ignores fields it does not know); tests/test_apflow.py pins their bytes.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, Final

import msgspec

from backends.base import Backend, Durability, WriteTxn
from eventlog.errors import (
    CheckpointError,
    CorruptFrame,
    InvalidRecord,
    InvalidStreamKey,
    InvalidType,
)
from eventlog.frames import Event
from eventlog.integrations.headed import HeadedEventView, read_frame_now
from eventlog.log import Appended, DeferredFrame, EventLog, stream_key_bytes
from eventlog.reports import VerifyReport
from eventlog.validate import is_int
from projections import apflow as read_fold
from projections.apflow import CHECKPOINT, DELETE
from projections.apflow import Deleted as _Deleted
from projections.apflow import Head as _Head
from projections.apflow import Saved as _Saved
from projections.apflow import apply as _apply

__all__ = [
    "TABLE",
    "TABLES",
    "VIEW",
    "ApflowView",
    "LogCheckpointManager",
    "SavedAttempt",
    "install_in_task_executor",
]

TABLE: Final = "apflow"
TABLES: Final = (TABLE,)
STREAM_PREFIX: Final = "apflow:"


class SavedAttempt(msgspec.Struct, frozen=True):
    """One frame of a task, as :meth:`LogCheckpointManager.history` reports it."""

    seq: int
    kind: str  # "checkpoint" | "delete"
    at: float  # wall-clock time of the call (``time.time()``)
    checkpoint_id: str | None = None
    step_name: str | None = None
    attempt: int | None = None
    n: int = 0  # ordinal since the last delete (checkpoint) / how many it hid (delete)
    data: dict[str, Any] | None = None


def _check_task_id(task_id: Any) -> str:
    if not task_id:
        raise InvalidRecord("task_id must be non-empty")  # apflow's message (a ValueError)
    if not isinstance(task_id, str):
        raise InvalidStreamKey(
            f"task_id must be a str, got {type(task_id).__name__}; apflow task ids are strings"
        )
    return task_id


class ApflowView(HeadedEventView[_Head]):
    """apflow's materialized view: one :class:`_Head` per task (``eventlog.views.View``)."""

    def __init__(self) -> None:
        super().__init__(
            name="apflow",
            table=TABLE,
            stream_prefix=STREAM_PREFIX,
            event_prefix="apflow.",
            head_type=_Head,
            unit="task",
        )

    def step(self, head: _Head, frame: Any, seq: int) -> _Head:
        return _apply(head, frame, seq)

    def read_apply(self, state: Any, frame: Any) -> tuple[Any, str, str, str | None, str | None]:
        return tuple(read_fold.show(state, frame))


VIEW: Final = ApflowView()


def _head_key(sid: int) -> bytes:
    return VIEW.head_key(sid)


class _Write(DeferredFrame):
    """Reads the task's head row in the transaction, builds the frame, writes the new row."""

    __slots__ = ("head", "sid")

    def __init__(self) -> None:
        self.sid = 0
        self.head = _Head()

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> Event | None:
        self.sid = sid
        before = VIEW.read_head(txn, sid)
        return self.make(before if before is not None else _Head(), seq)

    def make(self, head: _Head, seq: int) -> Event | None:
        raise NotImplementedError

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        VIEW.write_head(txn, self.sid, self.head)


class _Save(_Write):
    __slots__ = ("saved",)

    def __init__(self, saved: _Saved) -> None:
        super().__init__()
        self.saved = saved

    def make(self, head: _Head, seq: int) -> Event:
        self.head = _Head(seq, head.live + 1)
        data = msgspec.structs.replace(self.saved, n=head.live + 1)
        return Event(name=CHECKPOINT, data=data, at=time.time())


class _Delete(_Write):
    __slots__ = ("count",)

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def make(self, head: _Head, seq: int) -> Event | None:
        self.count = head.live
        if head.live == 0:
            return None  # nothing live: append nothing, report 0
        self.head = _Head(0, 0)
        return Event(name=DELETE, data=_Deleted(count=head.live), at=time.time())


class LogCheckpointManager:
    """apflow's ``CheckpointManager`` methods on an :class:`EventLog`.

    ``db`` is apflow's database session, accepted so this class stands where apflow builds
    ``CheckpointManager(session)``; it is kept as ``self.db`` and never used (apflow's own
    manager also stamps ``checkpoint_at`` / ``resume_from`` on the task row; this one leaves
    apflow's database alone). ``log`` is required: a manager :meth:`open` ed on a path owns its
    log; :meth:`for_session` gives managers that share it.
    """

    def __init__(self, db: Any = None, *, log: EventLog, owns_log: bool = False) -> None:
        self.db = db
        self.log = log
        self._owns_log = owns_log
        self._max_key = log.backend.max_key_bytes
        try:
            with log.backend.read() as txn:
                txn.get(TABLE, _head_key(0))
        except CheckpointError as e:
            raise CheckpointError(
                f"the log at {log.backend.location!r} has no {TABLE!r} table ({e}); open it "
                "with EventLog.open(path, extra_tables=eventlog.integrations.apflow.TABLES) or "
                "use LogCheckpointManager.open(path)"
            ) from e

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        db: Any = None,
        *,
        durability: Durability | str = "fsync",
        readonly: bool = False,
        **options: Any,
    ) -> LogCheckpointManager:
        """Open (or create) the log in directory ``path``; ``close()`` closes it."""
        log = EventLog.open(
            path, durability=durability, readonly=readonly, extra_tables=TABLES, **options
        )
        return cls(db, log=log, owns_log=True)

    @classmethod
    def on_backend(cls, backend: Backend, db: Any = None, **options: Any) -> LogCheckpointManager:
        """A manager on any backend (e.g. ``backends.memory.MemoryBackend()``)."""
        return cls(db, log=EventLog(backend, **options), owns_log=True)

    def for_session(self, db: Any) -> LogCheckpointManager:
        """A manager for another apflow session, sharing this one's log (it does not close it)."""
        return LogCheckpointManager(db, log=self.log)

    # -- apflow's CheckpointManager ----------------------------------------------------------------

    async def save_checkpoint(
        self,
        task_id: str,
        data: dict[str, Any],
        step_name: str | None = None,
        *,
        attempt: int | None = None,
    ) -> str:
        """Save ``data`` as the task's newest checkpoint; returns its id once it is durable.

        ``attempt`` (an extension) records the attempt number with the save.
        """
        task_id = _check_task_id(task_id)
        if not isinstance(data, dict):
            raise InvalidType(f"data must be a dict, got {type(data)}")
        try:
            serialized = json.dumps(data)
        except (TypeError, ValueError) as e:
            raise InvalidRecord(f"Checkpoint data is not JSON-serializable: {e}") from e
        if step_name is not None and not isinstance(step_name, str):
            raise InvalidType(f"step_name must be a str or None, got {type(step_name).__name__}")
        if attempt is not None and not is_int(attempt):
            if isinstance(attempt, int) and not isinstance(attempt, bool):
                raise InvalidRecord(f"attempt must fit in 64 bits, got {attempt}")
            raise InvalidType(f"attempt must be an int or None, got {type(attempt).__name__}")
        stream = STREAM_PREFIX + task_id
        stream_key_bytes(stream, self._max_key)
        checkpoint_id = str(uuid.uuid4())
        saved = _Saved(
            id=checkpoint_id,
            data=serialized.encode("utf-8", "surrogatepass"),
            step_name=step_name,
            attempt=attempt,
        )
        await self.log.append_async(stream, _Save(saved))
        return checkpoint_id

    async def load_checkpoint(self, task_id: str) -> dict[str, Any] | None:
        """The data of the task's newest live checkpoint (a new dict), or ``None``."""
        task_id = _check_task_id(task_id)
        return await asyncio.to_thread(self._load, task_id)

    async def delete_checkpoints(self, task_id: str) -> int:
        """Hide the task's checkpoints from loads; returns how many were live.

        The frames stay in the log (see :meth:`history`).
        """
        task_id = _check_task_id(task_id)
        stream = STREAM_PREFIX + task_id
        if len(stream.encode("utf-8", "surrogatepass")) > self._max_key:
            return 0  # no task id this long can have been saved
        write = _Delete()
        await self.log.append_async(stream, write)
        return write.count

    # -- reading -----------------------------------------------------------------------------------

    def _load(self, task_id: str) -> dict[str, Any] | None:
        stream = STREAM_PREFIX + task_id
        found = VIEW.locate(self.log, stream)  # (two statements on a server: this, the frame)
        if found is None or found[1].latest == 0:
            return None
        sid, head = found
        sf = read_frame_now(self.log, stream, sid, head.latest)
        frame = sf.frame if sf is not None else None
        if not isinstance(frame, Event) or frame.name != CHECKPOINT:
            raise CorruptFrame(
                f"stream {stream!r}: the head row points at seq {head.latest}, which is not an "
                "apflow checkpoint frame; run LogCheckpointManager.verify()",
                stream=stream,
                seq=head.latest,
            )
        return _decode_data(msgspec.convert(frame.data, _Saved).data)

    def history(self, task_id: str) -> builtins.list[SavedAttempt]:
        """Every save and delete of the task, oldest first: the retry sequence, including the
        checkpoints ``delete_checkpoints`` hid."""
        task_id = _check_task_id(task_id)
        stream = STREAM_PREFIX + task_id
        if len(stream.encode("utf-8", "surrogatepass")) > self._max_key:
            return []
        out: builtins.list[SavedAttempt] = []
        for sf in self.log.read_stream(stream):
            frame = sf.frame
            _apply(_Head(), frame, sf.seq)  # raises on a frame that is not ours
            if frame.name == CHECKPOINT:
                s = msgspec.convert(frame.data, _Saved)
                out.append(
                    SavedAttempt(
                        sf.seq,
                        "checkpoint",
                        frame.at,
                        checkpoint_id=s.id,
                        step_name=s.step_name,
                        attempt=s.attempt,
                        n=s.n,
                        data=_decode_data(s.data),
                    )
                )
            else:
                d = msgspec.convert(frame.data, _Deleted)
                out.append(SavedAttempt(sf.seq, "delete", frame.at, n=d.count))
        return out

    def verify(self) -> VerifyReport:
        """The log's own checks, plus: every task's head row equals the fold of its frames, and
        no row belongs to a task without frames."""
        report = self.log.verify()
        report.problems.extend(VIEW.verify(self.log))
        return report

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the log if this manager opened it. Idempotent."""
        if self._owns_log:
            self.log.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> LogCheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> LogCheckpointManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _decode_data(raw: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(raw.decode("utf-8", "surrogatepass"))
    return value


def install_in_task_executor(
    manager: LogCheckpointManager, executor: Any = None
) -> Callable[[], None]:
    """Make apflow's ``TaskExecutor`` build its per-execution ``TaskManager`` s with ``manager``
    (through :meth:`LogCheckpointManager.for_session`) in place of ``CheckpointManager``.

    apflow builds its durability components only when durability is enabled
    (``apflow.core.config.set_durability_enabled(True)``, as ``apflow.app.create_app`` does);
    this replaces the checkpoint manager and the ``RetryManager`` that holds it, and keeps the
    circuit-breaker registry apflow chose. ``executor`` defaults to the ``TaskExecutor``
    singleton. Returns a function that restores apflow's own wiring.
    """
    from apflow.core.execution.task_executor import TaskExecutor  # noqa: PLC0415 - lazy
    from apflow.durability.retry import RetryManager  # noqa: PLC0415 - lazy

    target: Any = executor if executor is not None else TaskExecutor()  # type: ignore[no-untyped-call]
    original = target._build_execution_components
    shadowed = "_build_execution_components" in vars(target)  # someone overrode it already

    def build(db_session: Any) -> dict[str, Any]:
        components: dict[str, Any] = original(db_session)
        if "checkpoint_manager" in components:
            ours = manager.for_session(db_session)
            components["checkpoint_manager"] = ours
            components["retry_manager"] = RetryManager(checkpoint_manager=ours)
        return components

    target._build_execution_components = build

    def restore() -> None:
        if vars(target).get("_build_execution_components") is not build:
            return  # already restored, or overridden again since: leave that alone
        if shadowed:
            target._build_execution_components = original
        else:
            del target._build_execution_components

    return restore
