"""The viewer's answers: every endpoint of ``ckptlog serve`` as data, over the read layer
(eventlog.read) and a read-only log; HTTP is eventlog.viewer.server's.

Invariants:
- The log is opened read-only and never written; LMDB readers never block the writer, so a
  process appending to the log carries on while the page polls (``/api/changes``).
- Every list is paginated (``limit`` <= ``PAGE_MAX``) and every series binned (``bins`` <=
  ``BINS_MAX``): an answer is bounded whatever the log holds. A timeline is indexed
  incrementally (``INDEX_BUDGET_S`` of frames per request, resumed by the next).
- What a stream is comes from the view that claims it (eventlog.read.streams), the same
  answer the command line gives; a kind of stream the page has no panel for is shown through
  ``/api/steps`` (its view's steps), so a new view needs no change here.
- Each request borrows its own log objects (:class:`_Logs`): a zstd context is never shared
  between threads.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from eventlog import forensics as fx
from eventlog import read
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import InvalidArgument
from eventlog.frames import Save, Snapshot, Tombstone
from eventlog.log import EventLog, Problem
from eventlog.read.diffs import diff_lines
from eventlog.read.forks import forked_from, origin_doc
from eventlog.read.timeline import (
    DONE,
    FAILED,
    IN_FLIGHT,
    NOT_STARTED,
    Timeline,
)
from eventlog.read.timeline import state_code as _code
from eventlog.read.values import subvalue, tree
from eventlog.records import CheckpointRecord, FanOutInstanceProgress

PAGE_MAX: Final = 500  # rows a list endpoint returns at most
BINS_MAX: Final = 2000  # points a binned series returns at most
INDEX_BUDGET_S: Final = 0.4  # seconds of frame indexing one timeline request spends at most
RECORD_CACHE: Final = 3  # records (at a seq) kept decoded for the instance grid

BadRequest = InvalidArgument  # a request the API cannot answer (a 400)


class _Record:
    """A record at a seq, decoded once, with each fan-out's instance states as codes."""

    def __init__(self, record: CheckpointRecord | None) -> None:
        self.record = record
        self.codes: list[bytearray] = []
        if record is not None:
            for fo in record.fan_out_progress:
                self.codes.append(bytearray(map(_code, fo.instances)))


class _Logs:
    """Read-only log objects, one per thread using them at a time.

    An ``EventLog`` decompresses frames with one zstd context, which two threads must not use
    at once (it corrupts reads, and can crash the process); so every request borrows its own
    log objects for its duration. They share the process's one LMDB environment of the path.
    """

    def __init__(self, location: str, options: dict[str, Any]) -> None:
        self.location = location
        self.options = options
        self._lock = threading.Lock()
        self._free: list[dict[str, Any]] = []
        self._all: list[dict[str, Any]] = []
        self._local = threading.local()

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Bind a free set of log objects to this thread until the block ends."""
        if getattr(self._local, "logs", None) is not None:
            yield  # nested: keep the ones bound
            return
        with self._lock:
            logs = self._free.pop() if self._free else None
            if logs is None:
                logs = {}
                self._all.append(logs)
        self._local.logs = logs
        try:
            yield
        finally:
            self._local.logs = None
            with self._lock:
                self._free.append(logs)

    def checkpoints(self) -> CheckpointLog:
        logs = self._bound()
        cl = logs.get("")
        if cl is None:
            cl = logs[""] = CheckpointLog.open(self.location, readonly=True, **self.options)
        assert isinstance(cl, CheckpointLog)
        return cl

    def integration(self, family: str, tables: Any) -> EventLog:
        """An ``EventLog`` with the integration's tables opened too (read-only like the rest)."""
        logs = self._bound()
        log = logs.get(family)
        if log is None:
            log = logs[family] = EventLog.open(
                self.location, readonly=True, extra_tables=tables, **self.options
            )
        assert isinstance(log, EventLog)
        return log

    def _bound(self) -> dict[str, Any]:
        logs = getattr(self._local, "logs", None)
        if logs is None:
            raise RuntimeError("log read outside Viewer.session(): a bug in ckptlog serve")
        assert isinstance(logs, dict)
        return logs

    def close(self) -> None:
        with self._lock:
            for logs in self._all:
                for log in logs.values():
                    log.close()
            self._all.clear()
            self._free.clear()


