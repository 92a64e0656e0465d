"""The read side: one query layer that returns data, which the ``ckptlog`` command line
(eventlog.cli) and the web viewer (eventlog.viewer) both use.

- :mod:`~eventlog.read.opening`: open a log read-only, with its chain key;
- :mod:`~eventlog.read.streams`: what a stream is (through the view registry,
  eventlog.views), which one a user means, its steps (eventlog.streams.Step: one row per
  frame for every kind of stream) and the listing of a log's streams with one status rule;
- :mod:`~eventlog.read.diffs`: structured diffs (value changes, RFC 6902, text lines) and
  value paths;
- :mod:`~eventlog.read.values`: big values as a lazily expanded tree;
- :mod:`~eventlog.read.timeline`: a checkpoint invocation's timeline, indexed incrementally;
- :mod:`~eventlog.read.text`: times and values as text;
- :mod:`~eventlog.read.saves`: one row per frame from the frame alone (:class:`Saved`);
- :mod:`~eventlog.read.tail`: every frame as it is committed, by any process (:func:`tail`);
- :mod:`~eventlog.read.tables`: the history as column batches (saves, frames, instances,
  LangGraph checkpoints and writes, events); :mod:`~eventlog.read.parquet` writes them as
  Parquet and queries them with DuckDB (the ``sql`` extra, imported only when used).

Invariants:
- No argument parsing, HTTP or colour here (a face passes its colours in); nothing here
  imports eventlog.cli or eventlog.viewer (tests/test_imports.py).
- Read-only: nothing here writes to a log.
"""

from __future__ import annotations

from eventlog.read.opening import Opened, open_log
from eventlog.read.saves import Saved
from eventlog.read.streams import (
    Listed,
    describe,
    find,
    listing,
    seq_as_of,
    status_of,
    step_at,
    steps,
)
from eventlog.read.tail import tail
from eventlog.streams import Step, StreamInfo

__all__ = [
    "Listed",
    "Opened",
    "Saved",
    "Step",
    "StreamInfo",
    "describe",
    "find",
    "listing",
    "open_log",
    "seq_as_of",
    "status_of",
    "step_at",
    "steps",
    "tail",
]
