"""The sections of ``docs/benchmarks.md`` about the run itself: the machine's limits, sustained
runs, open-loop load, and how to reproduce and compare runs.

Invariants (as :mod:`benchmarks.report`):
- Everything is rendered from a run's JSON; nothing is measured here.
- A section starts at its own ``## `` heading and ends at the next one, so a partial run
  (``run --scenario openloop --doc``, ``report --json`` of a partial run) replaces just the
  sections it has (:func:`update_sections`) and leaves the rest of the page, other runs'
  figures included, as it was.
- An fsync-bound figure is shown with the fraction of the matching limit it reaches
  (:func:`benchmarks.limits.matching_limit`), so a reader on another machine can compare.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from benchmarks.common import REPO_ROOT
from benchmarks.limits import HEADLINE, headline, matching_limit

SUSTAINED_NAMES = ("sustained-instances", "sustained-linear")
LIMITS_KEY = "## `limits`"
LIMITS_TITLE = f"{LIMITS_KEY}: this machine's own limits, measured in every run"
COMPARE_TITLE = "## Reproducing and comparing runs"
PUBLISHED = REPO_ROOT / "benchmarks" / "results" / "bench.json"


def _md(headers: list[str], rows: list[list[str]], align: str) -> list[str]:
    marks = {"l": "---", "r": "---:"}
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(marks[a] for a in align) + "|",
        *["| " + " | ".join(r) + " |" for r in rows],
    ]


def _n(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def shown(path: Path | str) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(p)


def source_line(payload: dict[str, Any], json_path: str) -> str:
    env = payload.get("environment", {})
    git = env.get("git") or {}
    mount = env.get("mount") or (payload.get("limits") or {}).get("mount") or {}
    return (
        f"From `{json_path}`: `{payload.get('command')}` (seed {payload.get('seed')}), "
        f"{env.get('timestamp_utc')}, git {str(git.get('commit'))[:10]}"
        f"{' (dirty tree)' if git.get('dirty') else ''}, {env.get('cpu_model')} "
        f"({env.get('cpus_usable')} usable CPUs), {mount.get('type')} on "
        f"{mount.get('mount_point')} ({mount.get('options')}); load average at the start "
        f"{env.get('loadavg_1_5_15')}, at the end {payload.get('loadavg_end')} (2 cores shared "
        "with other work)."
    )


# -- limits --------------------------------------------------------------------------------------


def limit_rows(limits: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, (key, unit) in HEADLINE.items():
        e = limits.get(name)
        if isinstance(e, dict):
            rows.append(
                [
                    f"`{name}`",
                    f"{_n(e[key], 0 if e[key] >= 100 else 1)} {unit}",
                    *(_n(e.get(k)) for k in ("p50_us", "p99_us", "p999_us", "max_us")),
                ]
            )
    return rows


LIMITS_TEXT = """\
Every `python -m benchmarks run` first measures, in the directory the stores are created in
(the same filesystem and mount), what this machine allows, each for a fixed time
(`benchmarks/limits.py`; `pg_test_fsync`'s idea): `fdatasync` (one 4 KiB `pwrite` +
`fdatasync`, cycling over a preallocated 16 MiB file), `seq_write` (1 MiB `write`s, an
`fdatasync` after each), `lmdb_commit` (raw py-lmdb, `sync=True`, one 256-byte `put` per write
transaction: what any one-save-one-commit store can reach), `lmdb_putmulti` (the same with
`putmulti` of 256 rows of 64 bytes per transaction: the batched ceiling) and `cpu` (msgspec
encode + zstd compress of a 1 KiB dict: a CPU reference for figures that do not fsync). Latency
percentiles come from the log-bucketed histogram of `benchmarks/histogram.py` (under 0.8 %
relative error)."""


def fsync_fractions(payload: dict[str, Any], limits: dict[str, Any]) -> list[list[str]]:
    """Each fsync row's primary rate as a fraction of its matching limit in ``limits``."""
    out = []
    for name, sc in payload.get("scenarios", {}).items():
        if sc.get("primary") != "rate_median":
            continue
        for param in sc["params"]:
            if name == "openloop" and param["key"] != "max":
                continue  # a load point is a rate chosen, not one reached
            limit = matching_limit(name, param.get("values"))
            top = headline(limits, limit) if limit else None
            if top is None or limit is None:
                continue
            for row in param["rows"]:
                if row["status"] != "ok" or row["durability"] != "fsync":
                    continue
                rate = row["rate_median"]
                out.append(
                    [
                        f"`{name}`",
                        param["label"],
                        row["label"],
                        f"{rate:,.0f} {sc['metric']}",
                        f"{top:,.0f} {HEADLINE[limit][1]}",
                        f"**{rate / top:.2f}**",
                    ]
                )
    return out


