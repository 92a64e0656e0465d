"""The checkpoint-record projection: frames -> head, and record -> delta frame.

A projection is ``initial()`` (``None``: nothing saved) plus ``apply(head, frame)``. ``apply`` is
pure: it returns a new :class:`Head` and never changes its argument. ``apply_inplace`` is the
same fold updating the head it is given (history replay uses it to avoid copying fan-out lists
at every frame); a property test checks the two agree.

Invariants:
- ``to_record(fold(frames))`` equals the record of the last save, for every prefix of frames.
- ``fold(all) == fold(tail, start=snapshot)`` for every snapshot in the stream.
- ``delta(head, record)`` applied to ``head`` gives a head whose record equals ``record``.
- Fan-out instances only move not_started -> in_flight -> completed, and an in-flight one only
  gains inner positions (openarmature's contract); change detection relies on this to compare
  a few fields per instance instead of whole objects.
"""

from __future__ import annotations

import copy
import itertools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from eventlog.errors import CorruptFrame, NotACheckpointFrame
from eventlog.frames import (
    FanOutHeader,
    InstanceChange,
    InstancePage,
    Save,
    Snapshot,
    StateSplice,
    Tombstone,
)
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutProgress,
    NodePosition,
    instance_from,
    lineage_from,
    position_from,
)
from eventlog.validate import Seen, check_instance
from eventlog.validate import differing as _differing

FanOutKey = tuple[str, tuple[str, ...], tuple[Any, ...], int]

_decode_any = msgspec.msgpack.Decoder()

SPLICE_MIN_BYTES = 256  # smaller states are stored whole: a splice would save next to nothing
SPLICE_OVERHEAD_BYTES = 16  # a splice's two lengths and framing, roughly


# -- state splices: a changed state as an edit of the previous state's bytes ----------------


_PROBES = (32, 1024)  # edits usually sit in one small place: try short distances first
_XOR_WITHIN = 1024  # a window this small is settled by one XOR of two ints


def _common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix: galloping, then a binary search, of C-level
    compares (memcmp, no copies), then one XOR within a window of at most 1 KiB: a handful of
    calls however long the states are."""
    n = min(len(a), len(b))
    mb = memoryview(b)
    lo = hi = 0
    for probe in (*_PROBES, n):
        hi = min(probe, n)
        if not a.startswith(mb[lo:hi], lo):
            break
        lo = hi
    else:
        return n
    while hi - lo > _XOR_WITHIN:  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a.startswith(mb[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    x = int.from_bytes(a[lo:hi]) ^ int.from_bytes(b[lo:hi])  # big-endian: a[lo] is on top
    return hi - (x.bit_length() + 7) // 8


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the longest common suffix no longer than ``limit`` (same search, from the end)."""
    la, lb = len(a), len(b)
    mb = memoryview(b)
    if a.endswith(mb[lb - limit :]):
        return limit
    lo, hi = 0, limit  # the last lo bytes match; the last hi do not
    for d in _PROBES:  # the common suffix is usually long
        probe = limit - d
        if probe <= 0:
            break
        if a.endswith(mb[lb - probe :]):
            lo = probe
            break
        hi = probe
    while hi - lo > _XOR_WITHIN:
        mid = (lo + hi) // 2
        if a.endswith(mb[lb - mid : lb - lo], 0, la - lo):
            lo = mid
        else:
            hi = mid
    x = int.from_bytes(a[la - hi : la - lo]) ^ int.from_bytes(b[lb - hi : lb - lo])
    return lo + ((x & -x).bit_length() - 1) // 8  # equal low-order (trailing) bytes


def splice_of(old: bytes, new: bytes) -> StateSplice | None:
    """``new`` as an edit of ``old`` when that is at most half the size of ``new``, else None.

    ``old`` and ``new`` must differ. The edit keeps ``old``'s longest common prefix and suffix
    with ``new`` and carries the bytes between: states that change in one place (a step
    counter, a cursor, an item appended to a list) splice to a few bytes.
    """
    if len(new) < SPLICE_MIN_BYTES:
        return None
    head = _common_prefix(old, new)
    tail = _common_suffix(old, new, min(len(old), len(new)) - head)
    middle = new[head : len(new) - tail]
    if len(middle) + SPLICE_OVERHEAD_BYTES > len(new) // 2:
        return None
    return StateSplice(head, tail, middle)


