"""Tables, targets, ``docs/benchmarks.md`` and its plots, all from the JSON of a run.

Invariants:
- Everything here reads the JSON only (never re-measures), so ``python -m benchmarks report``
  regenerates the same page from a stored result.
- Plots need matplotlib (the ``bench`` extra); without it the page is still written and says
  that its plots were not generated and how to get them.
- A cell shows the row's primary value and, in parentheses, how many times better the ckptlog
  row it is compared with is (``=``: the row is that ckptlog row).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, print_table
from benchmarks.durable_report import stored_section as durable_stored_section
from benchmarks.pg_report import RESULTS as PG_RESULTS
from benchmarks.pg_report import stored_section
from benchmarks.report_runs import LIMITS_KEY, update_sections
from benchmarks.report_runs import sections as run_sections
from benchmarks.tail_sql_report import stored_section as tail_sql_stored_section

DOC = REPO_ROOT / "docs" / "benchmarks.md"
PLOTS_DIRNAME = "benchmarks"  # docs/benchmarks/*.png, next to the page

Row = dict[str, Any]
Targets = list[dict[str, Any]]


# -- reading the JSON ---------------------------------------------------------------------------


def _row(payload: dict[str, Any], scenario: str, key: str, label: str) -> Row | None:
    sc = payload.get("scenarios", {}).get(scenario)
    if sc is None:
        return None
    for param in sc["params"]:
        if param["key"] == key:
            for row in param["rows"]:
                if row["label"] == label:
                    return row  # type: ignore[no-any-return]
    return None


def _ok(row: Row | None) -> bool:
    return row is not None and row["status"] == "ok"


def _labels(sc: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for param in sc["params"]:
        for row in param["rows"]:
            if row["label"] not in seen:
                seen.append(row["label"])
    return seen


# -- targets ------------------------------------------------------------------------------------


def _target(
    name: str, definition: str, value: float | None, goal: str, met: bool | None, note: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "definition": definition,
        "value": None if value is None else round(value, 3),
        "target": goal,
        "met": met,
        "note": note,
    }


def compute_targets(payload: dict[str, Any]) -> Targets:
    """The issue's targets, from the rows measured (``met`` is None when a row is missing)."""
    out: Targets = []
    linear = payload.get("scenarios", {}).get("linear")
    for param in linear["params"] if linear else []:
        row = _row(payload, "linear", param["key"], "oa-sqlite-pickle")
        r = row.get("ratio") if _ok(row) and row else None
        out.append(
            _target(
                f"linear {param['label']}",
                "ckptlog-process saves/s / oa-sqlite-pickle saves/s",
                r,
                ">= 5",
                None if r is None else r >= 5,
            )
        )
    key = "n=10000,batching=0"
    sqlite = _row(payload, "fanout", key, "oa-sqlite-pickle · save")
    ours_inst = _row(payload, "fanout", key, "ckptlog-process · save_instance")
    r = sqlite.get("ratio") if sqlite and _ok(sqlite) else None
    out.append(
        _target(
            "fanout N=10,000 saves/s",
            "ckptlog-process save_fan_out_internal saves/s / oa-sqlite-pickle saves/s "
            "(whole openarmature records, unbatched)",
            r,
            ">= 20",
            None if r is None else r >= 20,
        )
    )
    rb = sqlite.get("ratio_bytes") if sqlite and _ok(sqlite) else None
    out.append(
        _target(
            "fanout N=10,000 bytes written",
            "oa-sqlite-pickle bytes written per save / ckptlog-process save_fan_out_internal's "
            "(ckptlog writes 1/value)",
            rb,
            ">= 20 (ckptlog <= 1/20)",
            None if rb is None else rb >= 20,
        )
    )
    if sqlite and ours_inst and _ok(sqlite) and _ok(ours_inst):
        v = ours_inst["rate_median"] / sqlite["rate_median"]
        out.append(
            _target(
                "fanout N=10,000 saves/s, save_instance",
                "ckptlog-process save_instance saves/s / oa-sqlite-pickle saves/s (informative: "
                "an O(1) API the engine does not call)",
                v,
                "-",
                None,
            )
        )
    load = payload.get("scenarios", {}).get("load")
    if load:
        for label in ("ckptlog-process", "ckptlog-process · sync"):
            pts = [
                (p["values"]["history"], row["p50_us"])
                for p in load["params"]
                for row in p["rows"]
                if row["label"] == label and row["status"] == "ok"
            ]
            if len(pts) >= 2:
                (h0, p0), (h1, p1) = pts[0], pts[-1]
                flat = p1 / p0
                out.append(
                    _target(
                        f"load p50 flat ({label})",
                        f"p50 at {h1:,} saves of history / p50 at {h0:,}",
                        flat,
                        "<= 2",
                        flat <= 2,
                        "" if h1 >= 1_000_000 else f"history capped at {h1:,} saves",
                    )
                )
    out += _instances_targets(payload)
    return out


