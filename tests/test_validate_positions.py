"""``check_positions`` converts through a Struct-wrapped type (read once by msgspec, not at
every call): it accepts and refuses exactly what the previous form did, with the same error
path and message (a verbatim copy of that form is the reference below), on generated tuples
of positions, ours and look-alikes, valid and not, whole or from an index."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog.errors import InvalidRecord
from eventlog.records import NodePosition
from eventlog.validate import _Position, check_position, check_positions, check_seq, fail

_POSITIONS = tuple[_Position, ...]


def reference(ps: Any, path: str, start: int = 0) -> None:
    check_seq(ps, path)
    if len(ps) <= start:
        return
    try:
        msgspec.convert(ps[start:] if start else ps, _POSITIONS, from_attributes=True, strict=True)
    except (msgspec.ValidationError, UnicodeEncodeError) as e:
        error: Exception | None = e
    else:
        error = None
        if not any(issubclass(t, Mapping) for t in set(map(type, ps))):
            return
    for i in range(start, len(ps)):
        check_position(ps[i], f"{path}[{i}]")
    msg, _, where = str(error).partition(" - at `$")
    if start:
        msg += f" (index counted from {start})"
    fail(f"{path}{where.rstrip('`')}", f"as declared ({msg})", ps)


@dataclasses.dataclass
class LookAlike:
    namespace: Any
    node_name: Any
    step: Any
    attempt_index: Any = 0
    fan_out_index: Any = None


class MappingPosition(Mapping[str, Any]):
    """A mapping with a position's attributes: convert takes it, the writer would not."""

    namespace = ()
    node_name = "a"
    step = 1

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __iter__(self) -> Any:
        return iter(("namespace", "node_name", "step"))

    def __len__(self) -> int:
        return 3


odd: st.SearchStrategy[Any] = st.sampled_from(
    [None, True, 1.5, "x", b"x", 2**63, -(2**63) - 1, [], ("a", 1), {"k": 1}, "\ud800"]
)
texts = st.text(max_size=3) | odd
ints = st.integers(-(2**63), 2**63 - 1) | odd
namespaces = st.lists(st.text(max_size=2), max_size=2).map(tuple) | odd
positions = (
    st.builds(NodePosition, namespaces, texts, ints, ints, st.none() | ints)
    | st.builds(LookAlike, namespaces, texts, ints, ints, st.none() | ints)
    | st.fixed_dictionaries({"namespace": namespaces, "node_name": texts, "step": ints})
    | st.just(MappingPosition())
    | odd
)


def outcome(check: Any, ps: Any, start: int) -> str | None:
    try:
        check(ps, "record.completed_positions", start)
    except InvalidRecord as e:
        return str(e)
    return None


@settings(max_examples=400, deadline=None)
@given(
    st.lists(positions, max_size=5).map(tuple) | st.lists(positions, max_size=3),
    st.integers(0, 3),
)
def test_check_positions_agrees_with_its_previous_form(ps: Any, start: int) -> None:
    assert outcome(check_positions, ps, start) == outcome(reference, ps, start)


def test_a_mapping_that_passes_every_field_check_is_refused_as_before() -> None:
    ps = (NodePosition((), "a", 1), MappingPosition())
    assert outcome(check_positions, ps, 0) == outcome(reference, ps, 0)
    assert outcome(check_positions, ps, 0) is not None
