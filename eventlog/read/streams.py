"""Streams of every kind, through the view registry: what a stream is, which stream a user
means, its steps, and the listing of a log's streams with one status rule.

Invariants:
- One rule decides what a stream is (:func:`describe`: the view that claims it, judged by its
  key and first frame; eventlog.views.describe); nothing here parses a stream key.
- Read-only and tolerant: damage is yielded as ``Unreadable`` (or described by key alone),
  never raised from a walk.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from eventlog import forensics as fx
from eventlog import views
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import UnknownInvocation
from eventlog.log import EventLog
from eventlog.streams import Step, StreamInfo

__all__ = [
    "STATUSES",
    "Listed",
    "close_matches",
    "describe",
    "find",
    "listing",
    "seq_as_of",
    "status_of",
    "step_at",
    "steps",
]

STATUSES = ("completed", "running", "failed", "deleted", "-")


def describe(log: EventLog, stream: str) -> StreamInfo:
    """What ``stream`` is, from the view that claims it (``events``: none does)."""
    first: Any = None
    readable = False
    for item in fx.read_frames(log, stream, 1, 1):
        if not isinstance(item, fx.Unreadable):
            first, readable = item.frame, True
    return views.describe(stream, first, readable)


def steps(
    log: EventLog,
    stream: str,
    info: StreamInfo | None = None,
    *,
    diffs: bool = False,
    from_seq: int = 1,
    to_seq: int | None = None,
) -> Iterator[Step | fx.Unreadable]:
    """Every frame of ``stream`` with the stream as of it (``Step.value``), from its view;
    a stream no view claims (application events) walks as the checkpoint view reads it.

    ``from_seq``/``to_seq``: only the steps in that range (an ``Unreadable`` run that
    reaches into it included). A view with a ``steps_from(log, stream, from_seq, to_seq)``
    method (the LangGraph view) reads them without replaying the frames before, a chunk of
    frames at a time (a reader that stops early, such as ``history -n 20``, reads no more);
    any other is walked from its first frame."""
    info = info if info is not None else describe(log, stream)
    owner: Any = next((v for v in views.REGISTRY if v.name == info.kind), None)
    if owner is None or info.kind == "events":
        owner = views.CHECKPOINTS
    seek = getattr(owner, "steps_from", None)
    if seek is not None and not diffs:
        return cast(Iterator[Step | fx.Unreadable], seek(log, stream, from_seq, to_seq))
    walk: Iterator[Step | fx.Unreadable] = owner.steps(log, stream, diffs=diffs)
    if from_seq <= 1 and to_seq is None:
        return walk
    return _window(walk, from_seq, to_seq)


def _window(
    walk: Iterator[Step | fx.Unreadable], from_seq: int, to_seq: int | None
) -> Iterator[Step | fx.Unreadable]:
    for item in walk:
        if to_seq is not None and item.seq > to_seq:
            return
        if getattr(item, "last_seq", item.seq) >= from_seq:
            yield item


def seq_as_of(log: EventLog, stream: str, info: StreamInfo | None, when: float) -> int:
    """The last readable step saved at or before ``when`` (0: none). A view with
    ``steps_from`` (LangGraph: a step's time is its frame's) is scanned by its frames'
    times, without rebuilding each step's value; any other walks its steps."""
    info = info if info is not None else describe(log, stream)
    owner: Any = next((v for v in views.REGISTRY if v.name == info.kind), None)
    found = 0
    if getattr(owner, "steps_from", None) is not None:
        for item in fx.read_frames(log, stream):
            if not isinstance(item, fx.Unreadable) and fx.frame_saved_at(item.frame) <= when:
                found = item.seq
        return found
    for step in steps(log, stream, info):
        if not isinstance(step, fx.Unreadable) and step.saved_at <= when:
            found = step.seq
    return found


