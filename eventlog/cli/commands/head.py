"""``ckptlog head``: one digest committing to every stream's head and the frame count.

Write it somewhere the log's host cannot rewrite (a ticket, a git commit, a timestamping
service); ``ckptlog verify PATH --expect-head DIGEST`` later fails if anything acknowledged
before it was removed or rolled back, and passes on a log that only grew (eventlog.anchor).
"""

from __future__ import annotations

import argparse

from eventlog import anchor
from eventlog.cli.context import OK, Ctx
from eventlog.cli.render import to_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Print one token (ckh1:GSEQ:FRAMES:STREAMS:HASH) committing to every stream's newest "
        "frame (seq and checksum) and the frame count. Anchor it elsewhere; check it later "
        "with `ckptlog verify PATH --expect-head TOKEN` (a log that only grew still passes)."
    )


def run(ctx: Ctx) -> int:
    digest = anchor.take(ctx.open().log.log)
    if ctx.json:
        doc = {
            "head": digest.token,
            "global_seq": digest.global_seq,
            "frames": digest.frames,
            "streams": digest.streams,
            "blake2b_256": digest.digest,
        }
        ctx.out.write(to_json(doc) + "\n")
    else:
        ctx.out.write(digest.token + "\n")
    return OK
