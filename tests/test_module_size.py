"""Issue 23's shape rule: no module of ``eventlog/`` grows past ~800 lines (a module that does
is split along a seam, as checkpoints, log, testing and the LangGraph store were)."""

from __future__ import annotations

from pathlib import Path

EVENTLOG = Path(__file__).resolve().parents[1] / "eventlog"
LINES_MAX = 800


def test_no_eventlog_module_is_over_800_lines() -> None:
    sizes = {
        str(p.relative_to(EVENTLOG.parent)): len(p.read_text(encoding="utf-8").splitlines())
        for p in EVENTLOG.rglob("*.py")
    }
    assert len(sizes) > 50  # the walk found the package
    over = {name: n for name, n in sorted(sizes.items()) if n > LINES_MAX}
    assert over == {}, f"modules over {LINES_MAX} lines (split them along a seam): {over}"