def _instances_targets(payload: dict[str, Any]) -> Targets:
    """Issues 17 and 22's targets for the ``instances`` scenario, per mode, row and N."""
    sc = payload.get("scenarios", {}).get("instances")
    if not sc:
        return []
    out: Targets = []

    def note(*rows: Row | None) -> str:
        return (
            "partial runs (stopped at the budget)"
            if any(r and r.get("partial_runs") for r in rows)
            else ""
        )

    for mode in ("fsync", "process"):
        ours_label = f"ckptlog-{mode} · save_instance"
        for param in sc["params"]:
            if param["values"]["n"] > 1_000_000:
                continue  # peers stop at 1,000,000
            for variant, goals in (
                ("save_instance", (("sqlite-rows", 1.2), ("lmdb-rows", 0.5))),
                ("save_instances", (("sqlite-rows", 1.5), ("lmdb-rows", 0.6))),
            ):
                label = f"ckptlog-{mode} · {variant}"
                ours = _row(payload, "instances", param["key"], label)
                for peer, goal in goals:
                    row = _row(payload, "instances", param["key"], f"{peer}-{mode}")
                    r = (
                        ours["rate_median"] / row["rate_median"]
                        if ours and row and _ok(ours) and _ok(row)
                        else None
                    )
                    out.append(
                        _target(
                            f"instances {param['label']} {mode} {variant} vs {peer}",
                            f"{label} rows/s / {peer}-{mode} rows/s",
                            r,
                            f">= {goal}",
                            None if r is None else r >= goal,
                            note(ours, row),
                        )
                    )
        out += _scale_targets(payload, sc, mode)
        pts: list[tuple[dict[str, Any], Row]] = []
        for p in sc["params"]:
            if p["values"]["n"] > 1_000_000:
                continue  # the scale run has targets of its own
            r = _row(payload, "instances", p["key"], ours_label)
            if r is not None and _ok(r):
                pts.append((p, r))
        if len(pts) >= 2:
            (p0, r0), (p1, r1) = pts[0], pts[-1]
            flat = r1["rate_median"] / r0["rate_median"]
            out.append(
                _target(
                    f"instances flat rows/s ({mode})",
                    f"{ours_label} rows/s at {p1['label']} / at {p0['label']}",
                    flat,
                    ">= 0.8",
                    flat >= 0.8,
                    note(r0, r1),
                )
            )
            b0, b1 = r0.get("bytes_per_op"), r1.get("bytes_per_op")
            if b0 and b1:
                spread = max(b0, b1) / min(b0, b1)
                out.append(
                    _target(
                        f"instances flat bytes/row ({mode})",
                        f"{ours_label} bytes written per row, {p1['label']} vs {p0['label']}",
                        spread,
                        "<= 1.2",
                        spread <= 1.2,
                    )
                )
        big = [(p, r) for p, r in pts if p["values"]["n"] >= 1_000_000]
        for p, r in big:
            extra = r.get("extra", {})
            for key, name, scale, goal in (
                ("peak_rss_bytes", "peak RSS (GiB)", 1 / (1 << 30), 1.0),
                ("load_ms", "head load after the run (s)", 1e-3, 1.5),
                ("record_at_ms", "record_at of the middle seq (s)", 1e-3, 2.0),
            ):
                if key in extra:
                    v = extra[key] * scale
                    out.append(
                        _target(
                            f"instances {p['label']} {mode} {name}",
                            f"{ours_label}, median over runs",
                            v,
                            f"<= {goal}",
                            None if r.get("partial_runs") else v <= goal,  # not the whole job
                            note(r),
                        )
                    )
    return out


def _scale_targets(payload: dict[str, Any], sc: dict[str, Any], mode: str) -> Targets:
    """Issue 22's targets for the one-invocation scale run (N >= 10,000,000)."""
    out: Targets = []
    for p in sc["params"]:
        if p["values"]["n"] < 10_000_000:
            continue
        for variant in ("save_instance", "save_instances"):
            label = f"ckptlog-{mode} · {variant}"
            r = _row(payload, "instances", p["key"], label)
            if r is None or not _ok(r):
                continue
            extra = r.get("extra", {})
            done = not r.get("partial_runs")
            out.append(
                _target(
                    f"instances {p['label']} {mode} {variant} completes",
                    f"{label}: every row saved in one invocation, default options",
                    1.0 if done else 0.0,
                    "= 1",
                    done,
                )
            )
            first, last = extra.get("first_million_rows_s"), extra.get("last_million_rows_s")
            if first and last:
                out.append(
                    _target(
                        f"instances {p['label']} {mode} {variant} last / first million",
                        f"{label}: rows/s of the last million / of the first",
                        last / first,
                        ">= 0.8",
                        last / first >= 0.8,
                    )
                )
            for key, name, scale, goal in (
                ("peak_rss_bytes", "peak RSS (GiB)", 1 / (1 << 30), 2.0),
                ("largest_frame_bytes", "largest frame (MiB)", 1 / (1 << 20), 16.0),
                ("load_ms", "head load after the run (s)", 1e-3, 3.0),
            ):
                if key in extra:
                    v = extra[key] * scale
                    out.append(
                        _target(
                            f"instances {p['label']} {mode} {variant} {name}",
                            label,
                            v,
                            f"<= {goal}",
                            v <= goal,
                        )
                    )
            if "verify_s" in extra:
                out.append(
                    _target(
                        f"instances {p['label']} {mode} {variant} verify passes",
                        f"{label}: verify() of the log after the run ({extra['verify_s']:.0f} s)",
                        extra.get("verify_ok", 0.0),
                        "= 1",
                        extra.get("verify_ok") == 1.0,
                    )
                )
    return out


