"""The peer contract: what a benchmark scenario asks of a checkpointer adapter.

A peer wraps one checkpointer (ours, openarmature's, LangGraph's, techrevati's, raw py-lmdb)
and expresses each scenario in that checkpointer's own API. It never fakes a scenario: when its
API cannot express one, :meth:`Peer.unsupported` says why, and the harness reports ``n/a``.

Invariants:
- Every peer states its durability (:class:`Durability`): what a returned save survives.
- ``prepare*`` runs outside the timed section (building the peer's own input shapes); only
  ``save`` / ``save_group`` / ``fanout_save`` / ``flush`` and the reads are timed.
- ``open(build=True)`` may relax durability while a read scenario builds its history (reads do
  not depend on it); a peer that does so says so in :attr:`Peer.build_note`.
"""

from __future__ import annotations

import abc
import functools
import importlib
import sqlite3
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

DurabilityKind = Literal["fsync", "process", "none"]
Concurrency = Literal["async", "threads", "batch"]
READ_SCENARIOS = ("load", "list", "replay")
# Scenarios run through :meth:`Peer.instance_sink` (per-instance stores).
INSTANCE_SCENARIOS = ("instances", "sustained-instances", "openloop")


@dataclass(frozen=True)
class Durability:
    """What a save that returned survives: ``fsync`` (power loss), ``process`` (a killed
    process, not an OS crash), ``none`` (nothing: memory only)."""

    kind: DurabilityKind
    detail: str


@dataclass(frozen=True)
class SaveOp:
    """One save of an invocation: the openarmature record and, for other APIs, its parts."""

    inv: str
    corr: str
    k: int  # the save's number within its invocation (0, 1, 2, ...)
    state: dict[str, Any]
    record: Any  # openarmature.checkpoint.CheckpointRecord
    saved_at: float


@dataclass(frozen=True)
class FanOutSetup:
    """The record saved before a fan-out window: ``done`` of ``n`` instances completed."""

    inv: str
    corr: str
    node: str
    n: int
    done: int
    record: Any  # openarmature.checkpoint.CheckpointRecord with all n instances
    state: dict[str, Any]


@dataclass(frozen=True)
class FanOp:
    """Instance ``index`` completed with ``result``; ``record`` is the whole openarmature-shaped
    record after it (all instances, freshly built as the engine builds them)."""

    inv: str
    node: str
    index: int
    result: Any
    record: Any
    saved_at: float


class InstanceSink(Protocol):
    """One store in the ``instances`` scenario: a job appending each fan-out instance's result
    as it completes. ``save`` / ``flush`` are timed; the peer commits every ``batch`` saves
    itself (the harness calls ``flush`` once at the end). ``save`` and ``flush`` are plain
    methods for the built-in peers, coroutines for an async ``--peer`` (the cell awaits them).
    """

    def setup(self, inv: str, n: int) -> Any:
        """Create the fan-out of ``n`` instances (untimed)."""

    def save(self, index: int, result: dict[str, Any]) -> Any:
        """Instance ``index`` completed with ``result``."""

    def flush(self) -> Any:
        """Commit what the current batch buffered."""

    def probe(self, done: int) -> Any:
        """After the run (untimed): check the store holds ``done`` instances and return extra
        figures (e.g. ckptlog's head load time); ``{}`` when none. A ``dict[str, float]``, or
        a coroutine of one."""

    def close(self) -> Any: ...


@functools.cache
def record_types() -> types.ModuleType:
    """Where the record types come from: ``openarmature.checkpoint`` (what the engine hands a
    checkpointer) when installed, else ckptlog's ``eventlog.records`` (the same names, fields and
    order). Imported on first use, so nothing needs openarmature to import the benchmarks."""
    try:
        return importlib.import_module("openarmature.checkpoint")
    except ImportError:
        return importlib.import_module("eventlog.records")


def row_label(peer_name: str, variant: str) -> str:
    return f"{peer_name} · {variant}" if variant else peer_name


