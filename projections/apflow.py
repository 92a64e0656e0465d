"""apflow tasks as pure folds of the frames of an ``apflow:<task>`` stream: the stored shapes
(``Event.data`` of each frame name), :func:`apply` (the task's head row, which the materialized
view in eventlog.integrations.apflow keeps) and :func:`show` (the task's live checkpoint after
each frame, plain data, for the read side).

The shown state is ``None`` (nothing live) or the latest saved attempt: id, step name, attempt, its
ordinal ``n`` and its data decoded from apflow's JSON text.

Invariants:
- Pure: both folds return a new state; ``show`` leaves the state as it was on frames of other
  names and never raises; ``apply`` raises :class:`~eventlog.errors.CorruptFrame` on them.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import msgspec

from eventlog.errors import CorruptFrame
from eventlog.frames import Event
from projections.events import field_of, json_value

CHECKPOINT: Final = "apflow.checkpoint"
DELETE: Final = "apflow.delete"


class Head(msgspec.Struct, array_like=True):
    """A task's materialized head: a fold of its frames (see :func:`apply`)."""

    latest: int = 0  # seq of the newest live save (0: none)
    live: int = 0  # saves since the last delete


class Saved(msgspec.Struct, frozen=True, kw_only=True):
    """``Event.data`` of an ``apflow.checkpoint`` frame."""

    id: str
    data: bytes  # json.dumps(data) as UTF-8 (surrogates passed through)
    step_name: str | None = None
    attempt: int | None = None
    n: int = 1  # ordinal among the task's live saves: the retry count in apflow's flow


class Deleted(msgspec.Struct, frozen=True, kw_only=True):
    """``Event.data`` of an ``apflow.delete`` frame."""

    count: int


def apply(head: Head, frame: Any, seq: int) -> Head:
    """The head after ``frame``: what the view's head row holds (eventlog.integrations.apflow
    writes it with each frame and verifies it against this fold)."""
    if isinstance(frame, Event) and frame.name == CHECKPOINT:
        return Head(seq, head.live + 1)
    if isinstance(frame, Event) and frame.name == DELETE:
        return Head(0, 0)
    raise CorruptFrame(f"seq {seq} is not an apflow checkpoint event: {frame!r:.80}")


class Shown(NamedTuple):
    """The task after a frame, what the frame was (kind, label, ref) and the step it saved."""

    state: Any
    kind: str
    label: str
    ref: str | None
    node: str | None


def show(state: Any, frame: Any) -> Shown:
    """The task as a reader sees it after ``frame`` (``state``: as it was before; ``None`` to
    start)."""
    data = getattr(frame, "data", None)
    name = frame.name if isinstance(frame, Event) else ""
    if name.endswith(".checkpoint"):
        new = {
            "id": field_of(data, "id"),
            "step_name": field_of(data, "step_name"),
            "attempt": field_of(data, "attempt"),
            "n": field_of(data, "n"),
            "data": json_value(field_of(data, "data")),
        }
        n = field_of(data, "n")
        return Shown(new, "checkpoint", f"attempt {n}", field_of(data, "id"),
                       field_of(data, "step_name"))  # fmt: skip
    if name.endswith(".delete"):
        label = f"{field_of(data, 'count')} checkpoint(s) deleted"
        return Shown(None, "delete", label, None, None)
    return Shown(state, "event", name or type(frame).__name__, None, None)
