"""techrevati-runtime threads on the log, framework-free: the stored shapes, the fold and the
materialized view (table ``techrevati``: ``b"h" + sid`` -> :class:`_Head`, ``b"s" + sid +
blake2b-128(step key)`` -> the step frame's seq). eventlog.integrations.techrevati builds the
saver on it; compaction, ``rebuild`` and ``verify`` use :data:`VIEW` without the framework.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import msgspec

from backends.base import WriteTxn
from eventlog.errors import CorruptFrame
from eventlog.frames import Event
from eventlog.integrations.headed import HeadedEventView
from eventlog.layout import U64 as _U64
from eventlog.log import StoredFrame
from projections import techrevati as read_fold

TABLE: Final = "techrevati"
TABLES: Final = (TABLE,)
STREAM_PREFIX: Final = "techrevati:"
CHECKPOINT: Final = "techrevati.checkpoint"
STEP: Final = "techrevati.step"
DELETE: Final = "techrevati.delete"

_HEAD: Final = b"h"  # + stream id (u64): the thread's _Head
_STEPS: Final = b"s"  # + stream id (u64) + blake2b-128 of the step key: the step frame's seq
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


class _Head(msgspec.Struct, array_like=True):
    """A thread's materialized head: a fold of its frames (see :func:`_apply`)."""

    cp: int = 0  # seq of the latest live checkpoint (0: none)
    base: int = 0  # seq of the latest delete (checkpoints and steps after it are live)
    clock: int = 0  # the greatest created_at so far, in µs since the epoch


class _Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """``Event.data`` of a ``techrevati.checkpoint`` frame."""

    id: str
    created_at: str
    state: bytes  # UTF-8 JSON text (surrogates passed through, as Python's json allows)
    metadata: bytes
    parent_id: str | None = None
    prev: int = 0  # seq of the previous live checkpoint of the thread (0: none)


class _Step(msgspec.Struct, frozen=True, kw_only=True):
    """``Event.data`` of a ``techrevati.step`` frame."""

    key: str
    created_at: str
    state: bytes


def _micros(created_at: str) -> int:
    return (datetime.fromisoformat(created_at) - _EPOCH) // _MICROSECOND


def _step_digest(step_key: str) -> bytes:
    return hashlib.blake2b(step_key.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _head_key(sid: int) -> bytes:
    return _HEAD + _U64.pack(sid)


def _steps_prefix(sid: int) -> bytes:
    return _STEPS + _U64.pack(sid)


def _apply(head: _Head, frame: Any, seq: int) -> _Head:
    """The head after ``frame`` (the fold :meth:`LogSaver.verify` checks rows against)."""
    if not isinstance(frame, Event):
        raise CorruptFrame(f"seq {seq} is a {type(frame).__name__} frame, not a techrevati event")
    if frame.name == CHECKPOINT:
        data = msgspec.convert(frame.data, _Checkpoint)
        return _Head(seq, head.base, max(head.clock, _micros(data.created_at)))
    if frame.name == STEP:
        step = msgspec.convert(frame.data, _Step)
        return _Head(head.cp, head.base, max(head.clock, _micros(step.created_at)))
    if frame.name == DELETE:
        return _Head(0, seq, head.clock)
    raise CorruptFrame(f"seq {seq} is an event named {frame.name!r}, not a techrevati event")


class TechrevatiView(HeadedEventView[_Head]):
    """techrevati's materialized view: the thread head and its step index."""

    def __init__(self) -> None:
        super().__init__(
            name="techrevati",
            table=TABLE,
            stream_prefix=STREAM_PREFIX,
            event_prefix="techrevati.",
            head_type=_Head,
            head_prefix=_HEAD,
            unit="thread",
        )

    def step(self, head: _Head, frame: Any, seq: int) -> _Head:
        return _apply(head, frame, seq)

    def read_apply(self, state: Any, frame: Any) -> tuple[Any, str, str, str | None, str | None]:
        applied = read_fold.apply(state, frame)
        return (*applied, None)

    def apply_extra(self, txn: WriteTxn, sid: int, seq: int, frame: Any) -> None:
        if frame.name == STEP:
            key = _step_digest(msgspec.convert(frame.data, _Step).key)
            txn.put(TABLE, _steps_prefix(sid) + key, _U64.pack(seq))
        elif frame.name == DELETE:
            txn.delete_prefix(TABLE, _steps_prefix(sid))

    def extra_prefix(self, sid: int) -> bytes:
        return _steps_prefix(sid)

    def expected_extra(self, frames: Iterable[StoredFrame[Any]]) -> dict[bytes, bytes]:
        steps: dict[bytes, bytes] = {}
        for sf in frames:
            if sf.frame.name == STEP:
                steps[_step_digest(msgspec.convert(sf.frame.data, _Step).key)] = _U64.pack(sf.seq)
            elif sf.frame.name == DELETE:
                steps.clear()
        return steps

    def extra_problem(
        self, stream: str, stored: dict[bytes, bytes], want: dict[bytes, bytes]
    ) -> str:
        return (
            f"techrevati step index holds {len(stored)} entries, the fold gives "
            f"{len(want)} (or they point at other frames)"
        )


VIEW: Final = TechrevatiView()
