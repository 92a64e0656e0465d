"""The lossy-value check's fast paths refuse exactly what the plain walk refuses.

``check_lossless`` clears plain states in C (``gc.get_referents`` level by level; a long level
of str, int, bool and None by one ``msgspec.convert``) and walks anything else in Python. These
tests compare it with a verbatim copy of the check as it was before the ``msgspec.convert``
path (:func:`reference`), on generated nested values full of the awkward cases: every lossy
type and subclasses of them, tuples, sets, bytes-likes, int/float/str subclasses, enums, dict
keys of every hashable type, NaN and infinities, msgspec Structs, dataclasses, dict and list
subclasses, long homogeneous levels (where the convert path runs) and deep nesting. Same
outcome, same error type, path and message.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import gc
import math
import uuid
from typing import Any, NamedTuple

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog.codec import LOSSY_TYPES, check_lossless, encode_value
from eventlog.errors import EncodingError

# -- the reference: check_lossless and _find_lossy before the msgspec.convert path, verbatim --


def _key_path(path: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def _find_lossy(value: Any, path: str) -> tuple[str, Any] | None:
    if isinstance(value, LOSSY_TYPES):
        aware = isinstance(value, datetime.datetime) and value.tzinfo is not None
        if not aware:
            return path, value
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, LOSSY_TYPES):
                return f"{path} key {k!r}", k
            found = _find_lossy(v, _key_path(path, k))
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _find_lossy(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


_PLAIN = frozenset({dict, list, tuple, str, int, float, bool, type(None), bytes})


def reference(value: Any, path: str) -> None:
    level = [value]
    while level:
        if not _PLAIN.issuperset(map(type, level)):
            break
        level = gc.get_referents(*level)
    else:
        return
    found = _find_lossy(value, path)
    if found is None:
        return
    where, bad = found
    raise EncodingError(
        f"cannot keep {where} (a {type(bad).__name__}, {bad!r}): msgpack would give it back as "
        f"a {'list' if isinstance(bad, (set, frozenset)) else 'str'}, silently another type; "
        "store it in a form that comes back as it is (an ISO 8601 str for a time, a str for "
        "a Decimal or UUID, a sorted list for a set) and convert it when you load",
        path=where,
    )


def outcome(check: Any, value: Any) -> tuple[str, str | None, str] | None:
    try:
        check(value, "state")
    except EncodingError as e:
        return type(e).__name__, e.path, str(e)
    return None


# -- awkward values --------------------------------------------------------------------------


class Str(str):
    pass


class Int(int):
    pass


class Float(float):
    pass


class Date(datetime.date):
    pass


class DateTime(datetime.datetime):
    pass


class Dec(decimal.Decimal):
    pass


class Uid(uuid.UUID):
    pass


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Mode(enum.StrEnum):
    FAST = "fast"


class Point(msgspec.Struct):
    x: Any
    y: Any = None


@dataclasses.dataclass
class Box:
    item: Any


class Pair(NamedTuple):
    a: Any
    b: Any


class MyList(list[Any]):
    pass


class MyDict(dict[Any, Any]):
    pass


UTC = datetime.UTC
lossy_values = st.sampled_from(
    [
        datetime.datetime(2024, 6, 11, 10, 0),
        DateTime(2024, 6, 11, 10, 0),
        datetime.date(2024, 6, 11),
        Date(2024, 6, 11),
        datetime.time(10, 0),
        datetime.time(10, 0, tzinfo=UTC),
        datetime.timedelta(seconds=3),
        decimal.Decimal("1.50"),
        decimal.Decimal("NaN"),
        Dec("2"),
        uuid.UUID(int=7),
        Uid(int=8),
        {1, 2},
        frozenset({"a"}),
        set(),
    ]
)
kept_scalars = st.sampled_from(
    [
        datetime.datetime(2024, 6, 11, 10, 0, tzinfo=UTC),  # aware: a msgpack timestamp
        DateTime(2024, 6, 11, 10, 0, tzinfo=UTC),
        Str("sub"),
        Int(3),
        Float(2.5),
        Color.RED,
        Level.LOW,
        Mode.FAST,
        b"\x00\xff",
        bytearray(b"ba"),
        memoryview(b"mv"),
        math.nan,
        math.inf,
        -math.inf,
        2**64 - 1,
        -(2**63),
        True,
        False,
        None,
    ]
)
plain_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=4)
)
leaves = plain_scalars | kept_scalars | lossy_values
hashable_keys = (
    st.text(max_size=4)
    | st.integers(-5, 5)
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.none()
    | st.binary(max_size=3)
    | st.sampled_from(
        [
            datetime.date(2024, 1, 1),
            datetime.datetime(2024, 1, 1),
            datetime.datetime(2024, 1, 1, tzinfo=UTC),
            decimal.Decimal("3"),
            uuid.UUID(int=1),
            frozenset({1}),
            (1, "a"),
            (1, datetime.date(2024, 1, 1)),
            Str("k"),
            Level.LOW,
            Color.RED,
            "not an identifier",
        ]
    )
)


# Long levels of leaves, mostly str and int or numbers (what the convert paths take), sometimes
# with one other value at the start, the end or in between.
def _with_odd(body: list[Any], odd: Any, where: float) -> list[Any]:
    if odd is None:
        return body
    at = int(where * len(body))
    return [*body[:at], odd, *body[at:]]


runs = st.builds(
    _with_odd,
    st.lists(
        st.text(max_size=3) | st.integers(-3, 3) | st.booleans() | st.none(),
        min_size=30,
        max_size=90,
    )
    | st.lists(
        st.floats() | st.integers(-(2**63), 2**64 - 1) | st.booleans() | st.none(),
        min_size=30,
        max_size=90,
    ),
    st.none() | lossy_values | kept_scalars | plain_scalars,
    st.sampled_from([0.0, 0.5, 1.0]),
)


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4)
        | st.dictionaries(hashable_keys, inner, max_size=3)
        | st.builds(Point, inner, inner)
        | st.builds(Box, inner)
        | st.builds(Pair, inner, inner)
        | st.lists(inner, max_size=3).map(MyList)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3).map(MyDict)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3).map(collections.OrderedDict)
        | runs.map(lambda r: {"run": r})
        | st.lists(runs, min_size=1, max_size=3)
    )


values = st.recursive(leaves | runs, containers, max_leaves=40)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_the_fast_check_refuses_exactly_what_the_walk_refuses(value: Any) -> None:
    assert outcome(check_lossless, value) == outcome(reference, value)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(max_size=3) | st.integers(-3, 3), min_size=32, max_size=64)
    | st.lists(st.floats() | st.integers(-(2**63), 2**64 - 1), min_size=32, max_size=64),
    lossy_values | kept_scalars,
    st.floats(0.05, 0.95),
)
def test_one_odd_value_inside_a_long_run_agrees(body: list[Any], odd: Any, where: float) -> None:
    value = {"run": _with_odd(body, odd, where)}
    assert outcome(check_lossless, value) == outcome(reference, value)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 400), leaves, st.sampled_from(["list", "tuple", "dict"]))
def test_deep_nesting_agrees(depth: int, leaf: Any, kind: str) -> None:
    value: Any = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else (value,) if kind == "tuple" else {"a": value}
    assert outcome(check_lossless, value) == outcome(reference, value)


LOSSY_EXAMPLES = [
    datetime.datetime(2024, 6, 11, 10, 0),
    DateTime(2024, 6, 11),
    datetime.date(2024, 6, 11),
    Date(2024, 6, 11),
    datetime.time(10, 0),
    datetime.timedelta(seconds=3),
    decimal.Decimal("1.50"),
    Dec("7"),
    uuid.UUID(int=7),
    Uid(int=9),
    {1, 2},
    frozenset({"a"}),
]


@pytest.mark.parametrize("value", LOSSY_EXAMPLES, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("at", [0, 1, 50, 98, 99])
@pytest.mark.parametrize("filler", ["word", 7, 2.5, math.nan, True, None, Str("s"), Level.LOW])
def test_one_lossy_value_in_a_long_run_of_leaves_is_refused_with_its_index(
    value: Any, at: int, filler: Any
) -> None:
    words: list[Any] = [filler] * 100
    words[at] = value
    state = {"step": 1, "words": words}
    with pytest.raises(EncodingError) as info:
        check_lossless(state, "state")
    assert info.value.path == f"state.words[{at}]"
    assert outcome(check_lossless, state) == outcome(reference, state)
    try:
        msgspec.msgpack.encode(state)
    except (TypeError, ValueError):
        return  # (msgspec encodes no str subclass, nor some subclasses of the lossy types)
    with pytest.raises(EncodingError) as info:
        encode_value(state)
    assert info.value.path == f"state.words[{at}]"


def test_decimals_among_long_runs_of_numbers_are_refused() -> None:
    """msgspec.convert takes a Decimal for a float: the encodings tell them apart."""
    for run in (
        [1.5] * 40 + [decimal.Decimal("2")] + [2.5] * 40,
        [1, 2.5] * 20 + [Dec("2.5")] + [3] * 20,
        [math.nan] * 40 + [decimal.Decimal("NaN")] + [math.inf] * 40,
        [decimal.Decimal(1)] * 50,
    ):
        with pytest.raises(EncodingError):
            check_lossless({"v": run}, "state")


def test_long_runs_of_leaves_and_their_subclasses_are_kept() -> None:
    for run in (
        ["x" * 64] * 100,
        [Str("s")] * 100,
        [Level.LOW, Int(2), 3, True, None, "a"] * 20,
        [Mode.FAST] * 40,
        [2**64 - 1, -(2**63)] * 40,
        [1.5, 2, True, None, math.nan, -math.inf] * 20,
        [0.1] * 100,
    ):
        check_lossless({"run": run, "more": [run, tuple(run)]}, "state")
        reference({"run": run}, "state")  # (the walk keeps them too)


class Impostor(enum.StrEnum):
    """An enum member that claims to be a date (``isinstance`` believes ``__class__``)."""

    A = "2024-01-01"

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return datetime.date

    def __repr__(self) -> str:
        return "Impostor.A"


def test_a_value_lying_about_its_class_in_a_long_run_is_judged_as_the_walk_judges_it() -> None:
    """msgspec.convert goes by the C type (a str); the fast path must not vouch for it."""
    state = {"words": ["a"] * 40 + [Impostor.A] + ["b"] * 40}
    assert outcome(reference, state) is not None
    assert outcome(check_lossless, state) == outcome(reference, state)
