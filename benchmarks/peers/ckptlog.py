"""Ours: the async ``Checkpointer`` (openarmature's protocol) on an LMDB log.

Saves and reads go through the same async protocol methods the openarmature engine calls, so
the comparison with openarmature's own checkpointers is like for like. Our async ``load`` reads
a small record on the event loop's thread and hops to a worker thread only for a wide fan-out
or a large state; ``list`` always hops (``asyncio.to_thread``), as openarmature's do. ``load``
has a second row, ``sync``, through ``CheckpointLog.load``: the log's own cost. ``replay`` uses
``CheckpointLog.history`` (there is no async history API).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from openarmature.checkpoint import FanOutInstanceProgress

from benchmarks.peers.base import Durability, FanOp, FanOutSetup, Peer, SaveOp, row_label
from eventlog.checkpoints import Checkpointer
from eventlog.records import CheckpointFilter, FanOutInternalSaveBatching

BUILD_WINDOW = 1024  # concurrent saves in flight while building a history (group commit)

DURABILITY = {
    "fsync": Durability("fsync", "LMDB sync=True: every commit is fsynced before save returns"),
    "process": Durability(
        "process",
        "LMDB sync=False: committed to the OS page cache before save returns; survives a "
        "killed process, not power loss",
    ),
}


class CkptlogPeer(Peer):
    family = "ckptlog"
    package = "ckptlog"
    concurrency = "async"

    def __init__(self, durability: str) -> None:
        self.mode = durability
        self.name = f"ckptlog-{durability}"
        self.durability = DURABILITY[durability]
        self.api = (
            "Checkpointer.save / save_fan_out_internal / save_instance / load / list; "
            "CheckpointLog.history"
        )
        self.build_note = (
            f"histories built with up to {BUILD_WINDOW:,} concurrent Checkpointer.save calls "
            "(group commit; the frames are those of sequential saves)"
        )
        self.cp: Checkpointer | None = None

    def _cp(self) -> Checkpointer:
        assert self.cp is not None, "open() first"
        return self.cp

    def variants(self, scenario: str) -> tuple[str, ...]:
        if scenario == "fanout":
            return ("save_fan_out_internal", "save_instance")
        if scenario == "load" and self.mode == "process":  # fsync: reads are n/a
            return ("", "sync")
        return ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        if self.mode == "fsync" and scenario in ("load", "list", "replay"):
            return "reads do not depend on durability: see ckptlog-process"
        return None

    def reference(self, scenario: str, variant: str) -> str:
        return row_label(self.name, variant)  # ours: the reference itself

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        policy = FanOutInternalSaveBatching(flush_every=batching) if batching > 0 else None
        self.cp = Checkpointer.open(path, durability=self.mode, batching=policy)

    async def close(self) -> None:
        if self.cp is not None:
            await self.cp.aclose()
            self.cp = None

    async def save(self, item: SaveOp) -> None:
        await self._cp().save(item.inv, item.record)

    async def build(self, ops: Sequence[SaveOp]) -> None:
        cp = self._cp()
        for start in range(0, len(ops), BUILD_WINDOW):
            window = ops[start : start + BUILD_WINDOW]
            await asyncio.gather(*(cp.save(op.inv, op.record) for op in window))

    async def fanout_setup(self, setup: FanOutSetup) -> None:
        await self._cp().save(setup.inv, setup.record)

    def prepare_fanout(self, ops: Sequence[FanOp], variant: str) -> list[Any]:
        if variant == "save_instance":
            return [(op, FanOutInstanceProgress("completed", op.result)) for op in ops]
        return list(ops)

    async def fanout_save(self, item: Any, variant: str) -> None:
        cp = self._cp()
        if variant == "save_instance":
            op, progress = item
            await cp.save_instance(op.inv, op.node, op.index, progress, saved_at=op.saved_at)
        else:
            await cp.save_fan_out_internal(item.inv, item.record)

    async def flush(self) -> None:
        await self._cp().flush()

    async def load(self, inv: str, variant: str) -> Any:
        cp = self._cp()
        if variant == "sync":
            return cp.sync.load(inv)
        return await cp.load(inv)

    async def list_invocations(self, corr: str | None) -> int:
        flt = CheckpointFilter(correlation_id=corr) if corr is not None else None
        return len(await self._cp().list(flt))

    async def replay(self, inv: str) -> int:
        return sum(1 for _ in self._cp().sync.history(inv))
