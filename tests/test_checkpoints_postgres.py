"""The checkpointer contract (eventlog.testing) on PostgreSQL, sync and async, opened by URL.

Each test works in a schema of its own on the machine's real server, dropped afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_schemas import PgSchemas

from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.testing import CheckpointerContract, CheckpointLogContract


class TestCheckpointLogPostgres(CheckpointLogContract):
    persistent = True
    schemas: PgSchemas

    @pytest.fixture(autouse=True)
    def _fresh_schemas(self, pg_schemas: PgSchemas) -> None:
        self.schemas = pg_schemas

    def make_log(self, tmp_path: Path, **kw: Any) -> CheckpointLog:
        return CheckpointLog.open(self.schemas.url(tmp_path), **kw)


class TestCheckpointerPostgres(CheckpointerContract):
    persistent = True
    schemas: PgSchemas

    @pytest.fixture(autouse=True)
    def _fresh_schemas(self, pg_schemas: PgSchemas) -> None:
        self.schemas = pg_schemas

    def make_checkpointer(self, tmp_path: Path, **kw: Any) -> Checkpointer:
        return Checkpointer.open(self.schemas.url(tmp_path), **kw)
