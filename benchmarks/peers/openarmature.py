"""openarmature 0.17's reference checkpointers: ``SQLiteCheckpointer`` and ``InMemoryCheckpointer``.

Both are driven exactly as the engine drives them: ``save`` per save point, and a fan-out
instance's save through ``save_fan_out_internal`` when the checkpointer has it, else ``save``
(``openarmature.graph.compiled._save_fan_out_internal``). Both keep one record per invocation
(upsert), so a history cannot be replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from openarmature.checkpoint import CheckpointFilter
from openarmature.checkpoint.backends.memory import (
    FanOutInternalSaveBatching,
    InMemoryCheckpointer,
)
from openarmature.checkpoint.backends.sqlite import SQLiteCheckpointer

from benchmarks.peers.base import Durability, FanOp, FanOutSetup, Peer, SaveOp

UPSERT = "keeps only the latest record of an invocation (upsert): no history to replay"


class _OpenArmaturePeer(Peer):
    family = "openarmature"
    package = "openarmature"
    concurrency = "async"
    cp: Any = None

    async def save(self, item: SaveOp) -> None:
        await self.cp.save(item.inv, item.record)

    async def fanout_setup(self, setup: FanOutSetup) -> None:
        await self.cp.save(setup.inv, setup.record)

    async def fanout_save(self, item: FanOp, variant: str) -> None:
        saver = getattr(self.cp, "save_fan_out_internal", None)
        if saver is None:  # what the engine does for a checkpointer without the hook
            await self.cp.save(item.inv, item.record)
        else:
            await saver(item.inv, item.record)

    async def load(self, inv: str, variant: str) -> Any:
        return await self.cp.load(inv)

    async def list_invocations(self, corr: str | None) -> int:
        flt = CheckpointFilter(correlation_id=corr) if corr is not None else None
        return len(list(await self.cp.list(flt)))


class OaSqlitePeer(_OpenArmaturePeer):
    durability = Durability(
        "process",
        "SQLite WAL, synchronous=NORMAL (set by SQLiteCheckpointer on every connection): "
        "survives a killed process, not power loss",
    )
    api = "await SQLiteCheckpointer.save / load / list (fan-out saves fall back to save)"

    def __init__(self, serialization: str) -> None:
        self.serialization = serialization
        self.name = f"oa-sqlite-{serialization}"

    def variants(self, scenario: str) -> tuple[str, ...]:
        return ("save",) if scenario == "fanout" else ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        if scenario == "replay":
            return UPSERT
        if scenario == "fanout" and param.get("batching", 0) > 0:
            return (
                "SQLiteCheckpointer has no save_fan_out_internal and no batching option: the "
                "engine saves every fan-out instance through save (see the unbatched rows)"
            )
        return None

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.cp = SQLiteCheckpointer(path / "checkpoints.db", serialization=self.serialization)  # type: ignore[arg-type]

    async def close(self) -> None:
        self.cp = None  # it opens a connection per call; nothing stays open


class OaMemoryPeer(_OpenArmaturePeer):
    name = "oa-memory"
    durability = Durability("none", "a Python dict: lost with the process")
    api = "await InMemoryCheckpointer.save / save_fan_out_internal / load / list"

    def variants(self, scenario: str) -> tuple[str, ...]:
        return ("save_fan_out_internal",) if scenario == "fanout" else ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        return UPSERT if scenario == "replay" else None

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        policy = FanOutInternalSaveBatching(flush_every=batching) if batching > 0 else None
        self.cp = InMemoryCheckpointer(fan_out_internal_save_batching=policy)

    async def close(self) -> None:
        self.cp = None