# -- formatting ---------------------------------------------------------------------------------


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def _num(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return ""
    if r >= 10:
        return f"{r:,.0f}x"
    if r < 0.01:
        return f"{r:.3f}x"  # e.g. 0.005x, not 0.00x
    return f"{r:.2f}x" if r < 1 else f"{r:.1f}x"


def _primary_value(sc: dict[str, Any], row: Row) -> str:
    if sc["primary"] == "p50_us":
        v = row["p50_us"]
        return f"{v / 1000:,.2f}" if sc["metric"].startswith("ms") else f"{v:,.1f}"
    return f"{row['rate_median']:,.0f}" + ("*" if row.get("partial_runs") else "")


# Scenario-specific figures (Sample.extra): key -> (table title, format of the median)
EXTRA_TABLES: dict[str, tuple[str, Callable[[float], str]]] = {
    "peak_rss_bytes": (
        "peak RSS of the run's process (VmHWM), before the check after the run",
        fmt_bytes,
    ),
    "store_bytes_per_row": (
        "growth of the store's files per row (after close)",
        fmt_bytes,
    ),
    "load_ms": ("load of the head after the run, store reopened (ms)", lambda v: f"{v:,.1f}"),
    "record_at_ms": ("record_at of the middle seq after the run (ms)", lambda v: f"{v:,.1f}"),
    "largest_frame_bytes": (
        "largest frame the run wrote, its payload decoded from zstd (frame_bytes_max bounds it)",
        fmt_bytes,
    ),
    "first_million_rows_s": ("rows/s over the run's first million rows", lambda v: f"{v:,.0f}"),
    "last_million_rows_s": ("rows/s over the run's last million rows", lambda v: f"{v:,.0f}"),
    "verify_s": ("verify() of the whole log after the run (s)", lambda v: f"{v:,.1f}"),
}


def _status(row: Row) -> str | None:
    return None if row["status"] == "ok" else row["status"]


def _cell(row: Row | None, value: Callable[[Row], str], ratio_key: str | None) -> str:
    if row is None:
        return ""
    status = _status(row)
    if status is not None:
        return status
    text = value(row)
    if ratio_key is not None:
        if row.get("reference") == row["label"]:
            return f"{text} (=)"
        r = fmt_ratio(row.get(ratio_key))
        if r:
            return f"{text} ({r})"
    return text


def _latency_cell(row: Row) -> str:
    if row.get("p999_us") is None:  # a run from before the histogram: p50 / p99 only
        return f"{row['p50_us']:,.0f} / {row['p99_us']:,.0f}"
    keys = ("p50_us", "p99_us", "p999_us", "max_us")
    return " / ".join(f"{row[k]:,.0f}" for k in keys)


def _extra(key: str, row: Row) -> str:
    extra = row.get("extra", {})
    return EXTRA_TABLES[key][1](extra[key]) if key in extra else "-"


def _table(
    payload: dict[str, Any], name: str, what: str
) -> tuple[list[str], list[list[str]]] | None:
    sc = payload["scenarios"][name]
    params = sc["params"]
    if what == "latency" and sc["mode"] == "read" and name == "replay":
        return None
    if what == "bytes" and sc["mode"] != "write":
        return None
    every = [r for p in params for r in p["rows"] if r["status"] == "ok"]
    if what == "latency" and not any(r.get("p50_us") is not None for r in every):
        return None
    if what in EXTRA_TABLES and not any(what in r.get("extra", {}) for r in every):
        return None
    headers = ["row", "durability"] + [p["label"] for p in params]
    rows = []
    for label in _labels(sc):
        by_param = [next((r for r in p["rows"] if r["label"] == label), None) for p in params]
        durability = next((r["durability"] for r in by_param if r), "")
        if what == "primary":
            cells = [_cell(r, lambda r: _primary_value(sc, r), "ratio") for r in by_param]
        elif what == "latency":
            cells = [
                _cell(r, _latency_cell, None)
                if r is None or r["status"] != "ok" or r.get("p50_us") is not None
                else "-"
                for r in by_param
            ]
        elif what == "bytes":
            cells = [
                _cell(r, lambda r: fmt_bytes(r.get("bytes_per_op")), "ratio_bytes")
                for r in by_param
            ]
        else:
            cells = [_cell(r, functools.partial(_extra, what), None) for r in by_param]
            if not any(c not in ("-", "", "n/a") for c in cells):
                continue
        rows.append([label, durability, *cells])
    return headers, rows


TABLE_TITLES = {
    "primary": "{metric}; in parentheses, how many times better the ckptlog row compared with "
    "is ((=): the row is that ckptlog row)",
    "latency": "latency per operation, p50 / p99 / p99.9 / max (µs, from a log-bucketed "
    "histogram: benchmarks/histogram.py; p50 / p99 alone in runs before it)",
    "bytes": "bytes written per save (write system calls); in parentheses, this row's bytes / "
    "the compared ckptlog row's",
    **{k: title for k, (title, _) in EXTRA_TABLES.items()},
}
TABLES = ("primary", "latency", "bytes", *EXTRA_TABLES)


def _partial_note(sc: dict[str, Any]) -> list[str]:
    """What ``*`` means, for each partial row: how many rows the stopped runs did."""
    out = []
    for param in sc["params"]:
        for row in param["rows"]:
            if row["status"] == "ok" and row.get("partial_runs"):
                done = [r["ops"] for r in row["runs"] if r.get("partial")]
                out.append(
                    f"{row['label']} ({param['label']}): * partial: {row['partial_runs']} of "
                    f"{len(row['runs'])} runs stopped at the {param['values'].get('budget_s')} s "
                    f"budget after {min(done):,}-{max(done):,} rows; the rate is over the rows done"
                )
    return out


def _notes(sc: dict[str, Any]) -> list[str]:
    """One line per (row, status, reason), naming the parameters it applies to."""
    where: dict[tuple[str, str, str], list[str]] = {}
    for param in sc["params"]:
        for row in param["rows"]:
            if row["status"] != "ok":
                key = (row["label"], row["status"], row.get("reason", ""))
                where.setdefault(key, []).append(param["label"])
    every = len(sc["params"])
    return [
        f"{label} ({'all' if len(ps) == every else ', '.join(ps)}): {status}: {reason}"
        for (label, status, reason), ps in where.items()
    ]


def print_tables(payload: dict[str, Any]) -> None:
    for name, sc in payload["scenarios"].items():
        print(f"\n== {name}: {sc['title']} ==")
        for what in TABLES:
            table = _table(payload, name, what)
            if table is None:
                continue
            headers, rows = table
            print()
            print_table(
                headers,
                rows,
                align="ll" + "r" * (len(headers) - 2),
                title=TABLE_TITLES[what].format(metric=sc["metric"]),
            )
        for note in _notes(sc) + _partial_note(sc):
            print(f"  - {note}")
    if payload.get("targets"):
        print("\n== targets ==")
        rows = [
            [
                t["name"],
                "-" if t["value"] is None else f"{t['value']:,.2f}",
                t["target"],
                {True: "met", False: "MISSED", None: "-"}[t["met"]],
                t.get("note", ""),
            ]
            for t in payload["targets"]
        ]
        print_table(["target", "value", "goal", "", "note"], rows, align="lrrll")


# -- docs/benchmarks.md ---------------------------------------------------------------------------


def _md_table(headers: list[str], rows: list[list[str]], align: str) -> list[str]:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in headers) + " |"]
    out.append("|" + "|".join("---" if a == "l" else "---:" for a in align) + "|")
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return out


