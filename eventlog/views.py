"""Materialized views: the protocol every view implements, and the registry that composes them.

A view owns some tables and keeps rows derived from the frames of the streams it claims. The
frames are the truth; a view's rows are a cache of their fold, written in the transaction that
appends each frame. Four views are registered (:data:`REGISTRY`): the checkpoint record
(eventlog.checkpoint_view), LangGraph (eventlog.integrations.langgraph_store), apflow and
techrevati (eventlog.integrations.apflow / techrevati_store, on the shared headed-event-store
base eventlog.integrations.headed). None imports a framework.

The read side asks the view that owns a stream what it is (:meth:`View.describe`) and walks
its frames as rows (:meth:`View.steps`, eventlog.streams.Step), so the command line and the
web viewer show a new kind of stream with no change outside the view's own module;
:func:`register` adds a view (before the checkpoint view, which claims last).

Generic operations iterate the registry instead of knowing each view: :func:`rebuild`
(recreate every view's rows from the log alone), :func:`verify` (every view against the fold of
its streams), and compaction (eventlog.forensics.compact: a stream a view other than the
checkpoint view claims is copied whole, its rows written by :meth:`View.apply`).

Invariants:
- A stream belongs to the first registered view that claims it (judged by its key and first
  frame); the checkpoint view is last and claims only streams that start with a save, snapshot
  or tombstone. A stream no view claims (application events) has no rows.
- ``rebuild`` runs in one write transaction: every view's tables are emptied and written again
  from the frames, so it ends with all views rebuilt or none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from backends.base import ReadTxn, WriteTxn
from eventlog.checkpoint_view import VIEW as CHECKPOINTS
from eventlog.errors import CheckpointError, CorruptFrame
from eventlog.fork_links import check_links
from eventlog.integrations.apflow import VIEW as APFLOW
from eventlog.integrations.langgraph_store import VIEW as LANGGRAPH
from eventlog.integrations.techrevati_store import VIEW as TECHREVATI
from eventlog.layout import LOG, STREAM_NAMES, STREAMS, U64, U64X2
from eventlog.log import EventLog, StoredFrame
from eventlog.reports import Problem, VerifyReport
from eventlog.streams import Step, StreamInfo

if TYPE_CHECKING:
    from eventlog.walker import Unreadable

__all__ = [
    "APFLOW",
    "CHECKPOINTS",
    "LANGGRAPH",
    "REGISTRY",
    "TECHREVATI",
    "View",
    "claiming",
    "describe",
    "present",
    "rebuild",
    "register",
    "unregister",
    "verify",
    "verify_log",
]


class View(Protocol):
    """A materialized view of the log."""

    @property
    def name(self) -> str:
        """Short name, used in messages and ``ckptlog`` output."""

    @property
    def tables(self) -> tuple[str, ...]:
        """The tables it owns: it alone writes them, and nothing else reads their keys."""

    def claims(self, stream: str, first: Any) -> bool:
        """Whether the stream ``stream``, whose first frame is ``first``, is this view's."""

    def apply(
        self, txn: WriteTxn, stream: str, sid: int, seq: int, frame: Any, stored_bytes: int
    ) -> None:
        """Update the rows for one committed frame of a claimed stream (stream id ``sid``),
        inside the write transaction that holds it; frames of a stream come in seq order."""

    def rebuild_stream(
        self, txn: WriteTxn, stream: str, sid: int, frames: Iterable[StoredFrame[Any]]
    ) -> None:
        """Write the rows of one claimed stream from all its frames (its rows are absent)."""

    def verify(
        self, log: EventLog, progress: Callable[[int, int], None] | None = None
    ) -> list[Problem]:
        """Every row of this view against the fold of its streams' frames; never repairs
        (``progress(done, total)``, when the view reports it)."""

    def describe(self, stream: str) -> StreamInfo | None:
        """What this view calls ``stream``, judged by its key alone (``None``: not a key this
        view writes); the read side asks the view that claims the stream."""

    def steps(
        self, log: EventLog, stream: str, *, diffs: bool = False
    ) -> Iterator[Step | Unreadable]:
        """Every frame of ``stream`` in seq order, each with the stream as of it; what cannot
        be read is yielded as :class:`~eventlog.forensics.Unreadable`, never raised
        (``diffs``: the checkpoint view also computes each frame's record diff)."""


REGISTRY: Final[list[View]] = [LANGGRAPH, APFLOW, TECHREVATI, CHECKPOINTS]
"""Every view, in the order they are asked to claim a stream (the checkpoint view last)."""


def register(view: View) -> None:
    """Add ``view`` to the registry, before the checkpoint view (a view with the same name is
    replaced). Registration is process-wide: register at import time of the view's module."""
    unregister(view.name)
    REGISTRY.insert(REGISTRY.index(CHECKPOINTS), view)


def unregister(name: str) -> None:
    """Remove the view named ``name`` (the four built-in views stay)."""
    builtin = {v.name for v in (LANGGRAPH, APFLOW, TECHREVATI, CHECKPOINTS)}
    if name in builtin:
        raise CheckpointError(f"the {name} view is built in and cannot be unregistered")
    REGISTRY[:] = [v for v in REGISTRY if v.name != name]


