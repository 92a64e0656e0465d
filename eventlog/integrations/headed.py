"""A headed event store: the materialized view apflow and techrevati share.

Streams named ``<stream_prefix><id>`` hold :class:`eventlog.frames.Event` frames whose names
start with ``<event_prefix>``; each stream has one small head row (a msgspec struct, key
``head_prefix + sid``) in the integration's table, the fold of its frames (:meth:`step`), plus
whatever extra rows a subclass keeps (:meth:`apply_extra`, :meth:`expected_extra`).

Invariants:
- A frame's rows are written in the transaction that appends it: either by the integration's
  deferred frame (which computed the head it writes with :meth:`write_head`) or by
  :meth:`apply` (compaction, rebuild); both give the rows :meth:`step` folds to.
- :meth:`verify` reports, never repairs: every stream's head row (and extra rows) against the
  fold of its frames, and head rows of streams without frames.
- The read side (:meth:`describe`, :meth:`steps`) folds a stream with the integration's pure
  read fold in ``projections/`` (:meth:`read_apply`): it needs neither the framework nor the
  rows, so a thread of an integration that is not installed reads the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import msgspec

from backends.base import ReadTxn, WriteTxn
from eventlog import walker
from eventlog.errors import CheckpointError, CorruptFrame
from eventlog.frames import Event
from eventlog.layout import LOG, STREAM_IDS, STREAMS, U64, U64X2
from eventlog.log import EventLog, StoredFrame
from eventlog.reports import Problem
from eventlog.streams import Step, StreamInfo

H = TypeVar("H", bound=msgspec.Struct)


class HeadedEventView(Generic[H]):
    """One head row per stream, folded from the stream's events (see the module doc)."""

    def __init__(
        self,
        *,
        name: str,
        table: str,
        stream_prefix: str,
        event_prefix: str,
        head_type: type[H],
        head_prefix: bytes = b"",
        unit: str = "stream",
        id_label: str | None = None,
    ) -> None:
        self.name = name
        self.table = table
        self.tables: tuple[str, ...] = (table,)
        self.stream_prefix = stream_prefix
        self.event_prefix = event_prefix
        self.head_type = head_type
        self.head_prefix = head_prefix
        self.unit = unit  # what a stream is to the integration, in messages: "task", "thread"
        self.id_label = id_label or f"{unit}_id"  # the integration's name for a stream's id
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder(head_type)

    # -- rows ------------------------------------------------------------------------------------

    def head_key(self, sid: int) -> bytes:
        return self.head_prefix + U64.pack(sid)

    def initial(self) -> H:
        return self.head_type()

    def read_head(self, txn: ReadTxn, sid: int) -> H | None:
        raw = txn.get(self.table, self.head_key(sid))
        return None if raw is None else self._dec.decode(raw)

    def locate(self, log: EventLog, stream: str) -> tuple[int, H] | None:
        """The id and head row of ``stream`` (``None``: it has none, or its key is too long
        to have been saved), in a read of its own: one statement on a server
        (:meth:`~backends.base.Backend.get_named_spans_now`: the head row joined to the
        stream's id), where a read transaction takes four round trips."""
        name = stream.encode("utf-8", "surrogatepass")
        if len(name) > log.backend.max_key_bytes:
            return None
        span = (self.table, self.head_prefix, b"", b"\x00")
        p, spans = log.backend.get_named_spans_now(STREAM_IDS, name, (span,))
        if p is None or not spans[0]:
            return None
        return U64.unpack(p)[0], self._dec.decode(spans[0][0][1])

    def write_head(self, txn: WriteTxn, sid: int, head: H) -> None:
        txn.put(self.table, self.head_key(sid), self._enc.encode(head))

    # -- the fold (subclasses) -------------------------------------------------------------------

    def step(self, head: H, frame: Any, seq: int) -> H:
        """The head after ``frame``; raises :class:`~eventlog.errors.CorruptFrame` on a frame
        that is not this integration's."""
        raise NotImplementedError

    def apply_extra(self, txn: WriteTxn, sid: int, seq: int, frame: Any) -> None:
        """Rows besides the head that ``frame`` changes (none by default)."""

    def expected_extra(self, frames: Iterable[StoredFrame[Any]]) -> dict[bytes, bytes]:
        """The extra rows (key after ``extra_prefix(sid)`` -> value) the frames fold to."""
        return {}

    def extra_prefix(self, sid: int) -> bytes | None:
        """Where a stream's extra rows live (``None``: it has none)."""
        return None

    def extra_problem(
        self, stream: str, stored: dict[bytes, bytes], want: dict[bytes, bytes]
    ) -> str:
        return (
            f"{self.name} rows of the {self.unit} hold {len(stored)} entries, the fold gives "
            f"{len(want)} (or they point at other frames)"
        )

    def read_apply(self, state: Any, frame: Any) -> tuple[Any, str, str, str | None, str | None]:
        """The read fold (subclasses, from ``projections/``): the stream as plain data after
        ``frame``, and the frame's kind, label, ref and node."""
        raise NotImplementedError

    # -- the view protocol (eventlog.views.View) -------------------------------------------------

    def describe(self, stream: str) -> StreamInfo | None:
        if not stream.startswith(self.stream_prefix):
            return None
        ident = stream[len(self.stream_prefix) :]
        return StreamInfo(
            stream, self.name, f"{self.name} {self.unit}", stream, aliases=(ident,),
            labels={self.id_label: ident},
        )  # fmt: skip

    def steps(self, log: EventLog, stream: str, *, diffs: bool = False) -> Iterator[Any]:
        state: Any = None
        for item in walker.read_frames(log, stream):
            if isinstance(item, walker.Unreadable):
                yield item
                continue
            frame = item.frame
            state, kind, label, ref, node = self.read_apply(state, frame)
            yield Step(
                item.seq, item.global_seq, walker.frame_saved_at(frame), kind, label, ref,
                (node,) if node else (), item.stored_bytes, item.checksum, frame,
                walker.frame_type(frame), state,
            )  # fmt: skip

    def claims(self, stream: str, first: Any) -> bool:
        return (
            stream.startswith(self.stream_prefix)
            and isinstance(first, Event)
            and first.name.startswith(self.event_prefix)
        )

    def apply(
        self, txn: WriteTxn, stream: str, sid: int, seq: int, frame: Any, stored_bytes: int
    ) -> None:
        head = self.read_head(txn, sid)
        self.write_head(
            txn, sid, self.step(head if head is not None else self.initial(), frame, seq)
        )
        self.apply_extra(txn, sid, seq, frame)

    def rebuild_stream(
        self, txn: WriteTxn, stream: str, sid: int, frames: Iterable[StoredFrame[Any]]
    ) -> None:
        for sf in frames:
            self.apply(txn, stream, sid, sf.seq, sf.frame, sf.stored_bytes)

    def verify(
        self, log: EventLog, progress: Callable[[int, int], None] | None = None
    ) -> list[Problem]:
        problems: list[Problem] = []
        with log.backend.read() as txn:
            streams = log.stream_ids(txn, self.stream_prefix)
            n = len(self.head_prefix)
            rows = {
                U64.unpack_from(k, n)[0]: v
                for k, v in txn.scan_prefix(self.table, self.head_prefix)
            }
        for stream, sid in streams:
            raw = rows.pop(sid, None)
            head = self.initial()
            try:
                frames = list(log.read_stream(stream))
                if frames and not self.claims(stream, frames[0].frame) and raw is None:
                    continue  # another view's stream (a checkpoint invocation with our prefix)
                for sf in frames:
                    head = self.step(head, sf.frame, sf.seq)
                want_extra = self.expected_extra(frames)
            except (CheckpointError, msgspec.ValidationError) as e:
                problems.append(
                    Problem("projection", f"cannot fold the {self.unit}: {e}", stream=stream)
                )
                continue
            row = self._dec.decode(raw) if raw is not None else None
            if row != head:
                problems.append(
                    Problem(
                        "projection",
                        f"{self.name} head row is {row!r}, the fold of the frames gives {head!r}",
                        stream=stream,
                    )
                )
            prefix = self.extra_prefix(sid)
            if prefix is not None:
                with log.backend.read() as txn:
                    stored = {k[len(prefix) :]: v for k, v in txn.scan_prefix(self.table, prefix)}
                if stored != want_extra:
                    problems.append(
                        Problem(
                            "projection", self.extra_problem(stream, stored, want_extra), stream
                        )
                    )
        problems.extend(
            Problem("projection", f"{self.name} head row for stream id {sid} has no frames")
            for sid in sorted(rows)
        )
        return problems


def read_frame_now(log: EventLog, stream: str, sid: int, seq: int) -> StoredFrame[Any] | None:
    """Frame ``seq`` of ``stream`` (id ``sid``; ``None``: no such seq) in a read of its own:
    its index row joined to its log row, one statement on a server
    (:meth:`~backends.base.Backend.get_indexed_now`) where ``EventLog.read_frame`` takes five
    round trips. A stored frame never changes, so it needs no snapshot shared with the head row
    that named it."""
    gkey, data = log.backend.get_indexed_now(STREAMS, U64X2.pack(sid, seq), LOG)
    if gkey is None:
        return None
    if data is None:
        raise CorruptFrame(
            f"stream {stream!r} seq {seq}: index points at log #{U64.unpack(gkey)[0]}, which "
            "is missing; run verify()",
            stream=stream,
            seq=seq,
        )
    return log.decode_stored(stream, U64.unpack(gkey)[0], data, (sid, seq))
