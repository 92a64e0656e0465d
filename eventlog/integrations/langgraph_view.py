"""LangGraph views checked (:func:`verify_views`) and registered (:class:`LangGraphView`).

Part of :mod:`eventlog.integrations.langgraph_store` (which re-exports it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from backends.base import ReadTxn, WriteTxn
from eventlog.errors import CheckpointError, CorruptFrame
from eventlog.frames import (
    BLOB_FULL,
    LgBlob,
    LgCheckpoint,
    LgRemove,
    LgWrites,
)
from eventlog.integrations import langgraph_steps
from eventlog.integrations.langgraph_blobs import (
    BlobReader,
    Patches,
)
from eventlog.integrations.langgraph_frames import (
    _no_loads,
    keep_latest,
    keep_latest_writes,
)
from eventlog.integrations.langgraph_links import link_prefix, split_links
from eventlog.integrations.langgraph_rows import (
    INLINE_MAX,
    LATEST,
    READS,
    RUNS,
    TABLES,
    LatestRow,
    LatestWrites,
    ReadRow,
    apply_rows,
    blob_seq,
    decode_keyframe,
    decode_read_row,
    keyframe_prefix,
    latest_blobs_key,
    latest_writes_key,
    parse_stream_key,
    read_checkpoint_row,
    read_latest,
    read_view,
    run_key,
    stream_id,
    stream_ids,
    thread_key,
    write_rows,
)
from eventlog.layout import STREAM_NAMES, U64
from eventlog.log import EventLog, StoredFrame
from eventlog.reports import Problem
from eventlog.streams import StreamInfo
from projections.langgraph import (
    StreamView,
    checkpoint_row,
    fold,
    version_key,
)

# -- verify ------------------------------------------------------------------------------------


def verify_views(log: EventLog) -> list[Problem]:
    """Every LangGraph stream's rows against the fold of its frames; the run index too."""
    problems: list[Problem] = []
    folded: dict[int, tuple[str, StreamView]] = {}
    expected_reads: dict[int, _ReadsFold] = {}
    with log.backend.read() as txn:
        names = {
            U64.unpack(k)[0]: v.decode("utf-8", "surrogatepass") for k, v in txn.scan(STREAM_NAMES)
        }
    for sid, name in names.items():
        if parse_stream_key(name) is None:
            continue
        reads = _ReadsFold()
        try:
            view = fold(reads.see(sf.seq, sf.frame) for sf in log.read_stream(name))
        except CorruptFrame as e:
            problems.append(Problem("projection", f"cannot fold: {e}", stream=name))
            continue
        folded[sid] = (name, view)
        expected_reads[sid] = reads
    with log.backend.read() as txn:
        for sid, (name, view) in folded.items():
            parsed = parse_stream_key(name)
            assert parsed is not None
            rows = read_view(txn, sid)
            for part in ("checkpoints", "blobs", "writes"):
                want, got = getattr(view, part), getattr(rows, part)
                if want != got:
                    missing = len(set(want) - set(got))
                    extra = len(set(got) - set(want))
                    problems.append(
                        Problem(
                            "projection",
                            f"lg {part} rows differ from the fold of the stream "
                            f"({missing} missing, {extra} extra, "
                            f"{sum(1 for k in set(want) & set(got) if want[k] != got[k])} changed)",
                            stream=name,
                        )
                    )
            problems += _verify_latest(log, txn, sid, thread_key(*parsed), view, name)
            problems += expected_reads[sid].check(txn, sid, name)
            problems += _verify_keyframes(log, txn, sid, name)
            entry = stream_id(txn, *parsed)
            if (entry == sid) == view.empty:
                problems.append(
                    Problem(
                        "projection",
                        f"lg_threads entry is {'present' if entry else 'absent'} but the stream "
                        f"view is {'empty' if view.empty else 'not empty'}",
                        stream=name,
                    )
                )
        want_runs = {
            run_key(run, sid, cid) for sid, (_, v) in folded.items() for run, cid in v.runs()
        }
        got_runs = {k for k, _ in txn.scan(RUNS)}
        if want_runs != got_runs:
            problems.append(
                Problem(
                    "projection",
                    f"lg_runs index differs from the fold: {len(want_runs - got_runs)} missing, "
                    f"{len(got_runs - want_runs)} extra",
                )
            )
        for tid, ns, sid in stream_ids(txn, None):
            if sid not in folded:
                problems.append(
                    Problem(
                        "projection",
                        f"lg_threads names stream id {sid} for ({tid!r}, {ns!r}), which is not "
                        "a LangGraph stream of this log",
                    )
                )
    return problems


