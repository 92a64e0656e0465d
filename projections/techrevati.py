"""techrevati threads as a pure fold: each frame of a ``techrevati:<thread>`` stream -> the
thread as its saver shows it after that frame (plain data), for the read side.

The state is ``None`` (nothing live) or ``{"checkpoint": {...} | None, "steps": {key: {...}}}``:
the latest checkpoint (id, parent, time, state and metadata decoded from their JSON texts) and
every step saved since the last delete. The materialized head row (the latest checkpoint's seq,
the step index) is eventlog.integrations.techrevati_store's; this is what a reader sees.

Invariants:
- Pure: ``apply`` never mutates the state it is given (a new dict per frame).
- Frames of other names (an application's events) leave the state as it was.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from eventlog.frames import Event
from projections.events import field_of, json_value


class Applied(NamedTuple):
    """The state after a frame, and what the frame was (kind, label, ref)."""

    state: Any
    kind: str
    label: str
    ref: str | None


def initial() -> Any:
    return None


def apply(state: Any, frame: Any) -> Applied:
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
    return Applied(new, kind, label, ref)
