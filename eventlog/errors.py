"""The one exception hierarchy of ckptlog.

Invariants:
- Every error ckptlog raises on purpose derives from :class:`CheckpointError`.
- Messages say what was expected, what was found, where, and what to do.
- Raising any of these never leaves the log half-written: the check happens before the write
  transaction, or the transaction is aborted.
- Storage failures are also ``OSError`` (:class:`StorageError`), so callers that classify
  failures by ``OSError`` (dependency failures) see them as such.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base of every error ckptlog raises on purpose."""


class InvalidStreamKey(CheckpointError, ValueError):
    """A stream key (invocation id, thread id, ...) is empty, not a string, or too long."""


class FrameTooLarge(CheckpointError, ValueError):
    """An encoded frame is larger than the log's ``frame_bytes_max``."""


class EncodingError(CheckpointError, TypeError):
    """A value cannot be encoded structurally; ``path`` names where (``state.items[3]``)."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class InvalidRecord(CheckpointError, ValueError):
    """A record, or an argument, handed to a save does not fit the log's typed schema (a field
    of the wrong type, e.g. ``record.completed_positions[0].step`` a str) or is inconsistent
    with the call (mismatched ids). Raised before anything is queued: nothing is written."""


class InvalidType(InvalidRecord, TypeError):
    """An :class:`InvalidRecord` that is also a ``TypeError``: raised where the API this log
    stands in for raises ``TypeError`` (techrevati's and apflow's savers)."""


class DamagedRowSkipped(CheckpointError, RuntimeWarning):
    """A warning: ``list()`` skipped an invocation whose head row does not decode (written by
    an older version, or bit rot). The other invocations are listed; ``verify()`` reports the
    damage, and ``delete()`` of the damaged invocation still works."""


class LogClosed(CheckpointError, RuntimeError):
    """The log (or checkpointer) was used after ``close()``."""


class NotALog(CheckpointError):
    """The path exists but does not hold a ckptlog log."""


class UnsupportedFormat(CheckpointError):
    """The log was written by a newer (or unknown) format version."""


class NotACheckpointFrame(CheckpointError, TypeError):
    """A frame given to the checkpoint-record fold is of another kind (an event, a LangGraph
    frame): the fold reads only ``Save``, ``Snapshot`` and ``Tombstone``."""


class CorruptFrame(CheckpointError):
    """A stored frame failed its checksum, chain or header check on read."""

    def __init__(self, message: str, *, stream: str | None = None, seq: int | None = None) -> None:
        super().__init__(message)
        self.stream = stream
        self.seq = seq


class StorageError(CheckpointError, OSError):
    """The storage backend failed (disk full, map limit reached, I/O error)."""


class RetryableWrite(StorageError):
    """The write transaction was rolled back for a transient reason; running it again may work."""


class StorageFull(StorageError):
    """The backend's size bound was reached; raise ``map_size_max`` or compact the log."""


class LogReplaced(StorageError):
    """The log's data file was deleted (or replaced) since this process opened it: a write
    would go to a file no other process sees, so it is refused; reopen the log."""


class CommitOutcomeUnknown(StorageError):
    """The connection to the database failed during COMMIT and the backend could not learn
    whether the transaction committed: the saves it carried may or may not be in the log. The
    backend refuses further writes (a retry could save twice); reopen the log and read what
    landed."""


class ReadOnlyLog(CheckpointError, PermissionError):
    """A write was attempted on a log opened read-only."""


class FlushFailed(StorageError):
    """A flush could not commit the buffered frames (disk full, I/O error). They are kept, in
    order, and the next ``flush()`` (or ``close()``, or a durable save of their stream) commits
    them; ``kept`` is how many there are."""

    def __init__(self, message: str, *, kept: int = 0) -> None:
        super().__init__(message)
        self.kept = kept


