"""The log on PostgreSQL: opening by URL (and its errors), the CLI's read commands, and many
writer processes on one log keeping every invariant.

Against the machine's real server; each test works in schemas of its own, dropped afterwards.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest
from pg_schemas import PG_URL, PgSchemas

from eventlog import cli
from eventlog.checkpoints import CheckpointLog
from eventlog.errors import NotALog, StorageError, UnknownInvocation
from eventlog.testing import (
    NOT_STARTED,
    NS,
    assert_history_consistent,
    done,
    fan_out,
    make_record,
)

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("pg_writer.py")
WORKER_WAIT_S = 120.0


def test_open_by_url_reopens_the_same_log(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    url = pg_schemas.url(tmp_path)
    cl = CheckpointLog.open(url)
    try:
        cl.save("a", make_record("a", at=1.0))
        cl.save("a", make_record("a", at=2.0))
    finally:
        cl.close()
    ro = CheckpointLog.open(url, readonly=True)
    try:
        assert ro.load("a") == make_record("a", at=2.0)
        assert ro.log.backend.location == url
        assert ro.verify().ok
    finally:
        ro.close()


def test_open_errors_say_what_is_wrong(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"cannot connect to PostgreSQL .*is running"):
        CheckpointLog.open("postgresql://postgres@127.0.0.1:9/test?schema=x")
    base = PG_URL.rsplit("/", 1)[0]
    with pytest.raises(StorageError, match=r"cannot connect .*create the database first"):
        CheckpointLog.open(f"{base}/no_such_database_ckptlog?schema=x")
    url = pg_schemas.url(tmp_path / "missing")
    with pytest.raises(NotALog, match=r"schema 't_[0-9a-f]+' does not exist"):
        CheckpointLog.open(url, readonly=True)
    # A schema whose "log" table is someone else's is refused, and left as it was.
    foreign = pg_schemas.url(tmp_path / "foreign")
    schema = foreign.split("schema=")[1]
    import psycopg  # noqa: PLC0415

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".log (id int, body text)')
        conn.execute(f"INSERT INTO \"{schema}\".log VALUES (1, 'theirs')")
    with pytest.raises(NotALog, match=r"has columns \(id integer, body text\)"):
        CheckpointLog.open(foreign)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        got = conn.execute(f'SELECT * FROM "{schema}".log').fetchall()
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchone()
    assert got == [(1, "theirs")]
    assert tables == (1,)


def _schema_snapshot(schema: str) -> list[tuple[object, ...]]:
    """Every table of ``schema`` with its columns and every row (as text): what a refused
    open must leave exactly as it was."""
    import psycopg  # noqa: PLC0415

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod), "
            "a.attstorage FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
            "WHERE n.nspname = %s ORDER BY 1, a.attnum",
            (schema,),
        ).fetchall()
        rows = []
        for name in sorted({t[0] for t in tables if t[1] == "r"}):
            rows += conn.execute(
                f'SELECT %s, t::text FROM "{schema}"."{name}" t ORDER BY 2', (name,)
            ).fetchall()
    return [*tables, *rows]


@pytest.mark.parametrize("table", ["log", "meta"])
def test_a_foreign_table_with_ckptlog_columns_is_refused_and_left_alone(
    pg_schemas: PgSchemas, tmp_path: Path, table: str
) -> None:
    """Someone else's ``log`` or ``meta`` table shaped exactly like ckptlog's (``k bytea``
    key, ``v bytea``) holding rows: opening refuses the schema before creating or writing
    anything in it, and opening it again refuses it again."""
    import psycopg  # noqa: PLC0415

    url = pg_schemas.url(tmp_path / table)
    schema = url.split("schema=")[1]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".{table} (k bytea PRIMARY KEY, v bytea NOT NULL)')
        conn.execute(f"INSERT INTO \"{schema}\".{table} VALUES ('\\x01', 'theirs')")
    before = _schema_snapshot(schema)
    for _ in range(2):
        with pytest.raises(NotALog, match=rf"{schema}\.{table} .*not created by ckptlog"):
            CheckpointLog.open(url)
        assert _schema_snapshot(schema) == before
    with pytest.raises(NotALog, match=rf"{schema}\.{table} .*not created by ckptlog"):
        CheckpointLog.open(url, readonly=True)
    assert _schema_snapshot(schema) == before


def test_an_unknown_role_is_named_in_the_hint(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    netloc_rest = PG_URL.split("@", 1)[1]
    url = f"postgresql://no_such_role_ckptlog@{netloc_rest}?schema=x"
    with pytest.raises(StorageError, match=r"role .*does not exist.*check the user name") as e:
        CheckpointLog.open(url)
    assert "create the database" not in str(e.value)


def test_cli_reads_a_postgres_log(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    url = pg_schemas.url(tmp_path)
    cl = CheckpointLog.open(url)
    try:
        for i in range(3):
            cl.save("inv-1", make_record("inv-1", at=float(i + 1)))
        cl.save("inv-2", make_record("inv-2"))
    finally:
        cl.close()

    def run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(list(args), out=out, err=err, isolate=False)
        return code, out.getvalue(), err.getvalue()

    code, out, err = run("ls", url, "--json")
    assert code == 0, err
    assert {row["invocation_id"] for row in msgspec.json.decode(out)} == {"inv-1", "inv-2"}
    code, out, err = run("verify", url)
    assert code == 0, err
    code, out, err = run("history", url, "inv-1")
    assert code == 0, err
    assert out.count("save") >= 3


def _spawn(url: str, w: int, workers: int, saves: int, instances: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), url, str(w), str(workers), str(saves), str(instances), "8"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_many_writer_processes_keep_every_invariant(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    """Four processes save their own invocations and share one fan-out through save_instance
    while a reader scans the log in commit order: global seqs are dense and never appear out of
    order (no gap seen and then filled), each stream's seqs and chain are whole, every
    acknowledged save is there exactly once, and the shared head holds every instance."""
    workers, saves, instances = 4, 12, 240
    url = pg_schemas.url(tmp_path)
    cl = CheckpointLog.open(url)
    base = make_record("shared", fan_outs=[fan_out("f", [NOT_STARTED] * instances)])
    cl.save("shared", base)
    seen: list[int] = []
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:  # a forensic reader elsewhere, replaying while the workers append
        last = 0
        while not stop.is_set():
            for sf in cl.log.scan(last):
                if sf.global_seq != last + 1:
                    problems.append(f"after global seq {last} the scan showed {sf.global_seq}")
                last = sf.global_seq
                seen.append(last)

    th = threading.Thread(target=reader)
    th.start()
    try:
        procs = [_spawn(url, w, workers, saves, instances) for w in range(workers)]
        outs = [p.communicate(timeout=WORKER_WAIT_S) for p in procs]
    finally:
        stop.set()
        th.join()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "flushed" in out
    assert problems == []
    try:
        report = cl.verify()
        assert report.ok, str(report)
        scanned = [sf.global_seq for sf in cl.log.scan()]
        assert scanned == list(range(1, len(scanned) + 1))
        assert seen == scanned[: len(seen)]
        for w in range(workers):
            own = f"own-{w}"
            hist = list(cl.history(own))
            assert [e.record.last_saved_at for e in hist] == [float(n + 1) for n in range(saves)]
            assert cl.load(own) == make_record(own, at=float(saves))
        shared = cl.load("shared")
        assert shared is not None
        got = shared.fan_out_progress[0].instances
        assert got == tuple(done({"w": i % workers, "i": i}) for i in range(instances))
        assert_history_consistent(cl, "shared")
    finally:
        cl.close()
    # The head row read by a fresh process equals the fold of the frames (no stale head).
    ro = CheckpointLog.open(url, readonly=True)
    try:
        assert ro.load("shared") == shared
    finally:
        ro.close()
    _ = NS


@pytest.mark.parametrize("shared", [False, True], ids=["distinct streams", "and a shared one"])
def test_writers_numbered_by_the_server_keep_positions_dense_and_in_commit_order(
    pg_schemas: PgSchemas, tmp_path: Path, shared: bool
) -> None:
    """Four writers (each a log of its own, as four processes have) append to streams of their
    own, and with ``shared`` every third frame to one stream they share, while a reader scans
    in commit order: the server numbers the log's rows of each commit (after its greatest key,
    under the writers' lock), so global seqs are dense and never appear out of order (no gap
    seen and then filled), each writer's positions ascend, each ``Appended`` names the frame
    at its position, each stream's seqs and chain are whole, and the log verifies."""
    from eventlog.log import Appended, EventLog  # noqa: PLC0415

    writers, saves = 4, 30
    url = pg_schemas.url(tmp_path)
    logs = [EventLog.open(url, frame_type=list) for _ in range(writers)]
    got: dict[int, list[Appended]] = {w: [] for w in range(writers)}
    seen: list[int] = []
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        last = 0
        while not stop.is_set():
            for sf in logs[0].scan(last):
                if sf.global_seq != last + 1:
                    problems.append(f"after global seq {last} the scan showed {sf.global_seq}")
                last = sf.global_seq
                seen.append(last)

    def writer(w: int) -> None:
        try:
            for i in range(saves):
                stream = "shared" if shared and i % 3 == 0 else f"own-{w}"
                done = logs[w].append(stream, [w, i])
                assert done is not None
                got[w].append(done)
        except Exception as e:  # noqa: BLE001 - reported below
            problems.append(repr(e))

    th = threading.Thread(target=reader)
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    th.start()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(WORKER_WAIT_S)
    finally:
        stop.set()
        th.join()
    try:
        assert problems == []
        frames = {sf.global_seq: sf for sf in logs[0].scan()}
        assert sorted(frames) == list(range(1, writers * saves + 1))
        assert seen == sorted(frames)[: len(seen)]
        for w in range(writers):
            positions = [a.global_seq for a in got[w]]
            assert positions == sorted(positions)
            for i, a in enumerate(got[w]):
                sf = frames[a.global_seq]
                assert (sf.stream, sf.seq, sf.checksum) == (a.stream, a.seq, a.checksum)
                assert sf.frame == [w, i]
        for stream in {sf.stream for sf in frames.values()}:
            mine = [sf for _, sf in sorted(frames.items()) if sf.stream == stream]
            assert [sf.seq for sf in mine] == list(range(1, len(mine) + 1))
        moved = sum(log.backend.moved_commits for log in logs)  # type: ignore[attr-defined]
        # (with a shared stream, writers that keep meeting there read for real for a while
        # after each stale commit, so on a loaded machine it may happen that none is moved)
        assert moved > 0 or shared, "no commit was numbered by the server: not tested"
        report = logs[0].verify()
        assert report.ok, str(report)
    finally:
        for log in logs:
            log.close()


