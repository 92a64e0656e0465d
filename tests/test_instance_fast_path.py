"""The lean ``save_instance`` path and ``save_instances``' bulk checks (issue 22) accept and
refuse exactly what the exact checks (``eventlog.validate.encode_progress``) do, with the same
error class and path, for results of every kind."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import re
import uuid
from decimal import Decimal
from typing import Any, NamedTuple

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.memory import MemoryBackend
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import CheckpointError
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
)
from eventlog.validate import check_instance_items, encode_progress, plain_results, quick_progress


class _Color(enum.IntEnum):
    RED = 1


class _Name(enum.StrEnum):
    A = "a"


class _Pair(NamedTuple):
    x: int
    y: int


class _Key(str):
    """A str subclass: as a dict key it makes the dict's referents its keys too."""


@dataclasses.dataclass
class _Point:
    x: int
    y: int


RESULTS: list[Any] = [
    None, 1, -(2**63), 2**64 - 1, 1.5, float("nan"), "s", b"bytes", True,
    {"item": 1, "ok": True, "score": 0.5, "tag": "r"}, {"k": [1, 2, {"n": None}]},
    {1: "int key"}, (1, 2), [(1, 2)], {"nested": (3,)}, _Color.RED, {"c": _Name.A},
    {"s": {1, 2}}, {1, 2}, frozenset(), datetime.datetime(2026, 1, 1),
    {"when": datetime.date(2026, 1, 1)}, Decimal("1.5"), uuid.UUID(int=7), object(),
    {"deep": [object()]}, 2**64, -(2**64), "\ud800",
    collections.OrderedDict(a=1), collections.defaultdict(int, b=2), _Pair(1, 2),
    _Point(1, 2), {"p": _Point(3, 4)}, msgspec.Raw(b"\x01"),
    {_Name.A: 1}, {"a": 1, _Key("b"): 2}, {_Key("k"): "v"}, {"a": 1, 2: "b"}, {},
    # wide dicts (past LOOP_KEYS_MAX: cleared at C speed, not by the loop)
    {f"k{i}": i for i in range(20)}, {**{f"k{i}": 0.5 for i in range(20)}, 7: "int key"},
    {**{f"k{i}": "v" for i in range(20)}, "when": datetime.date(2026, 1, 1)},
    {**{f"k{i}": None for i in range(20)}, "d": Decimal("2")},
]  # fmt: skip


def _outcome(fn: Any) -> tuple[str, str | None]:
    try:
        fn()
    except CheckpointError as e:
        return type(e).__name__, getattr(e, "path", None)
    return "ok", None


def _log() -> CheckpointLog:
    cl = CheckpointLog.on_backend(
        MemoryBackend(), batching=FanOutInternalSaveBatching(flush_every=10_000)
    )
    fan = FanOutProgress("f", (), 4, (NOT_STARTED,) * 4)
    cl.save("a", CheckpointRecord("a", "c", {}, (), (), 1.0, fan_out_progress=(fan,)))
    return cl


def _id(i: int, r: Any) -> str:
    """A test id that is the same in every process (no object addresses), for pytest-xdist."""
    return f"{i}-{re.sub(r' at 0x[0-9a-f]+', '', repr(r))[:30]}"


@pytest.mark.parametrize("result", RESULTS, ids=[_id(i, r) for i, r in enumerate(RESULTS)])
def test_fast_paths_agree_with_the_exact_checks(result: Any) -> None:
    progress = FanOutInstanceProgress("completed", result)
    exact = _outcome(lambda: encode_progress(progress, 2))
    cl = _log()
    name = "f"
    ns: tuple[str, ...] = ()
    cl.save_instance("a", name, 0, FanOutInstanceProgress("in_flight"), namespace=ns)  # primes
    assert _outcome(lambda: cl.save_instance("a", name, 2, progress, namespace=ns)) == exact
    assert _outcome(lambda: check_instance_items([(0, NOT_STARTED), (2, progress)])) == exact
    assert _outcome(lambda: cl.save_instances("a", "f", [(2, progress)])) == exact
    if exact[0] == "ok":
        assert quick_progress(progress) in (None, encode_progress(progress, 2))
        cl.flush()
        record = cl.load("a")
        assert record is not None
        got = record.fan_out_progress[0].instances[2]
        assert msgspec.msgpack.encode(got) == encode_progress(progress, 2)  # NaN != NaN
        assert cl.verify().ok


_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(result=_plain)
def test_quick_progress_is_the_exact_encoding_of_plain_results(result: Any) -> None:
    progress = FanOutInstanceProgress("completed", result)
    try:
        exact = encode_progress(progress, 0)
    except CheckpointError:
        assert quick_progress(progress) is None
        return
    assert quick_progress(progress) in (None, exact)


def test_plain_results_clears_only_exact_str_keys_and_scalar_values() -> None:
    """``save_instances``' lossless test at C speed: a dict whose referents are not its values
    alone (a key of another type, a str subclass included) or a value that is not a scalar
    sends the whole call to the decode-back test."""
    assert plain_results([{"a": 1, "b": None}, 2, None, "s", {}])
    assert not plain_results([{"a": 1}, {_Key("b"): 2}])
    assert not plain_results([{"a": 1}, {1: "int key"}])
    assert not plain_results([{"a": (1,)}])
    assert not plain_results([{"a": _Name.A}])
    assert not plain_results([(1, 2)])
