"""``ckptlog search``: every frame, in every stream, whose saved content holds TEXT (a value,
an id, a correlation id): what it stores for a checkpoint stream (a delta holds what changed,
a snapshot everything), what it changed for any other stream."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

from eventlog import forensics as fx
from eventlog import read
from eventlog.cli.context import USAGE, CliError, Ctx
from eventlog.cli.render import brief, escape, fmt_time, iso_time, table, to_json
from eventlog.read.diffs import value_changes
from eventlog.streams import StreamInfo


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", metavar="TEXT", help="a value, an id or a correlation id")
    p.add_argument("--first", action="store_true", help="only the first frame of each stream")
    p.add_argument("-n", "--limit", type=int, metavar="N", help="stop after N matches")


def run(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    text = a.text
    if not text:
        raise CliError("search needs a non-empty TEXT", USAGE)
    listed = {r.row.invocation_id: r for r in read.listing(cl)}
    hits: list[dict[str, Any]] = []
    for stream in cl.log.streams():
        entry = listed.get(stream)
        row = entry.row if entry is not None else None
        info = entry.info if entry is not None else read.describe(cl.log, stream)
        corr = row.correlation_id if row is not None else None
        if text in (stream, info.display) or text == corr:
            last = cl.log.last_seq(stream)
            hits.append(
                {"invocation_id": stream, "seq": last, "saved_at": row.last_saved_at if row
                 else None, "saved_at_iso": iso_time(row.last_saved_at) if row else None,
                 "kind": "invocation", "match": "correlation id" if text == corr
                 else "invocation id"}
            )  # fmt: skip
            continue  # the whole stream is a match
        for seq, saved_at, kind, content in _items(ctx, info):
            where = _found_in(text, content)
            if where is None:
                continue
            hits.append(
                {"invocation_id": stream, "seq": seq, "saved_at": saved_at,
                 "saved_at_iso": iso_time(saved_at), "kind": kind, "match": where}
            )  # fmt: skip
            if a.first:
                break
        if a.limit is not None and len(hits) >= a.limit:
            del hits[a.limit :]
            break
    if ctx.json:
        ctx.out.write(to_json(hits) + "\n")
    elif not hits:
        ctx.out.write(f"no frame holds {text!r}\n")
    else:
        names = {s: e.info.display for s, e in listed.items()}
        table(
            ["INVOCATION", "SEQ", "SAVED AT (UTC)", "KIND", "MATCH"],
            (
                [escape(names.get(h["invocation_id"], h["invocation_id"])), str(h["seq"]),
                 fmt_time(h["saved_at"]), escape(h["kind"]), escape(h["match"])]
                for h in hits
            ),
            "lrlll",
            ctx.out,
            colour=ctx.style.enabled,
        )  # fmt: skip
    return ctx.status()


def _items(ctx: Ctx, info: StreamInfo) -> Iterator[tuple[int, float, str, Any]]:
    """``(seq, saved_at, kind, content)`` of each readable frame of the stream."""
    assert ctx.opened is not None
    if not info.records:
        before: Any = None
        for v in read.steps(ctx.opened.log.log, info.stream, info):
            if isinstance(v, fx.Unreadable):
                ctx.report_unreadable(v)
                continue
            changes = value_changes(before, v.value)
            before = v.value
            yield v.seq, v.saved_at, v.kind, {c.path: c.new for c in changes if c.op != "removed"}
        return
    for item in fx.read_frames(ctx.opened.log.log, info.stream):
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            continue
        frame = item.frame
        content = fx.plain(fx.frame_content(frame))
        yield item.seq, fx.frame_saved_at(frame), fx.frame_kind(frame), content


def _found_in(text: str, content: Any, path: str = "") -> str | None:
    """``path = value`` of the first value in ``content`` that is ``text`` (a number, true,
    false, null as written) or a string holding it; ``None`` when none is."""
    if isinstance(content, dict):
        for key, value in content.items():
            sub = f"{path}.{key}" if path else str(key)
            found = _found_in(text, value, sub)
            if found is not None:
                return found
        return None
    if isinstance(content, (list, tuple)):
        for i, value in enumerate(content):
            found = _found_in(text, value, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(content, str):
        hit = text in content
    elif content is None or isinstance(content, (bool, int, float)):
        hit = text == json.dumps(content)
    else:
        hit = False
    return f"{path or '(value)'} = {brief(content)}" if hit else None
