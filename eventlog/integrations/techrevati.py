"""techrevati-runtime's ``CheckpointSaver`` (and ``StepCheckpointSaver``) on the ckptlog log.

:class:`LogSaver` is a drop-in for ``techrevati.runtime.SqliteSaver``: pass it as
``AgentSession(saver=...)``. Each thread is one stream of the log, ``techrevati:<thread_id>``,
whose frames are :class:`eventlog.frames.Event` s named ``techrevati.checkpoint``,
``techrevati.step`` and ``techrevati.delete``.

Invariants:
- Every ``put`` / ``put_step`` / ``delete`` appends one frame (a delete with nothing live
  appends nothing), built inside the write transaction against the thread's head row (table
  ``techrevati``), so the order of the log is the order of the thread: a checkpoint id starts
  with its frame's seq (16 hex digits, then 16 random ones) and ``created_at`` is
  ``max(now, previous created_at + 1 µs)``. Ids,
  ``created_at`` and ``list`` order therefore agree, and ``get(t)`` equals ``list(t)[0]``
  whatever the clock does (both upstream savers order ties by a random id).
- The head row (latest checkpoint, latest delete, clock) and the step index are written in the
  same transaction as the frame; both are a fold of the stream, which :meth:`LogSaver.verify`
  checks. A checkpoint frame links to the previous live checkpoint, so ``get`` reads one row
  and one frame, and ``list`` reads ``limit`` frames, whatever the history holds.
- Values are stored as the JSON text the upstream savers store (``json.dumps(...,
  ensure_ascii=False)``); every read decodes that text again, so callers always get new
  objects equal to the JSON round trip of what they saved (tuples come back as lists).
- Validation raises upstream's exception types with upstream's messages, before anything is
  written. ``put`` and ``put_step`` return once their frame is durable; storage failures raise
  :class:`eventlog.errors.StorageError`, an ``OSError``, so the runtime classifies them as
  dependency failures.
- ``delete`` appends a delete frame; nothing is erased, so ``history`` still shows every
  checkpoint and step the thread had (forensic replay), while reads no longer see them.
- ``Event.data`` shapes evolve like frames: fields are only added, each with a default
  (decoding ignores fields it does not know); tests/test_techrevati.py pins their bytes.
"""

from __future__ import annotations

import builtins
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import msgspec
from techrevati.runtime import Checkpoint, StepRecord

from backends.base import Backend, Durability, WriteTxn
from eventlog.errors import CheckpointError, CorruptFrame, InvalidRecord, InvalidType
from eventlog.frames import Event
from eventlog.integrations.headed import read_frame_now
from eventlog.integrations.techrevati_store import (
    STREAM_PREFIX,
    TABLE,
    TABLES,
    VIEW,
    _step_digest,
    _steps_prefix,
)
from eventlog.layout import U64 as _U64
from eventlog.log import Appended, DeferredFrame, EventLog, stream_key_bytes
from eventlog.reports import VerifyReport
from projections.techrevati import CHECKPOINT, DELETE, STEP
from projections.techrevati import CheckpointData as _Checkpoint
from projections.techrevati import Head as _Head
from projections.techrevati import StepData as _Step
from projections.techrevati import apply as _apply

__all__ = ["TABLE", "TABLES", "HistoryItem", "LogSaver"]

_SEQ_HEX: Final = 16  # a checkpoint id is 16 hex digits of seq, then 16 random hex digits
_ID_LEN: Final = 32
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
LIST_WINDOW_MAX: Final = 256  # frames read at once by list(), whatever its limit


# -- stored shapes ---------------------------------------------------------------------------------


class HistoryItem(msgspec.Struct, frozen=True):
    """One frame of a thread, as :meth:`LogSaver.history` reports it."""

    seq: int
    kind: str  # "checkpoint" | "step" | "delete"
    at: float  # wall-clock time of the call (``time.time()``)
    checkpoint: Checkpoint | None = None
    step: StepRecord | None = None


# -- upstream's validation, with upstream's exception types and messages ---------------------------


