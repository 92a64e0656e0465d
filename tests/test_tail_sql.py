"""Issue 25: live tail (``ckptlog tail``, eventlog.read.tail) and SQL over the history
(``ckptlog export --format parquet``, ``ckptlog sql``; eventlog.read.tables and .parquet), on
every kind of log (checkpoint, LangGraph, techrevati, apflow, application events and one
mixing them), on LMDB and PostgreSQL.

The tail tests run the writer in another process (tests/tail_writer.py) and ``ckptlog tail``
in a third, and check that every frame the writer committed arrives as one line, in commit
order, each soon after it was built; the lag figures themselves are measured by
benchmarks/tail_lag.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import tail_writer

from eventlog import read
from eventlog.cli import main
from eventlog.errors import MissingExtra
from eventlog.frames import Event
from eventlog.log import EventLog
from eventlog.read import parquet
from eventlog.read.tables import SCHEMAS
from eventlog.read.tail import tail

TESTS = Path(__file__).resolve().parent
KINDS = (*tail_writer.KINDS, "mixed")
STREAM_KIND = {
    "checkpoint": {"checkpoint"},
    "langgraph": {"langgraph"},
    "techrevati": {"techrevati"},
    "apflow": {"apflow"},
    "events": {"events"},
    "mixed": {"checkpoint", "langgraph", "techrevati", "apflow", "events"},
}


def ckptlog(*args: str) -> tuple[int, str, str]:
    out, err = _Text(), _Text()
    code = main(list(args), out=out, err=err, isolate=False)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


class _Text:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, s: str) -> int:
        self.parts.append(s)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def getvalue(self) -> str:
        return "".join(self.parts)


class Tail:
    """``ckptlog tail ... --json`` in its own process; each line stamped when it arrived."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eventlog.cli", "tail", *args, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), json.loads(line)))

    def wait_for(self, enough: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not enough():
            if self.proc.poll() is not None:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                self.close()
                pytest.fail(f"tail exited with {self.proc.returncode}: {err}")
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                self.close()
                pytest.fail(f"tail printed {len(self.lines)} lines in {timeout} s")
            time.sleep(0.01)

    def interrupt(self) -> tuple[int, str]:
        """SIGINT to the ``ckptlog`` process (as ``kill -INT``): exit status and stderr."""
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=20)
        finally:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        self._reader.join(timeout=5)
        err = self.proc.stderr.read() if self.proc.stderr else ""
        self.close()
        return code, err

    def close(self) -> None:
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(params=["lmdb", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "lmdb":
        yield str(tmp_path / "log")
        return
    from pg_schemas import PgSchemas  # noqa: PLC0415 - psycopg only for these

    schemas = PgSchemas()
    try:
        yield schemas.url(tmp_path / "log")
    finally:
        schemas.drop_all()


def frames_of(location: str) -> list[tuple[int, str, int]]:
    """``(global seq, stream, seq)`` of every frame, in commit order, read in-process."""
    opened = read.open_log(location)
    try:
        return [(sf.global_seq, sf.stream, sf.seq) for sf in opened.log.log.scan()]
    finally:
        opened.close()


def write(location: str, kind: str, units: int) -> None:
    subprocess.run(
        [sys.executable, str(TESTS / "tail_writer.py"), location, kind, str(units)],
        check=True,
        timeout=300,
        capture_output=True,
    )


# -- live tail -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=[] if k == "checkpoint" else [pytest.mark.slow]) for k in KINDS]
)
def test_tail_prints_each_save_of_a_writer_in_another_process(location: str, kind: str) -> None:
    tail_writer.create(location)
    log = EventLog.open(location, durability="process", extra_tables=tail_writer.tables())
    log.append("events:marker", Event(name="ready", at=time.time()))
    log.close()
    t = Tail(location, "--from", "1")
    t.wait_for(lambda: len(t.lines) >= 1)  # the tail is live: it printed the marker
    write(location, kind, 8)
    expected = frames_of(location)
    t.wait_for(lambda: len(t.lines) >= len(expected))
    time.sleep(0.1)  # nothing more arrives
    code, err = t.interrupt()
    assert code == 0, err
    got = [(d["global_seq"], d["invocation_id"], d["seq"]) for _, d in t.lines]
    assert got == expected  # every frame once, in commit order
    live = [(at, d) for at, d in t.lines if d["invocation_id"] != "events:marker"]
    assert {d["stream_kind"] for _, d in live} == STREAM_KIND[kind]
    assert all(d["checksum"] and d["size"] > 0 and d["kind"] for _, d in live)
    # each line followed its frame's build (an upper bound of commit -> line): live, not
    # batched up at the end (the figures: benchmarks/tail_lag.py)
    lags = [at - d["saved_at"] for at, d in live]
    assert statistics.median(lags) < 1.0, sorted(lags)


def test_tail_of_one_stream_from_a_seq_then_live(tmp_path: Path) -> None:
    """The Python API: ``tail(log, stream, from_seq=...)`` yields that stream's frames from
    the seq, then the ones committed while it runs (another stream's are skipped), in order,
    and ends when ``stop()`` says so."""
    path = str(tmp_path / "log")
    log = EventLog.open(path, durability="process")
    for i in range(5):
        log.append("a", Event(name="old", data=i, at=time.time()))
        log.append("b", Event(name="other", data=i, at=time.time()))
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def follow() -> None:  # one process opens a path once: the tail reads the writer's log
        for row in tail(log, "a", from_seq=3, poll_seconds=0.005, stop=done.is_set):
            seen.append((row.seq, row.kind))  # noqa: PERF401 - read live by the test

    reader = threading.Thread(target=follow)
    reader.start()
    time.sleep(0.05)
    for i in range(4):
        log.append("b", Event(name="other", data=i, at=time.time()))
        log.append("a", Event(name="new", data=i, at=time.time()))
    deadline = time.monotonic() + 30
    while len(seen) < 7 and time.monotonic() < deadline:
        time.sleep(0.01)
    done.set()
    reader.join(timeout=10)
    log.close()
    assert seen == [(3, "old"), (4, "old"), (5, "old")] + [(s, "new") for s in range(6, 10)]


def test_tail_waits_for_a_stream_that_does_not_exist_yet(tmp_path: Path) -> None:
    path = str(tmp_path / "log")
    log = EventLog.open(path, durability="process")
    log.append("other", Event(name="x", at=time.time()))
    rows = tail(log, "later", poll_seconds=0.005)  # from now: the call
    log.append("later", Event(name="first", at=time.time()))
    log.append("other", Event(name="x", at=time.time()))
    log.append("later", Event(name="second", at=time.time()))
    got = [next(rows).kind, next(rows).kind]
    rows.close()
    log.close()
    assert got == ["first", "second"]


@pytest.mark.slow
def test_tail_command_follows_a_langgraph_thread_and_stops_on_sigint(tmp_path: Path) -> None:
    path = str(tmp_path / "log")
    tail_writer.create(path)
    write(path, "mixed", 4)
    t = Tail(path, "--thread", "lg-live", "--from", "2")
    lines = len([f for f in frames_of(path) if f[1].startswith("lg:")])
    t.wait_for(lambda: len(t.lines) >= lines - 1)
    code, err = t.interrupt()
    assert code == 0, err
    docs = [d for _, d in t.lines]
    assert [d["seq"] for d in docs] == list(range(2, lines + 1))
    assert {d["stream_kind"] for d in docs} == {"langgraph"}
    assert {"checkpoint", "writes"} <= {d["kind"] for d in docs}
    assert any(d["node"] == "step" for d in docs)


def test_tail_text_lines_and_usage_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "log")
    log = EventLog.open(path, durability="process")
    log.append("events:app", Event(name="tick", data={"i": 1}, at=time.time()))
    log.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "eventlog.cli", "tail", path, "--from", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 0
    proc.stdout.close()
    assert proc.stderr is not None
    proc.stderr.close()
    assert "events:app" in line
    assert "seq 1" in line
    assert "tick" in line
    assert "#1" in line
    assert ckptlog("tail", path, "--poll", "0")[0] == 2
    code, _, err = ckptlog("tail", path, "--from", "0")
    assert code == 2
    assert "--from counts from 1" in err