@pytest.mark.long
def test_bench_harness_runs_the_postgres_peer_and_drops_its_schemas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--peer benchmarks.peers.postgres:...`` rows beside the LMDB ones they compare with;
    every schema the run made (also by the instances cells' subprocesses) is gone after."""
    import json  # noqa: PLC0415

    import psycopg  # noqa: PLC0415

    from benchmarks.__main__ import main as bench  # noqa: PLC0415
    from benchmarks.peers import postgres as pg_peer  # noqa: PLC0415

    prefix = f"benchtest_{tmp_path.name[-8:].lower()}_"
    monkeypatch.setenv("CKPTLOG_BENCH_PG_PREFIX", prefix)
    out = tmp_path / "bench.json"
    argv = ["run", "--quick", "--scenario", "linear,instances", "--backend", "ckptlog-fsync"]
    argv += ["--peer", "benchmarks.peers.postgres:fsync"]
    argv += ["--peer", "benchmarks.peers.postgres:fsync_batched"]
    try:
        assert bench([*argv, "--no-progress", "--repeats", "1", "--out", str(out)]) == 0
    finally:
        pg_peer.drop_created()
    data = json.loads(out.read_text(encoding="utf-8"))
    rows = {
        (name, p["key"], r["label"]): r
        for name, sc in data["scenarios"].items()
        for p in sc["params"]
        for r in p["rows"]
    }
    linear = rows["linear", "state=200", "benchmarks.peers.postgres:fsync"]
    assert linear["status"] == "ok", linear.get("reason")
    assert linear["reference"] == "ckptlog-fsync"
    batched = rows["instances", "n=1000", "benchmarks.peers.postgres:fsync_batched · save_instance"]
    assert batched["status"] == "ok", batched.get("reason")
    assert batched["reference"] == "ckptlog-fsync · save_instance"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)
        ).fetchall()
    assert left == []


