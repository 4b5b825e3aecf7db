"""provision's import graph, read with ``ast`` from the source files (nothing of provision runs).

Shared by tests/unit/project/test_layout.py (no import cycle between modules, remote/ on the standard
library) and tests/unit/project/test_model_rules.py (issue 26's ratchets: no cycle between packages,
fleet/ importing nothing of cloud/). Nothing of ``provision`` is imported, so a cycle is reported
as a cycle and not as whatever ImportError it would cause.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "provision"


def sources(root: Path = PACKAGE) -> list[Path]:
    """The Python files under ``root`` (provision/ unless told), sorted."""
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(tree: ast.AST, *, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement anywhere in the tree (inside functions too: lazy imports run as
    surely as top-level ones); ``if TYPE_CHECKING:`` bodies only when ``type_checking``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and is_type_checking(node.test) and not type_checking:
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imported(path: Path, node: ast.Import | ast.ImportFrom) -> list[tuple[str, int]]:
    """The absolute names an import statement loads, each with its relative level (0: absolute).

    ``from pkg import name`` loads ``pkg.name`` when that is a module, else ``pkg``; the caller
    decides which of the two exists."""
    if isinstance(node, ast.Import):
        return [(alias.name, 0) for alias in node.names]
    if node.level:
        base = module_name(path).split(".")
        # a package's own __init__ is level 1 of itself; a module's level 1 is its package
        base = base[: len(base) - node.level + (1 if is_package(path) else 0)]
        prefix = ".".join([*base, node.module] if node.module else base)
    else:
        prefix = node.module or ""
    return [(f"{prefix}.{alias.name}", node.level) for alias in node.names] + [(prefix, node.level)]


def import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """provision's modules and, for each, the provision modules it imports (``if TYPE_CHECKING:``
    ones only when ``type_checking``: they never run, so they make no cycle at import time)."""
    modules = {module_name(p): p for p in sources()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = parse(path)
        for node in import_nodes(tree, type_checking=type_checking):
            names = [n for n, _ in imported(path, node)]
            if isinstance(node, ast.ImportFrom):
                # `from pkg import sub`: the submodule where one exists, else the package itself
                *members, prefix = names
                found = [m for m in members if m in modules]
                names = found if len(found) == len(members) else [*found, prefix]
            graph[name].update(n for n in names if n in modules and n != name)
        # Dynamic imports name their module in a string: the CLI's lazy command table
        # ("provision.cli.up:up" for importlib). A string naming the module's own package
        # (importlib.resources.files("provision.matrix") in provision.matrix.knowledge) loads
        # nothing: a package is always imported before its modules.
        for const in ast.walk(tree):
            if isinstance(const, ast.Constant) and isinstance(const.value, str):
                target = const.value.split(":")[0]
                if target in modules and not f"{name}.".startswith(f"{target}."):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [cycle_in(graph, set(c)) for c in components]


def cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, by breadth-first search."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # a component of >1 always has one


def component(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules on some cycle through ``start``: reachable from it and reaching it."""

    def reach(edges: dict[str, set[str]]) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            for w in edges[todo.pop()] - seen:
                seen.add(w)
                todo.append(w)
        return seen

    reverse: dict[str, set[str]] = {v: set() for v in graph}
    for v, ws in graph.items():
        for w in ws:
            reverse[w].add(v)
    return reach(graph) & reach(reverse)
