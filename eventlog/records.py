"""Checkpoint record types: openarmature 0.17's ``openarmature.checkpoint`` shapes as Structs.

Attribute names, defaults and tuple-typed sequences match openarmature exactly, so the engine
(which reads records by attribute) accepts ours, and ``from_any`` accepts theirs.

Invariants:
- Records are frozen; sequences are tuples (decoded as tuples, never lists), except that
  ``load`` gives a fan-out of more than 65,536 instances as ``eventlog.lazy.LazyInstances``,
  which behaves as that tuple (decoded on access).
- ``state`` and ``parent_states`` hold plain data (dict/list/str/int/float/bool/None) once
  loaded: they are stored structurally (Pydantic models via ``model_dump(mode="json")``,
  dataclasses and Structs as maps), never pickled.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

InstanceState = Literal["completed", "in_flight", "not_started"]
SaveKind = Literal["save", "fan_out_internal", "fan_out_in_flight_failure"]
SAVE_KINDS: tuple[SaveKind, ...] = ("save", "fan_out_internal", "fan_out_in_flight_failure")
HISTORY_KINDS: tuple[str, ...] = (*SAVE_KINDS, "delete")  # what history(kinds=...) accepts


class NodePosition(msgspec.Struct, frozen=True, array_like=True, gc=False):
    # gc=False: only strings and ints inside, so no reference cycle can pass through it; large
    # fan-outs hold millions of these, and tracking them made collections dominate replay.
    namespace: tuple[str, ...]
    node_name: str
    step: int
    attempt_index: int = 0
    fan_out_index: int | None = None


class FanOutInstanceProgress(msgspec.Struct, frozen=True, array_like=True, gc=False):
    state: InstanceState
    result: Any = None
    result_is_error: bool = False
    completed_inner_positions: tuple[NodePosition, ...] = ()


NOT_STARTED = FanOutInstanceProgress("not_started")


def is_not_started(progress: FanOutInstanceProgress) -> bool:
    """Whether an instance is exactly :data:`NOT_STARTED`: the one value a fan-out row leaves
    absent and a snapshot or full save leaves out (the fold fills it in). The only definition:
    a ``"not_started"`` instance carrying inner positions, a result or an error flag is a value
    of its own, stored like any other."""
    return progress is NOT_STARTED or progress == NOT_STARTED


class EnclosingFanOutInstance(msgspec.Struct, frozen=True, array_like=True, gc=False):
    namespace: tuple[str, ...]
    fan_out_node_name: str
    fan_out_index: int


class FanOutProgress(msgspec.Struct, frozen=True, array_like=True):
    fan_out_node_name: str
    namespace: tuple[str, ...]
    instance_count: int
    instances: tuple[FanOutInstanceProgress, ...]
    enclosing_fan_out_lineage: tuple[EnclosingFanOutInstance, ...] = ()


class CheckpointRecord(msgspec.Struct, frozen=True):
    invocation_id: str
    correlation_id: str
    state: Any
    completed_positions: tuple[NodePosition, ...]
    parent_states: tuple[Any, ...]
    last_saved_at: float
    schema_version: str = ""
    fan_out_progress: tuple[FanOutProgress, ...] = ()


class CheckpointSummary(msgspec.Struct, frozen=True):
    invocation_id: str
    correlation_id: str
    last_saved_at: float
    completed_node_count: int


class CheckpointFilter(msgspec.Struct, frozen=True):
    correlation_id: str | None = None


class FanOutInternalSaveBatching(msgspec.Struct, frozen=True):
    """Buffer fan-out internal saves; flush every ``flush_every`` of them (0 / negative: off)."""

    flush_every: int = 0


class HistoryEntry(msgspec.Struct, frozen=True):
    """One save of an invocation as recorded in the log (``record`` is None for a delete)."""

    seq: int
    saved_at: float
    kind: str  # a SaveKind, or "delete"
    record: CheckpointRecord | None


# -- accepting other libraries' records (duck typing, as the openarmature engine does) ---------


def position_from(obj: Any) -> NodePosition:
    if type(obj) is NodePosition:
        return obj
    return NodePosition(
        tuple(obj.namespace),
        obj.node_name,
        obj.step,
        getattr(obj, "attempt_index", 0),
        getattr(obj, "fan_out_index", None),
    )


def positions_from(objs: Any) -> tuple[NodePosition, ...]:
    return tuple(position_from(p) for p in objs)


def instance_from(obj: Any) -> FanOutInstanceProgress:
    if type(obj) is FanOutInstanceProgress:
        return obj
    inner = getattr(obj, "completed_inner_positions", ())
    return FanOutInstanceProgress(
        obj.state,
        getattr(obj, "result", None),
        bool(getattr(obj, "result_is_error", False)),
        positions_from(inner) if inner else (),
    )


def lineage_from(objs: Any) -> tuple[EnclosingFanOutInstance, ...]:
    return tuple(
        o
        if type(o) is EnclosingFanOutInstance
        else EnclosingFanOutInstance(tuple(o.namespace), o.fan_out_node_name, o.fan_out_index)
        for o in objs
    )
