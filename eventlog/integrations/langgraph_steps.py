"""The read side of LangGraph streams: each frame of a thread's stream with the thread as of it
(what the saver's ``get_tuple`` returns as of that seq, plus the pending writes), as plain data.

The view (eventlog.integrations.langgraph_store.LangGraphView) calls :func:`steps` with its
blob reader, and :func:`steps_from` (the steps of a range of seqs, read from the view's rows
at a cost independent of the frames before it) with its blob reader and row readers
(:class:`Rows`), so this module needs nothing of the store but what it is handed.

Invariants:
- Read-only and tolerant: frames come from ``eventlog.walker.read_frames``; damage is
  yielded as ``Unreadable``, never raised. Removed checkpoints stay readable from their frames.
- :func:`steps_from` yields exactly what :func:`steps` yields for its range; where the rows
  cannot stand for the replay it replays.
- Values are decoded, never executed: LangGraph serde output goes through LangGraph's own
  ``JsonPlusSerializer`` (loaded only when a LangGraph stream is read). A value that does not
  decode is shown as ``{"undecodable": ...}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, cast

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


# -- seq-addressed reads: a step (or a page of steps) from the view's rows ---------------------


class _Replay(Exception):
    """The rows cannot say what the replay says here: replay the stream instead."""


class Rows(NamedTuple):
    """What :func:`steps_from` reads of the store (eventlog.integrations.langgraph_store),
    handed in by the view: its tables, and its readers of the checkpoint, write and blob
    indexes."""

    tables: tuple[str, ...]
    checkpoint_row: Callable[[Any, int, str], Any]  # (txn, sid, checkpoint id) -> CkptRow
    write_rows: Callable[[Any, int, str], list[tuple[str, int, Any]]]  # -> (task, idx, row)
    blob_seq: Callable[[Any, int, str, Any], int | None]  # (txn, sid, channel, version)


def steps_from(
    log: EventLog,
    stream: str,
    from_seq: int,
    blob_reader: type[Any],
    store: Rows,
    to_seq: int | None = None,
) -> Iterator[Any]:
    """What :func:`steps` yields for seqs ``from_seq..to_seq`` (to the end when ``None``),
    at a cost independent of how many frames come before ``from_seq``.

    Each step is read from the view's rows: the last checkpoint frame at or before it (found
    walking back from it, across the writes frames of one superstep), its channel values
    through the blob index and ``blob_reader`` (at most a keyframe and a delta away), and its
    pending writes and node through the write index. Where the rows cannot stand for the
    replay (damage in the frames read, a removal, a blob or checkpoint rewritten later, a
    special write that overwrites an earlier one) the stream is replayed from its first frame
    as :func:`steps` does, yielding what falls in the range (damage included).

    Frames are read in chunks of ``CHUNK``: a lazy reader (the first page of ``history``)
    reads no further than it consumes; a read of the whole stream replays it after its first
    ``WALK_AFTER`` steps."""
    loads = serde()
    lo = max(1, from_seq)
    # a log opened without the view's tables declared (the CLI's) opens them, if it has them
    if log.backend.add_tables(store.tables, create=False) != tuple(store.tables):
        yield from _replayed(log, stream, lo, to_seq, blob_reader)
        return
    while to_seq is None or lo <= to_seq:
        if from_seq <= 1 and to_seq is None and lo > WALK_AFTER:
            # a walk of the whole stream: the replay reads each step for less than the rows
            yield from _replayed(log, stream, lo, to_seq, blob_reader)
            return
        hi = lo + CHUNK - 1 if to_seq is None else min(to_seq, lo + CHUNK - 1)
        try:
            chunk = _indexed(log, stream, lo, hi, blob_reader, store, loads)
        except _Replay:
            yield from _replayed(log, stream, lo, to_seq, blob_reader)
            return
        yield from chunk
        if len(chunk) < hi - lo + 1:
            return  # the stream ends here
        lo = hi + 1


def _replayed(
    log: EventLog, stream: str, lo: int, to_seq: int | None, blob_reader: type[Any]
) -> Iterator[Any]:
    """What :func:`steps` yields from ``lo`` to ``to_seq``, replaying from the first frame."""
    for item in steps(log, stream, blob_reader):
        if getattr(item, "last_seq", item.seq) < lo:
            continue
        if to_seq is not None and item.seq > to_seq:
            return
        yield item


CHUNK = 64
"""Frames read per chunk by :func:`steps_from`."""

WALK_AFTER = 2 * CHUNK
"""A read from the first frame with no end (``history``) takes its first ``WALK_AFTER`` steps
from the rows (``history -n 20`` reads no more), then replays the stream from its first frame
(skipping what it yielded): past a few chunks, the replay costs less per step (it keeps what
each frame changed instead of asking the rows for every step) and its cost over the whole
stream is the walk's own."""