UNDERCOUNT: Final = 1.5  # a raw py-lmdb row this far above its limit: the limit undercounts


def undercounted_limit(rows: list[list[str]]) -> float | None:
    """The largest fraction a raw py-lmdb row (a ceiling itself) reached against its limit when
    it is above ``UNDERCOUNT``: the limit was measured while the disk was busier; else ``None``."""
    ceilings = [  # one commit per save (linear) or per batch (instances): what the limits time
        float(r[5].strip("*"))
        for r in rows
        if r[0] in ("`linear`", "`instances`") and r[2].startswith(("lmdb-raw", "lmdb-rows"))
    ]
    top = max(ceilings, default=0.0)
    return top if top > UNDERCOUNT else None


def _in_run_limit(name: str, sc: dict[str, Any], param: dict[str, Any]) -> tuple[str, float] | None:
    """The raw py-lmdb row of the same run standing for the matching limit (for runs from
    before the limits were measured): its label and rate."""
    if name == "instances":
        label, where = "lmdb-rows-fsync", param
    elif name == "concurrent":
        label, where = "lmdb-raw-fsync", sc["params"][0]  # C=1: one commit per save
    elif name == "fanout":
        label, where = "lmdb-raw-fsync · save_fan_out_internal bytes", param
    elif name == "linear":
        label, where = "lmdb-raw-fsync", param
    else:
        return None
    for row in where["rows"]:
        if row["label"] == label and row["status"] == "ok":
            return f"`{label}` ({where['label']})", float(row["rate_median"])
    return None


def in_run_fractions(payload: dict[str, Any]) -> list[list[str]]:
    """Each fsync row's rate over the raw py-lmdb row measured interleaved with it."""
    out = []
    for name, sc in payload.get("scenarios", {}).items():
        if sc.get("primary") != "rate_median":
            continue
        for param in sc["params"]:
            limit = _in_run_limit(name, sc, param)
            if limit is None:
                continue
            ref, top = limit
            for row in param["rows"]:
                if row["status"] != "ok" or row["durability"] != "fsync":
                    continue
                if row["label"].startswith(("lmdb-raw", "lmdb-rows")):
                    continue  # the ceilings themselves
                rate = row["rate_median"]
                out.append(
                    [
                        f"`{name}`",
                        param["label"],
                        row["label"],
                        f"{rate:,.0f} {sc['metric']}",
                        f"{top:,.0f} {sc['metric']}, {ref}",
                        f"**{rate / top:.2f}**",
                    ]
                )
    return out


