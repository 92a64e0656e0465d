"""Damage a closed log through raw LMDB, then check that ``verify()`` and reads locate it.

Each case builds the same log (three streams, interleaved, some frames compressed), closes it,
changes the stored bytes with ``lmdb`` directly (bypassing every check of the write path), and
reopens it. The damaged stream is always ``beta``; the case must then

- make ``verify()`` report problems naming ``beta`` and the damaged seq, with the right kind,
  and none naming the untouched stream ``alpha``;
- make reading ``beta`` raise :class:`CorruptFrame` (never return a wrong frame quietly);
- leave ``alpha`` readable, frame for frame as it was written.

LMDB forbids two handles on one environment in one process, so the EventLog is closed before
the raw environment opens, and the raw one closed before the EventLog reopens.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb
import pytest

from backends import lmdb_fold
from backends.lmdb_fold import Folded
from eventlog.codec import HEADER_BYTES
from eventlog.errors import CorruptFrame
from eventlog.frames import Event
from eventlog.log import EventLog, Problem, VerifyReport

U64 = struct.Struct(">Q")
U64X2 = struct.Struct(">QQ")

STREAMS = ("alpha", "beta", "gamma")
FRAMES_PER_STREAM = 6
DAMAGED = "beta"
UNTOUCHED = "alpha"
SEED = 20240611  # the built log's contents; fixed so every case damages the same bytes


@dataclass(frozen=True)
class Written:
    """What the log held before the damage: per stream, ``(seq, global seq, checksum, frame)``."""

    frames: dict[str, list[tuple[int, int, bytes, Any]]]

    def __repr__(self) -> str:  # pytest prints fixtures on failure; the frames are long
        return f"Written({ {s: len(f) for s, f in self.frames.items()} })"


def build_log(path: Path) -> Written:
    rng = random.Random(SEED)
    frames: dict[str, list[tuple[int, int, bytes, Any]]] = {s: [] for s in STREAMS}
    with EventLog.open(path) as log:
        for i in range(FRAMES_PER_STREAM):
            for stream in STREAMS:
                # Every third frame is large and compressible, so damaged compressed payloads
                # are covered too.
                blob = "ab" * 600 if i % 3 == 2 else rng.randbytes(8).hex()
                frame = Event(name=f"{stream}-{i + 1}", data={"i": i, "blob": blob})
                done = log.append(stream, frame)
                assert done is not None
                frames[stream].append((done.seq, done.global_seq, done.checksum, frame))
        assert log.verify().ok
    return Written(frames)


class Raw:
    """Raw access to the log's tables inside one LMDB write transaction."""

    def __init__(self, env: Any, txn: Any) -> None:
        self.txn = txn
        self.db = {
            name: env.open_db(name.encode(), txn=txn, create=False)
            for name in ("log", "streams", "stream_ids", "stream_names", "meta")
        }
        # A log keeping its stream index in the fold (backends/lmdb_fold.py): its rows there.
        self.stored = bytes  # (the stored key of an index key: itself, unfolded)
        fold = lmdb_fold.parse([bytes(k).decode() for k, _ in txn.cursor()])
        if fold is not None:
            rows = env.open_db(fold[0].encode(), txn=txn, create=False)
            index = Folded(rows, "streams", fold[1].index("streams"), env.max_key_size() - 1)
            self.db["streams"], self.stored = rows, index.key

    def stream_id(self, stream: str) -> int:
        raw = self.txn.get(stream.encode(), db=self.db["stream_ids"])
        assert raw is not None, stream
        return int(U64.unpack(raw)[0])

    def index_key(self, stream: str, seq: int) -> bytes:
        return U64X2.pack(self.stream_id(stream), seq)

    def gkey(self, stream: str, seq: int) -> bytes:
        gkey = self.txn.get(self.stored(self.index_key(stream, seq)), db=self.db["streams"])
        assert gkey is not None, (stream, seq)
        return bytes(gkey)

    def envelope(self, stream: str, seq: int) -> bytes:
        data = self.txn.get(self.gkey(stream, seq), db=self.db["log"])
        assert data is not None, (stream, seq)
        return bytes(data)

    def put_envelope(self, stream: str, seq: int, data: bytes) -> None:
        self.txn.put(self.gkey(stream, seq), data, db=self.db["log"])

    def delete_envelope(self, stream: str, seq: int) -> None:
        assert self.txn.delete(self.gkey(stream, seq), db=self.db["log"])

    def delete_index(self, stream: str, seq: int) -> None:
        key = self.stored(self.index_key(stream, seq))
        assert self.txn.delete(key, db=self.db["streams"])


