"""The timeline of one checkpoint invocation: every frame's time and kind, failures, pauses,
and each fan-out's instance states over time, indexed incrementally.

Invariants:
- Bounded: ``bins`` returns at most the bins asked for; pauses keep the ``PAUSES_MAX``
  longest gaps; a call to :meth:`Timeline.extend` spends at most its time budget.
- Thread-safe: every read and extension holds the timeline's lock.
- Read-only and tolerant: unreadable frames are recorded (seqs stay aligned), never raised.
"""

from __future__ import annotations

import bisect
import heapq
import math
import threading
import time
from array import array
from typing import Any, Final

import msgspec

from eventlog import forensics as fx
from eventlog.errors import InvalidArgument
from eventlog.frames import Save, Snapshot, Tombstone
from eventlog.log import EventLog
from eventlog.records import FanOutInstanceProgress

__all__ = [
    "DONE",
    "FAILED",
    "IN_FLIGHT",
    "NOT_STARTED",
    "PAUSES_MAX",
    "PAUSE_FACTOR",
    "PAUSE_MIN_S",
    "Timeline",
    "state_code",
]

PAUSES_MAX: Final = 20  # longest pauses kept per timeline
PAUSE_MIN_S: Final = 0.1  # a shorter gap between saves is never marked as a pause
PAUSE_FACTOR: Final = 10  # ... nor one shorter than this many times the median gap

# Instance state codes in the grid and the timeline index.
NOT_STARTED, IN_FLIGHT, DONE, FAILED = 0, 1, 2, 3


def state_code(inst: FanOutInstanceProgress) -> int:
    if inst.state == "completed":
        return FAILED if inst.result_is_error else DONE
    return IN_FLIGHT if inst.state == "in_flight" else NOT_STARTED


class _FanIndex:
    """One fan-out's instances over time: each change in save order with its own time (a
    batch's ``instance_saved_at``), and cumulative counts after it."""

    def __init__(self, key: tuple[Any, ...], count: int) -> None:
        self.key = key
        self.count = count
        self.codes = bytearray(count)
        self.done = 0  # completed, errors included
        self.failed = 0
        self.in_flight = 0
        self.t = array("d")  # running max of change times (so bisect works on any clock)
        self.cum_done = array("l")
        self.cum_failed = array("l")
        self.cum_in_flight = array("l")
        self.failures: list[tuple[float, int, int]] = []  # (time, index, seq) in order

    def label(self) -> dict[str, Any]:
        name, ns, lineage = self.key
        return {
            "name": name,
            "namespace": list(ns),
            "lineage": [fx.plain(e) for e in lineage],
            "count": self.count,
        }

    def change(self, index: int, new: int, t: float, seq: int) -> None:
        if not 0 <= index < self.count:
            return  # the log validated it; a damaged frame is verify's to report
        old = self.codes[index]
        self.codes[index] = new
        self._count(old, -1)
        self._count(new, 1)
        if new == FAILED and old != FAILED:
            self.failures.append((t, index, seq))
        self._point(t)

    def _count(self, code: int, sign: int) -> None:
        if code == IN_FLIGHT:
            self.in_flight += sign
        elif code >= DONE:
            self.done += sign
            if code == FAILED:
                self.failed += sign

    def _point(self, t: float) -> None:
        last = self.t[-1] if self.t else -math.inf
        self.t.append(t if t > last else last)
        self.cum_done.append(self.done)
        self.cum_failed.append(self.failed)
        self.cum_in_flight.append(self.in_flight)

    def reset(self, codes: bytearray, t: float) -> None:
        """The full state a snapshot holds (after its batch's changes were applied)."""
        if codes == self.codes:
            return
        self.codes = codes
        self.in_flight = codes.count(IN_FLIGHT)
        self.failed = codes.count(FAILED)
        self.done = codes.count(DONE) + self.failed
        self._point(t)

    def at(self, t: float) -> tuple[int, int, int]:
        """``(done, failed, in_flight)`` after the last change at or before ``t``."""
        i = bisect.bisect_right(self.t, t) - 1
        if i < 0:
            return 0, 0, 0
        return self.cum_done[i], self.cum_failed[i], self.cum_in_flight[i]


