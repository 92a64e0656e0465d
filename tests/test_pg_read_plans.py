"""PostgreSQL reads whose cost does not grow with the table they read (issue #27).

Counted without timing: the pages the server touches for one statement, from its own
``EXPLAIN (ANALYZE, BUFFERS)`` of the statement the backend sent, with the same parameters,
on a table of a few rows and on one of thousands (analyzed, as autovacuum leaves it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pg_schemas import PgSchemas

from backends import postgres
from backends.postgres import PostgresBackend

FILLER_BYTES = 1_500  # stored in the heap (under TOAST's threshold): ~5 rows a page


def _pages(backend: PostgresBackend, call: Callable[[], object], mp: pytest.MonkeyPatch) -> int:
    """Shared buffers (hit or read) of the one statement ``call`` sends, as the server runs it."""
    sent: list[tuple[str, Any]] = []
    real = postgres._PgRead._q

    def spy(self: Any, query: str, params: Any = ()) -> Any:
        sent.append((query, params))
        return real(self, query, params)

    with mp.context() as m:
        m.setattr(postgres._PgRead, "_q", spy)
        call()
    assert len(sent) == 1, [q for q, _ in sent]
    query, params = sent[0]
    conn = backend._reader()
    try:
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params, binary=True
        ).fetchone()
    finally:
        backend._give_back(conn)
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


@pytest.mark.parametrize("skip", [False, True])
def test_a_linked_read_touches_the_same_pages_whatever_the_rows_beside_it(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skip: bool
) -> None:
    """``get_many_linked`` (a LangGraph latest read: its ``c`` and ``w`` rows and the data rows
    its link row names) probes the named keys through the primary key. It was planned as a
    hash join over a scan of the whole table, so on a thread with many keyframe rows beside
    its latest ones every latest read scanned them all (52 pages against 8 at 5,000 steps)."""
    backend = PostgresBackend(pg_schemas.url(tmp_path), tables=("t",))
    link, prefix = b"k-link", b"d"
    named = [b"%08d" % i for i in (3, 7)]
    try:
        with backend.write() as w:
            w.put("t", b"c-row", b"head")
            w.put("t", link, b"\x00" + b"".join(named))
            for n in named:
                w.put("t", prefix + n, b"data " + n)

        def read() -> tuple[list[bytes | None], list[tuple[bytes, bytes]]]:
            with backend.read() as r:
                return r.get_many_linked(
                    "t", [b"c-row"], link, prefix, 8, [prefix + named[0]] if skip else ()
                )

        def analyze() -> None:
            conn = backend._reader()
            try:
                conn.execute(f"ANALYZE {postgres._Sql(backend.schema, 't').ident}")
            finally:
                backend._give_back(conn)

        expected = [(prefix + n, b"data " + n) for n in named[1 if skip else 0 :]]
        pages = []
        for rows_beside in (500, 5_000):  # rows of the table the link row does not name
            with backend.write() as w:
                w.put_many("t", [(b"f%08d" % i, bytes(FILLER_BYTES)) for i in range(rows_beside)])
            analyze()
            found, rows = read()
            assert found == [b"head"]
            assert sorted(rows) == expected
            pages.append(_pages(backend, read, monkeypatch))
        assert pages[1] <= pages[0] + 2, pages  # an index level at most, never the heap
    finally:
        backend.close()


def test_a_named_read_of_spans_touches_the_same_pages_whatever_the_rows_beside_it(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get_named_spans`` (a checkpoint ``load``: the stream's id, then its head row,
    positions and bodies under that id) reaches every span through the primary key: the
    pages it touches do not grow with the other streams' rows."""
    tables = ("h", "p", "b")
    backend = PostgresBackend(pg_schemas.url(tmp_path), tables=("n", *tables))
    sid = (5).to_bytes(8, "big")
    spans = [("h", b"", b"", b"\x00"), ("p", b"", b"", b"\xff" * 5), ("b", b"", b"p", b"s\x00")]
    want = [
        [(sid, b"head")],
        [(sid + i.to_bytes(4, "big"), b"pos") for i in range(3)],
        [(sid + b"p", b"parents"), (sid + b"s", b"state")],
    ]
    try:
        with backend.write() as w:
            w.put("n", b"inv", sid)
            for (table, *_), rows in zip(spans, want, strict=True):
                w.put_many(table, rows)
        pages = []
        for others in (500, 5_000):  # rows of other streams, before and after this one's
            with backend.write() as w:
                for table in tables:
                    other = [
                        n.to_bytes(8, "big") + b"s" for n in (*range(others), *range(6, 6 + others))
                    ]
                    w.put_many(table, [(k, bytes(FILLER_BYTES)) for k in other if k[:8] != sid])
            conn = backend._reader()
            try:
                for table in tables:
                    conn.execute(f"ANALYZE {postgres._Sql(backend.schema, table).ident}")
            finally:
                backend._give_back(conn)

            def read() -> tuple[bytes | None, list[list[tuple[bytes, bytes]]]]:
                with backend.read() as r:
                    return r.get_named_spans("n", b"inv", spans)

            assert read() == (sid, want)
            pages.append(_pages(backend, read, monkeypatch))
        assert pages[1] <= pages[0] + 3, pages  # an index level at most, never the heap
    finally:
        backend.close()
