"""``load`` of a big head returns its big fan-outs lazily (issue 22): the record's
``instances`` is a :class:`~eventlog.lazy.LazyInstances` that reads chunks of the fan-out rows
on access, pinned to the seq the record was loaded at, and behaves as the tuple it stands for.
The 10,000,000-instance timing is in docs/benchmarks.md ("Issue 22")."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends import lmdb_txn
from eventlog.checkpoints import CheckpointLog
from eventlog.codec import enc_hook
from eventlog.errors import InstancesUnavailable, SeqOutOfRange
from eventlog.lazy import LazyInstances
from eventlog.records import (
    NOT_STARTED,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutInternalSaveBatching,
    FanOutProgress,
)

# -- the sequence against the tuple it stands for ---------------------------------------------


def _progress(i: int) -> FanOutInstanceProgress:
    return FanOutInstanceProgress("completed", i) if i % 3 else NOT_STARTED


class _Source:
    def __init__(self, values: tuple[FanOutInstanceProgress, ...]) -> None:
        self.values = values
        self.reads = 0

    def __call__(self, start: int, stop: int) -> list[FanOutInstanceProgress]:
        self.reads += 1
        return list(self.values[start:stop])


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("index"), st.integers(-40, 40)),
        st.tuples(
            st.just("slice"),
            st.tuples(
                st.none() | st.integers(-40, 40),
                st.none() | st.integers(-40, 40),
                st.none() | st.integers(-5, 5).filter(bool),
            ),
        ),
        st.tuples(st.just("whole"), st.sampled_from(["len", "iter", "reversed", "eq", "hash",
                                                     "repr", "pickle", "add", "mul", "lt"])),
        st.tuples(st.just("contains"), st.integers(-2, 40)),
    ),
    max_size=25,
)  # fmt: skip


def _apply(seq: Any, op: tuple[str, Any]) -> Any:
    kind, arg = op
    try:
        if kind == "index":
            return seq[arg]
        if kind == "slice":
            return seq[slice(*arg)]
        if kind == "contains":
            p = _progress(arg)
            return (p in seq, seq.count(p), seq.index(p) if p in seq else None)
        return {
            "len": lambda: len(seq),
            "iter": lambda: list(seq),
            "reversed": lambda: list(reversed(seq)),
            "eq": lambda: (seq == tuple(map(_progress, range(len(seq)))), seq != ()),
            "hash": lambda: hash(seq),
            "repr": lambda: repr(seq),
            "pickle": lambda: pickle.loads(pickle.dumps(seq)),
            "add": lambda: (seq + (NOT_STARTED,), (NOT_STARTED,) + seq),  # noqa: RUF005 (the tuple protocol)
            "mul": lambda: seq * 2,
            "lt": lambda: (seq < (NOT_STARTED,) * 3, (NOT_STARTED,) * 3 < seq),  # noqa: SIM300
        }[arg]()
    except (IndexError, ValueError, TypeError) as e:
        return type(e)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 33), chunk=st.integers(1, 9), ops=_ops)
def test_lazy_sequence_equals_the_eager_tuple(n: int, chunk: int, ops: list[Any]) -> None:
    eager = tuple(map(_progress, range(n)))
    lazy = LazyInstances(n, chunk, _Source(eager))
    assert lazy == eager
    assert eager == lazy
    assert not (lazy != eager)  # noqa: SIM202 (__ne__ itself)
    assert not (eager != lazy)  # noqa: SIM202
    assert lazy == LazyInstances(n, chunk + 1, _Source(eager))
    for op in ops:
        assert _apply(lazy, op) == _apply(eager, op), op
    if n:
        other = (*eager[:-1], FanOutInstanceProgress("in_flight"))
        assert lazy != other
        assert other != lazy
        assert lazy != LazyInstances(n, chunk, _Source(other))
    assert lazy != list(eager)  # a tuple is never equal to a list either
    assert msgspec.msgpack.Encoder(enc_hook=enc_hook).encode(lazy) == msgspec.msgpack.encode(eager)


def test_memory_stays_within_a_few_chunks() -> None:
    eager = tuple(map(_progress, range(100)))
    src = _Source(eager)
    lazy = LazyInstances(100, 10, src)
    assert list(lazy) == list(eager)
    assert src.reads == 10
    assert lazy._cache == {}  # iteration keeps nothing
    for i in range(100):
        assert lazy[i] == eager[i]
    assert len(lazy._cache) <= 4
    assert src.reads == 20
    assert lazy[99] == eager[99]
    assert src.reads == 20


# -- load of a paged head ---------------------------------------------------------------------

N = 5_000
OVER = 1_000
CHUNK = 512


def _job(n: int) -> CheckpointRecord:
    return CheckpointRecord(
        invocation_id="job", correlation_id="c", state={"s": 1}, completed_positions=(),
        parent_states=(), last_saved_at=1.0, schema_version="1",
        fan_out_progress=(FanOutProgress("fan", (), n, (NOT_STARTED,) * n),),
    )  # fmt: skip


def _open(path: Path, **kw: Any) -> CheckpointLog:
    cl = CheckpointLog.open(path, durability="process", **kw)
    cl.lazy_instances_over, cl.lazy_chunk_rows = OVER, CHUNK
    return cl


def _built(path: Path, n: int = N) -> CheckpointLog:
    cl = _open(path)
    cl.save("job", _job(n))
    cl.save_instances("job", "fan", [(i, _progress(i)) for i in range(0, n, 2)])
    return cl


def _expected(n: int = N) -> tuple[FanOutInstanceProgress, ...]:
    return tuple(_progress(i) if i % 2 == 0 else NOT_STARTED for i in range(n))


class _Counted:
    """Rows returned by LMDB read transactions, counted while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        cls = lmdb_txn.LmdbRead
        for name in ("rows", "prefix_rows"):
            self._wrap_list(monkeypatch, cls, name)
        orig_scan = cls.scan
        orig_get = cls.get

        def scan(txn: Any, *a: Any, **k: Any) -> Iterator[Any]:
            for x in orig_scan(txn, *a, **k):
                self.rows += 1
                yield x

        def get(txn: Any, *a: Any, **k: Any) -> Any:
            self.rows += 1
            return orig_get(txn, *a, **k)

        monkeypatch.setattr(cls, "scan", scan)
        monkeypatch.setattr(cls, "get", get)

    def _wrap_list(self, monkeypatch: pytest.MonkeyPatch, cls: Any, name: str) -> None:
        orig = getattr(cls, name)

        def wrapped(txn: Any, *a: Any, **k: Any) -> Any:
            out = orig(txn, *a, **k)
            self.rows += len(out)
            return out

        monkeypatch.setattr(cls, name, wrapped)


