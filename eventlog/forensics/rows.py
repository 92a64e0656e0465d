"""verify: the core checks plus every view's rows against the fold of its streams."""

from __future__ import annotations

from eventlog import views
from eventlog.checkpoint_view import verify_rows
from eventlog.forensics.common import (
    Progress,
    Records,
)
from eventlog.reports import Problem, VerifyReport

# -- verify: the core checks plus every materialized row against the fold ---------------------


def verify(
    cl: Records,
    progress: Progress | None = None,
    rows_progress: Progress | None = None,
) -> VerifyReport:
    """The core checks (checksums, chains, seqs, index; ``progress``) plus every materialized
    row against the fold of its stream (``rows_progress``)."""
    return views.verify_log(cl.log, progress, rows_progress)


def verify_materialized(cl: Records, progress: Progress | None = None) -> list[Problem]:
    """Every materialized row against the fold of its stream's frames, in one read txn."""
    return verify_rows(cl.log, progress)
