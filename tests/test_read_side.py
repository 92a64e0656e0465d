"""One read side (issue 23): a fifth kind of stream, defined and registered here and nowhere
else, shows up in ``ckptlog ls``, ``history``, ``show``, ``diff``, ``export``, ``verify``
and the viewer's API; and the three faces agree on what each stream is."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.base import WriteTxn
from eventlog import views, walker
from eventlog.checkpoints import CheckpointLog
from eventlog.cli import main
from eventlog.frames import Event
from eventlog.log import EventLog, StoredFrame
from eventlog.read import streams as read_streams
from eventlog.reports import Problem
from eventlog.streams import Step, StreamInfo
from eventlog.viewer.server import make_server
from tests.test_serve import Client
from tests.test_serve_browser import driver, find, has_text, no_errors, open_page, text, wait

__all__ = ["driver"]  # the browser fixture, shared with tests/test_serve_browser.py

PREFIX = "tally:"


class TallyView:
    """A toy view: ``tally:<name>`` streams of ``tally.add`` events, each adding ``n`` to a
    running total. It keeps no rows, so it owns no tables; ``verify`` reports a negative
    ``n``, which a tally never adds."""

    name = "tally"
    tables: tuple[str, ...] = ()

    def claims(self, stream: str, first: Any) -> bool:
        return stream.startswith(PREFIX) and isinstance(first, Event) and first.name == "tally.add"

    def apply(
        self, txn: WriteTxn, stream: str, sid: int, seq: int, frame: Any, stored_bytes: int
    ) -> None:
        pass

    def rebuild_stream(
        self, txn: WriteTxn, stream: str, sid: int, frames: Iterable[StoredFrame[Any]]
    ) -> None:
        pass

    def verify(
        self, log: EventLog, progress: Callable[[int, int], None] | None = None
    ) -> list[Problem]:
        return [
            Problem("projection", "a tally never adds less than 0", stream, sf.seq)
            for stream in log.streams()
            if stream.startswith(PREFIX)
            for sf in log.read_stream(stream)
            if sf.frame.data.get("n", 0) < 0
        ]

    def describe(self, stream: str) -> StreamInfo | None:
        if not stream.startswith(PREFIX):
            return None
        name = stream[len(PREFIX) :]
        return StreamInfo(
            stream, "tally", "tally counter", f"tally {name}", aliases=(name,),
            labels={"counter": name},
        )  # fmt: skip

    def steps(self, log: EventLog, stream: str, *, diffs: bool = False) -> Iterator[Any]:
        total = 0
        for item in walker.read_frames(log, stream):
            if isinstance(item, walker.Unreadable):
                yield item
                continue
            n = item.frame.data["n"]
            total += n
            yield Step(
                item.seq, item.global_seq, item.frame.at, "add", f"+{n}", None, ("adder",),
                item.stored_bytes, item.checksum, item.frame, "event", {"total": total, "last": n},
            )  # fmt: skip


@pytest.fixture
def tally_log(tmp_path: Path) -> Iterator[Path]:
    views.register(TallyView())
    path = tmp_path / "log"
    with CheckpointLog.open(path, durability="process") as cl:
        for i, n in enumerate((5, 7, -1)):
            cl.log.append("tally:apples", Event(name="tally.add", at=1000.0 + i, data={"n": n}))
        cl.log.append("events:app", Event(name="started", at=999.0, data={}))
    try:
        yield path
    finally:
        views.unregister("tally")


def ckptlog(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out=out, err=err, isolate=False)
    return code, out.getvalue(), err.getvalue()


def test_a_fifth_kind_of_stream_in_every_command(tally_log: Path) -> None:
    path = str(tally_log)
    code, out, err = ckptlog("ls", path, "--json")
    assert code == 0, err
    rows = {r["invocation_id"]: r for r in json.loads(out)}
    assert rows["tally:apples"]["type"] == "tally"
    assert rows["tally:apples"]["counter"] == "apples"
    assert "events:app" not in rows  # events only with --all, as before
    code, out, _ = ckptlog("ls", path)
    assert "tally apples" in out
    assert "tally counter" in out

    code, out, err = ckptlog("history", path, "apples", "--json")  # by the name its view gives
    assert code == 0, err
    history = json.loads(out)
    assert [(h["seq"], h["kind"], h["label"], h["node"]) for h in history] == [
        (1, "add", "+5", "adder"), (2, "add", "+7", "adder"), (3, "add", "+-1", "adder"),
    ]  # fmt: skip
    code, out, _ = ckptlog("history", path, "tally:apples", "--changed", "total", "-n", "1")
    assert code == 0
    assert out.splitlines()[1].split()[0] == "1"

    code, out, err = ckptlog("show", path, "tally:apples", "--at", "2", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["type"], shown["view"]) == ("tally", {"total": 12, "last": 7})
    code, out, _ = ckptlog("show", path, "apples")
    assert code == 0
    assert "tally counter" in out
    assert "total:" in out
    assert "11" in out

    code, out, err = ckptlog("diff", path, "apples", "1", "3", "--format", "json-patch")
    assert code == 0, err
    assert json.loads(out) == [
        {"op": "replace", "path": "/total", "value": 11},
        {"op": "replace", "path": "/last", "value": -1},
    ]
    code, out, _ = ckptlog("diff", path, "apples", "1", "2")
    assert "~ total: 5 -> 12" in out

    code, out, err = ckptlog("export", path, "apples", "--format", "jsonl")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["view"]["total"] for line in lines] == [5, 12, 11]

    code, out, _ = ckptlog("verify", path, "--json")
    report = json.loads(out)
    assert code == 1
    assert not report["ok"]
    assert [(p["stream"], p["seq"]) for p in report["problems"]] == [("tally:apples", 3)]


def test_a_fifth_kind_of_stream_in_the_viewer(tally_log: Path) -> None:
    server = make_server(str(tally_log), port=0)
    server.serve_in_thread()
    try:
        c = Client(server)
        rows = {r["id"]: r for r in c.api("invocations")["rows"]}
        tally = rows["tally:apples"]
        assert (tally["family"], tally["noun"], tally["counter"]) == ("tally", "tally counter",
                                                                       "apples")  # fmt: skip
        assert tally["records"] is False
        assert rows["events:app"]["family"] == "events"
        assert [r["id"] for r in c.api("invocations", family="tally")["rows"]] == ["tally:apples"]
        steps = c.api("steps", id="tally:apples", offset=1, limit=10)
        assert [(r["seq"], r["title"]) for r in steps["rows"]] == [(2, "add +7"), (3, "add +-1")]
        assert steps["rows"][0]["value"]["items"][0] == ["total", {"t": "num", "v": "12"}]
        state = c.api("verify", start=1)
        while state["state"] == "running":
            state = c.api("verify")
        assert [p["stream"] for p in state["problems"]] == ["tally:apples"]
    finally:
        server.shutdown()
        server.server_close()


def test_one_rule_for_what_a_stream_is(tally_log: Path) -> None:
    """The command line, the viewer and the read layer give the same kind for every stream."""
    with CheckpointLog.open(tally_log, readonly=True) as cl:
        listed = {r.row.invocation_id: r.kind for r in read_streams.listing(cl)}
        assert listed == {"tally:apples": "tally", "events:app": "events"}
        assert read_streams.describe(cl.log, "tally:apples").display == "tally apples"
    _, out, _ = ckptlog("ls", str(tally_log), "--all", "--json")
    assert {r["invocation_id"]: r["type"] for r in json.loads(out)} == listed


def test_a_registered_view_goes_before_the_checkpoint_view() -> None:
    view = TallyView()
    views.register(view)
    try:
        assert views.REGISTRY[-1] is views.CHECKPOINTS
        assert views.REGISTRY[-2] is view
        views.register(TallyView())  # the same name replaces it
        assert sum(v.name == "tally" for v in views.REGISTRY) == 1
    finally:
        views.unregister("tally")
    assert all(v.name != "tally" for v in views.REGISTRY)
    with pytest.raises(Exception, match="built in"):
        views.unregister("checkpoints")


def test_the_viewer_reads_a_techrevati_thread_without_techrevati(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before issue 23, ``ckptlog show`` read a techrevati thread without the framework while
    the viewer asked to install it; now the viewer reads the frames through the view too."""
    from tests.viewer_logs import build_mixed  # noqa: PLC0415

    build_mixed(tmp_path / "mixed", instances=10)
    server = make_server(str(tmp_path / "mixed"), port=0)
    server.serve_in_thread()
    try:
        c = Client(server)
        with_framework = c.api("techrevati", thread="tr-1")
        monkeypatch.setitem(sys.modules, "eventlog.integrations.techrevati", None)
        without = c.api("techrevati", thread="tr-1")
        assert "from_frames" not in with_framework
        assert "from_frames" in without
        assert [r["kind"] for r in without["rows"]] == [r["kind"] for r in with_framework["rows"]]
        assert [r["seq"] for r in without["rows"]] == [r["seq"] for r in with_framework["rows"]]
        code, out, _ = ckptlog("show", str(tmp_path / "mixed"), "tr-1", "--json")
        assert code == 0
        last = without["rows"][-1]["value"]
        assert last["t"] == "dict"
        assert {k for k, _ in last["items"]} == set(json.loads(out)["view"])
    finally:
        server.shutdown()
        server.server_close()


def test_a_fifth_kind_of_stream_in_the_page(driver: Any, tally_log: Path) -> None:
    """The page has no panel for a tally: it lists it in its view's terms and shows its frames
    with the value after each (/api/steps), with no change to the page."""
    server = make_server(str(tally_log), port=0)
    server.serve_in_thread()
    try:
        open_page(driver, server)
        wait(driver, has_text("#inv-list", "tally counter"))
        find(driver, '#inv-list li[data-id="tally:apples"]').click()
        wait(driver, has_text("#steps", "add +-1"))
        assert "tally apples" in text(driver, "#detail")
        assert "adder" in text(driver, "#steps")
        no_errors(driver)
    finally:
        server.shutdown()
        server.server_close()
