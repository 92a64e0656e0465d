"""The read side on a LangGraph thread, short against long: ``ckptlog show/history/diff
--thread`` and the viewer's API calls for a thread, on a 200-step and a 20,000-step thread
(issue 27: each flat in the thread's length).

    python -m benchmarks.langgraph_show [--short 200] [--long 20000] [--repeat 5] [--json PATH]

Each thread is written by the saver's own ``put``/``put_writes`` (durability ``process``:
what is measured is reading), with the small state of ``benchmarks.langgraph_read`` (a
20-item list and a counter, every channel changed each step), one task's writes on each
checkpoint: a step is two frames. (A state that grows with the thread, such as every message
kept in one list, makes each read cost grow with it: the value itself is longer.) The two
logs are read interleaved (short, long, short, ...), in this process: the CLI through
``eventlog.cli.main``, the viewer through ``eventlog.viewer.api.Viewer`` (what the HTTP
handler calls). The figure
is the median of ``--repeat`` calls; ``long/short`` is the flatness ratio (1.0: flat), and
``min ratio`` the same of the fastest calls (the least disturbed by a loaded machine). The
``replay`` rows are the walk from the first frame that ``show --thread`` and ``/api/steps``
did before the steps were read from the view's rows (kept as the fallback), for scale.
"""

from __future__ import annotations

import argparse
import io
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import environment, loadavg, median, print_table, write_json
from benchmarks.langgraph_read import states

RESULTS = Path(__file__).resolve().parent / "results" / "langgraph_show.json"
THREAD = "agent"


def build(path: Path, steps: int) -> None:
    from langgraph.checkpoint.base import empty_checkpoint  # noqa: PLC0415
    from langgraph.checkpoint.base.id import uuid6  # noqa: PLC0415

    from eventlog.integrations.langgraph import CkptlogSaver  # noqa: PLC0415

    with CkptlogSaver.open(path, durability="process") as saver:
        cfg: Any = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        versions: dict[str, Any] = {}
        for i, values in zip(range(steps), states("small"), strict=False):
            new = {}
            for ch in values:
                versions[ch] = saver.get_next_version(versions.get(ch), None)
                new[ch] = versions[ch]
            cp = empty_checkpoint()
            cp["id"] = str(uuid6(clock_seq=i))
            cp["channel_values"] = values
            cp["channel_versions"] = dict(versions)
            meta = {"source": "loop", "step": i, "parents": {}}
            cfg = saver.put(cfg, cp, meta, new)  # type: ignore[arg-type]
            saver.put_writes(cfg, [("n", i + 1)], f"task-{i}", "agent")


def cli(*argv: str) -> None:
    from eventlog.cli import main  # noqa: PLC0415

    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    if code != 0:
        raise SystemExit(f"ckptlog {' '.join(argv)} exited {code}: {err.getvalue()}")


def operations(path: Path, steps: int, viewer: Any) -> dict[str, Callable[[], Any]]:
    from eventlog import read  # noqa: PLC0415
    from eventlog.integrations import langgraph_steps  # noqa: PLC0415
    from eventlog.integrations.langgraph_store import BlobReader  # noqa: PLC0415

    p, last = str(path), 2 * steps
    stream = f"lg:{len(THREAD)}:{THREAD}:"

    def in_session(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with viewer.session():
                return fn()

        return run

    def replay() -> Any:
        with viewer.session():
            for s in langgraph_steps.steps(viewer.cl.log, stream, BlobReader):
                if s.seq == last:
                    return s
        return None

    def uncached_listing() -> Any:
        viewer._inv_cache = None  # the viewer lists the log again only when it changed
        return viewer.invocations("", "", "", 0, 100)

    def all_steps() -> Any:
        with viewer.session():
            return sum(1 for _ in read.steps(viewer.cl.log, stream))

    return {
        "cli show --thread (latest)": lambda: cli("show", p, "--thread", THREAD, "--json"),
        "cli show --thread --at SEQ": lambda: cli(
            "show", p, "--thread", THREAD, "--at", str(max(1, last - 11)), "--json"
        ),
        "cli history --thread -n 20": lambda: cli(
            "history", p, "--thread", THREAD, "-n", "20", "--json"
        ),
        "cli diff --thread A B (late)": lambda: cli(
            "diff", p, "--thread", THREAD, str(max(1, last - 21)), str(last - 1), "--json"
        ),
        "viewer /api/invocations (uncached)": in_session(uncached_listing),
        "viewer /api/langgraph (100 newest)": in_session(
            lambda: viewer.langgraph(THREAD, "", 0, 100)
        ),
        "viewer /api/steps (first page)": in_session(lambda: viewer.steps(stream, 0, 100)),
        "viewer /api/steps (last page)": in_session(
            lambda: viewer.steps(stream, max(0, last - 100), 100)
        ),
        "replay to the latest step (the old path)": replay,
        "every step (history, no -n)": all_steps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", type=int, default=200)
    ap.add_argument("--long", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=str(RESULTS), help="where to write the results")
    a = ap.parse_args(argv)

    from eventlog.viewer.api import Viewer  # noqa: PLC0415

    root = Path(tempfile.mkdtemp(prefix="lgshow-"))
    try:
        lengths = (a.short, a.long)
        built = {}
        for n in lengths:
            t0 = time.perf_counter()
            build(root / str(n), n)
            built[n] = time.perf_counter() - t0
            print(f"built {n:,} steps in {built[n]:.1f} s", flush=True)
        load_before = loadavg()
        viewers = {n: Viewer(str(root / str(n))) for n in lengths}
        ops = {n: operations(root / str(n), n, viewers[n]) for n in lengths}
        times: dict[str, dict[int, list[float]]] = {
            op: {n: [] for n in lengths} for op in ops[a.short]
        }
        for op in times:
            for n in lengths:  # warm: the first call imports and opens
                ops[n][op]()
            rounds = a.repeat if not op.startswith(("replay", "every")) else max(1, a.repeat // 2)
            for _ in range(rounds):
                for n in lengths:
                    t0 = time.perf_counter()
                    ops[n][op]()
                    times[op][n].append(time.perf_counter() - t0)
        for v in viewers.values():
            v.close()
        load_after = loadavg()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    results = []
    for op, by_n in times.items():
        short_ms, long_ms = median(by_n[a.short]) * 1e3, median(by_n[a.long]) * 1e3
        short_min, long_min = min(by_n[a.short]) * 1e3, min(by_n[a.long]) * 1e3
        results.append(
            {
                "op": op,
                "short_ms": short_ms,
                "long_ms": long_ms,
                "ratio": long_ms / short_ms,
                "short_min_ms": short_min,
                "long_min_ms": long_min,
                "min_ratio": long_min / short_min,
            }
        )
    print_table(
        [
            "operation",
            f"{a.short:,} steps, ms",
            f"{a.long:,} steps, ms",
            "long/short",
            "min ratio",
        ],
        [
            [
                r["op"],
                f"{r['short_ms']:,.2f}",
                f"{r['long_ms']:,.2f}",
                f"{r['ratio']:.2f}",
                f"{r['min_ratio']:.2f}",
            ]
            for r in results
        ],
        title=f"medians of {a.repeat} interleaved calls; load {load_before} -> {load_after}",
    )
    payload = {
        "benchmark": "langgraph_show",
        "lengths": list(lengths),
        "repeat": a.repeat,
        "build_seconds": {str(n): built[n] for n in lengths},
        "load": {"before": load_before, "after": load_after},
        "results": results,
        "environment": environment(durability="process", data_dir=str(root)),
    }
    print(f"wrote {write_json(a.json, payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
