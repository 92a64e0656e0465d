"""Checks of the options handed to ``EventLog.open`` / ``CheckpointLog.open``, made before the
log's directory is touched, so that a misspelt or mistyped option raises
:class:`~eventlog.errors.InvalidOption` (a ``CheckpointError``) and creates nothing."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from eventlog.errors import InvalidOption


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(value: Any) -> bool:
    return _int(value) and value > 0


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


# What each numeric or bytes option must be: (check, what it must be, in words).
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "map_size_max": (_optional(_positive_int), "None or an int > 0 (bytes)"),
    "map_size_initial": (_optional(_positive_int), "None or an int > 0 (bytes)"),
    "frame_bytes_max": (_positive_int, "an int > 0 (bytes)"),
    "batch_frames_max": (_positive_int, "an int > 0"),
    "compress_threshold_bytes": (
        _optional(lambda v: _int(v) and v >= 0),
        "None or an int >= 0 (bytes)",
    ),
    "flush_interval": (
        _optional(lambda v: (_int(v) or isinstance(v, float)) and v >= 0),
        "None or a number of seconds >= 0",
    ),
    "chain_key": (lambda v: isinstance(v, bytes), "bytes"),
    "readonly": (lambda v: isinstance(v, bool), "a bool"),
}


def check_open_options(where: str, options: dict[str, Any], accepted: Iterable[str]) -> None:
    """Raise :class:`InvalidOption` for an option not in ``accepted`` or of the wrong type."""
    names = sorted(set(accepted))
    for name, value in options.items():
        if name not in names:
            raise InvalidOption(
                f"{where}: expected options among {', '.join(names)}; found unknown option "
                f"{name}={value!r}: remove it or fix its spelling (nothing was opened)"
            )
        check = _CHECKS.get(name)
        if check is not None and not check[0](value):
            raise InvalidOption(
                f"{where}: option {name} must be {check[1]}, found {type(value).__name__} "
                f"{value!r}: pass a valid value (nothing was opened)"
            )


def keyword_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The keyword parameters of ``fn`` (the options a class's ``__init__`` accepts)."""
    return tuple(
        p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY
    )


def check_batching(where: str, batching: Any) -> None:
    """``batching`` must be None or have an int ``flush_every`` (openarmature's class, ours)."""
    if batching is None:
        return
    every = getattr(batching, "flush_every", None)
    if not _int(every):
        raise InvalidOption(
            f"{where}: batching must be None or a FanOutInternalSaveBatching(flush_every=N), "
            f"found {type(batching).__name__} {batching!r}: pass "
            "FanOutInternalSaveBatching(flush_every=256), say (nothing was opened)"
        )
