"""openarmature integration: records as openarmature's own dataclasses, typed states, a helper.

The plain :class:`eventlog.checkpoints.Checkpointer` already works as
``GraphBuilder(State)....with_checkpointer(cp)``: the engine reads records by attribute,
validates dict states with ``model_validate``, finds ``save_fan_out_internal`` /
``save_fan_out_in_flight_failure`` by name and wraps any exception from a save as
``CheckpointSaveFailed``. Two things it cannot do with ckptlog's msgspec records:

- be passed to ``dataclasses.replace``: the engine does that on a resume whose
  ``schema_version`` differs (state migration), and test harnesses do it to patch a record;
- hand back the Pydantic state instance that was saved, as ``InMemoryCheckpointer`` does.

:class:`OpenArmatureCheckpointer` wraps a :class:`~eventlog.checkpoints.Checkpointer` and
closes both gaps; it also satisfies openarmature's ``Checkpointer`` Protocol statically (its
``load`` returns ``openarmature.checkpoint.CheckpointRecord``). :func:`checkpointer_for` builds
one for a compiled graph, registering the graph's state classes so that typed states come back
in a new process too.

Invariants:
- ``load`` returns an ``openarmature.checkpoint.CheckpointRecord`` whose fields equal the last
  committed save's; sequences are tuples of openarmature's dataclasses.
- A state comes back typed only when its class is known for its nesting depth (seen at save
  time in this process, or registered), it is the only known class with exactly the stored
  field names (the class last saved for that invocation wins a tie), the record's
  ``schema_version`` equals the outermost class's, and the class validates it. Otherwise it
  stays a dict, which the engine validates itself; a version mismatch always yields dicts, so
  the engine's migration registry sees the structural form it needs.
- Remembering state classes happens synchronously before the wrapped checkpointer queues the
  save, so call order is still commit order.
- openarmature is imported here and nowhere else in ckptlog.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from openarmature.checkpoint import CheckpointRecord as OaRecord
from openarmature.checkpoint import CheckpointSummary as OaSummary
from openarmature.checkpoint import EnclosingFanOutInstance as OaLineage
from openarmature.checkpoint import FanOutInstanceProgress as OaInstance
from openarmature.checkpoint import FanOutProgress as OaFanOut
from openarmature.checkpoint import NodePosition as OaPosition
from openarmature.graph import CompiledGraph
from pydantic import BaseModel, ValidationError

from backends.base import Backend, Durability
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.errors import CheckpointError
from eventlog.lazy import LazyInstances
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    CheckpointSummary,
    EnclosingFanOutInstance,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
    NodePosition,
)

INVOCATIONS_REMEMBERED_MAX: Final = 4096  # invocations whose last saved state classes are kept

StateClass = type[BaseModel]

__all__ = [
    "OpenArmatureCheckpointer",
    "StateTypes",
    "checkpointer_for",
    "summary_to_openarmature",
    "to_openarmature",
]


# -- ckptlog records -> openarmature's dataclasses ---------------------------------------------

_OA_NOT_STARTED: Final = OaInstance("not_started")


def _position(p: NodePosition) -> OaPosition:
    return OaPosition(p.namespace, p.node_name, p.step, p.attempt_index, p.fan_out_index)


def _instance(i: FanOutInstanceProgress) -> OaInstance:
    if i is NOT_STARTED:  # the common case at large N: one shared frozen object
        return _OA_NOT_STARTED
    return OaInstance(
        i.state,
        i.result,
        i.result_is_error,
        tuple(_position(p) for p in i.completed_inner_positions),
    )


def _lineage(e: EnclosingFanOutInstance) -> OaLineage:
    return OaLineage(e.namespace, e.fan_out_node_name, e.fan_out_index)


def _fan_out(f: FanOutProgress) -> OaFanOut:
    return OaFanOut(
        f.fan_out_node_name,
        f.namespace,
        f.instance_count,
        tuple(_instance(i) for i in f.instances),
        tuple(_lineage(e) for e in f.enclosing_fan_out_lineage),
    )


def to_openarmature(
    record: CheckpointRecord,
    *,
    state: Any = None,
    parent_states: Sequence[Any] | None = None,
) -> OaRecord:
    """``record`` as an ``openarmature.checkpoint.CheckpointRecord``.

    ``state`` / ``parent_states`` replace the record's (e.g. typed instances); by default the
    stored plain data is kept.
    """
    return OaRecord(
        invocation_id=record.invocation_id,
        correlation_id=record.correlation_id,
        state=record.state if state is None else state,
        completed_positions=tuple(_position(p) for p in record.completed_positions),
        parent_states=tuple(record.parent_states if parent_states is None else parent_states),
        last_saved_at=record.last_saved_at,
        schema_version=record.schema_version,
        fan_out_progress=tuple(_fan_out(f) for f in record.fan_out_progress),
    )


def summary_to_openarmature(summary: CheckpointSummary) -> OaSummary:
    return OaSummary(
        summary.invocation_id,
        summary.correlation_id,
        summary.last_saved_at,
        summary.completed_node_count,
    )


# -- typed states -------------------------------------------------------------------------------


def _dumped_fields(cls: StateClass) -> frozenset[str]:
    """The keys ``model_dump()`` gives for ``cls`` (fields and computed fields)."""
    return frozenset(cls.model_fields) | frozenset(cls.model_computed_fields)


def _subgraphs(graph: CompiledGraph[Any]) -> Iterator[CompiledGraph[Any]]:
    """The graphs run one nesting level below ``graph`` whose nodes can save.

    Subgraph nodes and fan-out instances save (their states are one level deeper); parallel
    branches run without a checkpointer in openarmature 0.17, so they are not walked.
    """
    for node in graph.nodes.values():
        for inner in (
            getattr(node, "compiled", None),
            getattr(getattr(node, "config", None), "subgraph", None),
        ):
            if isinstance(inner, CompiledGraph):
                yield inner


class StateTypes:
    """The Pydantic state classes a checkpointer may rebuild on load, by nesting depth.

    Depth 0 is the outermost graph's state (``parent_states[0]``, or ``state`` when there are
    no parent states); depth ``d`` is ``parent_states[d]``, and the record's own ``state`` is
    at depth ``len(parent_states)``. Thread-safe: saves remember from the event loop, loads
    rebuild from a worker thread.
    """

    def __init__(self, *, invocations_max: int = INVOCATIONS_REMEMBERED_MAX) -> None:
        if invocations_max < 1:
            raise CheckpointError(
                f"invocations_max must be at least 1, got {invocations_max}; it bounds the "
                "invocations whose state classes are remembered"
            )
        self._lock = threading.Lock()
        self._invocations_max = invocations_max
        self._known: set[tuple[int, StateClass]] = set()
        self._by_fields: dict[tuple[int, frozenset[str]], list[StateClass]] = {}
        self._fields: dict[StateClass, frozenset[str]] = {}
        self._recent: collections.OrderedDict[str, tuple[StateClass | None, ...]] = (
            collections.OrderedDict()
        )

    def register(self, state_cls: StateClass, depth: int = 0) -> None:
        """Make ``state_cls`` a candidate for states saved at nesting ``depth``."""
        if (depth, state_cls) in self._known:
            return
        fields = _dumped_fields(state_cls)
        with self._lock:
            if (depth, state_cls) in self._known:
                return
            self._fields[state_cls] = fields
            self._by_fields.setdefault((depth, fields), []).append(state_cls)
            self._known.add((depth, state_cls))

    def register_graph(self, graph: CompiledGraph[Any], depth: int = 0) -> None:
        """Register ``graph``'s state class and those of its subgraphs and fan-out instances."""
        seen: set[tuple[int, int]] = set()
        stack = [(graph, depth)]
        while stack:
            g, d = stack.pop()
            if (id(g), d) in seen:
                continue
            seen.add((id(g), d))
            self.register(g.state_cls, d)
            stack.extend((inner, d + 1) for inner in _subgraphs(g))

    def remember(self, invocation_id: str, record: Any) -> None:
        """Note the state classes of a record being saved (outermost first)."""
        parents = getattr(record, "parent_states", None)
        if not isinstance(parents, (tuple, list)):
            return  # not a record: the save rejects it (eventlog.validate)
        chain = (*parents, getattr(record, "state", None))
        classes = tuple(type(s) if isinstance(s, BaseModel) else None for s in chain)
        for depth, cls in enumerate(classes):
            if cls is not None and (depth, cls) not in self._known:
                self.register(cls, depth)
        with self._lock:
            recent = self._recent
            recent[invocation_id] = classes
            recent.move_to_end(invocation_id)
            while len(recent) > self._invocations_max:
                recent.popitem(last=False)

    def _pick(self, depth: int, keys: frozenset[str], hint: StateClass | None) -> StateClass | None:
        if hint is not None and self._fields.get(hint) == keys:
            return hint
        candidates = self._by_fields.get((depth, keys), ())
        return candidates[0] if len(candidates) == 1 else None

    def rebuild(
        self, invocation_id: str, states: Sequence[Any], schema_version: str
    ) -> list[Any] | None:
        """Typed versions of ``states`` (outermost first), or ``None`` to keep them as stored."""
        with self._lock:
            hints = self._recent.get(invocation_id, ())
        out: list[Any] = []
        for depth, value in enumerate(states):
            if not isinstance(value, dict):
                out.append(value)
                continue
            hint = hints[depth] if depth < len(hints) else None
            cls = self._pick(depth, frozenset(value), hint)
            if depth == 0 and (cls is None or getattr(cls, "schema_version", "") != schema_version):
                return None  # unknown outer class or a version change: the engine's to handle
            if cls is None:
                out.append(value)
                continue
            data = value
            if cls.model_computed_fields:
                data = {k: v for k, v in value.items() if k in cls.model_fields}
            try:
                out.append(cls.model_validate(data))
            except ValidationError:
                if depth == 0:
                    return None
                out.append(value)
        return out


