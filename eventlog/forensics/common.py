"""What every forensics module shares: the progress callback, kinds, decoders, and
:class:`Records`, what forensics reads of a checkpoint log."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from eventlog.materialized import HeadRow
from eventlog.records import HISTORY_KINDS as _HISTORY_KINDS
from eventlog.records import (
    CheckpointFilter,
    CheckpointRecord,
    CheckpointSummary,
    FanOutInstanceProgress,
    NodePosition,
)

if TYPE_CHECKING:
    from eventlog.log import EventLog

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called every few thousand frames, and once at the end."""

HISTORY_KINDS: Final = _HISTORY_KINDS
EXPORT_FORMATS: Final = ("jsonl", "jsonl-frames")
PROGRESS_EVERY_FRAMES: Final = 4096

_dec_row = msgspec.msgpack.Decoder(HeadRow)
_dec_pos = msgspec.msgpack.Decoder(NodePosition)
_dec_inst = msgspec.msgpack.Decoder(FanOutInstanceProgress)
_decode_any: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder()


class Records(Protocol):
    """What forensics reads of a checkpoint log: :class:`eventlog.checkpoints.CheckpointLog`
    has it (forensics never imports that module; CheckpointLog's forensic methods call here)."""

    @property
    def log(self) -> EventLog: ...

    def list(self, filter: CheckpointFilter | None = None) -> list[CheckpointSummary]: ...

    def record_at(self, invocation_id: str, seq: int) -> CheckpointRecord | None: ...