class BufferedLost(StorageError):
    """``close()`` could not commit the buffered frames, so they were not written;
    ``lost`` maps each stream key to how many of its frames were dropped."""

    def __init__(self, message: str, *, lost: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.lost = dict(lost or {})


class WriterFailed(CheckpointError, RuntimeError):
    """The log's writer stopped on an internal error (the cause is chained): every waiting and
    later write fails with this at once instead of hanging. Close the log and open it again."""


class SequenceConflict(CheckpointError):
    """``append(..., expect_seq=N)`` found the stream at another seq (someone else appended)."""


# -- forensics (eventlog.forensics) --


class InvalidArgument(CheckpointError, ValueError):
    """A forensic call got an argument it cannot use (unknown kind, seq past the end, ...)."""


class NoSuchInvocation(CheckpointError, KeyError):
    """The log holds no frames for the invocation asked about."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CompactionError(CheckpointError):
    """Compaction refused to start (DEST not empty, bad policy) or found the source damaged."""


class SourceDamaged(CompactionError):
    """Compaction stopped at a damaged frame of the source (it copies only intact logs)."""


# -- LangGraph (eventlog.integrations.langgraph) --


class InvalidConfig(CheckpointError, ValueError):
    """A LangGraph config lacks what the call needs (``thread_id``, ``checkpoint_id``)."""


class InvalidCheckpoint(CheckpointError, ValueError):
    """A checkpoint handed to ``put`` cannot be stored as it is (e.g. a non-plain version)."""


class InvalidPruneStrategy(CheckpointError, ValueError):
    """``prune(strategy=...)`` got a strategy other than ``keep_latest`` or ``delete``."""


UnknownInvocation = NoSuchInvocation
"""The name the library's read calls use (``record_at``, ``history``): the same class."""


class SeqOutOfRange(CheckpointError, ValueError):
    """A stream seq outside ``0..last_seq`` (0: before the first save) was asked for."""


class UnsupportedStream(CheckpointError):
    """A stream whose frames the command line cannot turn into a view (application events
    only, or an integration it does not know)."""


class DirNotOurs(CheckpointError):
    """The demo's ``--path`` holds something the demo did not make: it is not deleted."""


class DamagedLog(StorageError):
    """The log's storage file is damaged below the frames: ``data.mdb`` is shorter than its
    last transaction says (truncated), or its two LMDB meta pages disagree (a damaged meta
    page makes LMDB open an older transaction, silently dropping the newest saves). Detected
    before the file is mapped, so the process never dies of SIGBUS. ``kind`` is
    ``"truncated"`` or ``"meta"``. Restore the log from a backup; ``ckptlog verify`` reports
    what is still readable."""

    def __init__(self, message: str, *, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class DamagedRow(CheckpointError, ValueError):
    """A materialized row (an invocation's head) does not decode (written by an older
    version, or bit rot). The frames are the record of truth: ``verify()`` reports the damage,
    ``history``/``record_at`` still read the frames, and ``delete()`` removes the invocation."""


class InvalidOption(CheckpointError, ValueError):
    """An option passed to ``open`` is unknown or of the wrong type or range; nothing was
    opened or created."""


# -- fork and the anchored head (eventlog.fork, eventlog.anchor) --


class ForkError(CheckpointError, ValueError):
    """``fork`` refused: nothing was written (the subclasses say why)."""


class NotASave(ForkError):
    """The seq asked for is not a save of the invocation (a delete, an application event, or
    a stream that holds no checkpoint records): a fork starts from a save's record."""


class ForkTargetExists(ForkError):
    """The new invocation id already has frames in the log (a fork never writes into an
    existing stream, nor over a deleted one: its history stays where it is)."""


class InvalidHeadDigest(CheckpointError, ValueError):
    """A head digest (``ckptlog head``) that does not parse: not a ``ckh1`` token, a field
    missing, or a damaged hash."""


class MissingExtra(CheckpointError, ImportError):
    """A feature needs an optional dependency that is not installed (``ckptlog sql`` and
    ``export --format parquet`` need DuckDB and pyarrow: ``pip install 'ckptlog[sql]'``).
    ``extra`` names the extra to install."""

    def __init__(self, message: str, *, extra: str = "") -> None:
        super().__init__(message)
        self.extra = extra


class InstancesUnavailable(CheckpointError):
    """A lazily loaded fan-out's instances cannot be read as of the seq its record was loaded
    at: the log no longer holds that record (its frames were pruned, or its invocation is gone)."""