def apply_splice(old: bytes, sp: StateSplice) -> bytes:
    """The state ``sp`` makes of ``old``; raises :class:`CorruptFrame` when it cannot apply."""
    if sp.keep_head < 0 or sp.keep_tail < 0 or sp.keep_head + sp.keep_tail > len(old):
        raise CorruptFrame(
            f"a state splice keeps {sp.keep_head} + {sp.keep_tail} bytes of a previous state "
            f"of {len(old)} bytes: the frames before it are missing or out of order; run verify()"
        )
    view = memoryview(old)
    return b"".join((view[: sp.keep_head], sp.middle, view[len(old) - sp.keep_tail :]))


@dataclass
class Slot:
    """One fan-out of the head: its header and all its instances (index = fan_out_index)."""

    header: FanOutHeader
    instances: list[FanOutInstanceProgress]
    src: Any = None  # the caller's instances tuple last seen, for cheap change detection
    states: list[str] | None = None  # ``src``'s instance states (valid while ``src`` is set)
    results: list[Any] = field(default_factory=list)  # ``src``'s instance results, likewise
    in_flight: set[int] = field(default_factory=set)  # indices in flight in ``src``
    # The writer's encodings (eventlog.materialized.started_array): ``entries[i]`` is
    # ``InstanceChange(fid, i, objs[i])`` encoded (empty when not started), which stands for
    # ``instances[i]`` while ``instances[i] is objs[i]``; a fold never reads or sets them (a
    # copy starts without).
    objs: list[Any] | None = field(default=None, compare=False, repr=False)
    entries: list[bytes] | None = field(default=None, compare=False, repr=False)
    # True while ``instances[i] is objs[i]`` for every ``i`` (started_array sets it, the
    # writer's cached batches keep it); any other write to ``instances`` clears it.
    synced: bool = field(default=False, compare=False, repr=False)
    # The writer's cached batches (eventlog.checkpoint_frames.own_instances): ``instances[i]``
    # set by a batch is the caller's object until the head is used other than by batches;
    # ``borrowed`` lists each such batch's indices and encoded progresses, in order, so that
    # the caller's objects (whose results it may change after the call) are replaced by
    # copies decoded from the bytes stored first.
    borrowed: list[tuple[list[int], list[bytes]]] = field(
        default_factory=list, compare=False, repr=False
    )

    @property
    def key(self) -> FanOutKey:
        h = self.header
        return (h.fan_out_node_name, h.namespace, h.lineage, h.instance_count)


@dataclass
class Head:
    """The fold of one invocation's frames: its latest record, in a delta-friendly form."""

    invocation_id: str
    correlation_id: str
    schema_version: str
    state: bytes  # msgpack
    parent_states: bytes  # msgpack of a sequence
    positions: list[NodePosition]
    last_saved_at: float
    kind: str
    slots: list[Slot] = field(default_factory=list)
    next_fid: int = 1
    seq: int = 0
    pos_src: Any = None  # the caller's positions tuple last seen

    def copy(self) -> Head:
        new = copy.copy(self)
        new.positions = list(self.positions)
        new.slots = [Slot(s.header, list(s.instances), s.src) for s in self.slots]
        return new


def initial() -> Head | None:
    return None


def apply(head: Head | None, frame: Any, seq: int, invocation_id: str) -> Head | None:
    """Pure fold step: the head after ``frame`` (stream seq ``seq``)."""
    return apply_inplace(head.copy() if head is not None else None, frame, seq, invocation_id)