def plot(payload: dict[str, Any], plots_dir: Path) -> tuple[dict[str, str], str]:
    """Write the PNG plots; ``({scenario: file name}, why none)``."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    except ImportError:
        return {}, (
            "Plots were not generated: matplotlib is not installed "
            "(`pip install -e '.[bench]'`, then `python -m benchmarks report`)."
        )
    plots_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    palette = plt.get_cmap("tab20")  # a listed colormap: index i is its i-th color

    def draw(ax: Any, sc: dict[str, Any], params: list[dict[str, Any]], x: str, y: str) -> None:
        for i, label in enumerate(_labels(sc)):
            pts = [
                (p["values"][x], r[y])
                for p in params
                for r in p["rows"]
                if r["label"] == label and r["status"] == "ok" and r.get(y)
            ]
            if pts:
                ax.plot(
                    *zip(*pts, strict=True),
                    "-" if label.startswith("ckptlog") else "--",
                    marker="o",
                    color=palette(i % palette.N),
                    label=label,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)

    fan = payload["scenarios"].get("fanout")
    if fan:
        fig, axes = plt.subplots(1, 2, figsize=(13, 6.5), sharey=True)
        for ax, batched in zip(axes, (False, True), strict=True):
            params = [p for p in fan["params"] if bool(p["values"]["batching"]) == batched]
            draw(ax, fan, params, "n", "rate_median")
            ax.set_xlabel("instances in the fan-out (N)")
            ax.set_title("batched" if batched else "unbatched (durable per save)")
        axes[0].set_ylabel("saves/s (median)")
        handles: dict[str, Any] = {}
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(lab, h)
        fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=3, fontsize=8)
        fig.suptitle("fanout: saves/s vs fan-out size (solid: ckptlog)")
        fig.tight_layout(rect=(0, 0.17, 1, 1))
        fig.savefig(plots_dir / "fanout.png", dpi=110)
        plt.close(fig)
        made["fanout"] = "fanout.png"
    load = payload["scenarios"].get("load")
    if load:
        fig, ax = plt.subplots(figsize=(10, 5))
        draw(ax, load, load["params"], "history", "p50_us")
        ax.set_xlabel("saves of history")
        ax.set_ylabel("load latency p50 (µs)")
        ax.set_title("load: head load latency vs history length (solid: ckptlog)")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        fig.savefig(plots_dir / "load.png", dpi=110)
        plt.close(fig)
        made["load"] = "load.png"
    return made, ""


METHOD = """\
- Every scenario runs every row in one process, interleaved: one warm-up run per row
  (discarded), then {repeats} timed rounds, the row order reversed every other round
  (A B C, C B A, ...), so the drift of a shared machine spreads over all rows alike.
  `instances` runs each run in a fresh subprocess instead (no warm-up, at most 3 rounds from
  N = 200,000, a time budget per run: see its section).
