"""The package layout stays true: no import cycle, a small top level, small modules, a remote/
that runs on a bare host, and a layout page (docs/explanation/layout.md) that matches the tree.

Everything is read with ``ast`` from the source files; nothing of ``provision`` is imported, so
a cycle is reported as a cycle and not as whatever ImportError it would cause.
"""

from __future__ import annotations

import ast
import re
import sys

from tests.support.imports import (
    PACKAGE,
    REPO,
    component,
    cycles,
    import_graph,
    import_nodes,
    imported,
    is_package,
    parse,
    sources,
)

LAYOUT_PAGE = REPO / "docs" / "explanation" / "layout.md"

MAX_TOP_MODULES = 8
MAX_LINES = 650
# What a file under provision/remote/ may import besides the standard library and its own
# relative modules: it is copied to hosts that have only the host's Python and the venv's torch.
REMOTE_ALLOWED = {"torch", "pynvml"}


def test_no_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles in provision/ (lazy imports count):\n" + "\n".join(
        "  " + " -> ".join(c) + f"  ({len(component(graph, c[0]))} modules in this knot)" for c in found
    )


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