def apply_inplace(head: Head | None, frame: Any, seq: int, invocation_id: str) -> Head | None:
    if isinstance(frame, Tombstone):
        return None
    if isinstance(frame, Snapshot):
        h = Head(
            invocation_id=frame.invocation_id,
            correlation_id=frame.correlation_id,
            schema_version=frame.schema_version,
            state=bytes(frame.state),
            parent_states=bytes(frame.parent_states),
            positions=list(frame.positions),
            last_saved_at=frame.saved_at,
            kind=frame.kind,
            slots=[Slot(hd, [NOT_STARTED] * hd.instance_count) for hd in frame.layout],
            next_fid=frame.next_fid,
            seq=seq,
        )
        _apply_instances(h, frame.instances)
        return h
    if not isinstance(frame, Save):
        raise NotACheckpointFrame(
            f"stream {invocation_id!r} seq {seq}: {type(frame).__name__} is not a checkpoint "
            "frame; fold only Save, Snapshot and Tombstone frames (skip the others, as "
            "CheckpointLog.history does)"
        )
    page = frame.page
    if head is None:
        head = Head(invocation_id, "", "", b"\xc0", b"\x90", [], 0.0, frame.kind)
        if page is not None and page.layout is not None:  # a paged snapshot starts here
            head.slots = [Slot(hd, [NOT_STARTED] * hd.instance_count) for hd in page.layout]
            head.next_fid = page.next_fid
    if frame.correlation_id is not None:
        head.correlation_id = frame.correlation_id
    if frame.schema_version is not None:
        head.schema_version = frame.schema_version
    if frame.state is not None:
        head.state = bytes(frame.state)
    elif frame.state_splice is not None:
        head.state = apply_splice(head.state, frame.state_splice)
    if frame.parent_states is not None:
        head.parent_states = bytes(frame.parent_states)
    if frame.positions_from >= 0:
        del head.positions[frame.positions_from :]
        head.positions.extend(frame.positions)
        head.pos_src = None
    if frame.layout is not None:
        old = {s.header.fid: s for s in head.slots}
        head.slots = [
            old.get(hd.fid) or Slot(hd, [NOT_STARTED] * hd.instance_count) for hd in frame.layout
        ]
        head.next_fid = max([head.next_fid, *(hd.fid + 1 for hd in frame.layout)])
    _apply_instances(head, frame.instances)
    if page is not None:
        _apply_page(head, page, seq)
    head.last_saved_at = frame.saved_at
    head.kind = frame.kind
    head.seq = seq
    return head


def _apply_instances(head: Head, changes: tuple[InstanceChange, ...]) -> None:
    if not changes:
        return
    by_fid = {s.header.fid: s for s in head.slots}
    for ch in changes:
        slot = by_fid[ch.fid]
        slot.instances[ch.index] = ch.progress
        slot.src = None
        slot.synced = False


def _apply_page(head: Head, page: InstancePage, seq: int) -> None:
    """Restate instances ``page.start:page.stop`` of fan-out ``page.fid`` (after the frame's
    changes): what the page lists, the rest not started. A page of a fan-out the record no
    longer holds restates nothing."""
    for slot in head.slots:
        if slot.header.fid == page.fid:
            break
    else:
        return
    insts = slot.instances
    if not 0 <= page.start <= page.stop <= len(insts):
        raise CorruptFrame(
            f"seq {seq}: a snapshot page covers instances {page.start}..{page.stop} of "
            f"fan-out {slot.header.fan_out_node_name!r}, which has {len(insts)}; run verify()"
        )
    insts[page.start : page.stop] = [NOT_STARTED] * (page.stop - page.start)
    for ch in page.instances:
        insts[ch.index] = ch.progress
    slot.src = None
    slot.synced = False


def to_record(head: Head) -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id=head.invocation_id,
        correlation_id=head.correlation_id,
        state=_decode_any.decode(head.state),
        completed_positions=tuple(head.positions),
        parent_states=tuple(_decode_any.decode(head.parent_states)),
        last_saved_at=head.last_saved_at,
        schema_version=head.schema_version,
        fan_out_progress=tuple(
            FanOutProgress(
                s.header.fan_out_node_name,
                s.header.namespace,
                s.header.instance_count,
                tuple(s.instances),
                s.header.lineage,
            )
            for s in head.slots
        ),
    )