- Throughput is the median over the timed runs; latency percentiles (p50 / p90 / p99 / p99.9 /
  max) pool every timed operation of every run in a log-bucketed histogram
  (`benchmarks/histogram.py`, under 0.8 % relative error); bytes written are the `wchar` of
  `/proc/self/io` (every byte the process handed to a write system call, all threads;
  page-granular engines write whole pages) per save.
- Inputs are built before the timer: openarmature records (fan-out records with all N
  instances, each a fresh `FanOutInstanceProgress`, as the engine builds them), LangGraph
  checkpoints, techrevati states, and the garbage collector is run before every timed section
  (it stays enabled inside it). Write scenarios use a fresh store per run.
- Ratios compare each row with a ckptlog row of the same durability class (`none` counts as
  `process`), the same shape of fan-out save (whole record vs one instance) and, for `load`,
  the same calling convention. Ratios > 1 mean ckptlog is better.
- Read scenarios build their stores through each peer's own save API; peers that fsync every
  commit build with the fsync relaxed (stated per peer below; reads do not depend on it), and
  a history that would take longer than the build budget ({budgets}) is reported `skipped`.
- A scenario a peer's API cannot express is reported `n/a` with the reason, never emulated.
- fsync rows measure this machine's disk as much as the code: its fsync latency varies by more
  than 10x within minutes (a virtual disk shared with other work), so compare fsync rows within
  one run (they are interleaved), not across runs.
- `load` and `list` for ckptlog and openarmature go through the async protocol. openarmature's
  take one `asyncio.to_thread` hop each (tens of µs), as does ckptlog's `list`; ckptlog's
  `load` reads a small record on the event loop's thread (a wide fan-out or a large state
  still hops). ckptlog's `sync` load row is the log's own cost.
- Bytes written count whole pages: every LMDB commit rewrites the leaf page of each table it
  touches plus the branch and meta pages; SQLite writes WAL frames, then checkpoints them
  into the database file."""


INSTANCES_NOTES = """\
- ckptlog (`ckptlog-fsync` / `ckptlog-process · save_instance`): `CheckpointLog.save` of the
  N-instance fan-out record (untimed), then `CheckpointLog.save_instance` per row under
  `FanOutInternalSaveBatching(flush_every=256)` and a final `flush`; `· save_instances`: one
  `CheckpointLog.save_instances` call per 256 rows instead (the batch a job holds).
- N = 10,000,000: ckptlog only (`ckptlog-fsync`, default options), one run per row, a
  1,200 s budget; after it, besides load and record_at, the largest frame written and a
  timed `verify()` of the whole log.
- `sqlite-rows-*`: a hand-rolled SQLite table, WAL, a head row (upsert) and a history row per
  row, `executemany` of both and one commit per batch; `synchronous=FULL` (fsync) or `NORMAL`
  (process: in WAL mode a killed process loses nothing committed).
- `lmdb-rows-*`: raw py-lmdb, a head row and a history row per row in two tables, `putmulti`,
  one write transaction per batch; `sync=True` (fsync) or `sync=False, metasync=False`
  (process).
- `jsonl-*`: a JSON line appended per row; per batch `flush` to the OS (process), then
  `os.fsync` (fsync).
- The peers encode rows with `msgspec.json` and stamp them with `time.time()`, as
  `save_instance` does; nobody's rows are built before the timer (they are the job's output).
- A `--peer` store runs here through `save_instance` if it has one (openarmature's protocol
  alone saves the whole N-instance record per instance: `n/a`, see `fanout`), or LangGraph's
  `put_writes` per row (a commit per row: LangGraph has no batching). openarmature's and
  techrevati's built-in peers and the raw frame ceiling are `n/a` here.

Each run is a fresh subprocess and a fresh store, so the figures beside rows/s are the run's
own: bytes handed to `write` per row, the growth of the store's files per row, the peak RSS of
the process (`VmHWM`, read before the check that follows the timed section), and for ckptlog
the time to `load` the head and `record_at` the middle seq after reopening the log. There is
no warm-up run (nothing stays warm in a new process) and at most 3 timed rounds from
N = 200,000. A run stops at the first batch boundary after its time budget (60 s;
`--cell-budget`) and reports rows/s over the rows it did, marked `*` (partial) with the rows
done, so a store that slows down with N cannot stall the run. After the timed section every
store is checked to hold exactly the rows saved (ckptlog: the reloaded head has that many
completed instances).