def _indexed(
    log: EventLog,
    stream: str,
    lo: int,
    hi: int,
    blob_reader: type[Any],
    store: Rows,
    loads: Loads,
) -> list[Step]:
    """Steps ``lo..hi`` from the rows (fewer at the stream's end); :class:`_Replay` when the
    rows cannot stand for the replay."""
    items: list[Any] = list(walker.read_frames(log, stream, max(1, lo - 1), hi))
    if any(isinstance(i, walker.Unreadable) for i in items):
        raise _Replay
    if items and items[0].seq != lo:
        before = items.pop(0)
        if before.seq != lo - 1:
            raise _Replay
    else:
        before = None
    if not items:
        return []
    if [i.seq for i in items] != list(range(lo, lo + len(items))):
        raise _Replay
    out: list[Step] = []
    with log.backend.read() as txn:
        sid = log.stream_id(txn, stream)
        if sid is None:
            raise _Replay
        reader = blob_reader(log, txn, sid, loads)
        if before is not None:
            reader._frames[before.seq] = before.frame
        for i in items:
            reader._frames[i.seq] = i.frame
        rows = _Rows(txn, sid, reader, store, loads)
        current: tuple[int, LgCheckpoint] | None = rows.checkpoint_before(lo)
        for item in items:
            frame = item.frame
            node: str | None = None
            if isinstance(frame, LgCheckpoint):
                current = (item.seq, frame)
                node = ", ".join(rows.nodes(frame.parent_id, item.seq - 1)) or None
                metadata = rows.metadata(item.seq, frame)
                kind, label, ref = "checkpoint", "", frame.checkpoint_id
                if isinstance(metadata, dict) and "step" in metadata:
                    label = f"step {metadata['step']} ({metadata.get('source', '?')})"
            elif isinstance(frame, LgWrites):
                node = _node_of(frame.task_path)
                kind, label, ref = "writes", f"by {node}", frame.checkpoint_id
            elif isinstance(frame, LgRemove):
                raise _Replay
            else:
                kind, label, ref = walker.frame_kind(frame), type(frame).__name__, None
            value = None if current is None else rows.value(*current, item.seq)
            nodes = tuple(n.strip() for n in (node or "").split(",") if n.strip())
            out.append(Step(
                item.seq, item.global_seq, walker.frame_saved_at(frame), kind, label, ref, nodes,
                item.stored_bytes, item.checksum, frame, walker.frame_type(frame), value,
            ))  # fmt: skip
    return out


