"""LangGraph savers: ``SqliteSaver`` (langgraph-checkpoint-sqlite) and ``LMDBSaver``
(langgraph-checkpoint-lmdb), through ``BaseCheckpointSaver``'s sync API.

A save is ``put`` of a checkpoint whose channel values are the state's keys (a new checkpoint
per save, parent-linked, as LangGraph's loop writes them). A fan-out is LangGraph's own idiom:
one ``put_writes`` per completed ``Send`` task against the superstep's checkpoint (O(1) per
instance), so it is compared with ckptlog's ``save_instance`` row. LangGraph has no batching
option for writes.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lmdb
from langgraph.checkpoint.base.id import uuid6

from benchmarks.peers.base import (
    Durability,
    FanOp,
    FanOutSetup,
    InstanceSink,
    SaveOp,
    SyncPeer,
    sqlite_durability,
)
from benchmarks.peers.user_store import UserStore, aclose_store

NS = ""
MAP_SIZE = 1 << 36  # LMDB reserves address space only; py-lmdb's 10 MiB default fills at once
NO_BATCHING = "LangGraph savers have no batching option: every put_writes commits"


def _config(inv: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": inv, "checkpoint_ns": NS}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _checkpoint(k: int, state: Mapping[str, Any], saved_at: float) -> dict[str, Any]:
    version = f"{k + 1:032}.0"
    return {
        "v": 4,
        "id": str(uuid6(clock_seq=k)),
        "ts": dt.datetime.fromtimestamp(saved_at, dt.UTC).isoformat(),
        "channel_values": dict(state),
        "channel_versions": dict.fromkeys(state, version),
        "versions_seen": {},
        "updated_channels": [c for c in ("step", "cursor") if c in state] or list(state),
    }


class _LangGraphPeer(SyncPeer):
    family = "langgraph"
    saver: Any = None

    def __init__(self) -> None:
        self.last: dict[str, str] = {}  # invocation -> newest checkpoint id (prepared)
        self.fan_config: dict[str, Any] = {}

    def variants(self, scenario: str) -> tuple[str, ...]:
        return ("put_writes",) if scenario == "fanout" else ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        if scenario == "fanout" and param.get("batching", 0) > 0:
            return NO_BATCHING
        return None

    def reference(self, scenario: str, variant: str) -> str:
        ref = super().reference(scenario, variant)
        return ref.replace("save_fan_out_internal", "save_instance")  # per-instance vs per-instance

    def prepare(self, ops: Sequence[SaveOp]) -> list[Any]:
        items = []
        for op in ops:
            cp = _checkpoint(op.k, op.state, op.saved_at)
            meta = {"source": "loop", "step": op.k, "parents": {}, "correlation_id": op.corr}
            new_versions = {c: cp["channel_versions"][c] for c in cp["updated_channels"]}
            items.append((_config(op.inv, self.last.get(op.inv)), cp, meta, new_versions))
            self.last[op.inv] = cp["id"]
        return items

    def save_blocking(self, item: Any) -> None:
        self.saver.put(*item)

    async def fanout_setup(self, setup: FanOutSetup) -> None:
        op = SaveOp(setup.inv, setup.corr, 0, setup.state, None, setup.record.last_saved_at)
        (item,) = self.prepare([op])
        self.fan_config = self.saver.put(*item)

    def prepare_fanout(self, ops: Sequence[FanOp], variant: str) -> list[Any]:
        return [
            ([("results", op.result)], f"task-{op.index:08d}", f"~__pregel_push, {op.index}")
            for op in ops
        ]

    async def fanout_save(self, item: Any, variant: str) -> None:
        writes, task_id, task_path = item
        self.saver.put_writes(self.fan_config, writes, task_id, task_path)

    async def load(self, inv: str, variant: str) -> Any:
        return self.saver.get_tuple(_config(inv))

    async def replay(self, inv: str) -> int:
        return sum(1 for _ in self.saver.list(_config(inv)))


class LgSqlitePeer(_LangGraphPeer):
    name = "lg-sqlite"
    package = "langgraph-checkpoint-sqlite"
    api = "SqliteSaver.put / put_writes / get_tuple / list (sync; threads when concurrent)"
    build_note = "histories built with PRAGMA synchronous=OFF on the saver's connection"

    def __init__(self) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: PLC0415 - optional peer

        super().__init__()
        self.saver_cls = SqliteSaver
        self.durability = sqlite_durability("SqliteSaver")
        self.conn: sqlite3.Connection | None = None

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path / "lg.db"), check_same_thread=False)
        self.saver = self.saver_cls(self.conn)
        self.saver.setup()
        if build:
            self.conn.execute("PRAGMA synchronous=OFF")
        self.last = {}

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    async def list_invocations(self, corr: str | None) -> int:
        flt = {"correlation_id": corr} if corr is not None else None
        return sum(1 for _ in self.saver.list(None, filter=flt))


class LgLmdbPeer(_LangGraphPeer):
    name = "lg-lmdb"
    package = "langgraph-checkpoint-lmdb"
    durability = Durability(
        "fsync", "LMDB sync=True (py-lmdb's default; the saver takes the env as given)"
    )
    api = "LMDBSaver.put / put_writes / get_tuple / list (sync; threads when concurrent)"
    build_note = "histories built on an env opened with sync=False"

    def __init__(self) -> None:
        from langgraph_checkpoint_lmdb import (  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: PLC0415
            LMDBSaver,
        )

        super().__init__()
        self.saver_cls = LMDBSaver
        self.env: Any = None

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        if scenario == "list" and param.get("filter"):
            return "LMDBSaver.list ignores its filter argument (returns every checkpoint)"
        return super().unsupported(scenario, variant, param)

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=MAP_SIZE, max_dbs=2, sync=not build)
        self.saver = self.saver_cls(self.env)
        self.last = {}

    async def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    async def list_invocations(self, corr: str | None) -> int:
        return sum(1 for _ in self.saver.list(None))


class UserLgPeer(_LangGraphPeer):
    """A user's ``BaseCheckpointSaver`` (``--peer package.module:factory``): the factory gets a
    fresh directory per run and returns the saver, driven exactly as the built-in savers."""

    def __init__(self, store: UserStore) -> None:
        super().__init__()
        self.store = store
        self.name = store.spec
        self.package = store.package
        self.durability = store.durability
        self.api = "BaseCheckpointSaver.put / put_writes / get_tuple / list (sync)"

    @property
    def origin(self) -> str:
        return self.store.spec

    def variants(self, scenario: str) -> tuple[str, ...]:
        return ("put_writes",) if scenario in ("fanout", "instances") else ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        if scenario == "list" and param.get("filter"):
            return None  # list(None, filter=...) is part of BaseCheckpointSaver
        return super().unsupported(scenario, variant, param)

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.saver = self.store.factory(path)
        self.last = {}

    async def close(self) -> None:
        if self.saver is not None:
            await aclose_store(self.saver)
            self.saver = None

    async def list_invocations(self, corr: str | None) -> int:
        flt = {"correlation_id": corr} if corr is not None else None
        return sum(1 for _ in self.saver.list(None, filter=flt))

    def instance_sink(self, path: Path, batch: int) -> InstanceSink:
        path.mkdir(parents=True, exist_ok=True)
        return _LgInstanceSink(self.store.factory(path))


class _LgInstanceSink:
    """LangGraph's per-instance idiom: one ``put_writes`` per completed instance against the
    fan-out's checkpoint; every call commits (a saver has no batching)."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver
        self.config: dict[str, Any] = {}

    def setup(self, inv: str, n: int) -> None:
        cp = _checkpoint(0, {"query": "q", "items": n}, 1_700_000_000.0)
        meta = {"source": "loop", "step": 0, "parents": {}}
        self.config = self.saver.put(_config(inv), cp, meta, dict(cp["channel_versions"]))

    def save(self, index: int, result: dict[str, Any]) -> None:
        task = f"task-{index:08d}"
        self.saver.put_writes(self.config, [("results", result)], task, f"~__pregel_push, {index}")

    def flush(self) -> None:
        """Nothing buffered: every put_writes committed."""

    def probe(self, done: int) -> dict[str, float]:
        t0 = time.perf_counter()
        got = self.saver.get_tuple(self.config)
        load_s = time.perf_counter() - t0
        writes = len(got.pending_writes or ()) if got is not None else 0
        assert writes == done, f"get_tuple has {writes} pending writes, saved {done}"
        return {"load_ms": load_s * 1e3}

    async def close(self) -> None:
        await aclose_store(self.saver)