@pytest.mark.parametrize("n", [N, 4 * N])
def test_load_of_a_paged_head_reads_o1_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    cl = _built(tmp_path, n)
    counted = _Counted(monkeypatch)
    record = cl.load("job")
    assert record is not None
    assert counted.rows <= 12, counted.rows  # the head row, the stream id, state: not N rows
    instances = record.fan_out_progress[0].instances
    assert isinstance(instances, LazyInstances)
    assert len(instances) == n
    counted.rows = 0
    assert instances[n - 2] == _progress(n - 2)
    assert counted.rows <= CHUNK + 12  # one chunk (and the head row it is checked against)
    assert instances == _expected(n)
    assert _expected(n) == instances
    cl.close()


def test_small_heads_stay_tuples_and_equal_the_lazy_load(tmp_path: Path) -> None:
    cl = _built(tmp_path)
    lazy = cl.load("job")
    cl.lazy_instances_over = N  # not above: eager
    eager = cl.load("job")
    assert lazy is not None
    assert eager is not None
    assert type(eager.fan_out_progress[0].instances) is tuple
    assert lazy == eager
    assert eager == lazy
    assert hash(lazy.fan_out_progress) == hash(eager.fan_out_progress)
    assert repr(lazy) == repr(eager)
    assert pickle.loads(pickle.dumps(lazy)) == eager
    assert msgspec.msgpack.Encoder(enc_hook=enc_hook).encode(lazy) == msgspec.msgpack.encode(eager)
    assert cl.record_at("job", cl.log.last_seq("job")) == lazy
    with pytest.raises(TypeError):  # an encoder without ckptlog's hook: materialize first
        msgspec.msgpack.encode(lazy)
    cl.close()