class _ReadsFold:
    """The ``lg_reads`` rows a stream's frames give (folded with its view): per checkpoint its
    row, body and versions, and per channel the seq of the newest frame up to it that stores
    the channel's version, with the blob when it is small enough to be inlined."""

    def __init__(self) -> None:
        self.blobs: dict[tuple[str, bytes], tuple[int, LgBlob | None]] = {}
        self.rows: dict[str, ReadRow] = {}

    def see(self, seq: int, frame: Any) -> tuple[int, Any]:
        if isinstance(frame, LgCheckpoint):
            for b in frame.blobs:
                small = b if len(b.data) <= INLINE_MAX else None
                self.blobs[b.channel, version_key(b.version)] = (seq, small)
            values = []
            for ch, v in frame.versions.items():
                at = self.blobs.get((ch, version_key(v)))
                if at is not None:
                    values.append((ch, *at))
            self.rows[frame.checkpoint_id] = ReadRow(
                checkpoint_row(seq, frame), frame.checkpoint_type, frame.checkpoint,
                dict(frame.versions), tuple(values),
            )  # fmt: skip
        elif isinstance(frame, LgRemove):
            if frame.checkpoint_ids is None:
                self.blobs.clear()
                self.rows.clear()
            else:
                for cid in frame.checkpoint_ids:
                    self.rows.pop(cid, None)
        return seq, frame

    def check(self, txn: ReadTxn, sid: int, name: str) -> list[Problem]:
        """The stream's read rows against the fold: no row of a checkpoint the fold has not,
        and each row equal to the fold's (a row may leave a blob out: it is read from the
        frame the row names; a row may be absent: readers read the frame)."""
        try:
            got = {
                k[8:].decode("utf-8", "surrogatepass"): decode_read_row(raw)
                for k, raw in txn.scan_prefix(READS, U64.pack(sid))
            }
        except CheckpointError:  # a log opened read-only that never had the table
            return []
        # A checkpoint may have no read row (stored before they existed: readers fall back).
        extra = len(set(got) - set(self.rows))
        changed = sum(
            1 for cid in set(got) & set(self.rows) if not _same_read(got[cid], self.rows[cid])
        )
        if extra or changed:
            return [
                Problem(
                    "projection",
                    f"lg_reads rows differ from the fold of the stream ({extra} extra, "
                    f"{changed} changed)",
                    stream=name,
                )
            ]
        return []


def _verify_keyframes(log: EventLog, txn: ReadTxn, sid: int, name: str) -> list[Problem]:
    """A stream's keyframe rows (``lg_latest`` ``f`` rows): each holds the type and bytes of
    the full blob its frame stores for its channel."""
    prefix = keyframe_prefix(sid)
    reader = BlobReader(log, txn, sid, _no_loads, Patches(log.frame_bytes_max))
    bad = 0
    try:
        rows = list(txn.scan_prefix(LATEST, prefix))
    except CheckpointError:  # a log opened read-only that never had the table
        return []
    for key, raw in rows:
        seq = U64.unpack_from(key, len(prefix))[0]
        channel = key[len(prefix) + 8 :].decode("utf-8", "surrogatepass")
        try:
            blob = reader.blob(seq, channel)
        except CheckpointError:
            bad += 1
            continue
        typ, data = decode_keyframe(raw)
        if blob.kind != BLOB_FULL or typ != blob.type or data != blob.data:
            bad += 1
    if bad:
        return [
            Problem(
                "projection",
                f"{bad} lg_latest keyframe rows differ from the full blob their frame stores",
                stream=name,
            )
        ]
    return []


