"""The PostgreSQL backend against the shared backend contract, plus what only it has.

Runs against the machine's real server (see ``pg_schemas``); each test works in schemas of its
own, dropped afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_schemas import PgSchemas

from backends.postgres import PostgresBackend, _PgRead
from backends.testing import BackendContract

TABLES = ("a", "b")


class TestPostgresBackend(BackendContract):
    schemas: PgSchemas

    @pytest.fixture(autouse=True)
    def _fresh_schemas(self, pg_schemas: PgSchemas) -> None:
        self.schemas = pg_schemas

    def make_backend(self, tmp_path: Path, **kw: Any) -> PostgresBackend:
        kw.setdefault("tables", TABLES)
        return PostgresBackend(self.schemas.url(tmp_path), **kw)

    def test_get_many_equals_get_for_each_key(self, tmp_path: Path) -> None:
        backend = self.make_backend(tmp_path)
        try:
            with backend.write() as w:
                for i in range(20):
                    w.put("a", b"k%02d" % i, b"v%d" % i)
                w.put("a", b"\x00", b"")
            keys = [b"k03", b"missing", b"k03", b"\x00", b"k19", b"k" * 600, b"k00"]
            with backend.read() as r:
                assert r.get_many("a", keys) == [r.get("a", k) for k in keys]
                assert r.get_many("a", keys)[:4] == [b"v3", None, b"v3", b""]
                assert r.get_many("b", keys) == [None] * len(keys)
                assert r.get_many("a", []) == []
        finally:
            backend.close()

    def test_bytea_orders_like_lmdb(self, tmp_path: Path) -> None:
        """The server's own comparison of bytea is bytewise unsigned, shorter prefix first."""
        backend = self.make_backend(tmp_path)
        try:
            keys = [b"\xff", b"\x00", b"\x7f", b"\x80", b"a", b"a\x00", b"\x00\xff", b"\x01"]
            with backend.write() as w:
                for k in keys:
                    w.put("a", k, b"")
            with backend.read() as r:
                assert isinstance(r, _PgRead)
                rows = r._q('SELECT k FROM {} ORDER BY k'.format(f'"{backend.schema}"."a"'))
            assert [k for (k,) in rows] == sorted(keys)
        finally:
            backend.close()
