"""Record history as data: structured diffs between records, and the diff a frame makes.

Pure functions, no I/O: :func:`diff_records` compares two records (either may be ``None``: not
saved yet, or deleted); :func:`frame_diff` computes the same diff from the head before a frame
and the frame itself, reading only what the frame changed (O(changes), not O(record), for
delta frames), so replaying a long history with its step-by-step changes stays cheap.

Invariants:
- ``diff_records(a, a)`` is empty; every change names a path and carries old and new values.
- For every frame ``f`` written by ``projections.records.delta`` against head ``h``,
  ``frame_diff(h, f) == diff_records(to_record(h), to_record(apply(h, f)))`` (property-tested
  in tests/test_forensics.py), so replay and ``diff`` never disagree.
- Paths read like the codec's encoding errors: ``state.items[3]``, ``state['a key']``,
  ``parent_states[0].x``. Scalars compare by type and value (``1``, ``1.0`` and ``True``
  differ); NaN equals NaN, so an unchanged NaN is not reported.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from eventlog.frames import InstanceChange, Save, Snapshot, Tombstone
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
    FanOutProgress,
    NodePosition,
)
from projections.records import Head, Slot, apply, apply_splice, to_record

_decode_any = msgspec.msgpack.Decoder()


class ValueChange(msgspec.Struct, frozen=True):
    """One changed value. ``op`` is ``changed``, ``added`` (no old) or ``removed`` (no new)."""

    path: str
    op: str
    old: Any = None
    new: Any = None


class FanOutChange(msgspec.Struct, frozen=True):
    """A fan-out that appeared in or disappeared from the record (``op``: added / removed)."""

    op: str
    fan_out: str
    namespace: tuple[str, ...]
    instance_count: int
    lineage: tuple[EnclosingFanOutInstance, ...] = ()


class InstanceDiff(msgspec.Struct, frozen=True):
    """One fan-out instance whose progress changed (state, result or inner positions)."""

    fan_out: str
    namespace: tuple[str, ...]
    index: int
    old_state: str
    new_state: str
    old_result: Any = None
    new_result: Any = None
    result_is_error: bool = False
    inner_positions_added: int = 0
    lineage: tuple[EnclosingFanOutInstance, ...] = ()


class RecordDiff(msgspec.Struct, frozen=True):
    """What changed from record ``a`` to record ``b`` (``existed_*``: the record was there)."""

    existed_before: bool
    exists_after: bool
    fields: tuple[ValueChange, ...] = ()  # correlation_id, schema_version
    positions_added: tuple[NodePosition, ...] = ()
    positions_removed: tuple[NodePosition, ...] = ()
    state: tuple[ValueChange, ...] = ()  # paths under state and parent_states
    fan_outs: tuple[FanOutChange, ...] = ()
    instances: tuple[InstanceDiff, ...] = ()

    @property
    def empty(self) -> bool:
        return self.existed_before == self.exists_after and not (
            self.fields
            or self.positions_added
            or self.positions_removed
            or self.state
            or self.fan_outs
            or self.instances
        )


# -- values ------------------------------------------------------------------------------------


def _key_path(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def _same_scalar(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def diff_values(old: Any, new: Any, path: str) -> list[ValueChange]:
    """Changes from ``old`` to ``new`` (plain data), walking dicts and lists recursively."""
    out: list[ValueChange] = []
    _diff_into(old, new, path, out)
    return out


def _diff_into(old: Any, new: Any, path: str, out: list[ValueChange]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key, value in new.items():
            if key in old:
                _diff_into(old[key], value, _key_path(path, key), out)
            else:
                out.append(ValueChange(_key_path(path, key), "added", None, value))
        out.extend(
            ValueChange(_key_path(path, key), "removed", value, None)
            for key, value in old.items()
            if key not in new
        )
        return
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        common = min(len(old), len(new))
        for i in range(common):
            _diff_into(old[i], new[i], f"{path}[{i}]", out)
        out.extend(
            ValueChange(f"{path}[{i}]", "added", None, new[i]) for i in range(common, len(new))
        )
        out.extend(
            ValueChange(f"{path}[{i}]", "removed", old[i], None) for i in range(common, len(old))
        )
        return
    if isinstance(old, (dict, list, tuple)) or isinstance(new, (dict, list, tuple)):
        out.append(ValueChange(path, "changed", old, new))
        return
    if not _same_scalar(old, new):
        out.append(ValueChange(path, "changed", old, new))


# -- records -----------------------------------------------------------------------------------

_FanOutKey = tuple[str, tuple[str, ...], tuple[EnclosingFanOutInstance, ...], int]


def _fo_key(fo: FanOutProgress) -> _FanOutKey:
    return (fo.fan_out_node_name, fo.namespace, fo.enclosing_fan_out_lineage, fo.instance_count)


def _instance_diff(
    fo: FanOutProgress, index: int, old: FanOutInstanceProgress, new: FanOutInstanceProgress
) -> InstanceDiff:
    return InstanceDiff(
        fan_out=fo.fan_out_node_name,
        namespace=fo.namespace,
        index=index,
        old_state=old.state,
        new_state=new.state,
        old_result=old.result,
        new_result=new.result,
        result_is_error=new.result_is_error,
        inner_positions_added=max(
            0, len(new.completed_inner_positions) - len(old.completed_inner_positions)
        ),
        lineage=fo.enclosing_fan_out_lineage,
    )


def _sorted_instances(changes: list[InstanceDiff]) -> tuple[InstanceDiff, ...]:
    return tuple(sorted(changes, key=lambda d: (d.fan_out, d.namespace, repr(d.lineage), d.index)))


def _positions(
    a: tuple[NodePosition, ...], b: tuple[NodePosition, ...]
) -> tuple[tuple[NodePosition, ...], tuple[NodePosition, ...]]:
    """``(added, removed)``: what follows the common prefix in ``b`` and in ``a``."""
    common = 0
    limit = min(len(a), len(b))
    while common < limit and a[common] == b[common]:
        common += 1
    return tuple(b[common:]), tuple(a[common:])


def _fields(a: CheckpointRecord | None, b: CheckpointRecord | None) -> list[ValueChange]:
    out = []
    for name in ("correlation_id", "schema_version"):
        old = getattr(a, name) if a is not None else None
        new = getattr(b, name) if b is not None else None
        if old != new:
            op = "added" if a is None else "removed" if b is None else "changed"
            out.append(ValueChange(name, op, old, new))
    return out


def _values(a: CheckpointRecord | None, b: CheckpointRecord | None) -> list[ValueChange]:
    if a is None and b is None:
        return []
    if a is None:
        assert b is not None
        return [
            ValueChange("state", "added", None, b.state),
            ValueChange("parent_states", "added", None, list(b.parent_states)),
        ]
    if b is None:
        return [
            ValueChange("state", "removed", a.state, None),
            ValueChange("parent_states", "removed", list(a.parent_states), None),
        ]
    out = diff_values(a.state, b.state, "state")
    out.extend(diff_values(list(a.parent_states), list(b.parent_states), "parent_states"))
    return out


def diff_records(a: CheckpointRecord | None, b: CheckpointRecord | None) -> RecordDiff:
    """The structured difference from ``a`` to ``b`` (``None``: no record at that point)."""
    added, removed = _positions(
        a.completed_positions if a is not None else (),
        b.completed_positions if b is not None else (),
    )
    old_fos = {_fo_key(fo): fo for fo in (a.fan_out_progress if a is not None else ())}
    fan_outs: list[FanOutChange] = []
    instances: list[InstanceDiff] = []
    for fo in b.fan_out_progress if b is not None else ():
        old = old_fos.pop(_fo_key(fo), None)
        if old is None:
            fan_outs.append(_fan_out_change("added", fo))
            olds: tuple[FanOutInstanceProgress, ...] = (NOT_STARTED,) * fo.instance_count
        else:
            olds = old.instances
        for i, (o, n) in enumerate(zip(olds, fo.instances, strict=False)):
            if o != n:
                instances.append(_instance_diff(fo, i, o, n))
    fan_outs.extend(_fan_out_change("removed", fo) for fo in old_fos.values())
    return RecordDiff(
        existed_before=a is not None,
        exists_after=b is not None,
        fields=tuple(_fields(a, b)),
        positions_added=added,
        positions_removed=removed,
        state=tuple(_values(a, b)),
        fan_outs=tuple(fan_outs),
        instances=_sorted_instances(instances),
    )


def _fan_out_change(op: str, fo: FanOutProgress) -> FanOutChange:
    return FanOutChange(
        op, fo.fan_out_node_name, fo.namespace, fo.instance_count, fo.enclosing_fan_out_lineage
    )


# -- frames ------------------------------------------------------------------------------------


def _slot_fan_out(slot: Slot) -> FanOutProgress:
    """A fan-out shell (no instances) naming ``slot``, for building diffs."""
    h = slot.header
    return FanOutProgress(h.fan_out_node_name, h.namespace, h.instance_count, (), h.lineage)


def frame_diff(before: Head | None, frame: Any, seq: int, invocation_id: str) -> RecordDiff:
    """The diff ``frame`` (stream seq ``seq``) makes to ``before``; ``before`` is not changed.

    Delta frames cost O(what they changed); snapshots, tombstones and a first save compare
    whole records.
    """
    if isinstance(frame, Tombstone):
        return diff_records(to_record(before) if before is not None else None, None)
    if isinstance(frame, Snapshot) or before is None or not isinstance(frame, Save):
        after = apply(before, frame, seq, invocation_id)
        return diff_records(
            to_record(before) if before is not None else None,
            to_record(after) if after is not None else None,
        )
    fields = []
    if frame.correlation_id is not None and frame.correlation_id != before.correlation_id:
        fields.append(
            ValueChange("correlation_id", "changed", before.correlation_id, frame.correlation_id)
        )
    if frame.schema_version is not None and frame.schema_version != before.schema_version:
        fields.append(
            ValueChange("schema_version", "changed", before.schema_version, frame.schema_version)
        )
    values: list[ValueChange] = []
    new_state = frame.state
    if new_state is None and frame.state_splice is not None:
        new_state = apply_splice(before.state, frame.state_splice)
    if new_state is not None:
        values.extend(
            diff_values(_decode_any.decode(before.state), _decode_any.decode(new_state), "state")
        )
    if frame.parent_states is not None:
        values.extend(
            diff_values(
                list(_decode_any.decode(before.parent_states)),
                list(_decode_any.decode(frame.parent_states)),
                "parent_states",
            )
        )
    added: tuple[NodePosition, ...] = ()
    removed: tuple[NodePosition, ...] = ()
    if frame.positions_from >= 0:
        added, removed = _positions(
            tuple(before.positions), (*before.positions[: frame.positions_from], *frame.positions)
        )
    by_fid = {s.header.fid: s for s in before.slots}
    fan_outs: list[FanOutChange] = []
    if frame.layout is not None:
        kept = {hd.fid for hd in frame.layout}
        for hd in frame.layout:
            if hd.fid not in by_fid:
                by_fid[hd.fid] = Slot(hd, [NOT_STARTED] * hd.instance_count)
                fan_outs.append(_fan_out_change("added", _slot_fan_out(by_fid[hd.fid])))
        fan_outs.extend(
            _fan_out_change("removed", _slot_fan_out(s))
            for s in before.slots
            if s.header.fid not in kept
        )
    instances = []
    for (fid, index), progress in _last_changes(frame.instances).items():
        slot = by_fid[fid]
        old = slot.instances[index]
        if old != progress:
            instances.append(_instance_diff(_slot_fan_out(slot), index, old, progress))
    return RecordDiff(
        existed_before=True,
        exists_after=True,
        fields=tuple(fields),
        positions_added=added,
        positions_removed=removed,
        state=tuple(values),
        fan_outs=tuple(fan_outs),
        instances=_sorted_instances(instances),
    )


def instance_counts(head: Head | None) -> dict[str, int]:
    """``{"total", "completed", "in_flight", "errors"}`` over every fan-out of ``head``."""
    counts = {"total": 0, "completed": 0, "in_flight": 0, "errors": 0}
    if head is None:
        return counts
    for slot in head.slots:
        counts["total"] += slot.header.instance_count
        for inst in slot.instances:
            _count(counts, inst, 1)
    return counts


def _count(counts: dict[str, int], inst: FanOutInstanceProgress, sign: int) -> None:
    if inst.state == "completed":
        counts["completed"] += sign
        if inst.result_is_error:
            counts["errors"] += sign
    elif inst.state == "in_flight":
        counts["in_flight"] += sign


def update_counts(counts: dict[str, int], before: Head | None, frame: Any) -> bool:
    """Adjust ``counts`` (from :func:`instance_counts` of ``before``) for a delta frame that
    only changes instances; ``False`` when the frame needs a full recount (snapshot, layout
    change, delete, first save)."""
    if before is None or not isinstance(frame, Save) or frame.layout is not None:
        return False
    by_fid = {s.header.fid: s for s in before.slots} if frame.instances else {}
    for (fid, index), progress in _last_changes(frame.instances).items():
        _count(counts, by_fid[fid].instances[index], -1)
        _count(counts, progress, 1)
    return True


def _last_changes(
    changes: tuple[InstanceChange, ...],
) -> dict[tuple[int, int], FanOutInstanceProgress]:
    """Each changed instance's new progress: in a batch (several buffered ``save_instance``
    calls in one frame) an instance may change more than once, and the later change wins."""
    return {(ch.fid, ch.index): ch.progress for ch in changes}
