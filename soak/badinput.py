"""Bad input: hypothesis-generated wrong types, sizes and encodings to every public entry point.

Each call may succeed (the value was acceptable) or raise; anything raised must be a
``CheckpointError`` whose message says what was expected and what was found (``must``,
``expected``, ``got`` or ``found``); any other exception is an untyped error (a failure). The
log verifies afterwards. The CLI is driven in-process with generated argument lists: it must
exit with a documented status and never print a traceback.
"""

from __future__ import annotations

import asyncio
import io
import math
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from eventlog import (
    CheckpointFilter,
    CheckpointRecord,
    FanOutInstanceProgress,
    FanOutProgress,
    NodePosition,
    forensics,
)
from eventlog.checkpoints import Checkpointer, CheckpointLog
from eventlog.errors import CheckpointError
from soak.common import Tally
from soak.workers import fan_out, rec

wrong = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([math.nan, math.inf, -math.inf, 1.5, -0.0]),
    st.text(max_size=40),
    st.sampled_from(["", "\ud800", "x" * 2000, "a\0b", "inv-0"]),
    st.binary(max_size=40),
    st.lists(st.integers(), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.tuples(st.text(max_size=3)),
    st.builds(object),
    st.just({1, 2}),
)
RECORD_FIELDS = CheckpointRecord.__struct_fields__
PROGRESS_FIELDS = FanOutInstanceProgress.__struct_fields__
FAN_FIELDS = FanOutProgress.__struct_fields__
POSITION_FIELDS = NodePosition.__struct_fields__


def _replace(obj: Any, name: str, value: Any) -> Any:
    fields = {f: getattr(obj, f) for f in obj.__struct_fields__}
    fields[name] = value
    return type(obj)(**fields)


def _bad_record(draw: Any) -> Any:
    inv = "inv-0"
    base = rec(inv, {"n": 1}, fan_out=(fan_out(3),))
    where = draw(st.sampled_from(["record", "position", "fan", "instance", "state"]))
    value = draw(wrong)
    if where == "record":
        return _replace(base, draw(st.sampled_from(RECORD_FIELDS)), value)
    if where == "position":
        pos = _replace(base.completed_positions[0], draw(st.sampled_from(POSITION_FIELDS)), value)
        return _replace(base, "completed_positions", (pos,))
    fan = base.fan_out_progress[0]
    if where == "fan":
        return _replace(
            base, "fan_out_progress", (_replace(fan, draw(st.sampled_from(FAN_FIELDS)), value),)
        )
    if where == "instance":
        inst = _replace(fan.instances[1], draw(st.sampled_from(PROGRESS_FIELDS)), value)
        fan = _replace(fan, "instances", (fan.instances[0], inst, fan.instances[2]))
        return _replace(base, "fan_out_progress", (fan,))
    return _replace(base, "state", {"k": value})


bad_records = st.composite(_bad_record)
SAVES = ["save", "save_fan_out_internal", "save_fan_out_in_flight_failure"]


