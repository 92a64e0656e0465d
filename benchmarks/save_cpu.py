"""Caller-side CPU of one save: validation, the lossy-value check and the state's encode.

    python -m benchmarks.save_cpu [--quick] [--json PATH]

For states shaped like the linear scenario's (200 B, 4 KiB, 64 KiB: a flat dict of hex
strings, ``benchmarks.scenarios.state_of``) and a few other shapes (1,000 small dicts, as in
docs/design.md; a list of 1,536 floats; a list of 4,096 short strs), prints microseconds per
call of:

- ``encode``: the msgspec encode of the state alone (the floor the check is compared with);
- ``lossless before`` / ``lossless after``: :func:`eventlog.codec.check_lossless` as it was
  before the msgspec.convert fast paths for long levels of leaves (a verbatim copy below)
  and as it is now;
- ``validate before`` / ``validate after``: ``RecordChecker.check`` of the record (every
  field but the state), with :func:`eventlog.validate.check_positions` as it was (a verbatim
  copy below) and as it is; records cycle, so each holds new position objects, as in the
  linear scenario;
- ``caller before`` / ``caller after``: validate + encode_value(state) + encode_value(parent
  states), the work ``CheckpointLog.save`` does in the caller's thread;
- ``save before`` / ``save after`` (linear shapes only): the median latency of a whole
  synchronous ``CheckpointLog.save`` in ``process`` durability (the lowest median of 5 runs
  of 500 saves), with the old or the new functions swapped into ``eventlog.codec`` and
  ``eventlog.validate``.

Before and after alternate within each repeat (the machine is shared: compare the ratios);
each figure is the best of the repeats (for saves, the lowest median). Writes
``benchmarks/results/save_cpu.json``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.common import environment, print_table, write_json
from benchmarks.scenarios import save_op
from eventlog import codec, validate
from eventlog.checkpoints import CheckpointLog
from eventlog.codec import _find_lossy, _value_encoder
from eventlog.errors import EncodingError
from eventlog.validate import RecordChecker, check_position, check_seq, fail

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "save_cpu.json"
_PLAIN_BEFORE = frozenset({dict, list, tuple, str, int, float, bool, type(None), bytes})


def check_lossless_before(value: Any, path: str) -> None:
    """eventlog.codec.check_lossless before the convert fast paths (b5695a3), verbatim."""
    level = [value]
    while level:
        if not _PLAIN_BEFORE.issuperset(map(type, level)):
            break
        level = gc.get_referents(*level)
    else:
        return
    found = _find_lossy(value, path)
    if found is None:
        return
    where, _bad = found
    raise EncodingError("lossy", path=where)


_POSITIONS_BEFORE = tuple[validate._Position, ...]


def check_positions_before(ps: Any, path: str, start: int = 0) -> None:
    """eventlog.validate.check_positions before the Struct-wrapped type (b5695a3), verbatim."""
    check_seq(ps, path)
    if len(ps) <= start:
        return
    try:
        msgspec.convert(
            ps[start:] if start else ps, _POSITIONS_BEFORE, from_attributes=True, strict=True
        )
    except (msgspec.ValidationError, UnicodeEncodeError) as e:
        error: Exception | None = e
    else:
        error = None
        if not any(issubclass(t, Mapping) for t in set(map(type, ps))):
            return
    for i in range(start, len(ps)):
        check_position(ps[i], f"{path}[{i}]")
    msg, _, where = str(error).partition(" - at `$")
    if start:
        msg += f" (index counted from {start})"
    fail(f"{path}{where.rstrip('`')}", f"as declared ({msg})", ps)


class Before:
    """The old check_lossless and check_positions swapped into the modules for a block (their
    callers read the module globals at each call)."""

    def __enter__(self) -> None:
        self.saved = codec.check_lossless, validate.check_positions
        codec.check_lossless = check_lossless_before
        validate.check_positions = check_positions_before

    def __exit__(self, *exc: object) -> None:
        codec.check_lossless, validate.check_positions = self.saved


def _encode_value_with(check: Callable[[Any, str], None]) -> Callable[[Any, str], bytes]:
    def encode_value(value: Any, path: str) -> bytes:
        data: bytes = _value_encoder.encode(value)
        check(value, path)
        return data

    return encode_value


def shapes(quick: bool) -> list[tuple[str, Any, Any]]:
    """(name, state, record or None): the record is the linear scenario's save 5."""
    out: list[tuple[str, Any, Any]] = []
    for size in (200, 4096) if quick else (200, 4096, 65536):
        op = save_op("linear", "bench", 5, size)
        out.append((f"linear {size} B", op.state, op.record))
    nested = {
        "items": [
            {"id": i, "name": f"n{i}", "tags": ["a", "b"], "score": i / 3} for i in range(1000)
        ]
    }
    out.append(("1,000 small dicts", nested, None))
    out.append(("1,536 floats", {"embedding": [i / 7 for i in range(1536)]}, None))
    out.append(("4,096 short strs", {"words": [f"w{i}" for i in range(4096)]}, None))
    return out


def _loops(fn: Callable[[], Any], budget_s: float) -> int:
    return max(1, int(budget_s / max(timeit.timeit(fn, number=3) / 3, 1e-7)))


