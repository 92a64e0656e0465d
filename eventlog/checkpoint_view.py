"""The checkpoint-record view: heads, bodies, positions, fan-out rows, the correlation index
and snapshot marks (tables in eventlog.materialized), as one :class:`eventlog.views.View`.

The writer (eventlog.checkpoints) keeps these rows in each save's transaction from the delta it
computed; :meth:`CheckpointView.apply` does the same from a committed frame alone (compaction,
rebuild), :meth:`CheckpointView.rebuild_stream` folds a whole stream and writes its rows once,
and :func:`verify_rows` checks every row against the fold of its stream. For the read side,
:meth:`CheckpointView.describe` and :meth:`CheckpointView.steps` (the tolerant forensic walk,
each frame with the record as of it).

Invariants:
- Rows written from frames here equal, byte for byte, the rows the writer wrote for the same
  frames (the snapshot bookkeeping counts the stored bytes of checkpoint frames only).
- :func:`verify_rows` reports, never repairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import msgspec

from backends.base import ReadTxn, WriteTxn
from eventlog.codec import enc_hook
from eventlog.errors import CheckpointError, CorruptFrame
from eventlog.frames import CHECKPOINT_FRAMES, Save, Snapshot, Tombstone
from eventlog.layout import LOG, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.layout import U16 as _U16
from eventlog.layout import U32 as _U32
from eventlog.log import EventLog, StoredFrame
from eventlog.materialized import (
    BODIES,
    BY_CORRELATION,
    FANOUT,
    HEADS,
    POSITIONS,
    SNAPSHOTS,
    TABLES,
    Book,
    HeadRow,
    book_after,
    book_of,
    delete_rows,
    full_save,
    read_head,
    read_row,
    write_save,
    write_snapshot_mark,
)
from eventlog.records import FanOutInstanceProgress, NodePosition, is_not_started
from eventlog.reports import Problem
from eventlog.streams import Step, StreamInfo, plain
from eventlog.walker import Unreadable, walk
from projections.records import Head, apply_inplace

U64_LEN: Final = 8
PROBLEMS_PER_STREAM_MAX: Final = 20  # materialized-row problems listed per stream, then a count

_dec_row = msgspec.msgpack.Decoder(HeadRow)
_dec_pos = msgspec.msgpack.Decoder(NodePosition)
_dec_inst = msgspec.msgpack.Decoder(FanOutInstanceProgress)
_enc = msgspec.msgpack.Encoder(enc_hook=enc_hook)  # as the rows are written


class CheckpointView:
    """The checkpoint-record view (``eventlog.views.View``): claims streams whose first frame is
    a save, snapshot or tombstone; events beside the saves are skipped."""

    name: Final = "checkpoints"
    tables: Final = TABLES

    def claims(self, stream: str, first: Any) -> bool:
        return isinstance(first, CHECKPOINT_FRAMES)

    def apply(
        self, txn: WriteTxn, stream: str, sid: int, seq: int, frame: Any, stored_bytes: int
    ) -> None:
        if isinstance(frame, Tombstone):
            try:
                row = read_row(txn, sid)
            except msgspec.DecodeError:
                row = None  # delete_rows then searches the correlation index
            delete_rows(txn, sid, row)
            return
        if not isinstance(frame, (Save, Snapshot)):
            return  # an event beside the saves
        got = read_head(txn, sid)
        before, row = got if got is not None else (None, None)
        head = apply_inplace(before, frame, seq, stream)
        assert head is not None
        book, completed = book_after(book_of(row), frame, seq, stored_bytes)
        if isinstance(frame, Snapshot):
            write_snapshot_mark(txn, sid, seq)
        if completed:
            write_snapshot_mark(txn, sid, completed, seq)
        if isinstance(frame, Snapshot) or row is None:
            if row is not None:
                delete_rows(txn, sid, row)
            _write_full(txn, sid, head, book)
            return
        write_save(txn, sid, row, frame, head, book=book)

    def rebuild_stream(
        self, txn: WriteTxn, stream: str, sid: int, frames: Iterable[StoredFrame[Any]]
    ) -> None:
        """Fold the stream in memory, then write its rows once (O(frames + record))."""
        head: Head | None = None
        book = Book()
        for sf in frames:
            frame = sf.frame
            if isinstance(frame, Tombstone):
                head, book = None, Book()
            elif isinstance(frame, (Save, Snapshot)):
                if isinstance(frame, Snapshot):
                    write_snapshot_mark(txn, sid, sf.seq)
                head = apply_inplace(head, frame, sf.seq, stream)
                book, completed = book_after(book, frame, sf.seq, sf.stored_bytes)
                if completed:
                    write_snapshot_mark(txn, sid, completed, sf.seq)
        if head is not None:
            _write_full(txn, sid, head, book)

    def verify(
        self, log: EventLog, progress: Callable[[int, int], None] | None = None
    ) -> list[Problem]:
        return verify_rows(log, progress)

    # -- the read side ---------------------------------------------------------------------------

    def describe(self, stream: str) -> StreamInfo:
        """Any key may name an invocation: this view describes every stream it is asked about
        (it is asked last)."""
        return StreamInfo(stream, "checkpoint", "checkpoint", stream, records=True)

    def steps(self, log: EventLog, stream: str, *, diffs: bool = False) -> Iterator[Any]:
        """The tolerant forensic walk (eventlog.forensics.walk), each frame with the record as
        of it (``value``: its content as plain data; O(record) per frame, so the command line's
        history and replay read ``detail`` instead)."""
        positions = 0
        for item in walk(log, stream, tolerant=True, counts=True, diffs=diffs):
            if isinstance(item, Unreadable):
                yield item
                continue
            made_by, positions = step_nodes(item, positions)
            record = item.record()
            label = kind_label(item) + (" (compacted)" if item.compacted is not None else "")
            if item.forked is not None:
                label += f" (fork of {item.forked.invocation_id}@{item.forked.seq})"
            yield Step(
                item.seq, item.global_seq, item.saved_at, item.kind, label, None, made_by,
                item.stored_bytes, item.checksum, item.frame, item.frame_type,
                plain(record) if record is not None else None, record, item,
            )  # fmt: skip


def kind_label(step: Any) -> str:
    """The save kind; a batch says how many instance saves it commits (``x256``)."""
    n = step.instance_saves
    return str(step.kind) if n is None else f"{step.kind} x{n:,}"


def step_nodes(step: Any, positions: int) -> tuple[tuple[str, ...], int]:
    """The node(s) whose completion made a walk step (a forensics Step), and the count of
    completed positions after it (pass it to the next call; 0 to start)."""
    nodes: tuple[str, ...] = ()
    if step.head is not None:
        now = len(step.head.positions)
        if now > positions and step.compacted is None:  # a compacted start: not new
            nodes = tuple(dict.fromkeys(p.node_name for p in step.head.positions[positions:]))
        positions = now
        if not nodes:
            nodes = fan_out_nodes(step)
    elif step.is_record:
        positions = 0
    return nodes, positions


def fan_out_nodes(step: Any) -> tuple[str, ...]:
    """The fan-out node(s) whose instances a frame changed (a batch, or one instance save)."""
    frame = step.frame
    if isinstance(frame, Save) and frame.instance_saved_at:
        changes: tuple[Any, ...] = frame.instances
    elif isinstance(frame, Snapshot) and frame.batch:
        changes = frame.batch
    else:
        changes = ()
    if not changes and isinstance(frame, Save):
        changes = frame.instances
    if step.head is None:
        return ()
    names = {s.header.fid: s.header.fan_out_node_name for s in step.head.slots}
    if not changes:
        # A snapshot written for one instance save keeps no change list: an instance save
        # changes its invocation's fan-out(s).
        fan_out_kind = step.kind in ("fan_out_internal", "fan_out_in_flight_failure")
        return tuple(dict.fromkeys(names.values())) if fan_out_kind else ()
    return tuple(dict.fromkeys(names.get(c.fid, "?") for c in changes))


def _write_full(txn: WriteTxn, sid: int, head: Head, book: Book) -> None:
    write_save(txn, sid, None, full_save(head), head, book=book)


VIEW: Final = CheckpointView()


class _RowCheck:
    """Compare one stream's materialized rows with the fold of its frames (one read txn)."""

    def __init__(self, txn: ReadTxn, stream: str, sid: int) -> None:
        self.txn = txn
        self.stream = stream
        self.sid = sid
        self.key = U64.pack(sid)
        self.problems: list[Problem] = []
        self.extra = 0

    def add(self, detail: str, seq: int | None = None) -> None:
        if len(self.problems) < PROBLEMS_PER_STREAM_MAX:
            self.problems.append(Problem("projection", detail, self.stream, seq))
        else:
            self.extra += 1

    def finish(self) -> list[Problem]:
        if self.extra:
            self.problems.append(
                Problem("projection", f"... and {self.extra} more row problem(s)", self.stream)
            )
        return self.problems

    def compare(self, head: Head | None, row: HeadRow | None, corr: set[str]) -> None:
        if head is None:
            if row is not None:
                self.add("a head row exists, but the fold says deleted or never saved", row.seq)
            self.leftovers()
            if corr:
                self.add(f"correlation index lists it under {sorted(corr)}, but it has no head")
            return
        if row is None:
            self.add(f"head row missing: the fold has a record at seq {head.seq}", head.seq)
            return
        self.fields(head, row)
        self.bodies(head)
        self.positions(head)
        self.fan_out_rows(head)
        if corr != {head.correlation_id}:
            self.add(
                f"correlation index lists it under {sorted(corr)}, expected "
                f"[{head.correlation_id!r}]"
            )

    def fields(self, head: Head, row: HeadRow) -> None:
        expected = {
            "invocation_id": head.invocation_id,
            "correlation_id": head.correlation_id,
            "schema_version": head.schema_version,
            "kind": head.kind,
            "seq": head.seq,
            "positions_count": len(head.positions),
            "layout": tuple(s.header for s in head.slots),
            "next_fid": head.next_fid,
        }
        for name, want in expected.items():
            got = getattr(row, name)
            if got != want:
                self.add(f"head row {name} is {got!r}, the fold says {want!r}", head.seq)
        if not _same_float(row.last_saved_at, head.last_saved_at):
            self.add(
                f"head row last_saved_at is {row.last_saved_at!r}, the fold says "
                f"{head.last_saved_at!r}",
                head.seq,
            )

    def bodies(self, head: Head) -> None:
        for suffix, name, want in (
            (b"s", "state", head.state),
            (b"p", "parent states", head.parent_states),
        ):
            got = self.txn.get(BODIES, self.key + suffix) or (
                b"\xc0" if suffix == b"s" else b"\x90"
            )
            if got != want:
                self.add(f"materialized {name} differ from the fold's", head.seq)

    def positions(self, head: Head) -> None:
        rows = list(self.txn.scan_prefix(POSITIONS, self.key))
        if len(rows) != len(head.positions):
            self.add(f"{len(rows)} position rows, the fold has {len(head.positions)}", head.seq)
        for (k, v), want in zip(rows, head.positions, strict=False):
            index = _U32.unpack_from(k, 8)[0]
            got = _dec_pos.decode(v)
            if got != want:
                self.add(f"position row {index} is {got!r}, the fold says {want!r}", head.seq)

    def fan_out_rows(self, head: Head) -> None:
        slots = {s.header.fid: s for s in head.slots}
        seen: set[tuple[int, int]] = set()
        for k, v in self.txn.scan_prefix(FANOUT, self.key):
            fid, index = _U32.unpack_from(k, 8)[0], _U32.unpack_from(k, 12)[0]
            slot = slots.get(fid)
            if slot is None or index >= slot.header.instance_count:
                self.add(f"fan-out row (fan-out id {fid}, index {index}) belongs to no fan-out")
                continue
            seen.add((fid, index))
            got = _dec_inst.decode(v)
            want = slot.instances[index]
            if got != want and v != _enc.encode(want):  # NaN != NaN: compare bytes then
                name = slot.header.fan_out_node_name
                a, b = _instances(got, want)
                self.add(
                    f"fan-out row {name!r}[{index}] is {a}, the fold says {b}",
                    head.seq,
                )
        for fid, slot in slots.items():
            for index, inst in enumerate(slot.instances):
                if not is_not_started(inst) and (fid, index) not in seen:
                    name = slot.header.fan_out_node_name
                    self.add(f"fan-out row {name!r}[{index}] missing: the fold says {inst.state}")

    def leftovers(self) -> None:
        for table in (POSITIONS, FANOUT, BODIES):
            for _ in self.txn.scan_prefix(table, self.key, limit=1):
                self.add(f"rows left in {table!r} for a stream with no head")


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _instances(got: FanOutInstanceProgress, want: FanOutInstanceProgress) -> tuple[str, str]:
    """Two differing instances in a message: state and result, plus the error flags and inner
    positions when those are what differs (two equal texts would hide the difference)."""
    a, b = (f"{p.state} {_brief(p.result)}" for p in (got, want))
    if a == b:
        a, b = (
            f"{p.state} {_brief(p.result)} (error={p.result_is_error}) with inner positions "
            f"{_brief(p.completed_inner_positions)}"
            for p in (got, want)
        )
    return a, b


