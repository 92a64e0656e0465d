"""The benchmarks' latency histogram (benchmarks/histogram.py) against an exact sorted list.

Its percentiles must be the nearest-rank percentile of the recorded values, reported as the top
of that value's bucket: never below the exact value and at most one bucket (under 1/128 of the
value) above it, at every size, for any mix of values, merged or not.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.histogram import (
    BUCKETS,
    PERCENTILES,
    RELATIVE_ERROR,
    SUB,
    Histogram,
    bucket_of,
    bucket_range,
)

# Latencies from 0 ns to ~17 min: exact small values, µs, ms and long stalls all drawn.
NS = st.one_of(
    st.integers(0, 300),
    st.integers(0, 10_000_000),
    st.integers(0, 1 << 40),
)
PS = st.sampled_from([*PERCENTILES, 0.0, 1.0, 25.0, 99.99, 100.0]) | st.floats(0, 100)


def nearest_rank(sorted_ns: list[int], p: float) -> int:
    return sorted_ns[max(1, math.ceil(p / 100 * len(sorted_ns))) - 1]


@settings(max_examples=300, deadline=None)
@given(st.lists(NS, min_size=1, max_size=2000), PS)
def test_percentiles_match_a_sorted_list_within_one_bucket(values: list[int], p: float) -> None:
    h = Histogram()
    for v in values:
        h.record_ns(v)
    exact = nearest_rank(sorted(values), p)
    got = h.percentile_ns(p)
    assert exact <= got <= exact + exact * RELATIVE_ERROR, (p, exact, got)
    assert h.count == len(values)
    assert h.min_ns == min(values)
    assert h.max_ns == max(values)
    assert h.percentile_ns(100) == max(values)


@settings(max_examples=100, deadline=None)
@given(st.lists(NS, max_size=500), st.lists(NS, max_size=500))
def test_a_merge_is_the_histogram_of_both_lists(a: list[int], b: list[int]) -> None:
    ha, hb, both = Histogram(), Histogram(), Histogram()
    for v in a:
        ha.record_ns(v)
        both.record_ns(v)
    for v in b:
        hb.record_ns(v)
        both.record_ns(v)
    merged = ha.merge(hb)
    assert merged.counts == both.counts
    assert (merged.count, merged.sum_ns, merged.min_ns, merged.max_ns) == (
        both.count,
        both.sum_ns,
        both.min_ns,
        both.max_ns,
    )
    again = Histogram.from_json(merged.to_json())
    assert again.counts == both.counts
    assert again.summary_us() == both.summary_us()


@given(NS)
def test_every_value_lands_in_the_bucket_whose_range_holds_it(v: int) -> None:
    i = bucket_of(v)
    assert 0 <= i < BUCKETS
    low, high = bucket_range(i)
    assert low <= v <= high
    assert high - low <= max(0, low // SUB)  # a bucket is at most 1/128 of its values wide


def test_seconds_are_recorded_as_nanoseconds_and_summarised_in_microseconds() -> None:
    h = Histogram.of([0.001] * 99 + [0.5])  # 99 saves of 1 ms, one stall of 500 ms
    s = h.summary_us()
    assert s["latency_samples"] == 100
    assert 1000 <= s["p50_us"] <= 1000 * (1 + RELATIVE_ERROR)
    assert 1000 <= s["p99_us"] <= 1000 * (1 + RELATIVE_ERROR)  # the 99th of 100 is a 1 ms save
    assert s["max_us"] == 500_000
    assert s["p999_us"] == 500_000  # the stall is the tail, not averaged away
    assert s["mean_us"] == (99 * 1000 + 500_000) / 100
    empty = Histogram().summary_us()
    assert empty["p99_us"] is None
    assert empty["latency_samples"] == 0


def test_memory_does_not_grow_with_the_values() -> None:
    h = Histogram()
    for i in range(100_000):
        h.record_ns(i * 7919)
    assert len(h.counts) == BUCKETS
    assert h.count == 100_000