def test_values_stay_those_of_the_loaded_seq_after_the_log_moves_on(tmp_path: Path) -> None:
    cl = _built(tmp_path)
    record = cl.load("job")
    assert record is not None
    instances = record.fan_out_progress[0].instances
    assert instances[0] == _progress(0)  # chunk 0 read while the head is at the loaded seq
    cl.save_instances("job", "fan", [(i, FanOutInstanceProgress("in_flight")) for i in range(N)])
    assert instances == _expected()  # the other chunks come from record_at of the loaded seq
    now = cl.load("job")
    assert now is not None
    assert all(x.state == "in_flight" for x in now.fan_out_progress[0].instances)
    cl.close()


def test_a_record_that_cannot_be_rebuilt_raises_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cl = _built(tmp_path)
    record = cl.load("job")
    assert record is not None
    cl.save_instance("job", "fan", 1, FanOutInstanceProgress("in_flight"))

    def gone(*_: Any) -> None:
        raise SeqOutOfRange("pruned")

    monkeypatch.setattr(cl, "record_at", gone)
    with pytest.raises(InstancesUnavailable, match="load the invocation again"):
        record.fan_out_progress[0].instances[N - 1]
    cl.close()


@pytest.mark.parametrize("via", ["save", "save_fan_out_internal"])
def test_resume_after_load(tmp_path: Path, via: str) -> None:
    """A resumed job: reopen, load (lazily), run what is left while reading the record, then
    re-save the loaded record as an engine does; the head ends with every instance done."""
    _built(tmp_path).close()
    cl = _open(tmp_path, batching=FanOutInternalSaveBatching(flush_every=64))
    record = cl.load("job")
    assert record is not None
    fan = record.fan_out_progress[0]
    assert isinstance(fan.instances, LazyInstances)
    todo = [i for i, x in enumerate(fan.instances) if x.state != "completed"]
    record_at_load = cl.record_at("job", cl.log.last_seq("job"))
    assert record_at_load is not None
    record_at_load = record_at_load.fan_out_progress[0].instances
    assert todo == cl.pending_instances("job", "fan")
    for i in todo:  # the head moves on under the sequence being read
        assert fan.instances[i].state == "not_started"
        cl.save_instance("job", "fan", i, FanOutInstanceProgress("completed", -i))
    cl.flush()
    getattr(cl, via)("job", msgspec.structs.replace(record, state={"s": 2}))
    kept = fan.instances.materialize()  # the save kept the tuple it checked: saving again
    assert kept is fan.instances.materialize()  # passes the same object to the checks
    assert kept == record_at_load
    cl.flush()
    done = cl.load("job")
    assert done is not None
    assert done.state == {"s": 2}
    # the re-saved record restated the loaded instances: what it held wins
    assert done.fan_out_progress[0].instances == record.fan_out_progress[0].instances
    assert cl.verify().ok
    cl.close()


def test_export_content_of_a_lazy_record_equals_the_eager_one(tmp_path: Path) -> None:
    from eventlog.forensics.export import record_content  # noqa: PLC0415

    cl = _built(tmp_path)
    lazy = cl.load("job")
    cl.lazy_instances_over = N
    eager = cl.load("job")
    assert lazy is not None
    assert eager is not None
    assert msgspec.json.encode(record_content(lazy)) == msgspec.json.encode(record_content(eager))
    cl.close()


def test_openarmature_load_of_a_big_head(tmp_path: Path) -> None:
    import asyncio  # noqa: PLC0415

    from eventlog.integrations.openarmature import OpenArmatureCheckpointer  # noqa: PLC0415

    _built(tmp_path).close()
    oa = OpenArmatureCheckpointer.open(tmp_path, durability="process", typed_states=False)
    oa.sync.lazy_instances_over, oa.sync.lazy_chunk_rows = OVER, CHUNK
    loaded = asyncio.run(oa.load("job"))
    assert loaded is not None
    (fan,) = loaded.fan_out_progress
    assert type(fan.instances) is tuple
    assert [x.state for x in fan.instances] == [x.state for x in _expected()]
    asyncio.run(oa.save_fan_out_internal("job", loaded))  # the engine re-saves what it loaded
    again = oa.sync.load("job")
    assert again is not None
    assert again.fan_out_progress[0].instances == _expected()
    oa.close()
