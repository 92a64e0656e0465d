"""The read side of LangGraph streams: each frame of a thread's stream with the thread as of it
(what the saver's ``get_tuple`` returns as of that seq, plus the pending writes), as plain data.

The view (eventlog.integrations.langgraph_store.LangGraphView) calls :func:`steps` with its
blob reader, so this module needs nothing of the store but what it is handed.

Invariants:
- Read-only and tolerant: frames come from ``eventlog.walker.read_frames``; damage is
  yielded as ``Unreadable``, never raised. Removed checkpoints stay readable from their frames.
- Values are decoded, never executed: LangGraph serde output goes through LangGraph's own
  ``JsonPlusSerializer`` (loaded only when a LangGraph stream is read). A value that does not
  decode is shown as ``{"undecodable": ...}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

from eventlog import walker
from eventlog.errors import CheckpointError, UnsupportedStream
from eventlog.frames import BLOB_EMPTY, LgBlob, LgCheckpoint, LgRemove, LgWrites
from eventlog.log import EventLog
from eventlog.streams import Step

Loads = Callable[[tuple[str, bytes]], Any]


def serde() -> Loads:
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


def _loads(loads: Loads, typ: str, data: bytes) -> Any:
    try:
        return plain_value(loads((typ, data)))
    except Exception as e:  # noqa: BLE001 - a value that does not decode is shown, not fatal
        return {"undecodable": f"{type(e).__name__}: {e}", "type": typ, "bytes": len(data)}


def _node_of(task_path: str) -> str:
    """``~__pregel_pull, a`` -> ``a``."""
    return task_path.rsplit(", ", 1)[-1].strip() or task_path


def _frame_blobs(reader: type[Any], log: EventLog, loads: Loads) -> Any:
    """``reader`` (the store's BlobReader), fed from the frames this walk already read."""

    class FrameBlobs(reader):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(log, cast(Any, None), 0, loads)
            self.frames: dict[int, Any] = {}

        def frame(self, seq: int) -> Any:
            found = self.frames.get(seq)
            if found is None:
                raise CheckpointError(f"seq {seq} is not a checkpoint frame read so far")
            return found

    return FrameBlobs()


def steps(  # noqa: PLR0915 - one branch per frame type, read top to bottom
    log: EventLog, stream: str, blob_reader: type[Any]
) -> Iterator[Any]:
    """Every frame of a LangGraph stream with the thread after it (``Step.value``)."""
    loads = serde()
    blobs = _frame_blobs(blob_reader, log, loads)
    where: dict[tuple[str, Any], int] = {}  # (channel, version) -> seq of its blob
    writes: dict[str, list[tuple[str, str, Any]]] = {}  # checkpoint id -> (node, channel, value)
    current: dict[str, Any] | None = None
    current_id: str | None = None
    for item in walker.read_frames(log, stream):
        if isinstance(item, walker.Unreadable):
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
            kind, label, ref = walker.frame_kind(frame), type(frame).__name__, None
        nodes = tuple(n.strip() for n in (node or "").split(",") if n.strip())
        yield Step(
            item.seq, item.global_seq, walker.frame_saved_at(frame), kind, label, ref, nodes,
            item.stored_bytes, item.checksum, frame, walker.frame_type(frame), current,
        )  # fmt: skip