class _Rows:
    """What :func:`steps` keeps as it replays, read from the view's rows instead."""

    def __init__(self, txn: Any, sid: int, reader: Any, store: Rows, loads: Loads) -> None:
        self.txn, self.sid, self.reader, self.store, self.loads = txn, sid, reader, store, loads
        self._values: dict[int, dict[str, Any]] = {}
        self._metadata: dict[int, Any] = {}
        self._writes: dict[str, list[tuple[int, str, str]]] = {}
        self._decoded: dict[int, list[dict[str, Any]]] = {}

    def checkpoint_before(self, lo: int) -> tuple[int, LgCheckpoint] | None:
        """The last checkpoint frame before ``lo`` (``None``: there is none)."""
        seq = lo - 1
        while seq > 0:
            try:
                frame = self.reader.frame(seq)
            except CheckpointError as e:
                raise _Replay from e
            if isinstance(frame, LgCheckpoint):
                return seq, frame
            if isinstance(frame, LgRemove):
                raise _Replay
            seq -= 1
        return None

    def writes(self, checkpoint_id: str) -> list[tuple[int, str, str]]:
        """``(seq, task path, "")`` of each writes frame stored against a checkpoint, in seq
        order, from the write index."""
        found = self._writes.get(checkpoint_id)
        if found is None:
            seqs: dict[int, str] = {}
            for _task, idx, row in self.store.write_rows(self.txn, self.sid, checkpoint_id):
                if idx < 0:  # a special write replaces an earlier one: the index lost that frame
                    raise _Replay
                seqs[row.seq] = row.task_path
            found = self._writes[checkpoint_id] = [(s, p, "") for s, p in sorted(seqs.items())]
        return found

    def nodes(self, parent_id: str | None, upto: int) -> list[str]:
        """The nodes whose writes against ``parent_id`` were stored by seq ``upto``."""
        if parent_id is None:
            return []
        self._check(parent_id, None)
        return sorted({_node_of(p) for s, p, _ in self.writes(parent_id) if s <= upto})

    def _check(self, checkpoint_id: str, seq: int | None) -> None:
        """The checkpoint row is there (not removed) and, given ``seq``, was stored there."""
        row = self.store.checkpoint_row(self.txn, self.sid, checkpoint_id)
        if row is None or (seq is not None and row.seq != seq):
            raise _Replay

    def metadata(self, seq: int, frame: LgCheckpoint) -> Any:
        found = self._metadata.get(seq)
        if found is None:
            found = self._metadata[seq] = _loads(self.loads, frame.metadata_type, frame.metadata)
        return found

    def channel_values(self, seq: int, frame: LgCheckpoint) -> dict[str, Any]:
        found = self._values.get(seq)
        if found is not None:
            return found
        self._check(frame.checkpoint_id, seq)
        values: dict[str, Any] = {}
        for channel, version in sorted(frame.versions.items()):
            at = self.store.blob_seq(self.txn, self.sid, channel, version)
            if at is None or at > seq:  # no blob, or it was stored again later: replay
                raise _Replay
            try:
                blob: LgBlob = self.reader.blob(at, channel)
                if blob.kind == BLOB_EMPTY:
                    continue
                values[channel] = plain_value(self.reader.decode(blob, at))
            except Exception as e:
                raise _Replay from e
        self._values[seq] = values
        return values

    def value(self, seq: int, frame: LgCheckpoint, upto: int) -> dict[str, Any]:
        """The thread as of seq ``upto`` whose last checkpoint frame is ``frame`` at ``seq``."""
        pending: list[dict[str, Any]] = []
        for at, _path, _ in self.writes(frame.checkpoint_id):
            if at > upto:
                break
            pending.extend(self._decoded_writes(at, frame.checkpoint_id))
        return {
            "checkpoint_id": frame.checkpoint_id,
            "parent_id": frame.parent_id,
            "metadata": self.metadata(seq, frame),
            "channel_values": self.channel_values(seq, frame),
            "pending_writes": pending,
        }

    def _decoded_writes(self, seq: int, checkpoint_id: str) -> list[dict[str, Any]]:
        """The writes of the frame at ``seq`` as pending writes (decoded once per page)."""
        found = self._decoded.get(seq)
        if found is None:
            try:
                w = self.reader.frame(seq)
            except CheckpointError as e:
                raise _Replay from e
            if not isinstance(w, LgWrites) or w.checkpoint_id != checkpoint_id:
                raise _Replay
            node = _node_of(w.task_path)
            found = self._decoded[seq] = [
                {"node": node, "channel": x.channel, "value": _loads(self.loads, x.type, x.data)}
                for x in w.writes
            ]
        return found
