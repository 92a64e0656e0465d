"""``python -m benchmarks compare A.json B.json``: two runs side by side, normalised by their
machines.

A figure from another machine or another day is only comparable once the machine is taken out:
each run carries its own limits (:mod:`benchmarks.limits`), so for every row both runs measured
(same scenario, parameter and row) this prints B's value over A's, raw and normalised: a row that
fsyncs is divided by its run's matching disk limit (one save one commit: LMDB synced commits/s;
batched rows: LMDB putmulti rows/s), any other row by its run's CPU reference (msgspec + zstd
encodes/s). A latency is multiplied by the limit instead (a slower disk makes it longer).
``1.00`` normalised means B does as well as A relative to its machine; above 1, better for a rate,
worse for a latency (the ``better`` column says which).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.common import print_table
from benchmarks.limits import HEADLINE, headline, matching_limit


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ValueError(f"no results at {path}; expected the JSON of `python -m benchmarks run`")
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("benchmark") != "bench":
        raise ValueError(f"{path} is not the JSON of `python -m benchmarks run`")
    return data  # type: ignore[no-any-return]


def _rows(payload: dict[str, Any]) -> dict[tuple[str, str, str], tuple[dict[str, Any], Any]]:
    out = {}
    for name, sc in payload.get("scenarios", {}).items():
        for param in sc["params"]:
            for row in param["rows"]:
                if row["status"] == "ok":
                    out[(name, param["key"], row["label"])] = (row, param)
    return out


def limit_for(scenario: str, values: dict[str, Any], durability: str) -> str:
    """The limit a row of ``durability`` in ``scenario`` is normalised by."""
    if durability == "fsync":
        return matching_limit(scenario, values) or "fdatasync"
    return "cpu"


def comparison(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Limits side by side and every common row's raw and normalised B/A."""
    la, lb = a.get("limits") or {}, b.get("limits") or {}
    limits = []
    for name in HEADLINE:
        va, vb = headline(la, name), headline(lb, name)
        limits.append({"limit": name, "a": va, "b": vb, "b_over_a": vb / va if va and vb else None})
    rows = []
    ra, rb = _rows(a), _rows(b)
    for key in [k for k in ra if k in rb]:
        (row_a, param), (row_b, _) = ra[key], rb[key]
        sc = a["scenarios"][key[0]]
        metric = sc["primary"]
        va, vb = row_a.get(metric), row_b.get(metric)
        if not va or not vb:
            continue
        limit = limit_for(key[0], param["values"], row_a["durability"])
        ma, mb = headline(la, limit), headline(lb, limit)
        raw = vb / va
        norm = None
        if ma and mb:
            # a rate over the limit's rate; a latency times it
            norm = (vb / mb) / (va / ma) if sc["higher_is_better"] else (vb * mb) / (va * ma)
        rows.append(
            {
                "scenario": key[0],
                "param": param["label"],
                "row": key[2],
                "metric": sc["metric"],
                "a": va,
                "b": vb,
                "b_over_a": raw,
                "limit": limit,
                "normalised": norm,
                "higher_is_better": sc["higher_is_better"],
            }
        )
    return {"limits": limits, "rows": rows}


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _v(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}"


def cmd_compare(path_a: Path, path_b: Path) -> int:
    a, b = _load(path_a), _load(path_b)
    result = comparison(a, b)
    for tag, p, data in (("A", path_a, a), ("B", path_b, b)):
        env = data.get("environment", {})
        print(
            f"{tag}: {p} ({env.get('timestamp_utc')}, {env.get('cpu_model')}, "
            f"git {(env.get('git') or {}).get('commit')}, load {env.get('loadavg_1_5_15')})"
        )
        print(f"   `{data.get('command')}`, seed {data.get('seed')}")
    print()
    print_table(
        ["limit", "A", "B", "B/A"],
        [[x["limit"], _v(x["a"]), _v(x["b"]), _r(x["b_over_a"])] for x in result["limits"]],
        title="== machine limits ==",
    )
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for r in result["rows"]:
        by_scenario.setdefault(r["scenario"], []).append(r)
    if not by_scenario:
        print("\nno row was measured in both runs (same scenario, parameter and row)")
    for name, rows in by_scenario.items():
        print()
        print_table(
            ["parameter", "row", "A", "B", "B/A", "normalised", "by", "better"],
            [
                [
                    r["param"],
                    r["row"],
                    _v(r["a"]),
                    _v(r["b"]),
                    _r(r["b_over_a"]),
                    _r(r["normalised"]),
                    r["limit"],
                    _better(r),
                ]
                for r in rows
            ],
            align="llrrrrll",
            title=f"== {name}: {rows[0]['metric']} ==",
        )
    return 0


def _better(r: dict[str, Any]) -> str:
    """Which run does better relative to its machine: ``A``, ``B``, ``=`` (within 5 %), or
    ``-`` (not normalised)."""
    n = r["normalised"]
    if n is None:
        return "-"
    if abs(n - 1) < 0.05:
        return "="
    return "B" if (n > 1) == r["higher_is_better"] else "A"