class Peer(abc.ABC):
    """One checkpointer under test. Methods a peer cannot express stay unimplemented and are
    named by :meth:`unsupported`."""

    name: str
    family: str  # ckptlog | openarmature | langgraph | techrevati | lmdb-raw
    package: str  # the distribution whose version the results record
    durability: Durability
    api: str  # the calls used, for the report
    concurrency: Concurrency = "async"
    build_note: str = ""  # how a read scenario's history is built, when not plain saves

    @property
    def origin(self) -> str:
        """What rebuilds this peer in another process (:func:`benchmarks.peers.peer_from_key`):
        its name, or the ``--peer`` spec of a user's store."""
        return self.name

    def variants(self, scenario: str) -> tuple[str, ...]:
        """The ways this peer runs ``scenario`` (one row each); ``""`` is the plain one."""
        return ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        """Why this peer cannot express ``scenario`` (reported as n/a), or ``None``."""
        return None

    def reference(self, scenario: str, variant: str) -> str:
        """The ckptlog row this row is compared with, like for like: the same durability class
        (``none`` counts as ``process``), the same shape of fan-out save, and for ``load`` the
        same calling convention (sync peers against ``CheckpointLog.load``)."""
        if scenario in READ_SCENARIOS:
            base = "ckptlog-process"  # reads do not depend on durability
        else:
            base = "ckptlog-fsync" if self.durability.kind == "fsync" else "ckptlog-process"
        if scenario == "fanout":
            return f"{base} · save_fan_out_internal"
        if scenario == "instances":
            return f"{base} · save_instance"
        if scenario == "load" and self.concurrency != "async":
            return f"{base} · sync"
        return base

    # -- lifecycle -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        """Create (or reopen) the store under directory ``path``."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    # -- writes --------------------------------------------------------------------------------

    def prepare(self, ops: Sequence[SaveOp]) -> list[Any]:
        """This peer's inputs for ``ops`` (untimed)."""
        return list(ops)

    async def save(self, item: Any) -> None:
        raise NotImplementedError(f"{self.name} cannot save")

    def save_blocking(self, item: Any) -> None:
        """A save from a plain thread (``concurrency == "threads"``)."""
        raise NotImplementedError(f"{self.name} has no blocking save")

    async def save_group(self, items: Sequence[Any]) -> None:
        """Save ``items`` in one commit (``concurrency == "batch"``: the raw ceiling)."""
        raise NotImplementedError(f"{self.name} cannot commit a group")

    async def build(self, ops: Sequence[SaveOp]) -> None:
        """Save ``ops`` as fast as this peer allows (untimed: builds read scenarios' stores)."""
        for item in self.prepare(ops):
            await self.save(item)

    async def fanout_setup(self, setup: FanOutSetup) -> None:
        raise NotImplementedError(f"{self.name} cannot express a fan-out")

    def prepare_fanout(self, ops: Sequence[FanOp], variant: str) -> list[Any]:
        return list(ops)

    async def fanout_save(self, item: Any, variant: str) -> None:
        raise NotImplementedError(f"{self.name} cannot express a fan-out")

    async def flush(self) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Commit whatever batching buffered (nothing by default)."""

    def instance_sink(self, path: Path, batch: int) -> InstanceSink:
        """A fresh store under directory ``path`` for the ``instances`` scenario."""
        raise NotImplementedError(f"{self.name} cannot express the instances scenario")

    # -- reads ---------------------------------------------------------------------------------

    async def load(self, inv: str, variant: str) -> Any:
        raise NotImplementedError(f"{self.name} cannot load")

    async def list_invocations(self, corr: str | None) -> int:
        """How many invocations are listed (all, or those of correlation id ``corr``)."""
        raise NotImplementedError(f"{self.name} cannot list")

    async def replay(self, inv: str) -> int:
        """Read every save of ``inv`` back, decoded; the count."""
        raise NotImplementedError(f"{self.name} keeps no history")


class SyncPeer(Peer):
    """A peer whose API is synchronous: called directly (no thread hop) from the benchmark's
    event loop, and from plain threads in the ``concurrent`` scenario."""

    concurrency: Concurrency = "threads"

    async def save(self, item: Any) -> None:
        self.save_blocking(item)


def describe(peer: Peer) -> dict[str, Any]:
    """The JSON description of a peer."""
    return {
        "family": peer.family,
        "package": peer.package,
        "durability": {"kind": peer.durability.kind, "detail": peer.durability.detail},
        "api": peer.api,
        "concurrency": peer.concurrency,
        "build_note": peer.build_note,
    }


_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def sqlite_wal_synchronous() -> str:
    """``synchronous`` of a new WAL connection of this Python's SQLite (what savers that do
    not set it, such as LangGraph's and techrevati's, run with)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        conn.close()
    return _SYNC_NAMES.get(level, str(level))


def sqlite_durability(who: str) -> Durability:
    level = sqlite_wal_synchronous()
    if level in ("FULL", "EXTRA"):
        return Durability(
            "fsync",
            f"SQLite WAL, synchronous={level} (this SQLite's default; {who} does not set it): "
            "the WAL is fsynced at every commit",
        )
    return Durability(
        "process", f"SQLite WAL, synchronous={level} (this SQLite's default; {who} does not set it)"
    )
