"""``ckptlog serve``: a local, read-only web viewer for a log's history.

One page (``eventlog/viewer/``: plain HTML, JS and CSS shipped in the package, no CDN, no
build step) over a small JSON API, served by the standard library's ``ThreadingHTTPServer``.
Everything is read through the read-only forensics API: ``CheckpointLog.open(path,
readonly=True)`` (via ``forensics.open_readonly``), its methods and ``eventlog.forensics``;
LangGraph, techrevati and apflow streams through their integrations' own read APIs.

Invariants:
- The log is opened read-only and never written; LMDB readers never block the writer, so a
  process appending to the log carries on while the page polls (``/api/changes``).
- Every list endpoint is paginated (``offset``, ``limit`` <= ``PAGE_MAX``) and every series is
  binned (``bins`` <= ``BINS_MAX``): a response is bounded whatever the log holds. A
  timeline is indexed incrementally (``INDEX_BUDGET_S`` of frames per request, resumed by the
  next), so the page stays responsive while a long stream is indexed.
- Requests whose ``Host`` header is not the bound address are refused (DNS rebinding); with a
  token, every request must carry it (``?token=`` once, then a cookie). Binding a non-loopback
  address requires a token.
- The page renders every id and value as text (``textContent``, never HTML), and the
  Content-Security-Policy forbids inline scripts.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import heapq
import hmac
import http.server
import importlib.resources
import ipaddress
import itertools
import json
import math
import sys
import threading
import time
import urllib.parse
from array import array
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import IO, Any, Final

import msgspec

from eventlog import forensics as fx
from eventlog.checkpoints import CheckpointLog
from eventlog.cli_render import Style
from eventlog.errors import CheckpointError
from eventlog.frames import Save, Snapshot, Tombstone
from eventlog.log import EventLog, Problem
from eventlog.records import CheckpointRecord, FanOutInstanceProgress

PAGE_MAX: Final = 500  # rows a list endpoint returns at most
BINS_MAX: Final = 2000  # points a binned series returns at most
INDEX_BUDGET_S: Final = 0.4  # seconds of frame indexing one timeline request spends at most
PAUSES_MAX: Final = 20  # longest pauses kept per timeline
PAUSE_MIN_S: Final = 0.1  # a shorter gap between saves is never marked as a pause
PAUSE_FACTOR: Final = 10  # ... nor one shorter than this many times the median gap
CONTAINER_ITEMS: Final = 100  # items of a dict or list the state tree sends per request
TREE_DEPTH: Final = 4  # levels of the state tree sent at once (deeper: fetched on click)
STRING_CHARS: Final = 4000  # characters of a string value sent
RECORD_CACHE: Final = 3  # records (at a seq) kept decoded for the instance grid
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
TOKEN_COOKIE: Final = "ckptlog_token"
STATIC: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

# Instance state codes in the grid and the timeline index.
NOT_STARTED, IN_FLIGHT, DONE, FAILED = 0, 1, 2, 3
_STREAM_FAMILIES: Final = (
    ("lg:", "langgraph"),
    ("techrevati:", "techrevati"),
    ("apflow:", "apflow"),
)


class ServeError(CheckpointError):
    """``ckptlog serve`` cannot start as asked (bad host, a public bind without a token)."""


class BadRequest(CheckpointError, ValueError):
    """A request the API cannot answer: a missing or malformed parameter, an unknown id."""


def _code(inst: FanOutInstanceProgress) -> int:
    if inst.state == "completed":
        return FAILED if inst.result_is_error else DONE
    return IN_FLIGHT if inst.state == "in_flight" else NOT_STARTED


def family_of(stream: str) -> str:
    """Which integration wrote ``stream``: ``langgraph``, ``techrevati``, ``apflow`` or
    ``checkpoint`` (ckptlog's own records, and application event streams)."""
    for prefix, name in _STREAM_FAMILIES:
        if stream.startswith(prefix):
            return name
    return "checkpoint"


# -- values as a lazily expanded tree ------------------------------------------------------------


def tree(value: Any, depth: int = TREE_DEPTH, offset: int = 0) -> dict[str, Any]:
    """``value`` as a typed node for the page's collapsible tree: containers list at most
    ``CONTAINER_ITEMS`` items from ``offset`` (``n`` is their size) and stop ``depth`` levels
    down (``t: "more"``: fetch that path to expand it); strings are cut at ``STRING_CHARS``."""
    if isinstance(value, msgspec.Struct):
        value = fx.plain(value)
    if isinstance(value, dict):
        if depth <= 0:
            return {"t": "more", "kind": "dict", "n": len(value)}
        items = itertools.islice(value.items(), offset, offset + CONTAINER_ITEMS)
        return {
            "t": "dict",
            "n": len(value),
            "offset": offset,
            "items": [[k if isinstance(k, str) else repr(k), tree(v, depth - 1)] for k, v in items],
        }
    if isinstance(value, (list, tuple)):
        if depth <= 0:
            return {"t": "more", "kind": "list", "n": len(value)}
        part = value[offset : offset + CONTAINER_ITEMS]
        return {
            "t": "list",
            "n": len(value),
            "offset": offset,
            "items": [tree(v, depth - 1) for v in part],
        }
    if isinstance(value, str):
        return {"t": "str", "v": value[:STRING_CHARS], "n": len(value)}
    if isinstance(value, bytes):
        return {"t": "bytes", "v": value[: STRING_CHARS // 2].hex(), "n": len(value)}
    if isinstance(value, bool) or value is None:
        return {"t": "lit", "v": value}
    if isinstance(value, int):
        return {"t": "num", "v": str(value)}  # exact, whatever its size
    if isinstance(value, float):
        return {"t": "num", "v": repr(value)}
    return {"t": "str", "v": repr(value)[:STRING_CHARS], "n": len(repr(value))}


def subvalue(value: Any, path: list[Any]) -> Any:
    """The part of ``value`` at ``path`` (keys of dicts as the tree shows them, list indices)."""
    for key in path:
        if isinstance(value, msgspec.Struct):
            value = fx.plain(value)
        if isinstance(value, dict):
            match = [v for k, v in value.items() if (k if isinstance(k, str) else repr(k)) == key]
            if not match:
                raise BadRequest(f"no key {key!r} at that path of the value; reload the tree")
            value = match[0]
        elif isinstance(value, (list, tuple)) and isinstance(key, int) and 0 <= key < len(value):
            value = value[key]
        else:
            raise BadRequest(f"path element {key!r} does not exist in the value; reload the tree")
    return value


# -- the timeline index of one invocation ---------------------------------------------------------


class _FanIndex:
    """One fan-out's instances over time: each change in save order with its own time (a
    batch's ``instance_saved_at``), and cumulative counts after it."""

    def __init__(self, key: tuple[Any, ...], count: int) -> None:
        self.key = key
        self.count = count
        self.codes = bytearray(count)
        self.done = 0  # completed, errors included
        self.failed = 0
        self.in_flight = 0
        self.t = array("d")  # running max of change times (so bisect works on any clock)
        self.cum_done = array("l")
        self.cum_failed = array("l")
        self.cum_in_flight = array("l")
        self.failures: list[tuple[float, int, int]] = []  # (time, index, seq) in order

    def label(self) -> dict[str, Any]:
        name, ns, lineage = self.key
        return {
            "name": name,
            "namespace": list(ns),
            "lineage": [fx.plain(e) for e in lineage],
            "count": self.count,
        }

    def change(self, index: int, new: int, t: float, seq: int) -> None:
        if not 0 <= index < self.count:
            return  # the log validated it; a damaged frame is verify's to report
        old = self.codes[index]
        self.codes[index] = new
        self._count(old, -1)
        self._count(new, 1)
        if new == FAILED and old != FAILED:
            self.failures.append((t, index, seq))
        self._point(t)

    def _count(self, code: int, sign: int) -> None:
        if code == IN_FLIGHT:
            self.in_flight += sign
        elif code >= DONE:
            self.done += sign
            if code == FAILED:
                self.failed += sign

    def _point(self, t: float) -> None:
        last = self.t[-1] if self.t else -math.inf
        self.t.append(t if t > last else last)
        self.cum_done.append(self.done)
        self.cum_failed.append(self.failed)
        self.cum_in_flight.append(self.in_flight)

    def reset(self, codes: bytearray, t: float) -> None:
        """The full state a snapshot holds (after its batch's changes were applied)."""
        if codes == self.codes:
            return
        self.codes = codes
        self.in_flight = codes.count(IN_FLIGHT)
        self.failed = codes.count(FAILED)
        self.done = codes.count(DONE) + self.failed
        self._point(t)

    def at(self, t: float) -> tuple[int, int, int]:
        """``(done, failed, in_flight)`` after the last change at or before ``t``."""
        i = bisect.bisect_right(self.t, t) - 1
        if i < 0:
            return 0, 0, 0
        return self.cum_done[i], self.cum_failed[i], self.cum_in_flight[i]


class Timeline:
    """Every frame of one stream: time, kind, failures, pauses, and each fan-out's instance
    changes; extended as the stream grows, at most ``budget`` seconds per call."""

    KINDS: Final = ("save", "fan_out_internal", "fan_out_in_flight_failure", "delete", "event")

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.times = array("d")  # saved_at of seq i + 1
        self.kinds = bytearray()
        self.fail_seqs: list[int] = []
        self.unreadable: list[dict[str, Any]] = []
        self.pauses: list[tuple[float, int]] = []  # min-heap of (gap seconds, seq after it)
        self.fans: dict[tuple[Any, ...], _FanIndex] = {}
        self.by_fid: dict[int, _FanIndex] = {}

    @property
    def indexed(self) -> int:
        return len(self.times)

    def extend(self, log: EventLog, budget: float) -> None:
        deadline = time.monotonic() + budget
        with self.lock:
            for n, item in enumerate(fx.read_frames(log, self.stream, self.indexed + 1)):
                if isinstance(item, fx.Unreadable):
                    self.unreadable.append(msgspec.to_builtins(item))
                    if item.problem != "chain":  # (a frame that does not chain is still read)
                        for seq in range(item.seq, item.last_seq + 1):  # keep seqs aligned
                            self._frame(seq, self.times[-1] if self.times else 0.0, "event")
                    continue
                self._add(item.seq, item.frame)
                if n % 256 == 255 and time.monotonic() > deadline:
                    return

    def _frame(self, seq: int, t: float, kind: str) -> None:
        if self.times:
            gap = t - self.times[-1]
            if len(self.pauses) < PAUSES_MAX:
                heapq.heappush(self.pauses, (gap, seq))
            elif gap > self.pauses[0][0]:
                heapq.heapreplace(self.pauses, (gap, seq))
        self.times.append(t)
        self.kinds.append(self.KINDS.index(kind) if kind in self.KINDS else 0)
        if kind == "fan_out_in_flight_failure":
            self.fail_seqs.append(seq)

    def _add(self, seq: int, frame: Any) -> None:
        t = fx.frame_saved_at(frame)
        failed_before = sum(f.failed for f in self.fans.values())
        if isinstance(frame, Save):
            if frame.layout is not None:
                self._layout(frame.layout)
            times = frame.instance_saved_at
            for j, ch in enumerate(frame.instances):
                fan = self.by_fid.get(ch.fid)
                if fan is not None:
                    when = times[j] if j < len(times) else t
                    fan.change(ch.index, _code(ch.progress), when, seq)
            kind = frame.kind
        elif isinstance(frame, Snapshot):
            self._layout(frame.layout)
            for j, ch in enumerate(frame.batch):
                fan = self.by_fid.get(ch.fid)
                if fan is not None:
                    when = frame.instance_saved_at[j] if j < len(frame.instance_saved_at) else t
                    fan.change(ch.index, _code(ch.progress), when, seq)
            full = {fid: bytearray(f.count) for fid, f in self.by_fid.items()}
            for ch in frame.instances:
                codes = full.get(ch.fid)
                if codes is not None and 0 <= ch.index < len(codes):
                    codes[ch.index] = _code(ch.progress)
            for fid, codes in full.items():
                self.by_fid[fid].reset(codes, t)
            kind = frame.kind
        elif isinstance(frame, Tombstone):
            kind = "delete"
        else:
            kind = "event"
        self._frame(seq, t, kind)
        if kind != "fan_out_in_flight_failure" and (
            sum(f.failed for f in self.fans.values()) > failed_before
        ):
            self.fail_seqs.append(seq)

    def _layout(self, layout: Any) -> None:
        self.by_fid = {}
        for hd in layout:
            key = (hd.fan_out_node_name, tuple(hd.namespace), tuple(hd.lineage))
            fan = self.fans.get(key)
            if fan is None or fan.count != hd.instance_count:
                fan = _FanIndex(key, hd.instance_count)
                self.fans[key] = fan
            self.by_fid[hd.fid] = fan

    def bins(self, lo: int, hi: int, count: int) -> dict[str, Any]:
        """Seqs ``lo..hi`` in ``count`` bins of equal seq width: each bin's seqs, first and
        last time, failures, and every fan-out's counts at its last time."""
        with self.lock:
            n = self.indexed
            hi = min(hi, n)
            lo = max(1, min(lo, hi))
            out: list[dict[str, Any]] = []
            if n:
                width = max(1, -(-(hi - lo + 1) // count))
                for a in range(lo, hi + 1, width):
                    b = min(hi, a + width - 1)
                    t_last = self.times[b - 1]
                    fails = bisect.bisect_right(self.fail_seqs, b) - bisect.bisect_left(
                        self.fail_seqs, a
                    )
                    fans = []
                    for fan in self.fans.values():
                        done, failed, flight = fan.at(t_last)
                        fans.append([done - failed, failed, fan.count - done, flight])
                    out.append(
                        {
                            "lo": a,
                            "hi": b,
                            "t0": self.times[a - 1],
                            "t1": t_last,
                            "failures": fails,
                            "fan_outs": fans,
                        }
                    )
            floor = max(PAUSE_MIN_S, PAUSE_FACTOR * self._typical_gap())
            pauses = sorted(
                (
                    {"seq": s, "gap": g, "t": self.times[s - 1]}
                    for g, s in self.pauses
                    if g >= floor
                ),
                key=lambda p: -p["gap"],
            )
            return {
                "indexed": n,
                "lo": lo,
                "hi": hi,
                "bins": out,
                "fan_outs": [f.label() for f in self.fans.values()],
                "pauses": pauses,
                "failure_seqs": len(self.fail_seqs),
                "failure_sample": self.fail_seqs[:50],
                "unreadable": self.unreadable[:50],
            }

    def _typical_gap(self) -> float:
        """The median gap between saves, from at most ~1,000 gaps spread over the stream."""
        n = self.indexed
        if n < 2:
            return 0.0
        step = max(1, (n - 1) // 1000)
        gaps = sorted(self.times[i] - self.times[i - 1] for i in range(1, n, step))
        return max(0.0, gaps[len(gaps) // 2])

    def fan(self, k: int) -> _FanIndex:
        fans = list(self.fans.values())
        if not 0 <= k < len(fans):
            raise BadRequest(f"fan-out {k} does not exist: this invocation has {len(fans)}")
        return fans[k]


# -- the viewer: every endpoint's answer ----------------------------------------------------------


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
        for inv in fx.invocations(self.cl, all_streams=True):
            family = family_of(inv.invocation_id)
            if inv.deleted:
                status = "deleted"
            elif inv.error_instances or inv.kind == "fan_out_in_flight_failure":
                status = "failed"
            elif inv.kind is None or family != "checkpoint":
                status = "-"
            elif inv.completed_instances < inv.fan_out_instances:
                status = "running"
            else:
                status = "completed"
            rows.append(
                {
                    "id": inv.invocation_id,
                    "family": family,
                    "correlation_id": inv.correlation_id,
                    "saves": inv.frames,
                    "last_saved_at": inv.last_saved_at,
                    "kind": inv.kind,
                    "status": status,
                    "nodes": inv.completed_nodes,
                    "instances": inv.fan_out_instances,
                    "completed": inv.completed_instances,
                    "errors": inv.error_instances,
                    **self._labels(inv.invocation_id, family),
                }
            )
        rows.sort(key=lambda r: -(r["last_saved_at"] or 0.0))  # newest first
        self._inv_cache = (frames, rows)
        return rows

    @staticmethod
    def _labels(stream: str, family: str) -> dict[str, Any]:
        """What an integration calls the stream: a LangGraph thread and namespace, a
        techrevati thread, an apflow task."""
        if family == "langgraph":
            from eventlog.integrations.langgraph_store import parse_stream_key  # noqa: PLC0415

            parsed = parse_stream_key(stream)
            if parsed is not None:
                return {"thread_id": parsed[0], "namespace": parsed[1]}
        if family == "techrevati":
            return {"thread_id": stream[len("techrevati:") :]}
        if family == "apflow":
            return {"task_id": stream[len("apflow:") :]}
        return {}

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
            report = self.cl.verify(progress)
            problems: list[Problem] = list(report.problems)
            problems.extend(self._integration_problems())
            seen: set[tuple[Any, ...]] = set()
            unique = []
            for p in problems:  # an integration's verify repeats the log's own checks
                key = (p.kind, p.stream, p.seq, p.detail)
                if key not in seen:
                    seen.add(key)
                    unique.append(p)
            problems = unique
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

    def _integration_problems(self) -> list[Problem]:
        """What each integration's own verify finds (its views and head rows against its
        frames), for the integrations whose streams the log holds."""
        streams = self.cl.log.streams()
        problems: list[Problem] = []
        if any(s.startswith("lg:") for s in streams):
            from eventlog.integrations import langgraph_store  # noqa: PLC0415

            log = self._integration_log("langgraph", langgraph_store.TABLES)
            problems.extend(langgraph_store.verify_views(log))
        if any(s.startswith("techrevati:") for s in streams):
            from eventlog.integrations import techrevati  # noqa: PLC0415

            log = self._integration_log("techrevati", techrevati.TABLES)
            problems.extend(techrevati.LogSaver(log).verify().problems)
        if any(s.startswith("apflow:") for s in streams):
            from eventlog.integrations import apflow  # noqa: PLC0415

            log = self._integration_log("apflow", apflow.TABLES)
            problems.extend(apflow.LogCheckpointManager(log=log).verify().problems)
        return problems

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
        from eventlog import cli  # noqa: PLC0415 - cli imports this module to register serve

        changes = fx.diff(self.cl, inv, a, b)
        lines = cli.diff_lines(changes, Style(False), full=True) or ["  (no changes)"]
        return {
            "invocation_id": inv,
            "from_seq": a,
            "to_seq": b,
            "total": len(lines),
            "offset": offset,
            "lines": lines[offset : offset + limit],
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
        for t in itertools.islice(saver.list(config), offset, offset + limit):  # type: ignore[arg-type]
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
        except ImportError as e:
            raise BadRequest(
                f"techrevati is not installed ({e}); pip install 'ckptlog[techrevati]'"
            ) from e
        saver = LogSaver(self._integration_log("techrevati", TABLES))
        rows = []
        for h in itertools.islice(saver.history(thread_id), offset, offset + limit):
            item = h.checkpoint if h.checkpoint is not None else h.step
            rows.append({"seq": h.seq, "kind": h.kind, "at": h.at, "value": tree(_plain(item))})
        return {"thread_id": thread_id, "offset": offset, "rows": rows}

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


# -- HTTP -----------------------------------------------------------------------------------------

_json = msgspec.json.Encoder()


def _encode(obj: Any) -> bytes:
    try:
        return _json.encode(obj)
    except (TypeError, ValueError):
        return _json.encode(fx.json_safe(obj))


class _Args:
    """Query parameters, checked: a bad one is a 400 naming it."""

    def __init__(self, query: str) -> None:
        self.q = urllib.parse.parse_qs(query, keep_blank_values=True)

    def text(self, name: str, default: str | None = None) -> str:
        got = self.q.get(name)
        if got:
            return got[0]
        if default is None:
            raise BadRequest(f"parameter {name!r} is required")
        return default

    def number(
        self, name: str, default: int | None = None, lo: int = 0, hi: int | None = None
    ) -> int:
        text = self.text(name, None if default is None else str(default))
        try:
            value = int(text)
        except ValueError:
            raise BadRequest(f"parameter {name!r} must be an integer, got {text!r}") from None
        if value < lo:
            raise BadRequest(f"parameter {name!r} must be >= {lo}, got {value}")
        return value if hi is None else min(value, hi)

    def path(self, name: str) -> list[Any]:
        text = self.text(name, "[]")
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, list):
            raise BadRequest(f"parameter {name!r} must be a JSON list of keys, got {text!r}")
        return value


def _routes(v: Viewer) -> dict[str, Callable[[_Args], Any]]:
    def page(a: _Args) -> tuple[int, int]:
        return a.number("offset", 0), a.number("limit", 100, lo=1, hi=PAGE_MAX)

    return {
        "/api/info": lambda a: {"path": v.path, "version": _version(), "problems": v.problems},
        "/api/changes": lambda a: v.changes(),
        "/api/invocations": lambda a: v.invocations(
            a.text("q", ""), a.text("status", ""), a.text("family", ""), *page(a)
        ),
        "/api/timeline": lambda a: v.timeline(
            a.text("id"),
            a.number("lo", 1),
            a.number("hi", 0),
            a.number("bins", 400, lo=1, hi=BINS_MAX),
        ),
        "/api/record": lambda a: v.record(a.text("id"), a.number("seq")),
        "/api/value": lambda a: v.value(
            a.text("id"),
            a.number("seq"),
            a.text("what", "state"),
            a.path("path"),
            a.number("offset", 0),
        ),
        "/api/instances": lambda a: v.instances(
            a.text("id"),
            a.number("seq"),
            a.number("fan", 0),
            a.number("lo", 0),
            a.number("hi", 0),
            a.number("bins", 1000, lo=1, hi=BINS_MAX),
        ),
        "/api/instance": lambda a: v.instance(
            a.text("id"), a.number("seq"), a.number("fan", 0), a.number("index")
        ),
        "/api/failures": lambda a: v.failures(a.text("id"), a.number("fan", 0), *page(a)),
        "/api/diff": lambda a: v.diff(a.text("id"), a.number("a"), a.number("b"), *page(a)),
        "/api/frames": lambda a: v.frames(a.text("id"), *page(a)),
        "/api/langgraph": lambda a: v.langgraph(a.text("thread"), a.text("ns", ""), *page(a)),
        "/api/techrevati": lambda a: v.techrevati(a.text("thread"), *page(a)),
        "/api/apflow": lambda a: v.apflow(a.text("task"), *page(a)),
        "/api/stats": lambda a: v.stats(),
        "/api/verify": lambda a: v.verify(a.text("start", "0") == "1"),
    }


def _version() -> str:
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version("ckptlog")
    except Exception:  # noqa: BLE001 - a source checkout without metadata
        return "dev"


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """``Host`` header values accepted for a server bound to ``host:port`` (``None``: any,
    for a wildcard bind, which requires a token instead)."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {host}
    try:
        if ipaddress.ip_address(host).is_loopback:
            names |= {"localhost", "127.0.0.1", "::1"}
    except ValueError:
        if host == "localhost":
            names |= {"127.0.0.1", "::1"}
    out = set()
    for name in names:
        shown = f"[{name}]" if ":" in name else name
        out |= {f"{shown}:{port}".lower()}
        if port == 80:
            out.add(shown.lower())
    return frozenset(out)


class ViewerServer(http.server.ThreadingHTTPServer):
    """The HTTP server of :class:`Viewer`; ``port`` 0 picks a free one (see ``url``)."""

    daemon_threads = True

    def __init__(self, viewer: Viewer, host: str, port: int, token: str | None) -> None:
        self.viewer = viewer
        self.token = token
        self.routes = _routes(viewer)
        if ":" in host:
            self.address_family = __import__("socket").AF_INET6
        super().__init__((host, port), _Handler)
        self.host = host
        self.port = int(self.server_address[1])
        self.hosts = allowed_hosts(host, self.port)

    @property
    def url(self) -> str:
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        shown = f"[{shown}]" if ":" in shown else shown
        return f"http://{shown}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()
        return thread

    def server_close(self) -> None:
        super().server_close()
        self.viewer.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the terminal shows the URL and warnings only

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def do_GET(self) -> None:
        self._handle(head=False)

    def _refuse_method(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "the viewer is read-only: GET only"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_method

    def _handle(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        srv = self.server
        host = (self.headers.get("Host") or "").strip().lower()
        if srv.hosts is not None and host not in srv.hosts:
            self._send(
                HTTPStatus.FORBIDDEN,
                {"error": f"Host {host!r} is not the address this viewer is bound to; open "
                          f"{srv.url}"},
            )  # fmt: skip
            return
        args = _Args(url.query)
        cookie_token = None
        if srv.token is not None:
            given = args.q.get("token", [None])[0]
            cookies = self.headers.get("Cookie") or ""
            for part in cookies.split(";"):
                name, _, value = part.strip().partition("=")
                if name == TOKEN_COOKIE:
                    cookie_token = value
            ok = any(
                t is not None and hmac.compare_digest(t.encode(), srv.token.encode())
                for t in (given, cookie_token)
            )
            if not ok:
                message = "this viewer needs its token: open the URL it printed"
                self._send(HTTPStatus.UNAUTHORIZED, {"error": message})
                return
            # A token given in the URL is set as a cookie, so the page's requests carry it.
            fresh = given is not None and cookie_token != srv.token
            cookie_token = srv.token if fresh else None
        route = url.path
        if route in ("/", "/index.html"):
            route = "/static/index.html"
        if route.startswith("/static/"):
            name = route[len("/static/") :]
            if name not in STATIC:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no such file {name!r}"})
                return
            body = (importlib.resources.files("eventlog.viewer") / name).read_bytes()
            self._reply(HTTPStatus.OK, STATIC[name], body, head, cookie_token)
            return
        fn = srv.routes.get(route)
        if fn is None:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no endpoint {route!r}"})
            return
        try:
            with srv.viewer.session():
                result = fn(args)
        except (BadRequest, fx.InvalidArgument, fx.NoSuchInvocation) as e:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(e)}, head)
            return
        except CheckpointError as e:
            self._send(HTTPStatus.UNPROCESSABLE_ENTITY, {"error": f"{type(e).__name__}: {e}"})
            return
        except Exception as e:  # noqa: BLE001 - the page shows it; the server carries on
            message = f"internal error ({type(e).__name__}: {e}); please report it"
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": message})
            return
        self._send(HTTPStatus.OK, result, head, cookie_token)

    def _send(self, status: int, obj: Any, head: bool = False, cookie: str | None = None) -> None:
        self._reply(status, "application/json", _encode(obj), head, cookie)

    def _reply(
        self, status: int, ctype: str, body: bytes, head: bool, cookie: str | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        if cookie is not None:
            self.send_header(
                "Set-Cookie", f"{TOKEN_COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict"
            )
        self.end_headers()
        if not head:
            self.wfile.write(body)


# -- starting it ----------------------------------------------------------------------------------


def make_server(
    path: str,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    warn: Callable[[str], None] | None = None,
    **options: Any,
) -> ViewerServer:
    """A viewer of the log at ``path`` bound to ``host:port`` (not yet serving: call
    ``serve_forever`` or ``serve_in_thread``). A non-loopback ``host`` needs a ``token``."""
    if token is not None and (not token or not token.isascii() or not token.isprintable()):
        raise ServeError("--token must be non-empty printable ASCII; pick a long random one")
    if not _loopback(host):
        if token is None:
            raise ServeError(
                f"--host {host} serves the log to other machines: give --token SECRET as well "
                "(the page then needs ?token=SECRET), or keep the default --host 127.0.0.1"
            )
        if warn is not None:
            warn(
                f"serving on {host}: anyone who can reach port {port} of this machine and knows "
                "the token can read the whole log"
            )
    viewer = Viewer(path, **options)
    try:
        return ViewerServer(viewer, host, port, token)
    except BaseException:
        viewer.close()
        raise


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``ckptlog serve``'s own options (PATH and the common ones come from the CLI)."""
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any")
    p.add_argument("--host", default=DEFAULT_HOST, help="the address to bind (default 127.0.0.1)")
    p.add_argument(
        "--token",
        metavar="SECRET",
        help="require ?token=SECRET (then a cookie); needed for a non-loopback --host",
    )


def run(
    args: argparse.Namespace,
    out: IO[str],
    err: IO[str],
    *,
    ready: Callable[[str], None] | None = None,
) -> int:
    """Serve until interrupted (what ``ckptlog serve`` runs)."""
    options: dict[str, Any] = {}
    key_file = getattr(args, "chain_key_file", None)
    if key_file:
        with open(key_file, "rb") as f:
            options["chain_key"] = f.read()

    def warn(message: str) -> None:
        err.write(f"ckptlog: warning: {message}\n")
        err.flush()

    server = make_server(
        args.path, host=args.host, port=args.port, token=args.token, warn=warn, **options
    )
    for p in server.viewer.problems:
        warn(str(p.get("detail", p)))
    out.write(f"ckptlog: serving {args.path} read-only at {server.url}  (Ctrl-C stops)\n")
    out.flush()
    if ready is not None:
        ready(server.url)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m eventlog.serve PATH [--host H] [--port N] [--token T]``."""
    p = argparse.ArgumentParser(prog="python -m eventlog.serve", description=__doc__.split("\n")[0])
    p.add_argument("path", metavar="PATH")
    p.add_argument("--chain-key-file", metavar="FILE")
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        return 130
    except (CheckpointError, OSError) as e:
        sys.stderr.write(f"ckptlog: error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
