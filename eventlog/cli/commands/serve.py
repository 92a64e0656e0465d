"""``ckptlog serve``: the read-only web viewer (eventlog.viewer) of a log."""

from __future__ import annotations

import argparse

from eventlog.cli.context import Ctx


def add_arguments(p: argparse.ArgumentParser) -> None:
    from eventlog.viewer import server  # noqa: PLC0415 - stdlib only; loads when asked for

    server.add_arguments(p)


def run(ctx: Ctx) -> int:
    from eventlog.viewer import server  # noqa: PLC0415 - the web viewer loads only when asked for

    return server.run(ctx.args, ctx.out, ctx.err)
