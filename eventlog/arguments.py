"""Checks of the arguments of the read and delete methods (``load``, ``history``,
``record_at``, ``list``, ...), so that a wrong type raises a typed error saying what was
expected, instead of a ``TypeError`` from deep inside a lookup. Saves are checked by
:mod:`eventlog.validate`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from eventlog.errors import InvalidArgument, InvalidRecord, InvalidStreamKey
from eventlog.records import HISTORY_KINDS


def _found(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80] + '...' if len(text) > 80 else text}"


def stream_id(name: str, value: Any) -> None:
    """An invocation (stream) id: a non-empty str."""
    if not isinstance(value, str) or not value:
        raise InvalidStreamKey(
            f"{name} must be a non-empty str, found {_found(value)}; pass the id the save used"
        )


def seq(name: str, value: Any) -> None:
    """A stream seq: an int (not a bool)."""
    if not isinstance(value, int) or isinstance(value, bool) or value >= 2**63:
        raise InvalidRecord(
            f"{name} must be an int seq below 2**63 (1 is the first save), found "
            f"{_found(value)}; pass one of the seqs history() reports"
        )


def timestamp(name: str, value: Any, *, optional: bool = False) -> None:
    """A wall-clock time: a finite float or int (not a bool); None when ``optional``."""
    if optional and value is None:
        return
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise InvalidRecord(
            f"{name} must be a finite time.time() timestamp (float or int)"
            f"{' or None' if optional else ''}, found {_found(value)}; convert it first"
        )


def strings(name: str, value: Any, *, optional: bool = False) -> None:
    """A tuple or list of str (a namespace, a set of kinds); None when ``optional``."""
    if optional and value is None:
        return
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, set, frozenset)):
        raise InvalidRecord(
            f"{name} must be a tuple (or list) of str, found {_found(value)}; wrap a single "
            "name in a tuple"
        )
    for item in value:
        if not isinstance(item, str):
            raise InvalidRecord(f"{name} must hold only str, found {_found(item)} in it")


def checkpoint_filter(value: Any) -> None:
    """``list(filter)``: None or a CheckpointFilter (an object with a str-or-None
    ``correlation_id``)."""
    if value is None:
        return
    corr = getattr(value, "correlation_id", _MISSING)
    if corr is _MISSING or not (corr is None or isinstance(corr, str)):
        raise InvalidRecord(
            "filter must be None or a CheckpointFilter(correlation_id=str or None), found "
            f"{_found(value)}; pass CheckpointFilter(correlation_id=...)"
        )


_MISSING = object()


def history_kinds(kinds: Iterable[str] | None) -> frozenset[str] | None:
    """``kinds`` of ``history``: save kinds and ``"delete"`` (``None``: every kind)."""
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    chosen = frozenset(kinds)
    unknown = sorted(chosen - set(HISTORY_KINDS))
    if unknown:
        raise InvalidArgument(
            f"unknown history kind(s) {unknown}; expected any of {list(HISTORY_KINDS)}"
        )
    return chosen
