"""The LMDB checkpoint log against a plain Python model, driven by a state machine (STYLE §2).

Rules: save, fan-out internal save, ``save_instance``, in-flight failure save (batching
``flush_every=3``), flush, delete, clean close/reopen, and a simulated crash. After every step
``load``, ``list`` (all and per correlation id), ``history`` (kinds and records) and the buffered
counts must agree with the model; ``verify()`` must pass at teardown.

The model of batching is the one eventlog.checkpoints documents: one count per checkpointer,
raised by each fan-out internal (or instance) save and reset only by a flush (automatic or
explicit); a save commits its own invocation's buffer first, a delete drops it, close commits
every buffer.

A crash is simulated in process: every buffered frame is dropped with the public
``EventLog.discard_buffered`` (what a dead process loses), then the log is closed, which then has
nothing left to flush, and reopened; the engine resumes from what was committed.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from record_strategies import advanced, floats, next_record

from eventlog.checkpoints import CheckpointLog
from eventlog.records import CheckpointFilter, CheckpointRecord, FanOutInternalSaveBatching
from eventlog.testing import summary_of, with_instance

FLUSH_EVERY = 3
IDS = ("a", "b", "ü\x00c")
invocations = st.sampled_from(IDS)

Entry = tuple[str, CheckpointRecord | None]  # (kind, record); ("delete", None)


@dataclass
class Model:
    committed: dict[str, CheckpointRecord] = field(default_factory=dict)
    history: dict[str, list[Entry]] = field(default_factory=lambda: {i: [] for i in IDS})
    # (kind, record, joins): buffered save_instance calls of one invocation that follow each
    # other in its buffer commit as one frame (a batch), so history shows their last record.
    buffers: dict[str, list[tuple[str, CheckpointRecord, bool]]] = field(
        default_factory=lambda: {i: [] for i in IDS}
    )
    pending: int = 0
    # The record the engine last handed over per invocation: the next one evolves from it.
    last_call: dict[str, CheckpointRecord | None] = field(
        default_factory=lambda: dict.fromkeys(IDS)
    )

    def commit(self, inv: str) -> None:
        joins_last = False
        for kind, rec, joins in self.buffers[inv]:
            if joins and joins_last:
                self.history[inv][-1] = (kind, rec)
            else:
                self.history[inv].append((kind, rec))
            joins_last = joins
            self.committed[inv] = rec
        self.buffers[inv] = []

    def commit_all(self) -> None:
        for inv in IDS:
            self.commit(inv)
        self.pending = 0


class CheckpointMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ckptlog-stateful-"))
        self.model = Model()
        self.cl = self._open()

    def _open(self) -> CheckpointLog:
        return CheckpointLog.open(
            self.dir / "log",
            durability="process",
            batching=FanOutInternalSaveBatching(flush_every=FLUSH_EVERY),
        )

    def _draw(self, data: st.DataObject, inv: str) -> CheckpointRecord:
        rec = data.draw(next_record(inv, self.model.last_call[inv]), label=f"record for {inv!r}")
        self.model.last_call[inv] = rec
        return rec

    # -- rules ---------------------------------------------------------------------------------

    @rule(inv=invocations, data=st.data())
    def save(self, inv: str, data: st.DataObject) -> None:
        rec = self._draw(data, inv)
        self.cl.save(inv, rec)
        self.model.commit(inv)
        self.model.history[inv].append(("save", rec))
        self.model.committed[inv] = rec

    @rule(inv=invocations, data=st.data())
    def fan_out_save(self, inv: str, data: st.DataObject) -> None:
        rec = self._draw(data, inv)
        self.cl.save_fan_out_internal(inv, rec)
        self._counted(inv, rec)

    def _counted(self, inv: str, rec: CheckpointRecord, *, joins: bool = False) -> None:
        """Model a buffered save that counts toward ``flush_every``."""
        m = self.model
        m.buffers[inv].append(("fan_out_internal", rec, joins))
        m.pending += 1
        if m.pending >= FLUSH_EVERY:
            note(f"count reached {FLUSH_EVERY}: every buffer is committed")
            m.commit_all()
        else:
            note(f"{inv!r} buffered, count {m.pending}")

    @precondition(lambda self: any(r and r.fan_out_progress for r in self.model.last_call.values()))
    @rule(data=st.data())
    def instance_save(self, data: st.DataObject) -> None:
        """``save_instance`` on a fan-out of the head; batched like a fan-out internal save."""
        m = self.model
        inv = data.draw(
            st.sampled_from([i for i in IDS if (r := m.last_call[i]) and r.fan_out_progress])
        )
        prev = m.last_call[inv]
        assert prev is not None
        # save_instance finds a fan-out by (name, namespace, lineage): the first that matches.
        firsts: dict[tuple[object, ...], int] = {}
        for k, fo in enumerate(prev.fan_out_progress):
            firsts.setdefault((fo.fan_out_node_name, fo.namespace, fo.enclosing_fan_out_lineage), k)
        k = data.draw(st.sampled_from(sorted(firsts.values())))
        fo = prev.fan_out_progress[k]
        index = data.draw(st.integers(0, fo.instance_count - 1))
        progress = data.draw(advanced(fo.instances[index]))
        at = data.draw(floats)
        self.cl.save_instance(
            inv,
            fo.fan_out_node_name,
            index,
            progress,
            namespace=fo.namespace,
            lineage=fo.enclosing_fan_out_lineage,
            saved_at=at,
        )
        rec = msgspec.structs.replace(with_instance(prev, k, index, progress), last_saved_at=at)
        m.last_call[inv] = rec
        self._counted(inv, rec, joins=True)

    @rule(inv=invocations, data=st.data())
    def in_flight_failure_save(self, inv: str, data: st.DataObject) -> None:
        rec = self._draw(data, inv)
        self.cl.save_fan_out_in_flight_failure(inv, rec)
        self.model.buffers[inv].append(("fan_out_in_flight_failure", rec, False))

    @rule()
    def flush(self) -> None:
        self.cl.flush()
        self.model.commit_all()

    @rule(inv=invocations)
    def delete(self, inv: str) -> None:
        self.cl.delete(inv)
        note(f"delete drops {len(self.model.buffers[inv])} buffered save(s) of {inv!r}")
        self.model.buffers[inv] = []
        if self.model.committed.pop(inv, None) is not None:
            self.model.history[inv].append(("delete", None))
        self.model.last_call[inv] = None

    @rule()
    def reopen(self) -> None:
        self.cl.close()
        self.cl = self._open()
        self.model.commit_all()

    @rule()
    def crash(self) -> None:
        for inv in IDS:
            dropped = self.cl.log.discard_buffered(inv)
            assert dropped == len(self.model.buffers[inv])
            note(f"crash loses {dropped} buffered save(s) of {inv!r}")
            self.model.buffers[inv] = []
        assert self.cl.log.buffered_count() == 0
        self.cl.close()
        self.cl = self._open()
        self.model.pending = 0
        for inv in IDS:
            self.model.last_call[inv] = self.model.committed.get(inv)

    # -- checks --------------------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        m = self.model
        for inv in IDS:
            assert self.cl.load(inv) == m.committed.get(inv), f"load({inv!r})"
            assert self.cl.log.buffered_count(inv) == len(m.buffers[inv]), f"buffer of {inv!r}"
            known = self.cl.log.last_seq(inv) > 0  # history() of an unknown id raises
            hist = [(e.kind, e.record) for e in self.cl.history(inv)] if known else []
            assert hist == m.history[inv], f"history({inv!r})"
        summaries = sorted(
            (summary_of(r) for r in m.committed.values()),
            key=lambda s: (s.last_saved_at, s.invocation_id),
        )
        assert self.cl.list() == summaries
        for corr in {s.correlation_id for s in summaries}:
            by_corr = [s for s in summaries if s.correlation_id == corr]
            assert self.cl.list(CheckpointFilter(correlation_id=corr)) == by_corr

    def teardown(self) -> None:
        try:
            report = self.cl.verify()
            assert report.ok, str(report)
        finally:
            self.cl.close()
            shutil.rmtree(self.dir, ignore_errors=True)


CheckpointMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
TestCheckpointMachine = pytest.mark.slow(CheckpointMachine.TestCase)
