"""The scenarios: linear, fanout, concurrent, instances, openloop (writes); load, list, replay
(reads).

``instances`` lives in :mod:`benchmarks.instances`, ``openloop`` in :mod:`benchmarks.openloop`
(the sustained runs of ``--duration`` in :mod:`benchmarks.sustained`).

Inputs are openarmature 0.17 records (``openarmature.checkpoint`` types, as the engine hands
them to a checkpointer; ckptlog's own ``eventlog.records`` types, the same shapes, when
openarmature is not installed); peers with other APIs take the same state and ids in their own
shape (:mod:`benchmarks.peers`). Everything is deterministic: states come from ``random.Random(0)``
and timestamps from a fixed origin, so two runs save the same bytes.

- ``state``: a dict of hex strings (about 2x compressible, like text) of the stated size, of
  which ``step`` and ``cursor`` change at every save.
- ``completed_positions``: the 8 most recent node positions (a bounded window, so a record's
  size is its state's and does not grow with the number of saves; a growing resume map would
  favour ckptlog, which stores only appended positions).
- fan-out records carry all N instances, each a fresh ``FanOutInstanceProgress`` per save, as
  the engine's ``_project_fan_out_progress`` builds them; inputs are built before the timer.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from benchmarks.common import process_write_bytes
from benchmarks.harness import BudgetExceeded, Param, Row, Sample
from benchmarks.instances import Instances
from benchmarks.openloop import OPENLOOP
from benchmarks.peers.base import FanOp, FanOutSetup, Peer, SaveOp, record_types

T0 = 1_700_000_000.0  # saved_at of save 0; save k is T0 + k ms
POSITIONS_WINDOW = 8
FAN_NODE = "process_items"
CORRELATIONS = 10  # list: invocations spread over this many correlation ids
HISTORY_STATE_BYTES = 1024  # load / replay / list / concurrent
BUILD_CHUNK = 10_000  # saves per build call (bounds the memory of prepared inputs)

WARMUP_OPS = 8


def fmt_bytes(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


@functools.cache
def payload(size: int) -> dict[str, str]:
    """Fixed fields making a state of about ``size`` bytes as JSON (64-hex-char values)."""
    rng = random.Random(0)
    fields = max(1, (size - 40) // 75)
    return {f"f{j:04d}": rng.randbytes(32).hex() for j in range(fields)}


def state_of(k: int, size: int) -> dict[str, Any]:
    return {"step": k, "cursor": f"page-{k:08d}", **payload(size)}


def positions(k: int) -> tuple[Any, ...]:
    node_position = record_types().NodePosition
    first = max(0, k - POSITIONS_WINDOW + 1)
    return tuple(node_position((), f"node-{j % 16}", j) for j in range(first, k + 1))


def save_op(inv: str, corr: str, k: int, size: int) -> SaveOp:
    state = state_of(k, size)
    at = T0 + k / 1000
    record = record_types().CheckpointRecord(
        invocation_id=inv,
        correlation_id=corr,
        state=state,
        completed_positions=positions(k),
        parent_states=(),
        last_saved_at=at,
        schema_version="1",
    )
    return SaveOp(inv, corr, k, state, record, at)


def settle() -> None:
    """Collect the garbage of the untimed set-up now, so no collection of it lands in the timed
    section (the collector stays on: the peers' own garbage is theirs to pay for)."""
    gc.collect()


async def timed_saves(peer: Peer, items: Sequence[Any]) -> Sample:
    settle()
    lat: list[float] = []
    w0 = process_write_bytes()
    t0 = time.perf_counter()
    for item in items:
        a = time.perf_counter()
        await peer.save(item)
        lat.append(time.perf_counter() - a)
    seconds = time.perf_counter() - t0
    return Sample(len(items), seconds, lat, _written(w0))


def _written(before: int | None) -> int | None:
    after = process_write_bytes()
    return None if before is None or after is None else after - before


class _Base:
    name: str
    title: str
    description: str
    mode: Literal["write", "read"] = "write"
    metric = "saves/s"
    primary: Literal["rate_median", "p50_us"] = "rate_median"
    higher_is_better = True

    def settings(self, quick: bool) -> dict[str, Any]:
        return {p.key: p.values for p in self.params(quick)}

    def params(self, quick: bool) -> list[Param]:
        raise NotImplementedError

    def forget(self) -> None:
        """Drop cached inputs (called after each parameter and scenario)."""

    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample:
        raise NotImplementedError(f"{self.name} is a read scenario")

    async def build(self, peer: Peer, param: Param, budget_s: float) -> None:
        raise NotImplementedError(f"{self.name} is a write scenario")

    async def measure(self, row: Row, param: Param, warmup: bool) -> Sample:
        raise NotImplementedError(f"{self.name} is a write scenario")


class Linear(_Base):
    name = "linear"
    title = "Sequential saves of one invocation"
    description = (
        "N sequential saves of one invocation, each durable on return (per the peer's "
        "durability), with a state of 200 B, 4 KiB or 64 KiB."
    )

    def params(self, quick: bool) -> list[Param]:
        sizes = (200, 4096) if quick else (200, 4096, 65536)
        saves = 20 if quick else 500
        return [
            Param(f"state={s}", f"{fmt_bytes(s)} state", {"state_bytes": s, "saves": saves})
            for s in sizes
        ]

    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample:
        n = param.values["saves"] if rep >= 0 else min(WARMUP_OPS, param.values["saves"])
        size = param.values["state_bytes"]
        ops = [save_op("linear", "bench", k, size) for k in range(n)]
        peer = row.peer
        await peer.open(path)
        try:
            return await timed_saves(peer, peer.prepare(ops))
        finally:
            await peer.close()


class FanOut(_Base):
    name = "fanout"
    title = "Fan-out: one save per completed instance"
    description = (
        "A fan-out of N instances; each save marks one more instance completed. Whole-record "
        "rows get openarmature-shaped records holding all N instances (the engine's "
        "save_fan_out_internal path, or save when the checkpointer has no such hook); "
        "per-instance rows (ckptlog save_instance, LangGraph put_writes, techrevati put_step) "
        "save the one instance. A window of K saves in the middle of the fan-out is timed, "
        "including the final flush; batched = FanOutInternalSaveBatching(flush_every=B)."
    )

    def __init__(self) -> None:
        self._key: tuple[str, int] | None = None
        self._inputs: tuple[FanOutSetup, list[FanOp]] | None = None

    @staticmethod
    def window(n: int, quick: bool) -> int:
        if quick:
            return min(n, 16)
        return {100: 64, 1000: 128, 10_000: 64}.get(n, 16)

    def params(self, quick: bool) -> list[Param]:
        ns = (100, 1000) if quick else (100, 1000, 10_000, 100_000)
        batch = 8 if quick else 32
        out = []
        for n in ns:
            for b in (0, batch):
                label = f"N={n:,}" + (f" batched/{b}" if b else "")
                values = {"n": n, "batching": b, "saves": self.window(n, quick)}
                out.append(Param(f"n={n},batching={b}", label, values))
        return out

    def forget(self) -> None:
        self._key, self._inputs = None, None

    def inputs(self, param: Param, rep: int) -> tuple[FanOutSetup, list[FanOp]]:
        """The setup record and the window's ops, shared by every row of one round."""
        key = (param.key, rep)
        if self._key != key or self._inputs is None:
            self._inputs = None  # free the previous round's records first
            n, k = param.values["n"], param.values["saves"]
            if rep < 0:
                k = min(k, WARMUP_OPS)
            self._inputs = build_fan_out(f"fan-{rep + 1}", n, k)
            self._key = key
        return self._inputs

    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample:
        setup, ops = self.inputs(param, rep)
        peer, variant = row.peer, row.variant
        await peer.open(path, batching=param.values["batching"])
        try:
            await peer.fanout_setup(setup)
            items = peer.prepare_fanout(ops, variant)
            settle()
            lat: list[float] = []
            w0 = process_write_bytes()
            t0 = time.perf_counter()
            for item in items:
                a = time.perf_counter()
                await peer.fanout_save(item, variant)
                lat.append(time.perf_counter() - a)
            await peer.flush()
            seconds = time.perf_counter() - t0
            return Sample(len(items), seconds, lat, _written(w0))
        finally:
            await peer.close()


def result_of(i: int) -> dict[str, Any]:
    return {"item": i, "score": (i * 2654435761) % 1000 / 1000, "label": f"label-{i % 17}"}


def build_fan_out(inv: str, n: int, k: int) -> tuple[FanOutSetup, list[FanOp]]:
    """A fan-out of ``n`` with ``(n - k) // 2`` instances completed, then ``k`` completions."""
    t = record_types()
    done = (n - k) // 2
    results = [result_of(i) for i in range(n)]
    state = {"query": "q", "items": n, "notes": "x" * 200}

    def record(completed: int, at: float) -> Any:
        instances = tuple(
            [t.FanOutInstanceProgress("completed", results[i]) for i in range(completed)]
            + [t.FanOutInstanceProgress("not_started") for _ in range(n - completed)]
        )
        return t.CheckpointRecord(
            invocation_id=inv,
            correlation_id="bench",
            state=state,
            completed_positions=(t.NodePosition((), "plan", 0), t.NodePosition((), "split", 1)),
            parent_states=(),
            last_saved_at=at,
            schema_version="1",
            fan_out_progress=(t.FanOutProgress(FAN_NODE, (), n, instances),),
        )

    setup = FanOutSetup(inv, "bench", FAN_NODE, n, done, record(done, T0), state)
    ops = []
    for j in range(k):
        at = T0 + (j + 1) / 1000
        i = done + j
        ops.append(FanOp(inv, FAN_NODE, i, results[i], record(i + 1, at), at))
    return setup, ops


class Concurrent(_Base):
    name = "concurrent"
    title = "Concurrent invocations saving at once"
    description = (
        "C invocations save at the same time, each S saves in sequence (1 KiB state). Async "
        "peers run C asyncio tasks; sync peers C threads; the raw ceiling commits each round "
        "of C frames in one transaction (perfect group commit)."
    )

    def params(self, quick: bool) -> list[Param]:
        cs = (1, 10) if quick else (1, 10, 100, 1000)
        total = 20 if quick else 1000
        return [Param(f"c={c}", f"C={c:,}", {"c": c, "saves_each": max(2, total // c)}) for c in cs]

    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample:
        c, s = param.values["c"], param.values["saves_each"]
        if rep < 0:
            s = min(s, 2)
        by_inv = [
            [
                save_op(f"inv-{i:04d}", f"corr-{i % CORRELATIONS}", k, HISTORY_STATE_BYTES)
                for k in range(s)
            ]
            for i in range(c)
        ]
        peer = row.peer
        await peer.open(path)
        try:
            if peer.concurrency == "batch":
                return await _rounds(peer, by_inv)
            if peer.concurrency == "threads":
                return _threads(peer, by_inv)
            return await _tasks(peer, by_inv)
        finally:
            await peer.close()


async def _tasks(peer: Peer, by_inv: list[list[SaveOp]]) -> Sample:
    items = [peer.prepare(ops) for ops in by_inv]
    lats: list[list[float]] = [[] for _ in items]
    settle()

    async def worker(its: list[Any], out: list[float]) -> None:
        for it in its:
            a = time.perf_counter()
            await peer.save(it)
            out.append(time.perf_counter() - a)

    w0 = process_write_bytes()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(its, out) for its, out in zip(items, lats, strict=True)))
    seconds = time.perf_counter() - t0
    return Sample(sum(map(len, items)), seconds, [x for out in lats for x in out], _written(w0))


def _threads(peer: Peer, by_inv: list[list[SaveOp]]) -> Sample:
    items = [peer.prepare(ops) for ops in by_inv]
    lats: list[list[float]] = [[] for _ in items]
    errors: list[BaseException] = []
    start = threading.Barrier(len(items) + 1)

    def worker(its: list[Any], out: list[float]) -> None:
        start.wait()
        try:
            for it in its:
                a = time.perf_counter()
                peer.save_blocking(it)
                out.append(time.perf_counter() - a)
        except Exception as e:  # noqa: BLE001 - re-raised in the benchmark's thread
            errors.append(e)

    threads = [
        threading.Thread(target=worker, args=(its, out), daemon=True)
        for its, out in zip(items, lats, strict=True)
    ]
    for t in threads:
        t.start()
    settle()
    w0 = process_write_bytes()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return Sample(sum(map(len, items)), seconds, [x for out in lats for x in out], _written(w0))


async def _rounds(peer: Peer, by_inv: list[list[SaveOp]]) -> Sample:
    c = len(by_inv)
    in_rounds = [ops[k] for k in range(len(by_inv[0])) for ops in by_inv]
    frames = peer.prepare(in_rounds)
    settle()
    lat: list[float] = []
    w0 = process_write_bytes()
    t0 = time.perf_counter()
    for i in range(0, len(frames), c):
        group = frames[i : i + c]
        a = time.perf_counter()
        await peer.save_group(group)
        lat += [time.perf_counter() - a] * len(group)
    seconds = time.perf_counter() - t0
    return Sample(len(frames), seconds, lat, _written(w0))


class _History(_Base):
    """A read scenario over one invocation's history, built incrementally per peer."""

    mode: Literal["write", "read"] = "read"
    inv = "history"

    def __init__(self) -> None:
        self._built: dict[str, tuple[int, float]] = {}  # peer -> (saves, build seconds)

    def forget(self) -> None:
        self._built.clear()

    async def build(self, peer: Peer, param: Param, budget_s: float) -> None:
        want = param.values["history"]
        have, spent = self._built.get(peer.name, (0, 0.0))
        if want <= have:
            return
        if have and spent > 0:
            rate = have / spent
            eta = spent + (want - have) / rate
            if eta > budget_s:
                raise BudgetExceeded(
                    f"building {want:,} saves would take ~{eta:.0f} s at the measured "
                    f"{rate:,.0f} saves/s (budget {budget_s:.0f} s); stopped at {have:,}"
                )
        t0 = time.perf_counter()
        for start in range(have, want, BUILD_CHUNK):
            stop = min(want, start + BUILD_CHUNK)
            ops = [save_op(self.inv, "bench", k, HISTORY_STATE_BYTES) for k in range(start, stop)]
            await peer.build(ops)
        self._built[peer.name] = (want, spent + time.perf_counter() - t0)


class Load(_History):
    name = "load"
    title = "Head load latency against history length"
    description = (
        "One invocation with H saves of history (1 KiB state); the latest record is loaded "
        "repeatedly. ckptlog's main row goes through the async protocol (Checkpointer.load, "
        "read on the event loop's thread for a record this small; openarmature's "
        "SQLiteCheckpointer hops to a thread); its `sync` row through CheckpointLog.load, "
        "which sync peers are compared with."
    )
    metric = "µs per load (p50)"
    primary: Literal["rate_median", "p50_us"] = "p50_us"
    higher_is_better = False

    def params(self, quick: bool) -> list[Param]:
        hs = (100, 1000) if quick else (100, 1000, 10_000, 100_000, 1_000_000)
        loads = 50 if quick else 1000
        return [Param(f"h={h}", f"{h:,} saves", {"history": h, "loads": loads}) for h in hs]

    async def measure(self, row: Row, param: Param, warmup: bool) -> Sample:
        n = min(WARMUP_OPS * 4, param.values["loads"]) if warmup else param.values["loads"]
        peer, variant = row.peer, row.variant
        settle()
        lat: list[float] = []
        t0 = time.perf_counter()
        for _ in range(n):
            a = time.perf_counter()
            got = await peer.load(self.inv, variant)
            lat.append(time.perf_counter() - a)
        seconds = time.perf_counter() - t0
        if got is None:
            raise AssertionError(f"{row.label} loaded nothing for {self.inv!r}")
        return Sample(n, seconds, lat)


class Replay(_History):
    name = "replay"
    title = "Full-history replay"
    description = (
        "Every save of one invocation's history read back, decoded (1 KiB state): "
        "ckptlog CheckpointLog.history, LangGraph list(thread), techrevati list(thread); the "
        "raw ceiling walks the values without decoding."
    )
    metric = "records/s"

    def params(self, quick: bool) -> list[Param]:
        h = 100 if quick else 20_000
        return [Param(f"h={h}", f"{h:,} saves", {"history": h})]

    async def measure(self, row: Row, param: Param, warmup: bool) -> Sample:
        settle()
        t0 = time.perf_counter()
        n = await row.peer.replay(self.inv)
        seconds = time.perf_counter() - t0
        if n != param.values["history"]:
            raise AssertionError(f"{row.label} replayed {n} records of {param.values['history']}")
        return Sample(n, seconds)


class ListInvocations(_Base):
    name = "list"
    title = "Listing invocations"
    description = (
        "I invocations with one save each (1 KiB state) spread over 10 correlation ids; list "
        "all of them, or those of one correlation id. One save per invocation, so a peer that "
        "lists checkpoints (LangGraph) lists invocations."
    )
    mode: Literal["write", "read"] = "read"
    metric = "ms per list (p50)"
    primary: Literal["rate_median", "p50_us"] = "p50_us"
    higher_is_better = False

    def __init__(self) -> None:
        self._built: set[str] = set()

    def forget(self) -> None:
        self._built.clear()

    def params(self, quick: bool) -> list[Param]:
        inv = 100 if quick else 10_000
        calls = 2 if quick else 5
        per = inv // CORRELATIONS
        return [
            Param("all", f"all {inv:,}", {"invocations": inv, "filter": False, "calls": calls}),
            Param(
                "by_correlation",
                f"{per:,} of {inv:,} by correlation id",
                {"invocations": inv, "filter": True, "calls": calls},
            ),
        ]

    async def build(self, peer: Peer, param: Param, budget_s: float) -> None:
        if peer.name in self._built:
            return
        n = param.values["invocations"]
        ops = [
            save_op(f"inv-{i:06d}", f"corr-{i % CORRELATIONS}", 0, HISTORY_STATE_BYTES)
            for i in range(n)
        ]
        await peer.build(ops)
        self._built.add(peer.name)

    async def measure(self, row: Row, param: Param, warmup: bool) -> Sample:
        inv = param.values["invocations"]
        corr = "corr-3" if param.values["filter"] else None
        expect = inv // CORRELATIONS if corr else inv
        calls = 1 if warmup else param.values["calls"]
        settle()
        lat: list[float] = []
        t0 = time.perf_counter()
        for _ in range(calls):
            a = time.perf_counter()
            got = await row.peer.list_invocations(corr)
            lat.append(time.perf_counter() - a)
            if got != expect:
                raise AssertionError(f"{row.label} listed {got} invocations, expected {expect}")
        return Sample(calls, time.perf_counter() - t0, lat)


SCENARIOS: dict[str, Any] = {
    s.name: s
    for s in (
        Linear(),
        FanOut(),
        Concurrent(),
        Instances(),
        Load(),
        ListInvocations(),
        Replay(),
        OPENLOOP,  # benchmarks/openloop.py
    )
}
