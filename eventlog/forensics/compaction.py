"""Retention by compaction into a new log, and provenance of compacted frames."""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from backends.base import WriteTxn
from backends.dirsync import sync_directory
from eventlog import views
from eventlog.codec import ZERO_CHECKSUM, Compressor, Serializer, seal
from eventlog.errors import (
    CheckpointError,
    CompactionError,
    CorruptFrame,
    SourceDamaged,
)
from eventlog.forensics.common import (
    Progress,
    Records,
)
from eventlog.frames import (
    CHECKPOINT_FRAMES,
    Compacted,
    Event,
    Frame,
    Save,
    Snapshot,
)
from eventlog.layout import LOG, STREAM_IDS, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.log import READ_CHUNK_FRAMES, EventLog
from eventlog.materialized import (
    TABLES,
    Book,
    book_after,
    full_save,
    read_row,
    write_save,
    write_snapshot_mark,
)
from eventlog.walker import (
    frame_kind,
    frame_saved_at,
)
from projections.records import Head, apply_inplace, snapshot

NO_BOOK: Final = Book()  # immutable: a safe default
COMPACT_BATCH_FRAMES: Final = 4096  # frames per write transaction of the compacted log
COMPACT_BATCH_BYTES: Final = 32 << 20


# -- compaction --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """What :func:`compact` keeps of each checkpoint stream (heads are always kept)."""

    mode: str  # all | heads | last_n | since
    last_n: int = 0
    since: float = 0.0

    def __str__(self) -> str:
        if self.mode == "last_n":
            return f"last_n={self.last_n}"
        if self.mode == "since":
            return f"since={self.since!r}"
        return self.mode


def policy(
    keep: str | None = None, last_n: int | None = None, since: float | None = None
) -> Policy:
    """Validate ``compact``'s keyword choice: exactly one of keep, last_n, since (or none)."""
    given = [
        name for name, v in (("keep", keep), ("last_n", last_n), ("since", since)) if v is not None
    ]
    if len(given) > 1:
        raise CompactionError(f"pass one of keep=, last_n= or since=, not {' and '.join(given)}")
    if last_n is not None:
        if isinstance(last_n, bool) or not isinstance(last_n, int) or last_n < 1:
            raise CompactionError(
                f"last_n must be an int >= 1 (saves kept per invocation), got {last_n!r}"
            )
        return Policy("last_n", last_n=last_n)
    if since is not None:
        if isinstance(since, bool) or not isinstance(since, (int, float)) or math.isnan(since):
            raise CompactionError(
                f"since must be a timestamp (seconds since the epoch), got {since!r}"
            )
        return Policy("since", since=float(since))
    if keep is None or keep == "all":
        return Policy("all")
    if keep == "heads":
        return Policy("heads")
    raise CompactionError(
        f'keep must be "all" or "heads" (or pass last_n=N or since=TIMESTAMP), got {keep!r}'
    )


class CompactReport(msgspec.Struct):
    source: str
    dest: str
    policy: str
    streams_in: int = 0
    streams_out: int = 0
    frames_in: int = 0
    frames_out: int = 0
    source_bytes: int = 0
    dest_bytes: int = 0
    seconds: float = 0.0


@dataclass
class _Src:
    """Compaction state of one source stream."""

    name: str
    last: int  # the stream's last seq in the source
    record_last: int = 0  # the seq of its head row (its last save): events may follow it
    start: int = 0  # the first seq kept (0: not decided yet)
    events: bool = False  # copied whole: application events, or a stream of another view
    view: views.View | None = None  # the view (not the checkpoint one) keeping its rows
    dropped: bool = False
    tail: tuple[int, bytes] = (0, ZERO_CHECKSUM)  # the source chain so far
    last_snapshot: int = 1  # newest source snapshot seq seen: where folds start
    dest_sid: int = 0
    dest_seq: int = 0
    dest_prev: bytes = ZERO_CHECKSUM
    book: Book = NO_BOOK  # the dest head row's snapshot bookkeeping, as the writer keeps it
    completed: int = 0  # a paged snapshot the frame being copied completes (its first seq)


@dataclass
class _Out:
    """A frame for the compacted log, sealed before its write transaction runs."""

    src: _Src
    envelope: bytes
    seq: int
    new_stream: bool
    snapshot: bool
    head: Head | None = None  # set on a stream's last frame: its materialized rows
    frame: Any = None  # the frame, when ``src.view`` applies it
    book: Book = NO_BOOK  # the head row's bookkeeping after it
    completed: int = 0  # the first seq of a paged snapshot it completes (0: none)


