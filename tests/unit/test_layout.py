"""The package layout stays true: no import cycle, a small top level, small modules, a remote/
that runs on a bare host, and a layout page (docs/explanation/layout.md) that matches the tree.

Everything is read with ``ast`` from the source files; nothing of ``provision`` is imported, so
a cycle is reported as a cycle and not as whatever ImportError it would cause.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "provision"
LAYOUT_PAGE = REPO / "docs" / "explanation" / "layout.md"

MAX_TOP_MODULES = 8
MAX_LINES = 650
# What a file under provision/remote/ may import besides the standard library and its own
# relative modules: it is copied to hosts that have only the host's Python and the venv's torch.
REMOTE_ALLOWED = {"torch", "pynvml"}


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


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


def _is_type_checking(test: ast.expr) -> bool:
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
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
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


def import_graph() -> dict[str, set[str]]:
    """provision's modules and, for each, the provision modules it imports (TYPE_CHECKING left out)."""
    modules = {module_name(p): p for p in sources()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = parse(path)
        for node in import_nodes(tree, type_checking=False):
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


def test_no_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles in provision/ (lazy imports count):\n" + "\n".join(
        "  " + " -> ".join(c) + f"  ({len(component(graph, c[0]))} modules in this knot)" for c in found
    )


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


def test_cycle_finder_sees_a_lazy_cycle() -> None:
    """The finder itself: a -> b -> c -> a is one cycle, d -> a is not part of it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_lazy_imports_count_and_type_checking_ones_do_not() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import provision.x\n"
        "def f():\n    import provision.y\n"
    )
    names = {a.name for n in import_nodes(tree, type_checking=False) if isinstance(n, ast.Import) for a in n.names}
    assert names == {"provision.y"}


def test_relative_imports_resolve_against_the_package() -> None:
    smoke = PACKAGE / "remote" / "smoke"
    job = ast.parse("from . import dist\nfrom .train import Trainer\n").body
    assert [n for n, _ in imported(smoke / "job.py", job[0])] == [
        "provision.remote.smoke.dist",
        "provision.remote.smoke",
    ]
    assert imported(smoke / "job.py", job[1])[-1] == ("provision.remote.smoke.train", 1)
    assert imported(smoke / "__init__.py", job[1])[-1] == ("provision.remote.smoke.train", 1)


def test_top_level_is_small() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, (
        f"{len(top)} modules at the top of provision/ (at most {MAX_TOP_MODULES}): {top}"
    )


def test_no_module_is_too_long() -> None:
    long = {str(p.relative_to(REPO)): n for p in sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: " + ", ".join(
        f"{p} ({n})" for p, n in sorted(long.items(), key=lambda kv: -kv[1])
    )


def test_remote_imports_only_stdlib_torch_and_pynvml() -> None:
    remote = PACKAGE / "remote"
    bad = []
    for path in sources():
        if remote not in path.parents:
            continue
        for node in import_nodes(parse(path), type_checking=True):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = imported(path, node)[-1][0]
                if target == "provision.remote" or target.startswith("provision.remote."):
                    continue
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: relative import out of remote/ ({target})")
                continue
            tops = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in tops:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in REMOTE_ALLOWED:
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}: imports {name}")
    assert not bad, "provision/remote/ runs on bare hosts (stdlib, torch, pynvml only):\n" + "\n".join(bad)


def tree_entries() -> set[str]:
    """Every package (folder holding Python, as ``provision/x/``) and module (``provision/x/y.py``)
    under provision/, as the layout page spells them; packages' ``__init__.py`` go with the folder."""
    entries = set()
    for path in sources():
        rel = path.relative_to(REPO)
        entries.add(f"{rel.parent.as_posix()}/")
        if not is_package(path):
            entries.add(rel.as_posix())
    return entries


def page_entries(text: str) -> set[str]:
    """The provision/ paths the page names in backticks."""
    return set(re.findall(r"`(provision/(?:[\w.]+/)*(?:\w+\.py)?)`", text))


def test_layout_page_reader() -> None:
    text = "- `provision/hosts/` owns hosts\n  - `provision/hosts/probe.py`: facts; see `provision.api`, `x/y.py`, `provision/`"
    assert page_entries(text) == {"provision/", "provision/hosts/", "provision/hosts/probe.py"}


def test_layout_page_matches_the_tree() -> None:
    named = page_entries(LAYOUT_PAGE.read_text())
    # Every package and module is on the page; what the page names exists (it may also name
    # folders of data, such as provision/matrix/data/).
    missing = sorted(tree_entries() - named)
    gone = sorted(p for p in named if not (REPO / p).exists())
    assert not missing and not gone, (
        f"{LAYOUT_PAGE.relative_to(REPO)} is out of date:\n"
        + "".join(f"  not on the page: {p}\n" for p in missing)
        + "".join(f"  on the page but not in the tree: {p}\n" for p in gone)
    )
