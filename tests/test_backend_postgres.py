"""The PostgreSQL backend against the shared backend contract, plus what only it has.

Runs against the machine's real server (see ``pg_schemas``); each test works in schemas of its
own, dropped afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_schemas import PgSchemas

from backends.postgres import PostgresBackend
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