def per_call_us(fn: Callable[[], Any], budget_s: float) -> float:
    """Microseconds per call: the best of 5 timings of a loop sized to ``budget_s``."""
    n = _loops(fn, budget_s)
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def pair_us(
    before: Callable[[], Any], after: Callable[[], Any], budget_s: float
) -> tuple[float, float]:
    """Microseconds per call of ``before`` (run with the old functions swapped in) and
    ``after``, alternating 5 times (the machine is shared); the best of each."""
    with Before():
        nb = _loops(before, budget_s)
    na = _loops(after, budget_s)
    b: list[float] = []
    a: list[float] = []
    for _ in range(5):
        with Before():
            b.append(timeit.timeit(before, number=nb) / nb * 1e6)
        a.append(timeit.timeit(after, number=na) / na * 1e6)
    return min(b), min(a)


def save_us(record_ops: list[Any]) -> float:
    """Median microseconds of one synchronous ``CheckpointLog.save`` (process durability):
    each save timed alone, so a burst of other work on the machine moves the median little."""
    clock = time.perf_counter
    lat: list[float] = []
    with (
        tempfile.TemporaryDirectory() as d,
        CheckpointLog.open(Path(d) / "log", durability="process") as cl,
    ):
        for op in record_ops[:8]:  # warm up (not timed)
            cl.save(op.inv, op.record)
        for op in record_ops[8:]:
            t0 = clock()
            cl.save(op.inv, op.record)
            lat.append(clock() - t0)
    return statistics.median(lat) * 1e6


def measure(name: str, state: Any, record: Any, *, quick: bool) -> dict[str, Any]:
    """One row of the table: see the module docstring."""
    budget = 0.02 if quick else 0.1
    checker = RecordChecker(16)
    row: dict[str, Any] = {"shape": name, "encoded_bytes": len(_value_encoder.encode(state))}
    row["encode"] = per_call_us(lambda: _value_encoder.encode(state), budget)
    row["lossless_before"], row["lossless_after"] = pair_us(
        lambda: check_lossless_before(state, "s"), lambda: codec.check_lossless(state, "s"), budget
    )
    if record is None:
        return row
    size = int(name.split()[1])
    ops = [save_op("linear", "bench", k, size) for k in range(8 + (100 if quick else 500))]
    # Each save's record holds new position objects, as in the linear scenario: the checker's
    # same-objects prefix does not apply, so cycle through distinct records.
    records = itertools.cycle([op.record for op in ops])
    before_enc = _encode_value_with(check_lossless_before)

    def validate_once() -> None:
        checker.check("linear", next(records))

    def caller(enc: Callable[[Any, str], bytes]) -> None:
        rec = next(records)
        checker.check("linear", rec)
        enc(rec.state, "state")
        enc(tuple(rec.parent_states), "parent_states")

    row["validate_before"], row["validate_after"] = pair_us(validate_once, validate_once, budget)
    row["caller_before"], row["caller_after"] = pair_us(
        lambda: caller(before_enc), lambda: caller(codec.encode_value), budget
    )
    runs: dict[str, list[float]] = {"save_before": [], "save_after": []}
    for _ in range(3 if quick else 5):  # alternate: the machine is shared
        with Before():
            runs["save_before"].append(save_us(ops))
        runs["save_after"].append(save_us(ops))
    row.update({k: min(v) for k, v in runs.items()})
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.save_cpu", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer shapes, shorter loops")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write results")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for name, state, record in shapes(args.quick):
        rows.append(measure(name, state, record, quick=args.quick))
        print(f"  measured {name}", file=sys.stderr)

    def fmt(row: dict[str, Any], key: str) -> str:
        return f"{row[key]:.1f}" if key in row else "-"

    def ratio(row: dict[str, Any], a: str, b: str) -> str:
        return f"{row[a] / row[b]:.2f}x" if a in row and b in row else "-"

    print_table(
        [
            "shape",
            "bytes",
            "encode",
            "lossless before",
            "lossless after",
            "x",
            "validate before",
            "validate after",
            "x",
            "caller before",
            "caller after",
            "x",
            "save before",
            "save after",
            "x",
        ],
        [
            [
                r["shape"],
                str(r["encoded_bytes"]),
                fmt(r, "encode"),
                fmt(r, "lossless_before"),
                fmt(r, "lossless_after"),
                ratio(r, "lossless_before", "lossless_after"),
                fmt(r, "validate_before"),
                fmt(r, "validate_after"),
                ratio(r, "validate_before", "validate_after"),
                fmt(r, "caller_before"),
                fmt(r, "caller_after"),
                ratio(r, "caller_before", "caller_after"),
                fmt(r, "save_before"),
                fmt(r, "save_after"),
                ratio(r, "save_before", "save_after"),
            ]
            for r in rows
        ],
        title="Caller-side CPU per save (us; best of 5; 'x' = before / after)",
    )
    with tempfile.TemporaryDirectory() as d:
        env = environment(durability="process", data_dir=d)
    out = write_json(args.json, {"environment": env, "quick": args.quick, "rows": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