```console
$ .venv/bin/python -m benchmarks run --scenario instances --backend ckptlog,rows
$ .venv/bin/python -m benchmarks run --scenario instances --instances-n 10000,200000
$ .venv/bin/python -m benchmarks run --scenario instances --quick   # N = 1,000: a smoke run
```"""

PEER_SECTION = """\
`python -m benchmarks run --peer package.module:factory` runs your store beside the built-in
peers, with the same method and ratios. `factory(directory)` gets a fresh, empty directory per
run and returns the store: an object implementing openarmature's `Checkpointer` protocol
(async `save`, `load`, `list`, `delete`; `save_fan_out_internal`, `save_instance` and `flush`
are used when present) or LangGraph's `BaseCheckpointSaver` (`put`, `put_writes`,
`get_tuple`, `list`). The harness calls the factory once up front to detect which, closes the
store after each run through its `aclose()` or `close()`, and names the row after the spec.
State what a returned save survives with `factory.durability = "process"` (or `"fsync"`,
`"none"`): the row is compared with ckptlog's row of that durability (unstated: `fsync`). A
run with `--peer` writes `bench.partial.json`, never the published figures."""


def _env_lines(payload: dict[str, Any]) -> list[str]:
    env = payload["environment"]
    pk = {**env.get("packages", {}), **env.get("peer_packages", {})}
    git = env.get("git") or {}
    rows = [
        ["when (UTC)", str(env.get("timestamp_utc"))],
        [
            "machine",
            f"{env.get('cpu_model')} ({env.get('machine')}), "
            f"{env.get('cpus_usable')} usable CPUs of {env.get('cpu_count')}",
        ],
        ["platform", str(env.get("platform"))],
        ["Python", f"{env.get('python')} ({env.get('python_implementation')})"],
        ["filesystem", str(env.get("filesystem"))],
        [
            "load average (1/5/15 min)",
            f"start {env.get('loadavg_1_5_15')}, end {payload.get('loadavg_end')} "
            "(2 cores shared with other work)",
        ],
        ["libraries", f"LMDB {env.get('liblmdb')}, zstd {env.get('libzstd')}"],
        ["packages", ", ".join(f"{k} {v}" for k, v in pk.items() if v)],
        ["git", f"{git.get('commit')}{' (dirty tree)' if git.get('dirty') else ''}"],
        [
            "run",
            f"`{payload.get('command')}`, {payload.get('seconds')} s, "
            f"{payload['settings']['repeats']} repeats",
        ],
    ]
    return _md_table(["", ""], rows, "ll")


def _peer_lines(payload: dict[str, Any]) -> list[str]:
    env = payload["environment"]
    versions = {**env.get("packages", {}), **env.get("peer_packages", {})}
    rows = []
    for name, p in payload["peers"].items():
        d = p["durability"]
        note = f" {p['build_note']}." if p.get("build_note") else ""
        rows.append(
            [
                f"`{name}`",
                f"{p['package']} {versions.get(p['package']) or ''}".strip(),
                f"**{d['kind']}**",
                d["detail"] + "." + note,
                p["api"],
            ]
        )
    for name, why in payload.get("missing_peers", {}).items():
        rows.append([f"`{name}`", "-", "n/a", why, "-"])
    return _md_table(
        ["peer", "package", "durability", "what a returned save survives", "API"], rows, "lllll"
    )


def _target_lines(payload: dict[str, Any]) -> list[str]:
    rows = [
        [
            t["name"],
            t["definition"],
            "-" if t["value"] is None else f"{t['value']:,.2f}",
            t["target"],
            {True: "met", False: "**missed**", None: "-"}[t["met"]]
            + (f" ({t['note']})" if t.get("note") else ""),
        ]
        for t in payload.get("targets", [])
    ]
    return _md_table(["target", "definition", "measured", "goal", ""], rows, "llrrl")


PARTIAL_MARK = "partial run"
PARTIAL_NOTE = (
    "Rows marked *{mark} {when}* were measured by `{command}` ({when} UTC on `{git}`, "
    "`{json}`); rows without a mark come from the run this page was generated from."
)


def refresh_targets(doc: Path, payload: dict[str, Any], json_path: str) -> Path:
    """The Targets table of ``doc`` with the rows a partial run measured replaced (or added),
    each marked with that run's time, and a line under the table naming each partial run whose
    rows are still there: a run of some scenarios keeps the page's targets true for those
    scenarios, the other rows staying those of the run the page was generated from."""
    measured = [t for t in payload.get("targets", []) if t["value"] is not None]
    text = doc.read_text(encoding="utf-8")
    head, sep, rest = text.partition("\n## Targets\n")
    if not measured or not sep:
        return doc
    body, nxt, tail = rest.partition("\n## ")
    when = str(payload.get("environment", {}).get("timestamp_utc", "?"))[:16].replace("T", " ")
    git_env = payload.get("environment", {}).get("git")
    git = str(git_env.get("commit", "?") if isinstance(git_env, dict) else git_env or "?")[:7]
    note = PARTIAL_NOTE.format(
        mark=PARTIAL_MARK, command=payload.get("command", "?"), when=when, git=git, json=json_path
    )
    mark = f" · *{PARTIAL_MARK} {when}* |"
    fresh = {
        row.split(" | ", 1)[0]: row[:-2] + mark for row in _target_lines({"targets": measured})[2:]
    }
    lines: list[str] = []
    notes: dict[str, str] = {}  # a partial run's time -> its line
    seen = set()
    for line in body.split("\n"):
        if line.startswith(f"Rows marked *{PARTIAL_MARK} "):
            notes[line.split("*")[1]] = line  # kept below while rows of that run remain
            continue
        name = line.split(" | ", 1)[0]
        if line.startswith("| ") and name in fresh:
            lines.append(fresh[name])
            seen.add(name)
        else:
            lines.append(line)
    last = max(i for i, line in enumerate(lines) if line.startswith("|"))
    added = [row for name, row in fresh.items() if name not in seen]
    notes[f"{PARTIAL_MARK} {when}"] = note
    table = "\n".join([*lines[: last + 1], *added])
    kept = [line for key, line in notes.items() if f"*{key}*" in table]
    end = last + 1
    while end < len(lines) and not lines[end].strip():
        end += 1  # the blank lines the previous notes left
    lines[last + 1 : end] = [*added, "", *kept, ""]
    body = "\n".join(lines)
    tmp = doc.with_name(doc.name + ".tmp")
    tmp.write_text(head + sep + body + nxt + tail, encoding="utf-8")
    tmp.replace(doc)
    return doc


def render(
    payload: dict[str, Any],
    *,
    json_path: str,
    plots: dict[str, str],
    plot_note: str,
    pg_section: str | None = None,
    lg_read_section: str | None = None,
    extra_sections: dict[str, str] | None = None,
) -> str:
    settings = payload["settings"]
    budgets = ", ".join(f"{k} {v:.0f} s" for k, v in settings["build_budget_s"].items())
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmarks: ckptlog against the checkpointers people use today",
        "",
        f"Generated {stamp} by `python -m benchmarks report` from `{json_path}`"
        + (" (a **quick** smoke run: tiny sizes, not figures to quote)" if payload["quick"] else "")
        + ". Do not edit by hand: rerun instead.",
        "",
        "```console",
        "$ .venv/bin/python -m benchmarks run --doc          # full run: JSON, tables, this page",
        "$ .venv/bin/python -m benchmarks run --quick        # smoke run of every scenario",
        "$ .venv/bin/python -m benchmarks run --scenario fanout --backend ckptlog,openarmature",
        "$ .venv/bin/python -m benchmarks run --scenario instances --peer mypkg.store:factory",
        "$ .venv/bin/python -m benchmarks report             # this page from the stored JSON",
        "$ .venv/bin/python -m benchmarks run --duration 15m --scenario instances  # sustained",
        "$ .venv/bin/python -m benchmarks run --scenario openloop --rate 2000      # open loop",
        "$ .venv/bin/python -m benchmarks compare A.json B.json  # normalised by each run's limits",
        "```",
        "",
        "## Targets",
        "",
        *_target_lines(payload),
        "",
        "## Environment",
        "",
        *_env_lines(payload),
        "",
        "## Peers and their durability",
        "",
        "Durability is compared like for like: openarmature's `SQLiteCheckpointer` runs SQLite "
        "WAL with `synchronous=NORMAL` (survives a killed process, not power loss), so it is "
        "compared with ckptlog's `process` mode; ckptlog's `fsync` mode is reported beside it "
        "and is what the peers that fsync every commit are compared with.",
        "",
        *_peer_lines(payload),
        "",
        "## Method",
        "",
        METHOD.format(repeats=settings["repeats"], budgets=budgets),
        "",
        "## Bringing your own store: `--peer`",
        "",
        PEER_SECTION,
        "",
    ]
    if plot_note:
        lines += [f"> {plot_note}", ""]
    extra_sections = extra_sections or {}  # benchmarks/report_runs.py: limits, sustained, ...
    if LIMITS_KEY in extra_sections:
        lines += [extra_sections[LIMITS_KEY], ""]
    for name, sc in payload["scenarios"].items():
        if f"## `{name}`" in extra_sections:
            lines += [extra_sections[f"## `{name}`"], ""]
            continue
        lines += [f"## `{name}`: {sc['title']}", "", sc["description"], ""]
        if name == "instances":
            lines += [INSTANCES_NOTES, ""]
        params = "; ".join(
            f"{p['label']}: " + ", ".join(f"{k}={_num(v)}" for k, v in p["values"].items())
            for p in sc["params"]
        )
        lines += [
            f"Parameters: {params}. Load average before / after: {sc.get('loadavg_before')} / "
            f"{sc.get('loadavg_after')}; {sc.get('seconds')} s.",
            "",
        ]
        if name in plots:
            lines += [f"![{name}]({PLOTS_DIRNAME}/{plots[name]})", ""]
        for what in TABLES:
            table = _table(payload, name, what)
            if table is None:
                continue
            headers, rows = table
            lines += [f"*{TABLE_TITLES[what].format(metric=sc['metric'])}*", ""]
            lines += _md_table(headers, rows, "ll" + "r" * (len(headers) - 2))
            lines.append("")
        notes = _notes(sc)
        if notes:
            lines += ["Not measured:", ""] + [f"- {n}" for n in notes] + [""]
        partial = _partial_note(sc)
        if partial:
            lines += ["Stopped at the time budget:", ""] + [f"- {n}" for n in partial] + [""]
    lines += [
        text + "\n"
        for key, text in extra_sections.items()
        if key != LIMITS_KEY and not key.startswith("## `")
    ]
    if pg_section:  # python -m benchmarks.pg_compare's own section, from its stored JSON
        lines += [pg_section.rstrip(), ""]
    if lg_read_section:  # python -m benchmarks.langgraph_read's section, likewise
        lines += [lg_read_section.rstrip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def _langgraph_read_section() -> str | None:
    """``benchmarks.langgraph_read``'s section from its stored JSON (it needs LangGraph)."""
    try:
        from benchmarks.langgraph_read import stored_section as lg_read  # noqa: PLC0415
    except ImportError:
        return None
    return lg_read()


