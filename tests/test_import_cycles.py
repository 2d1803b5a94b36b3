"""No import circles between the modules of rllm-envs, rllm-agents and rllm-train.

Every ``import`` statement that runs is counted, at module level and inside functions alike: an
import moved into a function to dodge a circle still makes the two modules depend on each other.
Only imports under ``if TYPE_CHECKING:`` are left out (they never run). ``from pkg import name``
counts as an import of ``pkg.name`` when that is a module, else of ``pkg``; the implicit import
of a module's parent packages is not counted (a package importing its own submodules is how
packages are built, not a circle). The source is parsed, nothing is imported, so the walk takes
a fraction of a second.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCES = tuple(sorted((Path(__file__).resolve().parents[1] / "packages").glob("rllm-*/src")))


@dataclass(frozen=True)
class ImportEdge:
    importer: str
    imported: str
    where: str  # "line 12" or "line 40, in spec_from_config"

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.where})"


def module_files(sources: tuple[Path, ...] = SOURCES) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages."""
    modules = {}
    for source in sources:
        for path in source.rglob("*.py"):
            parts = path.relative_to(source).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, scope: str = "") -> Iterator[tuple[ast.stmt, str]]:
    """Import statements that can run, with the function they sit in ("" at module level)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, scope
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), scope)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _imports(node, node.name)
        else:
            yield from _imports(node, scope)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_edges(modules: dict[str, Path]) -> list[ImportEdge]:
    """Every import of one of `modules` by another (see the module docstring for what counts)."""
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, scope in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _absolute(module, path.name == "__init__.py", node)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            where = f"line {node.lineno}" + (f", in {scope}" if scope else "")
            for target in dict.fromkeys(targets):
                # `import a.b.c` names a.b.c; climb to the nearest module of ours.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.append(ImportEdge(module, target, where))
    return edges


def import_cycles(edges: list[ImportEdge]) -> list[list[ImportEdge]]:
    """One shortest circle per strongly connected group of modules (Tarjan, then BFS)."""
    graph: dict[str, dict[str, ImportEdge]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, {}).setdefault(edge.imported, edge)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count (~200)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, {}):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_shortest_circle(graph, group) for group in groups]


def _shortest_circle(graph: dict[str, dict[str, ImportEdge]], group: set[str]) -> list[ImportEdge]:
    start = min(group)
    paths: dict[str, list[ImportEdge]] = {start: []}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor, edge in sorted(graph.get(node, {}).items()):
                if successor == start:
                    return [*paths[node], edge]
                if successor in group and successor not in paths:
                    paths[successor] = [*paths[node], edge]
                    following.append(successor)
        frontier = following
    raise AssertionError(f"no circle through {start} in {sorted(group)}")  # Tarjan says there is


def test_the_packages_have_no_import_circles():
    modules = module_files()
    assert {"rllm_envs", "rllm_agents", "rllm_train"} <= set(modules)
    cycles = import_cycles(import_edges(modules))
    report = "\n".join(
        "circle: "
        + " -> ".join([cycle[0].importer, *(edge.imported for edge in cycle)])
        + "".join(f"\n    {edge}" for edge in cycle)
        for cycle in cycles
    )
    assert not cycles, f"{len(cycles)} import circle(s):\n{report}"


@pytest.mark.parametrize(
    "files, circle",
    [
        # module level, relative, a function-level import closing the circle
        (
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from .b import thing\n",
                "pkg/b.py": "def thing():\n    from pkg import a\n",
            },
            ["pkg.a", "pkg.b", "pkg.a"],
        ),
        # three modules; `import x.y` and `from x import y` forms
        (
            {
                "x/__init__.py": "",
                "x/one.py": "import x.two\n",
                "x/two.py": "from x import three\n",
                "x/three.py": "from x.one import f\n",
            },
            ["x.one", "x.two", "x.three", "x.one"],
        ),
        # typing-only imports and a package importing its submodules are not circles
        (
            {
                "p/__init__.py": "from p.c import C\n",
                "p/c.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from p.d import D\n",
                "p/d.py": "from p.c import C\n",
            },
            [],
        ),
    ],
)
def test_the_walk_finds_circles_and_names_them(tmp_path, files, circle):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cycles = import_cycles(import_edges(module_files((tmp_path,))))
    if not circle:
        assert cycles == []
        return
    assert len(cycles) == 1
    assert [cycle.importer for cycle in cycles[0]] + [cycles[0][-1].imported] == circle
