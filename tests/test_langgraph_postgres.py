"""LangGraph's own checkpointer conformance suite against ``LmdbSaver`` opened by a
``postgresql://`` URL: the saver's backend-neutral form on the real server (a fresh schema per
capability suite, dropped afterwards)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from pg_schemas import PgSchemas

from eventlog.integrations.langgraph import LmdbSaver


def test_validate_on_postgres(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    counter = itertools.count()
    opened: list[LmdbSaver] = []

    @checkpointer_test(name="LmdbSaver-postgres")
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        url = pg_schemas.url(tmp_path / f"suite-{next(counter)}")
        saver = LmdbSaver.open(url, durability="process")
        opened.append(saver)
        yield saver
        report = saver.verify()  # the views still equal the fold of the log
        assert report.ok, str(report)
        saver.close()

    report = asyncio.run(validate(factory))
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert not failures, failures
    assert report.conformance_level() == "FULL"
    total = sum(r.tests_passed for r in report.results.values())
    assert total == 81
    assert sum(r.tests_failed + r.tests_skipped for r in report.results.values()) == 0
    assert opened
    assert all(s.log.closed for s in opened)
