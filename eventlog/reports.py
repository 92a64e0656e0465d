"""Result types of the log's checks, shared by every layer that reports (a leaf module).

:class:`Problem` is one finding, :class:`VerifyReport` a whole ``verify()``, :class:`Stats`
what an :class:`~eventlog.log.EventLog` did. Forensic results (``CompactReport``,
``ReplayStep``, ...) are re-exported from :mod:`eventlog` too.
"""

from __future__ import annotations

import msgspec


class Problem(msgspec.Struct, frozen=True):
    """One finding of :meth:`EventLog.verify`."""

    kind: str  # checksum | header | chain | gap | index | orphan | names | projection | decode
    detail: str
    stream: str | None = None
    seq: int | None = None
    global_seq: int | None = None

    def __str__(self) -> str:
        where = []
        if self.stream is not None:
            where.append(f"stream {self.stream!r}")
        if self.seq is not None:
            where.append(f"seq {self.seq}")
        if self.global_seq is not None:
            where.append(f"log #{self.global_seq}")
        return f"[{self.kind}] {', '.join(where) or 'log'}: {self.detail}"


class VerifyReport(msgspec.Struct):
    frames: int = 0
    streams: int = 0
    problems: list[Problem] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = f"{self.frames} frames in {self.streams} streams: "
        if self.ok:
            return head + "OK"
        return head + f"{len(self.problems)} problem(s)\n" + "\n".join(map(str, self.problems))


class Stats(msgspec.Struct, frozen=True):
    frames: int  # frames in the log
    streams: int
    log_bytes: int  # envelope bytes appended by this EventLog object
    frames_appended: int  # frames appended by this EventLog object
    commits: int  # write transactions committed by this EventLog object
    disk_bytes: int  # bytes the backend occupies on its medium
    durability: str
