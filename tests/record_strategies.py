"""Hypothesis strategies for checkpoint records, shared by test_properties and test_stateful.

Records follow openarmature's shapes and its contract (projections.records relies on it):
- states, parent states and results are JSON-like (tuples would come back as lists);
- text is any Unicode except lone surrogates (which UTF-8, hence msgpack, cannot carry);
- ints stay within ±2**63, floats are never NaN (NaN != NaN would fail every comparison);
- an instance is exactly ``NOT_STARTED``, in flight (no result) or completed;
- :func:`next_record` evolves a record the way an engine does: within one fan-out's life an
  instance only moves not_started -> in_flight -> completed and an in-flight one only gains inner
  positions, a fan-out that reappears does so after a save without it, and no two fan-outs of a
  record share a key. Completed positions may be kept, appended to, truncated or replaced.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
    FanOutProgress,
    NodePosition,
)

SAVE_KINDS = ("save", "fan_out_internal", "fan_out_in_flight_failure")

_chars = st.characters(exclude_categories=["Cs"])  # no lone surrogates
texts = st.text(_chars, max_size=8)
ids = st.text(_chars, min_size=1, max_size=12)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
floats = st.floats(allow_nan=False)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | ints | floats | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=10,
)
# A small alphabet of names makes equal fan-out keys (and so slot reuse) frequent.
names = st.sampled_from(["a", "b", "fan", "ü"]) | texts
namespaces = st.lists(names, max_size=3).map(tuple)
positions = st.builds(
    NodePosition,
    namespaces,
    names,
    ints,
    st.integers(min_value=0, max_value=5),
    st.none() | st.integers(min_value=0, max_value=2**31),
)
position_tuples = st.lists(positions, max_size=4).map(tuple)
lineages = st.lists(
    st.builds(EnclosingFanOutInstance, namespaces, names, st.integers(0, 5)), max_size=3
).map(tuple)
in_flights = position_tuples.map(
    lambda inner: FanOutInstanceProgress("in_flight", None, False, inner)
)
completeds = st.builds(
    lambda result, error, inner: FanOutInstanceProgress("completed", result, error, inner),
    json_values,
    st.booleans(),
    position_tuples,
)
instances = st.just(NOT_STARTED) | in_flights | completeds
# States past SPLICE_MIN_BYTES, so saves store them as splices of the previous state's bytes.
_PAD = "p" * 300
big_states = st.builds(
    lambda head, items, tail: {"head": head, "pad": _PAD, "items": items, "tail": tail},
    json_values,
    st.lists(json_values, max_size=4),
    json_values,
)


@st.composite
def _next_state(draw: st.DrawFn, prev: Any) -> Any:
    """A new state; a big one is often an edit of ``prev`` in one or two places."""
    if isinstance(prev, dict) and prev.get("pad") == _PAD and draw(st.booleans()):
        new = dict(prev)
        for field_name in draw(st.lists(st.sampled_from(["head", "items", "tail"]), max_size=2)):
            if field_name == "items":
                new["items"] = [*prev["items"], draw(json_values)]
            else:
                new[field_name] = draw(json_values)
        return new
    return draw(json_values | big_states)


def _key(fo: FanOutProgress) -> tuple[Any, ...]:
    return (fo.fan_out_node_name, fo.namespace, fo.enclosing_fan_out_lineage, fo.instance_count)


@st.composite
def fan_outs(draw: st.DrawFn) -> FanOutProgress:
    insts = draw(st.lists(instances, min_size=1, max_size=5))
    return FanOutProgress(draw(names), draw(namespaces), len(insts), tuple(insts), draw(lineages))


def _new_fan_outs(draw: st.DrawFn, taken: set[tuple[Any, ...]]) -> list[FanOutProgress]:
    out = []
    for fo in draw(st.lists(fan_outs(), max_size=3)):
        if _key(fo) not in taken:
            taken.add(_key(fo))
            out.append(fo)
    return out


@st.composite
def records(draw: st.DrawFn, invocation_id: str) -> CheckpointRecord:
    """Any record (as a first save, or after a delete)."""
    return CheckpointRecord(
        invocation_id=invocation_id,
        correlation_id=draw(texts),
        state=draw(json_values | big_states),
        completed_positions=draw(st.lists(positions, max_size=6).map(tuple)),
        parent_states=tuple(draw(st.lists(json_values, max_size=3))),
        last_saved_at=draw(floats),
        schema_version=draw(texts),
        fan_out_progress=tuple(_new_fan_outs(draw, set())),
    )


def _advance(draw: st.DrawFn, inst: FanOutInstanceProgress) -> FanOutInstanceProgress:
    if inst.state == "completed":
        return inst
    choice = draw(st.integers(0, 2))
    if choice == 0:
        return inst
    inner = inst.completed_inner_positions + draw(position_tuples)
    if choice == 1:
        return FanOutInstanceProgress("in_flight", None, False, inner)
    return FanOutInstanceProgress("completed", draw(json_values), draw(st.booleans()), inner)


@st.composite
def advanced(draw: st.DrawFn, inst: FanOutInstanceProgress) -> FanOutInstanceProgress:
    """``inst`` or a later state of it (what ``save_instance`` may be given next)."""
    return _advance(draw, inst)


def _edit_positions(draw: st.DrawFn, old: tuple[NodePosition, ...]) -> tuple[NodePosition, ...]:
    how = draw(st.sampled_from(["keep", "append", "truncate", "replace"]))
    if how == "keep":
        return old
    if how == "append":
        return old + draw(st.lists(positions, min_size=1, max_size=3).map(tuple))
    cut = draw(st.integers(0, len(old)))
    if how == "truncate":
        return old[:cut]
    return old[:cut] + draw(st.lists(positions, min_size=1, max_size=3).map(tuple))


@st.composite
def next_record(
    draw: st.DrawFn, invocation_id: str, prev: CheckpointRecord | None
) -> CheckpointRecord:
    """The next record an engine could save after ``prev`` (see the module invariants)."""
    if prev is None:
        return draw(records(invocation_id))

    def maybe(old: Any, new: st.SearchStrategy[Any]) -> Any:
        return draw(new) if draw(st.booleans()) else old

    kept: list[FanOutProgress] = []
    for fo in prev.fan_out_progress:
        if draw(st.integers(0, 5)) == 0:
            continue  # this fan-out ended
        insts = tuple(_advance(draw, i) for i in fo.instances)
        kept.append(
            FanOutProgress(
                fo.fan_out_node_name,
                fo.namespace,
                fo.instance_count,
                insts,
                fo.enclosing_fan_out_lineage,
            )
        )
    kept = list(draw(st.permutations(kept))) if kept else kept
    taken = {_key(fo) for fo in prev.fan_out_progress}
    return CheckpointRecord(
        invocation_id=invocation_id,
        correlation_id=maybe(prev.correlation_id, texts),
        state=maybe(prev.state, _next_state(prev.state)),
        completed_positions=_edit_positions(draw, prev.completed_positions),
        parent_states=maybe(prev.parent_states, st.lists(json_values, max_size=3).map(tuple)),
        last_saved_at=draw(floats),
        schema_version=maybe(prev.schema_version, texts),
        fan_out_progress=(*kept, *_new_fan_outs(draw, taken)),
    )


Op = tuple[str, CheckpointRecord | None]  # (save kind or "delete", record or None)


@st.composite
def save_sequences(
    draw: st.DrawFn, invocation_id: str, max_size: int = 12, deletes: bool = True
) -> list[Op]:
    """Saves of one invocation in call order, each evolved from the one before; deletes too."""
    ops: list[Op] = []
    prev: CheckpointRecord | None = None
    for _ in range(draw(st.integers(1, max_size))):
        if deletes and draw(st.integers(0, 9)) == 0:
            ops.append(("delete", None))
            prev = None
            continue
        prev = draw(next_record(invocation_id, prev))
        ops.append((draw(st.sampled_from(SAVE_KINDS)), prev))
    return ops