def snapshot(
    head: Head,
    instances: Any = None,
    batch: tuple[InstanceChange, ...] = (),
    instance_saved_at: tuple[float, ...] = (),
) -> Snapshot:
    """The full-record frame equal to ``head``; ``instances``: its started instances already
    encoded (a ``msgspec.Raw`` of :func:`started_changes`), ``batch`` / ``instance_saved_at``:
    the ``save_instance`` calls the frame commits (kept for forensics; the fold ignores them)."""
    return Snapshot(
        kind=head.kind,
        saved_at=head.last_saved_at,
        invocation_id=head.invocation_id,
        correlation_id=head.correlation_id,
        schema_version=head.schema_version,
        state=head.state,
        parent_states=head.parent_states,
        positions=tuple(head.positions),
        layout=tuple(s.header for s in head.slots),
        instances=started_changes(head.slots) if instances is None else instances,
        next_fid=head.next_fid,
        batch=batch,
        instance_saved_at=instance_saved_at,
    )


def started_changes(slots: Iterable[Slot]) -> tuple[InstanceChange, ...]:
    """``InstanceChange(fid, index, progress)`` for every instance of ``slots`` but those
    :func:`~eventlog.records.is_not_started` (what a snapshot or a full save lists), in order,
    at C speed (``p != NOT_STARTED`` is ``not is_not_started(p)``: an instance equal to it,
    itself included, is left out)."""
    out: list[InstanceChange] = []
    for s in slots:
        insts = s.instances
        keep = list(map(operator.ne, insts, itertools.repeat(NOT_STARTED)))
        out += map(
            InstanceChange,
            itertools.repeat(s.header.fid),
            itertools.compress(range(len(insts)), keep),
            itertools.compress(insts, keep),
        )
    return tuple(out)


# -- computing a delta from a caller's record -----------------------------------------------


class Incoming(msgspec.Struct):
    """A record to save, with its state and parent states already encoded by the caller (a
    Struct: built in C, one per save)."""

    kind: str
    record: Any  # ours or any object with openarmature's attribute names
    state: bytes
    parent_states: bytes
    seen: tuple[Seen, ...] = ()  # what the caller's check saw of each fan-out


def _same_instance(a: Any, b: Any) -> bool:
    """Cheap equality for a new vs previous instance of the same index (see module invariants)."""
    if a is b:
        return True
    if a.state != b.state or bool(a.result_is_error) != bool(b.result_is_error):
        return False
    if len(a.completed_inner_positions) != len(b.completed_inner_positions):
        return False
    return a.state != "completed" or a.result is b.result or a.result == b.result


_OURS: Final = frozenset((NodePosition,))


def _positions(src: Any) -> tuple[NodePosition, ...]:
    """``src`` as a tuple of our NodePosition (``_OURS.issuperset(map(type, src))``, checked
    first inline by the callers: ``tuple(src)``, at C speed)."""
    return tuple(map(position_from, src))


def _positions_delta(head: Head | None, new_src: Any) -> tuple[int, tuple[NodePosition, ...]]:
    """``(positions_from, positions)`` of the frame taking ``head``'s positions to ``new_src``
    (``-1, ()``: unchanged)."""
    if head is None:
        return (0, _positions(new_src)) if new_src else (-1, ())
    old_src = head.pos_src
    if old_src is not None:
        if new_src is old_src:
            return -1, ()
        n = len(old_src)
        if new_src[:n] == old_src:  # grew by appending (a shorter new_src is never equal)
            if len(new_src) == n:
                return -1, ()
            added = new_src[n:]
            return n, tuple(added) if _OURS.issuperset(map(type, added)) else _positions(added)
    new = tuple(new_src) if _OURS.issuperset(map(type, new_src)) else _positions(new_src)
    old = head.positions
    if not new or not old or new[0] != old[0]:  # the usual replaced position: nothing common
        return (0, new) if new or old else (-1, ())
    limit = min(len(new), len(old))
    common = 1
    while common < limit and new[common] == old[common]:
        common += 1
    if common == len(old) == len(new):
        return -1, ()
    return common, new[common:]


