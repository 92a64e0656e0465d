"""What every soak section shares: child processes, their acknowledgements, the tallies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


@dataclass
class Tally:
    """Counts of one section, by name, plus the failures found (each a line of text)."""

    counts: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # findings that are figures, not failures

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def fail(self, what: str) -> None:
        self.counts["failures"] += 1
        if len(self.failures) < 50:
            self.failures.append(what)


class Child:
    """A worker process (``python -m soak.workers KIND ARGS``) whose stdout goes to a file."""

    def __init__(self, workdir: Path, kind: str, *args: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.out_path = workdir / f"{kind}-{os.getpid()}-{time.monotonic_ns()}.out"
        self.out: IO[bytes] = open(self.out_path, "wb")  # noqa: SIM115 - closed in finish()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "soak.workers", kind, *args],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    def finish(self, timeout: float = 60.0) -> tuple[int | None, list[dict[str, Any]], str]:
        """Wait for the process; its return code (None: hung), acks and other output."""
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
            code = None
        self.out.close()
        acks: list[dict[str, Any]] = []
        other: list[str] = []
        text = self.out_path.read_bytes().decode("utf-8", "replace")
        self.out_path.unlink()
        for line in text.splitlines(keepends=True):
            if line.startswith("ACK ") and line.endswith("\n"):
                acks.append(json.loads(line[4:]))
            elif line.strip():
                other.append(line.rstrip())
        return code, acks, "\n".join(other[-20:])


def run_child(workdir: Path, kind: str, *args: str, timeout: float = 120.0) -> Any:
    """Run a worker to its end; its (return code, acks, other output)."""
    return Child(workdir, kind, *args).finish(timeout)