def run(seed_: int, n: int, work: Path, tally: Tally) -> None:  # noqa: PLR0915 - one harness
    path = work / "badinput"
    log = CheckpointLog.open(path)
    log.save("inv-0", rec("inv-0", {"n": 0}, fan_out=(fan_out(3),)))
    cp_path = work / "badinput-async"

    def call(name: str, fn: Callable[[], Any]) -> None:
        tally.add("bad_inputs")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = fn()
                if hasattr(out, "__next__"):
                    list(out)
        except CheckpointError as e:
            tally.add("typed")
            if not str(e).strip():
                tally.fail(f"{name}: {type(e).__name__} with an empty message")
        except Exception as e:  # noqa: BLE001 - the campaign counts these
            tally.add("untyped")
            tally.fail(f"{name}: untyped {type(e).__name__}: {str(e)[:200]}")
        else:
            tally.add("accepted")

    per = max(1, n // 10)
    cfg = settings(
        max_examples=per, database=None, deadline=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip

    @cfg
    @seed(seed_)
    @given(bad_records(), st.sampled_from(SAVES))
    def records(record: Any, method: str) -> None:
        call(f"CheckpointLog.{method}", lambda: getattr(log, method)("inv-0", record))

    @cfg
    @seed(seed_ + 1)
    @given(wrong, wrong, wrong, wrong)
    def instance(a: Any, b: Any, c: Any, d: Any) -> None:
        good = FanOutInstanceProgress("completed", result=1)
        call("save_instance(inv)", lambda: log.save_instance(a, "work", 1, good))
        call("save_instance(node)", lambda: log.save_instance("inv-0", b, 1, good))
        call("save_instance(index)", lambda: log.save_instance("inv-0", "work", c, good))
        call("save_instance(progress)", lambda: log.save_instance("inv-0", "work", 1, d))
        call(
            "save_instance(namespace)",
            lambda: log.save_instance("inv-0", "work", 1, good, namespace=a),
        )
        log.flush()

    @cfg
    @seed(seed_ + 2)
    @given(wrong, wrong)
    def reads(a: Any, b: Any) -> None:
        call("load", lambda: log.load(a))
        call("history(inv)", lambda: log.history(a))
        call("history(since)", lambda: log.history("inv-0", since=b))
        call("history(kinds)", lambda: log.history("inv-0", kinds=b))
        call("record_at", lambda: log.record_at("inv-0", a))
        call("record_at(inv)", lambda: log.record_at(a, 1))
        call("record_as_of", lambda: forensics.record_as_of(log, "inv-0", a))
        call("diff", lambda: forensics.diff(log, "inv-0", a, b))
        call("list", lambda: log.list(a))
        call("list(filter)", lambda: log.list(CheckpointFilter(correlation_id=a)))
        call("pending_instances", lambda: log.pending_instances("inv-0", a))
        call("pending_instances(ns)", lambda: log.pending_instances("inv-0", "work", namespace=b))
        call("delete", lambda: log.delete(a) if a != "inv-0" else None)

    @cfg
    @seed(seed_ + 3)
    @given(wrong, wrong)
    def async_api(a: Any, b: Any) -> None:
        async def go() -> None:
            cp = Checkpointer.open(cp_path)
            try:
                for name, make in (
                    ("Checkpointer.save", lambda: cp.save(a, rec("x", {}))),
                    ("Checkpointer.save(record)", lambda: cp.save("x", b)),
                    ("Checkpointer.load", lambda: cp.load(a)),
                    ("Checkpointer.delete", lambda: cp.delete(a)),
                    ("Checkpointer.list", lambda: cp.list(a)),
                ):
                    error: BaseException | None = None
                    try:
                        await make()
                    except Exception as e:  # noqa: BLE001 - classified by call()
                        error = e

                    def replay(error: BaseException | None = error) -> None:
                        if error is not None:
                            raise error

                    call(name, replay)
            finally:
                await cp.aclose()

        asyncio.run(go())

    @cfg
    @seed(seed_ + 4)
    @given(wrong, wrong)
    def integrations(a: Any, b: Any) -> None:
        call("techrevati.put", lambda: saver.put(a, {"k": 1}))
        call("techrevati.put(state)", lambda: saver.put("t", b))
        call("techrevati.get", lambda: saver.get(a))
        call("techrevati.put_step", lambda: saver.put_step("t", a, b))
        call("apflow.save_checkpoint", lambda: asyncio.run(mgr.save_checkpoint(a, {"k": 1})))
        call("apflow.save_checkpoint(data)", lambda: asyncio.run(mgr.save_checkpoint("t", b)))
        call("apflow.load_checkpoint", lambda: asyncio.run(mgr.load_checkpoint(a)))
        call("langgraph.get_tuple", lambda: lg.get_tuple(a))
        call("langgraph.list", lambda: list(lg.list(a)))

    cli_args = st.lists(
        st.one_of(
            st.sampled_from(["ls", "history", "show", "diff", "verify", "export", "stats",
                             "compact", "--json", "--at", "--as-of", "--keep", "inv-0", "-1",
                             "x" * 300, str(path), str(work / "nope")]),
            st.text(max_size=12),
        ),
        max_size=6,
    )  # fmt: skip

    @cfg
    @seed(seed_ + 5)
    @given(cli_args)
    def cli(argv: list[str]) -> None:
        from eventlog.cli import main  # noqa: PLC0415

        tally.add("bad_inputs")
        out, err = io.StringIO(), io.StringIO()
        try:
            code = main([a for a in argv if a != "compact"], out=out, err=err, isolate=False)
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else 2
        except Exception as e:  # noqa: BLE001 - the campaign counts these
            tally.add("untyped")
            tally.fail(f"ckptlog {argv}: {type(e).__name__}: {e}")
            return
        if "Traceback" in err.getvalue() or code not in (0, 1, 2, 3, 4):
            tally.add("untyped")
            tally.fail(f"ckptlog {argv}: exit {code}: {err.getvalue()[-300:]}")
        else:
            tally.add("typed" if code else "accepted")

    from eventlog.integrations.apflow import LogCheckpointManager  # noqa: PLC0415
    from eventlog.integrations.langgraph import LmdbSaver  # noqa: PLC0415
    from eventlog.integrations.techrevati import LogSaver  # noqa: PLC0415

    saver = LogSaver.open(work / "badinput-techrevati")
    mgr = LogCheckpointManager.open(work / "badinput-apflow")
    lg = LmdbSaver.open(work / "badinput-langgraph")
    try:
        for fn in (records, instance, reads, integrations, cli):
            for _ in range(2):
                fn()
        async_api()
        for name, checker in (
            ("log", log),
            ("techrevati", saver),
            ("apflow", mgr),
            ("langgraph", lg),
        ):
            if not checker.verify().ok:
                tally.fail(f"bad input: the {name} log does not verify afterwards")
    finally:
        log.close()
        saver.close()
        asyncio.run(mgr.aclose())
        lg.close()
        for p in work.glob("badinput*"):
            shutil.rmtree(p, ignore_errors=True)