def limits_section(payload: dict[str, Any], json_path: str, published: Path | None) -> str:
    limits = payload["limits"]
    lines = [LIMITS_TITLE, "", LIMITS_TEXT, "", source_line(payload, json_path), ""]
    lines += [
        f"*{limits.get('seconds_each')} s each; load average before / after: "
        f"{limits.get('loadavg_before')} / {limits.get('loadavg_after')}*",
        "",
    ]
    lines += _md(
        ["limit", "rate", "p50 µs", "p99 µs", "p99.9 µs", "max µs"], limit_rows(limits), "lrrrrr"
    )
    lines.append("")
    headers = ["scenario", "parameter", "row", "figure", "matching limit", "fraction"]
    own = fsync_fractions(payload, limits)
    if own:
        lines += [
            "*fsync-bound figures of this run as a fraction of this disk's matching limit "
            "(one save one commit: `lmdb_commit`; batched rows: `lmdb_putmulti`)*",
            "",
            *_md(headers, own, "lllrrr"),
            "",
        ]
        beaten = undercounted_limit(own)
        rows = in_run_fractions(payload) if beaten else []
        if rows:
            lines += [
                f"*The limits above undercount this disk: the raw py-lmdb rows of the same run "
                f"reached up to {beaten:.1f}x them (the limits were measured while the disk was "
                "shared, at the load average shown). The fractions against the limits are "
                "therefore not comparable with another machine's; here is each fsync row "
                "against the raw py-lmdb row measured interleaved with it instead (what "
                "`lmdb_commit` and `lmdb_putmulti` measure; above 1: several saves per commit, "
                "or fewer syncs per commit than LMDB's two).*",
                "",
                *_md(headers, rows, "lllrrr"),
                "",
            ]
    if published is not None and published.exists():
        pub = json.loads(published.read_text(encoding="utf-8"))
        rows = [] if pub.get("limits") else in_run_fractions(pub)
        if rows:
            env = pub.get("environment", {})
            lines += [
                f"*The fsync-bound figures of the sections above (`{shown(published)}`, run "
                f"{env.get('timestamp_utc')} at load {env.get('loadavg_1_5_15')}) predate the "
                "limits; each is shown against the raw py-lmdb row measured interleaved with it "
                "in that run, which is what `lmdb_commit` and `lmdb_putmulti` measure: "
                "`lmdb-raw-fsync` (one synced commit per save; in `concurrent`, its C=1 row, as "
                "its other rows commit C saves at once) or `lmdb-rows-fsync` (`putmulti` batches "
                "of 256 rows) for `instances`. Above 1: several saves per commit (group commit), "
                "or a store with fewer syncs per commit than LMDB's two. A full `run --doc` "
                "prints every fraction against the limits of its own run.*",
                "",
                *_md(headers, rows, "lllrrr"),
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


# -- sustained -----------------------------------------------------------------------------------


SUSTAINED_TEXT = """\
`--duration D` runs `instances` and `linear` as sustained runs (`benchmarks/sustained.py`): one
run per row of `D`, cut into one-minute intervals (a sixth of `D` under two minutes), each with
its rate, its latency percentiles (a histogram per interval: constant memory however long the
run), the store's size on disk (allocated blocks) and the process's RSS. *Decay* is the last
interval's rate over the first's. `sustained-instances` runs the `instances` path in a fresh
subprocess per row: fan-outs of `job_n` instances back to back (a new invocation each, its
N-instance record saved when it starts, inside the clock), each instance's result saved as it
completes and committed every 256 rows; its latency is per batch of 256 rows (the commit's stall
is the tail a job sees). Rows run one after the other (a long run cannot be interleaved), so
each row met the machine as it was then: the limits are measured at the start and again at the
end of a sustained run, so a decay can be told apart from the machine changing under it."""


def _sustained_rows(sc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(p, r) for p in sc["params"] for r in p["rows"] if r["status"] == "ok"]


def sustained_section(name: str, payload: dict[str, Any], json_path: str, plot: str | None) -> str:
    sc = payload["scenarios"][name]
    unit = "rows/s" if name == "sustained-instances" else "saves/s"
    per = "per batch of 256 rows" if name == "sustained-instances" else "per save"
    lines = [f"## `{name}`: {sc['title']}", "", SUSTAINED_TEXT, "", source_line(payload, json_path)]
    lines.append("")
    params = "; ".join(
        ", ".join(f"{k}={_value(v)}" for k, v in p["values"].items()) for p in sc["params"]
    )
    lines += [f"Parameters: {params}; {sc.get('seconds')} s in all.", ""]
    start, end = payload.get("limits") or {}, payload.get("limits_end") or {}
    if end:
        lines += [
            "*this machine's limits at the start and at the end of the run*",
            "",
            *_md(
                ["limit", "start", "end", "end / start"],
                [
                    [
                        f"`{k}` ({unit_})",
                        _n(headline(start, k)),
                        _n(headline(end, k)),
                        _ratio(headline(end, k), headline(start, k)),
                    ]
                    for k, (_, unit_) in HEADLINE.items()
                ],
                "lrrr",
            ),
            "",
        ]
    if plot:
        lines += [f"![{name}](benchmarks/{plot})", ""]
    summary = []
    for _, row in _sustained_rows(sc):
        run = row["runs"][0]
        tl = run.get("timeline", [])
        extra = row.get("extra", {})
        limit = matching_limit(name)
        frac = ""
        if row["durability"] == "fsync" and limit and headline(start, limit):
            frac = f" ({row['rate_median'] / headline(start, limit):.2f} of `{limit}`)"
        summary.append(
            [
                row["label"],
                row["durability"],
                f"{row['rate_median']:,.0f}{frac}",
                _n(tl[0]["rate"]) if tl else "-",
                _n(tl[-1]["rate"]) if tl else "-",
                f"**{extra['decay']:.2f}**" if "decay" in extra else "-",
                _bytes(extra.get("store_bytes_end")),
                _bytes(extra.get("peak_interval_rss_bytes")),
                f"{run['ops']:,}",
                " / ".join(_n(row.get(k)) for k in ("p50_us", "p99_us", "p999_us", "max_us")),
            ]
        )
    lines += [
        f"*the whole run: {unit} overall, first and last interval, decay (last / first), the "
        f"store's size at the end, the largest RSS seen, what was saved, latency {per} "
        "p50 / p99 / p99.9 / max (µs)*",
        "",
        *_md(
            [
                "row",
                "durability",
                unit,
                "first",
                "last",
                "decay",
                "store",
                "RSS",
                "saved",
                "latency µs",
            ],
            summary,
            "llrrrrrrrr",
        ),
        "",
    ]
    findings = [f for _, row in _sustained_rows(sc) for f in sustained_findings(row)]
    if findings:
        lines += ["What the run shows (computed from the intervals):", ""]
        lines += [f"- {f}" for f in findings] + [""]
    for _, row in _sustained_rows(sc):
        tl = row["runs"][0].get("timeline", [])
        lines += [f"*{row['label']}: per interval*", ""]
        lines += _md(
            ["interval (s)", unit, "p50 µs", "p99 µs", "p99.9 µs", "max µs", "store", "RSS"],
            [
                [
                    f"{p['t0_s']:,.0f}-{p['t_s']:,.0f}",
                    _n(p["rate"]),
                    *(_n(p.get(k)) for k in ("p50_us", "p99_us", "p999_us", "max_us")),
                    _bytes(p.get("store_bytes")),
                    _bytes(p.get("rss_bytes")),
                ]
                for p in tl
            ],
            "lrrrrrrr",
        )
        lines.append("")
    lines += [
        "```console",
        "$ .venv/bin/python -m benchmarks run --duration 15m --scenario instances "
        "--backend ckptlog-process",
        "$ .venv/bin/python -m benchmarks run --duration 90s --scenario linear --backend ckptlog",
        "```",
    ]
    return "\n".join(lines).rstrip() + "\n"


def sustained_findings(row: dict[str, Any]) -> list[str]:
    """Plain statements about one sustained row: decay beyond 20 %, memory growing with the
    run, the worst stall."""
    tl = row["runs"][0].get("timeline", [])
    if len(tl) < 2:
        return []
    out = []
    label, first, last = row["label"], tl[0], tl[-1]
    decay = row.get("extra", {}).get("decay")
    if decay is not None and not 0.8 <= decay <= 1.25:
        out.append(
            f"`{label}`: the last interval ran at {decay:.2f}x the first "
            f"({last['rate']:,.0f} vs {first['rate']:,.0f}); read it against the limits at the "
            "start and the end (a shared machine changes under a long run)."
        )
    rss0, rss1, store = first.get("rss_bytes"), last.get("rss_bytes"), last.get("store_bytes")
    if rss0 and rss1 and rss1 > 2 * rss0 and store and rss1 > 1.5 * store:
        per = (rss1 - rss0) / max(1, row["runs"][0]["ops"] - int(first["ops"]))
        out.append(
            f"`{label}`: the process's RSS grew from {_bytes(rss0)} to {_bytes(rss1)}, "
            f"{rss1 / store:.1f}x the store on disk ({_bytes(store)}): about {per:,.0f} B "
            "held in memory per row saved, growing with the run rather than bounded."
        )
    worst = max(tl, key=lambda p: p.get("max_us") or 0)
    if worst.get("max_us"):
        out.append(
            f"`{label}`: the longest stall, {worst['max_us'] / 1e3:,.0f} ms, came in the "
            f"interval {worst['t0_s']:,.0f}-{worst['t_s']:,.0f} s."
        )
    return out


def _value(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:,.4g}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"


def plot_sustained(payload: dict[str, Any], plots_dir: Path) -> dict[str, str]:
    """``sustained.png`` (rate and store size per interval, one line per row) per scenario."""
    try:
        import matplotlib as mpl  # noqa: PLC0415 - optional (bench extra)

        mpl.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return {}
    made: dict[str, str] = {}
    for name in SUSTAINED_NAMES:
        sc = payload.get("scenarios", {}).get(name)
        if not sc:
            continue
        rows = [r for _, r in _sustained_rows(sc) if r["runs"][0].get("timeline")]
        if not rows:
            continue
        plots_dir.mkdir(parents=True, exist_ok=True)
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for r in rows:
            tl = r["runs"][0]["timeline"]
            mid = [(p["t0_s"] + p["t_s"]) / 2 / 60 for p in tl]
            style = "-" if r["label"].startswith("ckptlog") else "--"
            ax.plot(mid, [p["rate"] for p in tl], style, marker="o", label=r["label"])
            (line,) = ax2.plot(
                mid, [p["store_bytes"] / (1 << 30) for p in tl], style, marker="o", label="store"
            )
            ax2.plot(
                mid,
                [p["rss_bytes"] / (1 << 30) for p in tl],
                style,
                marker="x",
                color=line.get_color(),
                alpha=0.6,
                label="RSS",
            )
        unit = "rows/s" if name == "sustained-instances" else "saves/s"
        ax.set_xlabel("minutes into the run")
        ax.set_ylabel(f"{unit} per interval")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        ax2.set_xlabel("minutes into the run")
        ax2.set_ylabel("GiB: store on disk (o), process RSS (x)")
        ax2.grid(True, alpha=0.3)
        fig.suptitle(f"{name}: {unit}, store size and RSS over the run (solid: ckptlog)")
        fig.tight_layout()
        fname = f"{name}.png"
        fig.savefig(plots_dir / fname, dpi=110)
        plt.close(fig)
        made[name] = fname
    return made


# -- open loop -----------------------------------------------------------------------------------


OPENLOOP_TEXT = """\
A closed loop (save, then the next) measures latency only at saturation and hides every stall:
while one save stalls, the saves that would have arrived are never issued, so never timed
(coordinated omission). `openloop` (`benchmarks/openloop.py`) offers saves from a separate
scheduler thread on a fixed timetable (`--arrivals poisson`: exponential gaps from `--seed`),
whatever the saves do; the saver takes them in order and each latency runs from the save's
*intended* arrival to its return, so queueing behind a slow save counts (wrk2's and pgbench
`--rate`'s method). Each save is one row committed: the `instances` stores with a batch of 1
(ckptlog `save_instance` under `flush_every=1`, fan-outs of 10,000 instances, a new one started
inline every 10,000 saves; the hand-rolled SQLite table committing each row). Each row first
runs closed-loop (its maximum), then open-loop at 25 / 50 / 75 / 90 % of that maximum, each point
for the same time; `--rate N[,N...]` runs absolute rates instead. Arrivals left when the saver
has drained for as long again as the run are counted *unserved* and enter the histogram with
their wait so far (a lower bound), never dropped."""


def _point_rows(sc: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """label -> param key -> row (ok rows only)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for p in sc["params"]:
        for r in p["rows"]:
            if r["status"] == "ok":
                out.setdefault(r["label"], {})[p["key"]] = r
    return out


def openloop_section(payload: dict[str, Any], json_path: str) -> str:
    sc = payload["scenarios"]["openloop"]
    limits = payload.get("limits") or {}
    lines = [
        f"## `openloop`: {sc['title']}",
        "",
        OPENLOOP_TEXT,
        "",
        source_line(payload, json_path),
    ]
    lines.append("")
    first = sc["params"][0]["values"] if sc["params"] else {}
    lines += [
        f"Each point {first.get('seconds')} s, arrivals {first.get('arrivals')}; load average "
        f"before / after: {sc.get('loadavg_before')} / {sc.get('loadavg_after')}; "
        f"{sc.get('seconds')} s in all.",
        "",
    ]
    by_label = _point_rows(sc)
    load_keys = [p for p in sc["params"] if p["key"] != "max"]
    has_max = any(p["key"] == "max" for p in sc["params"])
    top = headline(limits, "lmdb_commit")
    headers = ["row", "durability"]
    if has_max:
        headers.append("closed-loop max saves/s")
    headers += [f"p99 at {p['label']}" for p in load_keys]
    table = []
    for label, pts in by_label.items():
        any_row = next(iter(pts.values()))
        cells = [label, any_row["durability"]]
        if has_max:
            m = pts.get("max")
            frac = ""
            if m and any_row["durability"] == "fsync" and top:
                frac = f" ({m['rate_median'] / top:.2f} of `lmdb_commit`)"
            cells.append(f"{m['rate_median']:,.0f}{frac}" if m else "-")
        for p in load_keys:
            r = pts.get(p["key"])
            if r is None:
                cells.append("-")
                continue
            offered = r.get("extra", {}).get("offered_rate")
            unserved = r.get("extra", {}).get("unserved")
            served = r["rate_median"]
            saturated = offered and served < 0.95 * offered
            cells.append(
                f"**{_n(r.get('p99_us'))} µs** at {_n(offered)}/s"
                + (f", saturated: {served:,.0f}/s served" if saturated else "")
                + (f" ({unserved:,.0f} unserved)" if unserved else "")
            )
        table.append(cells)
    lines += [
        "*p99 latency (from the intended arrival) against offered load, per row; the offered "
        "rate is a fraction of that row's own closed-loop maximum, measured first (a point "
        "marked saturated served under 95 % of its offered rate: the store, or a machine "
        "slower than when the maximum was measured, could not keep up, and the queue grew)*",
        "",
        *_md(headers, table, "ll" + "r" * (len(headers) - 2)),
        "",
    ]
    detail = []
    for label, pts in by_label.items():
        for p in sc["params"]:
            r = pts.get(p["key"])
            if r is None:
                continue
            e = r.get("extra", {})
            detail.append(
                [
                    label,
                    p["label"],
                    _n(e.get("offered_rate")),
                    _n(r["rate_median"]),
                    *(_n(r.get(k)) for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")),
                    _n(e.get("service_p99_us")),
                    _n(e.get("unserved")),
                    _n(e.get("backlog_max")),
                    _n(e.get("scheduler_lag_p99_us")),
                ]
            )
    lags = [
        (r.get("extra", {}).get("scheduler_lag_p99_us") or 0.0, label, key)
        for label, pts in by_label.items()
        for key, r in pts.items()
    ]
    worst = max(lags, default=(0.0, "", ""))
    if worst[0] > 10_000:
        lines += [
            f"The scheduler itself ran late at this load (p99 lag up to {worst[0] / 1e3:,.0f} ms, "
            f"{worst[1]} at {worst[2]}): on a CPU-starved machine even the thread that issues "
            "arrivals waits for a core. Latency still runs from the intended arrival, so that "
            "wait is counted in the figures (as it would be for a client on the same machine), "
            "and the low-load points are bounded below by it.",
            "",
        ]
    lines += [
        "*every point: offered and served saves/s, latency from the intended arrival p50 / p90 "
        "/ p99 / p99.9 / max (µs), the save's own service time p99, arrivals unserved, the "
        "deepest backlog, and how late the scheduler enqueued arrivals (p99 µs; inside the "
        "latency, which runs from the intended time)*",
        "",
        *_md(
            [
                "row",
                "point",
                "offered/s",
                "served/s",
                "p50",
                "p90",
                "p99",
                "p99.9",
                "max",
                "service p99",
                "unserved",
                "backlog",
                "sched. lag p99",
            ],
            detail,
            "llrrrrrrrrrrr",
        ),
        "",
        "```console",
        "$ .venv/bin/python -m benchmarks run --scenario openloop --backend ckptlog,sqlite-rows",
        "$ .venv/bin/python -m benchmarks run --scenario openloop --rate 500,2000 "
        "--arrivals poisson --seed 7",
        "```",
    ]
    return "\n".join(lines).rstrip() + "\n"


# -- reproducing and comparing -------------------------------------------------------------------


COMPARE_TEXT = """\
Every run's JSON records what is needed to reproduce and to judge it: the exact command
(`command`), the seed of its random inputs (`seed`, `--seed`; the scenarios' states are fixed by
`random.Random(0)`), the machine's limits measured at its start (`limits`; `limits_end` too for
sustained runs), the filesystem and its mount options (`environment.mount`), the machine, the
library versions, the git revision and the load average. Latencies everywhere are
p50 / p90 / p99 / p99.9 / max, mean and standard deviation from a log-bucketed histogram.

`python -m benchmarks compare A.json B.json` prints the two runs' limits side by side and, for
every row both measured (same scenario, parameter and row), B's value over A's, raw and
normalised by each run's matching limit: a row that fsyncs by the disk's (`lmdb_commit` for one
save one commit, `lmdb_putmulti` for batched rows), any other row by the CPU reference (`cpu`). A
normalised ratio near 1.00 means B does as well as A relative to its machine.

```console
$ .venv/bin/python -m benchmarks compare benchmarks/results/bench.json /tmp/mine.json
```"""


def compare_section() -> str:
    return f"{COMPARE_TITLE}\n\n{COMPARE_TEXT}\n"


def print_run_tables(payload: dict[str, Any]) -> None:
    """The sustained and open-loop tables on the console (as on the page, in Markdown)."""
    for name, sc in payload.get("scenarios", {}).items():
        if name in SUSTAINED_NAMES:
            text = sustained_section(name, payload, "(this run)", None)
        elif name == "openloop":
            text = openloop_section(payload, "(this run)")
        else:
            continue
        tables = [ln for ln in text.splitlines() if ln.startswith(("|", "*"))]
        print(f"\n== {name}: {sc['title']} (summary) ==\n")
        print("\n".join(tables))


# -- the page ------------------------------------------------------------------------------------


def sections(
    payload: dict[str, Any], json_path: str, plots_dir: Path, *, published: Path | None
) -> dict[str, str]:
    """heading -> section text, for what ``payload`` holds (limits, sustained, open loop)."""
    out: dict[str, str] = {}
    if payload.get("limits"):
        out[LIMITS_KEY] = limits_section(payload, json_path, published)
    plots = plot_sustained(payload, plots_dir)
    for name in SUSTAINED_NAMES:
        sc = payload.get("scenarios", {}).get(name)
        if sc:
            out[f"## `{name}`"] = sustained_section(name, payload, json_path, plots.get(name))
    if "openloop" in payload.get("scenarios", {}):
        out["## `openloop`"] = openloop_section(payload, json_path)
    out[COMPARE_TITLE] = compare_section()
    return out


def replace_section(text: str, heading: str, section: str, before: tuple[str, ...]) -> str:
    """``text`` with the section starting at ``heading`` replaced by ``section``; a section not
    there yet goes before the first of ``before`` found (else at the end)."""
    start = text.find("\n" + heading)
    if start >= 0:
        start += 1
        nxt = text.find("\n## ", start + len(heading))
        tail = "" if nxt < 0 else text[nxt + 1 :]
        return text[:start] + section.rstrip() + "\n\n" + tail
    for marker in before:
        at = text.find("\n" + marker)
        if at >= 0:
            return text[: at + 1] + section.rstrip() + "\n\n" + text[at + 1 :]
    return text.rstrip() + "\n\n" + section.rstrip() + "\n"


def section_of(page: str, heading: str) -> str | None:
    """The section of ``page`` starting at ``heading`` (to the next ``## ``), if any."""
    start = page.find("\n" + heading)
    if start < 0:
        return None
    nxt = page.find("\n## ", start + 1 + len(heading))
    return page[start + 1 : None if nxt < 0 else nxt + 1]


def update_sections(
    doc: Path, payload: dict[str, Any], json_path: str, full_page: Callable[[], str]
) -> Path:
    """Replace (or add) in ``doc`` the sections ``payload`` holds: this module's, and those of
    the other scenarios it ran, cut from ``full_page()`` (the page the payload alone renders)."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    new = sections(payload, json_path, doc.parent / "benchmarks", published=PUBLISHED)
    others = [n for n in payload.get("scenarios", {}) if f"## `{n}`" not in new]
    page = full_page() if others else ""
    for name in others:
        cut = section_of(page, f"## `{name}`")
        if cut is not None:
            new[f"## `{name}`"] = cut
    pg = "## PostgreSQL"
    for heading, section in new.items():
        if heading == LIMITS_KEY:
            before: tuple[str, ...] = ("## `linear`", "## `", pg)
        elif heading == COMPARE_TITLE:
            before = (pg,)
        else:
            before = (COMPARE_TITLE, pg)
        text = replace_section(text, heading, section, before)
    tmp = doc.with_name(doc.name + ".tmp")
    tmp.write_text(text.rstrip() + "\n", encoding="utf-8")
    tmp.replace(doc)
    return doc
