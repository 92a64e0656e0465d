"""The machine's own limits, measured in the same run and on the same filesystem as the logs.

A figure bound by fsync says little on its own: the same code does 200 or 20,000 durable
commits a second depending on the disk. So every ``python -m benchmarks run`` measures, first,
in the directory the stores are created in (``pg_test_fsync``'s idea):

- ``fdatasync``: one 4 KiB ``pwrite`` + ``fdatasync``, repeated, cycling over a preallocated
  16 MiB file (overwrites: no file-size metadata to flush, as in a database's own file);
- ``seq_write``: 1 MiB ``write``s, ``fdatasync`` after each (MB/s: flushed sequential
  bandwidth);
- ``lmdb_commit``: raw py-lmdb, ``sync=True``, one 256-byte ``put`` per write transaction
  (commits/s: what any one-save-one-commit store can reach on this disk);
- ``lmdb_putmulti``: raw py-lmdb, ``sync=True``, ``putmulti`` of 256 rows of 64 bytes (ascending
  keys, ``append=True``) per write transaction (rows/s: the batched ceiling);
- ``cpu``: a CPU reference, not a disk one: msgspec-encode and zstd-compress a 1 KiB dict
  (ops/s), so ``compare`` can normalise figures that do not fsync too.

Each runs for a fixed time (``seconds``) and records its latencies in a
:class:`~benchmarks.histogram.Histogram`. :data:`MATCHING` says which limit a scenario's
fsync-bound figure is set against ("0.62 of this disk's commits/s").
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import zstandard

from benchmarks.common import mount_of, print_table
from benchmarks.histogram import Histogram

BLOCK = 4096
FILE_BYTES = 16 << 20
SEQ_CHUNK = 1 << 20
ROWS_PER_COMMIT = 256
ROW_BYTES = 64
SECONDS = 3.0
QUICK_SECONDS = 0.2
U64 = struct.Struct(">Q")

# limit name -> (its headline key, unit)
HEADLINE: dict[str, tuple[str, str]] = {
    "fdatasync": ("per_s", "fdatasync/s"),
    "seq_write": ("mb_per_s", "MB/s"),
    "lmdb_commit": ("per_s", "commits/s"),
    "lmdb_putmulti": ("rows_per_s", "rows/s"),
    "cpu": ("per_s", "encodes/s"),
}

# (scenario, how the row commits) -> the limit its fsync-bound figure is set against: one save
# one commit -> LMDB commits/s; batches of rows -> LMDB putmulti rows/s.
MATCHING: dict[str, str] = {
    "linear": "lmdb_commit",
    "fanout": "lmdb_commit",  # batched rows: see matching_limit
    "concurrent": "lmdb_commit",
    "instances": "lmdb_putmulti",
    "sustained-instances": "lmdb_putmulti",
    "sustained-linear": "lmdb_commit",
    "openloop": "lmdb_commit",
}


def matching_limit(scenario: str, values: dict[str, Any] | None = None) -> str | None:
    """The limit an fsync row of ``scenario`` (with parameter ``values``) is set against."""
    if scenario == "fanout" and values and values.get("batching"):
        return "lmdb_putmulti"
    return MATCHING.get(scenario)


def headline(limits: dict[str, Any], name: str) -> float | None:
    """The headline figure of limit ``name`` (``None`` when not measured)."""
    entry = limits.get(name)
    if not isinstance(entry, dict):
        return None
    value = entry.get(HEADLINE[name][0])
    return float(value) if value else None


def _timed(seconds: float, step: Callable[[int], int]) -> tuple[int, float, Histogram]:
    """Call ``step(i)`` (returning units done) until ``seconds`` have passed; units, time,
    per-call latencies."""
    hist = Histogram()
    units = 0
    i = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    now = t0
    while now < deadline or i == 0:
        a = time.perf_counter()
        units += step(i)
        now = time.perf_counter()
        hist.record(now - a)
        i += 1
    return units, now - t0, hist


def _entry(units: int, seconds: float, hist: Histogram, **extra: Any) -> dict[str, Any]:
    return {
        "per_s": round(units / seconds, 3),
        "units": units,
        "seconds": round(seconds, 4),
        **hist.summary_us(),
        **extra,
    }


def fdatasync_rate(directory: Path, seconds: float, rng: random.Random) -> dict[str, Any]:
    path = directory / "fdatasync.bin"
    block = rng.randbytes(BLOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, bytes(FILE_BYTES))
        os.fsync(fd)
        slots = FILE_BYTES // BLOCK

        def step(i: int) -> int:
            os.pwrite(fd, block, (i % slots) * BLOCK)
            os.fdatasync(fd)
            return 1

        units, took, hist = _timed(seconds, step)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return _entry(units, took, hist, block_bytes=BLOCK)


def seq_write_rate(directory: Path, seconds: float, rng: random.Random) -> dict[str, Any]:
    path = directory / "seq.bin"
    chunk = rng.randbytes(SEQ_CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:

        def step(i: int) -> int:
            os.write(fd, chunk)
            os.fdatasync(fd)
            return SEQ_CHUNK

        units, took, hist = _timed(seconds, step)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    entry = _entry(units, took, hist, chunk_bytes=SEQ_CHUNK)
    entry["mb_per_s"] = round(units / took / 1e6, 3)
    return entry


def _lmdb(directory: Path) -> Any:
    directory.mkdir(parents=True, exist_ok=True)
    return lmdb.open(str(directory), map_size=1 << 34, sync=True, metasync=True)


def lmdb_commit_rate(directory: Path, seconds: float, rng: random.Random) -> dict[str, Any]:
    value = rng.randbytes(256)
    env = _lmdb(directory / "lmdb-commit")
    try:

        def step(i: int) -> int:
            with env.begin(write=True) as txn:
                txn.put(U64.pack(i), value, append=True)
            return 1

        units, took, hist = _timed(seconds, step)
    finally:
        env.close()
        shutil.rmtree(directory / "lmdb-commit", ignore_errors=True)
    return _entry(units, took, hist, value_bytes=256)


def lmdb_putmulti_rate(directory: Path, seconds: float, rng: random.Random) -> dict[str, Any]:
    value = rng.randbytes(ROW_BYTES)
    env = _lmdb(directory / "lmdb-putmulti")
    try:

        def step(i: int) -> int:
            first = i * ROWS_PER_COMMIT
            rows = [(U64.pack(first + j), value) for j in range(ROWS_PER_COMMIT)]
            with env.begin(write=True) as txn:
                txn.cursor().putmulti(rows, append=True)
            return ROWS_PER_COMMIT

        units, took, hist = _timed(seconds, step)
    finally:
        env.close()
        shutil.rmtree(directory / "lmdb-putmulti", ignore_errors=True)
    entry = _entry(units, took, hist, rows_per_commit=ROWS_PER_COMMIT, row_bytes=ROW_BYTES)
    entry["rows_per_s"] = entry.pop("per_s")
    entry["commits_per_s"] = round(entry["rows_per_s"] / ROWS_PER_COMMIT, 3)
    return entry


def cpu_rate(directory: Path, seconds: float, rng: random.Random) -> dict[str, Any]:
    doc = {f"f{j:02d}": rng.randbytes(24).hex() for j in range(18)}  # ~1 KiB as msgpack
    encode = msgspec.msgpack.Encoder().encode
    compress = zstandard.ZstdCompressor(level=3).compress

    def step(i: int) -> int:
        doc["step"] = i  # type: ignore[assignment]
        compress(encode(doc))
        return 1

    units, took, hist = _timed(seconds, step)
    return _entry(units, took, hist, doc_bytes=len(encode(doc)))


LIMITS: dict[str, Callable[[Path, float, random.Random], dict[str, Any]]] = {
    "fdatasync": fdatasync_rate,
    "seq_write": seq_write_rate,
    "lmdb_commit": lmdb_commit_rate,
    "lmdb_putmulti": lmdb_putmulti_rate,
    "cpu": cpu_rate,
}


def measure(
    directory: Path, *, quick: bool, seed: int, seconds: float | None = None
) -> dict[str, Any]:
    """Every limit, measured under ``directory`` (the stores' own filesystem)."""
    each = seconds if seconds is not None else (QUICK_SECONDS if quick else SECONDS)
    where = directory / "limits"
    where.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    out: dict[str, Any] = {
        "directory": str(directory),
        "mount": mount_of(str(directory)),
        "seconds_each": each,
        "loadavg_before": _load(),
    }
    try:
        for name, fn in LIMITS.items():
            out[name] = fn(where, each, rng)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    out["loadavg_after"] = _load()
    return out


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def table_rows(limits: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, (key, unit) in HEADLINE.items():
        e = limits.get(name)
        if not isinstance(e, dict):
            continue
        rows.append(
            [
                name,
                f"{e[key]:,.0f} {unit}" if e[key] >= 100 else f"{e[key]:,.1f} {unit}",
                f"{e['p50_us']:,.0f}",
                f"{e['p99_us']:,.0f}",
                f"{e['p999_us']:,.0f}",
                f"{e['max_us']:,.0f}",
            ]
        )
    return rows


LIMIT_HEADERS = ["limit", "rate", "p50 µs", "p99 µs", "p99.9 µs", "max µs"]


def print_limits(limits: dict[str, Any]) -> None:
    mount = limits.get("mount") or {}
    print(
        f"\n== limits: this machine, {mount.get('type')} on {mount.get('mount_point')} "
        f"({mount.get('options')}), {limits['seconds_each']} s each =="
    )
    print()
    print_table(LIMIT_HEADERS, table_rows(limits))
