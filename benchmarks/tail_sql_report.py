"""The "live tail and SQL" section of ``docs/benchmarks.md`` (issue 25), from the stored JSON of
``benchmarks.tail_lag`` and ``benchmarks.export_parquet``.

Kept apart from the benchmarks (which import ckptlog, pyarrow and DuckDB) so that
``benchmarks.report`` appends it whenever it regenerates the document, as it does with the
durable-commit one. ``python -m benchmarks.tail_sql_report`` puts it in the document now.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import replace_doc_section

RESULTS = Path(__file__).resolve().parent / "results"
TAIL = RESULTS / "tail_lag.json"
EXPORT = RESULTS / "export_parquet.json"
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SECTION_TITLE = "## Live tail and SQL over the history (issue 25)"


def _load(path: Path) -> dict[str, Any] | None:
    try:
        payload: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return None if payload.get("quick") else payload


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def section(tail: dict[str, Any] | None, export: dict[str, Any] | None) -> str:
    lines = [SECTION_TITLE, ""]
    if tail is not None:
        load = tail["environment"].get("loadavg_1_5_15")
        lines += [
            f"`python -m benchmarks.tail_lag` (load average at the end {load}, on 2 cores). "
            "A writer process commits application events one commit each at 200/s; "
            "`ckptlog tail --json` runs in another process; lag = line read - commit returned. "
            "Writer cost: the same writer unpaced, with and without a tail, alternating rounds "
            "(the tail then decodes and prints every frame: on a loaded 2-core machine it "
            "competes for CPU; it takes no lock). Idle: CPU of a tail with nothing to print.",
            "",
            "| engine | lag p50 | p99 | max | every frame once, in order | writer with tail / "
            "alone | idle tail CPU | target p99 <= 100 ms |",
            "|---|---:|---:|---:|---|---:|---:|---|",
        ]
        for engine, r in tail["results"].items():
            lag = r["lag"]["lag_ms"]
            idle = r.get("idle", {}).get("cpu_share")
            lines.append(
                f"| {engine} | {lag['p50']:.1f} ms | {lag['p99']:.1f} ms | {lag['max']:.1f} ms "
                f"| {'yes' if r['lag']['in_order_once'] else 'NO'} "
                f"| {r['writer_cost']['ratio']:.2f} "
                f"| {'-' if idle is None else f'{idle * 100:.1f} %'} "
                f"| {_verdict(lag['p99'] <= tail['target_ms'])} |"
            )
        lines.append("")
    if export is not None:
        load = export["environment"].get("loadavg_1_5_15")
        med = export["median_seconds"]
        rounds = export["rounds"]
        rows = rounds[0]["parquet"]["rows"]
        heap = rounds[-1]["parquet"].get("rssanon_mib_at_end")
        lines += [
            f"`python -m benchmarks.export_parquet` (load average at the end {load}): a log of "
            f"{export['frames']:,} frames (1,000 invocations x 1,000 saves, and a fan-out of "
            f"{rows['instances']:,} instances); `export --format parquet` and the JSON Lines "
            "export of the same log, interleaved, each in its own process, median of "
            f"{len(rounds)}.",
            "",
            "| measure | value |",
            "|---|---:|",
            f"| export --format parquet | {med['parquet']:.1f} s |",
            f"| export jsonl-frames, same log, same run | {med['jsonl-frames']:.1f} s |",
            f"| parquet / jsonl-frames | {export['parquet_over_jsonl']:.2f}x |",
            f"| 1,000,000 frames (target <= {export['target_seconds']:.0f} s) | "
            f"{export['seconds_per_million_frames']:.1f} s: "
            f"{_verdict(export['target_met'])} |",
            f"| Parquet written | {export['parquet_bytes'] / 2**20:,.1f} MiB |",
            f"| heap at the end of the export (RssAnon) | "
            f"{'-' if heap is None else f'{heap:,.0f} MiB'} |",
            f"| two GROUP BY queries (DuckDB) over the files | {med['sql']:.2f} s |",
            "",
        ]
    return "\n".join(lines)


def stored_section() -> str | None:
    tail, export = _load(TAIL), _load(EXPORT)
    if tail is None and export is None:
        return None
    return section(tail, export)


def replace_section(doc: Path, text: str) -> None:
    """Put ``text`` in place of the section in ``doc`` (or at its end)."""
    replace_doc_section(doc, SECTION_TITLE, text)


if __name__ == "__main__":
    text = stored_section()
    if text is None:
        sys.exit("no stored full run of benchmarks.tail_lag or benchmarks.export_parquet")
    replace_section(DOC, text)
    print(f"wrote the section to {DOC}")
