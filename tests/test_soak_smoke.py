"""A smoke run of the reliability campaign (``make soak`` runs it at full size): every section
runs (kills, faults, cancellation, readers, damage, bad input) and finds nothing wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.long
def test_soak_smoke_runs_every_section_and_finds_nothing(tmp_path: Path) -> None:
    out = tmp_path / "reliability.md"
    proc = subprocess.run(
        [sys.executable, "-m", "soak", "--smoke", "--seed", "3", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "- failures: 0" in text
    for row in ("| Kills", "| Faults", "| Asyncio cancellation", "| Readers under load",
                "| Damage", "| Meta-page txnid flips", "| Bad input",
                "| Power cuts"):  # fmt: skip
        assert row in text, row
    assert ", lost 0," in text
    assert "crashes 0, hangs 0, untyped 0" in text
    assert "untyped errors 0" in text