class _Compactor:
    def __init__(self, source: Records, dest: EventLog, pol: Policy) -> None:
        self.src = source.log
        self.dest = dest
        self.policy = pol
        self.chain_key = self.src.chain_key
        self.serializer: Serializer[Any] = Serializer(Frame)
        self.compressor = Compressor(threshold_bytes=self.dest.compress_threshold_bytes)
        self.streams: dict[int, _Src] = {}
        self.next_sid = 1
        self.next_gseq = 1
        self.batch: list[_Out] = []
        self.batch_bytes = 0
        self.now = time.time()
        self.report_frames = 0

    def plan(self) -> int:
        """Each stream's length, and the global seq the copy stops at, in one snapshot."""
        with self.src.backend.read() as txn:
            last = txn.last_key(LOG)
            for k, v in txn.scan(STREAM_NAMES):
                sid = U64.unpack(k)[0]
                n = 0
                for key, _ in txn.scan_prefix(STREAMS, k, reverse=True, limit=1):
                    n = U64X2.unpack(key)[1]
                row = read_row(txn, sid)
                self.streams[sid] = _Src(
                    v.decode("utf-8", "surrogatepass"), n, n if row is None else row.seq
                )
        return U64.unpack(last)[0] if last is not None else 0

    def run(self, progress: Progress | None) -> int:
        end = self.plan()
        after = 0
        while after < end:
            with self.src.backend.read() as txn:
                chunk = list(
                    txn.scan(LOG, U64.pack(after + 1), U64.pack(end + 1), limit=READ_CHUNK_FRAMES)
                )
            if not chunk:
                break
            for gkey, data in chunk:
                self.frame(U64.unpack(gkey)[0], data)
            after = U64.unpack(chunk[-1][0])[0]
            if progress is not None:
                progress(after, end)
        self.flush()
        return end

    def frame(self, gseq: int, data: bytes) -> None:
        try:
            env, frame = self.src.decode_envelope(data)
        except CheckpointError as e:
            raise SourceDamaged(
                f"the source log is damaged at log #{gseq} ({e}); compaction copies only an "
                "intact log: run `ckptlog verify` on it"
            ) from e
        s = self.streams.get(env.stream_id)
        if s is None or env.seq != s.tail[0] + 1 or env.prev != s.tail[1]:
            where = f"stream {s.name!r}" if s is not None else f"stream id {env.stream_id}"
            raise SourceDamaged(
                f"the source log is damaged at log #{gseq}: {where} seq {env.seq} does not "
                "follow the frame before it; run `ckptlog verify` on it"
            )
        s.tail = (env.seq, env.checksum)
        seq = env.seq
        if seq == 1:
            view = views.claiming(s.name, frame)
            if view is None and not isinstance(frame, Event):
                raise CompactionError(
                    f"stream {s.name!r} holds {frame_kind(frame)} frames, which no registered "
                    "view (eventlog.views.REGISTRY) claims, so compaction cannot rebuild their "
                    "rows; register the view, or use its own retention for this log"
                )
            if view is not None and view is not views.CHECKPOINTS:
                self.dest.backend.add_tables(view.tables, create=True)
                s.view = view
            s.events = view is not views.CHECKPOINTS
        if isinstance(frame, Snapshot):
            s.last_snapshot = seq
        elif isinstance(frame, Save) and frame.page is not None and frame.page.last:
            s.last_snapshot = max(s.last_snapshot, seq - frame.page.back)  # a paged one
        if s.dropped or seq > s.last:
            return
        if s.events:
            self.copy(s, env.payload, env.flags, env.dict_id, snapshot=False, frame=frame)
            return
        if s.start <= 0:
            if not self.starts_here(s, seq, frame):
                return
            if not isinstance(frame, (Save, Snapshot)):
                if seq == s.record_last:
                    s.dropped = True  # nothing left but a delete: the invocation is gone
                else:
                    s.start = -1  # keep from the next frame
                return
            s.start = seq
            head = self.fold(s, seq)
            if head is None:
                raise SourceDamaged(f"stream {s.name!r} has no record at seq {seq} to keep")
            marked = msgspec.structs.replace(
                snapshot(head),
                compacted=Compacted(seq, env.checksum, env.stream_id, self.now),
            )
            raw = self.serializer.encode(marked)
            payload, flags = self.compressor.compress(raw)
            self.copy(
                s, payload, flags, 0, snapshot=True, head=head if seq == s.record_last else None
            )
            return
        last = self.fold(s, seq) if seq == s.record_last else None
        self.copy(
            s, env.payload, env.flags, env.dict_id, snapshot=isinstance(frame, Snapshot),
            head=last, frame=frame,
        )  # fmt: skip

    def starts_here(self, s: _Src, seq: int, frame: Any) -> bool:
        if s.start == -1 or seq == s.record_last:
            return True
        mode = self.policy.mode
        if mode == "all":
            return True
        if mode == "heads":
            return False
        if mode == "last_n":
            return seq >= s.record_last - self.policy.last_n + 1
        return frame_saved_at(frame) >= self.policy.since

    def fold(self, s: _Src, seq: int) -> Head | None:
        """The source record at ``seq`` (``None``: deleted), folded from the newest snapshot
        at or before it."""
        head: Head | None = None
        for sf in self.src.read_stream(s.name, s.last_snapshot, seq):
            if isinstance(sf.frame, CHECKPOINT_FRAMES):  # events beside the saves: skipped
                head = apply_inplace(head, sf.frame, sf.seq, s.name)
        return head

    def copy(
        self,
        s: _Src,
        payload: bytes,
        flags: int,
        dict_id: int,
        *,
        snapshot: bool,
        head: Head | None = None,
        frame: Any = None,
    ) -> None:
        new_stream = s.dest_sid == 0
        if new_stream:
            s.dest_sid = self.next_sid
            self.next_sid += 1
        s.dest_seq += 1
        envelope, checksum = seal(
            s.dest_sid, s.dest_seq, s.dest_prev, payload, flags=flags, dict_id=dict_id,
            chain_key=self.chain_key,
        )  # fmt: skip
        if len(envelope) > self.dest.frame_bytes_max:
            raise CompactionError(
                f"stream {s.name!r}: the compacted frame is {len(envelope)} bytes, above "
                f"frame_bytes_max={self.dest.frame_bytes_max}"
            )
        s.dest_prev = checksum
        s.completed = 0
        if snapshot:
            s.book = Book(s.dest_seq, 0, len(envelope))
        elif frame is None or isinstance(frame, CHECKPOINT_FRAMES):
            # as the writer counts: checkpoint frames only
            s.book, s.completed = book_after(s.book, frame, s.dest_seq, len(envelope))
        if head is not None:
            head.seq = s.dest_seq
        self.batch.append(
            _Out(
                s, envelope, s.dest_seq, new_stream, snapshot, head, frame if s.view else None,
                s.book, s.completed,
            )
        )  # fmt: skip
        self.batch_bytes += len(envelope)
        if len(self.batch) >= COMPACT_BATCH_FRAMES or self.batch_bytes >= COMPACT_BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        batch, first = self.batch, self.next_gseq
        rows = [(o.src.dest_sid, o.head, o.book) for o in batch if o.head is not None]

        def write(txn: WriteTxn) -> None:
            for gseq, o in enumerate(batch, first):
                sid = U64.pack(o.src.dest_sid)
                if o.new_stream:
                    key = o.src.name.encode("utf-8", "surrogatepass")
                    txn.put(STREAM_IDS, key, sid)
                    txn.put(STREAM_NAMES, sid, key)
                txn.append(LOG, U64.pack(gseq), o.envelope)
                txn.put(STREAMS, U64X2.pack(o.src.dest_sid, o.seq), U64.pack(gseq))
                if o.snapshot and not o.src.events:
                    write_snapshot_mark(txn, o.src.dest_sid, o.seq)
                if o.completed and not o.src.events:
                    write_snapshot_mark(txn, o.src.dest_sid, o.completed, o.seq)
                if o.src.view is not None:
                    o.src.view.apply(
                        txn, o.src.name, o.src.dest_sid, o.seq, o.frame, len(o.envelope)
                    )
            for dest_sid, head, book in rows:
                assert head is not None
                write_save(txn, dest_sid, None, full_save(head), head, book=book)

        self.dest.backend.run_write(write)
        self.next_gseq += len(batch)
        self.report_frames += len(batch)
        self.batch, self.batch_bytes = [], 0


