"""Ratchets for issue 26 ("One typed model"): measured from the source tree with `ast`, never run.

Each ceiling below is the count on the day the ratchet was added; the issue's target is in the
comment beside it. A step of the renovation that lowers a count lowers its ceiling in the same
commit, so the count can only go down: a test fails when a change adds a loose parameter, an
arrow from fleet/ to cloud/, a parameter to plan() or a package import cycle. The last test
keeps the tests' own rule: no test module imports another (shared helpers are in tests/support/).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import imports
from tests.support.imports import PACKAGE, REPO, parse, sources

TESTS = REPO / "tests"

# (a) Parameters typed Any, dict[str, Any], Mapping[str, Any], MutableMapping[str, Any] or
# Dict[str, Any] (alone, `| None` or Optional[...]; *args and **kwargs count) in these packages.
# Issue 26's target: at most 15, all in the JSON/YAML readers and writers and the ansible-runner
# event handlers; each step that types some of them lowers the ceiling to the new count. 10 left,
# the target reached (24 before the last step, 53 before that): the ansible-runner event handlers
# (4: feed, handle, _write_event and _message, which reads an event's result), the YAML writer
# dump, and the readers of YAML and JSON (inventory connection variables, role argument specs, a
# group's role variables in WheelSet.from_group_vars, pip's installation report, the smoke job's
# report in verify's _figure). report.py renders from provision/model/report.py's UpReport (read
# once from report.json's document), and http.server's copyfile override has typeshed's types.
LOOSE_PACKAGES = ("stack", "ansible", "fleet")
LOOSE_PARAMETERS_CEILING = 10
# (b) Import statements in provision/fleet/ that name provision.cloud (TYPE_CHECKING and in-function
# ones count). Target 0: check_up_targets and what it needs move to cli/.
FLEET_IMPORTS_OF_CLOUD_CEILING = 0  # reached: check_up_targets lives in cli/up.py
# (c) The planning stage's plan() (fleet/planning.py today): its parameters. Target 8 (records such as PlanInputs instead of keywords).
PLAN_PARAMETERS_CEILING = 2  # plan(inputs: PlanInputs, context: PlanRun); it was 16 keywords
# (d) "nothing over 650 lines" is tests/unit/project/test_layout.py's test_no_module_is_too_long: no module
# of provision/ is over it today, so it allows no exception.
# (e) Cycles between provision's packages (provision.X; a top-level module such as provision.config
# is its own), from every import a module makes: lazy ones, and TYPE_CHECKING ones too, since a
# type-only arrow still ties the packages together (test_layout.py's test_no_import_cycle checks
# the modules' runtime cycles). Each known cycle is the set of packages on it; it may only go.
# None today: the cloud <-> fleet cycle (fleet/targets.py named cloud/launcher for check_up_targets)
# went when check_up_targets moved to cli/up.py.
KNOWN_CYCLES: set[frozenset[str]] = set()

_LOOSE_MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping"}


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # typing.Any, t.Mapping
        return node.attr
    return None


def _union_parts(node: ast.expr) -> list[ast.expr]:
    """``A | B | None`` -> [A, B]; ``Optional[A]`` -> [A]; anything else -> [it]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = _union_parts(node.left) + _union_parts(node.right)
        return [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
    if isinstance(node, ast.Subscript) and _name(node.value) == "Optional":
        return _union_parts(node.slice)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        return _union_parts(ast.parse(node.value, mode="eval").body)
    return [node]


def is_loose(annotation: ast.expr) -> bool:
    """Any, or a str-keyed mapping of Any, alone or in a union with None."""
    for part in _union_parts(annotation):
        if _name(part) == "Any":
            return True
        if isinstance(part, ast.Subscript) and _name(part.value) in _LOOSE_MAPPINGS:
            args = part.slice.elts if isinstance(part.slice, ast.Tuple) else []
            if len(args) == 2 and _name(args[0]) == "str" and _name(args[1]) == "Any":
                return True
    return False


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs, *([a.kwarg] if a.kwarg else [])]


def loose_parameters() -> list[str]:
    """``path:line function(parameter: annotation)`` for each loose parameter in LOOSE_PACKAGES."""
    found = []
    for package in LOOSE_PACKAGES:
        for path in sources(PACKAGE / package):
            for node in ast.walk(parse(path)):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for arg in _parameters(node):
                    if arg.annotation is not None and is_loose(arg.annotation):
                        found.append(f"{_rel(path)}:{arg.lineno} {node.name}({arg.arg}: {ast.unparse(arg.annotation)})")
    return found


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed onto provision's packages (an import inside one package is no edge)."""
    graph: dict[str, set[str]] = {package_of(m): set() for m in modules}
    for source, targets in modules.items():
        graph[package_of(source)].update(package_of(t) for t in targets if package_of(t) != package_of(source))
    return graph