class Timeline:
    """Every frame of one stream: time, kind, failures, pauses, and each fan-out's instance
    changes; extended as the stream grows, at most ``budget`` seconds per call."""

    KINDS: Final = ("save", "fan_out_internal", "fan_out_in_flight_failure", "delete", "event")

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.times = array("d")  # saved_at of seq i + 1
        self.kinds = bytearray()
        self.fail_seqs: list[int] = []
        self.unreadable: list[dict[str, Any]] = []
        self.pauses: list[tuple[float, int]] = []  # min-heap of (gap seconds, seq after it)
        self.fans: dict[tuple[Any, ...], _FanIndex] = {}
        self.by_fid: dict[int, _FanIndex] = {}

    @property
    def indexed(self) -> int:
        return len(self.times)

    def extend(self, log: EventLog, budget: float) -> None:
        deadline = time.monotonic() + budget
        with self.lock:
            for n, item in enumerate(fx.read_frames(log, self.stream, self.indexed + 1)):
                if isinstance(item, fx.Unreadable):
                    self.unreadable.append(msgspec.to_builtins(item))
                    if item.problem != "chain":  # (a frame that does not chain is still read)
                        for seq in range(item.seq, item.last_seq + 1):  # keep seqs aligned
                            self._frame(seq, self.times[-1] if self.times else 0.0, "event")
                    continue
                self._add(item.seq, item.frame)
                if n % 256 == 255 and time.monotonic() > deadline:
                    return

    def _frame(self, seq: int, t: float, kind: str) -> None:
        if self.times:
            gap = t - self.times[-1]
            if len(self.pauses) < PAUSES_MAX:
                heapq.heappush(self.pauses, (gap, seq))
            elif gap > self.pauses[0][0]:
                heapq.heapreplace(self.pauses, (gap, seq))
        self.times.append(t)
        self.kinds.append(self.KINDS.index(kind) if kind in self.KINDS else 0)
        if kind == "fan_out_in_flight_failure":
            self.fail_seqs.append(seq)

    def _add(self, seq: int, frame: Any) -> None:
        t = fx.frame_saved_at(frame)
        failed_before = sum(f.failed for f in self.fans.values())
        if isinstance(frame, Save):
            if frame.layout is not None:
                self._layout(frame.layout)
            times = frame.instance_saved_at
            for j, ch in enumerate(frame.instances):
                fan = self.by_fid.get(ch.fid)
                if fan is not None:
                    when = times[j] if j < len(times) else t
                    fan.change(ch.index, state_code(ch.progress), when, seq)
            kind = frame.kind
        elif isinstance(frame, Snapshot):
            self._layout(frame.layout)
            for j, ch in enumerate(frame.batch):
                fan = self.by_fid.get(ch.fid)
                if fan is not None:
                    when = frame.instance_saved_at[j] if j < len(frame.instance_saved_at) else t
                    fan.change(ch.index, state_code(ch.progress), when, seq)
            full = {fid: bytearray(f.count) for fid, f in self.by_fid.items()}
            for ch in frame.instances:
                codes = full.get(ch.fid)
                if codes is not None and 0 <= ch.index < len(codes):
                    codes[ch.index] = state_code(ch.progress)
            for fid, codes in full.items():
                self.by_fid[fid].reset(codes, t)
            kind = frame.kind
        elif isinstance(frame, Tombstone):
            kind = "delete"
        else:
            kind = "event"
        self._frame(seq, t, kind)
        if kind != "fan_out_in_flight_failure" and (
            sum(f.failed for f in self.fans.values()) > failed_before
        ):
            self.fail_seqs.append(seq)

    def _layout(self, layout: Any) -> None:
        self.by_fid = {}
        for hd in layout:
            key = (hd.fan_out_node_name, tuple(hd.namespace), tuple(hd.lineage))
            fan = self.fans.get(key)
            if fan is None or fan.count != hd.instance_count:
                fan = _FanIndex(key, hd.instance_count)
                self.fans[key] = fan
            self.by_fid[hd.fid] = fan

    def bins(self, lo: int, hi: int, count: int) -> dict[str, Any]:
        """Seqs ``lo..hi`` in ``count`` bins of equal seq width: each bin's seqs, first and
        last time, failures, and every fan-out's counts at its last time."""
        with self.lock:
            n = self.indexed
            hi = min(hi, n)
            lo = max(1, min(lo, hi))
            out: list[dict[str, Any]] = []
            if n:
                width = max(1, -(-(hi - lo + 1) // count))
                for a in range(lo, hi + 1, width):
                    b = min(hi, a + width - 1)
                    t_last = self.times[b - 1]
                    fails = bisect.bisect_right(self.fail_seqs, b) - bisect.bisect_left(
                        self.fail_seqs, a
                    )
                    fans = []
                    for fan in self.fans.values():
                        done, failed, flight = fan.at(t_last)
                        fans.append([done - failed, failed, fan.count - done, flight])
                    out.append(
                        {
                            "lo": a,
                            "hi": b,
                            "t0": self.times[a - 1],
                            "t1": t_last,
                            "failures": fails,
                            "fan_outs": fans,
                        }
                    )
            floor = max(PAUSE_MIN_S, PAUSE_FACTOR * self._typical_gap())
            pauses = sorted(
                (
                    {"seq": s, "gap": g, "t": self.times[s - 1]}
                    for g, s in self.pauses
                    if g >= floor
                ),
                key=lambda p: -p["gap"],
            )
            return {
                "indexed": n,
                "lo": lo,
                "hi": hi,
                "bins": out,
                "fan_outs": [f.label() for f in self.fans.values()],
                "pauses": pauses,
                "failure_seqs": len(self.fail_seqs),
                "failure_sample": self.fail_seqs[:50],
                "unreadable": self.unreadable[:50],
            }

    def _typical_gap(self) -> float:
        """The median gap between saves, from at most ~1,000 gaps spread over the stream."""
        n = self.indexed
        if n < 2:
            return 0.0
        step = max(1, (n - 1) // 1000)
        gaps = sorted(self.times[i] - self.times[i - 1] for i in range(1, n, step))
        return max(0.0, gaps[len(gaps) // 2])

    def fan(self, k: int) -> _FanIndex:
        fans = list(self.fans.values())
        if not 0 <= k < len(fans):
            raise InvalidArgument(f"fan-out {k} does not exist: this invocation has {len(fans)}")
        return fans[k]