def check_dest(dest: str | os.PathLike[str], source_location: str) -> Path:
    path = Path(dest)
    if os.path.realpath(path) == os.path.realpath(source_location):
        raise CompactionError("DEST is the source log; compact writes a new log elsewhere")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise CompactionError(
            f"DEST {str(path)!r} exists and is not empty; compact writes a new log: pass a "
            "path that does not exist yet (or an empty directory)"
        )
    return path


def compact(
    cl: Records,
    dest: str | os.PathLike[str],
    *,
    keep: str | None = None,
    last_n: int | None = None,
    since: float | None = None,
    progress: Progress | None = None,
) -> CompactReport:
    """Copy the log into a new log at ``dest``, keeping of each invocation's history:

    - ``keep="all"`` (the default): everything;
    - ``keep="heads"``: only the current record;
    - ``last_n=N``: the last N saves (a delete counts as one);
    - ``since=T``: the saves stamped at or after T, and at least the current record.

    Deleted invocations with nothing kept are dropped; application-event streams are copied
    whole. Each kept invocation starts with a snapshot of its first kept save that names the
    original seq and checksum it stands for; the saves after it keep their stored bytes.
    Heads are re-materialized, so ``load``/``list``/``verify`` work on the new log at once.
    The source is only read; DEST appears whole (built under a hidden name, then renamed),
    and its name is durable (its directory fsynced) before this returns.
    """
    pol = policy(keep, last_n, since)
    path = check_dest(dest, cl.log.backend.location)
    # Built under a hidden sibling name and renamed into place whole, so a compaction that
    # is killed leaves DEST as it was (absent or empty) and running it again just works.
    building = path.parent / f".{path.name}.compacting-{os.getpid()}-{time.monotonic_ns()}"
    started = time.perf_counter()
    report = CompactReport(cl.log.backend.location, str(path), str(pol))
    try:
        out = EventLog.open(
            building,
            durability="process",
            extra_tables=TABLES,
            chain_key=cl.log.chain_key,
            compress_threshold_bytes=cl.log.compress_threshold_bytes,
            frame_bytes_max=cl.log.frame_bytes_max,
        )
        try:
            work = _Compactor(cl, out, pol)
            report.frames_in = work.run(progress)
            out.backend.sync()
            report.streams_in = len(work.streams)
            report.streams_out = work.next_sid - 1
            report.frames_out = work.report_frames
            report.dest_bytes = out.backend.size_bytes()
        finally:
            out.close()
        check_dest(dest, cl.log.backend.location)  # still absent or empty
        os.replace(building, path)  # (an empty directory is replaced)
        sync_directory(path.parent)  # DEST's name durable before compact returns
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    report.source_bytes = cl.log.backend.size_bytes()
    report.seconds = time.perf_counter() - started
    return report


