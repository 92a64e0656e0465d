"""A log-bucketed latency histogram (HdrHistogram's layout, pure Python, constant memory).

Why not the ``hdrhistogram`` package: the benchmarks need record, merge and percentiles of
nanosecond latencies, about 100 lines; the PyPI port adds a C extension and ``pbr`` to the
bench install for that, and its releases are rare. This module keeps HdrHistogram's bucket
layout, so its error bound is the same and stated:

- A value ``v`` (integer nanoseconds) below ``2 ** SUB_BITS`` has its own bucket (exact).
  Above, ``v`` falls in a bucket of width ``2 ** (e - SUB_BITS)`` where ``e`` is the position
  of ``v``'s top bit, so a bucket is at most ``1 / 2 ** SUB_BITS`` of the values it holds wide
  (SUB_BITS = 7: under 0.79 %).
- :meth:`Histogram.percentile` is the nearest-rank percentile (the smallest recorded value with
  at least ``p`` % of the values at or below it) reported as the top of its bucket, clamped to
  the exact minimum and maximum; so it is never below the exact value and at most one bucket
  width above it (``tests/test_bench_histogram.py`` checks this against a sorted list).
- Memory is a fixed list of ``(TOP_BIT - SUB_BITS + 2) * 2 ** SUB_BITS`` counters, whatever
  the number of values: a 15-minute run records every save without keeping them. Values past
  ``2 ** TOP_BIT`` ns (about 18 minutes) are counted in the top bucket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

SUB_BITS = 7
SUB = 1 << SUB_BITS
TOP_BIT = 40  # 2**40 ns ~ 18.3 min: the largest value with its own bucket
BUCKETS = (TOP_BIT - SUB_BITS + 2) * SUB
PERCENTILES = (50.0, 90.0, 99.0, 99.9)
RELATIVE_ERROR = 1 / SUB  # the widest bucket over the smallest value it holds


def bucket_of(ns: int) -> int:
    """The bucket index of ``ns`` (a non-negative integer)."""
    if ns < SUB:
        return max(ns, 0)
    e = min(ns.bit_length() - 1, TOP_BIT)
    if e == TOP_BIT and ns >= (1 << (TOP_BIT + 1)):
        return BUCKETS - 1
    shift = e - SUB_BITS
    return (shift + 1) * SUB + ((ns >> shift) - SUB)


def bucket_range(index: int) -> tuple[int, int]:
    """The values ``[low, high]`` (inclusive, ns) that land in bucket ``index``."""
    if index < SUB:
        return index, index
    shift = index // SUB - 1
    low = (SUB + index % SUB) << shift
    return low, low + (1 << shift) - 1


class Histogram:
    """Counts of latencies in log-linear buckets, with the exact count, sum, min and max."""

    __slots__ = ("count", "counts", "max_ns", "min_ns", "sum_ns", "sum_sq_ns")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.count = 0
        self.sum_ns = 0
        self.sum_sq_ns = 0
        self.min_ns = 0
        self.max_ns = 0

    @classmethod
    def of(cls, seconds: Iterable[float]) -> Histogram:
        h = cls()
        for s in seconds:
            h.record(s)
        return h

    def record(self, seconds: float) -> None:
        """Record one latency given in seconds (negative values count as 0)."""
        self.record_ns(max(0, round(seconds * 1e9)))

    def record_ns(self, ns: int) -> None:
        self.counts[bucket_of(ns)] += 1
        if self.count == 0 or ns < self.min_ns:
            self.min_ns = ns
        self.max_ns = max(ns, self.max_ns)
        self.count += 1
        self.sum_ns += ns
        self.sum_sq_ns += ns * ns

    def merge(self, other: Histogram) -> Histogram:
        """Add ``other``'s values to this histogram (returned, for chaining)."""
        if other.count == 0:
            return self
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.min_ns = other.min_ns if self.count == 0 else min(self.min_ns, other.min_ns)
        self.max_ns = max(self.max_ns, other.max_ns)
        self.count += other.count
        self.sum_ns += other.sum_ns
        self.sum_sq_ns += other.sum_sq_ns
        return self

    def percentile_ns(self, p: float) -> int:
        """Nearest-rank percentile ``p`` (0..100), as the top of its bucket, within
        ``[min, max]``."""
        if self.count == 0:
            raise ValueError("percentile of an empty histogram")
        rank = max(1, math.ceil(p / 100 * self.count))
        seen = 0
        for index, c in enumerate(self.counts):
            seen += c
            if seen >= rank:
                return min(max(bucket_range(index)[1], self.min_ns), self.max_ns)
        return self.max_ns

    def percentile(self, p: float) -> float:
        """:meth:`percentile_ns` in seconds."""
        return self.percentile_ns(p) / 1e9

    @property
    def mean_ns(self) -> float:
        return self.sum_ns / self.count if self.count else 0.0

    @property
    def stddev_ns(self) -> float:
        if self.count < 2:
            return 0.0
        var = self.sum_sq_ns / self.count - self.mean_ns**2
        return math.sqrt(max(var, 0.0))

    def summary_us(self) -> dict[str, Any]:
        """p50 / p90 / p99 / p99.9 / max / mean / stddev in µs and the count (the JSON shape
        every scenario reports; ``None`` values when nothing was recorded)."""
        keys = ("p50_us", "p90_us", "p99_us", "p999_us", "max_us", "mean_us", "stddev_us")
        if self.count == 0:
            return {**dict.fromkeys(keys), "latency_samples": 0}
        values = [self.percentile_ns(p) / 1e3 for p in PERCENTILES]
        values += [self.max_ns / 1e3, self.mean_ns / 1e3, self.stddev_ns / 1e3]
        return {
            **{k: round(v, 3) for k, v in zip(keys, values, strict=True)},
            "latency_samples": self.count,
        }

    def to_json(self) -> dict[str, Any]:
        """A compact, exact form (non-empty buckets only), for a value crossing a process."""
        return {
            "buckets": {str(i): c for i, c in enumerate(self.counts) if c},
            "count": self.count,
            "sum_ns": self.sum_ns,
            "sum_sq_ns": self.sum_sq_ns,
            "min_ns": self.min_ns,
            "max_ns": self.max_ns,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Histogram:
        h = cls()
        for i, c in data["buckets"].items():
            h.counts[int(i)] = int(c)
        h.count, h.sum_ns, h.sum_sq_ns = data["count"], data["sum_ns"], data["sum_sq_ns"]
        h.min_ns, h.max_ns = data["min_ns"], data["max_ns"]
        return h