def _same_float(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))  # an unchanged NaN is no problem


def verify_rows(log: EventLog, progress: Callable[[int, int], None] | None = None) -> list[Problem]:
    """Every checkpoint row against the fold of its stream's frames, in one read txn
    (``progress(done, total)`` in frames)."""
    problems: list[Problem] = []
    with log.backend.read() as txn:
        total = txn.count(LOG)
        names = {
            U64.unpack(k)[0]: v.decode("utf-8", "surrogatepass") for k, v in txn.scan(STREAM_NAMES)
        }
        heads: dict[int, HeadRow | None] = {}
        for k, v in txn.scan(HEADS):
            sid = U64.unpack(k)[0]
            try:
                heads[sid] = _dec_row.decode(v)
            except msgspec.DecodeError as e:
                heads[sid] = None
                problems.append(
                    Problem("projection", f"head row does not decode: {e}", names.get(sid))
                )
        marks: dict[int, dict[int, int]] = {}  # sid -> {first seq: seq completing it (0)}
        for k, v in txn.scan(SNAPSHOTS):
            done_at = U64.unpack(v)[0] if len(v) == U64_LEN else 0
            marks.setdefault(U64.unpack_from(k)[0], {})[U64.unpack_from(k, 8)[0]] = done_at
        corr: dict[int, set[str]] = {}
        for k, _ in txn.scan(BY_CORRELATION):
            n = _U16.unpack_from(k)[0]
            corr.setdefault(U64.unpack_from(k, 2 + n)[0], set()).add(
                k[2 : 2 + n].decode("utf-8", "surrogatepass")
            )
        done = 0
        for sid, stream in names.items():
            head, snapshots, failure, frames = _fold_in_txn(log, txn, sid, stream)
            done += frames
            if progress is not None:
                progress(done, total)
            row = heads.pop(sid, None)
            marked = marks.pop(sid, {})
            indexed = corr.pop(sid, set())
            if failure is not None:
                problems.append(failure)
                continue
            check = _RowCheck(txn, stream, sid)
            if head is not None or row is not None or snapshots or marked or indexed:
                check.compare(head, row, indexed)
            for seq in sorted(marked.keys() - snapshots.keys()):
                check.add(f"snapshot mark at seq {seq}, but that frame is not a snapshot", seq)
            for seq in sorted(snapshots.keys() - marked.keys()):
                check.add(f"snapshot frame at seq {seq} has no snapshot mark", seq)
            for seq in sorted(snapshots.keys() & marked.keys()):
                if snapshots[seq] != marked[seq]:
                    check.add(
                        f"snapshot mark at seq {seq} says its pages end at seq {marked[seq]}, "
                        f"the frames say {snapshots[seq]} (0: a snapshot frame)",
                        seq,
                    )
            problems.extend(check.finish())
        orphans = [f"a head row for stream id {sid}" for sid in heads]
        orphans += [f"snapshot marks for stream id {sid}" for sid in marks]
        orphans += [
            f"correlation index entries {sorted(c)} for stream id {sid}" for sid, c in corr.items()
        ]
        problems.extend(Problem("projection", f"{o}, which has no frames") for o in orphans)
    return problems


