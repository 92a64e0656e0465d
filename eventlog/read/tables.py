"""The history of a log as tables an analyst can query (``ckptlog export --format parquet``
and ``ckptlog sql``): plain columns, built in batches while the log is read once in commit
order.

Tables (:data:`SCHEMAS`, every table has ``invocation`` (the stream key), ``seq`` and
``global_seq``):
- ``saves``: one row per frame: its time, kind, node, the id it is about, correlation id, size
  and the stream's kind;
- ``frames``: one row per frame as stored: its type, size and checksum;
- ``instances``: one row per fan-out instance change: fan-out, index, state, result (JSON),
  when it was saved (a batch frame carries each instance's own time);
- ``lg_checkpoints`` and ``lg_writes``: LangGraph checkpoints (step, source, metadata as JSON)
  and the writes of each task (channel, value as JSON);
- ``events``: application and integration events (techrevati, apflow): name, data (JSON).

Invariants:
- Pure data, no pyarrow or DuckDB here (eventlog.read.parquet writes the batches); memory
  stays bounded by the batch size, plus what a stream's fold needs (its correlation id,
  fan-out names and its instances' last progress, to tell a snapshot's restatement from a
  change).
- The same frames give the same rows, whatever engine stores them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import msgspec

from eventlog import walker
from eventlog.frames import (
    Event,
    FanOutHeader,
    InstanceChange,
    LgCheckpoint,
    LgWrites,
    Save,
    Snapshot,
    Tombstone,
)
from eventlog.log import EventLog, StoredFrame
from eventlog.read.saves import frame_facts, info_of, node_of_task
from eventlog.streams import StreamInfo

__all__ = ["BATCH_ROWS", "SCHEMAS", "TableBuilder"]

BATCH_ROWS: Final = 65_536
"""Rows per batch handed to a writer (and the most a table holds in memory)."""

# column types: str, int, float, bool, time (seconds since the epoch, shown as UTC), json
SCHEMAS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "saves": (
        ("invocation", "str"), ("seq", "int"), ("global_seq", "int"), ("saved_at", "time"),
        ("kind", "str"), ("frame", "str"), ("node", "str"), ("ref", "str"),
        ("correlation", "str"), ("size", "int"), ("stream_kind", "str"), ("stream", "str"),
    ),
    "frames": (
        ("global_seq", "int"), ("invocation", "str"), ("seq", "int"), ("frame", "str"),
        ("saved_at", "time"), ("size", "int"), ("checksum", "str"),
    ),
    "instances": (
        ("invocation", "str"), ("fan_out", "str"), ("fan_out_id", "int"), ("index", "int"),
        ("state", "str"), ("result", "json"), ("result_is_error", "bool"),
        ("saved_at", "time"), ("seq", "int"), ("global_seq", "int"),
    ),
    "lg_checkpoints": (
        ("invocation", "str"), ("thread_id", "str"), ("checkpoint_ns", "str"),
        ("checkpoint_id", "str"), ("parent_id", "str"), ("step", "int"), ("source", "str"),
        ("run_id", "str"), ("metadata", "json"), ("saved_at", "time"), ("seq", "int"),
        ("global_seq", "int"), ("size", "int"),
    ),
    "lg_writes": (
        ("invocation", "str"), ("thread_id", "str"), ("checkpoint_ns", "str"),
        ("checkpoint_id", "str"), ("task_id", "str"), ("task_path", "str"), ("node", "str"),
        ("idx", "int"), ("channel", "str"), ("value", "json"), ("saved_at", "time"),
        ("seq", "int"), ("global_seq", "int"),
    ),
    "events": (
        ("invocation", "str"), ("stream_kind", "str"), ("name", "str"), ("data", "json"),
        ("saved_at", "time"), ("seq", "int"), ("global_seq", "int"),
    ),
}  # fmt: skip

_json = msgspec.json.Encoder()


def to_json(value: Any) -> str:
    """``value`` as JSON text (mapping keys made strings; what JSON cannot hold as its repr)."""
    try:
        return _json.encode(value).decode()
    except (TypeError, ValueError):
        from eventlog.forensics.export import json_safe  # noqa: PLC0415 - the rare path

        try:
            return _json.encode(json_safe(value)).decode()
        except (TypeError, ValueError):
            return _json.encode(repr(value)).decode()


class _Stream:
    """What the tables need to remember of a stream between its frames."""

    __slots__ = ("correlation", "fan_outs", "info", "instances")

    def __init__(self, info: StreamInfo) -> None:
        self.info = info
        self.correlation: str | None = None
        self.fan_outs: dict[int, str] = {}
        self.instances: dict[tuple[int, int], Any] = {}


class TableBuilder:
    """Feed it the log's frames in commit order (:meth:`add`); take full batches as they fill
    (:meth:`full`) and the rest at the end (:meth:`rest`). A batch is ``(table, columns)``,
    the columns as lists keyed by the names in :data:`SCHEMAS`."""

    def __init__(self, log: EventLog, batch_rows: int = BATCH_ROWS) -> None:
        self.log = log
        self.batch_rows = batch_rows
        self.cols: dict[str, dict[str, list[Any]]] = {
            t: {c: [] for c, _ in cols} for t, cols in SCHEMAS.items()
        }
        self._pair()
        self._streams: dict[str, _Stream] = {}
        self._infos: dict[str, StreamInfo] = {}
        self._loads: Any = None
        self.frames = 0

    def add_all(self, after: int = 0) -> Iterator[tuple[str, dict[str, list[Any]]]]:
        """Read every frame past global seq ``after``; yield each batch as it fills, then the
        rest."""
        every = max(1, min(1024, self.batch_rows // 8))  # a frame may add many rows
        for sf in self.log.scan(after):
            self.add(sf)
            if self.frames % every == 0:
                yield from self.full()
        yield from self.rest()

    def add(self, sf: StoredFrame[Any]) -> None:
        self.frames += 1
        st = self._streams.get(sf.stream)
        if st is None:
            st = self._streams[sf.stream] = _Stream(info_of(sf, self._infos, self.log))
        frame = sf.frame
        kind, node, ref, correlation = frame_facts(frame)
        if correlation is not None:
            st.correlation = correlation
        saved_at = walker.frame_saved_at(frame)
        ftype = walker.frame_type(frame)
        c = self.cols["saves"]
        c["invocation"].append(sf.stream)
        c["seq"].append(sf.seq)
        c["global_seq"].append(sf.global_seq)
        c["saved_at"].append(saved_at)
        c["kind"].append(kind)
        c["frame"].append(ftype)
        if node is None and isinstance(frame, Save) and frame.instances:
            node = st.fan_outs.get(frame.instances[0].fid)  # an instance save: its fan-out
        c["node"].append(node)
        c["ref"].append(ref)
        c["correlation"].append(st.correlation)
        c["size"].append(sf.stored_bytes)
        c["stream_kind"].append(st.info.kind)
        c["stream"].append(st.info.display)
        self.cols["frames"]["checksum"].append(sf.checksum.hex())  # the rest: saves' lists
        if isinstance(frame, (Save, Snapshot)):
            self._instances(sf, st, frame)
        elif isinstance(frame, Tombstone):
            st.instances.clear()
            st.fan_outs.clear()
        elif isinstance(frame, LgCheckpoint):
            self._lg_checkpoint(sf, st, frame)
        elif isinstance(frame, LgWrites):
            self._lg_writes(sf, st, frame)
        elif isinstance(frame, Event):
            self._event(sf, st, frame, saved_at)

    def _event(self, sf: StoredFrame[Any], st: _Stream, frame: Event, saved_at: float) -> None:
        e = self.cols["events"]
        e["invocation"].append(sf.stream)
        e["stream_kind"].append(st.info.kind)
        e["name"].append(frame.name)
        e["data"].append(to_json(frame.data))
        e["saved_at"].append(saved_at)
        e["seq"].append(sf.seq)
        e["global_seq"].append(sf.global_seq)

    def full(self) -> Iterator[tuple[str, dict[str, list[Any]]]]:
        """The tables holding a batch's worth of rows, each emptied as it is taken."""
        return self._ready(self.batch_rows)

    def rest(self) -> Iterator[tuple[str, dict[str, list[Any]]]]:
        """Every table's remaining rows (tables with none are skipped)."""
        return self._ready(1)

    def _ready(self, rows_min: int) -> Iterator[tuple[str, dict[str, list[Any]]]]:
        for table in SCHEMAS:
            if table == "frames":
                continue  # taken with saves: a row each per frame, sharing their columns
            cols = self.cols[table]
            if len(next(iter(cols.values()))) < rows_min:
                continue
            if table == "saves":
                saves, frames = self.cols["saves"], self.cols["frames"]
                self._pair()
                yield "saves", saves
                yield "frames", frames
            else:
                self.cols[table] = {c: [] for c in cols}
                yield table, cols

    def _pair(self) -> None:
        """New columns for ``saves`` and ``frames``, which share those they have in common
        (a frame appends to them once)."""
        saves: dict[str, list[Any]] = {c: [] for c, _ in SCHEMAS["saves"]}
        self.cols["saves"] = saves
        self.cols["frames"] = {c: saves.get(c, []) for c, _ in SCHEMAS["frames"]}

    # -- fan-out instances ---------------------------------------------------------------------

    def _layout(self, st: _Stream, layout: tuple[FanOutHeader, ...] | None) -> None:
        for header in layout or ():
            st.fan_outs[header.fid] = header.fan_out_node_name

    def _instances(self, sf: StoredFrame[Any], st: _Stream, frame: Save | Snapshot) -> None:
        if isinstance(frame, Snapshot):
            st.fan_outs.clear()
        self._layout(st, frame.layout)
        times = frame.instance_saved_at
        changes = frame.instances if isinstance(frame, Save) else frame.batch
        for i, ch in enumerate(changes):
            self._instance(sf, st, ch, times[i] if i < len(times) else frame.saved_at)
        restated: tuple[InstanceChange, ...] = ()
        if isinstance(frame, Snapshot):
            restated = frame.instances
        elif frame.page is not None:
            self._layout(st, frame.page.layout)
            restated = frame.page.instances
        for ch in restated:  # a snapshot restates: only what differs is a change
            if st.instances.get((ch.fid, ch.index)) != ch.progress:
                self._instance(sf, st, ch, frame.saved_at)

    def _instance(
        self, sf: StoredFrame[Any], st: _Stream, ch: InstanceChange, saved_at: float
    ) -> None:
        st.instances[(ch.fid, ch.index)] = ch.progress
        p = ch.progress
        c = self.cols["instances"]
        c["invocation"].append(sf.stream)
        c["fan_out"].append(st.fan_outs.get(ch.fid))
        c["fan_out_id"].append(ch.fid)
        c["index"].append(ch.index)
        c["state"].append(str(p.state))
        c["result"].append(None if p.result is None else to_json(p.result))
        c["result_is_error"].append(bool(p.result_is_error))
        c["saved_at"].append(saved_at)
        c["seq"].append(sf.seq)
        c["global_seq"].append(sf.global_seq)

    # -- LangGraph -------------------------------------------------------------------------------

    def _decode(self, typ: str, data: bytes) -> str:
        if self._loads is None:
            from eventlog.integrations.langgraph_steps import serde  # noqa: PLC0415 - optional

            self._loads = serde()
        from eventlog.integrations.langgraph_steps import plain_value  # noqa: PLC0415

        try:
            return to_json(plain_value(self._loads((typ, data))))
        except Exception as e:  # noqa: BLE001 - a value that does not decode is a row too
            return to_json({"undecodable": f"{type(e).__name__}: {e}", "type": typ})

    def _lg_checkpoint(self, sf: StoredFrame[Any], st: _Stream, frame: LgCheckpoint) -> None:
        metadata = self._decode(frame.metadata_type, frame.metadata)
        meta: Any = msgspec.json.decode(metadata)
        step = meta.get("step") if isinstance(meta, dict) else None
        source = meta.get("source") if isinstance(meta, dict) else None
        c = self.cols["lg_checkpoints"]
        c["invocation"].append(sf.stream)
        c["thread_id"].append(st.info.labels.get("thread_id"))
        c["checkpoint_ns"].append(st.info.labels.get("checkpoint_ns"))
        c["checkpoint_id"].append(frame.checkpoint_id)
        c["parent_id"].append(frame.parent_id)
        c["step"].append(step if isinstance(step, int) else None)
        c["source"].append(source if isinstance(source, str) else None)
        c["run_id"].append(frame.run_id)
        c["metadata"].append(metadata)
        c["saved_at"].append(frame.saved_at)
        c["seq"].append(sf.seq)
        c["global_seq"].append(sf.global_seq)
        c["size"].append(sf.stored_bytes)

    def _lg_writes(self, sf: StoredFrame[Any], st: _Stream, frame: LgWrites) -> None:
        c = self.cols["lg_writes"]
        node = node_of_task(frame.task_path)
        for w in frame.writes:
            c["invocation"].append(sf.stream)
            c["thread_id"].append(st.info.labels.get("thread_id"))
            c["checkpoint_ns"].append(st.info.labels.get("checkpoint_ns"))
            c["checkpoint_id"].append(frame.checkpoint_id)
            c["task_id"].append(frame.task_id)
            c["task_path"].append(frame.task_path)
            c["node"].append(node)
            c["idx"].append(w.idx)
            c["channel"].append(w.channel)
            c["value"].append(self._decode(w.type, w.data))
            c["saved_at"].append(frame.saved_at)
            c["seq"].append(sf.seq)
            c["global_seq"].append(sf.global_seq)
