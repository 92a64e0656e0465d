"""``ckptlog serve``: the JSON API against the demo log and a log of every integration, the
safety rules (bind address, Host header, token), read-only serving and a live writer."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventlog import cli, serve
from tests.viewer_logs import FAIL_EVERY, PAUSE_S, XSS_CORR, XSS_ID, XSS_KEY, build_mixed

ROOT = Path(__file__).resolve().parent.parent


class Client:
    def __init__(self, server: serve.ViewerServer) -> None:
        self.server = server

    def get(
        self, path: str, *, host: str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        try:
            conn.putrequest("GET", path, skip_host=True)
            if host is not None:
                conn.putheader("Host", host)
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            conn.endheaders()
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def api(self, endpoint: str, /, **params: Any) -> Any:
        from urllib.parse import urlencode  # noqa: PLC0415

        status, _, body = self.get(
            f"/api/{endpoint}?{urlencode(params)}", host=f"127.0.0.1:{self.server.port}"
        )
        data = json.loads(body)
        assert status == 200, data
        return data

    def error(self, endpoint: str, /, **params: Any) -> tuple[int, str]:
        from urllib.parse import urlencode  # noqa: PLC0415

        status, _, body = self.get(
            f"/api/{endpoint}?{urlencode(params)}", host=f"127.0.0.1:{self.server.port}"
        )
        return status, json.loads(body)["error"]


def start(path: Path, **kw: Any) -> serve.ViewerServer:
    server = serve.make_server(str(path), port=0, **kw)
    server.serve_in_thread()
    return server


@pytest.fixture(scope="module")
def mixed_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("viewer") / "mixed"
    build_mixed(path)
    return path


@pytest.fixture(scope="module")
def client(mixed_path: Path) -> Iterator[Client]:
    server = start(mixed_path)
    yield Client(server)
    server.shutdown()
    server.server_close()


# -- the API on the demo log -------------------------------------------------------------------


def test_demo_log(tmp_path: Path) -> None:
    from eventlog import demo  # noqa: PLC0415

    path = tmp_path / "demo"
    worker = demo.run_worker_process(str(path), 3000, 1500)
    assert worker.returncode != 0  # killed part-way, as the demo does
    server = start(path)
    try:
        c = Client(server)
        rows = c.api("invocations")["rows"]
        assert [r["id"] for r in rows] == [demo.INVOCATION]
        row = rows[0]
        assert row["status"] == "running"  # killed with instances still to do
        assert row["correlation_id"] == demo.CORRELATION
        assert row["first_saved_at"] <= row["last_saved_at"]
        last = row["saves"]
        tl = c.api("timeline", id=demo.INVOCATION, bins=4)
        assert tl["indexed"] == tl["last_seq"] == last
        assert tl["fan_outs"][0]["name"] == demo.FAN_OUT
        done = tl["bins"][-1]["fan_outs"][0]
        rec = c.api("record", id=demo.INVOCATION, seq=last)["record"]
        assert rec["fan_outs"][0]["completed"] == done[0]
        assert done[0] + done[2] == 3000
        assert c.api("verify", start=1)["state"] in ("running", "done")
    finally:
        server.shutdown()
        server.server_close()


# -- checkpoint invocations --------------------------------------------------------------------


def test_invocations_list_every_stream_in_its_own_terms(client: Client) -> None:
    rows = {r["id"]: r for r in client.api("invocations")["rows"]}
    assert rows["job-1"]["status"] == "failed"
    assert rows["job-1"]["errors"] == 2000 // FAIL_EVERY
    assert rows["job-2"]["status"] == "deleted"
    assert rows["lg:9:lg-thread:"]["family"] == "langgraph"
    assert rows["lg:9:lg-thread:"]["thread_id"] == "lg-thread"
    assert rows["lg:9:lg-thread:"]["namespace"] == ""
    assert rows["techrevati:tr-1"]["thread_id"] == "tr-1"
    assert rows["apflow:task-1"]["task_id"] == "task-1"
    # one answer with the command line (issue 23): a stream no view claims holds events
    assert rows["events:app"]["family"] == "events"
    assert rows[XSS_ID]["correlation_id"] == XSS_CORR


def test_invocations_search_filter_and_paginate(client: Client) -> None:
    assert [r["id"] for r in client.api("invocations", q="JOB-1")["rows"]] == ["job-1"]
    assert [r["id"] for r in client.api("invocations", q="batch-7")["rows"]] == ["job-1"]
    assert {r["id"] for r in client.api("invocations", family="apflow")["rows"]} == {
        "apflow:task-1",
        "apflow:task-2",
    }
    assert [r["id"] for r in client.api("invocations", status="deleted")["rows"]] == ["job-2"]
    everything = client.api("invocations")
    page = client.api("invocations", offset=2, limit=3)
    assert page["total"] == everything["total"] == 9
    assert [r["id"] for r in page["rows"]] == [r["id"] for r in everything["rows"][2:5]]
    assert client.api("invocations", limit=10**9)["rows"]  # capped, not refused
    assert client.error("invocations", limit=0)[0] == 400


def test_timeline_batches_use_their_instance_times(client: Client) -> None:
    tl = client.api("timeline", id="job-1", bins=1000)
    assert tl["indexed"] == tl["last_seq"]
    assert len(tl["bins"]) == tl["last_seq"]  # fewer seqs than bins: one bin per seq
    # The pause between instance 999 and 1000 is inside the run of batches: it shows as the
    # only long pause, and the batch after it failed instances.
    assert [p["gap"] > PAUSE_S for p in tl["pauses"]] == [True]
    assert tl["failure_seqs"] >= 2
    fails = client.api("failures", id="job-1", limit=500)
    assert fails["total"] == 2000 // FAIL_EVERY
    indices = [f["index"] for f in fails["rows"]]
    assert indices == sorted(indices)
    assert indices[0] == FAIL_EVERY - 1
    times = [f["t"] for f in fails["rows"]]
    assert times[0] == pytest.approx(1_750_000_000.0 + (FAIL_EVERY - 1) / 100)  # its own time
    # the fan-out's counts at the end of each bin follow the instance times, not frame times
    first = tl["bins"][1]["fan_outs"][0]
    assert 0 < first[0] < 2000


def test_timeline_bins_are_bounded(client: Client) -> None:
    tl = client.api("timeline", id="job-1", bins=3)
    assert len(tl["bins"]) == 3
    assert tl["bins"][0]["lo"] == 1
    assert tl["bins"][-1]["hi"] == tl["last_seq"]
    zoom = client.api("timeline", id="job-1", lo=2, hi=4, bins=10)
    assert [b["lo"] for b in zoom["bins"]] == [2, 3, 4]
    assert client.error("timeline", id="job-1", bins=0)[0] == 400
    assert client.error("timeline", id="no-such")[0] == 400


def test_record_grid_instance_and_state_tree(client: Client) -> None:
    last = client.api("timeline", id="job-1")["last_seq"]
    rec = client.api("record", id="job-1", seq=last)
    fan = rec["record"]["fan_outs"][0]
    assert fan["count"] == 2000
    assert fan["failed"] == 2000 // FAIL_EVERY
    assert fan["completed"] + fan["failed"] == 2000
    grid = client.api("instances", id="job-1", seq=last, bins=10)
    assert grid["width"] == 200
    assert len(grid["bins"]) == 10
    assert sum(b[4] for b in grid["bins"]) == fan["failed"]
    zoom = client.api("instances", id="job-1", seq=last, lo=90, hi=100, bins=100)
    assert zoom["width"] == 1
    assert [b[0] for b in zoom["bins"]] == list(range(90, 100))
    assert zoom["bins"][FAIL_EVERY - 1 - 90][4] == 1
    inst = client.api("instance", id="job-1", seq=last, index=FAIL_EVERY - 1)
    assert inst["state"] == "completed"
    assert inst["result_is_error"]
    assert inst["result"]["items"][0][1]["v"] == f"item {FAIL_EVERY - 1} timed out"
    assert inst["failed_at"][0]["seq"] >= 2
    early = client.api("instances", id="job-1", seq=1, bins=1)
    assert early["bins"] == [[0, 2000, 0, 0, 0]]  # nothing had run at seq 1
    assert client.error("instance", id="job-1", seq=last, index=2000)[0] == 400
    assert client.error("record", id="job-1", seq=last + 1)[0] == 400


def test_state_tree_is_paged_and_expands_by_path(tmp_path: Path) -> None:
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from tests.viewer_logs import fan_record, msgspec_replace  # noqa: PLC0415

    path = tmp_path / "log"
    with CheckpointLog.open(path, durability="process") as cl:
        state = {"rows": list(range(250)), "deep": {"a": {"b": {"c": {"d": {"e": "end"}}}}}}
        cl.save("big", msgspec_replace(fan_record("big", 1), state=state))
    server = start(path)
    try:
        c = Client(server)
        node = c.api("record", id="big", seq=1)["record"]["state"]
        rows = dict(node["items"])["rows"]
        assert rows["n"] == 250
        assert len(rows["items"]) == serve.CONTAINER_ITEMS
        more = c.api("value", id="big", seq=1, path='["rows"]', offset=200)["node"]
        assert [x["v"] for x in more["items"]] == [str(i) for i in range(200, 250)]
        deep = dict(node["items"])["deep"]
        while deep["t"] == "dict":
            deep = deep["items"][0][1]
        assert deep["t"] == "more"  # the rest is fetched when clicked
        got = c.api("value", id="big", seq=1, path='["deep","a","b","c"]')["node"]
        assert got["items"][0][0] == "d"
        assert c.error("value", id="big", seq=1, path='["nope"]')[0] == 400
        assert c.error("value", id="big", seq=1, path="not json")[0] == 400
    finally:
        server.shutdown()
        server.server_close()


def test_diff_is_the_cli_diff(client: Client, mixed_path: Path) -> None:
    import io  # noqa: PLC0415

    d = client.api("diff", id="job-1", a=1, b=2, limit=500)
    out = io.StringIO()
    assert (
        cli.main(["diff", str(mixed_path), "job-1", "1", "2", "--full"], out=out, err=io.StringIO())
        == 0
    )
    assert out.getvalue().splitlines()[1:] == d["lines"]
    assert d["total"] == len(d["lines"]) > 0
    page = client.api("diff", id="job-1", a=1, b=2, offset=5, limit=5)
    assert page["lines"] == d["lines"][5:10]
    assert client.error("diff", id="job-1", a=0, b=999)[0] == 400


def test_deleted_and_event_streams(client: Client) -> None:
    rec = client.api("record", id="job-2", seq=4)
    assert rec["record"] is None
    assert rec["kind"] == "delete"
    assert client.api("record", id="job-2", seq=3)["record"]["state"]["items"][0][1]["v"] == "2"
    frames = client.api("frames", id="events:app")
    assert frames["total"] == 3
    assert frames["rows"][0]["content"]["items"][0] == ["name", {"t": "str", "v": "tick", "n": 4}]


def test_verify_and_stats(client: Client) -> None:
    state = client.api("verify", start=1)
    deadline = time.monotonic() + 60
    while state["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
        state = client.api("verify")
    assert state["state"] == "done"
    assert state["ok"]
    assert state["problems"] == []
    stats = client.api("stats")["stats"]
    assert stats["streams"] == 9
    assert stats["frames"] > 0


def test_verify_locates_every_problem(tmp_path: Path) -> None:
    """A damaged frame is listed with its stream and seq."""
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from tests.viewer_logs import fan_record  # noqa: PLC0415

    path = tmp_path / "log"
    with CheckpointLog.open(path, durability="process") as cl:
        for _ in range(3):
            cl.save("a", fan_record("a", 2))
    import lmdb  # noqa: PLC0415

    env = lmdb.open(str(path), max_dbs=64)
    with env.begin(write=True) as txn:
        db = env.open_db(b"log", txn=txn)
        key = (2).to_bytes(8, "big")
        data = bytearray(txn.get(key, db=db))
        data[-1] ^= 0xFF
        txn.put(key, bytes(data), db=db)
    env.close()
    server = start(path)
    try:
        c = Client(server)
        state = c.api("verify", start=1)
        while state["state"] == "running":
            time.sleep(0.05)
            state = c.api("verify")
        assert not state["ok"]
        located = [(p["stream"], p["seq"]) for p in state["problems"]]
        assert ("a", 2) in located
        tl = c.api("timeline", id="a")
        assert tl["indexed"] == tl["last_seq"] == 3  # the damaged seq keeps its place
        assert tl["unreadable"]
        assert tl["unreadable"][0]["seq"] == 2
    finally:
        server.shutdown()
        server.server_close()


# -- integrations in their own terms -----------------------------------------------------------


def test_langgraph_checkpoints_with_parents_forks_and_writes(client: Client) -> None:
    data = client.api("langgraph", thread="lg-thread", ns="")
    rows = data["rows"]
    ids = {r["id"] for r in rows}
    children: dict[str, int] = {}
    for r in rows:
        if r["parent_id"] is not None:
            assert r["parent_id"] in ids
            children[r["parent_id"]] = children.get(r["parent_id"], 0) + 1
    assert max(children.values()) == 2  # the fork: one checkpoint with two children
    sources = {dict(r["metadata"]["items"])["source"]["v"] for r in rows}
    assert {"input", "loop", "update"} <= sources
    newest = dict(rows[0]["channels"]["items"])
    assert [x["v"] for x in newest["items"]["items"]] == ["0", "1", "99", "3"]
    assert all(isinstance(r["pending_writes"], list) for r in rows)
    assert (
        client.api("langgraph", thread="lg-thread", ns="", offset=1, limit=1)["rows"][0]["id"]
        == rows[1]["id"]
    )


def test_techrevati_history(client: Client) -> None:
    rows = client.api("techrevati", thread="tr-1")["rows"]
    assert [r["kind"] for r in rows] == ["checkpoint", "step", "checkpoint"]
    assert dict(rows[1]["value"]["items"])["step_key"]["v"] == "fetch"
    assert [r["kind"] for r in client.api("techrevati", thread="tr-2")["rows"]] == [
        "checkpoint",
        "delete",
    ]


def test_apflow_history(client: Client) -> None:
    rows = client.api("apflow", task="task-1")["rows"]
    assert [(r["kind"], r["attempt"]) for r in rows] == [
        ("checkpoint", 1),
        ("checkpoint", 2),
        ("checkpoint", 3),
        ("delete", None),
    ]
    assert rows[0]["step_name"] == "fetch"


# -- safety --------------------------------------------------------------------------------------


def test_binds_loopback_by_default(mixed_path: Path) -> None:
    args = cli.build_parser().parse_args(["serve", str(mixed_path)])
    assert (args.host, args.port, args.token) == ("127.0.0.1", serve.DEFAULT_PORT, None)
    server = serve.make_server(str(mixed_path), port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()


def test_host_header_must_be_the_bound_address(client: Client) -> None:
    port = client.server.port
    for ok in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert client.get("/api/info", host=ok)[0] == 200, ok
    for bad in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", "", None):
        status, _, body = client.get("/api/info", host=bad)
        assert status == 403, bad
        assert b"not the address this viewer is bound to" in body
    assert client.get("/", host="attacker.test")[0] == 403  # the page too


def test_public_bind_needs_a_token_and_warns(mixed_path: Path) -> None:
    with pytest.raises(serve.ServeError, match="--token"):
        serve.make_server(str(mixed_path), host="0.0.0.0", port=0)
    warnings: list[str] = []
    server = serve.make_server(
        str(mixed_path), host="0.0.0.0", port=0, token="s3cret-token", warn=warnings.append
    )
    server.serve_in_thread()
    try:
        assert warnings
        assert "0.0.0.0" in warnings[0]
        c = Client(server)
        assert c.get("/api/info", host="anything:1")[0] == 401
        assert c.get("/api/info?token=wrong", host="x")[0] == 401
        status, headers, _ = c.get("/?token=s3cret-token", host="x")
        assert status == 200
        cookie = headers["Set-Cookie"].split(";")[0]
        assert "HttpOnly" in headers["Set-Cookie"]
        assert c.get("/api/info", host="x", headers={"Cookie": cookie})[0] == 200
        assert c.get("/api/info", host="x", headers={"Cookie": "ckptlog_token=nope"})[0] == 401
    finally:
        server.shutdown()
        server.server_close()


def test_cli_refuses_a_public_bind_without_token(mixed_path: Path) -> None:
    import io  # noqa: PLC0415

    err = io.StringIO()
    code = cli.main(["serve", str(mixed_path), "--host", "0.0.0.0"], out=io.StringIO(), err=err)
    assert code == cli.USAGE
    assert "--token" in err.getvalue()
    assert err.getvalue().startswith("ckptlog: error:")


def test_responses_are_json_or_static_with_a_strict_policy(client: Client) -> None:
    port = client.server.port
    status, headers, body = client.get("/", host=f"127.0.0.1:{port}")
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b"<script" in body
    assert b'src="/static/app.js"' in body
    # an id holding HTML comes back as a JSON string, never as markup the server built
    status, headers, body = client.get(f"/api/invocations?q={XSS_ID[:8]}", host=f"127.0.0.1:{port}")
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["rows"][0]["id"] == XSS_ID
    assert client.get("/static/../serve.py", host=f"127.0.0.1:{port}")[0] == 404
    assert client.get("/api/nothing", host=f"127.0.0.1:{port}")[0] == 404
    rec = client.api("record", id=XSS_ID, seq=1)["record"]
    assert rec["state"]["items"][0][0] == XSS_KEY


def test_never_writes_the_log(mixed_path: Path) -> None:
    def digest() -> str:
        return hashlib.sha256((mixed_path / "data.mdb").read_bytes()).hexdigest()

    before = digest()
    server = start(mixed_path)
    try:
        c = Client(server)
        for inv in ("job-1", "job-2", XSS_ID, "events:app"):
            c.api("timeline", id=inv)
            c.api("record", id=inv, seq=1)
        c.api("langgraph", thread="lg-thread")
        c.api("techrevati", thread="tr-1")
        c.api("apflow", task="task-1")
        conn = http.client.HTTPConnection("127.0.0.1", server.port)
        conn.request("POST", "/api/info", body=b"{}")
        assert conn.getresponse().status == 405
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
    assert digest() == before


# -- a writer in another process -------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    from eventlog.checkpoints import CheckpointLog
    from tests.viewer_logs import fan_record
    path, n = sys.argv[1], int(sys.argv[2])
    cl = CheckpointLog.open(path, durability="process")
    slowest = 0.0
    for i in range(n):
        t = time.perf_counter()
        cl.save("live", fan_record("live", 4))
        slowest = max(slowest, time.perf_counter() - t)
        if i == 0:
            print("started", flush=True)
        time.sleep(0.002)
    cl.close()
    print(f"done {n} {slowest:.4f}", flush=True)
    """
)


