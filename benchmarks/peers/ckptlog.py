"""Ours: the async ``Checkpointer`` (openarmature's protocol) on an LMDB log.

Saves and reads go through the same async protocol methods the openarmature engine calls, so
the comparison with openarmature's own checkpointers is like for like. Our async ``load`` reads
a small record on the event loop's thread and hops to a worker thread only for a wide fan-out
or a large state; ``list`` always hops (``asyncio.to_thread``), as openarmature's do. ``load``
has a second row, ``sync``, through ``CheckpointLog.load``: the log's own cost. ``replay`` uses
``CheckpointLog.history`` (there is no async history API). The ``instances`` scenario drives
the sync ``CheckpointLog`` (:class:`CkptlogSink`), as a batch job appending results would.
No openarmature import: instances are ckptlog's own ``FanOutInstanceProgress`` (same shape).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers.base import (
    Durability,
    FanOp,
    FanOutSetup,
    InstanceSink,
    Peer,
    SaveOp,
    row_label,
)
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.codec import open_envelope
from eventlog.layout import LOG
from eventlog.records import (
    NOT_STARTED,
    CheckpointFilter,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)

BUILD_WINDOW = 1024  # concurrent saves in flight while building a history (group commit)

DURABILITY = {
    "fsync": Durability(
        "fsync",
        "a redo record fdatasynced in wal.ckptlog before save returns (LMDB committed "
        "without sync)",
    ),
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
        if scenario == "instances":
            return ("save_instance", "save_instances")
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

    def instance_sink(self, path: Path, batch: int, variant: str = "") -> InstanceSink:
        return CkptlogSink(path, self.mode, batch, bulk=variant == "save_instances")


INSTANCE_NODE = "process_items"
VERIFY_FROM_N = 5_000_000  # the instances probe runs verify() from this many rows


def _largest_frames(log: CheckpointLog) -> dict[str, float]:
    """The largest frame the run wrote: its envelope as stored, and its payload decoded from
    zstd (what ``frame_bytes_max`` bounds)."""
    stored = encoded = 0
    comp = log.log.compressor
    with log.log.backend.read() as txn:
        for _, env in txn.scan(LOG):
            stored = max(stored, len(env))
            opened = open_envelope(env)
            payload = comp.decompress(opened.payload, opened.flags, max_bytes=1 << 30)
            encoded = max(encoded, len(payload))
    return {"largest_frame_stored_bytes": stored, "largest_frame_bytes": encoded}


class CkptlogSink:
    """``CheckpointLog.save`` of an N-instance fan-out record, then ``save_instance`` per
    instance under ``FanOutInternalSaveBatching(flush_every=batch)`` (``bulk``: one
    ``save_instances`` call per ``batch`` instances, as a job holding a batch of results
    would make)."""

    def __init__(self, path: Path, mode: str, batch: int, *, bulk: bool = False) -> None:
        self.path = path
        self.mode = mode
        self.inv = ""
        self.batch = batch
        self.pending: list[tuple[int, FanOutInstanceProgress]] | None = [] if bulk else None
        self.log: CheckpointLog | None = CheckpointLog.open(
            path, durability=mode, batching=FanOutInternalSaveBatching(flush_every=batch)
        )

    def _log(self) -> CheckpointLog:
        assert self.log is not None, "closed"
        return self.log

    def setup(self, inv: str, n: int) -> None:
        self.inv = inv
        fan = FanOutProgress(INSTANCE_NODE, (), n, (NOT_STARTED,) * n)
        record = CheckpointRecord(
            invocation_id=inv,
            correlation_id="bench",
            state={"query": "q", "items": n},
            completed_positions=(NodePosition((), "plan", 0), NodePosition((), "split", 1)),
            parent_states=(),
            last_saved_at=time.time(),
            schema_version="1",
            fan_out_progress=(fan,),
        )
        self._log().save(inv, record)

    def save(self, index: int, result: dict[str, Any]) -> None:
        pending = self.pending
        if pending is None:
            self._log().save_instance(
                self.inv, INSTANCE_NODE, index, FanOutInstanceProgress("completed", result)
            )
            return
        pending.append((index, FanOutInstanceProgress("completed", result)))
        if len(pending) >= self.batch:
            self._log().save_instances(self.inv, INSTANCE_NODE, pending)
            self.pending = []

    def flush(self) -> None:
        if self.pending:
            self._log().save_instances(self.inv, INSTANCE_NODE, self.pending)
            self.pending = []
        self._log().flush()

    def probe(self, done: int) -> dict[str, float]:
        """Reopen the log (a resumed job: no cached head), time ``load`` of the head and
        ``record_at`` of the middle seq, and check the head holds ``done`` completed instances."""
        self.close()
        log = CheckpointLog.open(self.path, durability=self.mode)
        try:
            t0 = time.perf_counter()
            head = log.load(self.inv)
            load_s = time.perf_counter() - t0
            assert head is not None, f"no head for {self.inv!r} after the run"
            (fan,) = head.fan_out_progress
            completed = sum(1 for x in fan.instances if x.state == "completed")
            assert completed == done, f"head has {completed} completed instances, saved {done}"
            last = log.log.last_seq(self.inv)
            mid = max(1, last // 2)
            t0 = time.perf_counter()
            at = log.record_at(self.inv, mid)
            record_at_s = time.perf_counter() - t0
            assert at is not None, f"record_at({mid}) of {last} seqs is None"
            del head, fan, at
            figures = {"load_ms": load_s * 1e3, "record_at_ms": record_at_s * 1e3, "mid_seq": mid}
            figures.update(_largest_frames(log))
            if done >= VERIFY_FROM_N:  # the scale run: the whole log checked, timed
                t0 = time.perf_counter()
                report = log.verify()
                figures["verify_s"] = time.perf_counter() - t0
                assert report.ok, f"verify failed: {report}"
                figures["verify_ok"] = 1.0
        finally:
            log.close()
        return figures

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