# -- the checkpointer ---------------------------------------------------------------------------


def _our_batching(batching: Any) -> FanOutInternalSaveBatching | None:
    """Ours or openarmature's ``FanOutInternalSaveBatching`` (both carry ``flush_every``)."""
    if batching is None or isinstance(batching, FanOutInternalSaveBatching):
        return batching
    flush_every = getattr(batching, "flush_every", None)
    if not isinstance(flush_every, int):
        raise CheckpointError(
            "fan_out_internal_save_batching must be a FanOutInternalSaveBatching (ckptlog's or "
            f"openarmature's), got {type(batching).__name__}"
        )
    return FanOutInternalSaveBatching(flush_every)


class OpenArmatureCheckpointer:
    """openarmature's ``Checkpointer`` Protocol on ckptlog, returning openarmature's records.

    Saves go to the wrapped :class:`~eventlog.checkpoints.Checkpointer` unchanged (same
    durability, batching and group commit); ``load`` and ``list`` convert to openarmature's
    dataclasses in the worker thread that reads. With ``typed_states=True`` states come back as
    the Pydantic instances that were saved whenever that is unambiguous (see the module
    invariants), else as dicts; with ``typed_states=False`` always as dicts (like openarmature's
    JSON-mode SQLite backend).
    """

    supports_state_migration: bool = True

    def __init__(
        self,
        checkpointer: Checkpointer,
        *,
        typed_states: bool = True,
        state_types: StateTypes | None = None,
    ) -> None:
        self.checkpointer = checkpointer
        self.sync: CheckpointLog = checkpointer.sync
        self.typed_states = typed_states
        self.state_types = state_types if state_types is not None else StateTypes()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability | str = "fsync",
        fan_out_internal_save_batching: Any = None,
        typed_states: bool = True,
        state_types: StateTypes | None = None,
        **options: Any,
    ) -> OpenArmatureCheckpointer:
        """Open (or create) the log in directory ``path``; options as ``Checkpointer.open``."""
        inner = Checkpointer.open(
            path,
            durability=durability,
            batching=_our_batching(fan_out_internal_save_batching),
            **options,
        )
        return cls(inner, typed_states=typed_states, state_types=state_types)

    @classmethod
    def on_backend(
        cls,
        backend: Backend,
        *,
        fan_out_internal_save_batching: Any = None,
        typed_states: bool = True,
        state_types: StateTypes | None = None,
        **options: Any,
    ) -> OpenArmatureCheckpointer:
        inner = Checkpointer.on_backend(
            backend, batching=_our_batching(fan_out_internal_save_batching), **options
        )
        return cls(inner, typed_states=typed_states, state_types=state_types)

    # -- saving: forwarded in call order -------------------------------------------------------

    def _unbatched_wrapped_save(self) -> Any:
        """A ``save`` replaced on this instance, when fan-out saves are not batched.

        ``InMemoryCheckpointer`` sends unbatched fan-out saves through ``self.save``, so code
        that wraps ``save`` on an instance (to count or capture saves) sees every save; so do we.
        """
        wrapped = self.__dict__.get("save")
        if wrapped is None:
            return None
        batching = self.sync.batching
        return wrapped if batching is None or batching.flush_every <= 0 else None

    async def save(self, invocation_id: str, record: Any) -> None:
        if self.typed_states:
            self.state_types.remember(invocation_id, record)
        await self.checkpointer.save(invocation_id, record)

    async def save_fan_out_internal(self, invocation_id: str, record: Any) -> None:
        wrapped = self._unbatched_wrapped_save()
        if wrapped is not None:
            await wrapped(invocation_id, record)
            return
        if self.typed_states:
            self.state_types.remember(invocation_id, record)
        await self.checkpointer.save_fan_out_internal(invocation_id, record)

    async def save_fan_out_in_flight_failure(self, invocation_id: str, record: Any) -> None:
        wrapped = self._unbatched_wrapped_save()
        if wrapped is not None:
            await wrapped(invocation_id, record)
            return
        if self.typed_states:
            self.state_types.remember(invocation_id, record)
        await self.checkpointer.save_fan_out_in_flight_failure(invocation_id, record)

    async def delete(self, invocation_id: str) -> None:
        await self.checkpointer.delete(invocation_id)

    async def flush(self) -> None:
        await self.checkpointer.flush()

    # -- reading: converted in the reading thread ----------------------------------------------

    def convert(self, record: CheckpointRecord) -> OaRecord:
        """``record`` (e.g. from ``self.sync.history(...)``) as openarmature's record, with
        typed states where this checkpointer can rebuild them."""
        if self.typed_states:
            states = (*record.parent_states, record.state)
            typed = self.state_types.rebuild(record.invocation_id, states, record.schema_version)
            if typed is not None:
                return to_openarmature(record, state=typed[-1], parent_states=typed[:-1])
        return to_openarmature(record)

    def load_sync(self, invocation_id: str) -> OaRecord | None:
        """Blocking :meth:`load` (for code outside an event loop)."""
        record = self.sync.load(invocation_id)
        return None if record is None else self.convert(record)

    async def load(self, invocation_id: str) -> OaRecord | None:
        record = await self.sync.load_async(invocation_id)
        if record is not None and any(
            isinstance(f.instances, LazyInstances) for f in record.fan_out_progress
        ):  # converting decodes every instance: not on the event loop's thread
            return await asyncio.to_thread(self.convert, record)
        return None if record is None else self.convert(record)

    async def list(self, filter: Any = None) -> Iterable[OaSummary]:
        """Summaries (oldest first); ``filter`` is ckptlog's or openarmature's CheckpointFilter."""
        summaries = await self.checkpointer.list(filter)
        return [summary_to_openarmature(s) for s in summaries]

    # -- lifetime ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        await self.checkpointer.aclose()

    def close(self) -> None:
        self.sync.close()

    async def __aenter__(self) -> OpenArmatureCheckpointer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def checkpointer_for(
    graph: CompiledGraph[Any],
    path: str | os.PathLike[str],
    *,
    durability: Durability | str = "fsync",
    fan_out_internal_save_batching: Any = None,
    typed_states: bool = True,
    attach: bool = True,
    **options: Any,
) -> OpenArmatureCheckpointer:
    """An :class:`OpenArmatureCheckpointer` at ``path`` for ``graph``, attached to it.

    The graph's state classes (its own, its subgraphs' and its fan-out instances', by depth)
    are registered, so loads rebuild typed states in a new process too, not only after saves
    seen in this one. ``attach=False`` leaves ``graph.attach_checkpointer`` to the caller.
    """
    cp = OpenArmatureCheckpointer.open(
        path,
        durability=durability,
        fan_out_internal_save_batching=fan_out_internal_save_batching,
        typed_states=typed_states,
        **options,
    )
    cp.state_types.register_graph(graph)
    if attach:
        graph.attach_checkpointer(cp)
    return cp
