"""Shared benchmark helpers: environment capture, statistics, aligned tables, JSON output.

Invariants:
- Every JSON result carries the environment it was measured in (STYLE §11): machine, Python,
  library versions, durability, the filesystem under the data, and the git revision.
- JSON is written to a ``.tmp`` sibling and renamed, so a killed run never leaves half a file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("msgspec", "lmdb", "zstandard", "ckptlog")
REPO_ROOT = Path(__file__).resolve().parent.parent


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _filesystem(path: str) -> str | None:
    """The type of the filesystem holding ``path`` (longest matching mount point), on Linux."""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for m in mounts:
        if len(m) < 3:
            continue
        mount_point = m[1]
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if inside and (best is None or len(mount_point) > best[0]):
            best = (len(mount_point), f"{m[2]} on {mount_point} ({m[0]})")
    return best[1] if best else None


def mount_of(path: str) -> dict[str, str] | None:
    """The mount holding ``path`` (longest matching mount point) on Linux: its type, mount
    point, device and options (``rw,relatime,...``: what decides what an fsync costs)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best: list[str] | None = None
    for m in mounts:
        if len(m) < 4:
            continue
        inside = real == m[1] or real.startswith(m[1].rstrip("/") + "/")
        if inside and (best is None or len(m[1]) > len(best[1])):
            best = m
    if best is None:
        return None
    return {"type": best[2], "mount_point": best[1], "device": best[0], "options": best[3]}


def _git() -> dict[str, Any]:
    def run(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,  # a missing repo or git is reported as None, not raised
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    status = run("status", "--porcelain")
    return {"commit": run("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def environment(*, durability: str, data_dir: str) -> dict[str, Any]:
    """Where and with what a benchmark ran."""
    try:
        usable_cpus: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        usable_cpus = None
    extra: dict[str, Any] = {}
    try:
        import lmdb  # noqa: PLC0415 - optional at import time of this helper
        import zstandard  # noqa: PLC0415

        extra["liblmdb"] = ".".join(map(str, lmdb.version()))
        extra["libzstd"] = ".".join(map(str, zstandard.ZSTD_VERSION))
    except ImportError:
        pass
    return {
        "timestamp_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable_cpus,
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": {p: _version(p) for p in PACKAGES},
        **extra,
        # Other work on the machine skews results: the load average says whether there was any.
        "loadavg_1_5_15": loadavg(),
        "durability": durability,
        "data_dir": data_dir,
        "filesystem": _filesystem(data_dir),
        "mount": mount_of(data_dir),
        "git": _git(),
    }


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile, ``p`` in 0..100."""
    s = sorted(values)
    if not s:
        raise ValueError("percentile of no values")
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def fmt_int(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def fmt_float(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    align: str | None = None,
    title: str | None = None,
) -> None:
    """Print ``rows`` aligned; ``align`` has one ``l`` or ``r`` per column (default: first
    column left, the others right, as suits a name followed by numbers)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    align = align or "l" + "r" * (len(headers) - 1)
    if len(align) != len(headers):
        raise ValueError(f"align has {len(align)} letters for {len(headers)} columns")

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.ljust(widths[i]) if align[i] == "l" else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    if title:
        print(title)
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def callgrind_instructions(module: str, args: Sequence[str], extra: Sequence[str] = ()) -> int:
    """Instructions valgrind's callgrind counts in ``python -m MODULE ARGS`` (a benchmark's
    child; ``extra``: more callgrind options), every thread, ``PYTHONHASHSEED=0`` so that the
    same inputs count the same. Needs ``valgrind`` on the PATH."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *extra]
    cmd += [sys.executable, "-m", module, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stderr
    m = re.search(r"Collected : ([\d,]+)", out)
    assert m is not None, out[-2000:]
    return int(m.group(1).replace(",", ""))


def write_json(path: str | os.PathLike[str], payload: Any) -> Path:
    """Write ``payload`` as indented JSON, atomically (``.tmp`` then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, target)
    return target


def versions(packages: Sequence[str]) -> dict[str, str | None]:
    """Installed versions of ``packages`` (``None`` for those not installed)."""
    return {p: _version(p) for p in packages}


def process_write_bytes() -> int | None:
    """Bytes this process (all its threads) has handed to write system calls so far: ``wchar``
    of ``/proc/self/io`` on Linux, ``None`` elsewhere. Page-granular storage engines write whole
    pages, so this counts what they really write, not the payload."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def replace_doc_section(doc: Path, title: str, text: str) -> None:
    """Put ``text`` in place of the ``## `` section of ``doc`` starting at ``title`` (or at the
    page's end when it has none): how a benchmark script writes its own section."""
    old = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if title in old:
        head, _, rest = old.partition(title)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1 :] if nxt >= 0 else ""
        new = head + text + ("\n" + tail if tail else "")
    else:
        new = old.rstrip() + "\n\n" + text
    doc.write_text(new, encoding="utf-8")


Commit = Callable[[int], None]


def raw_lmdb_commits(
    path: Path, value: bytes, *, sync: bool, map_size: int = 1 << 30
) -> tuple[Commit, Callable[[], None]]:
    """The raw py-lmdb peer: commit ``i`` puts ``value`` under a key of its own in a write
    transaction of its own (made durable on return with ``sync``); and what closes it."""
    import lmdb  # noqa: PLC0415 - only the scripts that compare against it

    env = lmdb.open(str(path), sync=sync, map_size=map_size)

    def commit(i: int) -> None:
        with env.begin(write=True) as txn:
            txn.put(b"k%08d" % i, value)

    return commit, env.close


def sqlite_commits(
    path: Path, value: bytes, *, synchronous: str, replace: bool = False
) -> tuple[Commit, Callable[[], None]]:
    """The SQLite WAL peer (SqliteSaver's pattern): commit ``i`` is one INSERT (``replace``:
    INSERT OR REPLACE, for keys committed again) in its own BEGIN/COMMIT, with
    ``PRAGMA synchronous`` = ``synchronous``; and what closes it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    insert = f"INSERT {'OR REPLACE ' if replace else ''}INTO t VALUES (?, ?)"

    def commit(i: int) -> None:
        db.execute("BEGIN")
        db.execute(insert, (i, value))
        db.execute("COMMIT")

    return commit, db.close