def damage(path: Path, change: Callable[[Raw], None]) -> None:
    env = lmdb.open(str(path), max_dbs=64)
    try:
        with env.begin(write=True) as txn:
            change(Raw(env, txn))
    finally:
        env.close()


def flip(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1 :]


def naming(report: VerifyReport, stream: str, seq: int) -> list[Problem]:
    return [p for p in report.problems if p.stream == stream and p.seq == seq]


def check_untouched_stream_reads(log: EventLog, written: Written) -> None:
    got = [(sf.seq, sf.global_seq, sf.checksum, sf.frame) for sf in log.read_stream(UNTOUCHED)]
    assert got == written.frames[UNTOUCHED]


def reopen_and_verify(path: Path, written: Written) -> tuple[EventLog, VerifyReport]:
    log = EventLog.open(path)
    report = log.verify()
    assert not report.ok, "verify() found nothing wrong with a damaged log"
    assert report.frames >= len(STREAMS) * FRAMES_PER_STREAM - 1
    assert not [p for p in report.problems if p.stream == UNTOUCHED], str(report)
    check_untouched_stream_reads(log, written)
    return log, report


@pytest.fixture
def written(log_path: Path) -> Written:
    return build_log(log_path)


# -- payload and header bytes ------------------------------------------------------------------


@pytest.mark.parametrize("seq", [1, 3, 6], ids=lambda s: f"seq={s}")
def test_flipped_payload_byte(log_path: Path, written: Written, seq: int) -> None:
    damage(
        log_path,
        lambda raw: raw.put_envelope(
            DAMAGED, seq, flip(raw.envelope(DAMAGED, seq), HEADER_BYTES + 1)
        ),
    )
    log, report = reopen_and_verify(log_path, written)
    with log:
        assert [p.kind for p in naming(report, DAMAGED, seq)] == ["checksum"], str(report)
        with pytest.raises(CorruptFrame, match=r"stream 'beta', .*checksum mismatch") as exc:
            list(log.read_stream(DAMAGED))
        assert exc.value.stream == DAMAGED
        # Frames before the damaged one are still readable one by one.
        for s in range(1, seq):
            assert log.read_frame(DAMAGED, s) is not None


def test_read_error_names_the_seq(log_path: Path, written: Written) -> None:
    """The read-path error carries the damaged seq, not only the stream (STYLE §7: say where)."""
    damage(
        log_path,
        lambda raw: raw.put_envelope(DAMAGED, 3, flip(raw.envelope(DAMAGED, 3), HEADER_BYTES)),
    )
    with EventLog.open(log_path) as log, pytest.raises(CorruptFrame) as exc:
        list(log.read_stream(DAMAGED))
    assert (exc.value.stream, exc.value.seq) == (DAMAGED, 3)


# offset in the envelope -> the kinds verify() must report for (beta, 3)
HEADER_FIELDS = {
    "version": (0, {"checksum"}),
    "flags": (1, {"checksum"}),
    "dict_id": (3, {"checksum"}),
    # A changed stream id or seq makes the frame claim another place: the checksum fails
    # under the claimed name and the index no longer matches under the real one.
    "stream_id": (11, {"index"}),
    "seq": (19, {"index"}),
    "prev": (25, {"checksum"}),
    "checksum": (40, {"checksum"}),
}


@pytest.mark.parametrize("field", list(HEADER_FIELDS))
def test_flipped_header_byte(log_path: Path, written: Written, field: str) -> None:
    offset, kinds = HEADER_FIELDS[field]
    damage(
        log_path,
        lambda raw: raw.put_envelope(DAMAGED, 3, flip(raw.envelope(DAMAGED, 3), offset)),
    )
    log, report = reopen_and_verify(log_path, written)
    with log:
        assert kinds <= {p.kind for p in naming(report, DAMAGED, 3)}, str(report)
        with pytest.raises(CorruptFrame) as exc:
            list(log.read_stream(DAMAGED))
        assert exc.value.stream == DAMAGED


# -- removed, swapped and truncated frames -----------------------------------------------------


def test_frame_removed_from_log(log_path: Path, written: Written) -> None:
    damage(log_path, lambda raw: raw.delete_envelope(DAMAGED, 3))
    log, report = reopen_and_verify(log_path, written)
    with log:
        index = naming(report, DAMAGED, 3)
        assert [p.kind for p in index] == ["index"], str(report)
        assert f"log #{index[0].global_seq}" in index[0].detail
        # Its successor's seq no longer follows the predecessor's.
        assert "gap" in {p.kind for p in naming(report, DAMAGED, 4)}, str(report)
        with pytest.raises(CorruptFrame, match=r"stream 'beta' seq 3: .*missing") as exc:
            list(log.read_stream(DAMAGED))
        assert (exc.value.stream, exc.value.seq) == (DAMAGED, 3)