def fleet_imports_of_cloud() -> list[str]:
    """``path:line`` of each import statement in provision/fleet/ that names provision.cloud."""
    return [
        f"{_rel(path)}:{node.lineno}"
        for path in sources(PACKAGE / "fleet")
        for node in imports.import_nodes(parse(path), type_checking=True)
        if any(
            name == "provision.cloud" or name.startswith("provision.cloud.") for name, _ in imports.imported(path, node)
        )
    ]


def test_loose_parameters_only_go_down() -> None:
    found = loose_parameters()
    assert len(found) <= LOOSE_PARAMETERS_CEILING, (
        f"{len(found)} parameters in provision/{{{','.join(LOOSE_PACKAGES)}}} are typed Any or dict/Mapping[str, Any] "
        f"(ceiling {LOOSE_PARAMETERS_CEILING}): type the new one with a record of provision/model (or a precise "
        "type) instead:\n" + "\n".join(found)
    )


def test_fleet_imports_nothing_new_of_cloud() -> None:
    found = fleet_imports_of_cloud()
    assert len(found) <= FLEET_IMPORTS_OF_CLOUD_CEILING, (
        f"provision/fleet imports provision.cloud {len(found)} times (ceiling {FLEET_IMPORTS_OF_CLOUD_CEILING}, "
        "target 0): fleet/ acts on hosts whatever launched them; keep cloud code in cloud/ and join the two "
        "in cli/:\n" + "\n".join(found)
    )


def test_plan_takes_no_more_parameters() -> None:
    # the planning stage's plan(), wherever the renovation puts it (cli/plan.py's command is not it)
    plans = [
        (path, node)
        for path in sources(PACKAGE)
        if PACKAGE / "cli" not in path.parents
        for node in parse(path).body
        if isinstance(node, ast.FunctionDef) and node.name == "plan"
    ]
    assert len(plans) == 1, f"one module-level plan() outside cli/, found {[_rel(p) for p, _ in plans]}: fix this test"
    count = len(_parameters(plans[0][1]))
    assert count <= PLAN_PARAMETERS_CEILING, (
        f"plan() takes {count} parameters (ceiling {PLAN_PARAMETERS_CEILING}, target 8): put the new input "
        "in a record plan() already takes (PlanInputs, the config) instead of a new keyword"
    )


def package_cycles(graph: dict[str, set[str]]) -> dict[frozenset[str], list[str]]:
    """{the packages of each strongly connected component: one cycle through it}."""
    return {frozenset(imports.component(graph, c[0])): c for c in imports.cycles(graph)}


def test_no_new_import_cycle_between_packages() -> None:
    found = package_cycles(package_graph(imports.import_graph(type_checking=True)))
    new = [" -> ".join(c) for packages, c in found.items() if not any(packages <= k for k in KNOWN_CYCLES)]
    assert new == [], (
        "provision's packages import each other: move what both need down into a package both may import "
        "(provision/model, errors), or join the two in cli/ (see docs/explanation/layout.md):\n" + "\n".join(new)
    )
    gone = [sorted(k) for k in KNOWN_CYCLES if not any(k <= packages for packages in found)]
    assert gone == [], f"known cycles {gone} are gone: remove them from KNOWN_CYCLES so they cannot come back"


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/support/ (or fixtures in a conftest.py), not in test modules:
    a test module imported by another runs its module code twice under two names and ties the two."""
    modules = sources(TESTS)
    tests = {imports.module_name(p) for p in modules if p.name.startswith("test_")}
    found = sorted(
        {
            f"{_rel(path)}:{node.lineno} imports {name}"
            for path in modules
            for node in imports.import_nodes(parse(path), type_checking=True)
            for name, _ in imports.imported(path, node)
            if name in tests and name != imports.module_name(path)
        }
    )
    assert found == [], "move what they share into tests/support/ (or a fixture in a conftest.py):\n" + "\n".join(found)


def test_the_measures_see_what_they_count() -> None:
    """The readers above on made-up input: loose annotations, and packages from modules."""
    loose = [
        "Any",
        "dict[str, Any]",
        "Mapping[str, Any] | None",
        "Optional[t.MutableMapping[str, t.Any]]",
        "'Dict[str, Any]'",
    ]
    tight = ["str", "dict[str, int]", "Mapping[str, object]", "list[Any]", "HostFacts | None"]
    for text in loose + tight:
        assert is_loose(ast.parse(text, mode="eval").body) == (text in loose), text

    modules = {
        "provision.fleet.targets": {"provision.cloud.launcher", "provision.fleet.records"},
        "provision.fleet.records": set(),
        "provision.cloud.launcher": set(),
        "provision.cloud.oneshot": {"provision.fleet.records", "provision.errors"},
        "provision.errors": set(),
    }
    graph = package_graph(modules)
    assert graph == {
        "provision.fleet": {"provision.cloud"},
        "provision.cloud": {"provision.fleet", "provision.errors"},
        "provision.errors": set(),
    }
    assert list(package_cycles(graph)) == [frozenset({"provision.cloud", "provision.fleet"})]
