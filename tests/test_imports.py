"""The import graph of eventlog, projections and backends has no cycle (issue 13).

Edges are every import a module may run: ``import`` / ``from`` statements anywhere in it,
function bodies included (a lazy import is a dependency too), except inside ``if
TYPE_CHECKING:`` blocks (annotations only) and a package's PEP 562 ``__getattr__``, which is
how ``eventlog`` and ``eventlog.forensics`` expose a name of a layer above them on first use.
Importing ``a.b.c`` also runs ``a`` and ``a.b`` (their ``__init__``), so those are edges too,
except from modules inside ``a.b`` (their packages are initialized first). Leaf modules are
checked to import no composition module. On the code before issue 13 it finds
``eventlog.checkpoints -> eventlog.forensics -> eventlog.checkpoints``.

The application (the ``ckptlog`` command line, eventlog.cli, and the web viewer,
eventlog.viewer) sits on the read layer (eventlog.read) and is part of the graph like any other
module: no cycle, no waiver (issue 23). ``read`` imports neither face, the viewer does not
import the command line, and no library module imports either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("eventlog", "projections", "backends")
# The application: the two faces of the read layer, and the old module name of the viewer.
CLI = "eventlog.cli"
VIEWER = "eventlog.viewer"
APPLICATION_PACKAGES = (CLI, VIEWER, "eventlog.serve")
LEAVES = (
    "eventlog.errors",
    "eventlog.records",
    "eventlog.frames",
    "eventlog.codec",
    "eventlog.layout",
    "eventlog.reports",
    "eventlog.streams",
    "eventlog.lazy",
)


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def is_application(name: str) -> bool:
    return any(within(name, p) for p in APPLICATION_PACKAGES)


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    out = {}
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(body: list[ast.stmt], top: bool = True) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _type_checking(node.test):
            found += _runtime_imports(node.orelse, top)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            top and node.name == "__getattr__"
        ):
            continue
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    found += _runtime_imports(
                        [n for n in inner if isinstance(n, ast.stmt)]
                        + [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body],
                        False,
                    )
    return found


def _with_parents(name: str, known: dict[str, Path]) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(known)


def graph(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    known = modules(packages)
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    targets |= _with_parents(alias.name, known)
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets |= _with_parents(base, known)
            for alias in node.names:  # ``from pkg import module``
                if f"{base}.{alias.name}" in known:
                    targets.add(f"{base}.{alias.name}")
        # A module's own packages are initialized before it runs: not an edge out of it.
        edges[name] = targets - _with_parents(name, known)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_cycle() -> None:
    edges = graph()
    assert "eventlog.forensics.queries" in edges  # the walk sees the packages
    assert "eventlog.cli.commands.show" in edges
    assert "eventlog.viewer.api" in edges
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycle_in_the_tools() -> None:
    """The benchmarks and the soak harness too (issue 23: benchmarks.peers.langgraph and
    benchmarks.peers.user imported each other)."""
    edges = graph((*PACKAGES, "benchmarks", "soak"))
    assert "benchmarks.peers.user_store" in edges
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_library_module_imports_the_application() -> None:
    for name, targets in graph().items():
        if not is_application(name):
            wrong = sorted(t for t in targets if is_application(t))
            assert not wrong, (name, wrong)


def test_read_never_imports_cli_or_viewer() -> None:
    """The query layer returns data; the command line and the viewer are its two faces, and
    the viewer knows nothing of the command line."""
    edges = graph()
    for name in edges:
        if within(name, "eventlog.read"):
            below = reachable(edges, name)
            assert not [m for m in below if is_application(m)], name
        if within(name, VIEWER):
            assert not [m for m in reachable(edges, name) if within(m, CLI)], name


def test_the_checkpoint_log_imports_no_forensics() -> None:
    """CheckpointLog has no forensic pass-throughs: it reaches no module of forensics, whose
    opening builds a CheckpointLog (issue 23)."""
    edges = graph()
    for top in ("eventlog.checkpoints", "eventlog.checkpointer"):
        below = reachable(edges, top)
        assert "eventlog.checkpoint_frames" in below
        assert not [m for m in below if within(m, "eventlog.forensics")], top
        assert not [m for m in below if within(m, "eventlog.read")], top


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_leaf_modules_import_only_leaves() -> None:
    edges = graph()
    allowed = {*LEAVES, "eventlog", "eventlog.validate"}
    for leaf in LEAVES:
        assert edges[leaf] <= allowed, (leaf, sorted(edges[leaf] - allowed))


def test_a_small_surface_and_every_exception_in_errors() -> None:
    """Issue 23: ``eventlog`` exports what a user imports (the log, checkpointers, record and
    report types, the root error); every error class is defined in eventlog.errors and
    importable from there; the names ``eventlog`` exported before still resolve, to the same
    object, with a DeprecationWarning, for one release."""
    import warnings  # noqa: PLC0415

    import eventlog  # noqa: PLC0415
    from eventlog import errors, forensics  # noqa: PLC0415

    assert len(eventlog.__all__) <= 20, eventlog.__all__
    for name in eventlog.__all__:
        assert getattr(eventlog, name) is not None, name
    assert eventlog.CheckpointError is errors.CheckpointError
    defined = {
        n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, Exception)
    }
    # errors added after issue 23 were never exported by ``eventlog``: nothing to keep
    added_since = {
        "ForkError",
        "ForkTargetExists",
        "InstancesUnavailable",
        "InvalidHeadDigest",
        "NotASave",
    }
    missing = defined - {"CheckpointError"} - set(eventlog.MOVED) - added_since
    assert not missing, sorted(missing)
    for name, module in eventlog.MOVED.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old = getattr(eventlog, name)
        assert [w.category for w in caught] == [DeprecationWarning], name
        assert f"from {module} import {name}" in str(caught[0].message)
        assert old is getattr(errors if module == "eventlog.errors" else forensics, name)
    with pytest.raises(AttributeError):
        eventlog.NoSuchName
    elsewhere = []
    for module, path in modules().items():
        if module == "eventlog.errors" or is_application(module):
            continue  # the application's own errors (exit status, HTTP status) are not the API
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                private = node.name.startswith("_")  # a module's own control flow
                if not private and (
                    bases & defined or any(b.endswith(("Error", "Exception")) for b in bases)
                ):
                    elsewhere.append(f"{module}.{node.name}")
    assert not elsewhere, f"exceptions defined outside eventlog/errors.py: {elsewhere}"
