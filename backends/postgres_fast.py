"""A write transaction's one round trip, sent through libpq's pipeline directly.

A write transaction that runs on what its process knows (``backends.postgres._Known``) and
appended a row sends, at its end, ``BEGIN``, the writers' lock, its one statement of assertions
and writes (:mod:`backends.postgres_batch`), ``COMMIT`` and (``fsync``) the flush: all at once.
Through psycopg's pipeline each of those statements cost the client ~70 us of CPU (a cursor,
its query conversion, and a flush of the socket and a poll per statement); a LangGraph step is
two such transactions, so that was a third of the step's client CPU. :class:`RawPipeline`
sends the same statements, prepared by name once per connection, with one flush, and reads the
results back in one wait: the same protocol messages, without psycopg's per-statement work.

Statements are prepared in the same pipeline as their first execution (no round trip of their
own); a name is kept only once the server answered its ``Parse``. Names are this module's
(``ckptlog_<n>``), never psycopg's; ``DEALLOCATE ALL`` (after a stale transaction's rollback)
empties both (:meth:`RawPipeline.forget`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors, generators, pq
from psycopg.waiting import Wait

from backends.postgres_batch import STATEMENTS_CACHED_MAX, param_types

_PLACEHOLDER = re.compile(r"%b")
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_WAIT_R = Wait.R


def numbered(text: str) -> bytes:
    """``text`` with psycopg's ``%b`` placeholders as ``$1``, ``$2`` ... (the statements sent
    here hold no other ``%``)."""
    n = iter(range(1, 1 << 16))
    return _PLACEHOLDER.sub(lambda _: f"${next(n)}", text).encode()


def _results(pgconn: Any, out: list[pq.abc.PGresult]) -> Any:
    """Flush what is queued, then collect in ``out`` every result up to the pipeline's sync (a
    generator for ``Connection.wait``): one per statement or ``Parse``, its error included.
    What came before a failure of the connection stays in ``out``.

    The results are read as psycopg's ``fetch`` reads one (wait until readable, consume the
    input until a result is complete, take it), but in one loop for all of them: a ``fetch``
    generator per result (two per statement, with the empty result ending each) was most of
    this generator's cost."""
    yield from generators.send(pgconn)
    busy = pgconn.is_busy
    while True:
        if busy():
            while not (yield _WAIT_R):
                continue
            while True:
                pgconn.consume_input()
                if not busy():
                    break
                while not (yield _WAIT_R):
                    continue
            while pgconn.notifies() is not None:  # none are asked for on this connection
                continue
        r = pgconn.get_result()
        if r is None:
            continue
        if r.status == _SYNC:
            return
        out.append(r)


class RawPipeline:
    """The statements this backend sends through libpq's pipeline on one write connection."""

    __slots__ = ("conn", "names", "serial")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.names: dict[str, bytes] = {}  # statement text -> its prepared name
        self.serial = 0  # names are never reused on a connection

    def forget(self) -> None:
        """The server's prepared statements are gone (``DEALLOCATE ALL``)."""
        self.names.clear()

    def run(
        self,
        statements: Sequence[tuple[str, Sequence[bytes | None] | None]],
        out: list[pq.abc.PGresult | None],
    ) -> None:
        """Send ``statements`` ((text, parameters)) in one pipeline; ``out`` gets each one's
        result (a statement's error is its result, status ``FATAL_ERROR``, the later ones'
        ``PIPELINE_ABORTED``). Raises :class:`psycopg.OperationalError` when the connection
        fails, ``out`` holding the results that came before."""
        conn = self.conn
        pgconn = conn.pgconn
        names = self.names
        closed = len(names) if len(names) >= STATEMENTS_CACHED_MAX else 0
        send = pgconn.send_query_prepared
        pgconn.enter_pipeline_mode()
        try:
            if closed:
                for old in names.values():
                    pgconn.send_close_prepared(old)
                names.clear()
            # per statement: the name prepared in this pipeline (or None), and whether its
            # Parse was sent
            parsed: list[tuple[str, bytes] | None] = []
            pending: dict[str, bytes] = {}
            for text, params in statements:
                name: bytes | None = names.get(text) or pending.get(text)
                fresh = None
                if name is None:
                    self.serial += 1
                    name = b"ckptlog_%d" % self.serial
                    pgconn.send_prepare(name, numbered(text), param_types(text) or None)
                    pending[text] = name
                    fresh = (text, name)
                parsed.append(fresh)
                # positional: the binding's keyword parsing cost more than the call's work
                if params:
                    send(name, params, [1] * len(params), 1)
                else:
                    send(name, None, None, 1)
            pgconn.pipeline_sync()
            got: list[pq.abc.PGresult] = []
            try:
                conn.wait(_results(pgconn, got))
            finally:
                it = iter(got[closed:])
                for fresh in parsed:
                    if fresh is not None:
                        prep = next(it, None)
                        if prep is not None and prep.status in _OK:
                            names[fresh[0]] = fresh[1]
                    r = next(it, None)
                    if r is None:
                        break
                    out.append(r)
        finally:
            try:
                pgconn.exit_pipeline_mode()
            except psycopg.Error:
                names.clear()  # the connection is dropped by the caller


def error_of(result: pq.abc.PGresult | None, conn: psycopg.Connection[Any]) -> psycopg.Error:
    """The exception psycopg raises for ``result`` (a failed or aborted statement)."""
    if result is None or result.status == pq.ExecStatus.PIPELINE_ABORTED:
        return errors.PipelineAborted("pipeline aborted")
    return errors.error_from_result(result, encoding=conn.pgconn._encoding)


def failed(results: list[pq.abc.PGresult | None], sent: int) -> int | None:
    """The index of the first of ``sent`` statements that did not succeed, or ``None``."""
    for i, r in enumerate(results):
        if r is None or r.status not in _OK:
            return i
    return None if len(results) >= sent else len(results)
