"""The package's import contract and layout rules, checked from the source.

Standard library only (``ast``): the files are parsed, never imported, so the
rules hold for code that only runs on some platforms, inside functions or
under ``TYPE_CHECKING``.  Every import statement counts, wherever it is.

* Qt (PySide6, shiboken6, pyqtgraph) is imported only under ``app/ui``;
  ``app/cli`` imports ``app.ui`` only inside functions (to start the GUI).
* ``app/agent`` runs inside users' processes: standard library and its own
  package only (by relative import: it is loaded under a private name), and
  torch only as ``sys.modules.get("torch")``, never by an import.
* ``app/core`` imports neither ``app.ui`` nor ``app.cli``.
* No import cycles between the modules of ``app``.
* No file under ``app/`` over 500 lines.
* Every directory of test files under ``tests/unit`` mirrors one under ``app/``.

Each failure names the file and line.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
UNIT_TESTS = ROOT / "tests" / "unit"

QT_PACKAGES = frozenset({"PySide6", "shiboken6", "pyqtgraph"})
MAX_LINES = 500
#: Calls that import a module named by a string, counted as imports.
IMPORT_CALLS = frozenset({"__import__", "import_module", "importlib.import_module"})


@dataclass(frozen=True)
class Import:
    """One import of one module by one file."""

    path: Path  # the importing file
    line: int
    module: str  # absolute dotted name; "" for a relative import that leaves the package
    level: int  # 0 absolute, 1+ relative (``from . import x``)
    in_function: bool  # inside a def (runs when called, not on import)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def top(self) -> str:
        return self.module.partition(".")[0]


def module_name(path: Path) -> str:
    """``app/core/monitor/source.py`` -> ``app.core.monitor.source``; a package's
    ``__init__.py`` is the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@functools.cache
def app_files() -> tuple[Path, ...]:
    return tuple(sorted(p for p in APP.rglob("*.py") if "__pycache__" not in p.parts))


@functools.cache
def app_modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in app_files())