def describe(stream: str, first: Any, readable: bool = True) -> StreamInfo:
    """The one rule for what a stream is: the view that claims it (judged by its key and
    ``first`` frame) describes it; a stream whose first frame cannot be read goes to the
    first view that knows its key; a readable stream no view claims holds ``events``."""
    owner = claiming(stream, first) if readable else None
    if owner is not None:
        info = owner.describe(stream)
        if info is not None:
            return info
    if not readable:
        for view in REGISTRY:
            info = view.describe(stream)
            if info is not None:
                return info
    return StreamInfo(stream, "events", "events", stream, records=True)


def claiming(stream: str, first: Any, views: Iterable[View] | None = None) -> View | None:
    """The view a stream belongs to (``None``: no view keeps rows for it)."""
    for view in REGISTRY if views is None else views:
        if view.claims(stream, first):
            return view
    return None


def present(log: EventLog, views: Iterable[View] | None = None) -> list[View]:
    """The views whose tables the log holds (opened on its backend; nothing is created)."""
    return [view for view in (REGISTRY if views is None else views) if _holds(log, view.tables)]


def _holds(log: EventLog, tables: tuple[str, ...]) -> bool:
    if log.backend.add_tables(tables, create=False) != tuple(tables):
        return False
    try:  # a backend that needs tables declared, and did not say so in add_tables
        with log.backend.read() as txn:
            for table in tables:
                txn.last_key(table)
    except CheckpointError:
        return False
    return True


def _streams(txn: ReadTxn) -> list[tuple[str, int]]:
    return [
        (v.decode("utf-8", "surrogatepass"), U64.unpack(k)[0]) for k, v in txn.scan(STREAM_NAMES)
    ]


def _frames(log: EventLog, txn: ReadTxn, stream: str, sid: int) -> Iterator[StoredFrame[Any]]:
    """A stream's frames, checksums verified, read in ``txn`` (so a rebuild sees one state)."""
    for key, gkey in txn.scan_prefix(STREAMS, U64.pack(sid)):
        data = txn.get(LOG, gkey)
        if data is None:
            raise CorruptFrame(
                f"stream {stream!r}: the index names log #{U64.unpack(gkey)[0]}, which is not "
                "in the log; run verify()",
                stream=stream,
                seq=U64X2.unpack(key)[1],
            )
        env, frame = log.decode_envelope(data)
        yield StoredFrame(stream, env.seq, U64.unpack(gkey)[0], env.checksum, frame, len(data))


def rebuild(log: EventLog, views: Iterable[View] | None = None) -> dict[str, int]:
    """Recreate every view's rows from the frames alone, in one write transaction; returns
    how many streams each view now holds rows for. ``views``: those to rebuild (default:
    every registered view whose tables the log holds; a view asked for explicitly gets its
    tables created). Other processes may keep writing: the transaction excludes them. The
    rows it writes equal the fold the writers' rows already equal, so their cached heads stay
    valid; to repair damaged rows, close the writers of this process first."""
    if views is None:
        chosen = present(log)
    else:
        chosen = list(views)
        for view in chosen:
            log.backend.add_tables(view.tables, create=True)
    counts = {view.name: 0 for view in chosen}

    def write(txn: WriteTxn) -> None:
        for name in counts:
            counts[name] = 0
        for view in chosen:
            for table in view.tables:
                txn.delete_prefix(table, b"")
        for stream, sid in _streams(txn):
            frames = _frames(log, txn, stream, sid)
            first = next(frames, None)
            if first is None:
                continue
            owner = claiming(stream, first.frame)
            if owner is None or owner not in chosen:
                continue
            owner.rebuild_stream(txn, stream, sid, _chain(first, frames))
            counts[owner.name] += 1

    log.backend.run_write(write)
    return counts


def _chain(first: StoredFrame[Any], rest: Iterator[StoredFrame[Any]]) -> Iterator[StoredFrame[Any]]:
    yield first
    yield from rest


def verify(
    log: EventLog,
    views: Iterable[View] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Problem]:
    """Every present view's rows against the fold of its streams (core checks excluded)."""
    problems: list[Problem] = []
    try:
        chosen = present(log) if views is None else list(views)
    except Exception as e:  # noqa: BLE001 - a damaged environment raises the backend's errors
        return [Problem("storage", f"the tables cannot be listed ({type(e).__name__}: {e})")]
    for view in chosen:
        try:
            problems.extend(view.verify(log, progress))
        except Exception as e:  # noqa: BLE001 - a damaged B-tree raises the backend's own errors
            problems.append(
                Problem(
                    "storage",
                    f"the materialized tables of the {view.name} view cannot be walked "
                    f"({type(e).__name__}: {e})",
                )
            )
    return problems


def verify_log(
    log: EventLog,
    progress: Callable[[int, int], None] | None = None,
    rows_progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """The log's core checks (checksums, chains, seqs, index; ``progress``) plus every present
    view's rows against the fold of its streams (``rows_progress``): ``CheckpointLog.verify``
    and ``forensics.verify``. Then every fork's link to its source (eventlog.fork_links)."""
    try:
        report = log.verify(progress)
    except Exception as e:  # noqa: BLE001 - a damaged B-tree raises the backend's own errors
        report = VerifyReport()
        report.problems.append(
            Problem("storage", f"the log's pages cannot be walked ({type(e).__name__}: {e})")
        )
    report.problems.extend(verify(log, progress=rows_progress))
    try:
        report.problems.extend(check_links(log))  # forks: source frame, checksum, record
    except Exception as e:  # noqa: BLE001 - a damaged B-tree raises the backend's own errors
        report.problems.append(
            Problem("storage", f"the fork links cannot be walked ({type(e).__name__}: {e})")
        )
    return report
