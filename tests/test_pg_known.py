"""What a PostgreSQL writer keeps of its own commits (``backends.postgres_known.Known``) and the
binary ``bytea[]`` arrays its statements carry, held to their rules written out one row at a
time, on any input (no server needed)."""

from __future__ import annotations

import struct
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from backends import postgres_known
from backends.postgres_batch import BYTEA_OID, bytea_array
from backends.postgres_known import Known

TABLES = ("a", "b", "c")
keys = st.tuples(st.sampled_from(TABLES), st.binary(min_size=1, max_size=3))
values = st.one_of(st.none(), st.binary(max_size=80))
commits = st.lists(
    st.tuples(st.dictionaries(keys, values, max_size=12), st.lists(st.sampled_from(TABLES))),
    max_size=6,
)


def _merge_row_by_row(
    known: OrderedDict[tuple[str, bytes], bytes | None],
    opaque: OrderedDict[tuple[str, bytes], None],
    appended: set[str],
    rows: dict[tuple[str, bytes], bytes | None],
    dropped: list[str],
) -> None:
    """The rules of ``Known.merge``, one row at a time (no bounds on what is kept)."""
    for t in dropped:
        for k in [k for k in known if k[0] == t]:
            del known[k]
        for k in [k for k in opaque if k[0] == t]:
            del opaque[k]
    for k, v in rows.items():
        if k[0] in appended:
            continue
        known.pop(k, None)
        if v is not None and len(v) > postgres_known.KNOWN_VALUE_BYTES_MAX:
            opaque[k] = None
            continue
        opaque.pop(k, None)
        known[k] = v


@settings(max_examples=300, deadline=None)
@given(commits=commits, appended=st.sets(st.sampled_from(TABLES), max_size=1), small=st.booleans())
def test_merge_keeps_what_the_row_by_row_rules_keep(
    commits: list[tuple[dict[tuple[str, bytes], bytes | None], list[str]]],
    appended: set[str],
    small: bool,
) -> None:
    limit = 8 if small else postgres_known.KNOWN_VALUE_BYTES_MAX  # some values too big to keep
    old = postgres_known.KNOWN_VALUE_BYTES_MAX
    postgres_known.KNOWN_VALUE_BYTES_MAX = limit
    try:
        known = Known()
        known.appended |= appended
        ref: OrderedDict[tuple[str, bytes], bytes | None] = OrderedDict()
        ref_opaque: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        for rows, dropped in commits:
            known.merge(dict(rows), dropped)
            _merge_row_by_row(ref, ref_opaque, appended, rows, dropped)
            assert list(known.rows.items()) == list(ref.items())  # order: least recent first
            assert list(known.opaque) == list(ref_opaque)
            assert known.size == sum(len(v) for v in ref.values() if v is not None)
    finally:
        postgres_known.KNOWN_VALUE_BYTES_MAX = old


def _array_item_by_item(items: list[bytes | None]) -> bytes:
    """PostgreSQL's binary array format, one element at a time."""
    if not items:
        return struct.pack("!iii", 0, 0, BYTEA_OID)
    nulls = int(any(v is None for v in items))
    out = struct.pack("!iiiii", 1, nulls, BYTEA_OID, len(items), 1)
    for v in items:
        out += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v
    return out


@settings(max_examples=300, deadline=None)
@given(items=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=20))
def test_bytea_arrays_are_postgresql_binary_arrays(items: list[bytes | None]) -> None:
    want = _array_item_by_item(items)
    assert bytes(bytea_array(items)) == want
    assert bytes(bytea_array(tuple(items))) == want
    assert bytes(bytea_array(iter(items))) == want  # any iterable, not only sized ones
    assert bytes(bytea_array(dict.fromkeys(x for x in items if x is not None))) == (
        _array_item_by_item(list(dict.fromkeys(x for x in items if x is not None)))
    )