def step_at(
    log: EventLog, stream: str, info: StreamInfo | None, seq: int
) -> tuple[Step | None, list[fx.Unreadable]]:
    """The step at ``seq`` (when it cannot be read: the last readable one before it; ``None``
    when there is none or seq is 0) and what was found unreadable on the way. A view with
    ``steps_from`` (LangGraph) reads the step from its rows, at a cost independent of the
    stream's length, and reports no damage it did not read; when that read meets damage, or
    for any other view, the stream is walked from its first frame and every unreadable frame
    up to ``seq`` is reported."""
    if seq <= 0:
        return None, []
    info = info if info is not None else describe(log, stream)
    owner: Any = next((v for v in views.REGISTRY if v.name == info.kind), None)
    if getattr(owner, "steps_from", None) is not None:
        read = list(steps(log, stream, info, from_seq=seq, to_seq=seq))
        if len(read) == 1 and isinstance(read[0], Step) and read[0].seq == seq:
            return read[0], []
    # damage on the way (or a view that replays): walk from the first frame, reporting it
    found: Step | None = None
    unreadable: list[fx.Unreadable] = []
    for item in steps(log, stream, info):
        if isinstance(item, fx.Unreadable):
            if item.seq <= seq:
                unreadable.append(item)
            continue
        if item.seq > seq:
            break
        found = item
    return found, unreadable


def _names(info: StreamInfo) -> set[str]:
    return {info.stream, info.display, *info.aliases}


def find(
    log: EventLog,
    wanted: str | None,
    labels: dict[str, Any] | None = None,
    *,
    kind: str | None = None,
) -> tuple[str, StreamInfo] | None:
    """The stream a user means: ``wanted`` is its key or a name its view gives it (a thread
    id, a task id), its view's labels hold ``labels`` (``{"thread_id": ...,
    "checkpoint_ns": ...}``) and its kind is ``kind`` (any when ``None``); the key itself
    first, then the streams in the log's order."""
    if wanted is not None and not labels and log.last_seq(wanted) > 0:
        info = describe(log, wanted)
        if kind is None or info.kind == kind:
            return wanted, info

    def fits(info: StreamInfo) -> bool:
        if kind is not None and info.kind != kind:
            return False
        if labels and any(info.labels.get(k) != v for k, v in labels.items()):
            return False
        return wanted is None or wanted in _names(info)

    for name in log.streams():
        if not fits(views.describe(name, None, readable=False)):  # by key: no frame read
            continue
        info = describe(log, name)
        if fits(info):
            return name, info
    return None


def close_matches(log: EventLog, wanted: str, n: int = 3) -> list[str]:
    """Names close to ``wanted`` (``difflib``), to suggest after a miss."""
    names: dict[str, str] = {}
    for name in log.streams():
        for alias in sorted(_names(views.describe(name, None, readable=False)), key=len):
            names.setdefault(alias, name)
        names.setdefault(name, name)
    return difflib.get_close_matches(wanted, list(names), n=n, cutoff=0.6)


@dataclass
class Listed:
    """One stream of a listing: its row (eventlog.forensics.Invocation), what it is, and its
    status by the one rule (:func:`status_of`)."""

    row: fx.Invocation
    info: StreamInfo
    status: str
    labels: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.info.kind


def status_of(row: fx.Invocation, info: StreamInfo) -> str:
    """``deleted``, ``failed`` (an instance failed, or a failure was saved), ``running``,
    ``completed`` for checkpoint invocations; ``-`` for streams without a record status."""
    if row.deleted:
        return "deleted"
    if row.error_instances or row.kind == "fan_out_in_flight_failure":
        return "failed"
    if row.kind is None or info.kind != "checkpoint":
        return "-"
    if row.completed_instances < row.fan_out_instances:
        return "running"
    return "completed"


def listing(cl: CheckpointLog, correlation_id: str | None = None) -> list[Listed]:
    """Every stream of the log (or those of ``correlation_id``), oldest last save first."""
    out = []
    for row in fx.invocations(cl, correlation_id, all_streams=True):
        if row.correlation_id is not None:  # a head row: the checkpoint view's stream
            info = views.CHECKPOINTS.describe(row.invocation_id)
        else:
            info = describe(cl.log, row.invocation_id)
        out.append(Listed(row, info, status_of(row, info), dict(info.labels)))
    return out


def last_seq(log: EventLog, stream: str) -> int:
    """The newest seq of ``stream``; :class:`UnknownInvocation` when it has none."""
    last = log.last_seq(stream)
    if last == 0:
        raise UnknownInvocation(f"no stream {stream!r} in the log; list them with `ckptlog ls`")
    return last
