"""``python -m eventlog.serve``: the web viewer, now eventlog.viewer (its server and API).

Kept so the documented command and ``eventlog.serve.make_server`` keep working; import from
:mod:`eventlog.viewer.server` in new code.
"""

from __future__ import annotations

import sys

from eventlog.read.values import CONTAINER_ITEMS, STRING_CHARS, TREE_DEPTH, subvalue, tree
from eventlog.viewer.api import BINS_MAX, INDEX_BUDGET_S, PAGE_MAX, RECORD_CACHE, BadRequest, Viewer
from eventlog.viewer.server import (
    CSP,
    DEFAULT_HOST,
    DEFAULT_PORT,
    STATIC,
    TOKEN_COOKIE,
    ServeError,
    ViewerServer,
    add_arguments,
    allowed_hosts,
    main,
    make_server,
    run,
)

__all__ = [
    "BINS_MAX",
    "CONTAINER_ITEMS",
    "CSP",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "INDEX_BUDGET_S",
    "PAGE_MAX",
    "RECORD_CACHE",
    "STATIC",
    "STRING_CHARS",
    "TOKEN_COOKIE",
    "TREE_DEPTH",
    "BadRequest",
    "ServeError",
    "Viewer",
    "ViewerServer",
    "add_arguments",
    "allowed_hosts",
    "main",
    "make_server",
    "run",
    "subvalue",
    "tree",
]

if __name__ == "__main__":
    sys.exit(main())
