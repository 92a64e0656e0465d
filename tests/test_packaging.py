"""The wheel installs the library packages (eventlog, projections, backends), not benchmarks.

setuptools' ``packages.find`` takes every directory with an ``__init__.py`` whose dotted name
matches an ``include`` pattern (fnmatch); this applies the same rule to pyproject.toml.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_the_library_packages_only() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in ROOT.rglob("__init__.py")
        if ".venv" not in init.parts and "tests" not in init.parts
    }
    packages = {p for p in found if any(fnmatch.fnmatchcase(p, pat) for pat in include)}
    assert "benchmarks" in found  # the source tree has them ...
    assert {"eventlog", "eventlog.forensics", "eventlog.integrations"} <= packages
    assert {"projections", "backends"} <= packages
    assert {p.split(".")[0] for p in packages} == {"eventlog", "projections", "backends"}
