"""``verify()``: walk the whole log and its index, report every problem with its location.

Invariants checked:
- every envelope parses, has a known version and flags, and its checksum matches its bytes;
- per stream, seqs run 1, 2, 3, ... and each ``prev`` equals the previous frame's checksum;
- every index entry points at a frame that exists and carries that (stream, seq), and every
  frame is indexed; stream names and ids map one to one;
- compressed payloads decompress.
It only reads: it never repairs (a repair would hide evidence).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from backends.base import Backend, ReadTxn
from eventlog.codec import ZERO_CHECKSUM, Compressor, open_envelope, read_header
from eventlog.errors import CheckpointError, CorruptFrame, UnsupportedFormat
from eventlog.layout import LOG, STREAM_IDS, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.reports import Problem, VerifyReport

PROGRESS_EVERY_FRAMES = 10_000


class Verifiable(Protocol):
    """What the walk needs of a log (an :class:`~eventlog.log.EventLog` has it)."""

    @property
    def backend(self) -> Backend: ...

    @property
    def chain_key(self) -> bytes: ...

    @property
    def compressor(self) -> Compressor: ...

    @property
    def frame_bytes_max(self) -> int: ...


class _Walk:
    def __init__(self, log: Verifiable, txn: ReadTxn, report: VerifyReport) -> None:
        self.log = log
        self.txn = txn
        self.report = report
        self.names = {U64.unpack(k)[0]: v for k, v in txn.scan(STREAM_NAMES)}
        self.located: dict[int, tuple[int, int]] = {}  # global seq -> (stream id, seq)
        self.unparsed: set[int] = set()  # global seqs whose header could not be read
        self.indexed_at = {U64.unpack(g)[0]: U64X2.unpack(k) for k, g in txn.scan(STREAMS)}

    def name(self, sid: int) -> str:
        raw = self.names.get(sid)
        return raw.decode("utf-8", "replace") if raw is not None else f"<id {sid}>"

    def add(self, kind: str, detail: str, sid: int | None, seq: int | None, gseq: int) -> None:
        stream = self.name(sid) if sid is not None else None
        self.report.problems.append(Problem(kind, detail, stream, seq, gseq))

    def names_match(self) -> None:
        ids = {k: U64.unpack(v)[0] for k, v in self.txn.scan(STREAM_IDS)}
        for key, sid in ids.items():
            if self.names.get(sid) != key:
                self.report.problems.append(
                    Problem(
                        "names",
                        f"stream id {sid} has no matching name entry",
                        stream=key.decode("utf-8", "replace"),
                    )
                )
        self.report.streams = len(ids)

    def frames(self, total: int, progress: Callable[[int, int], None] | None) -> None:
        tails: dict[int, tuple[int, bytes | None]] = {}  # None: checksum unknown (damaged)
        chain_key = self.log.chain_key
        compressor = self.log.compressor
        for n, (gkey, data) in enumerate(self.txn.scan(LOG), 1):
            gseq = U64.unpack(gkey)[0]
            self.report.frames += 1
            if progress is not None and n % PROGRESS_EVERY_FRAMES == 0:
                progress(n, total)
            try:
                _, _, _, sid, seq, prev, stored_sum = read_header(data)
            except CorruptFrame as e:
                sid_h, seq_h = self.indexed_at.get(gseq, (None, None))
                self.add("header", str(e), sid_h, seq_h, gseq)
                if sid_h is not None and seq_h is not None:
                    tails[sid_h] = (seq_h, None)  # so its successor is not reported as a gap
                self.unparsed.add(gseq)
                continue
            self.located[gseq] = (sid, seq)
            last_seq, last_sum = tails.get(sid, (0, ZERO_CHECKSUM))
            tails[sid] = (seq, stored_sum)
            try:
                env = open_envelope(data, chain_key=chain_key)
            except (CorruptFrame, UnsupportedFormat) as e:
                self.add("checksum", str(e), sid, seq, gseq)
                continue
            if seq > last_seq + 1:
                missing = f"{last_seq + 1}..{seq - 1}" if seq > last_seq + 2 else str(last_seq + 1)
                self.add(
                    "gap",
                    f"expected seq {last_seq + 1}, found {seq}: frame(s) {missing} missing",
                    sid,
                    seq,
                    gseq,
                )
            elif seq <= last_seq:
                self.add(
                    "order",
                    f"expected seq {last_seq + 1}, found {seq}: frames out of order or duplicated",
                    sid,
                    seq,
                    gseq,
                )
            elif last_sum is not None and prev != last_sum:
                self.add(
                    "chain",
                    "prev does not match the checksum of the previous frame: "
                    "a frame before it was replaced or edited",
                    sid,
                    seq,
                    gseq,
                )
            try:
                compressor.decompress(env.payload, env.flags, max_bytes=self.log.frame_bytes_max)
            except CheckpointError as e:
                self.add("decode", str(e), sid, seq, gseq)

    def index(self) -> None:
        indexed: set[int] = set()
        for key, gkey in self.txn.scan(STREAMS):
            sid, seq = U64X2.unpack(key)
            gseq = U64.unpack(gkey)[0]
            indexed.add(gseq)
            found = self.located.get(gseq)
            if found is None and gseq in self.unparsed:
                continue  # reported as a damaged header already
            if found is None:
                self.add(
                    "index",
                    f"frame missing: the index points at log #{gseq}, which is "
                    "not in the log (removed?)",
                    sid,
                    seq,
                    gseq,
                )
            elif found != (sid, seq):
                self.add(
                    "index",
                    f"log #{gseq} holds {self.name(found[0])!r} seq {found[1]}, "
                    "not this frame (swapped or moved frames)",
                    sid,
                    seq,
                    gseq,
                )
        for gseq, (sid, seq) in self.located.items():
            if gseq not in indexed:
                self.add(
                    "orphan", "frame is in the log but not in the stream index", sid, seq, gseq
                )


def verify_log(log: Verifiable, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    report = VerifyReport()
    for kind, detail in log.backend.storage_problems():
        report.problems.append(Problem(kind, detail))
    with log.backend.read() as txn:
        total = txn.count(LOG)
        walk = _Walk(log, txn, report)
        walk.names_match()
        walk.frames(total, progress)
        walk.index()
    if progress is not None:
        progress(report.frames, total)
    return report