def _same_read(got: ReadRow, want: ReadRow) -> bool:
    """``got`` equals ``want`` but may leave out a blob ``want`` inlines (then it is read
    from the frame the row names)."""
    if (got.row, got.checkpoint_type, got.checkpoint, got.versions) != (
        want.row, want.checkpoint_type, want.checkpoint, want.versions,
    ):  # fmt: skip
        return False
    return len(got.values) == len(want.values) and all(
        (gc, gs) == (wc, ws) and (gb is None or gb == wb)
        for (gc, gs, gb), (wc, ws, wb) in zip(got.values, want.values, strict=True)
    )


def expected_latest(
    log: EventLog, txn: ReadTxn, sid: int, view: StreamView
) -> tuple[LatestRow, LatestWrites] | None:
    """The ``lg_latest`` rows a stream whose view is ``view`` may hold (from its other
    tables and frames), ``None`` when it has no checkpoint."""
    if not view.checkpoints:
        return None
    cid = max(view.checkpoints)
    row = view.checkpoints[cid]
    reader = BlobReader(log, txn, sid, _no_loads, Patches(log.frame_bytes_max), keyframes=False)
    frame = reader.frame(row.seq)
    if not isinstance(frame, LgCheckpoint):
        raise CorruptFrame(f"seq {row.seq} is indexed as a checkpoint", seq=row.seq)
    values = []
    for channel, version in frame.versions.items():
        values.append((channel, reader.chain(channel, version) or ()))
    writes = []
    for (wcid, task, _), w in sorted(view.writes.items()):
        if wcid == cid:
            wf = reader.frame(w.seq)
            writes.append((task, w.task_path, wf.writes[w.pos]))
    latest = LatestRow(
        sid, cid, row, frame.checkpoint_type, frame.checkpoint, dict(frame.versions),
        tuple(values),
    )  # fmt: skip
    return latest, LatestWrites(cid, tuple(writes))


def _verify_links(txn: ReadTxn, sid: int, tkey: bytes, name: str) -> list[Problem]:
    """A stream's ``lg_latest`` data rows are exactly those its link row names."""
    try:
        held = {key[1:] for key, _ in txn.scan_prefix(LATEST, link_prefix(sid))}
        named = set(split_links(txn.get(LATEST, latest_blobs_key(tkey))))
    except CheckpointError:  # a log opened read-only that never had the table
        return []
    if held == named:
        return []
    return [
        Problem(
            "projection",
            f"lg_latest holds {len(held - named)} data rows its link row does not name and "
            f"lacks {len(named - held)} it names",
            stream=name,
        )
    ]


def _verify_latest(
    log: EventLog, txn: ReadTxn, sid: int, tkey: bytes, view: StreamView, name: str
) -> list[Problem]:
    """A stream's ``lg_latest`` rows, when present, against what its other tables say."""
    problems = _verify_links(txn, sid, tkey, name)
    if problems:
        return problems
    got = read_latest(txn, tkey)
    if got is None:
        try:
            stray = txn.get(LATEST, latest_writes_key(tkey))
        except CheckpointError:
            return []
        if stray is None:
            return []
        return [
            Problem("projection", "lg_latest has a writes row but no checkpoint row", stream=name)
        ]
    try:
        want = expected_latest(log, txn, sid, view)
    except CheckpointError as e:
        return [Problem("projection", f"cannot check lg_latest: {e}", stream=name)]
    lr, lw = got
    if want is None or lr != want[0]:
        return [
            Problem(
                "projection",
                "lg_latest row differs from the newest checkpoint of the stream "
                f"(row: {lr.checkpoint_id!r}, newest: {want[0].checkpoint_id if want else None!r})",
                stream=name,
            )
        ]
    if lw is not None and lw.checkpoint_id == lr.checkpoint_id:
        key = operator.itemgetter(0, 1)
        mine = sorted(((t, w.idx, p, w) for t, p, w in lw.writes), key=key)
        theirs = sorted(((t, w.idx, p, w) for t, p, w in want[1].writes), key=key)
        if mine != theirs:
            return [
                Problem(
                    "projection",
                    f"lg_latest writes differ from the write rows of {lr.checkpoint_id!r} "
                    f"({len(mine)} kept, {len(theirs)} stored)",
                    stream=name,
                )
            ]
    return []


