"""The benchmark runner: interleaved repeats, warm-up, statistics, ratios, progress, JSON.

Method (the same for every scenario):
- Every (parameter, row) first runs once as a warm-up, discarded. Then ``repeats`` rounds run
  every row in turn, the order reversed every other round (A B C, C B A, ...), so slow drift of
  the machine (other engineers share its cores) spreads over all rows alike.
- Write scenarios give every run a fresh store; read scenarios build one store per peer (built
  incrementally, parameter by parameter) and measure it repeatedly.
- A row's throughput is the median over its runs; its latencies (p50 / p99) pool every timed
  operation of every run; bytes written per operation are the median over runs.
- Each row is compared with the ckptlog row its peer names (:meth:`Peer.reference`): ``ratio``
  is how many times better ckptlog is (its throughput / the row's, or the row's latency /
  ckptlog's), ``ratio_bytes`` the row's bytes written / ckptlog's.
- A scenario may run fewer timed rounds at its largest parameters (``repeats``), skip the
  warm-up (``warmup = False``: each run in a fresh process has nothing to warm) and say which
  peers it cannot express at all (``applicable``); a run stopped at a time budget is ``partial``
  (its rate is the operations done over the time taken).
- A peer failing raises nothing out of the run: its row is reported ``error`` with the message
  (and the CLI exits non-zero). A scenario a peer cannot express is ``n/a`` with the reason; a
  history too long to build within the budget is ``skipped`` with the estimate.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

from benchmarks.common import median
from benchmarks.histogram import Histogram
from benchmarks.peers.base import Peer, row_label

Status = Literal["ok", "n/a", "skipped", "error"]


@dataclass
class Sample:
    """One timed run: ``ops`` operations in ``seconds``."""

    ops: int
    seconds: float
    latencies: list[float] = field(default_factory=list)  # seconds per operation
    bytes_written: int | None = None
    extra: dict[str, float] = field(default_factory=dict)  # scenario-specific figures
    partial: bool = False  # stopped at a time budget: ``ops`` is what was done
    hist: Histogram | None = None  # latencies recorded straight into a histogram (long runs)
    timeline: list[dict[str, float]] = field(default_factory=list)  # sustained: per interval

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class Param:
    key: str  # stable id, e.g. "n=10000,batching=32"
    label: str  # for tables, e.g. "N=10,000 batched"
    values: dict[str, Any]


@dataclass
class Row:
    peer: Peer
    variant: str

    @property
    def label(self) -> str:
        return row_label(self.peer.name, self.variant)


@dataclass
class Cell:
    """The result of one row at one parameter."""

    row: Row
    status: Status = "ok"
    reason: str = ""
    samples: list[Sample] = field(default_factory=list)
    reference: str = ""
    ratio: float | None = None
    ratio_bytes: float | None = None

    def primary(self, key: str) -> float | None:
        if self.status != "ok" or not self.samples:
            return None
        return summarize(self.samples)[key]  # type: ignore[no-any-return]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "peer": self.row.peer.name,
            "variant": self.row.variant,
            "label": self.row.label,
            "durability": self.row.peer.durability.kind,
            "status": self.status,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.status == "ok" and self.samples:
            out.update(summarize(self.samples))
            out["runs"] = [
                {
                    "ops": s.ops,
                    "seconds": round(s.seconds, 6),
                    "rate": round(s.rate, 3),
                    "bytes_written": s.bytes_written,
                    **({"partial": True} if s.partial else {}),
                    **({"extra": s.extra} if s.extra else {}),
                    **({"timeline": s.timeline} if s.timeline else {}),
                }
                for s in self.samples
            ]
            out["reference"] = self.reference
            out["ratio"] = _round(self.ratio)
            out["ratio_bytes"] = _round(self.ratio_bytes)
        return out


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def summarize(samples: Sequence[Sample]) -> dict[str, Any]:
    rates = [s.rate for s in samples]
    lat = Histogram.of(x for s in samples for x in s.latencies)
    for s in samples:
        if s.hist is not None:
            lat.merge(s.hist)
    per_op = [s.bytes_written / s.ops for s in samples if s.bytes_written is not None and s.ops]
    keys = [k for s in samples for k in s.extra]
    extra = {k: median([s.extra[k] for s in samples if k in s.extra]) for k in dict.fromkeys(keys)}
    return {
        "ops_per_run": samples[0].ops,
        "rate_median": median(rates),
        "rate_min": min(rates),
        "rate_max": max(rates),
        **lat.summary_us(),  # p50_us, p90_us, p99_us, p999_us, max_us, ...: see histogram.py
        "bytes_per_op": median(per_op) if per_op else None,
        **({"extra": extra} if extra else {}),
        **(
            {"partial_runs": sum(s.partial for s in samples)}
            if any(s.partial for s in samples)
            else {}
        ),
    }


class BudgetExceeded(Exception):
    """Building a read scenario's store to this parameter would take longer than allowed."""


