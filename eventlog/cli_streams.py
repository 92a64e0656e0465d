"""What the command line shows of the streams the integrations write (LangGraph threads,
techrevati threads, apflow tasks): each frame folded into a plain-data *view* of the stream
after it, so ``show``/``diff``/``replay``/``export`` answer for every kind of stream.

Invariants:
- Read-only: frames come from ``eventlog.forensics.read_frames`` (tolerant: damage is
  yielded as :class:`~eventlog.forensics.Unreadable`, never raised).
- A view is plain data (dicts, lists, str, numbers), the same for the same frames: it is what
  the integration's own ``get``/``load`` returns for the stream as of that seq, plus the
  pending writes (LangGraph). Removed checkpoints stay readable from their frames.
- Values are decoded, never executed: LangGraph serde output goes through LangGraph's own
  ``JsonPlusSerializer`` (loaded only when a LangGraph stream is read); JSON texts through
  ``json``. A value that does not decode is shown as ``{"undecodable": ...}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, cast

from eventlog import forensics as fx
from eventlog.errors import CheckpointError, UnsupportedStream
from eventlog.frames import BLOB_EMPTY, Event, LgBlob, LgCheckpoint, LgRemove, LgWrites
from eventlog.integrations.langgraph_store import BlobReader, parse_stream_key, stream_key

__all__ = [
    "APFLOW",
    "LANGGRAPH",
    "TECHREVATI",
    "UnsupportedStream",
    "View",
    "display_name",
    "langgraph_stream",
    "parse_stream_key",
    "stream_type",
    "views",
]
from eventlog.log import EventLog

LANGGRAPH: Final = "langgraph"
TECHREVATI: Final = "techrevati"
APFLOW: Final = "apflow"
TR_PREFIX: Final = "techrevati:"
AP_PREFIX: Final = "apflow:"


def stream_type(name: str) -> str | None:
    """``langgraph``, ``techrevati`` or ``apflow`` for an integration's stream, else ``None``."""
    if parse_stream_key(name) is not None:
        return LANGGRAPH
    if name.startswith(TR_PREFIX):
        return TECHREVATI
    if name.startswith(AP_PREFIX):
        return APFLOW
    return None


def display_name(name: str) -> str:
    """A LangGraph stream as ``thread-1`` (``thread-1 ns=...``); other names as they are."""
    parsed = parse_stream_key(name)
    if parsed is None:
        return name
    thread, ns = parsed
    return thread if not ns else f"{thread} ns={ns}"


def langgraph_stream(thread_id: str, checkpoint_ns: str = "") -> str:
    return stream_key(thread_id, checkpoint_ns)


@dataclass
class View:
    """One frame of an integration's stream, and the stream's view after it."""

    seq: int
    global_seq: int
    saved_at: float
    kind: str  # checkpoint | writes | remove | step | delete | event
    label: str  # what the frame is, in a few words (``step 3 (loop)``, ``by fetch``, ...)
    ref: str | None  # the id it saves or refers to (checkpoint id, step key), when it has one
    node: str | None  # LangGraph: the node(s) whose writes the checkpoint applied
    stored_bytes: int
    checksum: bytes
    frame: Any
    view: Any  # the stream as of this seq (None: nothing live)


# -- LangGraph -----------------------------------------------------------------------------------


class _FrameBlobs(BlobReader):
    """LangGraph's blob reader, fed from the frames this walk already read."""

    def __init__(self, log: EventLog, loads: Callable[[tuple[str, bytes]], Any]) -> None:
        super().__init__(log, cast(Any, None), 0, loads)
        self.frames: dict[int, Any] = {}

    def frame(self, seq: int) -> Any:
        found = self.frames.get(seq)
        if found is None:
            raise CheckpointError(f"seq {seq} is not a checkpoint frame read so far")
        return found


def _serde() -> Callable[[tuple[str, bytes]], Any]:
    try:
        from langgraph.checkpoint.serde.jsonplus import (  # noqa: PLC0415 - optional
            JsonPlusSerializer,
        )
    except ImportError as e:
        raise UnsupportedStream(
            "this is a LangGraph stream, and its values are LangGraph serde output: install "
            f"langgraph (pip install 'ckptlog[langgraph]') to read them ({e})"
        ) from e
    return JsonPlusSerializer().loads_typed


