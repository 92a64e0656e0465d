"""``python -m benchmarks.forensics --quick`` runs, prints its tables and writes its JSON.

A smoke test (STYLE §11): no timing assertions, only that the benchmark still works.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_forensics_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "forensics.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.forensics", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(a) throughput on a log of 20,000 frames" in proc.stdout
    assert "(b) show --at latency at the end of a 5,000-save history" in proc.stdout
    for row in ("verify: checksums, chains, index", "export jsonl-frames", "compact keep=heads"):
        assert row in proc.stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True
    assert data["environment"]["durability"] == "process"
    wide = data["wide"]
    assert wide["frames"] == 20_000
    assert all(v > 0 for v in wide["frames_per_second"].values())
    assert [s["history"] for s in data["show_at"]] == ["records", "fan_out"]
    assert all(s["last_seq"] >= 5_000 for s in data["show_at"])