# -- the view (eventlog.views.View) ------------------------------------------------------------


class _NoFrames(BlobReader):
    """The blob index of a transaction without the frames (a view applying frames has no log
    to decode them): a chain it would read ends ``keep_latest`` (the rows stay absent)."""

    def __init__(self, txn: ReadTxn, sid: int) -> None:
        self.txn, self.sid, self.loads = txn, sid, _no_loads
        self.patches = Patches(0)
        self._keyframes = {}
        self.keyframes = False
        self.touch = False

    def frame(self, seq: int) -> Any:
        raise CorruptFrame(f"seq {seq}: applying a frame reads no other frame", seq=seq)


class LangGraphView:
    """LangGraph's materialized view: checkpoints, blob and write indexes, threads and runs of
    every ``lg:`` stream, kept by :func:`apply_rows` (the same function the writer runs)."""

    name: Final = "langgraph"
    tables: Final = TABLES

    def claims(self, stream: str, first: Any) -> bool:
        return parse_stream_key(stream) is not None and isinstance(
            first, (LgCheckpoint, LgWrites, LgRemove)
        )

    def apply(
        self, txn: WriteTxn, stream: str, sid: int, seq: int, frame: Any, stored_bytes: int
    ) -> None:
        parsed = parse_stream_key(stream)
        if parsed is None:
            raise CorruptFrame(f"{stream!r} is not a LangGraph stream key", stream=stream)
        tkey = thread_key(*parsed)
        fresh = apply_rows(txn, sid, seq, frame, tkey)
        if isinstance(frame, LgCheckpoint):
            keep_latest(txn, frame, sid, tkey, seq, lambda: _NoFrames(txn, sid), fresh=fresh)
        elif isinstance(frame, LgWrites):
            keep_latest_writes(txn, tkey, frame)

    def rebuild_stream(
        self, txn: WriteTxn, stream: str, sid: int, frames: Iterable[StoredFrame[Any]]
    ) -> None:
        for sf in frames:
            self.apply(txn, stream, sid, sf.seq, sf.frame, sf.stored_bytes)

    def verify(
        self, log: EventLog, progress: Callable[[int, int], None] | None = None
    ) -> list[Problem]:
        return verify_views(log)

    def describe(self, stream: str) -> StreamInfo | None:
        parsed = parse_stream_key(stream)
        if parsed is None:
            return None
        thread, ns = parsed
        return StreamInfo(
            stream, self.name, "langgraph thread", thread if not ns else f"{thread} ns={ns}",
            aliases=(thread,) if not ns else (),
            labels={"thread_id": thread, "checkpoint_ns": ns, "namespace": ns},
        )  # fmt: skip

    def steps(self, log: EventLog, stream: str, *, diffs: bool = False) -> Iterator[Any]:
        return langgraph_steps.steps(log, stream, BlobReader)

    def steps_from(
        self, log: EventLog, stream: str, from_seq: int, to_seq: int | None = None
    ) -> Iterator[Any]:
        """:meth:`steps` from ``from_seq`` (to ``to_seq``), read from the rows at a cost
        independent of the frames before it (langgraph_steps.steps_from)."""
        return langgraph_steps.steps_from(log, stream, from_seq, BlobReader, ROWS, to_seq)


ROWS: Final = langgraph_steps.Rows(TABLES, read_checkpoint_row, write_rows, blob_seq)
"""The row readers :func:`langgraph_steps.steps_from` reads a step at a seq with."""

VIEW: Final = LangGraphView()
