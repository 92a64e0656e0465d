"""The shared checkpointer contract suite: every checkpoint store passes it unchanged.

Subclass :class:`CheckpointLogContract` (sync) or :class:`CheckpointerContract` (async) in a
``Test*`` class and implement ``make_log`` / ``make_checkpointer``; pytest then runs every
``test_*`` method here against that store. The methods pin the semantics listed in
:mod:`eventlog.checkpoints` (openarmature spec §10, 0.17), so a store is done when it passes them.

Invariants the suite relies on:
- ``make_log(tmp_path, **kw)`` / ``make_checkpointer(tmp_path, **kw)`` accept
  ``batching=FanOutInternalSaveBatching(...)`` and return an empty store the first time; called
  again with the same ``tmp_path`` after ``close()`` they reopen the same store when the class
  says ``persistent = True`` (reopen tests are skipped otherwise).
- Each test opens one store at a time per ``tmp_path`` (LMDB refuses a second environment on the
  same path in one process) and closes every store it opened, even when it fails.
- States saved here are JSON-like (dict/list/str/int/float/bool/None), because tuples in a state
  come back as lists; every sequence *of the record* comes back as a tuple.
- Random inputs come from ``random.Random(seed)`` with the seed in the test (STYLE §10).
"""

from __future__ import annotations

from eventlog.records import NOT_STARTED
from eventlog.testing.async_contract import Body, CheckpointerContract
from eventlog.testing.helpers import (
    BATCH_EVERY,
    NS,
    UNENCODABLE_STATE_PATH,
    Opener,
    asave_kind,
    assert_history_consistent,
    assert_tuples,
    done,
    fan_out,
    fan_out_script,
    in_flight,
    incompressible,
    make_record,
    pos,
    rich_record,
    save_kind,
    summary_of,
    with_instance,
)
from eventlog.testing.log_history import HistoryContract
from eventlog.testing.log_saves import SavesContract


class CheckpointLogContract(SavesContract, HistoryContract):
    """The :class:`CheckpointLog` contract, as tests. Not collected by itself (no ``Test``)."""


__all__ = [
    "BATCH_EVERY",
    "NOT_STARTED",
    "NS",
    "UNENCODABLE_STATE_PATH",
    "Body",
    "CheckpointLogContract",
    "CheckpointerContract",
    "Opener",
    "asave_kind",
    "assert_history_consistent",
    "assert_tuples",
    "done",
    "fan_out",
    "fan_out_script",
    "in_flight",
    "incompressible",
    "make_record",
    "pos",
    "rich_record",
    "save_kind",
    "summary_of",
    "with_instance",
]
