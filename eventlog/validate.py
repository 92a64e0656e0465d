"""Strict validation of what a save hands to the log, before anything is queued.

msgspec Structs (and openarmature's dataclasses) do not check field types when built in
Python, while the log's decoders do: a wrongly typed field that reached a frame or a row would
be acknowledged and then fail every later read. So every save entry point checks its record,
instances, positions and arguments here, by type, as the typed decoders will check them, and
raises :class:`~eventlog.errors.InvalidRecord` naming the field path (``record.
fan_out_progress[0].instances[2].state``), what was expected and what was found.

What the decoders accept: ``str`` (and subclasses) for str fields; ``int`` (not ``bool``,
within int64) for int fields; ``int`` or ``float`` (not ``bool``) for float
fields; a ``tuple`` or ``list`` for sequences (both encode as one msgpack array); states and
results must encode structurally (:func:`eventlog.codec.encode_value`).

Cost: O(fields) per record, except fan-out instances, checked incrementally by
:class:`RecordChecker`: an instance whose ``state`` and ``result`` are those of the same index
in the invocation's previously checked record (and that was not in flight) is, by the fan-out
contract (instances only move not_started -> in_flight -> completed), the instance checked
then; the writer skips it as unchanged too (projections.records), and checks again, strictly,
any instance it does write (:func:`check_instance`).
"""

from __future__ import annotations

import collections
import gc
import itertools
import operator
import reprlib
import threading
from collections.abc import Mapping
from typing import Annotated, Any, Final, NoReturn

import msgspec

from eventlog.codec import check_lossless, enc_hook, encode_value, too_deep
from eventlog.errors import EncodingError, InvalidRecord
from eventlog.records import (
    CheckpointRecord,
    FanOutInstanceProgress,
    NodePosition,
    instance_from,
)

STATES: Final = frozenset(("completed", "in_flight", "not_started"))
_INT_MIN: Final = -(2**63)
_INT_END: Final = 2**63  # int64: what every int field holds (msgpack itself goes to 2**64)
Int = Annotated[int, msgspec.Meta(ge=_INT_MIN, le=_INT_END - 1)]
_SEQ: Final = (tuple, list)
_repr = reprlib.Repr()
_repr.maxstring = 40
_repr.maxother = 40


def _found(value: Any) -> str:
    return f"{type(value).__name__} {_repr.repr(value)}"


def fail(path: str, expected: str, value: Any) -> NoReturn:
    raise InvalidRecord(
        f"{path} must be {expected}, got {_found(value)}; nothing was saved: fix the value "
        "(the log's decoders accept only the declared types)"
    )


def is_int(v: Any) -> bool:
    t = type(v)
    if t is not int and (t is bool or not isinstance(v, int)):
        return False
    return bool(_INT_MIN <= v < _INT_END)


def is_float(v: Any) -> bool:
    t = type(v)
    if t is float:
        return True
    if t is bool or not isinstance(v, (int, float)):
        return False
    return isinstance(v, float) or _INT_MIN <= v < _INT_END


def check_str(v: Any, path: str) -> None:
    if type(v) is not str and not isinstance(v, str):
        fail(path, "a str", v)


def check_int(v: Any, path: str) -> None:
    if not is_int(v):
        fail(path, "an int (not a bool) in [-2**63, 2**63)", v)


def check_float(v: Any, path: str) -> None:
    if not is_float(v):
        fail(path, "a float or int (not a bool, a datetime, a Decimal or a str)", v)


def check_seq(v: Any, path: str) -> None:
    if type(v) not in _SEQ:
        fail(path, "a tuple (or list)", v)


def check_strs(v: Any, path: str) -> None:
    """A tuple of str (a namespace)."""
    check_seq(v, path)
    for i, s in enumerate(v):
        if type(s) is not str:
            check_str(s, f"{path}[{i}]")


