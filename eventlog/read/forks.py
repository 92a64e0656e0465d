"""Forks on the read side: where a stream was forked from, and the
``ID@SEQ`` form naming one seq of one stream (``ckptlog diff PATH A@SEQ B@SEQ``).

Invariants:
- Read-only; a fork is recognised by its first frame alone (eventlog.fork_links), so any
  face shows the same link the same way (as plain data: :func:`origin_doc`).
"""

from __future__ import annotations

from typing import Any

from eventlog.fork_links import origin
from eventlog.frames import ForkOrigin
from eventlog.log import EventLog

__all__ = ["forked_from", "origin_doc", "origin_text", "split_at"]


def forked_from(log: EventLog, stream: str) -> ForkOrigin | None:
    """The origin of ``stream`` when it is a fork (``None``: it is not, or has no frames)."""
    first = next(iter(log.read_stream(stream, 1, 1)), None)
    return None if first is None else origin(first.frame)


def origin_doc(link: ForkOrigin | None) -> dict[str, Any] | None:
    """A fork's origin as plain data (JSON): invocation, seq and checksum (hex)."""
    if link is None:
        return None
    return {"invocation_id": link.invocation_id, "seq": link.seq, "checksum": link.checksum.hex()}


def origin_text(link: ForkOrigin) -> str:
    return f"forked from {link.invocation_id}@{link.seq} (checksum {link.checksum.hex()[:16]})"


def split_at(text: str) -> tuple[str, str] | None:
    """``ID@SEQ`` as ``(ID, SEQ)`` (SEQ a number or ``latest``), split at the last ``@``;
    ``None`` when ``text`` is not of that form (an id may itself hold ``@``)."""
    stream, sep, seq = text.rpartition("@")
    if not sep or not stream or not (seq.isdigit() or seq in ("latest", "head", "last")):
        return None
    return stream, seq
