"""The write-ahead segment of an LMDB log: one device flush per durable commit (issue 28).

A durable (``"fsync"``) commit appends its write transaction's puts and deletes as one redo
record to ``wal.ckptlog`` beside ``data.mdb`` and makes it durable with one ``fdatasync``; the
LMDB transaction is then committed without any sync. Every so often (the segment is full, a
transaction is too large for it, a process writes for the first time, a log closes) a
*checkpoint* commits with LMDB's own sync and records, in the segment's header, the synced
transaction id and a copy of the data file's two meta pages; the record area is then reused.

Layout (little-endian): two header slots at 0 and 2048 (each: magic, version, generation,
checkpoint txn id, page size, meta-copy offset, CRC32 of the slot); the meta copies of slot
``i`` at ``META_COPY + i * 2 * page size``; records from ``RECORDS``: a 32-byte header (magic,
generation, txn id, body length, body CRC32, header CRC32) then the body (msgpack list of
``[table, key, value]``, ``value`` None for a delete). The slot with the larger valid generation
is current; a record belongs to the log only if it carries the current generation, its txn id
is the previous one's plus one (the checkpoint's for the first) and both CRCs hold.

Invariants that make a commit without LMDB's sync safe:
- A process commits without sync only while it holds a *pin* (an open read transaction) whose
  snapshot is at or before the segment's checkpoint. LMDB never reuses a page freed after the
  oldest reader's snapshot, so no page of the checkpoint's snapshot is overwritten while any
  unsynced commit is made: after a power cut that snapshot is whole on disk, whatever happened
  to the pages and meta pages written since.
- A record is appended (and fdatasynced) before its transaction commits, and only when its txn
  id directly follows the last record's (or the checkpoint's): otherwise (another process
  committed without a record, or the pin is too new) the commit is a checkpoint. So the records
  past the checkpoint are exactly the transactions committed since it, in order.
- Recovery runs in the first process to open the log (no other process holds the segment's
  shared ``flock``): when records of the current generation follow the checkpoint, it writes
  the saved meta pages back (the checkpoint's snapshot is what LMDB then opens), re-applies the
  records in order, stopping at the first torn or mismatched one, and checkpoints. A process
  kill leaves the page cache intact and recovery then only re-applies what is already there.
- Any page written since the checkpoint may reach the disk at any moment (the kernel's own
  write-out, or the early write-out started every ``WRITEBACK_EVERY`` records): none of them is
  a page of the checkpoint's snapshot (the pin), and when records follow the checkpoint,
  recovery puts its saved meta pages back. The early write-out never writes a meta page, so
  it adds no case where a meta page is on disk before the pages it points to.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import struct
import sys
import zlib
from typing import Any

import msgspec

from backends.dirsync import sync_directory
from eventlog.errors import StorageError

SEGMENT_FILE = "wal.ckptlog"
SEGMENT_BYTES = 512 << 10  # preallocated (zero-filled, synced) at creation; records recycle it
# Records between checkpoints, and the data file's growth since one: both bound the pages the
# pin keeps from reuse. A checkpoint costs two flushes and writes every page committed since the
# last one (the pin keeps LMDB from rewriting them in the page cache): 16 records / 512 KiB made
# a 4 KiB save 1.10-1.12x a SQLite WAL FULL commit, 64 / 2 MiB 1.02x (interleaved, load 5).
RECORDS_MAX = 64
GROWTH_MAX_BYTES = 2 << 20
# A "process" commit (no record) is made without sync under the same pin, so every page it
# writes is new too: after PROCESS_COMMITS_MAX such commits since the checkpoint, or that much
# growth of the data file, it is a checkpoint itself (one LMDB sync), after which LMDB reuses
# the pages freed before it. Without the bound a log that has a segment (made or once opened at
# "fsync", the default) and is then written at "process" grew by every page of every commit:
# 1 GB after 30,000 saves of a 200 B state, each slower than the last. A bound on growth alone
# is not one: the commits after a checkpoint reuse the pages the one before freed, without
# growing the file, so the next checkpoint waited for a second period's pages. The count trades
# file size for speed (a 200 B save, interleaved with one on a log without a segment: 64
# commits 3.9x its time, 256 2.6x, 512 2.3x with 30 MB of file, 1,024 1.9x with 53 MB, 2,048
# 1.9x with 100 MB; the log without a segment: 6 MB).
PROCESS_COMMITS_MAX = 1024
PROCESS_GROWTH_MAX_BYTES = 64 << 20
# Every WRITEBACK_EVERY records, the data file's dirty pages (past its two meta pages) start
# going to the device in the background (sync_file_range, no wait and no cache flush: not a
# durability step), so that a checkpoint's sync finds few left. The pin keeps every page a
# commit writes new (~10 per save), and the checkpoint then flushed ~64 saves' pages (~2.6 MB,
# ~2 ms) inside one save; started early, a durable 200 B save took 0.87-0.93x the time (every 8
# or 16 records, interleaved with a save without, one process).
WRITEBACK_EVERY = 16
SLOT_MAGIC = b"CKWH"
RECORD_MAGIC = b"CKWR"
VERSION = 1
SLOTS = (0, 2048)
META_COPY = 4096  # slot i's two meta pages at META_COPY + i * 2 * page size
_SLOT = struct.Struct("<4sIQQII")  # magic, version, generation, checkpoint txn, psize, crc
_REC = struct.Struct("<4sQQII")  # magic, generation, txn id, body length, body crc
_CRC = struct.Struct("<I")
_REC_BYTES = _REC.size + _CRC.size  # + the header's own crc
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[tuple[str, bytes, bytes | None]]).decode


class Header(msgspec.Struct, frozen=True):
    generation: int
    checkpoint: int  # the LMDB txn id the data file holds durably
    page_bytes: int
    slot: int

    @property
    def records_at(self) -> int:
        return META_COPY + 4 * self.page_bytes  # after both slots' meta copies


class Record(msgspec.Struct, frozen=True):
    txn_id: int
    ops: list[tuple[str, bytes, bytes | None]]
    end: int  # offset after the record


def _slot_bytes(generation: int, checkpoint: int, page_bytes: int) -> bytes:
    head = _SLOT.pack(SLOT_MAGIC, VERSION, generation, checkpoint, page_bytes, 0)[:-4]
    return head + struct.pack("<I", zlib.crc32(head))


_last_read: tuple[bytes, Header | None] = (b"", None)  # the last slots read and what they hold


def read_header(fd: int) -> Header | None:
    """The current header slot, or ``None`` when neither is valid (a new, unused segment).
    Read at every durable commit: slots as last read (by any segment of the process: the
    header is a function of the bytes) are not parsed again."""
    global _last_read  # noqa: PLW0603 - one memo, replaced whole (threads see old or new)
    raw = os.pread(fd, 2048 + _SLOT.size, 0)
    last = _last_read
    if raw == last[0]:
        return last[1]
    best: Header | None = None
    for i, off in enumerate(SLOTS):
        chunk = raw[off : off + _SLOT.size]
        if len(chunk) < _SLOT.size:
            continue
        magic, version, gen, ckpt, psize, crc = _SLOT.unpack(chunk)
        if magic != SLOT_MAGIC or version != VERSION or zlib.crc32(chunk[:-4]) != crc:
            continue
        if best is None or gen > best.generation:
            best = Header(gen, ckpt, psize, i)
    _last_read = (raw, best)
    return best


def record_bytes(generation: int, txn_id: int, ops: list[tuple[str, bytes, bytes | None]]) -> bytes:
    body = _encode(ops)
    head = _REC.pack(RECORD_MAGIC, generation, txn_id, len(body), zlib.crc32(body))
    return b"".join((head, _CRC.pack(zlib.crc32(head)), body))


def next_record_end(fd: int, at: int, generation: int, txn_id: int) -> int | None:
    """Where the record at ``at`` ends, if one of ``generation`` with ``txn_id`` starts there
    (its header checked, not its body: the tail scan of a live log, whose records were each
    written whole before their commit)."""
    raw = os.pread(fd, _REC_BYTES, at)
    if len(raw) < _REC_BYTES:
        return None
    magic, gen, tid, length, _ = _REC.unpack_from(raw)
    if magic != RECORD_MAGIC or gen != generation or tid != txn_id:
        return None
    if zlib.crc32(raw[: _REC.size]) != struct.unpack_from("<I", raw, _REC.size)[0]:
        return None
    return at + _REC_BYTES + int(length)


def read_records(fd: int, header: Header) -> list[Record]:
    """The records that follow the checkpoint, in order, up to the first torn or foreign one."""
    out: list[Record] = []
    at = header.records_at
    expect = header.checkpoint + 1
    size = os.fstat(fd).st_size
    while at + _REC_BYTES <= size:
        raw = os.pread(fd, _REC_BYTES, at)
        magic, gen, tid, length, crc = _REC.unpack_from(raw)
        if (
            magic != RECORD_MAGIC
            or gen != header.generation
            or tid != expect
            or zlib.crc32(raw[: _REC.size]) != struct.unpack_from("<I", raw, _REC.size)[0]
            or at + _REC_BYTES + length > size
        ):
            break
        body = os.pread(fd, length, at + _REC_BYTES)
        if len(body) != length or zlib.crc32(body) != crc:
            break
        try:
            ops = _decode(body)
        except msgspec.DecodeError:
            break
        at += _REC_BYTES + length
        out.append(Record(tid, ops, at))
        expect += 1
    return out


def create_segment(directory: str) -> None:
    """Create ``wal.ckptlog`` zero-filled (so appends change no file metadata), synced, and
    its name durable; a no-op when it exists."""
    path = os.path.join(directory, SEGMENT_FILE)
    if os.path.exists(path):
        return
    tmp = path + f".creating.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            zeros = bytes(1 << 16)
            for off in range(0, SEGMENT_BYTES, len(zeros)):
                os.pwrite(fd, zeros, off)
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # a concurrent creator's wins
            os.link(tmp, path)  # whole or absent
    except OSError as e:
        raise StorageError(
            e.errno or errno.EIO,
            f"creating the write-ahead segment {path!r} ({SEGMENT_BYTES:,} bytes): "
            + (
                "the disk is full. Free space on the disk holding the log, then retry: "
                "the log is intact"
                if e.errno == errno.ENOSPC
                else f"{e}; check the disk and retry"
            ),
        ) from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    sync_directory(directory)


def open_segment(directory: str) -> int | None:
    try:
        return os.open(os.path.join(directory, SEGMENT_FILE), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def write_checkpoint(fd: int, data_fd: int, header: Header | None, txn_id: int) -> Header:
    """Record that the data file holds ``txn_id`` durably (the caller has synced it, and holds
    the writers' lock): copy its meta pages, then the header slot, then fdatasync."""
    meta = os.pread(data_fd, 2 * 4096, 0)
    psize = struct.unpack_from("<I", meta, 40)[0] or 4096
    if psize != 4096:
        meta = os.pread(data_fd, 2 * psize, 0)
    gen = 1 if header is None else header.generation + 1
    slot = 0 if header is None else 1 - header.slot
    os.pwrite(fd, meta, META_COPY + slot * 2 * psize)
    os.pwrite(fd, _slot_bytes(gen, txn_id, psize), SLOTS[slot])
    os.fdatasync(fd)
    return Header(gen, txn_id, psize, slot)


def restore_metas(fd: int, data_path: str, header: Header) -> None:
    """Write the checkpoint's meta pages back into the data file and sync it."""
    psize = header.page_bytes
    meta = os.pread(fd, 2 * psize, META_COPY + header.slot * 2 * psize)
    dfd = os.open(data_path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.pwrite(dfd, meta, 0)
        os.fdatasync(dfd)
    finally:
        os.close(dfd)


def try_exclusive(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def share(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_SH)


def _libc_function(name: str) -> Any:
    """The C library's function ``name`` through ctypes (``restype`` int), ``None`` off Linux
    or when this libc has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _libc_function("sync_file_range")
if _SYNC_FILE_RANGE is not None:
    _SYNC_FILE_RANGE.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
_SYNC_FILE_RANGE_WRITE = 2
_STATX = _libc_function("statx")  # (no argtypes: plain ints and buffers convert faster)
_STATX_NLINK_SIZE = 0x4 | 0x200  # STATX_NLINK | STATX_SIZE: no timestamps asked for
_AT_EMPTY_PATH = 0x1000
_StatxBuf = ctypes.c_char * 256  # struct statx
_STATX_FIELDS = struct.Struct("<I12xI20xQ")  # stx_mask, stx_nlink (at 16), stx_size (at 40)


def statx_buffer() -> Any:
    """A ``struct statx`` buffer for :func:`links_and_size` to reuse (one per caller that
    serializes its calls, as a handle's writers' lock does: building one costs a third of the
    call)."""
    return _StatxBuf()


def links_and_size(fd: int, buf: Any = None) -> tuple[int, int]:
    """The link count and size of the open file ``fd``, without reading its timestamps.

    An ``fstat`` marks the inode's ctime as seen (multigrain timestamps, Linux 6.13 and
    later), so the next write to the file takes a fine-grained time: the data file's inode,
    and through the shared time floor the segment's, then changed at every commit, and ext4's
    fdatasync (without a journal it writes a dirty inode-table block synchronously) spent a
    third device round trip per durable save on it (3.0 sleeps per save instead of 2.1).
    ``statx`` asked for the link count and size only leaves the timestamps unseen."""
    if _STATX is not None:
        if buf is None:
            buf = _StatxBuf()
        if _STATX(fd, b"", _AT_EMPTY_PATH, _STATX_NLINK_SIZE, buf) == 0:
            mask, links, size = _STATX_FIELDS.unpack_from(buf)
            if mask & _STATX_NLINK_SIZE == _STATX_NLINK_SIZE:
                return links, size
    st = os.fstat(fd)
    return st.st_nlink, st.st_size


def start_writeback(data_fd: int | None, header: Header, txn_id: int) -> None:
    """After the record of ``txn_id``, every ``WRITEBACK_EVERY`` records: start writing the
    data file's dirty pages, past its meta pages, to the device without waiting (best effort:
    a failed write-out is reported by the checkpoint's sync, as any background write-out's
    is). Meta pages stay out: only the kernel's own write-out, or a sync, puts a meta page of
    an unsynced commit on disk."""
    if (
        _SYNC_FILE_RANGE is not None
        and data_fd is not None
        and (txn_id - header.checkpoint) % WRITEBACK_EVERY == 0
    ):
        _SYNC_FILE_RANGE(data_fd, 2 * header.page_bytes, 0, _SYNC_FILE_RANGE_WRITE)
