"""``ckptlog stats``: counts and sizes of a log."""

from __future__ import annotations

import argparse

from eventlog import forensics as fx
from eventlog.cli.context import OK, Ctx
from eventlog.cli.render import fmt_time, table, to_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    """No options beyond the common ones."""


def run(ctx: Ctx) -> int:
    cl = ctx.open().log
    st = fx.stats(cl)
    if ctx.json:
        ctx.out.write(to_json(st) + "\n")
        return OK
    fmt = st.format
    rows = [
        ["path", st.path],
        ["frames", f"{st.frames:,}"],
        ["streams", f"{st.streams:,}"],
        ["live invocations", f"{st.invocations:,}"],
        ["streams without head", f"{st.streams_without_head:,} (deleted, or events only)"],
        ["snapshots", f"{st.snapshots:,}"],
        ["data file", f"{st.data_file_bytes:,} bytes ({st.bytes_per_frame:,.1f} per frame)"],
        ["oldest head saved", fmt_time(st.oldest_saved_at)],
        ["newest head saved", fmt_time(st.newest_saved_at)],
        ["format", f"version {fmt.get('format_version', '?')}, {fmt.get('checksum', '?')}, "
                   f"{fmt.get('compression', '?')} from "
                   f"{fmt.get('compress_threshold_bytes', '?')} B"],
        ["created", fmt_time(fmt.get("created_at"))],
    ]  # fmt: skip
    table(None, rows, "ll", ctx.out, colour=ctx.style.enabled)
    if st.largest:
        ctx.out.write("largest streams:\n")
        table(
            ["  INVOCATION", "FRAMES"],
            ([f"  {x.invocation_id}", f"{x.frames:,}"] for x in st.largest),
            "lr",
            ctx.out,
            colour=ctx.style.enabled,
        )
    return OK