def test_a_writer_keeps_appending_while_the_page_polls(tmp_path: Path) -> None:
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from tests.viewer_logs import fan_record  # noqa: PLC0415

    path = tmp_path / "live"
    with CheckpointLog.open(path, durability="process") as cl:
        cl.save("live", fan_record("live", 4))
    server = start(path)
    saves = 400
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(saves)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    ) as writer:
        try:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "started"
            c = Client(server)
            seen = []
            while writer.poll() is None:  # what the page does: changes, then list and timeline
                seen.append(c.api("changes")["frames"])
                c.api("invocations")
                tl = c.api("timeline", id="live", bins=50)
                c.api("record", id="live", seq=tl["last_seq"])
            out = writer.stdout.read().split()
            assert writer.wait(timeout=60) == 0
            assert out[:2] == ["done", str(saves)]
            assert len(set(seen)) >= 3  # new saves appeared while it ran, without a reload
            final = c.api("timeline", id="live")
            assert final["last_seq"] == saves + 1 == final["indexed"]
            rows = c.api("invocations")["rows"]
            assert rows[0]["saves"] == saves + 1
        finally:
            if writer.poll() is None:
                writer.kill()
            server.shutdown()
            server.server_close()


def test_cli_serve_prints_its_url_and_serves(mixed_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with subprocess.Popen(
        [sys.executable, "-m", "eventlog.cli", "serve", str(mixed_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "read-only at http://127.0.0.1:" in line
            port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/api/info")
            resp = conn.getresponse()
            assert resp.status == 200
            assert json.loads(resp.read())["path"] == str(mixed_path)
            conn.close()
        finally:
            proc.terminate()
            proc.communicate(timeout=30)


def test_verify_includes_the_integrations_own_checks(tmp_path: Path) -> None:
    """A techrevati head row removed behind the log's back: the log's own checks pass, the
    integration's verify names the thread, and the page's verify shows it."""
    import lmdb  # noqa: PLC0415

    path = tmp_path / "mixed"
    build_mixed(path, instances=10)
    env = lmdb.open(str(path), max_dbs=64)
    with env.begin(write=True) as txn:
        db = env.open_db(b"techrevati", txn=txn)
        heads = [k for k, _ in txn.cursor(db=db) if k.startswith(b"h")]
        assert heads
        for k in heads:
            txn.delete(k, db=db)
    env.close()
    server = start(path)
    try:
        c = Client(server)
        state = c.api("verify", start=1)
        while state["state"] == "running":
            time.sleep(0.05)
            state = c.api("verify")
        assert state["state"] == "done"
        assert not state["ok"]
        streams = {p["stream"] for p in state["problems"]}
        assert "techrevati:tr-1" in streams
        assert all(p["stream"].startswith("techrevati:") for p in state["problems"])
    finally:
        server.shutdown()
        server.server_close()


def test_concurrent_requests_read_compressed_frames(tmp_path: Path) -> None:
    """Requests run on several threads at once; each reads (and decompresses) large frames.
    A zstd context shared between threads corrupts reads: each thread gets its own log."""
    import concurrent.futures  # noqa: PLC0415

    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from eventlog.frames import Event  # noqa: PLC0415

    path = tmp_path / "log"
    with CheckpointLog.open(path, durability="process") as cl:
        for i in range(12):
            cl.log.append("ev", Event(name="big", data=[f"row {j} {i}" for j in range(50_000)]))
    server = start(path)
    try:
        c = Client(server)

        def fetch(k: int) -> int:
            for _ in range(3):
                got = c.get(
                    f"/api/frames?id=ev&offset={k % 6}&limit=6", host=f"127.0.0.1:{server.port}"
                )
                if got[0] != 200:
                    return got[0]
            return 200

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            assert set(pool.map(fetch, range(16))) == {200}
    finally:
        server.shutdown()
        server.server_close()