def test_killed_workers_and_cut_connections_lose_no_acknowledged_save(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """Four workers save durably while two are SIGKILLed at seeded random moments and the
    server cuts random ckptlog connections (``pg_terminate_backend``) throughout: every
    acknowledged save is there exactly once, the log verifies, and the job resumes (the
    unfinished workers' shares, run again, complete the fan-out). Writes ride out the cuts
    (retried, or resolved by transaction id when the COMMIT was cut)."""
    import random  # noqa: PLC0415
    import signal  # noqa: PLC0415

    import psycopg  # noqa: PLC0415

    rng = random.Random(1808)
    workers, saves, instances = 4, 20, 600
    # The workers' connections carry a name of this test's own: the cutter cuts only them.
    app = "ckptlog-" + pg_schemas.url(tmp_path).split("schema=")[1]
    url = pg_schemas.url(tmp_path, application_name=app)
    schema = url.split("schema=")[1]
    cl = CheckpointLog.open(url)
    cl.save("shared", make_record("shared", fan_outs=[fan_out("f", [NOT_STARTED] * instances)]))
    cl.close()

    def spawn(w: int, own_saves: int) -> subprocess.Popen[str]:
        args = [url, str(w), str(workers), str(own_saves), str(instances), "0"]
        return subprocess.Popen(
            [sys.executable, str(WORKER), *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    stop = threading.Event()
    cuts: list[int] = []

    def cutter() -> None:  # the network between a worker and the server fails, now and then
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            while not stop.wait(rng.uniform(0.05, 0.2)):
                row = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s AND datname = current_database() "
                    "AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1",
                    (app,),
                ).fetchone()
                if row is not None and row[0]:
                    cuts.append(1)

    procs = [spawn(w, saves) for w in range(workers)]
    # Workers 1 and 3 are killed after a seeded random number of acknowledgements.
    kill_after = {1: rng.randrange(5, 120), 3: rng.randrange(5, 120)}
    lines: dict[int, list[str]] = {w: [] for w in range(workers)}
    killed: list[int] = []

    def follow(w: int) -> None:
        stdout = procs[w].stdout
        assert stdout is not None
        for line in stdout:
            lines[w].append(line.strip())
            if len(lines[w]) == kill_after.get(w):
                procs[w].send_signal(signal.SIGKILL)
                killed.append(w)

    followers = [threading.Thread(target=follow, args=(w,)) for w in range(workers)]
    th = threading.Thread(target=cutter)
    th.start()
    for f in followers:
        f.start()
    try:
        for f in followers:
            f.join(WORKER_WAIT_S)
        errs = [p.communicate(timeout=WORKER_WAIT_S)[1] for p in procs]
    finally:
        stop.set()
        th.join()
    assert cuts, "no connection was cut: the test did not test that"
    outs = [("\n".join(lines[w]), errs[w]) for w in range(workers)]
    acked_inst: set[int] = set()
    acked_own: dict[int, int] = {}
    # A worker not killed either finished or stopped on a cut it could not ride out (a read
    # outside a write transaction says StorageError: try again); either way its job resumes.
    # (Workers 1 and 3 print more lines than their kill counts, so they end killed unless
    # such a cut stopped them first.)
    unfinished = list(killed)
    for w, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        if w in killed:
            assert p.returncode == -signal.SIGKILL, err
        elif p.returncode != 0:
            assert p.returncode == 1, err
            assert "StorageError" in err, err
            assert "PostgreSQL" in err, err
            unfinished.append(w)
        for line in out.splitlines():
            kind, _, val = line.partition(" ")
            if kind == "inst":
                acked_inst.add(int(val))
            elif kind == "ack":
                acked_own[w] = int(val.split()[1])
    check = CheckpointLog.open(url, readonly=True)
    try:
        report = check.verify()
        assert report.ok, str(report)
        shared = check.load("shared")
        assert shared is not None
        got = shared.fan_out_progress[0].instances
        for i in acked_inst:
            assert got[i] == done({"w": i % workers, "i": i}), i
        for w in range(workers):
            try:
                ats = [e.record.last_saved_at for e in check.history(f"own-{w}")]
            except UnknownInvocation:  # stopped before its first save landed
                assert acked_own.get(w, 0) == 0
                ats = []
            n = acked_own.get(w, 0)
            # Each acknowledged save once, in order; at most one more (committed, then killed).
            assert ats == [float(k + 1) for k in range(len(ats))]
            assert n <= len(ats) <= n + (1 if w in unfinished else 0)
    finally:
        check.close()
    # The job resumes: the unfinished workers' shares run again (no own saves) and complete it.
    again = [spawn(w, 0) for w in unfinished]
    for p in again:
        _, err = p.communicate(timeout=WORKER_WAIT_S)
        assert p.returncode == 0, err
    final = CheckpointLog.open(url, readonly=True)
    try:
        assert final.verify().ok
        head = final.load("shared")
        assert head is not None
        assert head.fan_out_progress[0].instances == tuple(
            done({"w": i % workers, "i": i}) for i in range(instances)
        )
    finally:
        final.close()
    assert schema


def _rows(location: str) -> dict[str, list[tuple[bytes, bytes]]]:
    from eventlog.copylog import COPY_TABLES  # noqa: PLC0415
    from eventlog.log import open_backend  # noqa: PLC0415

    backend = open_backend(location, tables=COPY_TABLES, readonly=True)
    try:
        with backend.read() as txn:
            return {t: list(txn.scan(t)) for t in COPY_TABLES}
    finally:
        backend.close()


def test_copy_between_lmdb_and_postgres_keeps_every_byte(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    from eventlog.copylog import copy_log  # noqa: PLC0415
    from eventlog.records import FanOutInternalSaveBatching  # noqa: PLC0415

    src = str(tmp_path / "local")
    cl = CheckpointLog.open(src, batching=FanOutInternalSaveBatching(flush_every=4))
    try:
        cl.save("job", make_record("job", fan_outs=[fan_out("f", [NOT_STARTED] * 50)]))
        for i in range(50):
            cl.save_instance("job", "f", i, done({"i": i}), namespace=NS)
        for k in range(30):
            cl.save("other", make_record("other", at=float(k + 1)))
        cl.delete("other")
    finally:
        cl.close()
    central = pg_schemas.url(tmp_path / "central")
    back = str(tmp_path / "back")

    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["copy", src, central], out=out, err=err, isolate=False) == 0, err.getvalue()
    assert out.getvalue().count(": OK") == 2  # verify passes on both ends
    report = copy_log(central, back, chunk_rows=7)  # chunks smaller than a table
    assert report.rows["log"] == len(_rows(src)["log"])
    assert _rows(src) == _rows(central) == _rows(back)  # every row, byte for byte
    for where in (central, back):
        got = CheckpointLog.open(where, readonly=True)
        try:
            assert got.verify().ok
            head = got.load("job")
            assert head is not None
            assert head.fan_out_progress[0].instances == tuple(done({"i": i}) for i in range(50))
        finally:
            got.close()
    # A copy never merges: a destination that holds a log is refused and left unchanged.
    code = cli.main(["copy", src, central], out=io.StringIO(), err=(err := io.StringIO()))
    assert code == 2
    assert "already holds a log" in err.getvalue()
    assert _rows(central) == _rows(src)


def test_two_writers_sharing_a_fan_out_build_the_same_head(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two logs on one PostgreSQL log take turns saving instances of one fan-out (each then
    finds the other appended since its last commit, and builds its batch on the head row
    alone, without catching up), interleaved with whole-record saves and an out-of-range
    index: the head equals what the calls mean, every seq's record folds consistently, the
    bad index is refused by the flush of the log that saved it, and the log verifies."""
    import eventlog.checkpoint_frames as checkpoint_frames  # noqa: PLC0415
    from eventlog.errors import InvalidRecord  # noqa: PLC0415
    from eventlog.records import FanOutInternalSaveBatching  # noqa: PLC0415

    on_row = []
    write_row_only = checkpoint_frames.write_instance_saves

    def counting(*args: object, **kw: object) -> object:
        on_row.append(1)
        return write_row_only(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(checkpoint_frames, "write_instance_saves", counting)
    url = pg_schemas.url(tmp_path)
    batching = FanOutInternalSaveBatching(flush_every=1000)
    a = CheckpointLog.open(url, batching=batching)
    b = CheckpointLog.open(url, batching=batching)
    n = 40
    try:
        a.save("s", make_record("s", fan_outs=[fan_out("f", [NOT_STARTED] * n)]))
        want = [NOT_STARTED] * n
        for rnd in range(6):
            for who, cl in (("a", a), ("b", b)):
                for i in range(rnd, n, 7):
                    want[i] = done({"by": who, "round": rnd, "i": i})
                    cl.save_instance("s", "f", i, want[i], namespace=NS)
                cl.flush()
            if rnd == 3:  # a whole-record save between the batches: b's head is stale
                rec = a.load("s")
                assert rec is not None
                a.save("s", rec)
        b.save_instance("s", "f", n + 5, done("out of range"), namespace=NS)
        b.save_instance("s", "f", 0, done("kept"), namespace=NS)
        want[0] = done("kept")
        with pytest.raises(InvalidRecord, match=rf"index {n + 5} is outside fan-out 'f'"):
            b.flush()
        assert len(on_row) >= 6  # most batches follow the other log's: built on the row
    finally:
        a.close()
        b.close()
    reader = CheckpointLog.open(url, readonly=True)
    try:
        head = reader.load("s")
        assert head is not None
        assert head.fan_out_progress[0].instances == tuple(want)
        assert_history_consistent(reader, "s")
    finally:
        reader.close()


def test_the_viewer_shows_a_postgres_log_as_its_lmdb_copy(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """``ckptlog serve URL``: the mixed log of the viewer's tests (checkpoint, LangGraph,
    techrevati and apflow streams, application events, a deletion), copied to PostgreSQL,
    answers every API endpoint exactly as the LMDB original does."""
    from eventlog.copylog import copy_log  # noqa: PLC0415
    from tests.test_serve import Client, start  # noqa: PLC0415
    from tests.viewer_logs import build_mixed  # noqa: PLC0415

    local = tmp_path / "mixed"
    build_mixed(local, instances=300)
    url = pg_schemas.url(tmp_path / "central")
    copy_log(str(local), url)
    queries: list[tuple[str, dict[str, object]]] = [
        ("invocations", {}),
        ("changes", {}),
        ("timeline", {"id": "job-1"}),
        ("record", {"id": "job-1", "seq": 3}),
        ("instances", {"id": "job-1", "seq": 4}),
        ("failures", {"id": "job-1"}),
        ("diff", {"id": "job-1", "a": 2, "b": 4}),
        ("frames", {"id": "job-1"}),
        ("langgraph", {"thread": "lg-thread"}),
        ("techrevati", {"thread": "tr-1"}),
        ("apflow", {"task": "task-1"}),
    ]
    answers: list[list[object]] = []
    for where in (str(local), url):
        server = start(where)  # type: ignore[arg-type]
        try:
            c = Client(server)
            answers.append([c.api(endpoint, **params) for endpoint, params in queries])
            stats = c.api("stats")["stats"]
            assert stats["path"] == where
            assert stats["frames"] > 30  # instance saves commit in batches: a frame each
        finally:
            server.shutdown()
            server.server_close()
    lmdb_answers, pg_answers = answers
    for (endpoint, _), a, b in zip(queries, lmdb_answers, pg_answers, strict=True):
        assert a == b, endpoint


def test_a_batch_written_ahead_of_the_lock_is_rewritten_when_the_layout_changed(
    pg_schemas: PgSchemas, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch's instance rows go to the server before the writers' lock, keyed by the
    fan-out layout its log saw last. When another writer replaced the fan-out in between,
    the batch finds out under the lock, its transaction is rolled back (the rows keyed by
    the old layout with it) and it runs again against the new layout: the head and the rows
    agree with the calls and the log verifies."""
    from eventlog.records import FanOutInternalSaveBatching  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    a = CheckpointLog.open(url, batching=FanOutInternalSaveBatching(flush_every=100))
    b = CheckpointLog.open(url)
    try:
        a.save("s", make_record("s", fan_outs=[fan_out("f", [NOT_STARTED] * 10)]))
        a.save_instance("s", "f", 1, done("old"), namespace=NS)
        a.flush()  # a has seen the layout: fan-out f of 10
        # b replaces fan-out f with a new one of 20 instances (a new fan-out id)
        b.save("s", make_record("s", fan_outs=[fan_out("g", [NOT_STARTED] * 3)]))
        b.save("s", make_record("s", fan_outs=[fan_out("f", [NOT_STARTED] * 20)]))
        with caplog.at_level("WARNING", logger="ckptlog.postgres"):
            for i in (2, 15):
                a.save_instance("s", "f", i, done({"i": i}), namespace=NS)
            a.flush()
    finally:
        a.close()
        b.close()
    reader = CheckpointLog.open(url, readonly=True)
    try:
        head = reader.load("s")
        assert head is not None
        want = [NOT_STARTED] * 20
        want[2], want[15] = done({"i": 2}), done({"i": 15})
        assert head.fan_out_progress[0].instances == tuple(want)
        assert reader.pending_instances("s", "f", namespace=NS) == [
            i for i in range(20) if i not in (2, 15)
        ]
        assert_history_consistent(reader, "s")
    finally:
        reader.close()
    assert "fan-out layout of 's' changed" in caplog.text  # it did run again


def test_rows_written_ahead_of_the_lock_cannot_deadlock_the_log(
    pg_schemas: PgSchemas, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch holds its instance rows while it waits for the writers' lock; the holder of
    the lock writing one of those rows closes a cycle, which PostgreSQL breaks (deadlock
    detection) by failing one of the two: the batch then runs again, or the other writer
    does. Either way the batch's flush returns and the log verifies."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    from eventlog.materialized import FANOUT  # noqa: PLC0415
    from eventlog.records import FanOutInternalSaveBatching  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    schema = url.split("schema=")[1]
    cl = CheckpointLog.open(url, batching=FanOutInternalSaveBatching(flush_every=100))
    other = psycopg.connect(PG_URL, autocommit=True)
    try:
        cl.save("s", make_record("s", fan_outs=[fan_out("f", [NOT_STARTED] * 4)]))
        cl.save_instance("s", "f", 1, done("first"), namespace=NS)
        cl.flush()
        key = cl.log.backend._key  # type: ignore[attr-defined]
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", (key,))  # the lock is taken
        cl.save_instance("s", "f", 1, done("second"), namespace=NS)
        flushed = threading.Thread(target=cl.flush)
        caplog.set_level("WARNING", logger="ckptlog.postgres")
        flushed.start()  # writes instance 1's row ahead, then waits for the lock
        time.sleep(0.5)
        outcome = "committed"
        try:  # the lock's holder writes that row too: a cycle
            other.execute(sql.SQL("UPDATE {} SET v = v").format(sql.Identifier(schema, FANOUT)))
            other.execute("COMMIT")
        except psycopg.errors.DeadlockDetected:
            outcome = "broken here"
            other.execute("ROLLBACK")
        flushed.join(30)
        assert not flushed.is_alive(), "the flush never returned"
        # The cycle was there, and broken on one side or the other.
        assert outcome == "broken here" or "DeadlockDetected" in caplog.text, caplog.text
    finally:
        other.close()
        cl.close()
    reader = CheckpointLog.open(url, readonly=True)
    try:
        head = reader.load("s")
        assert head is not None
        assert head.fan_out_progress[0].instances[1] == done("second")
        assert reader.verify().ok
    finally:
        reader.close()
