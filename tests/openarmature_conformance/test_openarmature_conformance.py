"""openarmature 0.17.0's own checkpoint test suites, run against ckptlog.

Their sdist ships ``tests/conformance/test_checkpoint.py`` (the spec's checkpoint fixtures
024-076), ``tests/conformance/test_state_migration.py`` (fixtures 039-047) and
``tests/unit/test_checkpoint.py``. Each run below executes those three files, unmodified, in a
subprocess pytest with ``ckptlog_oa_plugin`` substituting the backend they hard-wire:

- ``theirs``: openarmature's ``InMemoryCheckpointer`` / ``SQLiteCheckpointer`` (the baseline);
- ``ours``: ``eventlog.integrations.openarmature.OpenArmatureCheckpointer`` on LMDB;
- ``plain``: ``eventlog.checkpoints.Checkpointer`` itself (what the integration adds).

The contract: every test that passes on theirs passes on ours, except those listed in
``EXCEPTIONS`` (each with its reason, also listed in docs/integrations/openarmature.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DOC = REPO / "docs" / "integrations" / "openarmature.md"
SUITES = (
    "tests/conformance/test_checkpoint.py",
    "tests/conformance/test_state_migration.py",
    "tests/unit/test_checkpoint.py",
)
UNIT = "tests.unit.test_checkpoint"
CONF = "tests.conformance.test_checkpoint"
MIGRATION = "tests.conformance.test_state_migration"

# Outcomes of their suite on their own backends (openarmature 0.17.0, sdist pinned by hash).
THEIR_COUNTS = {"passed": 63, "failed": 0, "skipped": 1}

# Tests that pass on theirs and fail on ours, with the reason (mirrored in the docs).
EXCEPTIONS: dict[str, str] = {
    f"{UNIT}::test_sqlite_serialization_mismatch_raises": (
        "a SQLite-specific knob: a database written with serialization='pickle' must refuse to "
        "load in 'json' mode; ckptlog has one structural encoding, so any checkpointer loads "
        "any record and there is no mismatch to detect"
    ),
}

# Why the plain Checkpointer (ckptlog's msgspec records, dict states) fails where ours passes.
_REPLACE = "the engine migrates a record with dataclasses.replace, which refuses a msgspec Struct"
_EQUAL = "compares loaded records or positions with openarmature's dataclasses by =="
PLAIN_FAILURES: dict[str, str] = {
    f"{CONF}::test_checkpoint_fixture[056-checkpoint-fan-out-count-drift]": (
        "the harness calls .model_dump() on the loaded state (a dict here) and then "
        "dataclasses.replace on the record"
    ),
    **{
        f"{MIGRATION}::test_state_migration_fixture[{fixture}]": _REPLACE
        for fixture in (
            "039-state-migration-additive-field",
            "040-state-migration-chain",
            "043-state-migration-parent-states-migrated",
            "044-state-migration-post-migration-deserialization-fails",
        )
    },
    **{
        f"{UNIT}::{name}": _EQUAL
        for name in (
            "test_in_memory_round_trip",
            "test_sqlite_pickle_round_trip",
            "test_sqlite_json_round_trip_with_pydantic_state",
            "test_sqlite_json_round_trips_enclosing_fan_out_lineage",
        )
    },
    f"{UNIT}::test_nested_fan_out_in_instance_resume_round_trips": (
        "it wraps save on the instance and expects unbatched fan-out saves to go through it, "
        "as InMemoryCheckpointer routes them"
    ),
}


class Run(msgspec.Struct, frozen=True):
    outcomes: dict[str, str]  # test id -> passed | failed | skipped
    built: dict[str, dict[str, int]]  # test id -> {"theirs": n, "ours": m}
    output: str

    def counts(self) -> dict[str, int]:
        c = Counter(self.outcomes.values())
        return {k: c.get(k, 0) for k in ("passed", "failed", "skipped")}

    def with_outcome(self, outcome: str) -> set[str]:
        return {t for t, o in self.outcomes.items() if o == outcome}


def _outcomes(junit: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            out[test_id] = "failed"
        elif "skipped" in tags:
            out[test_id] = "skipped"
        else:
            out[test_id] = "passed"
    return out


def run_suite(sdist: Path, backend: str, work: Path) -> Run:
    work.mkdir(parents=True, exist_ok=True)
    junit, counts = work / "junit.xml", work / "built.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
        PYTHONDONTWRITEBYTECODE="1",
        CKPTLOG_OA_BACKEND=backend,
        CKPTLOG_OA_TMP=str(work),
        CKPTLOG_OA_COUNTS=str(counts),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "ckptlog_oa_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            "-W",
            "error::pytest.PytestConfigWarning",
            f"--junitxml={junit}",
            *SUITES,
        ],
        cwd=sdist,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = proc.stdout + proc.stderr
    # pytest exits 1 when tests fail (expected for some runs); anything else is a broken run.
    assert proc.returncode in (0, 1), output
    built: dict[str, dict[str, int]] = msgspec.json.decode(counts.read_bytes())
    return Run(_outcomes(junit), built, output)


@pytest.fixture(scope="module")
def runs(openarmature_sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    base = tmp_path_factory.mktemp("oa-conformance")
    names = ("theirs", "ours", "plain")
    with ThreadPoolExecutor(len(names)) as pool:  # three subprocesses at once: most is waiting
        futures = {b: pool.submit(run_suite, openarmature_sdist, b, base / b) for b in names}
        result = {b: f.result() for b, f in futures.items()}
    print()  # shown with -s: the counts the docs quote
    for name, r in result.items():
        print(f"openarmature 0.17.0 checkpoint suites on {name}: {r.counts()}")
    return result


def _node_id(test_id: str) -> str:
    """``tests.unit.test_checkpoint::test_x`` -> ``tests/unit/test_checkpoint.py::test_x``."""
    module, name = test_id.split("::", 1)
    return f"{module.replace('.', '/')}.py::{name}"


@pytest.mark.slow
def test_their_suite_on_their_backends_is_the_baseline(runs: dict[str, Run]) -> None:
    theirs = runs["theirs"]
    assert theirs.counts() == THEIR_COUNTS, theirs.output[-3000:]
    assert len(theirs.outcomes) == sum(THEIR_COUNTS.values())


def test_every_test_passing_on_theirs_passes_on_ours(runs: dict[str, Run]) -> None:
    theirs, ours = runs["theirs"], runs["ours"]
    assert set(ours.outcomes) == set(theirs.outcomes)
    regressions = theirs.with_outcome("passed") - ours.with_outcome("passed")
    assert regressions == set(EXCEPTIONS), ours.output[-5000:]
    assert ours.with_outcome("skipped") == theirs.with_outcome("skipped")
    assert ours.counts() == {
        "passed": THEIR_COUNTS["passed"] - len(EXCEPTIONS),
        "failed": len(EXCEPTIONS),
        "skipped": THEIR_COUNTS["skipped"],
    }


def test_the_substitution_is_complete(runs: dict[str, Run]) -> None:
    """Every backend their tests built was ours, one for one, and none of theirs was built."""
    theirs, ours = runs["theirs"], runs["ours"]
    assert sum(c["theirs"] for c in theirs.built.values()) > 50
    for node_id, c in theirs.built.items():
        assert c["ours"] == 0
        assert ours.built[node_id] == {"theirs": 0, "ours": c["theirs"]}, node_id


def test_plain_checkpointer_fails_only_where_records_must_be_openarmatures(
    runs: dict[str, Run],
) -> None:
    plain = runs["plain"]
    assert plain.with_outcome("failed") == set(EXCEPTIONS) | set(PLAIN_FAILURES), plain.output[
        -5000:
    ]


def test_the_docs_list_every_exception_and_the_counts(runs: dict[str, Run]) -> None:
    doc = DOC.read_text(encoding="utf-8")
    for test_id in EXCEPTIONS:
        assert _node_id(test_id) in doc, f"{_node_id(test_id)} is not listed in {DOC.name}"
    for name in ("theirs", "ours"):
        c: dict[str, Any] = runs[name].counts()
        row = f"| {c['passed']} | {c['failed']} | {c['skipped']} |"
        assert row in doc, f"{DOC.name} does not show {name}'s counts as {row!r}"
