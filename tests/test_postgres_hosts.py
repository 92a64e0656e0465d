"""Fan-out workers on separate "hosts" append to one PostgreSQL log while the network and the
workers fail: every acknowledged save is there exactly once, the log verifies, the job resumes.

Each worker runs in a network namespace of its own, joined to this one by a veth link, and
reaches the server through a forwarder on its link's address (``netns_hosts``); without root
or iproute2 the workers are loopback processes instead, with the same workload and faults (the
link cuts then reset the worker's connections at the forwarder). The mode, seed, faults and
times are printed. ``CKPTLOG_HOSTS_SEED`` picks the faults' seed; ``CKPTLOG_HOSTS_MODE=loopback``
runs the fallback mode; ``CKPTLOG_HOSTS_VERBOSE=1`` prints the workers' warnings and the cuts.

Two short tests pin what a worker's connection needs from the backend: the URL's
``connect_timeout`` is the one used, and a write retries its reconnection while the server is
unreachable for a moment.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from netns_hosts import Forwarder, Hosts
from pg_schemas import PG_URL, PgSchemas

from eventlog.checkpoints import CheckpointLog
from eventlog.errors import NoSuchInvocation, StorageError
from eventlog.frames import Save, Snapshot
from eventlog.testing import NOT_STARTED, done, fan_out, make_record

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("pg_host_worker.py")
WORKERS = 8
INSTANCES = 100_000
FLUSH_EVERY = 512
SAVES = 4  # durable whole-record saves per worker
KILLED = 2  # workers SIGKILLed at random moments
CUTS = 8  # link cuts
ROUND_S = 70.0  # a worker still running after this long is hung: the test fails
STOPPED = 3  # the worker's exit code after a typed storage error
# libpq: give up a connection attempt, or a connection whose link is dead, within seconds.
LIBPQ = (
    "connect_timeout=2&keepalives=1&keepalives_idle=1&keepalives_interval=1"
    "&keepalives_count=2&tcp_user_timeout=1500"
)
_WARNING = re.compile(r"^(\d+\.\d+) ckptlog\.postgres: (.*)$")


@dataclass
class Worker:
    w: int
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    flushing: threading.Event = field(default_factory=threading.Event)
    err_path: Path | None = None
    stderr: str = ""

    def wait(self, timeout: float) -> None:
        self.proc.wait(timeout)
        assert self.err_path is not None
        self.stderr = self.err_path.read_text(encoding="utf-8", errors="replace")

    def acked_batches(self) -> list[int]:
        return [int(x.split()[1]) for x in self.lines if x.startswith("flushed ")]

    def acked_saves(self) -> int:
        return max([int(x.split()[2]) for x in self.lines if x.startswith("ack ")], default=0)


@dataclass
class Faults:
    kills: list[int] = field(default_factory=list)
    cuts: list[tuple[int, float, float]] = field(default_factory=list)  # worker, down, up
    commit_cuts: list[tuple[int, bool]] = field(default_factory=list)  # worker, delivered
    terminated: int = 0


def _share(w: int) -> list[list[int]]:
    mine = list(range(w, INSTANCES, WORKERS))
    return [mine[b : b + FLUSH_EVERY] for b in range(0, len(mine), FLUSH_EVERY)]


def _worker_url(base: str, schema: str, host: str, port: int) -> str:
    parts = urlsplit(base)
    netloc = parts.netloc.rsplit("@", 1)
    userinfo = netloc[0] + "@" if len(netloc) == 2 else ""
    return urlunsplit(parts._replace(netloc=f"{userinfo}{host}:{port}", query="")) + (
        f"?schema={schema}&{LIBPQ}"
    )


def _saved_ats(cl: CheckpointLog, invocation_id: str) -> list[float]:
    """``last_saved_at`` of each save of ``invocation_id`` in the history, in order."""
    try:
        return [e.record.last_saved_at for e in cl.history(invocation_id) if e.record]
    except NoSuchInvocation:  # its worker stopped before its first save
        return []


def _lost_report(
    cl: CheckpointLog,
    wk: Worker,
    batch: int,
    missing: list[int],
    got: Sequence[object],
    faults: Faults,
) -> str:
    """What to look at when acknowledged instances are not in the log exactly once."""
    frames = [
        (sf.seq, sf.global_seq, type(sf.frame).__name__, _changes(sf.frame)[:3])
        for sf in cl.log.read_stream("shared")
    ]
    return (
        f"worker {wk.w} batch {batch}: {len(missing)} acknowledged instances not saved once, "
        f"first {missing[:5]}; head has {[got[i] for i in missing[:3]]}\n"
        f"streams: {cl.log.streams()}\nframes of shared (seq, gseq, kind, first changes): "
        f"{frames}\nfaults: {faults}\nworker output: {wk.lines}\nworker stderr:\n{wk.stderr}"
    )


def _changes(frame: object) -> list[int]:
    if isinstance(frame, Save):
        return [ch.index for ch in frame.instances]
    if isinstance(frame, Snapshot):
        return [ch.index for ch in frame.batch]
    return []


def _instance_counts(cl: CheckpointLog) -> dict[int, int]:
    """How many times each instance index was saved in the frames of ``shared``."""
    counts: dict[int, int] = {}
    for sf in cl.log.read_stream("shared", 2):
        frame = sf.frame
        # A batch's frame is a delta, or now and then a snapshot listing the batch beside it.
        assert isinstance(frame, Save | Snapshot), frame
        for i in _changes(frame):
            counts[i] = counts.get(i, 0) + 1
    return counts


def _assert_dense_in_commit_order(cl: CheckpointLog) -> None:
    """Global seqs 1, 2, 3 ... with no gap, and each stream's seqs 1, 2, 3 ... in that order:
    the workers' streams of their own (``own-N``, whose commits the server numbers in the
    log) as well as the fan-out they share."""
    scanned = [(sf.global_seq, sf.stream, sf.seq) for sf in cl.log.scan()]
    assert [g for g, _, _ in scanned] == list(range(1, len(scanned) + 1))
    seqs: dict[str, list[int]] = {}
    for _, stream, seq in scanned:
        seqs.setdefault(stream, []).append(seq)
    for stream, got in seqs.items():
        assert got == list(range(1, len(got) + 1)), stream
    assert "shared" in seqs
    assert any(s.startswith("own-") for s in seqs)


@pytest.mark.slow
@pytest.mark.long
def test_workers_on_separate_hosts_survive_kills_and_cut_links(
    pg_schemas: PgSchemas, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Eight worker hosts save a 100,000-instance fan-out (batches of 512, each acknowledged
    after a durable flush) and a few whole records each, while two are SIGKILLed at random
    moments, links are cut mid-commit for a random while, and the server terminates random
    sessions: the log verifies, every acknowledged instance and save is there exactly once
    (no instance saved twice at all), and rerunning the unfinished workers' shares completes
    the fan-out."""
    seed = int(os.environ.get("CKPTLOG_HOSTS_SEED", "1818"))
    rng = random.Random(seed)
    started = time.monotonic()
    url = pg_schemas.url(tmp_path)
    schema = url.split("schema=")[1]
    cl = CheckpointLog.open(url)
    cl.save("shared", make_record("shared", fan_outs=[fan_out("f", [NOT_STARTED] * INSTANCES)]))
    cl.close()

    server = urlsplit(PG_URL)
    forwarder = Forwarder((server.hostname or "127.0.0.1", server.port or 5432))
    hosts: Hosts | None = None
    workers: list[Worker] = []
    faults = Faults()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        hosts = Hosts(
            WORKERS, forwarder, loopback=os.environ.get("CKPTLOG_HOSTS_MODE") == "loopback"
        )
        mode = hosts.mode
        urls = [_worker_url(PG_URL, schema, h.address, h.port) for h in hosts.hosts]

        def spawn(w: int, saves: int) -> Worker:
            err_path = tmp_path / f"worker-{w}-{saves}-{time.monotonic_ns()}.err"
            argv = [sys.executable, str(WORKER), urls[w], str(w), str(WORKERS)]
            argv += [str(INSTANCES), str(FLUSH_EVERY), str(saves)]
            assert hosts is not None
            path = [str(REPO), os.environ.get("PYTHONPATH", "")]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
            with err_path.open("wb") as err:
                proc = subprocess.Popen(
                    hosts.hosts[w].command(argv),
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            return Worker(w, proc, err_path=err_path)

        victims = rng.sample(range(WORKERS), KILLED)
        kill_after = {w: (rng.randrange(2, 16), rng.uniform(0.0, 0.05)) for w in victims}

        def follow(wk: Worker) -> None:
            assert wk.proc.stdout is not None
            with wk.proc.stdout:
                follow_lines(wk, wk.proc.stdout)

        def follow_lines(wk: Worker, stdout: IO[str]) -> None:
            for line in stdout:
                wk.lines.append(line.strip())
                if line.startswith("flushing"):
                    wk.flushing.set()
                plan = kill_after.get(wk.w)
                if plan is not None and len(wk.acked_batches()) == plan[0]:
                    # A random moment in the next batch: its commit may or may not land.
                    time.sleep(plan[1])
                    del kill_after[wk.w]
                    if wk.proc.poll() is None:
                        wk.proc.send_signal(signal.SIGKILL)
                        faults.kills.append(wk.w)

        def running() -> list[Worker]:
            return [wk for wk in workers if wk.proc.poll() is None]

        cutting: set[int] = set()
        cut_threads: list[threading.Thread] = []

        def cut(wk: Worker, down: float) -> None:
            assert hosts is not None
            try:
                hosts.cut(wk.w)
                t0 = time.time()
                stop.wait(down)
                hosts.restore(wk.w)
                faults.cuts.append((wk.w, t0, time.time()))
            finally:
                cutting.discard(wk.w)

        def lock_holder(conn: psycopg.Connection[tuple[int]]) -> int | None:
            """The host whose session holds the log's writers' lock: it is mid-transaction."""
            row = conn.execute(
                "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                "WHERE l.locktype = 'advisory' AND l.granted AND a.client_port = ANY(%s)",
                (list(forwarder.server_ports),),
            ).fetchone()
            return None if row is None else forwarder.server_ports.get(row[0])

        made = [0, 0, 0, 0]  # cuts of each kind (below) made or under way

        def cut_at_commit(wk: Worker, deliver: bool, down: float) -> None:
            assert hosts is not None
            fired: list[float] = []

            def fire() -> None:
                assert hosts is not None
                hosts.cut(wk.w)
                fired.append(time.time())

            try:
                forwarder.arm(wk.w, deliver, fire)
                give_up = time.monotonic() + 5.0
                while not fired and time.monotonic() < give_up and wk.proc.poll() is None:
                    time.sleep(0.01)
                forwarder.disarm(wk.w)
                if not fired:
                    made[0 if deliver else 1] -= 1  # no COMMIT came: another try
                    return
                stop.wait(down)
                hosts.restore(wk.w)
                faults.cuts.append((wk.w, fired[0], time.time()))
                faults.commit_cuts.append((wk.w, deliver))
            finally:
                cutting.discard(wk.w)

        def commit_cut_s() -> float:
            # Past the worker's keepalive timeout (3 s) through a link, else the held answer
            # arrives late; a reset connection (loopback) fails at once.
            return rng.uniform(4.0, 5.0) if mode == "netns" else rng.uniform(0.3, 1.0)

        def cutter() -> None:
            """Links go down for a random while, at most three at once, of four kinds in turn
            (the kind with the fewest cuts next): 0. as a host's COMMIT reaches the server (its
            answer never comes back), 1. as its COMMIT is on the way (it never arrives), 2.
            while the host holds the writers' lock (mid-transaction), 3. as the host is about
            to commit a batch. The cuts outlast the workers' TCP
            timeouts (1.5 s of unacknowledged data; keepalives: 3 s), so the connection fails,
            except some of the last kind, which TCP's retransmissions may ride out."""
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                while sum(made) < CUTS and not stop.wait(rng.uniform(0.1, 0.5)):
                    live = {wk.w: wk for wk in running() if wk.w not in cutting}
                    if len(cutting) >= 3 or not live:
                        continue
                    kind = made.index(min(made))
                    if kind < 2:
                        wk = rng.choice(list(live.values()))
                        cutting.add(wk.w)
                        made[kind] += 1
                        th = threading.Thread(
                            target=cut_at_commit, args=(wk, kind == 0, commit_cut_s())
                        )
                        cut_threads.append(th)
                        th.start()
                        continue
                    if kind == 2:
                        give_up = time.monotonic() + 3.0
                        while (w := lock_holder(conn)) not in live:
                            if time.monotonic() > give_up or stop.is_set():
                                break
                            time.sleep(0.002)
                        if w not in live:
                            continue
                        wk = live[w]
                        down = rng.uniform(1.8, 2.5) if mode == "netns" else rng.uniform(0.3, 1.0)
                    else:
                        wk = rng.choice(list(live.values()))
                        wk.flushing.clear()
                        if not wk.flushing.wait(3.0) or stop.is_set():
                            continue
                        time.sleep(rng.uniform(0.0, 0.02))  # the batch's commit is on its way
                        down = rng.uniform(0.3, 2.5) if mode == "netns" else rng.uniform(0.3, 1.0)
                    cutting.add(wk.w)
                    made[kind] += 1
                    th = threading.Thread(target=cut, args=(wk, down))
                    cut_threads.append(th)
                    th.start()
            for th in cut_threads:
                th.join()

        def terminator() -> None:  # the server ends random sessions of the workers
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                # A few soon (a loopback round lasts seconds), then now and then.
                while not stop.wait(
                    rng.uniform(0.1, 0.4) if faults.terminated < 3 else rng.uniform(0.4, 1.2)
                ):
                    row = conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = 'ckptlog' AND client_port = ANY(%s) "
                        "ORDER BY random() LIMIT 1",
                        (list(forwarder.server_ports),),
                    ).fetchone()
                    if row is not None and row[0]:
                        faults.terminated += 1

        workers = [spawn(w, SAVES) for w in range(WORKERS)]
        followers = [threading.Thread(target=follow, args=(wk,)) for wk in workers]
        threads = [threading.Thread(target=cutter), threading.Thread(target=terminator)]
        for th in [*followers, *threads]:
            th.start()
        deadline = time.monotonic() + ROUND_S
        hung: list[int] = []
        for wk in workers:
            try:
                wk.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung.append(wk.w)
                wk.proc.kill()
                wk.wait(10.0)
        for th in followers:
            th.join()
        stop.set()
        for th in threads:
            th.join()
        round_s = time.monotonic() - started
        assert not hung, (
            f"workers {hung} still ran after {ROUND_S} s (a hang); their output:\n"
            + "\n".join(f"--- {w}:\n{workers[w].lines[-5:]}\n{workers[w].stderr}" for w in hung)
        )

        # Each worker finished, was killed, or stopped on a typed storage error.
        unfinished: list[int] = []
        stopped: dict[int, str] = {}
        for wk in workers:
            code = wk.proc.returncode
            if wk.w in faults.kills:
                assert code == -signal.SIGKILL, (wk.w, code, wk.stderr)
                unfinished.append(wk.w)
            elif code == STOPPED:
                stop_line = next(x for x in wk.lines if x.startswith("stopped "))
                assert re.match(r"stopped (CommitOutcomeUnknown|\w*Error|FlushFailed)\b", stop_line)
                stopped[wk.w] = stop_line
                unfinished.append(wk.w)
            else:
                assert code == 0, f"worker {wk.w} failed (exit {code}):\n{wk.stderr}"
                assert wk.lines[-1] == "done", wk.lines[-3:]
                assert wk.acked_batches() == list(range(len(_share(wk.w))))

        # The faults happened, and link cuts met writes in flight.
        warnings = [
            (wk.w, float(m[1]), m[2])
            for wk in workers
            for m in (_WARNING.match(x) for x in wk.stderr.splitlines())
            if m
        ]
        cut_writes = [
            (w, msg)
            for w, at, msg in warnings
            if any(cw == w and down <= at <= up + 6.0 for cw, down, up in faults.cuts)
            and "administrator command" not in msg
            and ("failed transiently" in msg or "commit of" in msg or "resolving commit" in msg)
        ]
        if os.environ.get("CKPTLOG_HOSTS_VERBOSE"):
            with capsys.disabled():
                for w, at, msg in warnings:
                    print(f"  {w} {at:.3f} {msg[:240]}")
                for c in faults.cuts:
                    print("  cut", c)
                print("  kills", faults.kills, "stopped", stopped, "terminated", faults.terminated)
        assert faults.kills, "no worker was killed: the test did not test that"
        assert faults.terminated, "no session was terminated: the test did not test that"
        assert len(faults.cuts) >= 3, f"only {len(faults.cuts)} link cuts"
        assert faults.commit_cuts, "no link was cut at a COMMIT: the test did not test that"
        # A cut-off COMMIT was resolved by its transaction id, or reported as unknown.
        ambiguous = [msg for _, _, msg in warnings if "was cut off" in msg]
        ambiguous += [x for x in stopped.values() if "CommitOutcomeUnknown" in x]
        assert ambiguous, "no COMMIT was cut off:\n" + "\n".join(
            f"{w} {at:.3f} {msg}" for w, at, msg in warnings
        )
        assert cut_writes, "no link cut met a write in flight:\n" + "\n".join(
            f"{w} {at:.3f} {msg}" for w, at, msg in warnings
        )

        check = CheckpointLog.open(url, readonly=True)
        try:
            report = check.verify()
            assert report.ok, str(report)
            _assert_dense_in_commit_order(check)
            counts = _instance_counts(check)
            twice = sorted(i for i, c in counts.items() if c > 1)
            assert not twice, f"instances saved twice: {twice[:20]} ({len(twice)})"
            shared = check.load("shared")
            assert shared is not None
            got = shared.fan_out_progress[0].instances
            acked = 0
            for wk in workers:
                share = _share(wk.w)
                for b in wk.acked_batches():
                    missing = [i for i in share[b] if counts.get(i) != 1]
                    assert not missing, _lost_report(check, wk, b, missing, got, faults)
                    for i in share[b]:
                        acked += 1
                        assert got[i] == done({"w": wk.w, "i": i}), (wk.w, b, i)
                own = f"own-{wk.w}"
                ats = _saved_ats(check, own)
                n = wk.acked_saves()
                # Each acknowledged save once, in order; at most one more (committed, unacked).
                assert ats == [float(k + 1) for k in range(len(ats))], (own, ats)
                assert n <= len(ats) <= n + (1 if wk.w in unfinished else 0), (own, n, ats)
                if wk.w not in unfinished:
                    assert check.load(own) == make_record(own, at=float(SAVES))
        finally:
            check.close()

        # The job resumes: the unfinished workers' shares run again, with the network whole.
        resumed = [spawn(w, 0) for w in unfinished]
        for wk in resumed:
            out, _ = wk.proc.communicate(timeout=ROUND_S)
            wk.wait(1.0)
            assert wk.proc.returncode == 0, f"resumed worker {wk.w}:\n{out}\n{wk.stderr}"
        final = CheckpointLog.open(url, readonly=True)
        try:
            report = final.verify()
            assert report.ok, str(report)
            head = final.load("shared")
            assert head is not None
            assert head.fan_out_progress[0].instances == tuple(
                done({"w": i % WORKERS, "i": i}) for i in range(INSTANCES)
            )
            counts = _instance_counts(final)
            finished = set(range(WORKERS)) - set(unfinished)
            assert all(counts[i] == 1 for i in range(INSTANCES) if i % WORKERS in finished)
        finally:
            final.close()
        total_s = time.monotonic() - started
        why = f" ({hosts.why_loopback})" if hosts.why_loopback else ""
        with capsys.disabled():
            print(
                f"\n[hosts] mode={mode}{why}"
                f" seed={seed} kills={sorted(faults.kills)} stopped={sorted(stopped)}"
                f" cuts={len(faults.cuts)} commit-cuts={len(faults.commit_cuts)}"
                f" cut-writes={len(cut_writes)} ambiguous={len(ambiguous)}"
                f" terminated={faults.terminated} acked-instances={acked}"
                f" round={round_s:.1f}s total={total_s:.1f}s"
            )

    finally:
        stop.set()
        for wk in workers:
            if wk.proc.poll() is None:
                wk.proc.kill()
                wk.proc.wait()
        for th in threads:
            th.join()
        forwarder.close()
        if hosts is not None:
            hosts.close()
            assert hosts.leftovers() == []


