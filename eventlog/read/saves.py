"""One row per stored frame, whatever kind of stream holds it: what ``ckptlog tail`` prints
and what the ``saves`` table of an export holds.

Invariants:
- A frame is summarized from itself alone (no replay of the frames before it): its kind in
  its view's terms, the node whose work it records when the frame names one, the id it is
  about, its correlation id when it carries one, its size and checksum.
- Read-only; nothing here imports the command line or the viewer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eventlog import views, walker
from eventlog.frames import Event, LgCheckpoint, LgRemove, LgWrites, Save, Snapshot
from eventlog.log import EventLog, StoredFrame
from eventlog.read.streams import describe
from eventlog.streams import StreamInfo

__all__ = ["Saved", "frame_facts", "info_of", "node_of_task", "saved"]


@dataclass(frozen=True)
class Saved:
    """A frame as one line: where it is (stream, its seq, the log's global seq), when it was
    saved, what it is (``kind``: a save kind, ``delete``, ``checkpoint``, ``writes``, an event
    name...; ``frame``: the stored frame's type), the node it records (or ``None``), the id
    it is about (a LangGraph checkpoint id, ...), its correlation id when it carries one,
    the stream's kind (``checkpoint``, ``langgraph``, ``techrevati``, ``apflow``,
    ``events``), its stored size and checksum; ``problem``: why a frame could not be read
    (its ``kind`` is then ``unreadable``)."""

    stream: str
    seq: int
    global_seq: int
    saved_at: float
    kind: str
    frame: str
    node: str | None
    ref: str | None
    correlation: str | None
    stream_kind: str
    display: str
    size: int
    checksum: bytes
    problem: str | None = None  # set on a frame that could not be read (kind "unreadable")

    def doc(self) -> dict[str, Any]:
        """As a JSON object (the checksum in hex)."""
        return {
            "invocation_id": self.stream,
            "seq": self.seq,
            "global_seq": self.global_seq,
            "saved_at": self.saved_at,
            "kind": self.kind,
            "frame": self.frame,
            "node": self.node,
            "ref": self.ref,
            "correlation_id": self.correlation,
            "stream_kind": self.stream_kind,
            "stream": self.display,
            "size": self.size,
            "checksum": self.checksum.hex(),
            **({"problem": self.problem} if self.problem is not None else {}),
        }


def node_of_task(task_path: str) -> str:
    """A LangGraph task path's node: ``~__pregel_pull, a`` -> ``a``."""
    return task_path.rsplit(", ", 1)[-1].strip() or task_path


def frame_facts(frame: Any) -> tuple[str, str | None, str | None, str | None]:
    """``(kind, node, ref, correlation id)`` of one frame, from the frame alone."""
    if isinstance(frame, (Save, Snapshot)):
        node = frame.positions[-1].node_name if frame.positions else None
        if node is None and frame.instances:
            node = _fan_out_node(frame, frame.instances[0].fid)
        return str(frame.kind), node, None, frame.correlation_id or None
    if isinstance(frame, LgCheckpoint):
        return "checkpoint", None, frame.checkpoint_id, None
    if isinstance(frame, LgWrites):
        return "writes", node_of_task(frame.task_path), frame.checkpoint_id, None
    if isinstance(frame, LgRemove):
        return "remove", None, None, None
    if isinstance(frame, Event):
        ref = None
        if isinstance(frame.data, dict):
            for key in ("checkpoint_id", "id", "task_id"):
                value = frame.data.get(key)
                if isinstance(value, str):
                    ref = value
                    break
        return frame.name, None, ref, None
    return walker.frame_kind(frame), None, None, None


def _fan_out_node(frame: Save | Snapshot, fid: int) -> str | None:
    for header in frame.layout or ():
        if header.fid == fid:
            return header.fan_out_node_name
    return None


def saved(sf: StoredFrame[Any], info: StreamInfo) -> Saved:
    """The row of stored frame ``sf`` of the stream ``info`` describes."""
    kind, node, ref, correlation = frame_facts(sf.frame)
    return Saved(
        stream=sf.stream,
        seq=sf.seq,
        global_seq=sf.global_seq,
        saved_at=walker.frame_saved_at(sf.frame),
        kind=kind,
        frame=walker.frame_type(sf.frame),
        node=node,
        ref=ref,
        correlation=correlation,
        stream_kind=info.kind,
        display=info.display,
        size=sf.stored_bytes,
        checksum=sf.checksum,
    )


def info_of(sf: StoredFrame[Any], known: dict[str, StreamInfo], log: EventLog) -> StreamInfo:
    """What the stream of ``sf`` is (cached in ``known``): judged by its first frame, which
    is ``sf`` itself when its seq is 1, else read."""
    info = known.get(sf.stream)
    if info is None:
        if sf.seq == 1:
            info = views.describe(sf.stream, sf.frame, True)
        else:
            info = describe(log, sf.stream)
        known[sf.stream] = info
    return info
