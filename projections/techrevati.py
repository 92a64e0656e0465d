"""techrevati threads as pure folds of the frames of a ``techrevati:<thread>`` stream: the
stored shapes (``Event.data`` of each frame name), :func:`apply` (the thread's head row, which
the materialized view eventlog.integrations.techrevati_store keeps) and :func:`show` (the
thread as a reader sees it after each frame, plain data, for the read side).

The shown state is ``None`` (nothing live) or ``{"checkpoint": {...} | None, "steps": {key:
{...}}}``: the latest checkpoint (id, parent, time, state and metadata decoded from their
JSON texts) and every step saved since the last delete.

Invariants:
- Pure: neither fold mutates the state it is given (a new head, a new dict per frame).
- ``apply`` raises :class:`~eventlog.errors.CorruptFrame` on a frame that is not techrevati's;
  ``show`` never raises.
- Frames of other names (an application's events) leave the state as it was.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final, NamedTuple

import msgspec

from eventlog.errors import CorruptFrame
from eventlog.frames import Event
from projections.events import field_of, json_value

CHECKPOINT: Final = "techrevati.checkpoint"
STEP: Final = "techrevati.step"
DELETE: Final = "techrevati.delete"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


class Head(msgspec.Struct, array_like=True):
    """A thread's materialized head: a fold of its frames (see :func:`apply`)."""

    cp: int = 0  # seq of the latest live checkpoint (0: none)
    base: int = 0  # seq of the latest delete (checkpoints and steps after it are live)
    clock: int = 0  # the greatest created_at so far, in µs since the epoch


class CheckpointData(msgspec.Struct, frozen=True, kw_only=True):
    """``Event.data`` of a ``techrevati.checkpoint`` frame."""

    id: str
    created_at: str
    state: bytes  # UTF-8 JSON text (surrogates passed through, as Python's json allows)
    metadata: bytes
    parent_id: str | None = None
    prev: int = 0  # seq of the previous live checkpoint of the thread (0: none)


class StepData(msgspec.Struct, frozen=True, kw_only=True):
    """``Event.data`` of a ``techrevati.step`` frame."""

    key: str
    created_at: str
    state: bytes


def micros(created_at: str) -> int:
    return (datetime.fromisoformat(created_at) - _EPOCH) // _MICROSECOND


def apply(head: Head, frame: Any, seq: int) -> Head:
    """The head after ``frame``: what the view's head row holds (written with each frame,
    verified against this fold by eventlog.integrations.techrevati_store)."""
    if not isinstance(frame, Event):
        raise CorruptFrame(f"seq {seq} is a {type(frame).__name__} frame, not a techrevati event")
    if frame.name == CHECKPOINT:
        data = msgspec.convert(frame.data, CheckpointData)
        return Head(seq, head.base, max(head.clock, micros(data.created_at)))
    if frame.name == STEP:
        step = msgspec.convert(frame.data, StepData)
        return Head(head.cp, head.base, max(head.clock, micros(step.created_at)))
    if frame.name == DELETE:
        return Head(0, seq, head.clock)
    raise CorruptFrame(f"seq {seq} is an event named {frame.name!r}, not a techrevati event")


class Shown(NamedTuple):
    """The thread after a frame, and what the frame was (kind, label, ref)."""

    state: Any
    kind: str
    label: str
    ref: str | None


def show(state: Any, frame: Any) -> Shown:
    """The thread as a reader sees it after ``frame`` (``state``: as it was before; ``None``
    to start)."""
    checkpoint = state["checkpoint"] if state is not None else None
    steps: dict[str, Any] = state["steps"] if state is not None else {}
    data = getattr(frame, "data", None)
    name = frame.name if isinstance(frame, Event) else ""
    if name.endswith(".checkpoint"):
        checkpoint = {
            "id": field_of(data, "id"),
            "parent_id": field_of(data, "parent_id"),
            "created_at": field_of(data, "created_at"),
            "state": json_value(field_of(data, "state")),
            "metadata": json_value(field_of(data, "metadata")),
        }
        kind, label, ref = "checkpoint", "", str(field_of(data, "id"))
    elif name.endswith(".step"):
        key = str(field_of(data, "key"))
        steps = {
            **steps,
            key: {
                "created_at": field_of(data, "created_at"),
                "state": json_value(field_of(data, "state")),
            },
        }
        kind, label, ref = "step", key, None
    elif name.endswith(".delete"):
        checkpoint, steps = None, {}
        kind, label, ref = "delete", "thread deleted", None
    else:
        kind, label, ref = "event", name or type(frame).__name__, None
    new = None if checkpoint is None and not steps else {"checkpoint": checkpoint, "steps": steps}
    return Shown(new, kind, label, ref)
