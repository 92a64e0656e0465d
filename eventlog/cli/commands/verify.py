"""``ckptlog verify``: checksums, hash chains, the index and every view's rows."""

from __future__ import annotations

import argparse

from eventlog import anchor
from eventlog import forensics as fx
from eventlog.cli.context import OK, PROBLEMS, UNREADABLE, USAGE, CliError, Ctx, is_permission
from eventlog.cli.render import print_verify
from eventlog.errors import CheckpointError
from eventlog.reports import Problem, VerifyReport


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--expect-head",
        metavar="DIGEST",
        help="also fail unless the log extends this `ckptlog head` digest (nothing acknowledged "
        "before it was taken was removed or rolled back; growth since is fine)",
    )


def run(ctx: Ctx) -> int:
    expected = anchor.parse(ctx.args.expect_head) if ctx.args.expect_head else None
    try:
        opened = ctx.open()
    except CliError as e:
        check = fx.data_file_check(ctx.args.path)
        cause = e.__cause__
        if _needs_chain_key(cause):
            raise CliError(
                f"{ctx.args.path!r} was written with a chain key (keyed checksums): pass the "
                "key with --chain-key-file FILE" + (
                    " (the one given is not it)" if ctx.args.chain_key_file else ""),
                USAGE,
            ) from cause  # fmt: skip
        if e.code != UNREADABLE or check is None or is_permission(cause):
            raise  # not an LMDB file at all, or not ours to read: nothing to verify
        # An LMDB file that does not open: name what is wrong with it, as a verify finding.
        problems = [Problem("storage", str(e))]
        if check.short:
            problems.insert(0, truncated(check))
        print_verify(ctx, VerifyReport(problems=problems), finished=False)
        return PROBLEMS
    frames_bar = ctx.progress("verify")
    rows_bar = ctx.progress("heads")
    try:
        report = fx.verify(opened.log, frames_bar, rows_bar)
    finally:
        frames_bar.close()
        rows_bar.close()
    report.problems[:0] = opened.problems
    if expected is not None:
        report.problems.extend(anchor.check(opened.log.log, expected))
    if ctx.args.chain_key_file and report.frames and _all_checksums_fail(report):
        report = VerifyReport(
            frames=report.frames,
            streams=report.streams,
            problems=[
                Problem(
                    "chain-key",
                    f"wrong chain key: every one of the {report.frames:,} frames fails its "
                    "keyed checksum with the key in --chain-key-file, which a damaged or "
                    "altered log does not do; verify again with the key the log was written "
                    "with",
                )
            ],
        )
    print_verify(ctx, report)
    return OK if report.ok else PROBLEMS


def _needs_chain_key(e: BaseException | None) -> bool:
    """The log's checksums are keyed but no key (or a log written without one, and a key)."""
    return type(e) is CheckpointError and "chain_key" in str(e)


def _all_checksums_fail(report: VerifyReport) -> bool:
    """Every frame fails its checksum: the key is wrong (damage is never that uniform)."""
    failed = {(p.stream, p.seq) for p in report.problems if p.kind == "checksum"}
    return len(failed) >= report.frames


def truncated(check: fx.DataFileCheck) -> Problem:
    missing = check.used_bytes - check.file_bytes
    return Problem(
        "truncated",
        f"{check.path} is {check.file_bytes:,} bytes, shorter than the {check.used_bytes:,} its "
        f"last transaction (txn {check.txn_id}) uses: {missing:,} bytes are missing; restore "
        "the file from a backup",
    )