def _loads(loads: Callable[[tuple[str, bytes]], Any], typ: str, data: bytes) -> Any:
    try:
        return plain_value(loads((typ, data)))
    except Exception as e:  # noqa: BLE001 - a value that does not decode is shown, not fatal
        return {"undecodable": f"{type(e).__name__}: {e}", "type": typ, "bytes": len(data)}


def plain_value(value: Any) -> Any:
    """LangGraph values as plain data (messages and other objects by their fields)."""
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return {"__type__": type(value).__name__, **plain_value(dump())}
        except Exception:  # noqa: BLE001 - fall through to repr
            pass
    return repr(value)


def _node_of(task_path: str) -> str:
    """``~__pregel_pull, a`` -> ``a``."""
    return task_path.rsplit(", ", 1)[-1].strip() or task_path


def langgraph_views(log: EventLog, stream: str) -> Iterator[View | fx.Unreadable]:
    loads = _serde()
    blobs = _FrameBlobs(log, loads)
    where: dict[tuple[str, Any], int] = {}  # (channel, version) -> seq of its blob
    writes: dict[str, list[tuple[str, str, Any]]] = {}  # checkpoint id -> (node, channel, value)
    current: dict[str, Any] | None = None
    current_id: str | None = None
    for item in fx.read_frames(log, stream):
        if isinstance(item, fx.Unreadable):
            yield item
            continue
        frame = item.frame
        node: str | None = None
        if isinstance(frame, LgCheckpoint):
            blobs.frames[item.seq] = frame
            for b in frame.blobs:
                where[(b.channel, b.version)] = item.seq
            values: dict[str, Any] = {}
            for channel, version in sorted(frame.versions.items()):
                seq = where.get((channel, version))
                if seq is None:
                    values[channel] = {"undecodable": f"no blob for version {version!r}"}
                    continue
                try:
                    blob: LgBlob = blobs.blob(seq, channel)
                    if blob.kind == BLOB_EMPTY:
                        continue
                    values[channel] = plain_value(blobs.decode(blob, seq))
                except Exception as e:  # noqa: BLE001 - a damaged chain is shown, not fatal
                    values[channel] = {"undecodable": f"{type(e).__name__}: {e}"}
            node = ", ".join(sorted({w[0] for w in writes.get(frame.parent_id or "", [])})) or None
            metadata = _loads(loads, frame.metadata_type, frame.metadata)
            current_id = frame.checkpoint_id
            current = {
                "checkpoint_id": frame.checkpoint_id,
                "parent_id": frame.parent_id,
                "metadata": metadata,
                "channel_values": values,
                # writes can commit before their checkpoint (LangGraph saves it in the
                # background while the next tasks run): those already read are pending too
                "pending_writes": [
                    {"node": n, "channel": c, "value": v}
                    for n, c, v in writes.get(frame.checkpoint_id, [])
                ],
            }
            kind, label, ref = "checkpoint", "", frame.checkpoint_id
            if isinstance(metadata, dict) and "step" in metadata:
                label = f"step {metadata['step']} ({metadata.get('source', '?')})"
        elif isinstance(frame, LgWrites):
            node = _node_of(frame.task_path)
            decoded = [(node, w.channel, _loads(loads, w.type, w.data)) for w in frame.writes]
            writes.setdefault(frame.checkpoint_id, []).extend(decoded)
            if current is not None and frame.checkpoint_id == current_id:
                current = {
                    **current,
                    "pending_writes": [
                        *current["pending_writes"],
                        *({"node": n, "channel": c, "value": v} for n, c, v in decoded),
                    ],
                }
            kind, label, ref = "writes", f"by {node}", frame.checkpoint_id
        elif isinstance(frame, LgRemove):
            ids = frame.checkpoint_ids
            if ids is None or (current_id is not None and current_id in ids):
                current, current_id = None, None
            n = "all" if ids is None else f"{len(ids):,}"
            kind, label, ref = "remove", f"{n} checkpoint(s) removed ({frame.reason})", None
        else:
            kind, label, ref = fx.frame_kind(frame), type(frame).__name__, None
        yield View(
            item.seq, item.global_seq, fx.frame_saved_at(frame), kind, label, ref, node,
            item.stored_bytes, item.checksum, frame, current,
        )  # fmt: skip


