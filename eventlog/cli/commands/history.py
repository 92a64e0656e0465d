"""``ckptlog history``: every frame of a stream, one row each, filtered as asked."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator
from typing import IO, Any, Final

from eventlog import forensics as fx
from eventlog import read
from eventlog.checkpoint_view import kind_label, step_nodes
from eventlog.cli import options
from eventlog.cli.context import USAGE, CliError, Ctx, split
from eventlog.cli.render import escape, fmt_time, step_doc, to_json, unreadable_doc, walk_doc
from eventlog.cli_render import Pager, pad
from eventlog.read.diffs import record_changes, touches, value_changes
from eventlog.read.text import fmt_gap, parse_time
from eventlog.streams import StreamInfo
from projections.history import ValueChange

KIND_CELLS: Final = len("fan_out_internal (compacted)")  # wider kinds push their row on


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.target(p)
    options.window(p)
    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help=f"only these kinds (repeatable or comma-separated): {', '.join(fx.HISTORY_KINDS)}",
    )
    p.add_argument("--node", metavar="NAME", help="only saves made by node NAME completing")
    p.add_argument(
        "--changed",
        metavar="PATH",
        help="only saves that changed PATH (state.results, process_items[3], "
        "channel_values.n, ...); with -n 1: the first seq that changed it (git log -S)",
    )
    p.add_argument(
        "--min-gap",
        type=float,
        metavar="SECONDS",
        help="only saves that came SECONDS or more after the one before (find the pauses)",
    )
    p.add_argument("-n", "--limit", type=int, metavar="N", help="print at most N rows")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N rows")
    p.add_argument("--reverse", action="store_true", help="newest first")
    options.no_pager(p)


@dataclasses.dataclass
class HistoryRow:
    """One row of ``history``: a frame of the stream (or a run of unreadable seqs)."""

    seq: int
    saved_at: float
    gap: float | None
    kind: str  # a save kind, delete, an integration's frame kind
    label: str  # kind as shown: a batch says how many saves (x256), an integration its frame
    frame: str
    stored_bytes: int
    nodes: tuple[str, ...]  # the node(s) whose completion made this save
    completed_nodes: int | None
    counts: dict[str, int]
    doc: dict[str, Any]  # the JSON object of the row
    unreadable: fx.Unreadable | None = None
    changed: tuple[ValueChange, ...] = ()  # what this frame changed (with --changed only)


def run(ctx: Ctx) -> int:
    cl = ctx.open().log
    a = ctx.args
    found = ctx.resolve()
    assert found is not None
    inv, info = found
    last = fx.last_seq(cl, inv)
    since = parse_time(a.since) if a.since else None
    until = parse_time(a.until) if a.until else None
    kinds = split(a.kind) if a.kind else None
    if kinds is not None and info.records:
        fx.check_kinds(kinds)
    for name, n in (("--limit", a.limit), ("--tail", a.tail)):
        if n is not None and n < 0:
            raise CliError(f"{name} needs a whole number >= 0, got {n}", USAGE)
    if a.min_gap is not None and not (math.isfinite(a.min_gap) and a.min_gap >= 0):
        raise CliError(f"--min-gap needs seconds >= 0, got {a.min_gap}", USAGE)
    rows = _rows(ctx, info, diffs=a.changed is not None)

    def wanted(row: HistoryRow) -> bool:
        if row.unreadable is not None:
            return True
        if not fx.in_window(row.saved_at, since, until):
            return False
        if kinds is not None and row.kind not in kinds:
            return False
        if a.node is not None and a.node not in row.nodes:
            return False
        if a.changed is not None and not any(touches(c, a.changed) for c in row.changed):
            return False
        return a.min_gap is None or (row.gap is not None and row.gap >= a.min_gap)

    selected: Iterable[HistoryRow] = (r for r in rows if wanted(r))
    if a.tail is not None:
        selected = collections.deque(selected, maxlen=a.tail)
    if a.reverse:
        selected = list(selected)[::-1]
    if a.limit is not None:
        selected = itertools.islice(selected, a.limit)
    pager = Pager(ctx.out, enabled=not ctx.json and not a.no_pager)
    out: IO[str] = pager.stream
    try:
        shown = _print(ctx, selected, out, last, not info.records)
    finally:
        pager.close()
    if not shown and not ctx.json:
        ctx.out.write("(no saves match)\n")
    return ctx.status()


def _rows(ctx: Ctx, info: StreamInfo, *, diffs: bool = False) -> Iterator[HistoryRow]:
    """Rows as the frames are read (nothing is collected first); ``diffs``: with the paths
    each frame changed."""
    return _record_rows(ctx, info.stream, diffs) if info.records else _step_rows(ctx, info, diffs)


def _step_rows(ctx: Ctx, info: StreamInfo, diffs: bool) -> Iterator[HistoryRow]:
    assert ctx.opened is not None
    previous: float | None = None
    before: Any = None
    for v in read.steps(ctx.opened.log.log, info.stream, info):
        if isinstance(v, fx.Unreadable):
            ctx.report_unreadable(v)
            previous = None
            yield _unreadable_row(v)
            continue
        gap = v.saved_at - previous if previous is not None else None
        previous = v.saved_at
        doc = step_doc(info, v, 0)
        del doc["last_seq"], doc["view"], doc["invocation_id"], doc["type"]
        doc["stored_bytes"] = v.stored_bytes
        doc["gap"] = gap
        changed = tuple(value_changes(before, v.value)) if diffs else ()
        before = v.value
        yield HistoryRow(
            v.seq, v.saved_at, gap, v.kind, f"{v.kind} {v.label}".strip(), v.frame_type,
            v.stored_bytes, v.nodes, None, {}, doc, None, changed,
        )  # fmt: skip


def _record_rows(ctx: Ctx, inv: str, diffs: bool) -> Iterator[HistoryRow]:
    assert ctx.opened is not None
    previous: float | None = None
    positions = 0
    for item in fx.walk(ctx.opened.log.log, inv, tolerant=True, counts=True, diffs=diffs):
        if isinstance(item, fx.Unreadable):
            ctx.report_unreadable(item)
            previous = None
            yield _unreadable_row(item)
            continue
        gap = item.saved_at - previous if previous is not None else None
        previous = item.saved_at
        nodes, positions = step_nodes(item, positions)
        label = kind_label(item) + (" (compacted)" if item.compacted is not None else "")
        if item.forked is not None:
            label += f" (fork of {item.forked.invocation_id}@{item.forked.seq})"
        doc = walk_doc(item)
        doc["gap"] = gap
        doc["node"] = ", ".join(nodes) or None
        yield HistoryRow(
            item.seq, item.saved_at, gap, item.kind, label, item.frame_type, item.stored_bytes,
            nodes, len(item.head.positions) if item.head is not None else None, item.counts, doc,
            None, record_changes(item.diff) if item.diff is not None else (),
        )  # fmt: skip


def _unreadable_row(item: fx.Unreadable) -> HistoryRow:
    return HistoryRow(
        item.seq, math.nan, None, "unreadable", f"!! {item.problem}", "", 0, (), None, {},
        unreadable_doc(item), item,
    )  # fmt: skip


def _print(ctx: Ctx, rows: Iterable[HistoryRow], out: IO[str], last: int, foreign: bool) -> int:
    """Print rows as they come (fixed column widths: no wait for the last row); the count."""
    s = ctx.style
    shown = 0
    if ctx.json:
        out.write("[")
        for row in rows:
            out.write(("\n" if not shown else ",\n") + to_json(row.doc))
            shown += 1
        out.write("\n]\n")
        return shown
    seq_cells = max(3, len(f"{last}-{last}"))
    kind_cells = 28 if foreign else KIND_CELLS
    frame_cells = 13 if foreign else 9
    head = [
        pad("SEQ", seq_cells, "r"), pad("SAVED AT (UTC)", 24), pad("AFTER", 9, "r"),
        pad("KIND", kind_cells), pad("FRAME", frame_cells), pad("BYTES", 7, "r"),
        pad("NODES", 5, "r"),
        pad("NODE", 16), "FAN-OUT DONE",
    ]  # fmt: skip
    for row in rows:
        if not shown:
            out.write("  ".join(head).rstrip() + "\n")
        shown += 1
        if row.unreadable is not None:
            u = row.unreadable
            seqs = str(u.seq) if u.seq == u.last_seq else f"{u.seq}-{u.last_seq}"
            out.write(s.red(pad(seqs, seq_cells, "r")) + "  " + s.red(f"!! {u.problem}") + "\n")
            continue
        label = escape(row.label)
        cells = [
            pad(str(row.seq), seq_cells, "r"),
            pad(fmt_time(row.saved_at), 24),
            pad(fmt_gap(row.gap), 9, "r"),
            pad(s.dim(label) if row.kind == "delete" else label, kind_cells),
            pad(row.frame, frame_cells),
            pad(f"{row.stored_bytes:,}", 7, "r"),
            pad(str(row.completed_nodes) if row.completed_nodes is not None else "-", 5, "r"),
            pad(escape(", ".join(row.nodes)) or "-", 16),
            _counts_cell(row.counts),
        ]
        out.write("  ".join(cells).rstrip() + "\n")
        if shown % 64 == 0:
            out.flush()
    return shown


def _counts_cell(counts: dict[str, int]) -> str:
    total = counts.get("total", 0)
    if not total:
        return "-"
    cell = f"{counts['completed']:,}/{total:,}"
    if counts.get("errors"):
        cell += f" ({counts['errors']:,} errors)"
    return cell
