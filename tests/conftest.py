"""Shared test configuration: command-line options, hypothesis profiles, common fixtures.

Sections are kept apart (options, profiles, fixtures) so new fixtures slot in without reshuffling.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    # Imported where used: a package mid-edit must not stop backend tests from collecting.
    from eventlog.log import EventLog

# -- command-line options ----------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="run crash and stress tests at full size (hundreds of kills) instead of smoke size",
    )


# -- hypothesis profiles -----------------------------------------------------------------------

# No deadline in either profile: examples touch a real disk (fsync), whose latency is not ours.
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    print_blob=True,  # a failing CI run prints the @reproduce_failure blob
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def long_run(request: pytest.FixtureRequest) -> bool:
    """``True`` when pytest was given ``--long``: stress tests then run at full size."""
    return bool(request.config.getoption("--long"))


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    """A path where no log exists yet (``EventLog.open`` creates the directory)."""
    return tmp_path / "log"


@pytest.fixture
def open_log(log_path: Path) -> Iterator[Callable[..., EventLog]]:
    """``open_log(**options)`` opens the log at ``log_path``; every log it opened is closed at
    teardown, so a failing test does not leave an LMDB environment open in the process."""
    from eventlog.log import EventLog  # noqa: PLC0415 - see the TYPE_CHECKING import

    opened: list[EventLog] = []

    def _open(path: Path | None = None, **options: Any) -> EventLog:
        log = EventLog.open(path or log_path, **options)
        opened.append(log)
        return log

    yield _open
    for log in reversed(opened):
        log.close()


@pytest.fixture
def pg_schemas() -> Iterator[Any]:
    """A :class:`pg_schemas.PgSchemas`: fresh PostgreSQL schemas, each dropped after the test."""
    from pg_schemas import PgSchemas  # noqa: PLC0415 - psycopg only for the tests that use it

    schemas = PgSchemas()
    yield schemas
    schemas.drop_all()


@pytest.fixture
def pg_statements() -> Iterator[list[str]]:
    """The statements PostgreSQL readers send from now on, in order (``"BEGIN"`` for each read
    transaction begun); clear it to count one call's."""
    from benchmarks.pg_reads import sent_statements  # noqa: PLC0415 - psycopg only here

    with sent_statements() as statements:
        yield statements
