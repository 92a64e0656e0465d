"""Checkpointer: openarmature's async ``Checkpointer`` protocol on a CheckpointLog.

Re-exported by eventlog.checkpoints (semantics there). Saves are queued before the first
``await`` through the same deferred frames (eventlog.checkpoint_frames) as the sync log.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from typing import Any, ClassVar

from backends.base import Backend, Durability
from eventlog.checkpoint_frames import _InstanceSaves, _Save
from eventlog.checkpoints import CheckpointLog
from eventlog.frames import ForkOrigin
from eventlog.records import (
    CheckpointFilter,
    CheckpointRecord,
    CheckpointSummary,
    EnclosingFanOutInstance,
    FanOutInternalSaveBatching,
)


class Checkpointer:
    """openarmature's ``Checkpointer`` protocol on a :class:`CheckpointLog`.

    Saves are queued before the coroutine's first ``await`` (call order is commit order) and
    awaited through a future the writer resolves: no thread-pool hop per save. Reads run in a
    worker thread so the event loop never waits on the disk.
    """

    supports_state_migration: ClassVar[bool] = True

    def __init__(self, log: CheckpointLog) -> None:
        self.sync = log

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = "fsync",
        batching: FanOutInternalSaveBatching | None = None,
        fan_out_internal_save_batching: FanOutInternalSaveBatching | None = None,
        **options: Any,
    ) -> Checkpointer:
        return cls(
            CheckpointLog.open(
                path,
                durability=durability,
                batching=batching or fan_out_internal_save_batching,
                **options,
            )
        )

    @classmethod
    def on_backend(cls, backend: Backend, **options: Any) -> Checkpointer:
        return cls(CheckpointLog.on_backend(backend, **options))

    async def save(self, invocation_id: str, record: Any) -> None:
        cl = self.sync
        inc = cl._incoming(invocation_id, record, "save")
        await cl.log.append_async(invocation_id, _Save(cl, inc))

    async def save_fan_out_internal(self, invocation_id: str, record: Any) -> None:
        cl = self.sync
        inc = cl._incoming(invocation_id, record, "fan_out_internal")
        if cl._flush_every <= 0:
            await cl.log.append_async(invocation_id, _Save(cl, inc))
            return
        await cl.log.append_async(invocation_id, _Save(cl, inc), durable=False)
        if cl._count_pending():
            await cl.log.flush_async()

    async def save_fan_out_in_flight_failure(self, invocation_id: str, record: Any) -> None:
        cl = self.sync
        inc = cl._incoming(invocation_id, record, "fan_out_in_flight_failure")
        durable = cl._flush_every <= 0
        await cl.log.append_async(invocation_id, _Save(cl, inc), durable=durable)

    async def save_instance(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        index: int,
        progress: Any,
        *,
        namespace: tuple[str, ...] = (),
        lineage: tuple[EnclosingFanOutInstance, ...] = (),
        saved_at: float | None = None,
    ) -> None:
        """Async :meth:`CheckpointLog.save_instance`."""
        cl = self.sync
        change = cl._instance_change(
            invocation_id, fan_out_node_name, index, progress, namespace, lineage, saved_at
        )
        if cl._flush_every <= 0:
            await cl.log.append_async(invocation_id, _InstanceSaves(cl, change))
            return
        if cl._stage(invocation_id, change):
            await cl.log.flush_async()

    async def save_instances(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        items: Iterable[tuple[int, Any]],
        *,
        namespace: tuple[str, ...] = (),
        lineage: tuple[EnclosingFanOutInstance, ...] = (),
        saved_at: float | None = None,
    ) -> None:
        """Async :meth:`CheckpointLog.save_instances` (checked and queued before the first
        ``await``)."""
        cl = self.sync
        frames = cl._instance_batches(
            invocation_id, fan_out_node_name, items, namespace, lineage, saved_at
        )
        if not frames:
            return
        log = cl.log
        if cl._flush_every <= 0:
            for frame in frames[:-1]:
                log.append(invocation_id, frame, durable=False)
            await log.append_async(invocation_id, frames[-1])
            return
        for frame in frames:
            log.append(invocation_id, frame, durable=False)
        if cl._count_pending(sum(f.count for f in frames)):
            await log.flush_async()

    async def load(self, invocation_id: str) -> CheckpointRecord | None:
        return await self.sync.load_async(invocation_id)

    async def pending_instances(
        self,
        invocation_id: str,
        fan_out_node_name: str,
        *,
        namespace: tuple[str, ...] = (),
        lineage: tuple[EnclosingFanOutInstance, ...] = (),
        errors: bool = False,
    ) -> list[int] | None:
        """Async :meth:`CheckpointLog.pending_instances` (on a worker thread: it scans)."""
        return await asyncio.to_thread(
            self.sync.pending_instances,
            invocation_id,
            fan_out_node_name,
            namespace=namespace,
            lineage=lineage,
            errors=errors,
        )

    async def fork(self, invocation_id: str, *, at: int, new_invocation_id: str) -> ForkOrigin:
        """Async :meth:`CheckpointLog.fork` (on a worker thread: it folds the source record)."""
        return await asyncio.to_thread(
            self.sync.fork, invocation_id, at=at, new_invocation_id=new_invocation_id
        )

    async def list(self, filter: CheckpointFilter | None = None) -> list[CheckpointSummary]:
        return await asyncio.to_thread(self.sync.list, filter)

    async def delete(self, invocation_id: str) -> None:
        cl = self.sync
        await cl.log.append_async(invocation_id, cl._delete_frame(invocation_id))

    async def flush(self) -> None:
        self.sync._reset_pending()
        await self.sync.log.flush_async()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> Checkpointer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
