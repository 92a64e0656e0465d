"""``langgraph-checkpoint-conformance`` against LmdbSaver: all 81 tests, async and sync APIs.

Run twice: through the package's own ``validate()`` (one saver per capability suite) and test
by test with a fresh saver each (a shared saver can hide bugs, e.g. a write that only works
because an earlier test created the thread). The suite calls the async API; the sync API is
exercised through :class:`SyncAPI`, whose async methods call LmdbSaver's sync ones.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
    Capability,
)
from langgraph.checkpoint.conformance.spec.test_copy_thread import ALL_COPY_THREAD_TESTS
from langgraph.checkpoint.conformance.spec.test_delete_for_runs import (
    ALL_DELETE_FOR_RUNS_TESTS,
)
from langgraph.checkpoint.conformance.spec.test_delete_thread import ALL_DELETE_THREAD_TESTS
from langgraph.checkpoint.conformance.spec.test_get_tuple import ALL_GET_TUPLE_TESTS
from langgraph.checkpoint.conformance.spec.test_list import ALL_LIST_TESTS
from langgraph.checkpoint.conformance.spec.test_prune import ALL_PRUNE_TESTS
from langgraph.checkpoint.conformance.spec.test_put import ALL_PUT_TESTS
from langgraph.checkpoint.conformance.spec.test_put_writes import ALL_PUT_WRITES_TESTS

from backends.memory import MemoryBackend
from eventlog.integrations.langgraph import LmdbSaver

SPEC: dict[Capability, list[Callable[[BaseCheckpointSaver[Any]], Any]]] = {
    Capability.PUT: ALL_PUT_TESTS,
    Capability.PUT_WRITES: ALL_PUT_WRITES_TESTS,
    Capability.GET_TUPLE: ALL_GET_TUPLE_TESTS,
    Capability.LIST: ALL_LIST_TESTS,
    Capability.DELETE_THREAD: ALL_DELETE_THREAD_TESTS,
    Capability.DELETE_FOR_RUNS: ALL_DELETE_FOR_RUNS_TESTS,
    Capability.COPY_THREAD: ALL_COPY_THREAD_TESTS,
    Capability.PRUNE: ALL_PRUNE_TESTS,
}
BASE_TESTS = 58
ALL_TESTS = 81


class SyncAPI(BaseCheckpointSaver[str]):
    """The conformance suite awaits ``a*`` methods; these call LmdbSaver's sync methods."""

    def __init__(self, inner: LmdbSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for tup in self.inner.list(config, filter=filter, before=before, limit=limit):
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)


def _saver(path: Path, api: str) -> tuple[LmdbSaver, BaseCheckpointSaver[Any]]:
    saver = LmdbSaver.open(path, durability="process")
    return saver, (saver if api == "async" else SyncAPI(saver))


def _check_report(report: Any) -> None:
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert not failures, failures
    assert report.conformance_level() == "FULL"
    assert {c.value for c in BASE_CAPABILITIES | EXTENDED_CAPABILITIES} == {
        name for name, r in report.results.items() if r.detected and r.passed
    }
    base = sum(report.results[c.value].tests_passed for c in BASE_CAPABILITIES)
    total = sum(r.tests_passed for r in report.results.values())
    assert (base, total) == (BASE_TESTS, ALL_TESTS)
    assert sum(r.tests_failed + r.tests_skipped for r in report.results.values()) == 0


def test_the_suite_has_81_tests() -> None:
    base = sum(len(SPEC[c]) for c in BASE_CAPABILITIES)
    assert (base, sum(map(len, SPEC.values()))) == (BASE_TESTS, ALL_TESTS)


@pytest.mark.parametrize("api", ["async", "sync"])
def test_validate(api: str, tmp_path: Path) -> None:
    counter = itertools.count()
    opened: list[LmdbSaver] = []

    @checkpointer_test(name=f"LmdbSaver-{api}")
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        saver, facade = _saver(tmp_path / f"suite-{next(counter)}", api)
        opened.append(saver)
        yield facade
        saver.close()

    report = asyncio.run(validate(factory))
    _check_report(report)
    assert len(opened) == len(SPEC)  # one fresh saver per capability suite
    assert all(s.log.closed for s in opened)


def test_validate_on_the_memory_backend() -> None:
    @checkpointer_test(name="LmdbSaver-memory")
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        saver = LmdbSaver.on_backend(MemoryBackend())
        yield saver
        saver.close()

    _check_report(asyncio.run(validate(factory)))


def _each_test() -> Iterator[Any]:
    for api in ("async", "sync"):
        for cap, tests in SPEC.items():
            for fn in tests:
                yield pytest.param(api, fn, id=f"{api}-{cap.value}-{fn.__name__}")


@pytest.mark.parametrize(("api", "spec_test"), list(_each_test()))
def test_fresh_saver_per_test(
    api: str, spec_test: Callable[[BaseCheckpointSaver[Any]], Any], tmp_path: Path
) -> None:
    saver, facade = _saver(tmp_path / "lg", api)
    try:
        asyncio.run(spec_test(facade))
        report = saver.verify()  # the views still equal the fold of the log
        assert report.ok, str(report)
    finally:
        saver.close()


def test_sync_adapter_overrides_every_async_method() -> None:
    # Capability detection looks at overridden methods: the adapter must not inherit any.
    names = [
        "aget_tuple",
        "alist",
        "aput",
        "aput_writes",
        "adelete_thread",
        "adelete_for_runs",
        "acopy_thread",
        "aprune",
    ]
    mapping: Mapping[str, Any] = vars(SyncAPI)
    assert all(n in mapping for n in names)
