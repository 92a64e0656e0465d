"""``ckptlog export``: history as JSON Lines, each frame as stored or the value after it, or
as Parquet tables an analyst queries with DuckDB or pandas (``--format parquet``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import IO, Any, Final

from eventlog import forensics as fx
from eventlog import read
from eventlog.checkpoints import CheckpointLog
from eventlog.cli import options
from eventlog.cli.context import USAGE, CliError, Ctx, seq_arg, split
from eventlog.cli.render import iso_time, to_json, unreadable_doc
from eventlog.errors import InvalidArgument
from eventlog.read import parquet
from eventlog.read.forks import origin_doc
from eventlog.read.text import parse_time
from eventlog.streams import StreamInfo

EXPORT_FORMATS: Final = ("jsonl-frames", "jsonl", "parquet")
EXPORT_WARN_FACTOR: Final = 10  # warn when --format jsonl would write this many times the log


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.target(p, optional=True)
    p.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="jsonl-frames",
        help="jsonl-frames (default): each stored frame as written (deltas stay deltas: "
        "small, lossless); jsonl: the whole record after every save (O(saves x record "
        "size): narrow it with the options below); parquet: `export PATH DEST --format "
        "parquet` writes the tables saves, frames, instances, lg_checkpoints, lg_writes and "
        "events of the whole log into the new directory DEST (`ckptlog sql PATH --schema` "
        "lists their columns; needs pip install 'ckptlog[sql]')",
    )
    options.seq_range(p, "from seq SEQ (with an ID)", "up to seq SEQ (with an ID)")
    options.window(p, "frames")
    p.add_argument("--kind", action="append", metavar="KIND", help="only these kinds (repeatable)")
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")


def run(ctx: Ctx) -> int:  # noqa: PLR0915 - options read top to bottom
    a = ctx.args
    if a.format == "parquet":
        return _parquet(ctx)
    if ctx.json:
        raise CliError(
            "export always writes JSON Lines; --json has no meaning here: drop it (choose what "
            "each line holds with --format jsonl-frames, the default, or --format jsonl)",
            USAGE,
        )
    cl = ctx.open().log
    found = ctx.resolve(required=False)
    one = found[0] if found is not None else None
    if (a.from_seq or a.to_seq) and one is None:
        raise CliError("--from/--to are seqs of one invocation: give its ID too", USAGE)
    streams = [found] if found is not None else [(s, None) for s in cl.log.streams()]
    last = fx.last_seq(cl, one) if one is not None else 0
    from_seq = seq_arg(a.from_seq, last, one) if a.from_seq and one is not None else 1
    to_seq = seq_arg(a.to_seq, last, one) if a.to_seq and one is not None else None
    since = parse_time(a.since) if a.since else None
    until = parse_time(a.until) if a.until else None
    kinds = frozenset(split(a.kind)) if a.kind else None
    if a.format == "jsonl":
        _warn_if_huge(ctx, cl, [s for s, _ in streams])
    target: IO[bytes] | _TextBytes
    close = False
    if a.out and a.out != "-":
        try:
            target = open(a.out, "wb")  # noqa: SIM115 - closed below, after the export
        except OSError as e:
            raise CliError(f"cannot write --out {a.out!r}: {e.strerror or e}", USAGE) from e
        close = True
    else:
        ctx.out.flush()
        target = sys.stdout.buffer if ctx.out is sys.stdout else _TextBytes(ctx.out)  # type: ignore[attr-defined]
    total = sum(cl.log.last_seq(s) for s, _ in streams)
    bar = ctx.progress("export")
    jl = fx.JsonLines()
    lines = written = done = 0
    try:
        for stream, known in streams:
            info = known if known is not None else read.describe(cl.log, stream)
            for doc in _docs(ctx, info, a.format, from_seq, to_seq):
                done += 1
                if done % fx.PROGRESS_EVERY_FRAMES == 0:
                    bar(done, total)
                if "unreadable" not in doc and not (
                    fx.in_window(doc["saved_at"], since, until)
                    and (kinds is None or doc["kind"] in kinds)
                ):
                    continue
                line = jl.line(doc)
                target.write(line)
                lines += 1
                written += len(line)
        bar(done, total)
    finally:
        bar.close()
        if close:
            target.close()
        else:
            target.flush()
    where = f" to {a.out}" if close else ""
    ctx.err.write(
        f"exported {lines:,} lines ({written:,} bytes) of {len(streams):,} invocation(s){where}\n"
    )
    return ctx.status()


def _parquet(ctx: Ctx) -> int:
    """``export PATH DEST --format parquet`` (or ``--out DEST``): every table, whole log."""
    a = ctx.args
    dest = a.out or a.invocation
    if a.out and a.invocation:
        raise CliError("give DEST once: `export PATH DEST --format parquet`", USAGE)
    if not dest or dest == "-":
        raise CliError(
            "--format parquet writes a directory of tables: `export PATH DEST --format parquet`",
            USAGE,
        )
    narrowing = [o for o in ("thread", "ns", "from_seq", "to_seq", "since", "until", "kind")
                 if getattr(a, o, None)]  # fmt: skip
    if narrowing or ctx.json:
        given = ", ".join("--" + o.replace("_seq", "") for o in narrowing) or "--json"
        raise CliError(
            f"--format parquet exports the whole log; {given} does not apply (filter the "
            'tables in the query instead: `ckptlog sql DEST "SELECT ... WHERE ..."`)',
            USAGE,
        )
    try:
        parquet.require("export --format parquet")
        cl = ctx.open().log
        bar = ctx.progress("export")
        try:
            rows = parquet.export_parquet(cl.log, dest, progress=bar)
        finally:
            bar.close()
    except InvalidArgument as e:
        raise CliError(str(e), USAGE) from e
    counts = ", ".join(f"{t} {n:,}" for t, n in rows.items())
    ctx.err.write(f"exported to {dest}: {counts} row(s)\n")
    return ctx.status()


def _docs(
    ctx: Ctx, info: StreamInfo, fmt: str, from_seq: int, to_seq: int | None
) -> Iterator[dict[str, Any]]:
    """The lines of one stream: each frame as stored (``jsonl-frames``), or the record (a
    view's value) after it (``jsonl``); unreadable seqs as ``{"unreadable": ...}``."""
    assert ctx.opened is not None
    stream = info.stream
    if not info.records:
        for v in read.steps(ctx.opened.log.log, stream, info):
            if isinstance(v, fx.Unreadable):
                ctx.report_unreadable(v)
                yield {"invocation_id": stream, **unreadable_doc(v)}
                continue
            if v.seq < from_seq or (to_seq is not None and v.seq > to_seq):
                continue
            doc = _head(stream, v.seq, v.global_seq, v.saved_at, v.kind, v.checksum)
            doc["frame"] = v.frame_type
            if fmt == "jsonl-frames":
                doc["content"] = fx.frame_content(v.frame)
            else:
                doc["view"] = v.value
            yield doc
        return
    for item in fx.walk(ctx.opened.log.log, stream, from_seq=from_seq, to_seq=to_seq,
                        tolerant=True):  # fmt: skip
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            yield {"invocation_id": stream, **unreadable_doc(item)}
            continue
        doc = _head(stream, item.seq, item.global_seq, item.saved_at, item.kind, item.checksum)
        doc["frame"] = item.frame_type
        if item.forked is not None:
            doc["forked_from"] = origin_doc(item.forked)
        if fmt == "jsonl-frames" or not item.is_record:
            doc["content"] = fx.frame_content(item.frame)
        else:
            record = item.record()
            doc["record"] = fx.record_content(record) if record is not None else None
        yield doc


def _head(
    stream: str, seq: int, gseq: int, saved_at: float, kind: str, checksum: bytes
) -> dict[str, Any]:
    return {
        "invocation_id": stream,
        "seq": seq,
        "global_seq": gseq,
        "saved_at": saved_at,
        "saved_at_iso": iso_time(saved_at),
        "kind": kind,
        "checksum": checksum.hex(),
    }


def _warn_if_huge(ctx: Ctx, cl: CheckpointLog, streams: list[str]) -> None:
    """``--format jsonl`` writes the whole record after every save: O(saves x record size).
    Estimate it from each invocation's latest record; warn when it dwarfs the log."""
    estimate = 0
    for stream in streams:
        record = cl.load(stream)
        if record is not None:
            size = len(to_json(fx.record_content(record)))
            estimate += cl.log.last_seq(stream) * size
    check = fx.data_file_check(ctx.args.path)
    file_bytes = check.file_bytes if check is not None else 0
    log_bytes = max(min(file_bytes, cl.log.backend.used_bytes()) if file_bytes else 0, 1)
    if estimate > EXPORT_WARN_FACTOR * log_bytes:
        ctx.warn(
            f"--format jsonl writes the whole record after every save: about {estimate:,} "
            f"bytes, {estimate / log_bytes:,.0f} times the log's {log_bytes:,}; narrow it "
            "(an ID, --from/--to, --since/--until, --kind) or use the default --format "
            "jsonl-frames (each frame as stored, lossless)"
        )


class _TextBytes:
    """Bytes written to a text stream (tests capture stdout as text)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        self.stream.write(data.decode("utf-8"))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        self.flush()
