"""Values that msgpack cannot give back as they went in are refused with their path (issue
14): a naive datetime, a date, time or timedelta, a Decimal, a UUID, a set or frozenset in a
state, a parent state or an instance result raises ``EncodingError`` (a ``CheckpointError``)
naming where, and nothing is written. Tuples are kept as lists, as the sequences they are; a
timezone-aware datetime is kept (msgpack's timestamp: the same instant comes back, in UTC)."""

from __future__ import annotations

import datetime
import decimal
import math
import uuid
from pathlib import Path
from typing import Any

import pytest

from eventlog import (
    CheckpointLog,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutProgress,
)
from eventlog.errors import CheckpointError, EncodingError

LOSSY: list[tuple[Any, str]] = [
    (datetime.datetime(2024, 6, 11, 10, 0), "datetime"),  # naive: would come back as a str
    (datetime.date(2024, 6, 11), "date"),
    (datetime.time(10, 0), "time"),
    (datetime.timedelta(seconds=3), "timedelta"),
    (decimal.Decimal("1.50"), "Decimal"),
    (uuid.UUID(int=7), "UUID"),
    ({1, 2}, "set"),
    (frozenset({"a"}), "frozenset"),
]


def record(state: Any, *, parents: tuple[Any, ...] = (), fan: int = 0) -> CheckpointRecord:
    fan_out = (
        (FanOutProgress("work", (), fan, (FanOutInstanceProgress("not_started"),) * fan),)
        if fan
        else ()
    )
    return CheckpointRecord("i", "c", state, (), parents, 1.0, fan_out_progress=fan_out)


@pytest.mark.parametrize(("value", "type_name"), LOSSY, ids=[t for _, t in LOSSY])
def test_a_value_that_would_change_type_is_refused_with_its_path(
    tmp_path: Path, value: Any, type_name: str
) -> None:
    with CheckpointLog.open(tmp_path / "log") as cl:
        cl.save("i", record({"ok": 1}, fan=2))
        frames = cl.stats().frames
        with pytest.raises(EncodingError) as info:
            cl.save("i", record({"a": [0, {"when": value}]}))
        assert isinstance(info.value, CheckpointError)
        assert info.value.path == "state.a[1].when"
        assert f"(a {type_name}" in str(info.value)
        with pytest.raises(EncodingError, match=r"parent_states\[0\]\.x"):
            cl.save("i", record({}, parents=({"x": value},)))
        with pytest.raises(EncodingError, match=r"result"):
            cl.save_instance("i", "work", 0, FanOutInstanceProgress("completed", {"v": value}))
        assert cl.stats().frames == frames  # nothing was written
        assert cl.load("i") == record({"ok": 1}, fan=2)


def test_values_that_round_trip_are_kept_and_tuples_come_back_as_lists(tmp_path: Path) -> None:
    state = {
        "when": "2024-06-11T10:00:00Z",  # the form the error message asks for
        "aware": datetime.datetime(
            2024, 6, 11, 12, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
        ),
        "pair": (1, (2, 3)),
        "nan": math.nan,
        "bytes": b"\x00\xff",
        "big": 2**64 - 1,
        "nested": [{"k": None, "t": True}],
    }
    with CheckpointLog.open(tmp_path / "log") as cl:
        cl.save("i", record(state))
        loaded = cl.load("i")
    assert loaded is not None
    got = loaded.state
    assert got["pair"] == [1, [2, 3]]
    assert math.isnan(got["nan"])
    assert got["aware"] == state["aware"]  # the same instant
    assert got["aware"].utcoffset() == datetime.timedelta(0)  # given back in UTC
    assert {k: got[k] for k in ("when", "bytes", "big", "nested")} == {
        k: state[k] for k in ("when", "bytes", "big", "nested")
    }