def test_frame_and_index_entry_removed(log_path: Path, written: Written) -> None:
    """No index entry points at the hole any more: only the seq gap (and chain) can tell."""

    def remove(raw: Raw) -> None:
        raw.delete_envelope(DAMAGED, 3)
        raw.delete_index(DAMAGED, 3)

    damage(log_path, remove)
    log, report = reopen_and_verify(log_path, written)
    with log:
        gap = [p for p in naming(report, DAMAGED, 4) if p.kind == "gap"]
        assert gap, str(report)
        assert "expected seq 3, found 4" in gap[0].detail
        # A reader must not be handed seqs 1, 2, 4, 5, 6 as if nothing were missing.
        with pytest.raises(CorruptFrame, match=r"stream 'beta'"):
            list(log.read_stream(DAMAGED))


def test_frames_of_one_stream_swapped(log_path: Path, written: Written) -> None:
    def swap(raw: Raw) -> None:
        three, four = raw.envelope(DAMAGED, 3), raw.envelope(DAMAGED, 4)
        raw.put_envelope(DAMAGED, 3, four)
        raw.put_envelope(DAMAGED, 4, three)

    damage(log_path, swap)
    log, report = reopen_and_verify(log_path, written)
    with log:
        for seq in (3, 4):
            assert "index" in {p.kind for p in naming(report, DAMAGED, seq)}, str(report)
        assert {"gap", "order"} <= {p.kind for p in report.problems}, str(report)
        # Each envelope is intact (its checksum holds); only its place is wrong. A read must
        # check the header against the key it was found under, not return seq 4 as seq 3.
        with pytest.raises(CorruptFrame, match=r"stream 'beta'"):
            list(log.read_stream(DAMAGED))


def test_frames_of_two_streams_swapped(log_path: Path, written: Written) -> None:
    def swap(raw: Raw) -> None:
        beta, gamma = raw.envelope(DAMAGED, 3), raw.envelope("gamma", 3)
        raw.put_envelope(DAMAGED, 3, gamma)
        raw.put_envelope("gamma", 3, beta)

    damage(log_path, swap)
    log, report = reopen_and_verify(log_path, written)
    with log:
        for stream in (DAMAGED, "gamma"):
            index = [p for p in naming(report, stream, 3) if p.kind == "index"]
            assert index, str(report)
            assert "swapped or moved" in index[0].detail
        # Reading beta must not return gamma's frame under beta's name.
        with pytest.raises(CorruptFrame, match=r"stream 'beta'"):
            list(log.read_stream(DAMAGED))
        with pytest.raises(CorruptFrame, match=r"stream 'gamma'"):
            list(log.read_stream("gamma"))


# keep this many bytes of the envelope -> kinds verify() must report for (beta, 3)
TRUNCATIONS = {
    "payload": (lambda n: HEADER_BYTES + (n - HEADER_BYTES) // 2, {"checksum"}),
    # A cut header is located through the index: the problem names stream and seq.
    "header": (lambda n: HEADER_BYTES // 2, {"header"}),
    "empty": (lambda n: 0, {"header"}),
}


@pytest.mark.parametrize("cut", list(TRUNCATIONS))
def test_truncated_envelope(log_path: Path, written: Written, cut: str) -> None:
    keep, kinds = TRUNCATIONS[cut]

    def truncate(raw: Raw) -> None:
        data = raw.envelope(DAMAGED, 3)
        raw.put_envelope(DAMAGED, 3, data[: keep(len(data))])

    damage(log_path, truncate)
    log, report = reopen_and_verify(log_path, written)
    with log:
        assert kinds <= {p.kind for p in naming(report, DAMAGED, 3)}, str(report)
        with pytest.raises(CorruptFrame, match=r"stream 'beta'"):
            list(log.read_stream(DAMAGED))


def test_undamaged_log_verifies(log_path: Path, written: Written) -> None:
    """The baseline every case above departs from; also proves ``damage`` itself is harmless."""
    damage(log_path, lambda raw: raw.stream_id(DAMAGED))
    with EventLog.open(log_path) as log:
        report = log.verify()
        assert report.ok, str(report)
        assert (report.frames, report.streams) == (len(STREAMS) * FRAMES_PER_STREAM, 3)
        for stream in STREAMS:
            got = [(f.seq, f.global_seq, f.checksum, f.frame) for f in log.read_stream(stream)]
            assert got == written.frames[stream]
