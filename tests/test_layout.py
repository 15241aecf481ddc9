"""The architecture, read from the import graph: no circles, no private reach-ins, no upward import.

The graph is built with ``ast`` from the package's own source files (every
``import`` and ``from … import``, at module level or inside a function, and the
lazy names a package's ``__init__`` maps to its modules), so a new module or a
moved one is checked without a list of file names to keep up to date.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Import name of each package, and the folder it lives in (setup.cfg's package_dir).
PACKAGES = {
    "hoptune": "hoptune",
    "hoptune.core": "core",
    "hoptune.kernels": "kernels",
    "hoptune.regions": "regions",
    "hoptune.tuner": "tuner",
    "hoptune.tasks": "tasks",
    "hoptune.tasks.worker": "tasks/worker",
    "hoptune.tasks.hop": "tasks/hop",
    "hoptune.tasks.study": "tasks/study",
    "hoptune.tasks.plan": "tasks/plan",
    "hoptune.tasks.monitor": "tasks/monitor",
    "hoptune.tasks.dashboard": "tasks/dashboard",
    "hoptune.tasks.cli": "tasks/cli",
    # The benchmarks are users: they import public names only.
    "bench": "bench",
}
# Floors, lowest first (DESIGN: an import never runs up a floor). The public API
# at ``hoptune`` re-exports from the floors below it.
# Inside ``tasks`` the worker process is lowest, then the hop, the study workflow and
# the planner; the Celery face (the app and its task table, at ``tasks`` itself) sits
# on them, and what runs in a user's shell (monitoring, the command line) on top.
FLOORS = ["hoptune.core", "hoptune.kernels", "hoptune.regions", "hoptune.tuner",
          "hoptune.tasks.worker", "hoptune.tasks.hop", "hoptune.tasks.study", "hoptune.tasks.plan",
          "hoptune.tasks", "hoptune.tasks.monitor", "hoptune.tasks.dashboard",
          "hoptune.tasks.cli", "hoptune", "bench"]
LAZY = re.compile(r"""["'](hoptune(?:\.\w+)+)["']""")


def _modules() -> dict[str, Path]:
    """Every module, subpackages (the study database's migrations) included."""
    out = {}
    for package, folder in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            out[".".join((package, *parts[:-1 if parts[-1] == "__init__" else None]))] = path
    return out


MODULES = _modules()


def _package_of(module: str) -> str:
    """The hoptune package a module belongs to (``hoptune`` for the root's own modules)."""
    for package in sorted(PACKAGES, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return package
    raise AssertionError(module)


def _resolve(name: str) -> str | None:
    """The module an imported dotted name refers to, or None outside hoptune."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module if path.stem == "__init__" else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from package import module`` imports the module; the package's
                # own ``__init__`` runs first either way, as for every import.
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in MODULES else source)
    if path.stem == "__init__":
        found.update(LAZY.findall(path.read_text()))
    return {target for name in found if (target := _resolve(name)) and target != module}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the list of modules around it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_sees_every_package() -> None:
    assert {_package_of(m) for m in MODULES} == set(PACKAGES)
    assert GRAPH["hoptune.tuner._locks"] >= {"hoptune.core", "hoptune.tuner._schema"}
    assert len(MODULES) > 60


def test_no_import_circle() -> None:
    assert _cycle(GRAPH) is None, " -> ".join(_cycle(GRAPH) or [])


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_of_another_package_private_module() -> None:
    bad = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if _package_of(target) != _package_of(module)
        and any(part.startswith("_") for part in target.split(".")[1:])
    )
    assert bad == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_up_a_floor(module: str) -> None:
    floor = FLOORS.index(_package_of(module))
    up = sorted(t for t in GRAPH[module] if FLOORS.index(_package_of(t)) > floor)
    assert up == [], f"{module} imports from a higher floor: {up}"


@pytest.mark.parametrize("package", sorted(p for p in PACKAGES if p.startswith("hoptune")))
def test_every_public_name_of_a_package_resolves(package: str) -> None:
    """A lazy ``__init__`` maps each name to a module: a name the table lacks, or a module
    that no longer defines it, fails here rather than in a worker's task."""
    import importlib

    module = importlib.import_module(package)
    missing = [name for name in getattr(module, "__all__", [])
               if not hasattr(module, name)]
    assert missing == []


def test_every_name_imported_from_a_package_is_one_it_exports() -> None:
    """``from hoptune.tasks.study import x`` inside a function runs only when a task does:
    every such name must be in the package's ``__all__``, checked here without running it."""
    import importlib

    exported = {p: set(getattr(importlib.import_module(p), "__all__", []))
                for p in PACKAGES if p.startswith("hoptune")}
    bad = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in exported and not node.level:
                bad += [f"{module}: {node.module}.{a.name}" for a in node.names
                        if a.name not in exported[node.module]
                        and f"{node.module}.{a.name}" not in MODULES]
    assert bad == []
