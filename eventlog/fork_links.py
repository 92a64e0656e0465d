"""The link a forked invocation keeps to its source, and the check ``verify`` runs on it.

A fork's first frame is a snapshot carrying a :class:`~eventlog.frames.ForkOrigin` (source
invocation, seq, the source frame's envelope checksum; eventlog.fork writes it). Frames are
never rewritten, so the link can be checked at any time: the source frame must still be there
with that checksum, and the fork's first record must hold what the source's record as of that
seq holds (all but the invocation id and the save time).

Invariants:
- Read-only, over the EventLog alone (no CheckpointLog): ``views.verify_log`` runs it after
  the core and view checks, on every stream whose first frame is a forked snapshot.
- Every broken link is a :class:`~eventlog.reports.Problem` of kind ``fork``; nothing raises
  for a damaged log (an unreadable frame is named, and the core checks report the damage).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from eventlog.codec import open_envelope
from eventlog.frames import CHECKPOINT_FRAMES, ForkOrigin, Snapshot
from eventlog.layout import LOG, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.log import EventLog
from eventlog.materialized import last_snapshot_at_or_before
from eventlog.records import CheckpointRecord
from eventlog.reports import Problem
from projections.records import Head, apply_inplace, to_record

__all__ = ["check_links", "forks", "origin", "record_of", "same_content"]


def origin(first: Any) -> ForkOrigin | None:
    """The origin a stream's first frame carries (``None``: not a fork)."""
    return first.forked if isinstance(first, Snapshot) else None


def same_content(a: CheckpointRecord, b: CheckpointRecord) -> bool:
    """Whether two records hold the same run (all but the id and the save time)."""
    return (
        a.state == b.state
        and a.completed_positions == b.completed_positions
        and a.parent_states == b.parent_states
        and a.correlation_id == b.correlation_id
        and a.schema_version == b.schema_version
        and a.fan_out_progress == b.fan_out_progress
    )


def record_of(log: EventLog, stream: str, seq: int) -> CheckpointRecord | None:
    """The record of ``stream`` as of ``seq`` (folded from its last snapshot at or before)."""
    with log.backend.read() as txn:
        sid = log.stream_id(txn, stream)
        if sid is None:
            return None
        start = last_snapshot_at_or_before(txn, sid, seq)
    head: Head | None = None
    for sf in log.read_stream(stream, start, seq):
        if isinstance(sf.frame, CHECKPOINT_FRAMES):
            head = apply_inplace(head, sf.frame, sf.seq, stream)
    return None if head is None else to_record(head)


def forks(log: EventLog) -> Iterator[tuple[str, ForkOrigin]]:
    """Every forked stream of the log with its origin, read in one transaction (streams whose
    first frame does not read are skipped: the core checks report them)."""
    found: list[tuple[str, ForkOrigin]] = []
    with log.backend.read() as txn:
        for key, name in txn.scan(STREAM_NAMES):
            gkey = txn.get(STREAMS, U64X2.pack(U64.unpack(key)[0], 1))
            data = txn.get(LOG, gkey) if gkey is not None else None
            if data is None:
                continue
            try:
                link = _peek_origin(log, bytes(data))
            except Exception:  # noqa: BLE001 - damage is the core checks' to report
                continue
            if link is not None:
                found.append((bytes(name).decode("utf-8", "surrogatepass"), link))
    return iter(found)


_ITEMS = msgspec.msgpack.Decoder(list[msgspec.Raw])
_ORIGIN = msgspec.msgpack.Decoder(ForkOrigin | None)
_SNAPSHOT_TAG = msgspec.msgpack.encode("sn")
_FORKED_AT = len(Snapshot.__struct_fields__)  # after the tag, the fields: ``forked`` is last


def _peek_origin(log: EventLog, data: bytes) -> ForkOrigin | None:
    """The ``forked`` field of a stored frame without decoding the rest: the payload as a list
    of undecoded items (``msgspec.Raw``), and only the last one decoded, when the frame is a
    snapshot long enough to hold it (a first frame's record may be large)."""
    env = open_envelope(data, chain_key=log.chain_key)
    raw = log.compressor.decompress(env.payload, env.flags, max_bytes=log.frame_bytes_max)
    items = _ITEMS.decode(raw)
    if len(items) <= _FORKED_AT or bytes(items[0]) != _SNAPSHOT_TAG:
        return None
    link: ForkOrigin | None = _ORIGIN.decode(items[_FORKED_AT])
    return link


def check_links(log: EventLog) -> list[Problem]:
    """Every fork's link to its source (see the module docstring)."""
    problems: list[Problem] = []
    for stream, link in forks(log):
        problems.extend(_check(log, stream, link))
    return problems


def _check(log: EventLog, stream: str, link: ForkOrigin) -> list[Problem]:
    where = f"{link.invocation_id!r} seq {link.seq}"
    try:
        source = next(iter(log.read_stream(link.invocation_id, link.seq, link.seq)), None)
    except Exception as e:  # noqa: BLE001 - a damaged source frame is a broken link
        return [_problem(stream, f"its source frame, {where}, does not read ({e})")]
    if source is None:
        last = log.last_seq(link.invocation_id)
        found = "no such invocation" if last == 0 else f"its seqs run 1..{last}"
        return [_problem(stream, f"its source frame, {where}, is not in the log ({found})")]
    if source.checksum != link.checksum:
        return [
            _problem(
                stream,
                f"its source frame, {where}, has checksum {source.checksum.hex()}, not the "
                f"{link.checksum.hex()} recorded when it was forked: the source was rewritten",
            )
        ]
    try:
        mine = record_of(log, stream, 1)
        theirs = record_of(log, link.invocation_id, link.seq)
    except Exception as e:  # noqa: BLE001 - the core checks name the damaged frame
        return [_problem(stream, f"its record or its source's does not fold ({e})")]
    if mine is None or theirs is None or not same_content(mine, theirs):
        return [
            _problem(
                stream,
                f"its first record differs from the record of {where} it was forked from",
            )
        ]
    return []


def _problem(stream: str, text: str) -> Problem:
    return Problem("fork", f"fork {stream!r}: {text}", stream=stream, seq=1)
