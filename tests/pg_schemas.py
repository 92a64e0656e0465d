"""Fresh PostgreSQL schemas for tests, dropped afterwards.

The server is the machine's own (``CKPTLOG_PG_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``): the tests use it for real, never a mock, and
fail (not skip) when it cannot be reached.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import psycopg
from psycopg import sql

PG_URL = os.environ.get("CKPTLOG_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def schema_for(key: str) -> str:
    return "t_" + hashlib.blake2b(key.encode(), digest_size=10).hexdigest()


class PgSchemas:
    """Hands out one schema per path (the same path, the same schema: a reopen) and drops
    every schema it handed out in :meth:`drop_all`."""

    def __init__(self, base_url: str = PG_URL) -> None:
        self.base_url = base_url
        self.names: list[str] = []

    def url(self, path: Path | str, **params: str) -> str:
        name = schema_for(str(path))
        if name not in self.names:
            self.names.append(name)
        extra = "".join(f"&{k}={v}" for k, v in params.items())
        return f"{self.base_url}?schema={name}{extra}"

    def drop_all(self) -> None:
        if not self.names:
            return
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            for name in self.names:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )
        self.names.clear()
