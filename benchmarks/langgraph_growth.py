"""Storage growth of a LangGraph thread: LmdbSaver vs SqliteSaver.

``python -m benchmarks.langgraph_growth [--quick] [--steps N] [--out PATH]`` runs a real
``StateGraph`` whose every step appends one ``AIMessage`` (30 seeded random words) to a
``messages`` channel (``add_messages``), for 1,000 steps (50 with ``--quick``), once per saver:

- ``LmdbSaver`` with durability ``fsync`` (the default: every commit flushed to the device),
- ``LmdbSaver`` with durability ``process`` (committed to the OS only: the saver's own cost,
  without the device's flush latency, which on a shared machine varies from commit to commit),
- ``SqliteSaver`` (langgraph-checkpoint-sqlite, its defaults: WAL journal, one transaction per
  put and per put_writes).

Each is run ``--repeats`` times (3; 1 with ``--quick``); a step's put latency is the median
over the repeats, which takes out most of the flush-latency noise.

It prints and writes (``benchmarks/results/langgraph_growth.json``, with the environment):

(a) bytes on disk after the run (every file of the saver's directory, the database closed)
    and the ratio ours / SQLite. Target: <= 1/10.
(b) ``put`` latency near step 10 (the puts of steps 0..20) and at the last step (the last 21
    puts): median, p90 and max of each window, and the ratio of the medians, last / step 10.
    Target for ours: within 2x. Puts are timed around the saver's own ``put`` (LangGraph runs
    them on a background thread while the next step computes).
(c) the same ratio with the device's flush noise taken out of the comparison: the ``put``
    calls LangGraph made in a run are recorded, then replayed into a fresh saver (durable,
    ``fsync``) on two threads: one is brought to step ``steps - 21`` untimed, then the puts of
    its last 21 steps alternate with the first 21 puts of the other thread, each timed. Both
    windows thus share the same seconds of the device's life (on a shared machine, fsync
    latency drifts by 10x within a minute, which (b) cannot separate from growth).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, copy_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from benchmarks.common import (
    environment,
    fmt_float,
    fmt_int,
    median,
    percentile,
    print_table,
    write_json,
)
from eventlog.integrations.langgraph import LmdbSaver

RESULTS = Path(__file__).resolve().parent / "results" / "langgraph_growth.json"
STEPS = 1_000
QUICK_STEPS = 50
WORDS_PER_MESSAGE = 30
SEED = 20_241_122
EARLY = range(1, 22)  # the puts of steps 0..20 (put 0 is the input checkpoint)
LATE = 21  # the last puts
REPEATS = 3
CONFIGS = (("LmdbSaver", "fsync"), ("LmdbSaver", "process"), ("SqliteSaver", "sqlite default"))
TARGET_BYTES_RATIO = 0.1
TARGET_LATENCY_RATIO = 2.0
SENTENCE = (
    "agent tool call result plan step search answer context token model memory graph node "
    "state thread checkpoint resume retry error value list message user system draft review"
)
VOCABULARY = tuple(SENTENCE.split())


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    n: int


def chat_graph(steps: int, rng: random.Random) -> StateGraph[Chat]:
    def speak(s: Chat) -> dict[str, Any]:
        text = " ".join(rng.choice(VOCABULARY) for _ in range(WORDS_PER_MESSAGE))
        return {"messages": [AIMessage(text)], "n": s["n"] + 1}

    b = StateGraph(Chat)
    b.add_node("speak", speak)
    b.add_edge(START, "speak")
    b.add_conditional_edges("speak", lambda s: "speak" if s["n"] < steps else END)
    return b


def du(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def timed_puts(saver: BaseCheckpointSaver[Any]) -> list[float]:
    """Wrap the saver's ``put`` (instance attribute) to record each call's seconds."""
    latencies: list[float] = []
    put: Callable[..., Any] = saver.put

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return put(*args, **kwargs)
        finally:
            latencies.append(time.perf_counter() - t0)

    saver.put = timed  # type: ignore[method-assign]
    return latencies


def run_once(name: str, durability: str, steps: int, directory: Path) -> dict[str, Any]:
    directory.mkdir(parents=True)
    conn: sqlite3.Connection | None = None
    saver: BaseCheckpointSaver[Any]
    if name == "LmdbSaver":
        saver = LmdbSaver.open(directory / "lg", durability=durability)
    else:
        conn = sqlite3.connect(directory / "checkpoints.sqlite", check_same_thread=False)
        saver = SqliteSaver(conn)
    latencies = timed_puts(saver)
    graph = chat_graph(steps, random.Random(SEED)).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "chat"}, "recursion_limit": steps + 10}
    t0 = time.perf_counter()
    out = graph.invoke({"messages": [], "n": 0}, config)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    if len(out["messages"]) != steps:
        raise SystemExit(f"{name}: expected {steps} messages, got {len(out['messages'])}")
    reloaded = graph.get_state(config).values  # type: ignore[arg-type]
    if [m.content for m in reloaded["messages"]] != [m.content for m in out["messages"]]:
        raise SystemExit(f"{name}: the reloaded thread differs from the run")
    extra: dict[str, Any] = {}
    if isinstance(saver, LmdbSaver):
        stats = saver.stats()
        extra = {"log_bytes": stats.log_bytes, "frames": stats.frames, "commits": stats.commits}
        saver.close()
    if conn is not None:
        conn.close()  # checkpoints the WAL into the database file
    return {"seconds": seconds, "disk_bytes": du(directory), "latencies": latencies, **extra}


def window(values: list[float]) -> dict[str, float]:
    return {
        "p50": median(values) * 1e3,
        "p90": percentile(values, 90) * 1e3,
        "max": max(values) * 1e3,
    }


def run(name: str, durability: str, steps: int, repeats: int, root: Path) -> dict[str, Any]:
    runs = [
        run_once(name, durability, steps, root / f"{name}-{durability}-{i}") for i in range(repeats)
    ]
    puts = min(len(r["latencies"]) for r in runs)
    per_put = [median([r["latencies"][i] for r in runs]) for i in range(puts)]
    early = [per_put[i] for i in EARLY if i < puts]
    late = per_put[-LATE:]
    extra = {k: runs[0][k] for k in ("log_bytes", "frames", "commits") if k in runs[0]}
    return {
        "saver": name,
        "durability": durability,
        "steps": steps,
        "repeats": repeats,
        "puts": puts,
        "seconds": median([r["seconds"] for r in runs]),
        "disk_bytes": runs[0]["disk_bytes"],
        "put_early_ms": window(early),
        "put_late_ms": window(late),
        "put_late_over_early": median(late) / median(early),
        **extra,
    }


Put = tuple[Any, Any, Any, Any]  # (config, checkpoint, metadata, new_versions)


def record_puts(steps: int, directory: Path) -> list[Put]:
    """The ``put`` calls a run of the chat graph makes, in order."""
    calls: list[Put] = []
    with LmdbSaver.open(directory, durability="process") as saver:
        put = saver.put

        def record(config: Any, checkpoint: Any, md: Any, new_versions: Any) -> Any:
            calls.append((config, copy_checkpoint(checkpoint), dict(md), dict(new_versions)))
            return put(config, checkpoint, md, new_versions)

        saver.put = record  # type: ignore[method-assign]
        graph = chat_graph(steps, random.Random(SEED)).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "chat"}, "recursion_limit": steps + 10}
        graph.invoke({"messages": [], "n": 0}, config)  # type: ignore[arg-type]
    return calls


def on_thread(config: Any, thread: str) -> Any:
    return {"configurable": {**config["configurable"], "thread_id": thread}}


def interleaved_once(name: str, calls: list[Put], directory: Path) -> tuple[list[float], ...]:
    directory.mkdir(parents=True)
    conn: sqlite3.Connection | None = None
    saver: BaseCheckpointSaver[Any]
    if name == "LmdbSaver":
        saver = LmdbSaver.open(directory / "lg", durability="fsync")
    else:
        conn = sqlite3.connect(directory / "checkpoints.sqlite", check_same_thread=False)
        saver = SqliteSaver(conn)
    late_start = len(calls) - LATE
    for config, *rest in calls[:late_start]:
        saver.put(on_thread(config, "long"), *rest)
    early: list[float] = []
    late: list[float] = []
    for k in range(LATE):
        for thread, i, out in (("short", k, early), ("long", late_start + k, late)):
            config, *rest = calls[i]
            t0 = time.perf_counter()
            saver.put(on_thread(config, thread), *rest)
            out.append(time.perf_counter() - t0)
    if isinstance(saver, LmdbSaver):
        saver.close()
    if conn is not None:
        conn.close()
    return early, late


def interleaved(name: str, calls: list[Put], repeats: int, root: Path) -> dict[str, Any]:
    runs = [interleaved_once(name, calls, root / f"replay-{name}-{i}") for i in range(repeats)]
    early = [median([r[0][k] for r in runs]) for k in range(LATE)]
    late = [median([r[1][k] for r in runs]) for k in range(LATE)]
    return {
        "saver": name,
        "durability": "fsync" if name == "LmdbSaver" else "sqlite default",
        "repeats": repeats,
        "put_early_ms": window(early),
        "put_late_ms": window(late),
        "put_late_over_early": median(late) / median(early),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps (smoke)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    steps = args.steps or (QUICK_STEPS if args.quick else STEPS)
    repeats = args.repeats or (1 if args.quick else REPEATS)
    root = Path(tempfile.mkdtemp(prefix="lg-growth-"))
    try:
        rows = [run(name, durability, steps, repeats, root) for name, durability in CONFIGS]
        calls = record_puts(steps, root / "recorded")
        replays = [interleaved(name, calls, repeats, root) for name in ("LmdbSaver", "SqliteSaver")]
        env = environment(durability="fsync (LmdbSaver also: process)", data_dir=str(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours, ours_process, sqlite = rows
    bytes_ratio = ours["disk_bytes"] / sqlite["disk_bytes"]
    print_table(
        [
            "saver",
            "durability",
            "steps",
            "disk bytes",
            "run s",
            "put@10 p50 ms",
            "p90",
            "put@end p50 ms",
            "p90",
            "end/10",
        ],
        [
            [
                r["saver"],
                r["durability"],
                fmt_int(r["steps"]),
                fmt_int(r["disk_bytes"]),
                fmt_float(r["seconds"]),
                fmt_float(r["put_early_ms"]["p50"], 3),
                fmt_float(r["put_early_ms"]["p90"], 3),
                fmt_float(r["put_late_ms"]["p50"], 3),
                fmt_float(r["put_late_ms"]["p90"], 3),
                fmt_float(r["put_late_over_early"]),
            ]
            for r in rows
        ],
        title=f"(a)+(b) a thread appending one message per step, {steps} steps, "
        f"median of {repeats} run(s)",
    )
    print(
        f"\nbytes on disk, ours / SQLite: {bytes_ratio:.4f} (1/{1 / bytes_ratio:,.0f}; "
        f"target <= {TARGET_BYTES_RATIO})"
    )
    print_table(
        ["saver", "durability", "put@10 p50 ms", "p90", "put@end p50 ms", "p90", "end/10"],
        [
            [
                r["saver"],
                r["durability"],
                fmt_float(r["put_early_ms"]["p50"], 3),
                fmt_float(r["put_early_ms"]["p90"], 3),
                fmt_float(r["put_late_ms"]["p50"], 3),
                fmt_float(r["put_late_ms"]["p90"], 3),
                fmt_float(r["put_late_over_early"]),
            ]
            for r in replays
        ],
        title=f"\n(c) the run's puts replayed, the {LATE} first and the {LATE} last interleaved",
    )
    print(
        f"\nput latency, last steps / step 10, ours: {ours_process['put_late_over_early']:.2f}x "
        f"with durability='process' (b), {replays[0]['put_late_over_early']:.2f}x with fsync "
        f"interleaved (c), {ours['put_late_over_early']:.2f}x with fsync in the run (b) "
        f"(target <= {TARGET_LATENCY_RATIO}x); SQLite: {replays[1]['put_late_over_early']:.2f}x (c)"
    )
    packages = ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite")
    payload = {
        "benchmark": "langgraph_growth",
        "quick": bool(args.quick),
        "steps": steps,
        "seed": SEED,
        "environment": {
            **env,
            "langgraph_packages": {p: metadata.version(p) for p in packages},
            "sqlite": sqlite3.sqlite_version,
        },
        "results": rows,
        "interleaved": replays,
        "ratios": {
            "disk_bytes_ours_over_sqlite": bytes_ratio,
            "put_late_over_early_ours": ours["put_late_over_early"],
            "put_late_over_early_ours_process": ours_process["put_late_over_early"],
            "put_late_over_early_sqlite": sqlite["put_late_over_early"],
            "put_late_over_early_ours_interleaved": replays[0]["put_late_over_early"],
            "put_late_over_early_sqlite_interleaved": replays[1]["put_late_over_early"],
        },
        "targets": {
            "disk_bytes_ratio_max": TARGET_BYTES_RATIO,
            "latency_ratio_max": TARGET_LATENCY_RATIO,
        },
    }
    print(f"wrote {write_json(args.out, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
