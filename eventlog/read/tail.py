"""Live tail: every frame as it is committed, by any process, one :class:`Saved` row each.

:func:`tail` polls the log's global sequence index (table ``log``, keyed by the global seq
every commit assigns in commit order) for keys past the last one it yielded: on LMDB one
read transaction per poll (a reader takes no lock a writer waits for), on PostgreSQL one
indexed range read (``k > last``) on a pooled read-only connection. The backend emits no
notification to wait on, so the poll is the cheapest way that needs nothing of the writer.

Invariants:
- Read-only: nothing is written, no writer waits on a tail.
- In commit order, each frame once: commit order is the global seq order on both engines
  (LMDB has one writer at a time; PostgreSQL writers hold the log's writers' lock until their
  commit is visible, so no lower global seq becomes visible after a higher one).
- Lag from commit to row: at most one poll interval (``poll_seconds``, 20 ms by default) plus
  the read, when the reader keeps up.
- A filtered tail (one stream) decodes only that stream's frames (others are skipped by
  their header's stream id).
- Damage never stops a tail: a frame that does not decode is yielded as a row of kind
  ``unreadable`` (``Saved.problem`` says why) and the tail carries on past it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from eventlog.codec import read_header
from eventlog.errors import CorruptFrame, InvalidArgument
from eventlog.layout import LOG, U64
from eventlog.log import EventLog, StoredFrame
from eventlog.read.saves import Saved, info_of, saved
from eventlog.streams import StreamInfo
from eventlog.walker import Unreadable, read_frames

__all__ = ["POLL_SECONDS", "Saved", "last_global_seq", "tail"]

POLL_SECONDS: Final = 0.02
CHUNK: Final = 1024  # frames per read transaction


def last_global_seq(log: EventLog) -> int:
    """The global seq of the newest committed frame (0: an empty log)."""
    with log.backend.read() as txn:
        key = txn.last_key(LOG)
    return 0 if key is None else int(U64.unpack(key)[0])


def _sid(log: EventLog, stream: str) -> int | None:
    with log.backend.read() as txn:
        return log.stream_id(txn, stream)


def _after(
    log: EventLog, after: int, sid: int | None
) -> list[tuple[int, StoredFrame[Any] | Unreadable | None]]:
    """Up to :data:`CHUNK` ``(global seq, frame)`` past global seq ``after``, read in one
    transaction; a frame of another stream than stream id ``sid`` (when given) is ``None``,
    not decoded; one that does not decode is :class:`Unreadable`."""
    out: list[tuple[int, StoredFrame[Any] | Unreadable | None]] = []
    with log.backend.read() as txn:
        for gkey, data in txn.scan(LOG, U64.pack(after + 1), limit=CHUNK):
            gseq = int(U64.unpack(gkey)[0])
            name = "?"
            try:
                frame_sid = read_header(data)[3]
                if sid is not None and frame_sid != sid:
                    out.append((gseq, None))
                    continue
                name = log.stream_name(txn, frame_sid)
                out.append((gseq, log.decode_stored(name, gseq, data)))
            except CorruptFrame as e:
                seq = e.seq or 0
                out.append((gseq, Unreadable(name, seq, seq, "damaged", str(e), gseq)))
    return out


def unreadable_row(item: Unreadable) -> Saved:
    """A frame that could not be read, as a row (``kind`` ``unreadable``, ``problem`` why)."""
    return Saved(
        stream=item.stream, seq=item.seq, global_seq=item.global_seq or 0, saved_at=0.0,
        kind="unreadable", frame="unreadable", node=None, ref=None, correlation=None,
        stream_kind="-", display=item.stream, size=0, checksum=b"", problem=str(item),
    )  # fmt: skip


def tail(
    log: EventLog,
    stream: str | None = None,
    *,
    from_seq: int | None = None,
    poll_seconds: float = POLL_SECONDS,
    stop: Callable[[], bool] | None = None,
    info: StreamInfo | None = None,
) -> Iterator[Saved]:
    """Every frame committed to ``log`` (or to ``stream``) from now on, in commit order, as it
    is committed; runs until ``stop()`` returns true (checked between polls) or the caller
    stops iterating.

    ``from_seq``: start at that seq of ``stream`` (every frame from it is yielded first), or,
    without a stream, after the frames before that global seq; ``None``: from now (only
    frames committed after the call). ``info``: what ``stream`` is, when the caller knows."""
    if poll_seconds <= 0:
        raise InvalidArgument(f"poll_seconds must be > 0, got {poll_seconds!r}")
    if from_seq is not None and from_seq < 1:
        raise InvalidArgument(f"from_seq counts from 1, got {from_seq!r}")
    known: dict[str, StreamInfo] = {}
    if stream is not None and info is not None:
        known[stream] = info
    after = last_global_seq(log)  # "now" is when tail() is called, not its first next()
    return _follow(log, stream, from_seq, after, poll_seconds, stop, known)


def _follow(
    log: EventLog,
    stream: str | None,
    from_seq: int | None,
    after: int,
    poll_seconds: float,
    stop: Callable[[], bool] | None,
    known: dict[str, StreamInfo],
) -> Iterator[Saved]:
    if from_seq is not None and stream is not None:
        for sf in read_frames(log, stream, from_seq):
            if isinstance(sf, Unreadable):
                yield unreadable_row(sf)
                continue
            if sf.global_seq > after:
                break  # the live loop below yields it
            yield saved(sf, info_of(sf, known, log))
    elif from_seq is not None:
        after = min(after, from_seq - 1)
    sid = _sid(log, stream) if stream is not None else None
    while True:
        if stream is not None and sid is None:
            sid = _sid(log, stream)  # a stream that does not exist yet
        frames = _after(log, after, sid) if stream is None or sid is not None else []
        for gseq, item in frames:
            after = gseq
            if isinstance(item, Unreadable):
                yield unreadable_row(item)
            elif item is not None:
                yield saved(item, info_of(item, known, log))
        if len(frames) == CHUNK:
            continue
        if stop is not None and stop():
            return
        time.sleep(poll_seconds)