# -- tables, Parquet and SQL -------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("mixed") / "log")
    tail_writer.create(path)
    write(path, "mixed", 6)
    return path


def test_export_parquet_tables_on_every_kind_of_stream(mixed_log: str, tmp_path: Path) -> None:
    dest = tmp_path / "tables"
    code, _, err = ckptlog("export", mixed_log, str(dest), "--format", "parquet")
    assert code == 0, err
    tables = {t: pq.read_table(dest / f"{t}.parquet").to_pylist() for t in SCHEMAS}
    frames = frames_of(mixed_log)
    assert [(r["global_seq"], r["invocation"], r["seq"]) for r in tables["frames"]] == frames
    assert [(r["global_seq"], r["invocation"], r["seq"]) for r in tables["saves"]] == frames
    opened = read.open_log(mixed_log)
    try:
        sums = {sf.global_seq: sf.checksum.hex() for sf in opened.log.log.scan()}
    finally:
        opened.close()
    assert {r["global_seq"]: r["checksum"] for r in tables["frames"]} == sums
    kinds = {r["stream_kind"] for r in tables["saves"]}
    assert kinds == STREAM_KIND["mixed"]
    job = [r for r in tables["saves"] if r["invocation"] == "job-live"]
    assert {r["correlation"] for r in job} == {"batch-live"}
    inst = tables["instances"]
    assert [(r["fan_out"], r["index"], r["state"]) for r in inst] == [
        ("work", i, "completed") for i in range(6)
    ]
    assert [json.loads(r["result"]) for r in inst] == [{"value": i} for i in range(6)]
    lg = [f for f in frames if f[1].startswith("lg:")]
    cps = tables["lg_checkpoints"]
    assert {r["thread_id"] for r in cps} == {"lg-live"}
    assert len(cps) < len(lg)
    assert [r["step"] for r in cps] == list(range(-1, len(cps) - 1))
    writes = tables["lg_writes"]
    assert {r["node"] for r in writes} >= {"step"}
    assert any(json.loads(r["value"]) == 6 for r in writes if r["channel"] == "n")
    names = {r["name"] for r in tables["events"]}
    assert {"tick", "techrevati.checkpoint", "techrevati.step", "apflow.checkpoint"} <= names
    # an export never overwrites
    code, _, err = ckptlog("export", mixed_log, str(dest), "--format", "parquet")
    assert code == 2
    assert "not an empty directory" in err