class Scenario(Protocol):
    name: str
    title: str
    description: str
    mode: Literal["write", "read"]
    metric: str  # what the primary value is, e.g. "saves/s"
    primary: Literal["rate_median", "p50_us"]
    higher_is_better: bool

    def params(self, quick: bool) -> list[Param]: ...

    def settings(self, quick: bool) -> dict[str, Any]: ...

    # write mode: one fresh store per run (rep = -1 for the warm-up)
    async def run(self, row: Row, param: Param, path: Path, rep: int) -> Sample: ...

    # read mode: extend the peer's store up to ``param``, then measure it
    async def build(self, peer: Peer, param: Param, budget_s: float) -> None: ...

    async def measure(self, row: Row, param: Param, warmup: bool) -> Sample: ...

    def forget(self) -> None: ...


class Progress:
    """A one-line progress bar on stderr (a line per scenario when stderr is not a terminal)."""

    def __init__(self, total: int, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self.last_title = ""

    def step(self, title: str, detail: str, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        if self.tty:
            width = 28
            filled = int(width * min(self.done, self.total) / self.total)
            bar = "#" * filled + "-" * (width - filled)
            pct = 100 * min(self.done, self.total) // self.total
            line = f"\r[{bar}] {pct:3d}% {_clock(elapsed)} {title}: {detail}"
            self.stream.write(line[:160].ljust(160))
            self.stream.flush()
        elif title != self.last_title:
            pct = 100 * min(self.done, self.total) // self.total
            self.stream.write(f"[{pct:3d}% {_clock(elapsed)}] {title}\n")
            self.stream.flush()
        self.last_title = title

    def advance_to(self, done: int, title: str) -> None:
        """Account for steps that did not run (rows n/a, failed or skipped)."""
        if done > self.done:
            self.step(title, "", n=done - self.done)

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\r" + " " * 160 + "\r")
            self.stream.flush()


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


def _error(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}"


@dataclass
class ParamResult:
    param: Param
    cells: list[Cell]

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.param.key,
            "label": self.param.label,
            "values": self.param.values,
            "rows": [c.to_json() for c in self.cells],
        }


class Runner:
    """Runs scenarios over rows of peers, interleaved, and computes ratios."""

    def __init__(
        self,
        root: Path,
        *,
        quick: bool,
        repeats: int,
        progress: Progress,
        build_budget_s: Callable[[Peer], float],
    ) -> None:
        self.root = root
        self.quick = quick
        self.repeats = repeats
        self.progress = progress
        self.build_budget_s = build_budget_s

    @staticmethod
    def rows(scenario: Scenario, peers: Sequence[Peer]) -> list[Row]:
        return [Row(p, v) for p in peers for v in p.variants(scenario.name)]

    def repeats_of(self, scenario: Scenario, param: Param) -> int:
        """Timed rounds of ``param``: ``--repeats``, or fewer where the scenario caps them."""
        cap = getattr(scenario, "repeats", None)
        return int(cap(param, self.repeats)) if cap is not None else self.repeats

    @staticmethod
    def first_round(scenario: Scenario) -> int:
        """-1 (a warm-up round first) unless the scenario has no warm-up."""
        return -1 if getattr(scenario, "warmup", True) else 0

    def units(self, scenario: Scenario, peers: Sequence[Peer]) -> int:
        """Progress steps ``scenario`` will take."""
        rows = len(self.rows(scenario, peers))
        builds = len(peers) if scenario.mode == "read" else 0
        return sum(
            rows * (self.repeats_of(scenario, p) - self.first_round(scenario)) + builds
            for p in scenario.params(self.quick)
        )

    async def run(self, scenario: Scenario, peers: Sequence[Peer]) -> list[ParamResult]:
        rows = self.rows(scenario, peers)
        if scenario.mode == "write":
            results = await self._run_write(scenario, rows)
        else:
            results = await self._run_read(scenario, rows, peers)
        for result in results:
            self._ratios(scenario, result)
        return results

    def _applicable(self, scenario: Scenario, param: Param, rows: list[Row]) -> list[Cell]:
        cells = []
        applicable = getattr(scenario, "applicable", None)
        for row in rows:
            reason = applicable(row.peer) if applicable is not None else None
            reason = reason or row.peer.unsupported(scenario.name, row.variant, param.values)
            at = getattr(scenario, "unsupported_at", None)  # a scenario's own limit per size
            reason = reason or (at(row, param.values) if at is not None else None)
            cells.append(Cell(row, status="n/a", reason=reason) if reason else Cell(row))
        return cells

    def _order(self, cells: list[Cell], rep: int) -> list[Cell]:
        live = [c for c in cells if c.status == "ok"]
        return live if rep % 2 == 0 else live[::-1]

    async def _run_write(self, scenario: Scenario, rows: list[Row]) -> list[ParamResult]:
        results = []
        for param in scenario.params(self.quick):
            cells = self._applicable(scenario, param, rows)
            title = f"{scenario.name} {param.label}"
            mark = self.progress.done
            repeats = self.repeats_of(scenario, param)
            first = self.first_round(scenario)
            for rep in range(first, repeats):  # -1: the warm-up
                for cell in self._order(cells, rep):
                    path = self.root / scenario.name / param.key / cell.row.label / str(rep)
                    try:
                        sample = await scenario.run(cell.row, param, path, rep)
                    except Exception as e:  # noqa: BLE001 - a failing peer is a reported row
                        cell.status, cell.reason = "error", _error(e)
                    else:
                        if rep >= 0:
                            cell.samples.append(sample)
                    finally:
                        shutil.rmtree(path, ignore_errors=True)
                    what = "warm-up" if rep < 0 else f"run {rep + 1}/{repeats}"
                    self.progress.step(title, f"{cell.row.label} {what}")
            scenario.forget()
            self.progress.advance_to(mark + len(cells) * (repeats - first), title)
            results.append(ParamResult(param, cells))
        return results

    async def _run_read(
        self, scenario: Scenario, rows: list[Row], peers: Sequence[Peer]
    ) -> list[ParamResult]:
        results = []
        opened: dict[str, Peer] = {}
        broken: dict[str, tuple[Status, str]] = {}  # peer name -> why it stopped
        try:
            for param in scenario.params(self.quick):
                cells = self._applicable(scenario, param, rows)
                title = f"{scenario.name} {param.label}"
                mark = self.progress.done
                needed = {c.row.peer.name: c.row.peer for c in cells if c.status == "ok"}
                for name, peer in needed.items():
                    if name in broken:
                        continue
                    self.progress.step(title, f"building {name}")
                    try:
                        if name not in opened:
                            path = self.root / scenario.name / name
                            await peer.open(path, build=True)
                            opened[name] = peer
                        await scenario.build(peer, param, self.build_budget_s(peer))
                    except BudgetExceeded as e:
                        broken[name] = ("skipped", str(e))
                    except Exception as e:  # noqa: BLE001 - a failing peer is a reported row
                        broken[name] = ("error", _error(e))
                for cell in cells:
                    if cell.status == "ok" and cell.row.peer.name in broken:
                        cell.status, cell.reason = broken[cell.row.peer.name]
                for rep in range(-1, self.repeats):
                    for cell in self._order(cells, rep):
                        try:
                            sample = await scenario.measure(cell.row, param, warmup=rep < 0)
                        except Exception as e:  # noqa: BLE001 - a failing peer is a reported row
                            cell.status, cell.reason = "error", _error(e)
                        else:
                            if rep >= 0:
                                cell.samples.append(sample)
                        what = "warm-up" if rep < 0 else f"run {rep + 1}/{self.repeats}"
                        self.progress.step(title, f"{cell.row.label} {what}")
                steps = len(cells) * (1 + self.repeats) + len(peers)
                self.progress.advance_to(mark + steps, title)
                results.append(ParamResult(param, cells))
        finally:
            for peer in opened.values():
                with contextlib.suppress(Exception):  # best effort, after the results are in
                    await peer.close()
            scenario.forget()
            shutil.rmtree(self.root / scenario.name, ignore_errors=True)
        return results

    @staticmethod
    def _ratios(scenario: Scenario, result: ParamResult) -> None:
        by_label = {c.row.label: c for c in result.cells}
        for cell in result.cells:
            cell.reference = cell.row.peer.reference(scenario.name, cell.row.variant)
            ref = by_label.get(cell.reference)
            if ref is None or cell.status != "ok" or ref.status != "ok":
                continue
            mine, theirs = cell.primary(scenario.primary), ref.primary(scenario.primary)
            if mine and theirs:
                cell.ratio = theirs / mine if scenario.higher_is_better else mine / theirs
            mine_b, ref_b = cell.primary("bytes_per_op"), ref.primary("bytes_per_op")
            if mine_b is not None and ref_b:
                cell.ratio_bytes = mine_b / ref_b