def _package_of(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(path: Path, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    base = _package_of(path).split(".")
    if level - 1 > len(base) - 1:
        return ""
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return ""


class _Collector(ast.NodeVisitor):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.depth = 0  # enclosing function definitions
        self.found: list[Import] = []

    def _add(self, node: ast.AST, module: str, level: int = 0) -> None:
        self.found.append(Import(self.path, getattr(node, "lineno", 1), module, level,
                                 self.depth > 0))

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _resolve(self.path, node.module, node.level)
        if node.module == "__future__":
            return
        modules = app_modules()
        for alias in node.names:
            # ``from pkg import sub`` imports the module pkg.sub when there is one.
            sub = f"{base}.{alias.name}" if base else ""
            self._add(node, sub if sub in modules else base, node.level)

    def visit_Call(self, node: ast.Call) -> None:
        if (_call_name(node.func) in IMPORT_CALLS and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            self._add(node, node.args[0].value)
        self.generic_visit(node)


@functools.cache
def imports_of(path: Path) -> tuple[Import, ...]:
    collector = _Collector(path)
    collector.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return tuple(collector.found)


def all_imports(under: str = "") -> Iterator[Import]:
    base = APP / under if under else APP
    for path in app_files():
        if path.is_relative_to(base):
            yield from imports_of(path)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _report(problems: list[str]) -> str:
    return f"{len(problems)} problem(s):\n  " + "\n  ".join(problems)


# ----------------------------------------------------------------- (a) Qt
def test_only_app_ui_imports_qt() -> None:
    problems = [
        f"{imp.where}: imports {imp.module} outside app/ui"
        for imp in all_imports()
        if imp.top in QT_PACKAGES and not imp.path.is_relative_to(APP / "ui")
    ]
    assert not problems, _report(problems)


def test_app_ui_is_imported_only_by_cli_functions() -> None:
    problems = []
    for imp in all_imports():
        if not _in(imp.module, "app.ui") or imp.path.is_relative_to(APP / "ui"):
            continue
        if not imp.path.is_relative_to(APP / "cli"):
            problems.append(f"{imp.where}: imports {imp.module} (only app/cli may, to start "
                            "the GUI)")
        elif not imp.in_function:
            problems.append(f"{imp.where}: imports {imp.module} at module level (app/cli "
                            "imports app.ui only inside the function that starts the GUI)")
    assert not problems, _report(problems)


# -------------------------------------------------------------- (b) agent
def test_agent_imports_only_the_standard_library_and_itself() -> None:
    agent = APP / "agent"
    bootstrap = agent / "_bootstrap"
    siblings = {p.stem for p in bootstrap.glob("*.py")}
    problems = []
    for imp in all_imports("agent"):
        if imp.top == "torch":
            problems.append(f"{imp.where}: imports {imp.module}; the agent takes torch from "
                            "sys.modules (the host process imported it), never imports it")
        elif imp.level > 0:
            if not _in(imp.module, "app.agent"):
                problems.append(f"{imp.where}: relative import leaves app.agent")
        elif imp.top in sys.stdlib_module_names:
            continue
        elif imp.path.is_relative_to(bootstrap) and imp.module in siblings:
            continue  # the bootstrap's own top-level modules (and the user's sitecustomize)
        elif _in(imp.module, "app.agent"):
            problems.append(f"{imp.where}: imports {imp.module} by absolute name; the agent "
                            "is loaded as _vram_steward_agent in users' processes, so it "
                            "imports itself relatively")
        else:
            problems.append(f"{imp.where}: imports {imp.module}: not the standard library")
    assert not problems, _report(problems)


# --------------------------------------------------------------- (c) core
def test_core_imports_neither_ui_nor_cli() -> None:
    problems = [
        f"{imp.where}: imports {imp.module}; app/core is below app/ui and app/cli"
        for imp in all_imports("core")
        if _in(imp.module, "app.ui") or _in(imp.module, "app.cli")
    ]
    assert not problems, _report(problems)


# ------------------------------------------------------------- (d) cycles
def import_graph() -> dict[str, dict[str, Import]]:
    """module -> {imported app module: the first import statement}.

    An edge goes to the module named, not to the packages above it, and a
    package's ``__init__`` importing its own submodules is no edge (the package
    is their namespace, not a dependent).
    """
    modules = app_modules()
    graph: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for path in app_files():
        source = module_name(path)
        is_package = path.name == "__init__.py"
        for imp in imports_of(path):
            target = imp.module
            while target and target not in modules:  # a name inside a module
                target = target.rpartition(".")[0]
            if not target or target == source or not _in(target, "app"):
                continue
            if is_package and _in(target, source):
                continue
            graph[source].setdefault(target, imp)
    return graph


def strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's components with more than one module, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def shortest_cycle(graph: dict[str, dict[str, Import]], start: str,
                   within: set[str]) -> list[str]:
    """The shortest path start -> ... -> start inside one component (BFS)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in within:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return []


def describe(graph: dict[str, dict[str, Import]], cycle: list[str]) -> str:
    steps = [f"{a} ({graph[a][b].where}) -> " for a, b in zip(cycle, cycle[1:])]
    return "".join(steps) + cycle[-1]


def import_cycles() -> list[str]:
    """Each component's shortest cycle through each of its modules, once per rotation."""
    graph = import_graph()
    chains: list[str] = []
    for component in strongly_connected(graph):
        members = set(component)
        seen: set[frozenset[tuple[str, str]]] = set()
        for module in component:
            cycle = shortest_cycle(graph, module, members)
            edges = frozenset(zip(cycle, cycle[1:]))
            if cycle and edges not in seen:
                seen.add(edges)
                chains.append(describe(graph, cycle))
    return chains


def test_no_import_cycles() -> None:
    cycles = import_cycles()
    assert not cycles, _report(cycles)


# --------------------------------------------------------------- (e) size
def test_no_file_in_app_over_500_lines() -> None:
    problems = []
    for path in app_files():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            problems.append(f"{path.relative_to(ROOT)}:{MAX_LINES + 1}: {lines} lines "
                            f"(at most {MAX_LINES})")
    assert not problems, _report(problems)


# ------------------------------------------------------------ (f) mirroring
def test_unit_test_directories_mirror_the_package() -> None:
    problems = []
    for path in sorted(UNIT_TESTS.rglob("test_*.py")):
        folder = path.parent.relative_to(UNIT_TESTS)
        if not (APP / folder).is_dir():
            problems.append(f"{path.relative_to(ROOT)}:1: no app/{folder.as_posix()}/ "
                            "for it to mirror")
    assert not problems, _report(problems)
