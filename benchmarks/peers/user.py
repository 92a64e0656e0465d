"""A user's own store in the same run: ``python -m benchmarks run --peer package.module:factory``.

``factory(directory: pathlib.Path)`` returns a fresh store in that (new, empty) directory; it is
called once per run (every run gets a fresh store) and once up front to see which protocol the
store implements:

- openarmature's ``Checkpointer`` protocol: ``async save / load / list / delete`` (and, if it
  has them, ``save_fan_out_internal``, ``save_instance``, ``flush``): driven as the openarmature
  engine drives a checkpointer, like the ``oa-*`` and ``ckptlog-*`` peers;
- LangGraph's ``BaseCheckpointSaver`` (an instance of it, or sync ``put / put_writes /
  get_tuple / list``): driven as the ``lg-*`` peers.

The store is closed at the end of each run through its ``aclose()`` or ``close()`` when it has
one. What a saved record survives is the factory's to state: ``factory.durability = "process"``
(or ``"fsync"``, ``"none"``); unstated, it is taken as ``fsync`` and compared with ckptlog's
``fsync`` mode (the stricter comparison for ckptlog). The row's name is the spec itself.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers.base import (
    Durability,
    FanOp,
    FanOutSetup,
    InstanceSink,
    Peer,
    SaveOp,
    record_types,
)
from benchmarks.peers.user_store import Kind, UserStore, aclose_store

KINDS: tuple[str, ...] = ("fsync", "process", "none")
OA_METHODS = ("save", "load", "list", "delete")
LG_METHODS = ("put", "put_writes", "get_tuple", "list")
OPTIONAL_METHODS = ("save_fan_out_internal", "save_instance", "flush")
INSTANCE_NODE = "process_items"


def load_factory(spec: str) -> Callable[[Path], Any]:
    """``package.module:factory`` -> the callable (ValueError saying what is wrong)."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"--peer expects package.module:factory, got {spec!r}")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(
            f"--peer {spec}: cannot import {module!r} ({e}); run from the directory holding it "
            "or put it on PYTHONPATH"
        ) from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--peer {spec}: {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(  # noqa: TRY004 - bad arguments: the CLI reports ValueError (exit 2)
            f"--peer {spec}: {attr!r} is a {type(obj).__name__}, not a factory"
        )
    return obj  # type: ignore[no-any-return]


def detect(store: Any) -> Kind | None:
    """Which protocol ``store`` implements: LangGraph's saver, openarmature's, or neither."""
    try:
        base = importlib.import_module("langgraph.checkpoint.base").BaseCheckpointSaver
    except ImportError:
        base = None
    if base is not None and isinstance(store, base):
        return "langgraph"
    if all(inspect.iscoroutinefunction(getattr(store, m, None)) for m in OA_METHODS):
        return "openarmature"
    if all(callable(getattr(store, m, None)) for m in LG_METHODS):
        return "langgraph"
    return None


def _durability(spec: str, factory: Any, store: Any) -> Durability:
    stated = getattr(factory, "durability", None) or getattr(store, "bench_durability", None)
    if stated is None:
        return Durability(
            "fsync",
            f"not stated by {spec} (set factory.durability = 'process', 'fsync' or 'none'): "
            "taken as fsync",
        )
    if stated not in KINDS:
        raise ValueError(f"--peer {spec}: durability must be one of {KINDS}, got {stated!r}")
    return Durability(stated, f"stated by {spec}")


def user_peer(spec: str) -> Peer:
    """The peer for ``--peer spec``: the factory is called once here on a scratch directory to
    see which protocol its store implements (so not from a running event loop)."""
    factory = load_factory(spec)
    scratch = Path(tempfile.mkdtemp(prefix="ckpt-bench-peer-"))
    try:
        try:
            store = factory(scratch)
        except Exception as e:
            raise ValueError(f"--peer {spec}: the factory failed on an empty directory: {e}") from e
        kind = detect(store)
        durability = _durability(spec, factory, store)
        methods = frozenset(m for m in OPTIONAL_METHODS if callable(getattr(store, m, None)))
        asyncio.run(aclose_store(store))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if kind is None:
        raise ValueError(
            f"--peer {spec} returned a {type(store).__module__}.{type(store).__qualname__}, which "
            "implements neither openarmature's Checkpointer protocol (async "
            f"{', '.join(OA_METHODS)}) nor LangGraph's BaseCheckpointSaver "
            f"({', '.join(LG_METHODS)})"
        )
    package = spec.partition(":")[0].split(".")[0]
    info = UserStore(spec, factory, kind, durability, package, methods)
    if kind == "langgraph":
        from benchmarks.peers.langgraph import UserLgPeer  # noqa: PLC0415 - needs langgraph

        return UserLgPeer(info)
    return UserCheckpointerPeer(info)


class UserCheckpointerPeer(Peer):
    """A user's store implementing openarmature's ``Checkpointer`` protocol."""

    family = "user"
    concurrency = "async"

    def __init__(self, store: UserStore) -> None:
        self.store = store
        self.name = store.spec
        self.package = store.package
        self.durability = store.durability
        self.api = (
            "await save / save_fan_out_internal / save_instance / load / list "
            "(openarmature's Checkpointer protocol)"
        )
        self.cp: Any = None

    @property
    def origin(self) -> str:
        return self.store.spec

    def variants(self, scenario: str) -> tuple[str, ...]:
        if scenario == "fanout":
            return ("save_fan_out_internal",)
        if scenario == "instances":
            return ("save_instance",)
        return ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        if scenario == "replay":
            return "the Checkpointer protocol has no history API"
        if scenario == "fanout" and param.get("batching", 0) > 0:
            return "the factory's store runs as built: the harness passes it no batching option"
        if scenario == "instances" and "save_instance" not in self.store.methods:
            return (
                "no save_instance: the Checkpointer protocol saves a fan-out instance as the "
                "whole N-instance record (see the fanout scenario)"
            )
        return None

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.cp = self.store.factory(path)

    async def close(self) -> None:
        if self.cp is not None:
            await aclose_store(self.cp)
            self.cp = None

    async def save(self, item: SaveOp) -> None:
        await self.cp.save(item.inv, item.record)

    async def build(self, ops: Sequence[SaveOp]) -> None:
        for op in ops:
            await self.cp.save(op.inv, op.record)

    async def fanout_setup(self, setup: FanOutSetup) -> None:
        await self.cp.save(setup.inv, setup.record)

    async def fanout_save(self, item: FanOp, variant: str) -> None:
        saver = getattr(self.cp, "save_fan_out_internal", None)
        if saver is None:  # what the engine does for a checkpointer without the hook
            await self.cp.save(item.inv, item.record)
        else:
            await saver(item.inv, item.record)

    async def flush(self) -> None:
        fn = getattr(self.cp, "flush", None)
        if callable(fn):
            result = fn()
            if inspect.isawaitable(result):
                await result

    async def load(self, inv: str, variant: str) -> Any:
        return await self.cp.load(inv)

    async def list_invocations(self, corr: str | None) -> int:
        flt = record_types().CheckpointFilter(correlation_id=corr) if corr is not None else None
        return len(list(await self.cp.list(flt)))

    def instance_sink(self, path: Path, batch: int) -> InstanceSink:
        path.mkdir(parents=True, exist_ok=True)
        return _CheckpointerInstanceSink(self.store.factory(path))


class _CheckpointerInstanceSink:
    """``save`` of an N-instance fan-out record, then ``save_instance`` per row; the store
    batches (or not) as its factory built it; ``flush`` at the end if it has one."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp
        self.inv = ""
        self.t = record_types()

    async def setup(self, inv: str, n: int) -> None:
        t = self.t
        self.inv = inv
        not_started = t.FanOutInstanceProgress("not_started")
        record = t.CheckpointRecord(
            invocation_id=inv,
            correlation_id="bench",
            state={"query": "q", "items": n},
            completed_positions=(t.NodePosition((), "plan", 0), t.NodePosition((), "split", 1)),
            parent_states=(),
            last_saved_at=time.time(),
            schema_version="1",
            fan_out_progress=(t.FanOutProgress(INSTANCE_NODE, (), n, (not_started,) * n),),
        )
        await self.cp.save(inv, record)

    async def save(self, index: int, result: dict[str, Any]) -> None:
        progress = self.t.FanOutInstanceProgress("completed", result)
        await self.cp.save_instance(self.inv, INSTANCE_NODE, index, progress)

    async def flush(self) -> None:
        fn = getattr(self.cp, "flush", None)
        if callable(fn):
            result = fn()
            if inspect.isawaitable(result):
                await result

    async def probe(self, done: int) -> dict[str, float]:
        t0 = time.perf_counter()
        head = await self.cp.load(self.inv)
        load_s = time.perf_counter() - t0
        assert head is not None, f"no head for {self.inv!r} after the run"
        (fan,) = head.fan_out_progress
        completed = sum(1 for x in fan.instances if x.state == "completed")
        assert completed == done, f"head has {completed} completed instances, saved {done}"
        return {"load_ms": load_s * 1e3}

    async def close(self) -> None:
        await aclose_store(self.cp)
