"""Stats and the invocation listing."""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

from backends.base import ReadTxn
from eventlog.errors import (
    CheckpointError,
    CorruptFrame,
)
from eventlog.forensics.common import (
    Records,
    _dec_row,
)
from eventlog.layout import LOG, META, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.log import EventLog
from eventlog.materialized import head_rows, instance_progress, read_row, snapshot_marks
from eventlog.records import (
    CheckpointFilter,
)
from eventlog.walker import (
    frame_kind,
    frame_saved_at,
)

# -- stats -------------------------------------------------------------------------------------


class StreamSize(msgspec.Struct, frozen=True):
    invocation_id: str
    frames: int


class LogStats(msgspec.Struct):
    path: str
    frames: int
    streams: int
    invocations: int  # streams with a live head
    streams_without_head: int  # deleted invocations (and application event streams)
    snapshots: int
    data_file_bytes: int
    bytes_per_frame: float
    oldest_saved_at: float | None
    newest_saved_at: float | None
    format: dict[str, Any]
    largest: list[StreamSize]


def stats(cl: Records, top: int = 5) -> LogStats:
    """Counts and sizes from the tables (no frame is decoded, so it is fast on any log)."""
    log = cl.log
    with log.backend.read() as txn:
        frames = txn.count(LOG)
        names = [(U64.unpack(k)[0], v) for k, v in txn.scan(STREAM_NAMES)]
        saved = [_dec_row.decode(v).last_saved_at for _, v in head_rows(txn)]
        snapshots = snapshot_marks(txn)
        sizes = []
        for sid, name in names:
            for key, _ in txn.scan_prefix(STREAMS, U64.pack(sid), reverse=True, limit=1):
                sizes.append(
                    StreamSize(name.decode("utf-8", "surrogatepass"), U64X2.unpack(key)[1])
                )
        raw_meta = txn.get(META, b"format")
    size = log.backend.size_bytes()
    sizes.sort(key=lambda s: (-s.frames, s.invocation_id))
    finite = [t for t in saved if not math.isnan(t)]
    return LogStats(
        path=log.backend.location,
        frames=frames,
        streams=len(names),
        invocations=len(saved),
        streams_without_head=len(names) - len(saved),
        snapshots=snapshots,
        data_file_bytes=size,
        bytes_per_frame=size / frames if frames else 0.0,
        oldest_saved_at=min(finite) if finite else None,
        newest_saved_at=max(finite) if finite else None,
        format=json.loads(raw_meta) if raw_meta else {},
        largest=sizes[:top],
    )


class Invocation(msgspec.Struct, frozen=True):
    """One line of ``ckptlog ls``: a head row (or a stream without one: deleted)."""

    invocation_id: str
    correlation_id: str | None
    frames: int
    last_saved_at: float | None
    kind: str | None
    completed_nodes: int
    fan_out_instances: int
    completed_instances: int
    error_instances: int
    deleted: bool


def invocations(
    cl: Records, correlation_id: str | None = None, *, all_streams: bool = False
) -> list[Invocation]:
    """Saved invocations, oldest last save first, with fan-out progress from their rows;
    ``all_streams`` adds the streams without a head (deleted invocations, event streams and
    other integrations' streams), described by their last frame."""
    out: list[Invocation] = []
    flt = CheckpointFilter(correlation_id=correlation_id) if correlation_id is not None else None
    wanted = {s.invocation_id for s in cl.list(flt)}
    with cl.log.backend.read() as txn:
        for k, v in txn.scan(STREAM_NAMES):
            sid = U64.unpack(k)[0]
            name = v.decode("utf-8", "surrogatepass")
            row = read_row(txn, sid)
            frames = 0
            for key, _ in txn.scan_prefix(STREAMS, k, reverse=True, limit=1):
                frames = U64X2.unpack(key)[1]
            if row is None:
                if all_streams and correlation_id is None:
                    kind, at = _last_frame(cl.log, txn, sid, frames)
                    deleted = kind == "delete"
                    out.append(Invocation(name, None, frames, at, kind, 0, 0, 0, 0, deleted))
                continue
            if name not in wanted:
                continue
            done = errors = 0
            for inst in instance_progress(txn, sid):
                if inst.state == "completed":
                    done += 1
                    errors += inst.result_is_error
            out.append(
                Invocation(
                    name, row.correlation_id, frames, row.last_saved_at, row.kind,
                    row.positions_count, sum(h.instance_count for h in row.layout), done, errors,
                    False,
                )
            )  # fmt: skip
    out.sort(key=lambda i: (i.deleted, _sort_time(i.last_saved_at), i.invocation_id))
    return out


def _last_frame(log: EventLog, txn: ReadTxn, sid: int, seq: int) -> tuple[str, float | None]:
    """``(kind, saved_at)`` of a stream's frame ``seq`` (``unreadable`` when damaged)."""
    gkey = txn.get(STREAMS, U64X2.pack(sid, seq))
    data = txn.get(LOG, gkey) if gkey is not None else None
    try:
        if data is None:
            raise CorruptFrame("missing")
        _, frame = log.decode_envelope(data)
    except CheckpointError:
        return "unreadable", None
    return frame_kind(frame), frame_saved_at(frame)


def _sort_time(t: float | None) -> float:
    return t if t is not None and not math.isnan(t) else float("-inf")