def _non_empty(field_name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidType(f"{field_name} must be a string")
    if not value.strip():
        raise InvalidRecord(f"{field_name} must not be empty")
    return value


def _optional_non_empty(field_name: str, value: Any) -> str | None:
    return None if value is None else _non_empty(field_name, value)


def _limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("limit must be an integer")
    return value


def _json_text(field_name: str, value: Any) -> bytes:
    """The JSON text upstream stores for a state or metadata mapping, as UTF-8 bytes."""
    if not isinstance(value, Mapping):
        raise InvalidType(f"{field_name} must be a mapping")
    copied = dict(value)
    for key in copied:
        if not isinstance(key, str):
            raise InvalidType(f"{field_name} keys must be strings")
    try:
        text = json.dumps(copied, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidType(f"{field_name} must be JSON-serializable") from exc
    return text.encode("utf-8", "surrogatepass")


def _loads(raw: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(raw.decode("utf-8", "surrogatepass"))
    return value


# -- small pure helpers ----------------------------------------------------------------------------


def _iso(micros: int) -> str:
    return (_EPOCH + micros * _MICROSECOND).isoformat(timespec="microseconds")


def _seq_of(checkpoint_id: str) -> int | None:
    """The frame seq a checkpoint id names, or ``None`` when it is not one of ours."""
    if len(checkpoint_id) != _ID_LEN:
        return None
    try:
        return int(checkpoint_id[:_SEQ_HEX], 16)
    except ValueError:
        return None


# -- frames built inside the write transaction -----------------------------------------------------


class _Write(DeferredFrame):
    """Reads the thread's head row in the transaction, builds the frame, updates the rows."""

    __slots__ = ("head", "sid")

    def __init__(self) -> None:
        self.sid = 0
        self.head = _Head()

    def build(self, txn: WriteTxn, stream: str, sid: int, seq: int) -> Event | None:
        self.sid = sid
        head = VIEW.read_head(txn, sid)
        return self.make(txn, head if head is not None else _Head(), seq)

    def make(self, txn: WriteTxn, head: _Head, seq: int) -> Event | None:
        raise NotImplementedError

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        VIEW.write_head(txn, self.sid, self.head)


def _tick(head: _Head, clock: Callable[[], float]) -> int:
    """A created_at after every earlier one of the thread, even if the clock stepped back."""
    return max(round(clock() * 1_000_000), head.clock + 1)


class _PutCheckpoint(_Write):
    __slots__ = ("clock", "created_at", "id", "metadata", "parent_id", "salt", "state")

    def __init__(
        self, state: bytes, metadata: bytes, parent_id: str | None, clock: Callable[[], float]
    ) -> None:
        super().__init__()
        self.clock = clock
        self.state = state
        self.metadata = metadata
        self.parent_id = parent_id
        self.salt = secrets.token_hex(_SEQ_HEX // 2)  # ids stay unique across threads and logs
        self.id = ""
        self.created_at = ""

    def make(self, txn: WriteTxn, head: _Head, seq: int) -> Event:
        micros = _tick(head, self.clock)
        self.id = f"{seq:0{_SEQ_HEX}x}{self.salt}"
        self.created_at = _iso(micros)
        self.head = _Head(seq, head.base, micros)
        data = _Checkpoint(
            id=self.id,
            created_at=self.created_at,
            state=self.state,
            metadata=self.metadata,
            parent_id=self.parent_id,
            prev=head.cp,
        )
        return Event(name=CHECKPOINT, data=data, at=time.time())


class _PutStep(_Write):
    __slots__ = ("clock", "created_at", "digest", "key", "state")

    def __init__(self, key: str, state: bytes, clock: Callable[[], float]) -> None:
        super().__init__()
        self.clock = clock
        self.key = key
        self.digest = _step_digest(key)
        self.state = state
        self.created_at = ""

    def make(self, txn: WriteTxn, head: _Head, seq: int) -> Event:
        micros = _tick(head, self.clock)
        self.created_at = _iso(micros)
        self.head = _Head(head.cp, head.base, micros)
        data = _Step(key=self.key, created_at=self.created_at, state=self.state)
        return Event(name=STEP, data=data, at=time.time())

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        super().appended(txn, done)
        txn.put(TABLE, _steps_prefix(self.sid) + self.digest, _U64.pack(done.seq))


class _Delete(_Write):
    __slots__ = ()

    def make(self, txn: WriteTxn, head: _Head, seq: int) -> Event | None:
        steps = next(iter(txn.scan_prefix(TABLE, _steps_prefix(self.sid), limit=1)), None)
        if head.cp == 0 and steps is None:
            return None  # nothing live: a no-op, nothing logged (as upstream, no error)
        self.head = _Head(0, seq, head.clock)
        return Event(name=DELETE, data=None, at=time.time())

    def appended(self, txn: WriteTxn, done: Appended) -> None:
        super().appended(txn, done)
        txn.delete_prefix(TABLE, _steps_prefix(self.sid))


# -- the saver -------------------------------------------------------------------------------------


class LogSaver:
    """``techrevati.runtime.CheckpointSaver`` and ``StepCheckpointSaver`` on an :class:`EventLog`.

    Thread-safe. Open one with :meth:`open` (it then owns its log and closes it) or hand it an
    :class:`EventLog` whose backend declares :data:`TABLES` (``EventLog.open(path,
    extra_tables=TABLES)``; a memory backend needs nothing). ``clock`` (seconds since the
    epoch, ``time.time`` by default) stamps ``created_at``; tests step it back to check order.
    """

    def __init__(
        self, log: EventLog, *, owns_log: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self.log = log
        self.clock = clock
        self._owns_log = owns_log
        self._max_key = log.backend.max_key_bytes
        try:
            with log.backend.read() as txn:
                txn.get(TABLE, VIEW.head_key(0))
        except CheckpointError as e:
            raise CheckpointError(
                f"the log at {log.backend.location!r} has no {TABLE!r} table ({e}); open it "
                "with EventLog.open(path, extra_tables=eventlog.integrations.techrevati.TABLES) "
                "or use LogSaver.open(path)"
            ) from e

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = "fsync",
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
        **options: Any,
    ) -> LogSaver:
        """Open (or create) the log in directory ``path``; ``close()`` closes it."""
        log = EventLog.open(
            path, durability=durability, readonly=readonly, extra_tables=TABLES, **options
        )
        return cls(log, owns_log=True, clock=clock)

    @classmethod
    def on_backend(
        cls, backend: Backend, *, clock: Callable[[], float] = time.time, **options: Any
    ) -> LogSaver:
        """A saver on any backend (e.g. ``backends.memory.MemoryBackend()``)."""
        return cls(EventLog(backend, **options), owns_log=True, clock=clock)

    # -- keys and rows -----------------------------------------------------------------------------

    def _stream(self, thread_id: str) -> str:
        """The stream of a thread, validated for writing (``InvalidStreamKey`` when too long)."""
        stream = STREAM_PREFIX + thread_id
        stream_key_bytes(stream, self._max_key)
        return stream

    def _locate(self, thread_id: str) -> tuple[str, int, _Head] | None:
        """``(stream, stream id, head)`` of a thread, or ``None`` when it has no frames."""
        stream = STREAM_PREFIX + thread_id
        found = VIEW.locate(self.log, stream)  # (one statement on a server)
        return None if found is None else (stream, *found)

    def _checkpoint_frame(self, stream: str, sid: int, seq: int) -> _Checkpoint:
        sf = read_frame_now(self.log, stream, sid, seq)
        frame = sf.frame if sf is not None else None
        if not isinstance(frame, Event) or frame.name != CHECKPOINT:
            raise CorruptFrame(
                f"stream {stream!r}: the head row points at seq {seq}, which is not a "
                "techrevati checkpoint frame; run LogSaver.verify()",
                stream=stream,
                seq=seq,
            )
        return msgspec.convert(frame.data, _Checkpoint)

    def _live(self, stream: str, sid: int, head: _Head, checkpoint_id: str) -> _Checkpoint | None:
        """The live checkpoint ``checkpoint_id`` of the thread, or ``None``."""
        seq = _seq_of(checkpoint_id)
        if seq is None or not head.base < seq <= head.cp:
            return None
        sf = read_frame_now(self.log, stream, sid, seq)
        frame = sf.frame if sf is not None else None
        if not isinstance(frame, Event) or frame.name != CHECKPOINT:
            return None  # that seq is a step: the id is not one of this thread's
        data = msgspec.convert(frame.data, _Checkpoint)
        return data if data.id == checkpoint_id else None

    @staticmethod
    def _to_checkpoint(thread_id: str, data: _Checkpoint) -> Checkpoint:
        return Checkpoint(
            id=data.id,
            thread_id=thread_id,
            created_at=data.created_at,
            state=_loads(data.state),
            parent_id=data.parent_id,
            metadata=_loads(data.metadata),
        )

    # -- CheckpointSaver ---------------------------------------------------------------------------

    def get(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        """The checkpoint ``checkpoint_id`` of the thread, or its latest one when ``None``."""
        thread_id = _non_empty("thread_id", thread_id)
        checkpoint_id = _optional_non_empty("checkpoint_id", checkpoint_id)
        found = self._locate(thread_id)
        if found is None:
            return None
        stream, sid, head = found
        if checkpoint_id is None:
            if head.cp == 0:
                return None
            return self._to_checkpoint(thread_id, self._checkpoint_frame(stream, sid, head.cp))
        data = self._live(stream, sid, head, checkpoint_id)
        return None if data is None else self._to_checkpoint(thread_id, data)

    def put(
        self,
        thread_id: str,
        state: Mapping[str, Any],
        *,
        parent_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Checkpoint:
        """Append a checkpoint; returns it once it is durable."""
        thread_id = _non_empty("thread_id", thread_id)
        state_text = _json_text("state", state)
        meta_text = _json_text("metadata", metadata or {})
        parent_id = _optional_non_empty("parent_id", parent_id)
        write = _PutCheckpoint(state_text, meta_text, parent_id, self.clock)
        self.log.append(self._stream(thread_id), write)
        return Checkpoint(
            id=write.id,
            thread_id=thread_id,
            created_at=write.created_at,
            state=_loads(state_text),
            parent_id=parent_id,
            metadata=_loads(meta_text),
        )

    def list(
        self, thread_id: str, *, before: str | None = None, limit: int = 10
    ) -> builtins.list[Checkpoint]:
        """The thread's checkpoints, newest first; with ``before``, only those saved before it
        (none when ``before`` is not a live checkpoint of the thread); at most ``limit``."""
        thread_id = _non_empty("thread_id", thread_id)
        before = _optional_non_empty("before", before)
        limit = _limit(limit)
        if limit <= 0:
            return []
        found = self._locate(thread_id)
        if found is None:
            return []
        stream, sid, head = found
        if before is None:
            seq = head.cp
        else:
            cursor = self._live(stream, sid, head, before)
            if cursor is None:
                return []
            seq = cursor.prev
        out: builtins.list[Checkpoint] = []
        window: dict[int, _Checkpoint] = {}
        while seq and len(out) < limit:
            data = window.get(seq)
            if data is None:  # the frames up to seq, read at once (not a read per checkpoint)
                window = self._checkpoints_before(stream, seq, 2 * (limit - len(out)))
                data = window.get(seq) or self._checkpoint_frame(stream, sid, seq)  # (raises)
            out.append(self._to_checkpoint(thread_id, data))
            seq = data.prev
        return out

    def _checkpoints_before(self, stream: str, seq: int, frames: int) -> dict[int, _Checkpoint]:
        """The checkpoint frames among the ``frames`` frames (at most ``LIST_WINDOW_MAX``)
        that end at ``seq``, by seq: one read transaction where :meth:`list` made one per
        checkpoint (on PostgreSQL four round trips each)."""
        lo = max(1, seq - min(frames, LIST_WINDOW_MAX) + 1)
        return {
            sf.seq: msgspec.convert(sf.frame.data, _Checkpoint)
            for sf in self.log.read_stream(stream, lo, seq)
            if isinstance(sf.frame, Event) and sf.frame.name == CHECKPOINT
        }

    def delete(self, thread_id: str) -> None:
        """Hide every checkpoint and step of the thread (its frames stay in the log)."""
        thread_id = _non_empty("thread_id", thread_id)
        if self._locate(thread_id) is None:
            return  # nothing saved (or the id is longer than any saved one can be)
        self.log.append(self._stream(thread_id), _Delete())

    # -- StepCheckpointSaver -----------------------------------------------------------------------

    def put_step(self, thread_id: str, step_key: str, state: Mapping[str, Any]) -> StepRecord:
        """Record (or replace) the step ``step_key`` of the thread; durable on return."""
        thread_id = _non_empty("thread_id", thread_id)
        step_key = _non_empty("step_key", step_key)
        state_text = _json_text("state", state)
        write = _PutStep(step_key, state_text, self.clock)
        self.log.append(self._stream(thread_id), write)
        return StepRecord(
            thread_id=thread_id,
            step_key=step_key,
            created_at=write.created_at,
            state=_loads(state_text),
        )

    def get_step(self, thread_id: str, step_key: str) -> StepRecord | None:
        thread_id = _non_empty("thread_id", thread_id)
        step_key = _non_empty("step_key", step_key)
        found = self._locate(thread_id)
        if found is None:
            return None
        stream, sid, _ = found
        key = _steps_prefix(sid) + _step_digest(step_key)
        raw = self.log.backend.get_many_now(TABLE, [key])[0]  # (one statement on a server)
        if raw is None:
            return None
        step = self._step_frame(stream, sid, _U64.unpack(raw)[0])
        if step.key != step_key:
            return None  # a 128-bit digest collision: the stored step is another key's
        return _to_step(thread_id, step)

    def list_steps(self, thread_id: str) -> builtins.list[StepRecord]:
        """The thread's live steps ordered by ``(created_at, step_key)``, as upstream."""
        thread_id = _non_empty("thread_id", thread_id)
        found = self._locate(thread_id)
        if found is None:
            return []
        stream, sid, _ = found
        with self.log.backend.read() as txn:
            seqs = sorted(_U64.unpack(v)[0] for _, v in txn.scan_prefix(TABLE, _steps_prefix(sid)))
        # Each step's created_at is unique in its thread and grows with seq: seq order is it.
        return [_to_step(thread_id, self._step_frame(stream, sid, seq)) for seq in seqs]

    def _step_frame(self, stream: str, sid: int, seq: int) -> _Step:
        sf = read_frame_now(self.log, stream, sid, seq)
        frame = sf.frame if sf is not None else None
        if not isinstance(frame, Event) or frame.name != STEP:
            raise CorruptFrame(
                f"stream {stream!r}: the step index points at seq {seq}, which is not a "
                "techrevati step frame; run LogSaver.verify()",
                stream=stream,
                seq=seq,
            )
        return msgspec.convert(frame.data, _Step)

    # -- history and verification ------------------------------------------------------------------

    def history(self, thread_id: str) -> Iterator[HistoryItem]:
        """Every checkpoint, step and delete the thread ever had, oldest first (deleted ones
        included: delete only hides them from reads). Frames are read as it is iterated."""
        thread_id = _non_empty("thread_id", thread_id)  # raises now, not at the first next()
        stream = STREAM_PREFIX + thread_id
        if len(stream.encode("utf-8", "surrogatepass")) > self._max_key:
            return iter(())
        return self._history(thread_id, stream)

    def _history(self, thread_id: str, stream: str) -> Iterator[HistoryItem]:
        for sf in self.log.read_stream(stream):
            frame = sf.frame
            _apply(_Head(), frame, sf.seq)  # raises on a frame that is not ours
            if frame.name == CHECKPOINT:
                data = msgspec.convert(frame.data, _Checkpoint)
                cp = self._to_checkpoint(thread_id, data)
                yield HistoryItem(sf.seq, "checkpoint", frame.at, checkpoint=cp)
            elif frame.name == STEP:
                step = _to_step(thread_id, msgspec.convert(frame.data, _Step))
                yield HistoryItem(sf.seq, "step", frame.at, step=step)
            else:
                yield HistoryItem(sf.seq, "delete", frame.at)

    def verify(self) -> VerifyReport:
        """The log's own checks, plus: every thread's head row and step index equal the fold of
        its frames, and no row belongs to a thread without frames."""
        report = self.log.verify()
        report.problems.extend(VIEW.verify(self.log))
        return report

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the log if this saver opened it. Idempotent."""
        if self._owns_log:
            self.log.close()

    def __enter__(self) -> LogSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _to_step(thread_id: str, step: _Step) -> StepRecord:
    return StepRecord(
        thread_id=thread_id, step_key=step.key, created_at=step.created_at, state=_loads(step.state)
    )