def _attr(obj: Any, name: str, path: str, kind: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        fail(path, f"a {kind} (an object with attribute {name!r})", obj)


def check_position(p: Any, path: str) -> None:
    """A NodePosition, ours or any object with its attribute names."""
    ns = _attr(p, "namespace", path, "NodePosition")
    if ns.__class__ is not tuple or ns:
        check_strs(ns, f"{path}.namespace")
    name = _attr(p, "node_name", path, "NodePosition")
    if type(name) is not str:
        check_str(name, f"{path}.node_name")
    step = _attr(p, "step", path, "NodePosition")
    if type(step) is not int or not _INT_MIN <= step < _INT_END:
        check_int(step, f"{path}.step")
    attempt = getattr(p, "attempt_index", 0)
    if type(attempt) is not int or not _INT_MIN <= attempt < _INT_END:
        check_int(attempt, f"{path}.attempt_index")
    index = getattr(p, "fan_out_index", None)
    if index is not None and not is_int(index):
        fail(f"{path}.fan_out_index", "None or an int (not a bool)", index)


class _Position(msgspec.Struct):
    """NodePosition's fields as the decoder types them (read from attributes by convert)."""

    namespace: tuple[str, ...]
    node_name: str
    step: Int
    attempt_index: Int = 0
    fan_out_index: Int | None = None


class _Positions(msgspec.Struct, array_like=True):
    """``(positions,)`` as :func:`check_positions` converts it: a Struct, so msgspec reads the
    type once (a bare ``tuple[_Position, ...]`` is read again at every call, ~1.5 us)."""

    items: tuple[_Position, ...]


_is_mapping_class: Final = Mapping.__subclasscheck__  # issubclass(t, Mapping), minus a lookup


_INLINE_POSITIONS: Final = 4  # this few of ours are checked inline (convert's fixed cost,
# ~2 us, is more than theirs)


def _plain_positions(ps: Any, start: int) -> bool:
    """Whether ``ps[start:]`` are all our NodePosition with fields ``convert`` (strict) takes
    at once: exact str (ASCII: no lone surrogate), exact int in int64, None. ``False`` when any
    is not (convert then decides, with its messages)."""
    for i in range(start, len(ps)):
        p = ps[i]
        if p.__class__ is not NodePosition:
            return False
        ns, name, step = p.namespace, p.node_name, p.step
        if ns.__class__ is not tuple or name.__class__ is not str or not name.isascii():
            return False
        for s in ns:
            if s.__class__ is not str or not s.isascii():
                return False
        if step.__class__ is not int or not _INT_MIN <= step < _INT_END:
            return False
        attempt, index = p.attempt_index, p.fan_out_index
        if attempt.__class__ is not int or not _INT_MIN <= attempt < _INT_END:
            return False
        if index is not None and (index.__class__ is not int or not _INT_MIN <= index < _INT_END):
            return False
    return True


def check_positions(ps: Any, path: str, start: int = 0) -> None:
    """A tuple of NodePosition (from index ``start``): a few of ours checked inline, else one
    ``msgspec.convert`` (in C) when all are valid; the checks of :func:`check_position` name
    the first bad one."""
    if type(ps) not in _SEQ:
        fail(path, "a tuple (or list)", ps)
    if len(ps) <= start:
        return
    if (
        len(ps) - start <= _INLINE_POSITIONS
        and _plain_positions(ps, start)
        and not (start and any(map(_is_mapping_class, set(map(type, ps)))))
    ):
        return  # (a mapping anywhere is refused below, as convert's path always did)
    try:
        msgspec.convert(
            (ps[start:] if start else ps,), _Positions, from_attributes=True, strict=True
        )
    except (msgspec.ValidationError, UnicodeEncodeError) as e:  # (a lone surrogate in a str)
        error: Exception | None = e
    else:
        error = None
        if not any(map(_is_mapping_class, set(map(type, ps)))):
            return  # (convert also takes a mapping for a Struct; the writer does not)
    for i in range(start, len(ps)):
        check_position(ps[i], f"{path}[{i}]")
    msg, _, where = str(error).partition(" - at `$[0]")  # ([0]: the wrapper's field)
    if start:
        msg += f" (index counted from {start})"
    fail(f"{path}{where.rstrip('`')}", f"as declared ({msg})", ps)


def check_lineage(objs: Any, path: str) -> None:
    check_seq(objs, path)
    for i, o in enumerate(objs):
        p = f"{path}[{i}]"
        check_strs(_attr(o, "namespace", p, "EnclosingFanOutInstance"), f"{p}.namespace")
        check_str(
            _attr(o, "fan_out_node_name", p, "EnclosingFanOutInstance"), f"{p}.fan_out_node_name"
        )
        check_int(_attr(o, "fan_out_index", p, "EnclosingFanOutInstance"), f"{p}.fan_out_index")


def check_result(result: Any, path: str) -> int:
    """The result's encoded size; :class:`EncodingError` naming the path when it does not encode."""
    return len(encode_value(result, path))


def check_instance(x: Any, path: str, result: bool = True) -> None:
    """A FanOutInstanceProgress, ours or any object with its attribute names (its result
    only when ``result``: the writer leaves that to the frame's encoder)."""
    state = _attr(x, "state", path, "FanOutInstanceProgress")
    if not isinstance(state, str) or state not in STATES:
        fail(f"{path}.state", "one of 'completed', 'in_flight', 'not_started'", state)
    err = getattr(x, "result_is_error", False)
    if err is not True and err is not False:
        fail(f"{path}.result_is_error", "a bool", err)
    inner = getattr(x, "completed_inner_positions", ())
    if inner.__class__ is not tuple or inner:
        check_positions(inner, f"{path}.completed_inner_positions")
    if result:
        check_result(getattr(x, "result", None), f"{path}.result")


def _check_instances(instances: Any, idx: list[int] | None, path: str) -> None:
    """Check ``instances[i]`` for ``i`` in ``idx`` (all when None), fast when all are valid:
    one pass per field and one encode of all results; the slow path names the first bad one."""
    sub = list(instances) if idx is None else [instances[i] for i in idx]
    at = range(len(sub)) if idx is None else idx
    try:  # C-level passes (map), no per-instance Python objects: a 10,000,000-instance
        # record is checked without allocating 10,000,000 tuples
        states = set(map(_state, sub))
        errs = set(map(type, map(_is_error, sub)))
        inner = list(map(_inner, sub))
        ok = states <= STATES and errs <= {bool} and all(s.__class__ is str for s in states)
        if ok:
            encode_value(list(map(_result, sub)))
    except (AttributeError, TypeError, EncodingError):
        ok = False
    if ok:
        if set(map(type, inner)) <= {tuple} and not any(inner):
            return  # no inner positions anywhere
        for j, ps in enumerate(inner):
            if ps.__class__ is not tuple or ps:
                check_positions(ps, f"{path}[{at[j]}].completed_inner_positions")
        return
    for j, x in enumerate(sub):
        check_instance(x, f"{path}[{at[j]}]")
    fail(path, "a tuple of FanOutInstanceProgress", instances)  # not reached: one failed


def check_fan_out_header(fp: Any, path: str) -> Any:
    """Everything of a FanOutProgress but its instances' contents; returns the instances."""
    check_str(_attr(fp, "fan_out_node_name", path, "FanOutProgress"), f"{path}.fan_out_node_name")
    check_strs(_attr(fp, "namespace", path, "FanOutProgress"), f"{path}.namespace")
    count = _attr(fp, "instance_count", path, "FanOutProgress")
    check_int(count, f"{path}.instance_count")
    instances = _attr(fp, "instances", path, "FanOutProgress")
    check_seq(instances, f"{path}.instances")
    if count != len(instances):
        raise InvalidRecord(
            f"{path}.instance_count is {count} but {path}.instances holds {len(instances)}; "
            "nothing was saved: list one progress entry per instance (not_started included)"
        )
    check_lineage(getattr(fp, "enclosing_fan_out_lineage", ()), f"{path}.enclosing_fan_out_lineage")
    return instances


class Seen:
    """What was checked of one fan-out: its instances tuple, their states and results, and
    (``base``, ``changed``) the previously checked tuple and the candidate changes against it.

    The writer's change detection (projections.records) reuses these lists, and ``changed``
    when its own base is ``base``, so a save does not pay for both.
    """

    __slots__ = ("base", "changed", "in_flight", "instances", "key", "results", "states")

    def __init__(
        self,
        key: tuple[Any, ...],
        instances: Any,
        states: list[Any],
        results: list[Any],
        base: Seen | None = None,
        changed: set[int] | None = None,
    ) -> None:
        self.key = key  # (fan_out_node_name, namespace, instance_count)
        self.instances = instances
        self.states = states
        self.results = results
        self.base = None if base is None else base.instances
        self.changed = changed
        # Indices in flight: from the base's and the changed ones (an instance that is in
        # flight now either was, or changed), or, without a base, from every state.
        self.in_flight: set[int]
        if base is not None and changed is not None:
            candidates: set[int] = base.in_flight | changed
            self.in_flight = {i for i in candidates if states[i] == "in_flight"}
        else:
            self.in_flight = {i for i, s in enumerate(states) if s == "in_flight"}


_LINEAR_BELOW: Final = 32  # ranges this short are compared item by item


def differing(new: list[Any], old: list[Any]) -> list[int]:
    """Indices where ``new[i] != old[i]`` (lists of one length), in ascending order.

    Whole ranges are compared in C (list equality checks identity first, so unchanged
    instances cost a pointer compare) and only unequal ranges are halved: k changes of N cost
    O(N) pointer compares plus O(k log N) range compares, not N Python steps. Shared with the
    writer's change detection (projections.records).
    """
    if new == old:
        return []
    out: list[int] = []
    todo = [(0, len(new))]
    while todo:
        lo, hi = todo.pop()
        if hi - lo <= _LINEAR_BELOW:
            out.extend(i for i in range(lo, hi) if new[i] != old[i])
            continue
        mid = (lo + hi) // 2
        if new[mid:hi] != old[mid:hi]:
            todo.append((mid, hi))
        if new[lo:mid] != old[lo:mid]:
            todo.append((lo, mid))
    return out


_RECORD_FIELDS: Final = (
    "state", "correlation_id", "last_saved_at", "parent_states", "completed_positions",
)  # fmt: skip


class RecordChecker:
    """Checks records before they are queued, remembering per invocation (the most recent
    ``entries_max``) the fan-out instances it checked, so that a save of a wide fan-out checks
    only the instances that changed (see the module docstring). Thread-safe."""

    def __init__(self, entries_max: int) -> None:
        # invocation id -> (its last checked completed_positions, what was seen of its fan-outs)
        self._seen: collections.OrderedDict[str, tuple[Any, tuple[Seen, ...]]] = (
            collections.OrderedDict()
        )
        self._max = entries_max
        self._lock = threading.Lock()

    def check(self, invocation_id: str, rec: Any) -> tuple[Seen, ...]:
        """Check every field of ``rec`` (state and parent states are encoded by the caller);
        returns what was seen of each of its fan-outs (for the writer's change detection)."""
        if rec.__class__ is not CheckpointRecord and (  # (ours: no tuple isinstance)
            isinstance(rec, (dict, list, tuple, str, bytes)) or rec is None
        ):
            fail("record", "a CheckpointRecord (or an object with its attributes)", rec)
        try:  # the common case inline (a save checks every record: no call per field); the
            # state is only required here (the caller encodes it)
            _, cid, saved = rec.state, rec.correlation_id, rec.last_saved_at
            parents, positions = rec.parent_states, rec.completed_positions
        except AttributeError:  # the first missing one, named
            _, cid, saved, parents, positions = (
                _attr(rec, name, "record", "CheckpointRecord") for name in _RECORD_FIELDS
            )
        if type(cid) is not str:
            check_str(cid, "record.correlation_id")
        ours = rec.__class__ is CheckpointRecord  # (its fields are there: no getattr)
        schema = rec.schema_version if ours else getattr(rec, "schema_version", "")
        if type(schema) is not str:
            check_str(schema, "record.schema_version")
        if type(saved) is not float:
            check_float(saved, "record.last_saved_at")
        if type(parents) not in _SEQ:
            check_seq(parents, "record.parent_states")
        if type(positions) not in _SEQ:
            check_seq(positions, "record.completed_positions")
        progress = rec.fan_out_progress if ours else getattr(rec, "fan_out_progress", ())
        if type(progress) not in _SEQ:
            check_seq(progress, "record.fan_out_progress")
        # (the lock taken by acquire/release: a with statement binds its two methods each time)
        (lock := self._lock).acquire()
        try:
            old_positions, before = self._seen.get(invocation_id, ((), ()))
        finally:
            lock.release()
        # Positions the previous check saw, the same objects (a resume map that grows), are
        # not checked again: only the ones after that prefix.
        start = 0
        if old_positions and all(map(operator.is_, positions, old_positions)):
            start = min(len(positions), len(old_positions))
        check_positions(positions, "record.completed_positions", start)
        seen = (
            tuple([
                self._check_fan_out(
                    fp, f"record.fan_out_progress[{k}]", before[k] if k < len(before) else None
                )
                for k, fp in enumerate(progress)
            ])
            if progress
            else ()
        )  # fmt: skip
        lock.acquire()
        try:
            (known := self._seen)[invocation_id] = (positions, seen)
            known.move_to_end(invocation_id)
            while len(known) > self._max:
                known.popitem(last=False)
        finally:
            lock.release()
        return seen

    @staticmethod
    def _check_fan_out(fp: Any, path: str, old: Seen | None) -> Seen:
        """One FanOutProgress: its header, and its instances that changed since ``old``."""
        instances = check_fan_out_header(fp, path)
        key = (fp.fan_out_node_name, tuple(fp.namespace), len(instances))
        if old is not None and old.key != key:
            old = None  # another fan-out at this place: nothing of it was seen
        if old is not None and old.instances is instances:
            return old
        ipath = f"{path}.instances"
        try:
            states = [x.state for x in instances]
            results = [x.result for x in instances]
        except AttributeError:
            _check_instances(instances, None, ipath)  # names the bad one, and raises
            raise
        if old is None or len(old.states) != len(states):
            _check_instances(instances, None, ipath)
            return Seen(key, instances, states, results)
        idx = set(differing(states, old.states))
        idx.update(differing(results, old.results))
        idx.update(old.in_flight)
        if idx:
            _check_instances(instances, sorted(idx), ipath)
        return Seen(key, instances, states, results, old, idx)

    def forget(self, invocation_id: str) -> None:
        with self._lock:
            self._seen.pop(invocation_id, None)


def check_event(ev: Any) -> None:
    """An :class:`~eventlog.frames.Event` handed to ``EventLog.append`` (its data is checked
    when the frame is encoded: ``EncodingError`` naming the path)."""
    check_str(ev.name, "event.name")
    check_float(ev.at, "event.at")


def check_fan_out_key(fan_out_node_name: Any, namespace: Any, lineage: Any) -> None:
    """The arguments of ``save_instance`` naming the fan-out."""
    check_str(fan_out_node_name, "fan_out_node_name")
    check_strs(namespace, "namespace")
    check_lineage(lineage, "lineage")


def check_instance_save(index: Any, progress: Any, saved_at: Any) -> None:
    """The arguments of ``save_instance`` naming the instance and its progress (all but the
    result, which :func:`encode_progress` checks as it encodes it)."""
    if (index.__class__ is not int or index < 0 or index >= _INT_END) and (
        not is_int(index) or index < 0
    ):
        fail("index", "an int >= 0 (not a bool)", index)
    if progress.__class__ is FanOutInstanceProgress:  # ours: the common case, checked inline
        state = progress.state
        if state.__class__ is not str or state not in STATES:
            fail("progress.state", "one of 'completed', 'in_flight', 'not_started'", state)
        err = progress.result_is_error
        if err is not True and err is not False:
            fail("progress.result_is_error", "a bool", err)
        inner = progress.completed_inner_positions
        if inner.__class__ is not tuple or inner:
            check_positions(inner, "progress.completed_inner_positions")
    else:
        if progress is None or isinstance(progress, (dict, list, tuple, str)):
            fail(
                "progress", "a FanOutInstanceProgress (or an object with its attributes)", progress
            )
        check_instance(progress, "progress", result=False)
    if saved_at is not None and saved_at.__class__ is not float and not is_float(saved_at):
        fail(
            "saved_at",
            "None or a float/int timestamp (not a datetime, a Decimal or a str)",
            saved_at,
        )


def encode_progress(progress: FanOutInstanceProgress, index: int) -> bytes:
    """The msgpack bytes of a checked instance progress, as its row and frames store it;
    :class:`EncodingError` naming ``instances[index].result`` when its result does not encode."""
    try:
        raw = _progress_encoder.encode(progress)
    except RecursionError as e:
        raise too_deep(f"instances[{index}].result", e) from None
    except (TypeError, ValueError, OverflowError, NotImplementedError):
        check_result(progress.result, f"instances[{index}].result")  # raises, naming the path
        raise
    check_lossless(progress.result, f"instances[{index}].result")
    return raw


_progress_encoder: Final = msgspec.msgpack.Encoder(enc_hook=enc_hook)


_progress_decoder: Final = msgspec.msgpack.Decoder(FanOutInstanceProgress)


def decoded_progresses(raws: list[bytes]) -> list[FanOutInstanceProgress]:
    """Each of ``raws`` (progresses encoded by :func:`encode_progress` or
    :func:`quick_progress`, so lossless) decoded back: new objects equal to those encoded,
    sharing nothing with them, for a holder that must not keep a caller's mutable results
    (a result dict changed after its save would otherwise change the holder's copy too)."""
    return list(map(_progress_decoder.decode, raws))


QUICK_ERRORS: Final = (
    TypeError,
    ValueError,
    OverflowError,
    NotImplementedError,
    RecursionError,
    RuntimeError,
)
"""What a quick check may meet (the exact checks then decide): an encoding error, or the
``RuntimeError`` of a dict another thread resized while it was walked."""


def check_instance_items(items: list[Any]) -> tuple[list[int], list[Any], list[bytes]]:
    """``save_instances``' items, each an ``(index, progress)`` pair, checked as a whole:
    ``(indices, progresses, encoded progresses)``. Nothing is returned unless every item
    passes; the first bad one raises what ``save_instance`` would for it, naming the item.

    Fast when all are valid: the fields are checked in bulk, each progress is encoded and
    decoded back in C, and an item whose decoded form equals it is lossless; only items that
    differ go through the exact check (:func:`check_lossless`), so the same values are
    refused with the same messages."""
    if not items:
        return [], [], []
    if set(map(type, items)) != {tuple} or set(map(len, items)) != {2}:
        for k, it in enumerate(items):
            if not isinstance(it, (tuple, list)) or len(it) != 2:
                fail(f"items[{k}]", "an (index, FanOutInstanceProgress) pair", it)
    indices = list(map(_first, items))
    progs = list(map(_second, items))
    fast = (
        set(map(type, indices)) == {int}
        and min(indices) >= 0
        and max(indices) < _INT_END
        and set(map(type, progs)) <= {FanOutInstanceProgress}
    )
    if fast:
        states = set(map(_state, progs))
        fast = (
            states <= STATES
            and all(s.__class__ is str for s in states)
            and set(map(type, map(_is_error, progs))) <= {bool}
            # no inner positions: each the empty tuple (one object in CPython), in one pass
            and all(map(operator.is_, map(_inner, progs), itertools.repeat(_NO_POSITIONS)))
        )
    if not fast:
        for k, (index, x) in enumerate(zip(indices, progs, strict=True)):
            _item_check(k, index, x)
        progs = [x if x.__class__ is FanOutInstanceProgress else instance_from(x) for x in progs]
    try:
        raws = list(map(_progress_encoder.encode, progs))
    except (TypeError, ValueError, OverflowError, NotImplementedError, RecursionError):
        for index, x in zip(indices, progs, strict=True):
            encode_progress(x, index)  # raises, naming the first that does not encode
        raise
    try:
        same = plain_results(list(map(_result, progs))) or (
            list(map(_progress_decoder.decode, raws)) == progs
        )
    except msgspec.DecodeError:
        same = False
    if not same:
        for index, x in zip(indices, progs, strict=True):
            check_lossless(x.result, f"instances[{index}].result")
    return indices, progs, raws


_NO_POSITIONS: Final[tuple[Any, ...]] = ()  # the empty tuple (one object in CPython)
_first: Final = operator.itemgetter(0)
_second: Final = operator.itemgetter(1)
_state: Final = operator.attrgetter("state")
_inner: Final = operator.attrgetter("completed_inner_positions")
_is_error: Final = operator.attrgetter("result_is_error")
_result: Final = operator.attrgetter("result")


def _item_check(k: int, index: Any, progress: Any) -> None:
    try:
        check_instance_save(index, progress, None)
    except InvalidRecord as e:
        raise InvalidRecord(f"save_instances items[{k}] (index {index!r}): {e}") from None


_SCALARS: Final = frozenset((str, int, float, bool, type(None)))
_SCALARS_DICT: Final = _SCALARS | {dict}
_referents: Final = gc.get_referents


def plain_results(results: list[Any]) -> bool:
    """Whether every result is lossless at once, at C speed: a scalar, or a dict of exact
    ``str`` keys and scalar values (what ``check_lossless`` clears at once). A dict's
    referents are its values alone exactly when every key is an exact ``str``."""
    kinds = set(map(type, results))
    if not _SCALARS_DICT.issuperset(kinds):
        return False
    dicts = results if kinds == {dict} else [r for r in results if r.__class__ is dict]
    if not dicts:
        return True
    refs = _referents(*dicts)
    return len(refs) == sum(map(len, dicts)) and _SCALARS.issuperset(map(type, refs))


LOOP_KEYS_MAX: Final = 6  # a dict result of up to this many keys is cleared by a loop, which
# costs less than plain_results' C-speed test up to here (about 1/5 of that test's fixed cost
# a key)


def plain_result(r: Any) -> bool:
    """:func:`plain_results` of one result: a small dict walked in a loop (cheaper). May raise
    ``RuntimeError`` (a dict another thread resized while it was walked)."""
    if r.__class__ is dict:
        if len(r) > LOOP_KEYS_MAX:
            return plain_results([r])
        for k in r:  # noqa: SIM110 - a loop: all() of a generator costs more
            if k.__class__ is not str or r[k].__class__ not in _SCALARS:
                return False
        return True
    return r.__class__ in _SCALARS


def quick_progress(progress: FanOutInstanceProgress) -> bytes | None:
    """``progress`` encoded, when it is plainly valid and lossless; ``None`` when it needs
    :func:`encode_progress`'s exact checks (which then accept or refuse it as always).

    Its other fields are the caller's to check. Lossless: a scalar result, or a dict of str
    keys and scalar values (what ``check_lossless`` clears at once), or one that decodes back
    equal (a typed decode, in C)."""
    try:
        raw = _progress_encoder.encode(progress)
        if plain_result(progress.result):
            return raw
    except QUICK_ERRORS:
        return None
    try:
        if _progress_decoder.decode(raw) == progress:
            return raw
    except msgspec.DecodeError:
        pass
    return None
