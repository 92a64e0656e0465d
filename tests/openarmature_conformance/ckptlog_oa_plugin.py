"""pytest plugin loaded into openarmature's own test suite (``-p ckptlog_oa_plugin``).

openarmature 0.17's checkpoint suites hard-wire their reference backends:
``InMemoryCheckpointer`` in ``tests/conformance/test_checkpoint.py`` and
``tests/unit/test_checkpoint.py``, ``SQLiteCheckpointer`` in
``tests/conformance/test_state_migration.py`` (JSON mode) and ``tests/unit/test_checkpoint.py``.
This plugin replaces those module globals after collection with counting factories:

- ``CKPTLOG_OA_BACKEND=theirs``: the factories build openarmature's own backends (the baseline);
- ``CKPTLOG_OA_BACKEND=ours``: they build ckptlog's ``OpenArmatureCheckpointer`` on a fresh
  LMDB log under ``CKPTLOG_OA_TMP`` (``InMemoryCheckpointer`` and SQLite pickle mode -> typed
  states, as those backends return the saved Pydantic instances; SQLite JSON mode -> dict states,
  as that backend returns dicts);
- ``CKPTLOG_OA_BACKEND=plain``: they build the plain ``eventlog.checkpoints.Checkpointer``
  (ckptlog's own msgspec records, dict states), to show what the integration adds.

Every checkpointer of ours built for a test is closed after it.

``CKPTLOG_OA_COUNTS`` names a JSON file that receives, per test node id, how many checkpointers
of each kind the test built (``{"theirs": n, "ours": m}``), so the runner can check that the
substitution was complete. The plugin also runs ``async def`` tests (openarmature uses
pytest-asyncio's auto mode; one fresh event loop per test here, as there).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# module -> the backend names it must have (a rename upstream fails loudly, never runs theirs)
PATCHED: dict[str, tuple[str, ...]] = {
    "tests.conformance.test_checkpoint": ("InMemoryCheckpointer",),
    "tests.conformance.test_state_migration": ("SQLiteCheckpointer",),
    "tests.unit.test_checkpoint": ("InMemoryCheckpointer", "SQLiteCheckpointer"),
}
KINDS = ("theirs", "ours", "plain")

_built: dict[str, int] = {"theirs": 0, "ours": 0}
_open: list[Any] = []
_counts: dict[str, dict[str, int]] = {}
_tmp_root: list[Path] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    # openarmature's pyproject sets pytest-asyncio's option; declare it so pytest does not warn.
    parser.addini("asyncio_mode", "accepted for openarmature's pyproject; tests run here")


def _backend() -> str:
    """The backend kind this run substitutes (one of ``KINDS``)."""
    kind = os.environ.get("CKPTLOG_OA_BACKEND", "")
    if kind not in KINDS:
        raise pytest.UsageError(f"CKPTLOG_OA_BACKEND must be one of {KINDS}, got {kind!r}")
    return kind


def _fresh_dir(label: str) -> Path:
    if not _tmp_root:
        base = os.environ.get("CKPTLOG_OA_TMP") or None
        _tmp_root.append(Path(tempfile.mkdtemp(prefix="ckptlog-oa-", dir=base)))
    return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=_tmp_root[0]))


def _ours(path: Path, batching: Any, *, typed_states: bool) -> Any:
    if _backend() == "plain":
        from eventlog.checkpoints import Checkpointer  # noqa: PLC0415

        cp: Any = Checkpointer.open(path, fan_out_internal_save_batching=batching)
    else:
        from eventlog.integrations.openarmature import OpenArmatureCheckpointer  # noqa: PLC0415

        cp = OpenArmatureCheckpointer.open(
            path, fan_out_internal_save_batching=batching, typed_states=typed_states
        )
    _built["ours"] += 1
    _open.append(cp)
    return cp


def _in_memory_factory(kind: str) -> Callable[..., Any]:
    from openarmature.checkpoint import InMemoryCheckpointer  # noqa: PLC0415

    def build(*, fan_out_internal_save_batching: Any = None) -> Any:
        if kind != "theirs":
            return _ours(_fresh_dir("mem"), fan_out_internal_save_batching, typed_states=True)
        _built["theirs"] += 1
        return InMemoryCheckpointer(fan_out_internal_save_batching=fan_out_internal_save_batching)

    return build


def _sqlite_factory(kind: str) -> Callable[..., Any]:
    from openarmature.checkpoint import SQLiteCheckpointer  # noqa: PLC0415

    def build(path: Any, serialization: str = "pickle", **kw: Any) -> Any:
        if kind != "theirs":
            # The test's database path becomes the log directory: reopening the same path
            # (their durability test) reopens the same log.
            return _ours(Path(path), None, typed_states=serialization != "json")
        _built["theirs"] += 1
        return SQLiteCheckpointer(path, serialization=serialization, **kw)

    return build


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    kind = _backend()
    factories = {"InMemoryCheckpointer": _in_memory_factory, "SQLiteCheckpointer": _sqlite_factory}
    for module_name, names in PATCHED.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue  # not selected in this run
        for name in names:
            if not hasattr(module, name):
                raise pytest.UsageError(
                    f"{module_name} has no {name} to substitute: openarmature's suite changed; "
                    "update PATCHED in ckptlog_oa_plugin.py"
                )
            setattr(module, name, factories[name](kind))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    fn = pyfuncitem.obj
    if not inspect.iscoroutinefunction(fn):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(fn(**args))
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _built.update(theirs=0, ours=0)
    try:
        return (yield)
    finally:
        _counts[item.nodeid] = dict(_built)
        while _open:
            _open.pop().sync.close()  # Checkpointer and OpenArmatureCheckpointer alike


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("CKPTLOG_OA_COUNTS")
    if out:
        Path(out).write_text(json.dumps(_counts, indent=1, sort_keys=True), encoding="utf-8")
    if _tmp_root and not os.environ.get("CKPTLOG_OA_TMP"):
        shutil.rmtree(_tmp_root[0], ignore_errors=True)  # ours to remove; a given dir is not