def test_sql_answers_an_analysts_question(mixed_log: str) -> None:
    code, out, err = ckptlog(
        "sql",
        mixed_log,
        "SELECT stream_kind, count(*) AS saves, sum(size) AS bytes FROM saves "
        "GROUP BY ALL ORDER BY stream_kind",
        "--json",
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    frames = frames_of(mixed_log)
    assert [r["stream_kind"] for r in rows] == sorted(STREAM_KIND["mixed"])
    assert sum(r["saves"] for r in rows) == len(frames)
    code, out, _ = ckptlog(
        "sql", mixed_log, "SELECT fan_out, count(*) FILTER (WHERE state = 'completed') AS done "
        "FROM instances GROUP BY fan_out",
    )  # fmt: skip
    assert code == 0
    assert "work" in out
    assert "6" in out
    code, _, err = ckptlog("sql", mixed_log, "SELECT nope FROM saves")
    assert code == 2
    assert "the query failed" in err
    assert "--schema" in err
    code, out, _ = ckptlog("sql", mixed_log, "--schema")
    assert code == 0
    assert all(t in out for t in SCHEMAS)


def test_same_rows_from_lmdb_and_postgresql(mixed_log: str, tmp_path: Path) -> None:
    from pg_schemas import PgSchemas  # noqa: PLC0415

    schemas = PgSchemas()
    try:
        url = schemas.url(tmp_path / "pg")
        code, _, err = ckptlog("copy", mixed_log, url)
        assert code == 0, err
        for name, source in (("lmdb", mixed_log), ("pg", url)):
            code, _, err = ckptlog("export", source, str(tmp_path / name), "--format", "parquet")
            assert code == 0, err
        for t in SCHEMAS:
            a = pq.read_table(tmp_path / "lmdb" / f"{t}.parquet")
            b = pq.read_table(tmp_path / "pg" / f"{t}.parquet")
            assert a.num_rows > 0, t
            assert a.equals(b), t
        q = "SELECT invocation, seq, kind, node FROM saves ORDER BY global_seq"
        assert parquet.query(tmp_path / "lmdb", q).rows == ckptlog_rows(url, q)
    finally:
        schemas.drop_all()


def ckptlog_rows(location: str, q: str) -> list[tuple[Any, ...]]:
    opened = read.open_log(location)
    try:
        return parquet.query(opened.log.log, q).rows
    finally:
        opened.close()


def test_a_clear_error_without_the_sql_extra(
    mixed_log: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(MissingExtra, match=r"pip install 'ckptlog\[sql\]'") as info:
        parquet.query(tmp_path, "SELECT 1")
    assert info.value.extra == "sql"
    code, _, err = ckptlog("sql", mixed_log, "SELECT 1")
    assert code == 2
    assert "DuckDB" in err
    assert "pip install 'ckptlog[sql]'" in err
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    code, _, err = ckptlog("export", mixed_log, str(tmp_path / "t"), "--format", "parquet")
    assert code == 2
    assert "pyarrow" in err
    assert "pip install 'ckptlog[sql]'" in err
    assert not (tmp_path / "t").exists()


def test_parquet_batches_bound_memory(mixed_log: str, tmp_path: Path) -> None:
    """Tables are written a batch at a time: with batches of 4 rows the files hold the same
    rows in many row groups."""
    opened = read.open_log(mixed_log)
    try:
        rows = parquet.export_parquet(opened.log.log, tmp_path / "small", batch_rows=4)
        whole = parquet.export_parquet(opened.log.log, tmp_path / "whole")
    finally:
        opened.close()
    assert rows == whole
    small = pq.ParquetFile(tmp_path / "small" / "saves.parquet")
    assert small.metadata.num_row_groups > 1
    assert small.read().equals(pq.read_table(tmp_path / "whole" / "saves.parquet"))


KIND_TABLES = {
    "checkpoint": {"instances"},
    "langgraph": {"lg_checkpoints", "lg_writes"},
    "techrevati": {"events"},
    "apflow": {"events"},
    "events": {"events"},
}


@pytest.mark.parametrize("kind", tail_writer.KINDS)
def test_sql_over_a_log_of_each_kind(kind: str, tmp_path: Path) -> None:
    """Each kind of log on its own: every frame is a row of ``saves`` and ``frames``, its
    stream's kind is named, its own tables are filled and the others are empty."""
    path = str(tmp_path / "log")
    tail_writer.create(path)
    tail_writer.write(path, kind, 3)
    frames = frames_of(path)
    code, out, err = ckptlog(
        "sql", path, "SELECT 'saves' AS t, count(*) AS n FROM saves UNION ALL "
        + " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in SCHEMAS if t != "saves"),
        "--json",
    )  # fmt: skip
    assert code == 0, err
    counts = {r["t"]: r["n"] for r in map(json.loads, out.splitlines())}
    assert counts["saves"] == counts["frames"] == len(frames)
    filled = {t for t, n in counts.items() if n} - {"saves", "frames"}
    assert filled == KIND_TABLES[kind]
    code, out, _ = ckptlog("sql", path, "SELECT DISTINCT stream_kind FROM saves", "--json")
    assert [json.loads(line)["stream_kind"] for line in out.splitlines()] == [kind]


def test_a_damaged_frame_does_not_stop_a_tail(tmp_path: Path) -> None:
    """A frame whose payload was altered is printed as ``unreadable`` (named on stderr, exit
    status 1 at the end) and the tail carries on with the frames after it."""
    from test_corruption import damage, flip  # noqa: PLC0415 - its raw LMDB helpers

    path = tmp_path / "log"
    log = EventLog.open(path, durability="process")
    for i in range(3):
        log.append("events:a", Event(name="tick", data={"i": i}, at=time.time()))
    log.close()
    damage(path, lambda raw: raw.put_envelope("events:a", 2, flip(raw.envelope("events:a", 2), -3)))
    t = Tail(str(path), "--from", "1")
    t.wait_for(lambda: len(t.lines) >= 3)
    code, err = t.interrupt()
    assert code == 1
    assert [d["kind"] for _, d in t.lines] == ["tick", "unreadable", "tick"]
    assert t.lines[1][1]["global_seq"] == 2
    assert "checksum" in t.lines[1][1]["problem"]
    assert "ckptlog: unreadable:" in err


def test_a_damaged_frame_stops_a_parquet_export_and_leaves_nothing(tmp_path: Path) -> None:
    from test_corruption import damage, flip  # noqa: PLC0415

    path = tmp_path / "log"
    log = EventLog.open(path, durability="process")
    for i in range(3):
        log.append("events:a", Event(name="tick", data={"i": i}, at=time.time()))
    log.close()
    damage(path, lambda raw: raw.put_envelope("events:a", 2, flip(raw.envelope("events:a", 2), -3)))
    dest = tmp_path / "tables"
    code, _, err = ckptlog("export", str(path), str(dest), "--format", "parquet")
    assert code == 1
    assert "events:a" in err
    assert not dest.exists()
