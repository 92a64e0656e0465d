"""``python -m eventlog.demo`` (what ``make demo`` runs) exits 0 and reports what it checked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventlog.demo", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_kills_resumes_and_checks(tmp_path: Path) -> None:
    path = tmp_path / "data" / "fanout.ckpt"
    first = run_demo("--path", str(path), "--items", "600", "--kill-at", "300")
    assert first.returncode == 0, first.stdout + first.stderr
    (path / "stale").write_text("a previous run's leftovers")  # in the demo's own directory
    proc = run_demo("--path", str(path))  # replaces the log it made
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "FAIL" not in out
    assert out.rstrip().endswith("OK")
    assert "[ok] worker was SIGKILLed (exit status -9)" in out
    assert "[ok] merged results exact" in out
    m = re.search(r"killed at item 8,470; skipped ([\d,]+), re-run ([\d,]+)", out)
    assert m is not None, out
    skipped, rerun = (int(g.replace(",", "")) for g in m.groups())
    assert skipped + rerun == 10_000
    assert 8_470 - 256 < skipped <= 8_470
    assert re.search(r"bytes appended per committed save: [\d,.]+", out)
    assert re.search(r"bytes on disk: [\d,]+", out)
    assert re.search(r"frames: [\d,]+", out)
    assert re.search(r"saves/s", out)
    assert re.search(r"seq +1 +save ", out)
    assert re.search(r"seq +\d+ +save .* completed +10,000", out)
    assert re.search(r"verify: \d+ frames in 1 streams: OK", out)
    assert not (path / "stale").exists()
    assert proc.stderr == ""  # piped: no progress bar, no \r frames in a log file


def test_demo_small_run_and_bad_arguments(tmp_path: Path) -> None:
    proc = run_demo("--path", str(tmp_path / "small"), "--items", "600", "--kill-at", "300")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "killed at item 300; skipped 256, re-run 344" in proc.stdout
    bad = run_demo("--path", str(tmp_path / "bad"), "--items", "10", "--kill-at", "10")
    assert bad.returncode == 2
    assert "--kill-at" in bad.stderr


def test_demo_never_deletes_a_directory_it_did_not_make(tmp_path: Path) -> None:
    """``--path`` naming someone's data (or another log) is refused, exit 2, nothing deleted."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("an investigator's notes")
    proc = run_demo("--path", str(notes), "--items", "600", "--kill-at", "300")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a log this demo made" in proc.stderr
    assert (notes / "notes.txt").read_text() == "an investigator's notes"
    assert sorted(p.name for p in notes.iterdir()) == ["notes.txt"]

    from eventlog import CheckpointLog, CheckpointRecord  # noqa: PLC0415

    other = tmp_path / "other.ckpt"  # a ckptlog log, but not the demo's
    with CheckpointLog.open(other) as cl:
        cl.save("keep", CheckpointRecord("keep", "c", {}, (), (), 1.0))
    refused = run_demo("--path", str(other), "--items", "600", "--kill-at", "300")
    assert refused.returncode == 2
    with CheckpointLog.open(other, readonly=True) as cl:
        assert cl.load("keep") is not None
    file = tmp_path / "file"
    file.write_text("x")
    assert run_demo("--path", str(file), "--items", "600", "--kill-at", "300").returncode == 2
    assert file.read_text() == "x"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_demo("--path", str(empty), "--items", "600", "--kill-at", "300").returncode == 0
