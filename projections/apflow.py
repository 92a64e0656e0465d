"""apflow tasks as a pure fold: each frame of an ``apflow:<task>`` stream -> the task's live
checkpoint after it (plain data), for the read side.

The state is ``None`` (nothing live) or the latest saved attempt: id, step name, attempt, its
ordinal ``n`` and its data decoded from apflow's JSON text. The materialized head row is
eventlog.integrations.apflow's; this is what a reader sees.

Invariants:
- Pure: ``apply`` returns a new state; frames of other names leave the state as it was.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from eventlog.frames import Event
from projections.events import field_of, json_value


class Applied(NamedTuple):
    """The state after a frame, what the frame was (kind, label, ref) and the step it saved."""

    state: Any
    kind: str
    label: str
    ref: str | None
    node: str | None


def initial() -> Any:
    return None


def apply(state: Any, frame: Any) -> Applied:
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
        return Applied(new, "checkpoint", f"attempt {n}", field_of(data, "id"),
                       field_of(data, "step_name"))  # fmt: skip
    if name.endswith(".delete"):
        label = f"{field_of(data, 'count')} checkpoint(s) deleted"
        return Applied(None, "delete", label, None, None)
    return Applied(state, "event", name or type(frame).__name__, None, None)