# -- techrevati and apflow: JSON texts in Event frames ----------------------------------------


def _json(data: Any) -> Any:
    if isinstance(data, (bytes, bytearray)):
        try:
            return json.loads(bytes(data).decode("utf-8", "surrogatepass"))
        except (ValueError, UnicodeDecodeError) as e:
            return {"undecodable": f"{type(e).__name__}: {e}", "bytes": len(data)}
    return data


def _field(data: Any, name: str) -> Any:
    return data.get(name) if isinstance(data, dict) else None


def techrevati_views(log: EventLog, stream: str) -> Iterator[View | fx.Unreadable]:
    checkpoint: dict[str, Any] | None = None
    steps: dict[str, Any] = {}
    for item in fx.read_frames(log, stream):
        if isinstance(item, fx.Unreadable):
            yield item
            continue
        frame, data = item.frame, getattr(item.frame, "data", None)
        name = frame.name if isinstance(frame, Event) else ""
        if name.endswith(".checkpoint"):
            checkpoint = {
                "id": _field(data, "id"),
                "parent_id": _field(data, "parent_id"),
                "created_at": _field(data, "created_at"),
                "state": _json(_field(data, "state")),
                "metadata": _json(_field(data, "metadata")),
            }
            kind, label, ref = "checkpoint", "", str(_field(data, "id"))
        elif name.endswith(".step"):
            key = str(_field(data, "key"))
            steps = {
                **steps,
                key: {
                    "created_at": _field(data, "created_at"),
                    "state": _json(_field(data, "state")),
                },
            }
            kind, label, ref = "step", key, None
        elif name.endswith(".delete"):
            checkpoint, steps = None, {}
            kind, label, ref = "delete", "thread deleted", None
        else:
            kind, label, ref = "event", name or type(frame).__name__, None
        view = None if checkpoint is None and not steps else {"checkpoint": checkpoint}
        if view is not None:
            view["steps"] = steps
        yield View(
            item.seq, item.global_seq, fx.frame_saved_at(frame), kind, label, ref, None,
            item.stored_bytes, item.checksum, frame, view,
        )  # fmt: skip


def apflow_views(log: EventLog, stream: str) -> Iterator[View | fx.Unreadable]:
    latest: dict[str, Any] | None = None
    for item in fx.read_frames(log, stream):
        if isinstance(item, fx.Unreadable):
            yield item
            continue
        frame, data = item.frame, getattr(item.frame, "data", None)
        name = frame.name if isinstance(frame, Event) else ""
        if name.endswith(".checkpoint"):
            latest = {
                "id": _field(data, "id"),
                "step_name": _field(data, "step_name"),
                "attempt": _field(data, "attempt"),
                "n": _field(data, "n"),
                "data": _json(_field(data, "data")),
            }
            kind, label, ref = "checkpoint", f"attempt {_field(data, 'n')}", _field(data, "id")
        elif name.endswith(".delete"):
            latest = None
            kind, label, ref = "delete", f"{_field(data, 'count')} checkpoint(s) deleted", None
        else:
            kind, label, ref = "event", name or type(frame).__name__, None
        yield View(
            item.seq, item.global_seq, fx.frame_saved_at(frame), kind, label, ref,
            _field(data, "step_name") if kind == "checkpoint" else None,
            item.stored_bytes, item.checksum, frame, latest,
        )  # fmt: skip


READERS: Final[dict[str, Callable[[EventLog, str], Iterator[View | fx.Unreadable]]]] = {
    LANGGRAPH: langgraph_views,
    TECHREVATI: techrevati_views,
    APFLOW: apflow_views,
}


def views(log: EventLog, stream: str) -> Iterator[View | fx.Unreadable]:
    """Every frame of an integration's stream with the view after it."""
    kind = stream_type(stream)
    if kind is None:
        raise UnsupportedStream(f"stream {stream!r} is not a LangGraph, techrevati or apflow one")
    return READERS[kind](log, stream)
