"""``load`` of a big head: a fan-out over the lazy threshold comes back as
:class:`~eventlog.lazy.LazyInstances`, whose chunks are read from the fan-out rows on access.

Each chunk is read in its own read transaction together with the head row: while the head is
still at the seq the record was loaded at (same stream id, same seq), its rows are the
record's. Once the log moved on, the record as of that seq is rebuilt once with
``record_at`` (seqs of an open log never change) and the fan-out's instances are served from
it; :class:`~eventlog.errors.InstancesUnavailable` if the log no longer holds that record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from eventlog.errors import InstancesUnavailable
from eventlog.frames import FanOutHeader
from eventlog.lazy import LazyInstances
from eventlog.materialized import read_instance_range, read_row
from eventlog.records import CheckpointRecord, FanOutInstanceProgress

if TYPE_CHECKING:
    from eventlog.checkpoints import CheckpointLog


class PinnedFanOut:
    """``read(start, stop)`` of one fan-out of one head as of seq ``seq``."""

    __slots__ = ("cl", "fallback", "hd", "invocation_id", "k", "seq", "sid")

    def __init__(
        self, cl: CheckpointLog, invocation_id: str, sid: int, seq: int, k: int, hd: FanOutHeader
    ) -> None:
        self.cl = cl
        self.invocation_id = invocation_id
        self.sid = sid
        self.seq = seq
        self.k = k  # the fan-out's position in the record
        self.hd = hd
        self.fallback: Any = None  # the instances as of ``seq``, once the head moved on

    def __call__(self, start: int, stop: int) -> list[FanOutInstanceProgress]:
        if self.fallback is None:
            log = self.cl.log
            with log.backend.read() as txn:
                if log.stream_id(txn, self.invocation_id) == self.sid:
                    row = read_row(txn, self.sid)
                    if row is not None and row.seq == self.seq:
                        return read_instance_range(txn, self.sid, self.hd, start, stop)
            self.fallback = self._as_of_seq()
        return list(self.fallback[start:stop])

    def _as_of_seq(self) -> Any:
        try:
            rec = self.cl.record_at(self.invocation_id, self.seq)
        except Exception as e:  # UnknownInvocation, SeqOutOfRange, a pruned log
            raise self._gone(f"record_at raised {type(e).__name__}: {e}") from e
        fans = () if rec is None else rec.fan_out_progress
        if self.k >= len(fans) or fans[self.k].instance_count != self.hd.instance_count:
            raise self._gone("the record there has no such fan-out")
        return fans[self.k].instances

    def _gone(self, why: str) -> InstancesUnavailable:
        return InstancesUnavailable(
            f"the instances of fan-out {self.hd.fan_out_node_name!r} of {self.invocation_id!r} "
            f"were loaded lazily as of seq {self.seq}; the head has moved on and the record as "
            f"of that seq cannot be rebuilt ({why}); load the invocation again"
        )


def lazy_record(
    cl: CheckpointLog, record: CheckpointRecord, sid: int, seq: int, layout: Any
) -> CheckpointRecord:
    """``record`` (built with its big fan-outs left empty) with each fan-out of more than
    ``over`` instances as a :class:`LazyInstances` pinned to ``seq``."""
    fans = list(record.fan_out_progress)
    over, chunk = cl.lazy_instances_over, cl.lazy_chunk_rows
    for k, hd in enumerate(layout):
        if hd.instance_count > over:
            read = PinnedFanOut(cl, record.invocation_id, sid, seq, k, hd)
            lazy = LazyInstances(hd.instance_count, chunk, read)
            fans[k] = msgspec.structs.replace(fans[k], instances=lazy)
    return msgspec.structs.replace(record, fan_out_progress=tuple(fans))


def materialized(record: Any) -> Any:
    """``record`` with every :class:`LazyInstances` replaced by its tuple (what a save of a
    loaded record checks and queues: the writer never reads through a lazy sequence)."""
    fans = getattr(record, "fan_out_progress", None)
    if (
        not isinstance(record, msgspec.Struct)
        or type(fans) is not tuple
        or not any(isinstance(getattr(fp, "instances", None), LazyInstances) for fp in fans)
    ):
        return record
    out = tuple(
        msgspec.structs.replace(fp, instances=fp.instances.materialize(keep=True))
        if isinstance(getattr(fp, "instances", None), LazyInstances)
        else fp
        for fp in fans
    )
    return msgspec.structs.replace(record, fan_out_progress=out)