def delta(head: Head | None, inc: Incoming, invocation_id: str) -> tuple[Save, Head]:
    """The delta frame from ``head`` to ``inc``, and the new head.

    Updates ``head`` in place (no O(fan-out size) copies on the hot path): a caller that
    discards the frame must also discard ``head``.
    """
    rec = inc.record
    positions_src = rec.completed_positions
    if rec.__class__ is CheckpointRecord:  # ours: its fields are there (no getattr)
        schema = rec.schema_version or ""
        progress: Any = rec.fan_out_progress
    else:
        schema = getattr(rec, "schema_version", "") or ""
        progress = getattr(rec, "fan_out_progress", ())
    pos_from, positions = _positions_delta(head, positions_src)
    if progress or (head is not None and head.slots):
        layout, changes, slots, next_fid = _fan_out_delta(head, progress, inc.seen)
    else:  # no fan-out before or now (_fan_out_delta's first answer)
        layout, changes, slots = None, (), None
        next_fid = head.next_fid if head is not None else 1
    if head is None:
        return _first_delta(inc, invocation_id, schema, pos_from, positions, layout, changes,
                            slots, next_fid)  # fmt: skip
    # Each changed field is set on the head as apply_inplace would by the frame, inline: it
    # takes the caller's bytes as they are (no re-splicing), and the fan-out changes are
    # applied already (``slots``).
    new = inc.state
    state: bytes | None = None
    splice: StateSplice | None = None
    if new != head.state:
        if len(new) >= SPLICE_MIN_BYTES:  # (splice_of's first case, inline)
            splice = splice_of(head.state, new)
        head.state = new if new.__class__ is bytes else bytes(new)
        if splice is None:
            state = new
    correlation = rec.correlation_id
    corr: str | None = None
    if correlation != head.correlation_id:
        head.correlation_id = corr = correlation
    schema_changed: str | None = None
    if schema != head.schema_version:
        head.schema_version = schema_changed = schema
    parents: bytes | None = None
    if inc.parent_states != head.parent_states:
        parents = inc.parent_states
        head.parent_states = parents if parents.__class__ is bytes else bytes(parents)
    saved_at = rec.last_saved_at
    if saved_at.__class__ is not float:
        saved_at = float(saved_at)
    frame = Save(
        kind=inc.kind,
        saved_at=saved_at,
        correlation_id=corr,
        schema_version=schema_changed,
        state=state,
        state_splice=splice,
        parent_states=parents,
        positions_from=pos_from,
        positions=positions,
        layout=layout,
        instances=changes,
    )
    if pos_from >= 0:
        head.positions[pos_from:] = positions
    head.pos_src = positions_src
    if slots is not None:  # (None: no fan-out before or now, head.slots is empty already)
        head.slots = slots
        head.next_fid = next_fid  # (_fan_out_delta counts on from head.next_fid: never less)
    head.last_saved_at = saved_at
    head.kind = inc.kind
    head.seq += 1
    return frame, head


def _first_delta(
    inc: Incoming,
    invocation_id: str,
    schema: str,
    pos_from: int,
    positions: tuple[NodePosition, ...],
    layout: tuple[FanOutHeader, ...] | None,
    changes: tuple[InstanceChange, ...],
    slots: list[Slot] | None,
    next_fid: int,
) -> tuple[Save, Head]:
    """:func:`delta` from no head: the whole record."""
    rec = inc.record
    frame = Save(
        kind=inc.kind,
        saved_at=float(rec.last_saved_at),
        correlation_id=rec.correlation_id,
        schema_version=schema,
        state=inc.state,
        parent_states=inc.parent_states,
        positions_from=pos_from,
        positions=positions,
        layout=layout,
        instances=changes,
    )
    # The head takes the caller's bytes as they are, and the fan-out changes are applied
    # already (``slots``).
    applied = msgspec.structs.replace(frame, layout=None, instances=())
    after = apply_inplace(None, applied, 1, invocation_id)
    assert after is not None
    after.pos_src = rec.completed_positions
    if slots is not None:
        after.slots = slots
    after.next_fid = max(after.next_fid, next_fid)
    return frame, after