class Provenance(msgspec.Struct, frozen=True):
    """A frame of a compacted stream and the original frame it stands for."""

    seq: int
    original_seq: int
    original_checksum: bytes


def provenance(cl: Records, invocation_id: str) -> list[Provenance]:
    """For a compacted stream, the original seq and checksum of each frame, recomputed from
    the stored payloads and the first snapshot's :class:`Compacted`; ``[]`` for a stream
    that was not compacted. Compare them with the original log (or a checksum published
    from it) to prove the kept history is the original's, byte for byte."""
    out: list[Provenance] = []
    origin: Compacted | None = None
    prev = b""
    with cl.log.backend.read() as txn:
        sid = cl.log.stream_id(txn, invocation_id)
        if sid is None:
            return out
        for key, gkey in txn.scan_prefix(STREAMS, U64.pack(sid)):
            seq = U64X2.unpack(key)[1]
            data = txn.get(LOG, gkey)
            if data is None:
                raise CorruptFrame(f"stream {invocation_id!r} seq {seq} is missing; run verify")
            env, frame = cl.log.decode_envelope(data)
            if seq == 1:
                origin = frame.compacted if isinstance(frame, Snapshot) else None
                if origin is None:
                    return out
                prev = origin.checksum
                out.append(Provenance(1, origin.seq, origin.checksum))
                continue
            assert origin is not None
            original_seq = origin.seq + seq - 1
            _, prev = seal(
                origin.stream_id, original_seq, prev, env.payload, flags=env.flags,
                dict_id=env.dict_id, chain_key=cl.log.chain_key,
            )  # fmt: skip
            out.append(Provenance(seq, original_seq, prev))
    return out
