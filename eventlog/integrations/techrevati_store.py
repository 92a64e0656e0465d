"""techrevati-runtime threads on the log, framework-free: the materialized view (table
``techrevati``: ``b"h" + sid`` -> the thread's head, ``b"s" + sid + blake2b-128(step key)`` ->
the step frame's seq); the stored shapes and the folds are projections/techrevati.py's.
eventlog.integrations.techrevati builds the saver on it; compaction, ``rebuild`` and
``verify`` use :data:`VIEW` without the framework.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from backends.base import WriteTxn
from eventlog.integrations.headed import HeadedEventView
from eventlog.layout import U64 as _U64
from eventlog.log import StoredFrame
from projections import techrevati as read_fold
from projections.techrevati import DELETE, STEP
from projections.techrevati import Head as _Head
from projections.techrevati import StepData as _Step
from projections.techrevati import apply as _apply

TABLE: Final = "techrevati"
TABLES: Final = (TABLE,)
STREAM_PREFIX: Final = "techrevati:"

_HEAD: Final = b"h"  # + stream id (u64): the thread's _Head
_STEPS: Final = b"s"  # + stream id (u64) + blake2b-128 of the step key: the step frame's seq


def _step_digest(step_key: str) -> bytes:
    return hashlib.blake2b(step_key.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _head_key(sid: int) -> bytes:
    return _HEAD + _U64.pack(sid)


def _steps_prefix(sid: int) -> bytes:
    return _STEPS + _U64.pack(sid)


class TechrevatiView(HeadedEventView[_Head]):
    """techrevati's materialized view: the thread head and its step index."""

    def __init__(self) -> None:
        super().__init__(
            name="techrevati",
            table=TABLE,
            stream_prefix=STREAM_PREFIX,
            event_prefix="techrevati.",
            head_type=_Head,
            head_prefix=_HEAD,
            unit="thread",
        )

    def step(self, head: _Head, frame: Any, seq: int) -> _Head:
        return _apply(head, frame, seq)

    def read_apply(self, state: Any, frame: Any) -> tuple[Any, str, str, str | None, str | None]:
        shown = read_fold.show(state, frame)
        return (*shown, None)

    def apply_extra(self, txn: WriteTxn, sid: int, seq: int, frame: Any) -> None:
        if frame.name == STEP:
            key = _step_digest(msgspec.convert(frame.data, _Step).key)
            txn.put(TABLE, _steps_prefix(sid) + key, _U64.pack(seq))
        elif frame.name == DELETE:
            txn.delete_prefix(TABLE, _steps_prefix(sid))

    def extra_prefix(self, sid: int) -> bytes:
        return _steps_prefix(sid)

    def expected_extra(self, frames: Iterable[StoredFrame[Any]]) -> dict[bytes, bytes]:
        steps: dict[bytes, bytes] = {}
        for sf in frames:
            if sf.frame.name == STEP:
                steps[_step_digest(msgspec.convert(sf.frame.data, _Step).key)] = _U64.pack(sf.seq)
            elif sf.frame.name == DELETE:
                steps.clear()
        return steps

    def extra_problem(
        self, stream: str, stored: dict[bytes, bytes], want: dict[bytes, bytes]
    ) -> str:
        return (
            f"techrevati step index holds {len(stored)} entries, the fold gives "
            f"{len(want)} (or they point at other frames)"
        )


VIEW: Final = TechrevatiView()
