"""techrevati-runtime's ``SqliteSaver`` (``techrevati.runtime.checkpoint``): sync get/put/list.

A save is ``put(thread_id, state, parent_id=...)`` (a new row per save, JSON). A fan-out is
expressed with its step store, ``put_step(thread_id, step_key, state)`` per completed instance
(O(1)), compared with ckptlog's ``save_instance`` row. It cannot list invocations (``list``
takes one thread id) and has no batching.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers.base import FanOp, FanOutSetup, SaveOp, SyncPeer, sqlite_durability

ALL = 1 << 62  # list()'s limit is a hard cap: ask for everything


class TechrevatiPeer(SyncPeer):
    name = "techrevati-sqlite"
    family = "techrevati"
    package = "techrevati-runtime"
    api = "SqliteSaver.put / put_step / get / list (sync; threads when concurrent)"
    build_note = "histories built with PRAGMA synchronous=OFF on the saver's connection"

    def __init__(self) -> None:
        from techrevati.runtime import SqliteSaver  # noqa: PLC0415 - optional peer

        self.saver_cls = SqliteSaver
        self.durability = sqlite_durability("techrevati's SqliteSaver")
        self.saver: Any = None
        self.last: dict[str, str] = {}

    def variants(self, scenario: str) -> tuple[str, ...]:
        return ("put_step",) if scenario == "fanout" else ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        if scenario == "list":
            return "SqliteSaver.list takes one thread_id: it cannot list invocations"
        if scenario == "fanout" and param.get("batching", 0) > 0:
            return "no batching option: every put_step commits"
        return None

    def reference(self, scenario: str, variant: str) -> str:
        ref = super().reference(scenario, variant)
        return ref.replace("save_fan_out_internal", "save_instance")  # per-instance vs per-instance

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.saver = self.saver_cls(path / "techrevati.db")
        if build:
            # Private attribute: the saver exposes no option; reads do not depend on it.
            self.saver._conn.execute("PRAGMA synchronous=OFF")
        self.last = {}

    async def close(self) -> None:
        if self.saver is not None:
            self.saver.close()
            self.saver = None

    def prepare(self, ops: Sequence[SaveOp]) -> list[Any]:
        return [(op.inv, op.state, {"correlation_id": op.corr, "step": op.k}) for op in ops]

    def save_blocking(self, item: Any) -> None:
        inv, state, meta = item
        cp = self.saver.put(inv, state, parent_id=self.last.get(inv), metadata=meta)
        self.last[inv] = cp.id

    async def fanout_setup(self, setup: FanOutSetup) -> None:
        self.save_blocking((setup.inv, setup.state, {"correlation_id": setup.corr}))

    def prepare_fanout(self, ops: Sequence[FanOp], variant: str) -> list[Any]:
        return [(op.inv, f"{op.node}-{op.index:08d}", {"result": op.result}) for op in ops]

    async def fanout_save(self, item: Any, variant: str) -> None:
        self.saver.put_step(*item)

    async def load(self, inv: str, variant: str) -> Any:
        return self.saver.get(inv)

    async def replay(self, inv: str) -> int:
        return len(self.saver.list(inv, limit=ALL))