def _durable_section() -> str:
    """``benchmarks.durable_commit``'s section (issue 28), from its stored JSON, if any."""
    text = durable_stored_section()
    return "" if text is None else "\n" + text


def _tail_sql_section() -> str:
    """``benchmarks.tail_lag`` and ``benchmarks.export_parquet`` (issue 25), if stored."""
    text = tail_sql_stored_section()
    return "" if text is None else "\n" + text


def write_doc(
    payload: dict[str, Any], doc: Path, *, json_path: Path | str, pg_json: Path | None = PG_RESULTS
) -> Path:
    """Write ``doc`` (and its plots beside it) from ``payload``, with the PostgreSQL section
    of ``pg_json`` (``benchmarks.pg_compare``'s last stored run) when that file exists.

    A partial run (``complete`` false: some scenarios, some peers, ``--duration``, ``--rate``)
    onto an existing page replaces only the sections it has and leaves the others as they
    were (:func:`benchmarks.report_runs.update_sections`)."""
    plots_dir = doc.parent / PLOTS_DIRNAME
    shown = Path(json_path)
    with contextlib.suppress(ValueError):  # outside the repository: shown as given
        shown = shown.resolve().relative_to(REPO_ROOT)
    if not payload.get("complete", True) and doc.exists():
        update_sections(
            doc,
            payload,
            str(shown),
            lambda: render(payload, json_path=str(shown), plots={}, plot_note=""),
        )
        return refresh_targets(doc, payload, str(shown))
    plots, note = plot(payload, plots_dir)
    doc.parent.mkdir(parents=True, exist_ok=True)
    page = (
        render(
            payload,
            json_path=str(shown),
            plots=plots,
            plot_note=note,
            pg_section=stored_section(pg_json) if pg_json is not None else None,
            lg_read_section=_langgraph_read_section() if pg_json is not None else None,
            extra_sections=run_sections(payload, str(shown), plots_dir, published=None),
        )
        + _durable_section()
        + _tail_sql_section()
    )
    old = doc.read_text(encoding="utf-8") if doc.exists() else ""
    tmp = doc.with_name(doc.name + ".tmp")
    tmp.write_text(with_kept_sections(old, page), encoding="utf-8")
    tmp.replace(doc)
    return doc


