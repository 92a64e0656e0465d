"""The raw LMDB ceiling: py-lmdb writing exactly the envelope bytes ckptlog's log stores.

The bytes are captured by running the same saves through a ``CheckpointLog`` on an in-memory
backend and reading its ``log`` table back, so the ceiling writes what ckptlog writes to its
log (not its index and materialized-head tables): ascending u64 keys, ``putmulti(append=True)``,
one transaction per commit ckptlog would make (one per save; one per ``flush_every`` saves under
batching; one per round of C saves in ``concurrent``, ckptlog's group commit at its best).

Reads are the ceiling too: ``load`` is one ``get`` of the newest value (no decode), ``replay`` a
cursor walk over every value (no decode). Long histories cycle the first 1,024 captured frames.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lmdb

from backends.memory import MemoryBackend
from benchmarks.peers.base import Durability, FanOp, FanOutSetup, Peer, SaveOp
from eventlog.checkpoints import CheckpointLog
from eventlog.log import LOG

U64 = struct.Struct(">Q")
MAP_SIZE = 1 << 36  # sparse: reserves address space only
TEMPLATE_FRAMES = 1024


class Capture:
    """A ckptlog on memory: the envelopes its saves append, in order."""

    def __init__(self) -> None:
        self.log = CheckpointLog.on_backend(MemoryBackend(durability="process"))
        self.seen = 0

    def new_frames(self) -> list[bytes]:
        with self.log.log.backend.read() as txn:
            pairs = list(txn.scan(LOG, U64.pack(self.seen + 1)))
        if pairs:
            self.seen = U64.unpack(pairs[-1][0])[0]
        return [v for _, v in pairs]

    def close(self) -> None:
        self.log.close()


class RawLmdbPeer(Peer):
    family = "lmdb-raw"
    package = "lmdb"
    concurrency = "batch"
    api = "py-lmdb Transaction.cursor().putmulti(append=True) / get / cursor iteration"
    build_note = "long histories cycle the first 1,024 captured frames"

    def __init__(self, durability: str) -> None:
        self.mode = durability
        self.name = f"lmdb-raw-{durability}"
        self.durability = (
            Durability("fsync", "py-lmdb sync=True, metasync=True: fsync at every commit")
            if durability == "fsync"
            else Durability(
                "process", "py-lmdb sync=False: committed to the page cache (killed process safe)"
            )
        )
        self.env: Any = None
        self.key = 0
        self.batching = 0
        self.pending: list[bytes] = []
        self.capture: Capture | None = None
        self.template: list[bytes] = []

    def variants(self, scenario: str) -> tuple[str, ...]:
        return ("save_fan_out_internal bytes",) if scenario == "fanout" else ("",)

    def unsupported(self, scenario: str, variant: str, param: Mapping[str, Any]) -> str | None:
        if scenario == "list":
            return "a raw key-value table has no correlation index or summaries"
        if self.mode == "fsync" and scenario in ("load", "replay"):
            return "reads do not depend on durability: see lmdb-raw-process"
        return None

    async def open(self, path: Path, *, batching: int = 0, build: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(
            str(path),
            map_size=MAP_SIZE,
            sync=self.mode == "fsync" and not build,
            metasync=True,
            max_dbs=0,
        )
        self.key = 0
        self.batching = batching
        self.pending = []

    async def close(self) -> None:
        if self.capture is not None:
            self.capture.close()
            self.capture = None
        if self.env is not None:
            self.env.close()
            self.env = None

    def _commit(self, values: Sequence[bytes]) -> None:
        first = self.key + 1
        self.key += len(values)
        items = [(U64.pack(first + i), v) for i, v in enumerate(values)]
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti(items, append=True)

    def prepare(self, ops: Sequence[SaveOp]) -> list[Any]:
        cap = Capture()
        try:
            for op in ops:
                cap.log.save(op.inv, op.record)
            return cap.new_frames()
        finally:
            cap.close()

    async def save(self, item: bytes) -> None:
        self._commit((item,))

    async def save_group(self, items: Sequence[bytes]) -> None:
        self._commit(items)

    async def build(self, ops: Sequence[SaveOp]) -> None:
        if not self.template:
            self.template = self.prepare(ops[:TEMPLATE_FRAMES])
        t = self.template
        start = self.key
        self._commit([t[(start + i) % len(t)] for i in range(len(ops))])

    async def fanout_setup(self, setup: FanOutSetup) -> None:
        self.capture = Capture()
        self.capture.log.save(setup.inv, setup.record)
        self._commit(self.capture.new_frames())

    def prepare_fanout(self, ops: Sequence[FanOp], variant: str) -> list[Any]:
        assert self.capture is not None, "fanout_setup() first"
        for op in ops:
            self.capture.log.save_fan_out_internal(op.inv, op.record)
        return self.capture.new_frames()

    async def fanout_save(self, item: bytes, variant: str) -> None:
        if self.batching <= 0:
            self._commit((item,))
            return
        self.pending.append(item)
        if len(self.pending) >= self.batching:
            await self.flush()

    async def flush(self) -> None:
        if self.pending:
            self._commit(self.pending)
            self.pending = []

    async def load(self, inv: str, variant: str) -> Any:
        with self.env.begin() as txn:
            return txn.get(U64.pack(self.key))

    async def replay(self, inv: str) -> int:
        n = 0
        with self.env.begin() as txn:
            for _ in txn.cursor().iternext(keys=False, values=True):
                n += 1
        return n
