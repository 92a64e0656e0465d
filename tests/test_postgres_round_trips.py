"""Round trips of a save on PostgreSQL: a write whose process knows the log's tail sends its
assertions, writes, COMMIT and flush in one round trip; a stale assumption is rolled back and
run again; a COMMIT cut off before its transaction id came back is resolved by a row it wrote.

Round trips are measured the way a user meets them: through a relay that delays everything the
server sends (a server 200 ms away), so one round trip costs ~200 ms and two ~400 ms, whatever
the machine's load adds.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, TypedDict

import pytest
from pg_latency import LatencyRelay
from pg_schemas import PG_URL, PgSchemas

from backends.base import WriteTxn
from backends.postgres import PostgresBackend, _PgWrite
from eventlog.integrations.langgraph import LmdbSaver

DELAY_S = 0.2  # a second round trip would add as much: far above the machine's jitter


class _State(TypedDict):
    result: dict[str, Any]
    n: int


def _graph(saver: LmdbSaver) -> Any:
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415

    def step(state: _State) -> dict[str, Any]:
        return {"result": {"text": "x" * 150, "n": state["n"]}, "n": state["n"] + 1}

    g = StateGraph(_State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    return g.compile(checkpointer=saver)


@pytest.mark.parametrize("durability", ["fsync", "process"])
def test_a_langgraph_step_costs_one_round_trip_per_call(
    pg_schemas: PgSchemas, tmp_path: Path, durability: str
) -> None:
    """The ``put`` and ``put_writes`` calls of a real graph's run (recorded on LangGraph's
    ``InMemorySaver``) replayed in order on a thread, as the graph makes them: after the
    log's first write, each returns after one round trip, on a new thread too."""
    from benchmarks.pg_compare import on_thread, record_calls  # noqa: PLC0415

    calls = record_calls(6)
    url = pg_schemas.url(tmp_path)
    with LatencyRelay(PG_URL, DELAY_S) as relay:
        saver = LmdbSaver.open(relay.url(url), durability=durability)
        try:
            times: dict[str, list[float]] = {"put": [], "put_writes": []}
            for thread in ("first", "second"):
                for kind, (config, *rest) in calls:
                    t0 = time.perf_counter()
                    getattr(saver, kind)(on_thread(config, thread), *rest)
                    times[kind].append(time.perf_counter() - t0)
            first_put = times["put"].pop(0)  # the log's first write: opening, reading
            assert first_put < 10 * DELAY_S
            for name, got in times.items():
                assert len(got) >= 5, (name, got)
                assert statistics.median(got) >= 0.9 * DELAY_S, (name, got)  # the relay works
                assert statistics.median(got) < 1.3 * DELAY_S, (name, got)  # one round trip
                # ... every time: at most one call is slower (a stall of the loaded machine)
                assert sum(t > 1.5 * DELAY_S for t in got) <= 1, (name, got)
            assert saver.log.backend.stale == 0  # type: ignore[attr-defined]
        finally:
            saver.close()
    direct = LmdbSaver.open(url)  # verify's many reads, without the relay's delay on each
    try:
        report = direct.verify()
        assert report.ok, str(report)
    finally:
        direct.close()