def _split(page: str) -> tuple[str, list[tuple[str, str]]]:
    """``page`` as its head (before the first ``## ``) and its ``(heading, section)`` list."""
    parts = page.split("\n## ")
    head, rest = parts[0] + "\n", parts[1:]
    out = []
    for part in rest:
        body = "## " + part
        out.append((body.split("\n", 1)[0], body if body.endswith("\n") else body + "\n"))
    return head, out


def with_kept_sections(old: str, page: str) -> str:
    """``page`` with the ``## `` sections of the page as it was (``old``) that ``page`` does
    not have: those another benchmark script wrote (an issue's own run, with its own JSON) or a
    partial run added. Each goes back after the section it followed before, so that a full run
    never deletes them nor moves them around."""
    head, new = _split(page)
    _, before = _split(old) if old else ("", [])
    have = {h for h, _ in new}
    after = None
    for heading, section in before:
        if heading in have:
            after = heading
            continue
        at = next(
            (i + 1 for i, (h, _) in enumerate(new) if h == after), 0 if after is None else len(new)
        )
        new.insert(at, (heading, section))
        have.add(heading)
        after = heading
    return (
        head.rstrip("\n")
        + "\n\n"
        + "".join(sec if sec.endswith("\n\n") else sec + "\n" for _, sec in new).rstrip("\n")
        + "\n"
    )
