"""CkptlogSaver: a LangGraph ``BaseCheckpointSaver`` on the ckptlog event log.

``graph.compile(checkpointer=CkptlogSaver.open(path))`` works on the sync and the async paths;
``path`` is a directory (LMDB) or a ``postgresql://`` URL. ``LmdbSaver`` is the same class
under its first name (it was named before the log ran on PostgreSQL too).
Each ``(thread_id, checkpoint_ns)`` is one stream of the log (eventlog.integrations.
langgraph_store), holding three frame kinds (eventlog.frames):

- ``LgCheckpoint``: the checkpoint without channel values, its metadata, and a blob for every
  channel in ``new_versions`` only (keyed by channel and version, as LangGraph's in-memory saver
  keys them). A blob is the full value, or a delta against the channel's keyframe (its last
  full blob, in an earlier frame of the stream): ``append`` when the new value is a list that
  extends the previous one (its first elements are the very objects stored before; the blob
  holds every element since the keyframe), ``patch`` (zstd with the keyframe's bytes as
  dictionary) when the bytes changed a little. A keyframe is written again when the deltas
  since the last one outweigh it twice, or after ``KEYFRAME_EVERY`` appends
  (``PATCH_KEYFRAME_EVERY`` patches), so any version
  reads from at most two frames (the storage side, framework-free, is
  eventlog.integrations.langgraph_store).
- ``LgWrites``: one ``put_writes`` call (one task), with its ``task_path``.
- ``LgRemove``: a delete, ``delete_for_runs`` or prune, logged; the frames it removes stay in the
  log until compaction reclaims them (see docs/integrations/langgraph.md).

Invariants:
- Serialization goes through ``self.serde`` at call time (``with_allowlist`` clones work);
  nothing binds an event loop at construction; async methods enqueue before their first
  ``await`` (call order is commit order) and await a future the writer resolves.
- ``put`` and ``put_writes`` return once their frame is committed (durable per the log's
  durability). Concurrent ``put_writes`` of one super-step share commits (group commit).
- ``put_writes`` is idempotent for ``idx >= 0`` and upserts special channels (``idx < 0``);
  the check runs inside the write transaction, so concurrent duplicates cannot both land.
- A delta blob's base is checked inside the write transaction against the blob index; when the
  base is gone (deleted thread, re-put version), the value is stored in full instead.
- Reads run in one read transaction each; ``pending_writes`` come in ``writes_sort_key`` order.
  ``get_tuple`` latest reads the stream's ``lg_latest`` rows in one statement (no frame, one
  round trip on PostgreSQL) and falls back to that transaction when they are absent.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from backends.base import Backend, Durability, ReadTxn
from eventlog.errors import (
    CorruptFrame,
    InvalidCheckpoint,  # noqa: F401 - re-exported (raised by the reads)
    InvalidConfig,
    InvalidPruneStrategy,
)
from eventlog.frames import (
    Frame,
    LgCheckpoint,
    LgWrite,
    LgWrites,
)
from eventlog.integrations.langgraph_config import (
    _check_str,
    _check_versions,
    _config,
    _ids,
    _plain_versions,
)
from eventlog.integrations.langgraph_reads import (
    LIST_CHUNK,  # noqa: F401 - re-exported
    SaverReads,
)
from eventlog.integrations.langgraph_store import (
    RUNS,
    TABLES,
    CopiedFrame,
    Memos,
    Patches,
    PutFrame,
    RemoveFrame,
    ViewFrame,
    WritesFrame,
    checkpoint_rows,
    latest_checkpoint,
    parse_stream_key,
    plan_blob,
    read_checkpoint_row,
    run_prefix,
    split_run_key,
    stream_ids,
    stream_key,
    stream_name,
    thread_key,
    verify_views,
)
from eventlog.log import Appended, EventLog, stream_key_bytes
from eventlog.reports import Stats, VerifyReport
from projections.langgraph import compaction_plan

PRUNE_STRATEGIES: Final = ("keep_latest", "delete")
LINGER_S: Final = 0.002  # put_writes waits this long for the step's put (fsync logs only)
LINGER_BACKOFF: Final = 64  # put_writes calls without lingering after two lingers nobody joined

LOG_FRAME_TYPE: Any = Frame  # includes the LangGraph kinds


# -- the saver ---------------------------------------------------------------------------------


class CkptlogSaver(SaverReads):
    """LangGraph checkpoints as frames of an append-only log (LMDB by default).

    Thread-safe. Use one saver per process and path (LMDB opens an environment once per
    process); close it with :meth:`close` (or ``with`` / ``async with``).
    """

    def __init__(
        self,
        log: EventLog,
        *,
        serde: SerializerProtocol | None = None,
        identity_appends: bool = True,
    ) -> None:
        """``identity_appends``: store a list that extends the channel's previous list (the same
        element objects, then new ones) as the new elements only. It relies on LangGraph's
        rule that state is never mutated in place; ``False`` serializes every changed value
        whole (a byte patch may still store it small, at O(value) CPU per put)."""
        super().__init__(serde=serde)
        self.log = log
        self.identity_appends = identity_appends
        self._memos = Memos()
        self._patches = Patches(log.frame_bytes_max)
        self._held_links = {}
        # put_writes lingers for the step's put to share its commit (LINGER_S); see put_writes
        self._linger = LINGER_S if log.backend.durability == "fsync" else 0.0
        self._puts = 0  # puts begun (a put_writes that lingered checks whether one came)
        self._linger_misses = 0
        self._linger_skip = 0
        # (thread id, ns, stream key, lg_threads key) of the last put or put_writes
        self._last_keys: tuple[str, str, str, bytes] = ("", "", "", b"")

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = "fsync",
        serde: SerializerProtocol | None = None,
        identity_appends: bool = True,
        **options: Any,
    ) -> CkptlogSaver:
        """Open (or create) the saver's log in directory ``path`` (``options`` go to
        :meth:`EventLog.open`)."""
        log = EventLog.open(
            path,
            durability=durability,
            extra_tables=TABLES,
            frame_type=LOG_FRAME_TYPE,
            **options,
        )
        return cls(log, serde=serde, identity_appends=identity_appends)

    @classmethod
    def on_backend(
        cls, backend: Backend, *, serde: SerializerProtocol | None = None, **options: Any
    ) -> CkptlogSaver:
        """A saver on any backend (e.g. ``backends.memory.MemoryBackend()``)."""
        return cls(EventLog(backend, frame_type=LOG_FRAME_TYPE, **options), serde=serde)

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        self.log.close()

    def __enter__(self) -> CkptlogSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CkptlogSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    def verify(self) -> VerifyReport:
        """The log's checks plus: every LangGraph view equals the fold of its stream."""
        report = self.log.verify()
        report.problems.extend(verify_views(self.log))
        return report

    def stats(self) -> Stats:
        return self.log.stats()

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``<32-digit counter>.<16 random hex>``: increasing, and unique across forks, so a
        fork never reuses a version (and its blob key) that another branch already stored."""
        if current is None:
            n = 0
        elif isinstance(current, (int, float)):
            n = int(current)
        else:
            n = int(str(current).split(".", 1)[0])
        return f"{n + 1:032}.{os.urandom(8).hex()}"

    # -- writing -------------------------------------------------------------------------------

    def _plan_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[str, PutFrame, RunnableConfig]:
        tid, ns, parent = _ids(config, "put")
        stream, tkey = self._stream_keys(tid, ns)
        serde = self.serde
        body: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values", None) or {}
        versions = _plain_versions(body.pop("channel_versions", None) or {})
        cid = checkpoint["id"]
        if type(cid) is not str:  # (the message is built only for a bad one)
            _check_str(cid, "checkpoint['id']")
        _check_versions(new_versions, "new_versions")
        memos, appends = self._memos, self.identity_appends
        pending = [
            plan_blob(memos, stream, channel, version, values, serde, appends)
            for channel, version in new_versions.items()
        ]
        ctype, cdata = serde.dumps_typed(body)
        md = get_checkpoint_metadata(config, metadata)
        mtype, mdata = serde.dumps_typed(md)
        run_id = md.get("run_id")
        head = LgCheckpoint(
            checkpoint_id=cid,
            parent_id=parent,
            checkpoint_type=ctype,
            checkpoint=cdata,
            versions=versions,
            metadata_type=mtype,
            metadata=mdata,
            run_id=None if run_id is None else str(run_id),
            blobs=tuple([p.blob for p in pending]),  # as planned: build() keeps it if it can
            saved_at=time.time(),
        )
        op = PutFrame(tkey, head, pending, serde, self.log)
        return stream, op, _config(tid, ns, cid)

    def _stream_keys(self, tid: str, ns: str) -> tuple[str, bytes]:
        """The stream key (checked against the backend's limit) and ``lg_threads`` key of a
        thread's namespace; the last one is kept (a loop puts to one thread)."""
        last = self._last_keys
        if last[0] == tid and last[1] == ns:
            return last[2], last[3]
        stream = stream_key(tid, ns)
        stream_key_bytes(stream, self.log.backend.max_key_bytes)
        tkey = thread_key(tid, ns)
        self._last_keys = (tid, ns, stream, tkey)
        return stream, tkey

    def _remember(self, stream: str, op: PutFrame, done: Appended | None) -> None:
        if done is None:
            return
        if op.memos:  # (a put of small scalars only has none: no lock)
            for _, memo in op.memos:
                if memo is not None:
                    memo.committed(done.seq)
            self._memos.put_many(stream, op.memos)
        for channel, full in op.fulls:  # the bytes a read of this version (or a delta) needs
            self._patches.keep((op.sid, done.seq, channel), full)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the blobs of ``new_versions``; durable on return."""
        stream, op, out = self._plan_put(config, checkpoint, metadata, new_versions)
        self._puts += 1
        done = self.log.append(stream, op)
        if op.memos or op.fulls:  # (a put of small values keeps nothing: no call)
            self._remember(stream, op, done)
        return out

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        stream, op, out = self._plan_put(config, checkpoint, metadata, new_versions)
        self._remember(stream, op, await self.log.append_async(stream, op))
        return out

    def _plan_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[str, WritesFrame]:
        tid, ns, cid = _ids(config, "put_writes")
        if cid is None:
            raise InvalidConfig(
                "put_writes: config['configurable']['checkpoint_id'] is missing; pass the "
                "config returned by put() for the checkpoint these writes belong to"
            )
        stream, tkey = self._stream_keys(tid, ns)
        serde = self.serde
        if task_path is not None:
            _check_str(task_path, "task_path")
        by_idx: dict[int, LgWrite] = {}  # special channels: the last write of a call wins
        for i, (channel, value) in enumerate(writes):
            if type(channel) is not str:  # (the message is built only for a bad one)
                _check_str(channel, f"writes[{i}] channel")
            idx = WRITES_IDX_MAP.get(channel, i)
            typ, data = serde.dumps_typed(value)
            by_idx[idx] = LgWrite(idx, channel, typ, data)
        frame = LgWrites(
            checkpoint_id=cid,
            task_id=str(task_id),
            task_path=task_path or "",
            writes=tuple(by_idx.values()),
            saved_at=time.time(),
        )
        return stream, WritesFrame(tkey, frame)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes (one frame); concurrent calls share commits; durable on
        return.

        LangGraph calls it from its executor as a task ends and, at the end of the step,
        ``put`` from another thread: on an ``"fsync"`` log it waits up to ``LINGER_S`` for
        that put to take its frame into the same commit (one device flush a step, not two).
        Two lingers in a row that no put joined (a put that waits for these writes first,
        as for LangGraph's delta channels, or a step whose other tasks run on) stop it for
        the next ``LINGER_BACKOFF`` calls.
        """
        if not writes:
            return
        stream, op = self._plan_writes(config, writes, task_id, task_path)
        linger = self._linger
        if linger and self._linger_skip:
            self._linger_skip -= 1
            linger = 0.0
        puts = self._puts
        self.log.append(stream, op, linger=linger)
        if linger:
            if self._puts != puts:
                self._linger_misses = 0
            else:
                self._linger_misses += 1
                if self._linger_misses >= 2:
                    self._linger_misses, self._linger_skip = 0, LINGER_BACKOFF

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        stream, op = self._plan_writes(config, writes, task_id, task_path)
        await self.log.append_async(stream, op)

    # -- deleting, pruning, copying ------------------------------------------------------------

    def _submit(self, ops: list[tuple[str, ViewFrame]]) -> list[Future[Appended]]:
        return [self.log.submit(stream, op) for stream, op in ops]

    def _removals_of_threads(
        self, thread_ids: Sequence[str], reason: str
    ) -> list[tuple[str, ViewFrame]]:
        with self.log.backend.read() as txn:
            found = [s for tid in thread_ids for s in stream_ids(txn, str(tid))]
        return [
            (stream_key(tid, ns), RemoveFrame(thread_key(tid, ns), None, reason))
            for tid, ns, _ in found
        ]

    def _run(self, ops: list[tuple[str, ViewFrame]]) -> None:
        self._memos.forget({s for s, _ in ops})
        for fut in self._submit(ops):
            fut.result()

    async def _arun(self, ops: list[tuple[str, ViewFrame]]) -> None:
        self._memos.forget({s for s, _ in ops})
        futures = self._submit(ops)  # all queued before the first await
        for fut in futures:
            await asyncio.wrap_future(fut)

    def delete_thread(self, thread_id: str) -> None:
        """Remove every checkpoint and write of the thread, in all namespaces (logged)."""
        self._run(self._removals_of_threads([thread_id], "delete_thread"))

    async def adelete_thread(self, thread_id: str) -> None:
        ops = await asyncio.to_thread(self._removals_of_threads, [thread_id], "delete_thread")
        await self._arun(ops)

    def _removals_of_runs(self, run_ids: Sequence[str]) -> list[tuple[str, ViewFrame]]:
        by_sid: dict[int, set[str]] = collections.defaultdict(set)
        ops: list[tuple[str, ViewFrame]] = []
        with self.log.backend.read() as txn:
            for run in dict.fromkeys(map(str, run_ids)):
                for key, _ in txn.scan_prefix(RUNS, run_prefix(run)):
                    sid, cid = split_run_key(key)
                    by_sid[sid].add(cid)
            for sid, cids in sorted(by_sid.items()):
                name = stream_name(txn, sid)
                parsed = None if name is None else parse_stream_key(name)
                if name is None or parsed is None:
                    raise CorruptFrame(
                        f"lg_runs names stream id {sid}, which is not a LangGraph stream of "
                        "this log; run LmdbSaver.verify()"
                    )
                ops.append(
                    (name, RemoveFrame(thread_key(*parsed), tuple(sorted(cids)), "delete_for_runs"))
                )
        return ops

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) whose metadata ``run_id`` is listed."""
        self._run(self._removals_of_runs(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        ops = await asyncio.to_thread(self._removals_of_runs, run_ids)
        await self._arun(ops)

    def _prune_ops(self, thread_ids: Sequence[str], strategy: str) -> list[tuple[str, ViewFrame]]:
        if strategy not in PRUNE_STRATEGIES:
            raise InvalidPruneStrategy(
                f"prune strategy must be one of {PRUNE_STRATEGIES!r}, got {strategy!r}: "
                "'keep_latest' keeps the newest checkpoint per namespace, 'delete' removes all"
            )
        if strategy == "delete":
            return self._removals_of_threads(thread_ids, "prune_delete")
        serde = self.serde
        ops: list[tuple[str, ViewFrame]] = []
        with self.log.backend.read() as txn:
            for tid, ns, sid in [s for t in thread_ids for s in stream_ids(txn, str(t))]:
                keep = self._keep_for_latest(txn, sid, serde)
                drop = tuple(cid for cid, _ in checkpoint_rows(txn, sid) if cid not in keep)
                if drop:
                    remove = RemoveFrame(thread_key(tid, ns), drop, "prune_keep_latest")
                    ops.append((stream_key(tid, ns), remove))
        return ops

    def _keep_for_latest(self, txn: ReadTxn, sid: int, serde: SerializerProtocol) -> set[str]:
        """The latest checkpoint, plus the ancestors its ``DeltaChannel`` s replay from.

        A delta channel (named in the metadata's ``counters_since_delta_snapshot``) without a
        stored value at the latest checkpoint is rebuilt from ancestor writes back to the
        nearest ancestor that stores a value for it; those ancestors are kept.
        """
        latest = latest_checkpoint(txn, sid)
        if latest is None:
            return set()
        cid, row = latest
        keep = {cid}
        metadata = serde.loads_typed((row.metadata_type, row.metadata))
        delta = metadata.get("counters_since_delta_snapshot") or {}
        if not delta:
            return keep
        reader = self._reader(txn, sid, serde)
        versions = reader.versions(row.seq)
        need = {c for c in delta if c in versions and not reader.has_value(c, versions[c])}
        parent = row.parent_id
        while need and parent is not None and parent not in keep:
            prow = read_checkpoint_row(txn, sid, parent)
            if prow is None:
                break
            keep.add(parent)
            versions = reader.versions(prow.seq)
            need = {c for c in need if c not in versions or not reader.has_value(c, versions[c])}
            parent = prow.parent_id
        return keep

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep the newest checkpoint per namespace (and, for ``DeltaChannel``
        s, the ancestors it replays from); ``delete``: remove everything. Logged."""
        self._run(self._prune_ops(thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        ops = await asyncio.to_thread(self._prune_ops, thread_ids, strategy)
        await self._arun(ops)

    def _import_ops(
        self,
        thread_id: str,
        checkpoint_ns: str,
        frames: Sequence[tuple[int, Any]],
        reason: str = "compaction",
    ) -> list[tuple[str, ViewFrame]]:
        plan = compaction_plan(frames)
        by_seq = dict(frames)
        seqs: dict[int, int] = {}
        target, tkey = stream_key(thread_id, checkpoint_ns), thread_key(thread_id, checkpoint_ns)
        stream_key_bytes(target, self.log.backend.max_key_bytes)
        ops: list[tuple[str, ViewFrame]] = [
            (target, CopiedFrame(tkey, by_seq[s], s, seqs, self.log)) for s in plan.keep
        ]
        if plan.remove_ids:
            ops.append((target, RemoveFrame(tkey, plan.remove_ids, reason)))
        return ops

    def import_frames(
        self, thread_id: str, checkpoint_ns: str, frames: Sequence[tuple[int, Any]]
    ) -> None:
        """Append the live part of a stream's ``(seq, frame)`` pairs (from this log or another)
        to ``(thread_id, checkpoint_ns)``: the frames :func:`projections.langgraph.
        compaction_plan` keeps, rebased, then a removal of what they would bring back.

        ``copy_thread`` is this on each namespace; copying a log's streams into a fresh log
        this way compacts it (everything deleted, pruned or superseded is left behind).
        """
        self._run(self._import_ops(str(thread_id), str(checkpoint_ns), frames))

    def _copy_ops(
        self, source_thread_id: str, target_thread_id: str
    ) -> list[tuple[str, ViewFrame]]:
        src, dst = str(source_thread_id), str(target_thread_id)
        if src == dst:
            return []  # a thread already holds its own history
        with self.log.backend.read() as txn:
            namespaces = [ns for _, ns, _ in stream_ids(txn, src)]
        ops: list[tuple[str, ViewFrame]] = []
        for ns in namespaces:
            frames = [(sf.seq, sf.frame) for sf in self.log.read_stream(stream_key(src, ns))]
            ops += self._import_ops(dst, ns, frames, "copy_thread")
        return ops

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread (all namespaces, the whole history, so
        delta blobs and ``DeltaChannel`` replays keep their bases) to another thread."""
        self._run(self._copy_ops(source_thread_id, target_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        ops = await asyncio.to_thread(self._copy_ops, source_thread_id, target_thread_id)
        await self._arun(ops)


LmdbSaver = CkptlogSaver  # the first name, kept: LmdbSaver.open(url) works on PostgreSQL too