def _fold_in_txn(
    log: EventLog, txn: ReadTxn, sid: int, stream: str
) -> tuple[Head | None, dict[int, int], Problem | None, int]:
    """``(head, snapshots, problem, frames)``: the fold of one stream inside ``txn``;
    ``snapshots`` maps where each snapshot starts to the seq completing it (0: a snapshot
    frame), as its marks should."""
    head: Head | None = None
    snapshots: dict[int, int] = {}
    frames = 0
    for key, gkey in txn.scan_prefix(STREAMS, U64.pack(sid)):
        frames += 1
        seq = U64X2.unpack(key)[1]
        data = txn.get(LOG, gkey)
        try:
            if data is None:
                raise CorruptFrame("the frame is missing from the log")
            _, frame = log.decode_envelope(data)
            if not isinstance(frame, CHECKPOINT_FRAMES):
                continue
            if isinstance(frame, Snapshot):
                snapshots[seq] = 0
            elif isinstance(frame, Save) and frame.page is not None and frame.page.last:
                _, completed = book_after(Book(), frame, seq, 0)
                if completed:
                    snapshots[completed] = seq
            head = apply_inplace(head, frame, seq, stream)
        except (CheckpointError, KeyError, IndexError, TypeError) as e:
            detail = (
                f"the head cannot be rebuilt from the frames: seq {seq} is unreadable or does "
                f"not apply ({e}); the problems above locate the damage"
            )
            return None, snapshots, Problem("projection", detail, stream, seq), frames
    return head, snapshots, None, frames
