"""``ckptlog fork``: start a new invocation from the record as of one save of another.

It WRITES to PATH (one frame, the new invocation's first; nothing else is changed), the one
command besides ``compact`` and ``copy`` that writes anything; it opens the log as a writer
like any other process (LMDB: beside running writers; they are never blocked for long).
"""

from __future__ import annotations

import argparse

from eventlog.checkpoints import CheckpointLog
from eventlog.cli.context import OK, Ctx
from eventlog.cli.render import escape, to_json
from eventlog.read.forks import origin_doc
from eventlog.read.opening import chain_key_options

DESCRIPTION = (
    "WRITES to PATH: append one frame, the first of invocation NEW, holding the record of "
    "ID as of its save SEQ and where it came from (ID, SEQ and that frame's checksum; "
    "`ckptlog verify` checks the link). Resume NEW with the engine (openarmature: "
    "invoke(resume_invocation=NEW)); ID is not changed."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = DESCRIPTION
    p.add_argument("invocation", metavar="ID", help="the invocation to fork")
    p.add_argument("--at", metavar="SEQ", required=True, type=int, help="the seq of a save of ID")
    p.add_argument("--as", dest="new", metavar="NEW", required=True, help="the new invocation id")


def run(ctx: Ctx) -> int:
    a = ctx.args
    ctx.open()  # PATH must already be a log: a fork never creates one
    ctx.close()
    with CheckpointLog.open(a.path, **chain_key_options(a.chain_key_file)) as cl:
        origin = cl.fork(a.invocation, at=a.at, new_invocation_id=a.new)
    if ctx.json:
        doc = {"invocation_id": a.new, "forked_from": origin_doc(origin)}
        ctx.out.write(to_json(doc) + "\n")
        return OK
    ctx.out.write(
        f"forked {escape(a.invocation)}@{origin.seq} as {escape(a.new)} "
        f"(source frame checksum {origin.checksum.hex()})\n"
    )
    return OK