def test_a_connect_timeout_in_the_url_is_the_one_used(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """A server that accepts the connection and never answers: the URL's ``connect_timeout``
    (2 s, psycopg's least) bounds the attempt, not the backend's default of 10 s."""
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        port = silent.getsockname()[1]
        url = f"postgresql://postgres@127.0.0.1:{port}/test?schema=x&connect_timeout=2"
        began = time.monotonic()
        with pytest.raises(StorageError, match="cannot connect to PostgreSQL"):
            CheckpointLog.open(url)
        assert time.monotonic() - began < 6.0
    finally:
        silent.close()
    _ = pg_schemas, tmp_path


def test_a_write_rides_out_a_server_unreachable_for_a_moment(
    pg_schemas: PgSchemas, tmp_path: Path
) -> None:
    """The write connection is reset and, for half a second, new connections are refused: the
    save is retried (reconnecting is part of the write's bounded retries) and lands once."""
    url = pg_schemas.url(tmp_path)
    server = urlsplit(PG_URL)
    forwarder = Forwarder((server.hostname or "127.0.0.1", server.port or 5432))
    try:
        port = forwarder.listen(0, "127.0.0.1")
        schema = url.split("schema=")[1]
        cl = CheckpointLog.open(_worker_url(PG_URL, schema, "127.0.0.1", port))
        try:
            cl.save("a", make_record("a", at=1.0))
            forwarder.cut(0)
            threading.Timer(0.5, forwarder.restore, args=(0,)).start()
            cl.save("a", make_record("a", at=2.0))
        finally:
            cl.close()
    finally:
        forwarder.close()
    check = CheckpointLog.open(url, readonly=True)
    try:
        assert _saved_ats(check, "a") == [1.0, 2.0]
        assert check.verify().ok
    finally:
        check.close()
