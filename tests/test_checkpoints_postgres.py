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


@pytest.mark.parametrize("changed", [False, True])
def test_a_fan_out_record_loads_whole_whether_or_not_it_changed_after_its_one_statement(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: bool
) -> None:
    """On PostgreSQL a record's head row, positions and bodies come from one statement and
    its fan-out rows from a read transaction after it. The transaction reads the head row
    again: unchanged, only the fan-outs are read; changed meanwhile (a save landed between
    the two), the whole record is read again in the transaction, never a mix of the two."""
    from eventlog import checkpoints  # noqa: PLC0415
    from eventlog.testing import NOT_STARTED, done, fan_out, make_record, pos  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    first = make_record(
        "job", positions=[pos("a", 0)], fan_outs=[fan_out("f", [done("r0"), NOT_STARTED])]
    )
    second = make_record(
        "job",
        at=2.0,
        positions=[pos("a", 0), pos("b", 1)],
        fan_outs=[fan_out("f", [done("r0"), done("r1")])],
    )
    with CheckpointLog.open(url) as writer, CheckpointLog.open(url) as reader:
        writer.save("job", first)
        real = checkpoints.read_head_now

        def racing(backend: Any, name: bytes) -> Any:
            got = real(backend, name)
            if changed:
                writer.save("job", second)
            return got

        monkeypatch.setattr(checkpoints, "read_head_now", racing)
        assert reader.load("job") == (second if changed else first)
