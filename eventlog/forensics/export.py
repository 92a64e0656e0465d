"""Export: records or frames as JSON Lines."""

from __future__ import annotations

from typing import Any, Final, Protocol

import msgspec

from eventlog.errors import (
    InvalidArgument,
)
from eventlog.forensics.common import (
    EXPORT_FORMATS,
    PROGRESS_EVERY_FRAMES,
    Progress,
    Records,
    _decode_any,
)
from eventlog.forensics.queries import last_seq
from eventlog.frames import (
    Compacted,
    ForkOrigin,
)
from eventlog.lazy_load import materialized
from eventlog.records import (
    CheckpointRecord,
)
from eventlog.streams import plain
from eventlog.walker import (
    Step,
    Unreadable,
    frame_type,
    walk,
)

# -- export ------------------------------------------------------------------------------------


class BytesSink(Protocol):
    """Where :func:`export` writes (a binary file, ``sys.stdout.buffer``, ``io.BytesIO``)."""

    def write(self, data: bytes, /) -> int: ...


class ExportSummary(msgspec.Struct):
    invocations: int = 0
    lines: int = 0
    bytes: int = 0
    unreadable: list[Unreadable] = msgspec.field(default_factory=list)


def json_safe(value: Any) -> Any:
    """``value`` with every mapping key a string (JSON objects need them)."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, msgspec.Struct):
        return json_safe(msgspec.to_builtins(value))
    return value


class JsonLines:
    """Encodes one JSON object per line; falls back to stringified keys for odd mappings."""

    def __init__(self) -> None:
        self._enc = msgspec.json.Encoder()

    def line(self, obj: Any) -> bytes:
        try:
            return self._enc.encode(obj) + b"\n"
        except (TypeError, ValueError):
            return self._enc.encode(json_safe(obj)) + b"\n"


class _JPosition(msgspec.Struct):
    """JSON views of the array-like record types: objects keyed by field name."""

    namespace: tuple[str, ...]
    node_name: str
    step: int
    attempt_index: int = 0
    fan_out_index: int | None = None


class _JInstance(msgspec.Struct):
    state: str
    result: Any = None
    result_is_error: bool = False
    completed_inner_positions: tuple[_JPosition, ...] = ()


class _JEnclosing(msgspec.Struct):
    namespace: tuple[str, ...]
    fan_out_node_name: str
    fan_out_index: int


class _JFanOut(msgspec.Struct):
    fan_out_node_name: str
    namespace: tuple[str, ...]
    instance_count: int
    instances: tuple[_JInstance, ...]
    enclosing_fan_out_lineage: tuple[_JEnclosing, ...] = ()


class _JRecord(msgspec.Struct):
    invocation_id: str
    correlation_id: str
    state: Any
    completed_positions: tuple[_JPosition, ...]
    parent_states: tuple[Any, ...]
    last_saved_at: float
    schema_version: str = ""
    fan_out_progress: tuple[_JFanOut, ...] = ()


class _JHeader(msgspec.Struct):
    fid: int
    fan_out_node_name: str
    namespace: tuple[str, ...]
    instance_count: int
    lineage: tuple[_JEnclosing, ...] = ()


class _JChange(msgspec.Struct):
    fid: int
    index: int
    progress: _JInstance


_JSON_FIELDS: Final[dict[str, Any]] = {
    "positions": tuple[_JPosition, ...],
    "layout": tuple[_JHeader, ...],
    "instances": tuple[_JChange, ...],
}


def record_content(record: CheckpointRecord) -> Any:
    """A record as a JSON-ready Struct whose nested records encode as objects (C speed); a
    loaded record's lazy instances are read whole first."""
    return msgspec.convert(materialized(record), _JRecord, from_attributes=True)


def frame_content(frame: Any) -> dict[str, Any]:
    """A frame as JSON-ready data, with its msgpack-encoded states decoded."""
    out: dict[str, Any] = {"type": frame_type(frame)}
    for name in frame.__struct_fields__:
        value = getattr(frame, name)
        if name in ("state", "parent_states") and isinstance(value, bytes):
            out[name] = _decode_any.decode(value)
        elif isinstance(value, bytes):
            out[name] = value.hex()
        elif isinstance(value, (Compacted, ForkOrigin)):
            out[name] = {**plain(value), "checksum": value.checksum.hex()}
        elif name in _JSON_FIELDS and value is not None:
            out[name] = msgspec.convert(value, _JSON_FIELDS[name], from_attributes=True)
        else:
            out[name] = plain(value)
    return out


def export(
    cl: Records,
    invocation_id: str | None = None,
    fmt: str = "jsonl",
    *,
    out: BytesSink,
    progress: Progress | None = None,
    tolerant: bool = False,
) -> ExportSummary:
    """Write the history of ``invocation_id`` (every invocation when ``None``) as JSON Lines.

    ``fmt="jsonl"``: one line per save with the full record after it. ``fmt="jsonl-frames"``:
    one line per stored frame with what it holds (deltas stay deltas: smaller, lossless).
    Tolerant: unreadable seqs become ``{"unreadable": ...}`` lines and are listed in the
    summary; strict: the first damaged frame raises ``CorruptFrame``.
    """
    if fmt not in EXPORT_FORMATS:
        raise InvalidArgument(f"export format {fmt!r} is unknown; expected one of {EXPORT_FORMATS}")
    streams = [invocation_id] if invocation_id is not None else cl.log.streams()
    if invocation_id is not None:
        last_seq(cl, invocation_id)
    total = sum(cl.log.last_seq(s) for s in streams) if progress is not None else 0
    summary = ExportSummary()
    jl = JsonLines()
    done = 0
    for stream in streams:
        summary.invocations += 1
        for item in walk(cl.log, stream, tolerant=tolerant):
            if isinstance(item, Unreadable):
                summary.unreadable.append(item)
                line = jl.line(
                    {
                        "invocation_id": stream,
                        "seq": item.seq,
                        "last_seq": item.last_seq,
                        "unreadable": item.problem,
                        "detail": item.detail,
                    }
                )
            else:
                done += 1
                line = jl.line(_export_line(item, stream, fmt))
                if progress is not None and done % PROGRESS_EVERY_FRAMES == 0:
                    progress(done, total)
            out.write(line)
            summary.lines += 1
            summary.bytes += len(line)
    if progress is not None:
        progress(done, total)
    return summary


def _export_line(step: Step, stream: str, fmt: str) -> dict[str, Any]:
    line: dict[str, Any] = {
        "invocation_id": stream,
        "seq": step.seq,
        "global_seq": step.global_seq,
        "saved_at": step.saved_at,
        "kind": step.kind,
        "frame": step.frame_type,
        "checksum": step.checksum.hex(),
    }
    if step.forked is not None:
        f = step.forked
        line["forked_from"] = {"invocation_id": f.invocation_id, "seq": f.seq,
                               "checksum": f.checksum.hex()}  # fmt: skip
    if fmt == "jsonl-frames" or not step.is_record:
        line["content"] = frame_content(step.frame)
    else:
        record = step.record()
        line["record"] = record_content(record) if record is not None else None
    return line