class Viewer:
    """The read-only view of one log that the HTTP handler serves. Every method that reads the
    log runs inside :meth:`session` (the handler and the verify thread open one)."""

    def __init__(self, path: str, **options: Any) -> None:
        self.path = path
        self.opened = fx.open_readonly(path, **options)
        self.problems = [msgspec.to_builtins(p) for p in self.opened.problems]
        self._logs = _Logs(self.opened.log.log.backend.location, options)
        self._lock = threading.Lock()
        self._timelines: dict[str, Timeline] = {}
        self._records: collections.OrderedDict[tuple[str, int], _Record] = collections.OrderedDict()
        self._inv_cache: tuple[int, list[dict[str, Any]]] | None = None
        self._verify: dict[str, Any] = {"state": "idle"}
        # a stream's origin is in its first frame, never rewritten: read once per stream
        self._origins: dict[str, dict[str, Any] | None] = {}

    def session(self) -> contextlib.AbstractContextManager[None]:
        return self._logs.session()

    @property
    def cl(self) -> CheckpointLog:
        """This thread's read-only checkpoint log (inside :meth:`session`)."""
        return self._logs.checkpoints()

    def close(self) -> None:
        self._logs.close()
        self.opened.close()

    # -- the whole log ---------------------------------------------------------------------

    def changes(self) -> dict[str, Any]:
        st = self.cl.log.stats()
        return {"frames": st.frames, "streams": st.streams}

    def _all_invocations(self) -> list[dict[str, Any]]:
        frames = self.changes()["frames"]  # the list is rebuilt only when the log changed
        cached = self._inv_cache
        if cached is not None and cached[0] == frames:
            return cached[1]
        rows = []
        for listed in read.listing(self.cl):
            inv = listed.row
            rows.append(
                {
                    **listed.labels,  # what its view calls it (a thread, a task)
                    "id": inv.invocation_id,
                    "family": listed.kind,
                    "records": listed.info.records,
                    "display": listed.info.display,
                    "noun": listed.info.noun,
                    "correlation_id": inv.correlation_id,
                    "saves": inv.frames,
                    "last_saved_at": inv.last_saved_at,
                    "kind": inv.kind,
                    "status": listed.status,
                    "nodes": inv.completed_nodes,
                    "instances": inv.fan_out_instances,
                    "completed": inv.completed_instances,
                    "errors": inv.error_instances,
                }
            )
        rows.sort(key=lambda r: -(r["last_saved_at"] or 0.0))  # newest first
        self._inv_cache = (frames, rows)
        return rows

    def invocations(
        self, q: str, status: str, family: str, offset: int, limit: int
    ) -> dict[str, Any]:
        rows = self._all_invocations()
        if q:
            needle = q.lower()
            rows = [
                r
                for r in rows
                if needle in r["id"].lower() or needle in (r["correlation_id"] or "").lower()
            ]
        if status:
            rows = [r for r in rows if r["status"] == status]
        if family:
            rows = [r for r in rows if r["family"] == family]
        page = [dict(r) for r in rows[offset : offset + limit]]
        for r in page:
            first = self.cl.log.read_frame(r["id"], 1) if r["saves"] else None
            r["first_saved_at"] = fx.frame_saved_at(first.frame) if first is not None else None
        return {"total": len(rows), "offset": offset, "rows": page}

    def stats(self) -> dict[str, Any]:
        return {"stats": fx.plain(fx.stats(self.cl, top=10)), "open_problems": self.problems}

    def verify(self, start: bool) -> dict[str, Any]:
        """The state of the verify job; ``start`` runs it (again) in a thread."""
        with self._lock:
            if start and self._verify["state"] != "running":
                self._verify = {"state": "running", "done": 0, "total": 0, "started": time.time()}
                threading.Thread(target=self._run_verify, daemon=True).start()
            return dict(self._verify)

    def _run_verify(self) -> None:
        with self.session():
            self._verify_now()

    def _verify_now(self) -> None:
        def progress(done: int, total: int) -> None:
            self._verify.update(done=done, total=total)

        try:
            # the log's own checks, and every present view's rows against its fold
            report = fx.verify(self.cl, progress)
            problems: list[Problem] = list(report.problems)
            result = {
                "state": "done",
                "ok": not problems,
                "problems": [msgspec.to_builtins(p) for p in problems],
                "finished": time.time(),
            }
        except Exception as e:  # noqa: BLE001 - reported on the page, never a dead thread
            result = {"state": "failed", "error": f"{type(e).__name__}: {e}"}
        with self._lock:
            self._verify = {**self._verify, **result}

    # -- one checkpoint invocation ---------------------------------------------------------

    def timeline(self, inv: str, lo: int, hi: int, bins: int) -> dict[str, Any]:
        last = self.cl.log.last_seq(inv)
        if last == 0:
            raise BadRequest(f"no stream {inv!r} in the log; pick one from the list")
        with self._lock:
            tl = self._timelines.get(inv)
            if tl is None:
                tl = self._timelines[inv] = Timeline(inv)
        if tl.indexed < last:
            tl.extend(self.cl.log, INDEX_BUDGET_S)
        out = tl.bins(lo, hi or last, bins)
        out["last_seq"] = last
        return out

    def _timeline_if_any(self, inv: str) -> Timeline | None:
        with self._lock:
            return self._timelines.get(inv)

    def _record(self, inv: str, seq: int) -> _Record:
        fx.check_seq(self.cl, inv, seq)
        key = (inv, seq)
        with self._lock:
            got = self._records.get(key)
            if got is not None:
                self._records.move_to_end(key)
                return got
        rec = _Record(self.cl.record_at(inv, seq) if seq else None)
        with self._lock:
            self._records[key] = rec
            while len(self._records) > RECORD_CACHE:
                self._records.popitem(last=False)
        return rec

    def record(self, inv: str, seq: int) -> dict[str, Any]:
        rec = self._record(inv, seq)
        r = rec.record
        last = self.cl.log.last_seq(inv)
        step = self._step(inv, seq)
        if r is None:
            return {"invocation_id": inv, "seq": seq, "last_seq": last, "record": None, **step}
        fans = []
        for fo, codes in zip(r.fan_out_progress, rec.codes, strict=True):
            fans.append(
                {
                    "name": fo.fan_out_node_name,
                    "namespace": list(fo.namespace),
                    "lineage": [fx.plain(e) for e in fo.enclosing_fan_out_lineage],
                    "count": fo.instance_count,
                    "not_started": codes.count(NOT_STARTED),
                    "in_flight": codes.count(IN_FLIGHT),
                    "completed": codes.count(DONE),
                    "failed": codes.count(FAILED),
                }
            )
        positions = r.completed_positions
        return {
            "invocation_id": inv,
            "seq": seq,
            "last_seq": last,
            **step,
            "forked_from": self._origin(inv),
            "record": {
                "correlation_id": r.correlation_id,
                "last_saved_at": r.last_saved_at,
                "schema_version": r.schema_version,
                "state": tree(r.state),
                "parent_states": len(r.parent_states),
                "positions_total": len(positions),
                "positions": [fx.plain(p) for p in positions[-PAGE_MAX:]],
                "fan_outs": fans,
            },
        }

    def _origin(self, inv: str) -> dict[str, Any] | None:
        """Where ``inv`` was forked from (``None``: not a fork), cached per stream."""
        with self._lock:
            if inv in self._origins:
                return self._origins[inv]
        doc = origin_doc(forked_from(self.cl.log, inv))
        with self._lock:
            self._origins[inv] = doc
        return doc

    def _step(self, inv: str, seq: int) -> dict[str, Any]:
        if seq == 0:
            return {"saved_at": None, "kind": None}
        sf = self.cl.log.read_frame(inv, seq)
        if sf is None:
            return {"saved_at": None, "kind": None}
        frame = sf.frame
        kind = frame.kind if isinstance(frame, (Save, Snapshot)) else type(frame).__name__
        if isinstance(frame, Tombstone):
            kind = "delete"
        changes = len(frame.instances) if isinstance(frame, Save) else 0
        return {"saved_at": fx.frame_saved_at(frame), "kind": kind, "instance_changes": changes}

    def value(self, inv: str, seq: int, what: str, path: list[Any], offset: int) -> dict[str, Any]:
        rec = self._record(inv, seq).record
        if rec is None:
            raise BadRequest(f"{inv!r} has no record at seq {seq}")
        if what == "state":
            root: Any = rec.state
        elif what == "parent_states":
            root = list(rec.parent_states)
        elif what == "result":
            fan, index = path[0], path[1]
            root = self._instance_progress(rec, fan, index).result
            path = path[2:]
        else:
            raise BadRequest(f"what must be state, parent_states or result, got {what!r}")
        return {"node": tree(subvalue(root, path), offset=offset)}

    @staticmethod
    def _instance_progress(rec: CheckpointRecord, fan: Any, index: Any) -> FanOutInstanceProgress:
        fos = rec.fan_out_progress
        if not isinstance(fan, int) or not 0 <= fan < len(fos):
            raise BadRequest(f"fan-out {fan!r} does not exist: the record has {len(fos)}")
        fo = fos[fan]
        if not isinstance(index, int) or not 0 <= index < len(fo.instances):
            raise BadRequest(f"instance {index!r} is outside 0..{len(fo.instances) - 1}")
        return fo.instances[index]

    def instances(
        self, inv: str, seq: int, fan: int, lo: int, hi: int, bins: int
    ) -> dict[str, Any]:
        """Instances ``lo..hi-1`` of fan-out ``fan`` at ``seq`` in ``bins`` bins, each with its
        counts of not started / in flight / completed / failed instances."""
        rec = self._record(inv, seq)
        if not 0 <= fan < len(rec.codes):
            raise BadRequest(f"fan-out {fan} does not exist at seq {seq}: {len(rec.codes)} there")
        codes = rec.codes[fan]
        hi = min(hi or len(codes), len(codes))
        lo = max(0, min(lo, hi))
        width = max(1, -(-(hi - lo) // bins))
        out = []
        for a in range(lo, hi, width):
            part = codes[a : min(hi, a + width)]
            out.append([a, part.count(NOT_STARTED), part.count(IN_FLIGHT), part.count(DONE),
                        part.count(FAILED)])  # fmt: skip
        return {"count": len(codes), "lo": lo, "hi": hi, "width": width, "bins": out}

    def instance(self, inv: str, seq: int, fan: int, index: int) -> dict[str, Any]:
        rec = self._record(inv, seq).record
        if rec is None:
            raise BadRequest(f"{inv!r} has no record at seq {seq}")
        p = self._instance_progress(rec, fan, index)
        out: dict[str, Any] = {
            "fan_out": fan,
            "index": index,
            "state": p.state,
            "result_is_error": p.result_is_error,
            "result": tree(p.result),
            "inner_positions": [fx.plain(x) for x in p.completed_inner_positions[:PAGE_MAX]],
        }
        tl = self._timeline_if_any(inv)
        if tl is not None:
            with tl.lock:
                fo = rec.fan_out_progress[fan]
                key = (fo.fan_out_node_name, tuple(fo.namespace), fo.enclosing_fan_out_lineage)
                fi = tl.fans.get(key)
                if fi is not None:
                    out["failed_at"] = [
                        {"t": t, "seq": s} for t, i, s in fi.failures if i == index
                    ][:20]
        return out

    def failures(self, inv: str, fan: int, offset: int, limit: int) -> dict[str, Any]:
        """Instances of fan-out ``fan`` that failed, in the order they failed (by their own
        save time, from the indexed part of the timeline)."""
        tl = self._timeline_if_any(inv)
        if tl is None:
            raise BadRequest(f"open the timeline of {inv!r} first")
        with tl.lock:
            fi = tl.fan(fan)
            rows = [{"t": t, "index": i, "seq": s} for t, i, s in fi.failures[offset:][:limit]]
            return {"total": len(fi.failures), "offset": offset, "rows": rows}

    def diff(self, inv: str, a: int, b: int, offset: int, limit: int) -> dict[str, Any]:
        """The diff ``ckptlog diff --full`` prints, as its lines (paginated)."""
        changes = fx.diff(self.cl, inv, a, b)
        lines = diff_lines(changes, full=True) or ["  (no changes)"]
        return {
            "invocation_id": inv,
            "from_seq": a,
            "to_seq": b,
            "total": len(lines),
            "offset": offset,
            "lines": lines[offset : offset + limit],
        }

    # -- every kind of stream: its steps, through its view --------------------------------------

    def steps(self, stream: str, offset: int, limit: int) -> dict[str, Any]:
        """Frames ``offset+1..offset+limit`` of any stream, each with what its view says it is
        and the stream's value as of it (as a tree): what the page shows for a kind of stream
        it has no page of its own for."""
        last = self.cl.log.last_seq(stream)
        if last == 0:
            raise BadRequest(f"no stream {stream!r} in the log; pick one from the list")
        info = read.describe(self.cl.log, stream)
        rows: list[dict[str, Any]] = []
        for item in read.steps(self.cl.log, stream, info, from_seq=offset + 1):
            if item.seq <= offset:
                continue
            if len(rows) >= limit:
                break
            if isinstance(item, fx.Unreadable):
                rows.append({"seq": item.seq, "unreadable": str(item)})
                continue
            rows.append(
                {
                    "seq": item.seq,
                    "saved_at": item.saved_at,
                    "kind": item.kind,
                    "label": item.label,
                    "ref": item.ref,
                    "node": item.node,
                    "frame": item.frame_type,
                    "title": item.title,
                    "value": tree(item.value, depth=2),
                }
            )
        return {
            "stream": stream,
            "family": info.kind,
            "display": info.display,
            "noun": info.noun,
            "labels": info.labels,
            "total": last,
            "offset": offset,
            "rows": rows,
        }

    # -- other streams: events, and integrations in their own terms ----------------------------

    def frames(self, stream: str, offset: int, limit: int) -> dict[str, Any]:
        last = self.cl.log.last_seq(stream)
        rows = []
        for item in fx.read_frames(self.cl.log, stream, offset + 1, min(last, offset + limit)):
            if isinstance(item, fx.Unreadable):
                rows.append({"seq": item.seq, "unreadable": str(item)})
                continue
            frame = item.frame
            entry: dict[str, Any] = {"seq": item.seq, "saved_at": fx.frame_saved_at(frame)}
            if isinstance(frame, (Save, Snapshot, Tombstone)):
                entry["content"] = tree(fx.plain(fx.scan_entry(item)), depth=1)
            else:
                entry["content"] = tree(fx.plain(frame), depth=2)
            rows.append(entry)
        return {"stream": stream, "total": last, "offset": offset, "rows": rows}

    def _integration_log(self, family: str, tables: Any) -> EventLog:
        return self._logs.integration(family, tables)

    def langgraph(self, thread_id: str, ns: str, offset: int, limit: int) -> dict[str, Any]:
        """A thread's checkpoints in one namespace, newest first, each with its parent (the
        page draws the tree: forks are parents with several children) and pending writes."""
        try:
            from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415
            from eventlog.integrations.langgraph_store import TABLES  # noqa: PLC0415
        except ImportError as e:
            raise BadRequest(
                f"LangGraph is not installed ({e}); pip install 'ckptlog[langgraph]'"
            ) from e
        saver = LmdbSaver(self._integration_log("langgraph", TABLES))
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        rows = []
        newest = saver.list(config, limit=offset + limit)  # type: ignore[arg-type]
        for t in itertools.islice(newest, offset, offset + limit):
            cp = t.checkpoint
            parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
            rows.append(
                {
                    "id": cp["id"],
                    "ts": cp.get("ts"),
                    "parent_id": parent,
                    "metadata": tree(dict(t.metadata), depth=2),
                    "channels": tree(cp.get("channel_values", {}), depth=2),
                    "versions": dict(cp.get("channel_versions", {})),
                    "pending_writes": [
                        {"task_id": w[0], "channel": w[1], "value": tree(w[2], depth=2)}
                        for w in (t.pending_writes or [])[:PAGE_MAX]
                    ],
                }
            )
        return {"thread_id": thread_id, "namespace": ns, "offset": offset, "rows": rows}

    def techrevati(self, thread_id: str, offset: int, limit: int) -> dict[str, Any]:
        try:
            from eventlog.integrations.techrevati import TABLES, LogSaver  # noqa: PLC0415
        except ImportError as e:  # the framework is not installed: its view reads the frames
            out = self._from_steps(thread_id, "techrevati", offset, limit, f"{e}")
            return {"thread_id": thread_id, **out}
        saver = LogSaver(self._integration_log("techrevati", TABLES))
        rows = []
        for h in itertools.islice(saver.history(thread_id), offset, offset + limit):
            item = h.checkpoint if h.checkpoint is not None else h.step
            rows.append({"seq": h.seq, "kind": h.kind, "at": h.at, "value": tree(_plain(item))})
        return {"thread_id": thread_id, "offset": offset, "rows": rows}

    def _from_steps(
        self, name: str, kind: str, offset: int, limit: int, why: str
    ) -> dict[str, Any]:
        """An integration's history from its view's steps, when the framework that the
        integration's own history API needs is missing: each frame with the stream as of it
        (the same values ``ckptlog show`` prints)."""
        found = read.find(self.cl.log, name, kind=kind)
        if found is None:
            raise BadRequest(f"no {kind} stream {name!r} in the log; pick one from the list")
        readable = (s for s in read.steps(self.cl.log, *found) if not isinstance(s, fx.Unreadable))
        rows = [
            {"seq": s.seq, "kind": s.kind, "at": s.saved_at, "value": tree(s.value)}
            for s in itertools.islice(readable, offset, offset + limit)
        ]
        return {"offset": offset, "rows": rows, "from_frames": why}

    def apflow(self, task_id: str, offset: int, limit: int) -> dict[str, Any]:
        try:
            from eventlog.integrations.apflow import TABLES, LogCheckpointManager  # noqa: PLC0415
        except ImportError as e:
            raise BadRequest(f"apflow is not installed ({e}); pip install 'ckptlog[apflow]'") from e
        manager = LogCheckpointManager(log=self._integration_log("apflow", TABLES))
        rows = [
            {
                "seq": a.seq,
                "kind": a.kind,
                "at": a.at,
                "checkpoint_id": a.checkpoint_id,
                "step_name": a.step_name,
                "attempt": a.attempt,
                "n": a.n,
                "data": tree(a.data),
            }
            for a in manager.history(task_id)[offset : offset + limit]
        ]
        return {"task_id": task_id, "offset": offset, "rows": rows}


def _plain(obj: Any) -> Any:
    """An integration's own object (dataclass, pydantic model, Struct) as plain data."""
    if obj is None or isinstance(obj, (str, int, float, bool, list, dict, tuple)):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses  # noqa: PLC0415

        return dataclasses.asdict(obj)
    if isinstance(obj, msgspec.Struct):
        return fx.plain(obj)
    return repr(obj)
