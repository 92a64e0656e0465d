"""The anchored head: one token committing to every stream's head, checkable against a log
that has grown since.

Each stream's hash chain proves its frames up to its newest one, but not that the newest one
is still the newest that was acknowledged: a truncated tail, or an LMDB meta rollback (the
file opening an older transaction), leaves shorter chains that verify. Writing a digest of the
heads somewhere else (a ticket, a git commit, a timestamping service) closes that gap.

The token (``ckptlog head``; docs/forensics.md)::

    ckh1:<G>:<N>:<S>:<H>

- ``G``: the newest global seq (the log table's last key) when the digest was taken;
- ``N``: how many frames the log held then (``G`` on a log that was never compacted into);
- ``S``: how many streams had frames then;
- ``H``: blake2b-256 (hex) of ``"ckptlog-head-v1"``, ``G``, ``N`` and, for each of those
  streams in stream-id order (the order they were first written), its key (length-prefixed
  UTF-8), the seq of its newest frame with a global seq ``<= G``, and that frame's envelope
  checksum.

Checking (:func:`check`) recomputes ``H`` for the log *as of G*: every frame appended after the
digest has a global seq above ``G`` (frames are appended in commit order, and never rewritten)
and is left out, so a log that only grew passes; a frame acknowledged before the digest that
was removed or replaced (the tail cut, the meta page rolled back, the rolled-back seqs written
again with other frames) changes some stream's head as of ``G`` or ``N``, and fails. With
``verify``'s chain checks, a passing digest means every frame acknowledged before it is there,
unchanged.

Invariants:
- Read-only, one read transaction, over the core tables alone (any kind of stream, LMDB or
  PostgreSQL): ``O(streams + frames appended since)`` to check, ``O(streams)`` to take.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final

from backends.base import ReadTxn
from eventlog.errors import InvalidHeadDigest
from eventlog.layout import LOG, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.log import EventLog
from eventlog.reports import Problem

__all__ = ["HeadDigest", "check", "parse", "take"]

PREFIX: Final = "ckh1"
_DOMAIN: Final = b"ckptlog-head-v1"
_CHECKSUM: Final = slice(36, 52)  # an envelope's checksum (docs/frame-format.md)
_TOKEN: Final = re.compile(r"ckh1:(\d+):(\d+):(\d+):([0-9a-f]{64})")


@dataclass(frozen=True)
class HeadDigest:
    """A log's heads as of global seq ``global_seq`` (see the module docstring)."""

    global_seq: int
    frames: int
    streams: int
    digest: str

    @property
    def token(self) -> str:
        return f"{PREFIX}:{self.global_seq}:{self.frames}:{self.streams}:{self.digest}"

    def __str__(self) -> str:
        return self.token


def parse(token: str) -> HeadDigest:
    """A token printed by ``ckptlog head`` (:class:`InvalidHeadDigest` when it is not one)."""
    m = _TOKEN.fullmatch(token.strip())
    if m is None:
        raise InvalidHeadDigest(
            f"{token!r} is not a head digest: expected ckh1:GSEQ:FRAMES:STREAMS:HASH (64 hex "
            "digits), as `ckptlog head PATH` prints it; copy it whole"
        )
    g, n, s = (int(m.group(i)) for i in (1, 2, 3))
    if n > g or s > n:
        raise InvalidHeadDigest(
            f"{token!r} is not a head digest: it claims {n} frames and {s} streams up to "
            f"global seq {g}, which cannot be; copy it whole"
        )
    return HeadDigest(g, n, s, m.group(4))


def take(log: EventLog) -> HeadDigest:
    """The digest of ``log``'s heads now."""
    with log.backend.read() as txn:
        last = txn.last_key(LOG)
        g = U64.unpack(last)[0] if last is not None else 0
        return _as_of(txn, g, txn.count(LOG))


def check(log: EventLog, expected: HeadDigest) -> list[Problem]:
    """What the log lost of the heads ``expected`` commits to (empty: nothing)."""
    g = expected.global_seq
    with log.backend.read() as txn:
        last = txn.last_key(LOG)
        now = U64.unpack(last)[0] if last is not None else 0
        if now < g:
            return [
                _problem(
                    f"the log ends at global seq {now:,}, but the digest was taken at global "
                    f"seq {g:,}: the frames after {now:,} ({g - now:,} at least), acknowledged "
                    "before the digest, were removed (a truncated tail, a rolled-back commit or "
                    "an older backup restored); restore the log from a "
                    "backup taken after the digest"
                )
            ]
        later = sum(1 for _ in txn.scan(LOG, U64.pack(g + 1), None))
        found = _as_of(txn, g, txn.count(LOG) - later)
    if found == expected:
        return []
    if found.frames != expected.frames or found.streams != expected.streams:
        what = (
            f"as of global seq {g:,} it holds {found.frames:,} frames in {found.streams:,} "
            f"streams, the digest {expected.frames:,} in {expected.streams:,}"
        )
    else:
        what = f"as of global seq {g:,} some stream's newest frame is not the one digested"
    return [
        _problem(
            f"the log does not extend the head digest {expected.token}: {what}, so frames "
            "acknowledged before the digest was taken were removed or rewritten (a rolled-back "
            "commit, a truncated tail, or a replaced file); restore the log from a backup "
            "taken after the digest"
        )
    ]


def _as_of(txn: ReadTxn, g: int, frames: int) -> HeadDigest:
    h = hashlib.blake2b(_DOMAIN, digest_size=32)
    h.update(U64X2.pack(g, frames))
    streams = 0
    for k, v in txn.scan(STREAM_NAMES):
        sid = U64.unpack(k)[0]
        head = _head(txn, sid, g)
        if head is None:
            continue
        seq, checksum = head
        h.update(U64X2.pack(len(v), seq))
        h.update(v)
        h.update(checksum)
        streams += 1
    return HeadDigest(g, frames, streams, h.hexdigest())


def _head(txn: ReadTxn, sid: int, g: int) -> tuple[int, bytes] | None:
    """The seq and checksum of stream ``sid``'s newest frame with a global seq ``<= g``."""
    for key, gkey in txn.scan_prefix(STREAMS, U64.pack(sid), reverse=True):
        if U64.unpack(gkey)[0] > g:
            continue
        envelope = txn.get(LOG, gkey)
        checksum = envelope[_CHECKSUM] if envelope is not None else b"\0" * 16
        return U64X2.unpack(key)[1], bytes(checksum)
    return None


def _problem(text: str) -> Problem:
    return Problem("head", text)
