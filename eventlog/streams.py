"""What the read side knows of a stream and of each of its frames, whatever kind it is.

Every materialized view (:mod:`eventlog.views`) describes the streams it claims with a
:class:`StreamInfo` and walks them as :class:`Step` rows, one per frame; the query layer
(:mod:`eventlog.read`) and its two faces (the ``ckptlog`` command line and the web viewer) use
only these, so a new kind of stream is one new view module.

Invariants:
- Plain data: a step's ``value`` is dicts, lists, str, numbers, bools and None (what the
  stream holds as of that frame; ``None``: nothing live), the same for the same frames.
- Nothing here imports beyond the standard library and msgspec (a leaf: views import it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

__all__ = ["Step", "StreamInfo", "plain"]


def plain(value: Any) -> Any:
    """Structs (array-like ones included) as dicts keyed by field name, tuples as lists:
    what a JSON reader expects. Leaves states (already plain data) alone."""
    if isinstance(value, msgspec.Struct):
        return {name: plain(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class StreamInfo:
    """A stream as its view names it.

    ``kind``: the view's name for its streams (``checkpoint``, ``langgraph``, ...; ``events``
    for a stream no view claims); ``noun``: what one stream is, for a listing (``langgraph
    thread``); ``display``: the name to show (``thread-1 ns=sub``); ``aliases``: other names a
    user may type for it (a thread id without its prefix); ``labels``: the integration's own
    ids (``thread_id``, ``task_id``...), merged into listings as they are; ``records``: its
    steps carry checkpoint records (``Step.record``), which the faces print as records.
    """

    stream: str
    kind: str
    noun: str
    display: str
    aliases: tuple[str, ...] = ()
    labels: dict[str, Any] = field(default_factory=dict)
    records: bool = False


@dataclass
class Step:
    """One frame of a stream, and the stream as of it.

    ``kind``: the frame's kind in the view's terms (a save kind, ``delete``, ``checkpoint``,
    ``writes``...); ``label``: what the frame is, in a few words; ``ref``: the id it saves or
    refers to, when it has one; ``nodes``: the node(s) whose work it records; ``frame_type``:
    the stored frame's type (``delta``, ``snapshot``, ``event``...). ``record`` and ``detail``
    are the checkpoint view's (the record as of this seq, and its forensic walk step)."""

    seq: int
    global_seq: int
    saved_at: float
    kind: str
    label: str
    ref: str | None
    nodes: tuple[str, ...]
    stored_bytes: int
    checksum: bytes
    frame: Any
    frame_type: str
    value: Any
    record: Any = None
    detail: Any = None

    @property
    def node(self) -> str | None:
        return ", ".join(self.nodes) or None

    @property
    def title(self) -> str:
        """``checkpoint step 3 (loop) 1f1e...``: what the frame is, and the id it is about."""
        return " ".join(x for x in (self.kind, self.label, self.ref) if x)
