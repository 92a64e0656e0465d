"""Docs that run: every ```python block of the README and docs/ is executed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [
    pytest.param(code, id=f"{path.name}-{n}")
    for path in DOCS
    for n, code in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S))
]


@pytest.mark.parametrize("code", BLOCKS)
def test_doc_block_runs(code: str) -> None:
    exec(compile(code, "<doc>", "exec", dont_inherit=True), {"__name__": "__doc_test__"})