def _changed_indices(
    slot: Slot, new_src: Any, old_src: Any, seen: Seen | None = None
) -> tuple[list[int], list[str], list[Any]]:
    """Indices of ``new_src`` that differ from the slot, with ``new_src``'s states and results.

    Against the caller's previous tuple, an instance can differ only if its state or its result
    object changed, or it is in flight (it may have gained inner positions): those candidates
    are found by comparing whole lists in C, then checked one by one. Without a previous tuple,
    every instance is compared with the slot's own. ``seen``: what the caller's check found
    (eventlog.validate.Seen); its lists, and its candidates when its base is ``old_src``.
    """
    if seen is not None and seen.instances is new_src:
        states, results = seen.states, seen.results
    else:
        seen = None
        states = [x.state for x in new_src]
        results = [x.result for x in new_src]
    if old_src is None or slot.states is None or len(slot.states) != len(states):
        base = old_src if old_src is not None else slot.instances
        diff = [i for i, inst in enumerate(new_src) if not _same_instance(inst, base[i])]
        return diff, states, results
    if seen is not None and seen.changed is not None and seen.base is old_src:
        candidates = seen.changed  # the same comparison, made by the caller's check
    else:
        candidates = set(_differing(states, slot.states))
        candidates.update(_differing(results, slot.results))
        candidates.update(slot.in_flight)
    diff = sorted(i for i in candidates if not _same_instance(new_src[i], old_src[i]))
    return diff, states, results


def _fan_out_delta(
    head: Head | None, progress: Any, seen: tuple[Seen, ...] = ()
) -> tuple[tuple[FanOutHeader, ...] | None, tuple[InstanceChange, ...], list[Slot] | None, int]:
    """``(layout or None, instance changes, updated slots, next fid)``; updates slots in place."""
    old_slots = head.slots if head is not None else []
    next_fid = head.next_fid if head is not None else 1
    if not progress and not old_slots:
        return None, (), None, next_fid
    by_key = {s.key: s for s in old_slots}
    changes: list[InstanceChange] = []
    slots: list[Slot] = []
    for k, fp in enumerate(progress):
        lineage = lineage_from(getattr(fp, "enclosing_fan_out_lineage", ()))
        key = (fp.fan_out_node_name, tuple(fp.namespace), lineage, fp.instance_count)
        slot = by_key.pop(key, None)
        new_src = fp.instances
        if slot is None:
            header = FanOutHeader(next_fid, key[0], key[1], key[3], lineage)
            next_fid += 1
            slot = Slot(header, [NOT_STARTED] * header.instance_count)
            old_src = None
        elif new_src is slot.src:
            slots.append(slot)
            continue
        else:
            old_src = slot.src
        instances = slot.instances
        fid = slot.header.fid
        changed, states, results = _changed_indices(
            slot, new_src, old_src, seen[k] if k < len(seen) else None
        )
        for i in changed:
            # Checked before the save was queued (eventlog.validate); checked again here, as
            # the writer may see changes that check skipped as unchanged (another base).
            check_instance(new_src[i], f"record.fan_out_progress[{k}].instances[{i}]", False)
            conv = instance_from(new_src[i])
            if conv != instances[i]:
                instances[i] = conv
                slot.synced = False
                changes.append(InstanceChange(fid, i, conv))
        if old_src is None or slot.states is None:
            slot.in_flight = {i for i, st in enumerate(states) if st == "in_flight"}
        else:
            slot.in_flight = {i for i in (*slot.in_flight, *changed) if states[i] == "in_flight"}
        slot.states, slot.results = states, results
        slot.src = new_src
        slots.append(slot)
    old_order = [s.header.fid for s in old_slots]
    new_order = [s.header.fid for s in slots]
    layout = tuple(s.header for s in slots) if old_order != new_order else None
    return layout, tuple(changes), slots, next_fid