def test_two_writers_on_one_thread_rebuild_on_what_is_stored(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """Two savers (two processes' backends) take turns on one thread: each finds the other
    appended since its last commit, its one-round-trip attempt is rolled back and run again on
    what is stored, and every checkpoint lands, chained, exactly once."""
    url = pg_schemas.url(tmp_path)
    savers = [LmdbSaver.open(url), LmdbSaver.open(url)]
    try:
        graphs = [_graph(s) for s in savers]
        config = {"configurable": {"thread_id": "shared"}}
        for i in range(8):
            graphs[i % 2].invoke({"result": {}, "n": 10 * i}, config)
        stale = sum(s.log.backend.stale for s in savers)  # type: ignore[attr-defined]
        assert stale >= 1
        history = list(savers[0].list(config))
        assert len({c.config["configurable"]["checkpoint_id"] for c in history}) == len(history)
        assert len(history) == 8 * 3  # input, step, end... of every invocation
        assert graphs[1].get_state(config).values["n"] == 71
        for s in savers:
            report = s.verify()
            assert report.ok, str(report)
    finally:
        for s in savers:
            s.close()


def test_the_lock_is_held_across_a_client_round_trip_only_by_commits_that_read_under_it(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """``held_across_client`` counts the commits whose writers' lock was held while the answer
    to their first read travelled to the client and their next statements came back (what
    ``benchmarks.pg_scale`` reports as "read under lock"): a commit on what the process knows
    sends everything at once and is not counted; the first commit and a stale one's second
    run (reading what is stored) are."""
    url = pg_schemas.url(tmp_path)
    ours = PostgresBackend(url, tables=("a",))
    other = PostgresBackend(url, tables=("a",))
    try:
        ours.run_write(lambda txn: txn.append("a", b"k1", b"1"))  # knows nothing yet: reads
        assert (ours.held_across_client, ours.commits, ours.stale) == (1, 1, 0)
        ours.run_write(lambda txn: txn.append("a", b"k2", b"2"))  # one round trip
        ours.run_write(lambda txn: txn.append("a", b"k3", b"3"))
        assert (ours.held_across_client, ours.commits, ours.stale) == (1, 3, 0)
        other.run_write(lambda txn: txn.append("a", b"k4", b"4"))
        ours.run_write(lambda txn: txn.append("a", b"k5", b"5"))  # stale: runs again, reading
        assert (ours.held_across_client, ours.commits, ours.stale) == (2, 4, 1)
        ours.run_write(lambda txn: txn.append("a", b"k6", b"6"))  # knows again: one trip
        ours.run_write(lambda txn: txn.append("a", b"k7", b"7"))
        assert (ours.held_across_client, ours.commits, ours.stale) == (2, 6, 1)
        assert ours.held_client_s > 0.0
        with ours.read() as r:
            assert [k for k, _ in r.scan("a")] == [b"k%d" % i for i in range(1, 8)]
    finally:
        ours.close()
        other.close()


def test_a_commit_cut_before_its_id_came_back_is_resolved_by_its_row(
    pg_schemas: PgSchemas, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The session of a one-round-trip write ends while its pipeline runs, before the COMMIT:
    the writer never learns the transaction id, so it ends what is left of that session, finds
    the row the transaction appended absent, and runs it again: it lands exactly once."""
    backend = PostgresBackend(pg_schemas.url(tmp_path), tables=("a",))
    attempts: list[int] = []

    def fn(txn: WriteTxn) -> None:
        attempts.append(1)
        assert isinstance(txn, _PgWrite)
        txn.append("a", b"k2", b"second")
        if len(attempts) == 1:
            assert txn.assuming
            assert txn.assumed > 0
            txn._x("SELECT pg_terminate_backend(pg_backend_pid())", ())

    try:
        backend.run_write(lambda txn: txn.append("a", b"k1", b"first"))
        with caplog.at_level("WARNING", logger="ckptlog.postgres"):
            backend.run_write(fn)
        assert len(attempts) == 2
        assert "commit of 0 was cut off; it was rolled back" in caplog.text
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"k1", b"first"), (b"k2", b"second")]
    finally:
        backend.close()


def test_instance_rows_go_as_a_plain_insert_and_re_saved_instances_still_work(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """A batch's new instance rows are one plain ``INSERT`` of binary arrays (as fast as binary
    ``COPY``; ``ON CONFLICT`` costs 2-3x); an instance saved again, by this process or by
    another one that never saw it, is upserted (the other's plain INSERT meets the row, is
    rolled back and runs again as an upsert)."""
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from eventlog.records import FanOutInternalSaveBatching  # noqa: PLC0415
    from eventlog.testing import NOT_STARTED, NS, done, fan_out, make_record  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    batching = FanOutInternalSaveBatching(flush_every=16)
    logs = [CheckpointLog.open(url, batching=batching) for _ in range(2)]
    first, second = logs
    try:
        first.save("job", make_record("job", fan_outs=[fan_out("f", [NOT_STARTED] * 64)]))
        first.save_instance("job", "f", 0, done("warm"), namespace=NS)
        first.flush()
        backend = first.log.backend
        conn = backend._writer()  # type: ignore[attr-defined]
        statements: list[str] = []
        execute = conn.execute

        def spy(query: Any, *args: Any, **kw: Any) -> Any:
            statements.append(str(query))
            return execute(query, *args, **kw)

        conn.execute = spy
        for i in range(1, 33):
            first.save_instance("job", "f", i, done(f"r{i}"), namespace=NS)
        first.flush()
        fanout_writes = [s for s in statements if '."fanout"' in s and "INSERT" in s]
        assert fanout_writes
        assert not [s for s in fanout_writes if "ON CONFLICT" in s], fanout_writes
        assert backend.stale == 0  # type: ignore[attr-defined]
        # Saved again by this process (it knows the rows): upserted.
        for i in range(1, 5):
            first.save_instance("job", "f", i, done(f"again {i}"), namespace=NS)
        first.flush()
        # Saved again by another process, which never saw those rows (after a write of its
        # own, so that it knows the log's end and assumes the rows are new).
        second.save_instance("job", "f", 40, done("r40"), namespace=NS)
        second.flush()
        assert second.log.backend.stale == 0  # type: ignore[attr-defined]
        for i in range(5, 9):
            second.save_instance("job", "f", i, done(f"other {i}"), namespace=NS)
        second.flush()
        assert second.log.backend.stale >= 1  # type: ignore[attr-defined]
        head = CheckpointLog.open(url, readonly=True)
        try:
            (fan,) = head.load("job").fan_out_progress  # type: ignore[union-attr]
            assert fan.instances[1] == done("again 1")
            assert fan.instances[4] == done("again 4")
            assert fan.instances[5] == done("other 5")
            assert fan.instances[8] == done("other 8")
            assert fan.instances[9] == done("r9")
            assert fan.instances[32] == done("r32")
            assert fan.instances[33] == NOT_STARTED
            assert fan.instances[40] == done("r40")
            report = head.verify()
            assert report.ok, str(report)
        finally:
            head.close()
    finally:
        for cl in logs:
            cl.close()


@pytest.mark.parametrize("cut", ["before COMMIT", "after COMMIT"])
def test_a_commit_sent_at_once_cut_off_lands_exactly_once(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """A commit sent at once through libpq's pipeline (``backends.postgres_fast``) whose
    session ends in that round trip, before or after its COMMIT: the writer learns its fate
    from the transaction id that came back, runs it again if it was rolled back, and it lands
    exactly once (durable: ``fsync``)."""
    from backends.postgres_fast import RawPipeline  # noqa: PLC0415

    backend = PostgresBackend(pg_schemas.url(tmp_path), tables=("a",))
    run = RawPipeline.run
    cuts: list[int] = []
    attempts: list[int] = []

    def cutting(self: RawPipeline, statements: Any, out: Any) -> None:
        texts = [text for text, _ in statements]
        if "COMMIT" in texts and not cuts:
            cuts.append(1)
            at = texts.index("COMMIT") + (cut == "after COMMIT")
            statements = [
                *statements[:at],
                ("SELECT pg_terminate_backend(pg_backend_pid())", None),
                *statements[at:],
            ]
        run(self, statements, out)

    def fn(txn: WriteTxn) -> None:
        attempts.append(1)
        txn.append("a", b"k2", b"second")

    try:
        backend.run_write(lambda txn: txn.append("a", b"k1", b"first"))
        monkeypatch.setattr(RawPipeline, "run", cutting)
        backend.run_write(fn)
        assert cuts == [1]
        assert len(attempts) == (2 if cut == "before COMMIT" else 1)
        with backend.read() as r:
            assert list(r.scan("a")) == [(b"k1", b"first"), (b"k2", b"second")]
        backend.run_write(lambda txn: txn.append("a", b"k3", b"third"))  # goes on
        with backend.read() as r:
            assert [k for k, _ in r.scan("a")] == [b"k1", b"k2", b"k3"]
    finally:
        backend.close()


def test_writers_of_distinct_streams_let_the_server_number_the_log(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """Two writers (two processes' logs) take turns, each on a stream of its own. A lone
    writer asserts the log's end it knows; each writer's first commit on an end the other
    moved goes stale once (and runs again, reading for real), and from then on the server
    numbers its log rows (after its greatest key, under the writers' lock): every later
    commit goes in one round trip although the other moved the log's end, and each writer
    learns where its frames landed from the statement's answer: global seqs dense, in commit
    order, and each ``Appended`` names its frame."""
    from eventlog.log import EventLog  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    logs = [EventLog.open(url, frame_type=list), EventLog.open(url, frame_type=list)]
    got = []
    try:
        backends = [log.backend for log in logs]
        assert all(isinstance(b, PostgresBackend) for b in backends)
        first: list[int] = []
        for i in range(12):
            w = i % 2
            got.append(logs[w].append(f"own-{w}", [w, i]))
            if i == 1:  # the first commits read (they know nothing yet): a lone writer each
                assert [b.numbering for b in backends] == [False, False]  # type: ignore[attr-defined]
            if i == 3:  # each went stale once (i = 2, 3), ran again reading for real
                first = [b.held_across_client for b in backends]  # type: ignore[attr-defined]
        assert [b.stale for b in backends] == [1, 1]  # type: ignore[attr-defined]
        assert [b.numbering for b in backends] == [True, True]  # type: ignore[attr-defined]
        assert [b.held_across_client for b in backends] == first  # type: ignore[attr-defined]
        assert [b.moved_commits for b in backends] == [4, 4]  # type: ignore[attr-defined]
        assert [a.global_seq for a in got] == list(range(1, 13))
        frames = list(logs[0].scan())
        assert [(f.stream, f.seq, f.global_seq, f.checksum) for f in frames] == [
            (a.stream, a.seq, a.global_seq, a.checksum) for a in got
        ]
        assert [f.frame for f in frames] == [[i % 2, i] for i in range(12)]
        # and each goes on from where its frames landed
        more = logs[1].append("own-1", [1, 12])
        assert more is not None
        assert (more.global_seq, more.seq) == (13, 7)
        report = logs[0].verify()
        assert report.ok, str(report)
    finally:
        for log in logs:
            log.close()


@pytest.mark.parametrize("cut", ["before COMMIT", "after COMMIT", "answer lost"])
def test_a_commit_cut_after_the_server_numbered_its_rows_lands_exactly_once(
    pg_schemas: PgSchemas,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    cut: str,
) -> None:
    """A commit whose log rows the server numbers (another writer appended since this one's
    last commit) is cut off in its one round trip: its session ends before its COMMIT, after
    it, or the server commits and every answer after ``BEGIN`` is lost. The writer learns its
    fate from the stream index row it inserted (its key is the writer's; the log key is the
    server's) and the frame at the position that row names, runs it again only if it was
    rolled back, and the frame lands exactly once, where its ``Appended`` says."""
    import psycopg  # noqa: PLC0415

    from backends.postgres_fast import RawPipeline  # noqa: PLC0415
    from eventlog.log import EventLog  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    ours = EventLog.open(url, frame_type=list)
    other = EventLog.open(url, frame_type=list)
    run = RawPipeline.run
    cuts: list[int] = []

    def cutting(self: RawPipeline, statements: Any, out: Any) -> None:
        texts = [text for text, _ in statements]
        if "COMMIT" not in texts or cuts:
            run(self, statements, out)
            return
        cuts.append(1)
        if cut == "answer lost":
            got: list[Any] = []
            run(self, statements, got)  # the server committed; its answers never arrive
            out.append(got[0])
            self.conn.close()
            raise psycopg.OperationalError("the connection was lost (simulated)")
        at = texts.index("COMMIT") + (cut == "after COMMIT")
        statements = [
            *statements[:at],
            ("SELECT pg_terminate_backend(pg_backend_pid())", None),
            *statements[at:],
        ]
        run(self, statements, out)

    try:
        ours.append("mine", ["a", 1])  # reads: ours knows the log's end after this
        other.append("theirs", ["b", 1])  # moves the log's end
        ours.append("mine", ["a", 2])  # stale once (another writer): numbered from now on
        ours.append("mine", ["a", 2.5])  # numbered (nothing moved the log's end since)
        other.append("theirs", ["b", 2])  # moves the log's end
        assert ours.backend.numbering  # type: ignore[attr-defined]
        monkeypatch.setattr(RawPipeline, "run", cutting)
        with caplog.at_level("WARNING", logger="ckptlog.postgres"):
            done = ours.append("mine", ["a", 3])
        monkeypatch.undo()
        assert cuts == [1]
        if cut == "before COMMIT":
            assert "was cut off; it was rolled back" in caplog.text
        else:
            assert "was cut off; it had committed" in caplog.text
            assert "rolled back" not in caplog.text
        assert done is not None
        assert (done.stream, done.seq, done.global_seq) == ("mine", 4, 6)
        frames = list(ours.scan())
        assert [(f.stream, f.seq, f.global_seq) for f in frames] == [
            ("mine", 1, 1), ("theirs", 1, 2), ("mine", 2, 3), ("mine", 3, 4), ("theirs", 2, 5),
            ("mine", 4, 6),
        ]  # fmt: skip
        assert frames[-1].checksum == done.checksum
        after = ours.append("mine", ["a", 4])  # goes on
        assert after is not None
        assert (after.seq, after.global_seq) == (5, 7)
        report = ours.verify()
        assert report.ok, str(report)
    finally:
        ours.close()
        other.close()


def test_an_expected_seq_is_checked_against_the_stored_tail_not_a_kept_one(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """Two writers append to one stream, the second with ``expect_seq``: the first writer's
    kept tail of the stream is stale (the server numbers the log, so nothing else told it the
    other wrote), so it reads the stored tail before reporting a conflict: an append that
    expects the stored tail's next seq lands, one that expects an older one is refused."""
    import asyncio  # noqa: PLC0415

    from eventlog.errors import SequenceConflict  # noqa: PLC0415
    from eventlog.log import Appended, EventLog  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    a, b = EventLog.open(url, frame_type=list), EventLog.open(url, frame_type=list)
    try:
        a.append("s", ["a", 1])
        a.append("mine", ["a", 2])  # a knows the log's end and the tail of "s"
        b.append("s", ["b", 1])
        commits = a.backend.commits  # type: ignore[attr-defined]

        async def both() -> list[Appended | None]:
            # one commit: the server numbers the frame of "mine" (b moved the log's end)
            return await asyncio.gather(
                a.append_async("mine", ["a", 2]), a.append_async("s", ["a", 3], expect_seq=3)
            )

        mine, got = asyncio.run(both())
        assert a.backend.commits - commits == 1  # type: ignore[attr-defined]
        assert mine is not None
        assert got is not None
        assert got.seq == 3
        with pytest.raises(SequenceConflict):
            a.append("s", ["a", 4], expect_seq=3)
        b.append("s", ["b", 2])
        with pytest.raises(SequenceConflict):
            a.append("s", ["a", 5], expect_seq=4)
        got = a.append("s", ["a", 6], expect_seq=5)
        assert got is not None
        assert got.seq == 5
        frames = list(a.scan())
        assert [f.global_seq for f in frames] == list(range(1, 8))
        assert frames[got.global_seq - 1].checksum == got.checksum
        assert [f.seq for f in a.read_stream("s")] == [1, 2, 3, 4, 5]
        report = a.verify()
        assert report.ok, str(report)
    finally:
        a.close()
        b.close()


def test_a_stale_commit_keeps_the_tails_of_streams_nobody_else_wrote(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """Two writers (two processes' logs), each on two streams of its own, take turns. Each
    goes stale once when the other first moves the log's end (from then on the server numbers
    its rows); that stale commit drops only the tail of the stream it was writing, not the one
    of its other stream (nobody else wrote it): every later commit runs on what the writer
    knows, in one round trip, none reads under the lock, none goes stale, each is numbered
    after the other's, and per stream the seqs and chains stay dense and exact."""
    from eventlog.log import EventLog  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    logs = [EventLog.open(url, frame_type=list), EventLog.open(url, frame_type=list)]
    got = []
    try:
        backends = [log.backend for log in logs]
        assert all(isinstance(b, PostgresBackend) for b in backends)
        for w in (0, 1):  # each creates its two streams (and knows their tails)
            got.append(logs[w].append(f"a-{w}", [w, "a"]))
            got.append(logs[w].append(f"b-{w}", [w, "b"]))
        # the log's end moved: stale once each (then the server numbers)
        got.extend(logs[w].append(f"a-{w}", [w, "a"]) for w in (0, 1))
        assert [b.stale for b in backends] == [1, 1]  # type: ignore[attr-defined]
        assert all(b.tails_checked for b in backends)
        held = [b.held_across_client for b in backends]  # type: ignore[attr-defined]
        moved = [b.moved_commits for b in backends]  # type: ignore[attr-defined]
        for i in range(16):  # b-0, b-1, a-0, a-1, ...: the other always moved the log's end
            w = i % 2
            got.append(logs[w].append(f"{'ba'[(i // 2) % 2]}-{w}", [w, i]))
        assert [b.stale for b in backends] == [1, 1]  # type: ignore[attr-defined]
        assert [b.held_across_client for b in backends] == held  # type: ignore[attr-defined]
        assert [b.moved_commits - m for b, m in zip(backends, moved, strict=True)] == [8, 8]  # type: ignore[attr-defined]
        assert [a.global_seq for a in got] == list(range(1, len(got) + 1))
        frames = list(logs[0].scan())
        assert [(f.stream, f.seq, f.global_seq, f.checksum) for f in frames] == [
            (a.stream, a.seq, a.global_seq, a.checksum) for a in got
        ]
        for stream, n in (("a-0", 6), ("b-0", 5), ("a-1", 6), ("b-1", 5)):
            assert [f.seq for f in logs[0].read_stream(stream)] == list(range(1, n + 1))
        report = logs[0].verify()
        assert report.ok, str(report)
    finally:
        for log in logs:
            log.close()


@pytest.mark.parametrize("reading", [False, True], ids=["assuming", "reading"])
def test_a_kept_tail_another_writer_moved_fails_the_commit_which_lands_once(
    pg_schemas: PgSchemas, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: bool
) -> None:
    """A writer keeps a stream's tail across another writer's commits (the server numbers
    the log), and the other writer appends to that stream: the kept tail is stale. The
    writer's next append there, on what it knows, inserts the stream's index row the other
    took, which fails the commit: it runs again on the stored tail. A commit that reads the
    log's end for real (``reading``, as after a stale one) reads the tail of each stream it
    writes again instead. Either way the frame lands exactly once, seq dense, chain exact."""
    from backends.postgres_fast import RawPipeline  # noqa: PLC0415
    from eventlog.log import EventLog  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    a, b = EventLog.open(url, frame_type=list), EventLog.open(url, frame_type=list)
    run = RawPipeline.run
    at_once: list[int] = []  # commits sent in one round trip (nothing read for real)

    def counting(self: RawPipeline, statements: Any, out: Any) -> None:
        at_once.append(1)
        run(self, statements, out)

    try:
        ab = a.backend
        assert isinstance(ab, PostgresBackend)
        a.append("s", ["a", 1])
        b.append("t", ["b", 1])
        a.append("mine", ["a", 1])  # stale once (b moved the log's end): numbered from now
        assert ab.stale == 1
        assert ab.tails_checked
        b.append("s", ["b", 2])  # a's kept tail of "s" (seq 1) is stale now
        b.append("t", ["b", 2])  # (and the log's last frame is not of "s")
        stale, held = ab.stale, ab.held_across_client
        if reading:
            ab._assume_skip = 1  # the next commit reads for real (as after a stale one)
        monkeypatch.setattr(RawPipeline, "run", counting)
        done = a.append("s", ["a", 3])
        monkeypatch.undo()
        assert done is not None
        assert (done.stream, done.seq, done.global_seq) == ("s", 3, 6)
        # assuming: the index row (s, 2) was taken, so it ran again; its first attempt went
        # in one round trip on the kept tail, only the run again read under the lock
        assert ab.stale == stale + (0 if reading else 1)
        assert at_once == ([] if reading else [1])
        assert ab.held_across_client == held + 1
        frames = list(a.scan())
        assert [(f.stream, f.seq, f.global_seq) for f in frames] == [
            ("s", 1, 1), ("t", 1, 2), ("mine", 1, 3), ("s", 2, 4), ("t", 2, 5), ("s", 3, 6),
        ]  # fmt: skip
        assert frames[-1].checksum == done.checksum
        after = a.append("s", ["a", 4])  # goes on from the stored tail
        assert after is not None
        assert (after.seq, after.global_seq) == (4, 7)
        report = a.verify()
        assert report.ok, str(report)
    finally:
        a.close()
        b.close()


def test_a_checkpoint_load_costs_one_round_trip(pg_schemas: PgSchemas, tmp_path: Path) -> None:
    """``load`` (and ``load_async``, what openarmature's resume calls) of a record without
    fan-outs reads the stream's id, head row, positions and bodies in one statement: one round
    trip, where a read transaction took seven (BEGIN, four reads, COMMIT). A record with
    fan-outs reads their rows in a read transaction after it (5 round trips, where it took 8);
    a stream that is absent is one statement."""
    import asyncio  # noqa: PLC0415

    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from eventlog.testing import NOT_STARTED, done, fan_out, make_record, pos  # noqa: PLC0415

    url = pg_schemas.url(tmp_path)
    record = make_record(
        "job",
        state={"doc": "x" * 300},
        positions=[pos("a", 0), pos("b", 1)],
        parent_states=[{"up": 1}],
    )
    fanned = make_record("fan", fan_outs=[fan_out("f", [done("r0"), NOT_STARTED])])
    with CheckpointLog.open(url) as log:
        log.save("job", record)
        log.save("fan", fanned)
    with LatencyRelay(PG_URL, DELAY_S) as relay, CheckpointLog.open(relay.url(url)) as log:
        assert log.load("job") == record  # (the first: opening's reads)
        times = []
        for i in range(6):
            t0 = time.perf_counter()
            got = log.load("job") if i % 2 else asyncio.run(log.load_async("job"))
            times.append(time.perf_counter() - t0)
            assert got == record
        assert statistics.median(times) >= 0.9 * DELAY_S, times  # the relay works
        assert statistics.median(times) < 1.3 * DELAY_S, times  # one round trip
        fan_times = []
        for _ in range(3):
            t0 = time.perf_counter()
            assert log.load("fan") == fanned
            fan_times.append(time.perf_counter() - t0)
        # the statement, then BEGIN, the head row again, the fan-out's rows, COMMIT: 5 (was 8)
        assert statistics.median(fan_times) < 5.5 * DELAY_S, fan_times
        assert log.load("nobody") is None
