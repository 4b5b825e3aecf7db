"""The one version-match rule (provision/model/versions.py) and everything that applies it.

One table of cases pins the rule: local version labels (+cu128, +cpu), cuDNN's integer numbering,
a driver expected as x or x.y against an installed x.y.z, release parts the installed version
lacks, and "not installed". The smoke job's verdict, the lock's drift, the planner's "already
installed" and the verify role (its filter, which loads the rule, evaluated here by Ansible's own engine)
must all agree with it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import provision.model.versions
from provision.fleet.planning import _same_framework
from provision.model import FrameworkPin, ResolvedHost, Stack
from provision.model.versions import build_matches, version_matches
from provision.remote.smoke import FILES, SOURCES
from provision.remote.smoke.verdict import version_checks
from provision.stack.drift import drift
from provision.stack.lock import LockGroup

ROLE = Path(__file__).resolve().parents[3] / "playbooks" / "roles" / "verify"

# (item, installed, expected, matches)
CASES: list[tuple[str, str | None, str | None, bool]] = [
    # local version labels: a lock without one accepts the wheel's own; one in the lock must be there
    ("torch", "2.8.0+cu128", "2.8.0", True),
    ("torch", "2.8.0", "2.8.0", True),
    ("torch", "2.8.0+cu128", "2.8.0+cu128", True),
    ("torch", "2.8.0+cu128", "2.8.0+cu126", False),
    ("torch", "2.13.0", "2.13.0+cpu", False),
    ("torch", "2.13.0+cpu", "2.13.0+cpu", True),
    ("torch", "2.7.1+cu126", "2.8.0", False),
    ("torch", "2.8.0+cu128", "2.8", True),
    ("torch", "2.8", "2.8.0", True),  # PEP 440: 2.8 is 2.8.0
    ("torch", "2.8", "2.8.1", False),
    ("tensorflow", "2.20.0", "2.20.0", True),
    ("jax", "0.7.1", "0.7.2", False),
    # the driver: a shorter expectation is a prefix (a branch, x.y); the installed one may not be shorter
    ("driver", "580.95.05", "580.95.05", True),
    ("driver", "580.95.05", "580", True),
    ("driver", "580.95.05", "580.95", True),
    ("driver", "580.95.05", "58", False),
    ("driver", "580.95", "580.95.05", False),
    ("driver", "575.57.08", "580.95.05", False),
    # X.Y locks against X.Y.Z reports
    ("python", "3.11.2", "3.11", True),
    ("python", "3.12.1", "3.11", False),
    ("torch_cuda", "12.8", "12.8", True),
    ("torch_cuda", "12.6", "12.8", False),
    ("cuda_toolkit", "12.8", "12.8", True),
    # cuDNN: torch's integer, the lock's dotted build, either side
    ("cudnn", "91002", "91002", True),
    ("cudnn", "91002", "9.10.2.21", True),
    ("cudnn", "91002", "9.10", True),
    ("cudnn", "90100", "9.1.0.70", True),
    ("cudnn", "8907", "8.9.7.29", True),
    ("cudnn", "9.10.2", "91002", True),
    ("cudnn", "91002", "9.1.0", False),
    ("cudnn", "90501", "91002", False),
    # not installed
    ("torch_cuda", None, None, True),
    ("torch_cuda", None, "none", True),
    ("torch_cuda", "12.8", None, False),
    ("torch_cuda", "12.8", "none", False),
    ("fabric_manager", None, "580.95.05", False),
    ("nccl", None, "2.27.3", False),
]


@pytest.mark.parametrize(("item", "installed", "expected", "matches"), CASES)
def test_the_rule(item: str, installed: str | None, expected: str | None, matches: bool) -> None:
    assert version_matches(item, installed, expected) is matches


@pytest.mark.parametrize(("item", "installed", "expected", "matches"), CASES)
def test_the_smoke_job_verdict_applies_it(
    item: str, installed: str | None, expected: str | None, matches: bool
) -> None:
    (check,) = version_checks({item: installed}, {item: "none" if expected is None else expected})
    assert check["ok"] is matches


def _locked(item: str, version: str | None) -> dict[str, Any]:
    """A lock group's ``stack`` that locks ``item`` at ``version``."""
    if item == "python":
        return {"python": version}
    if item in ("driver", "fabric_manager", "cuda_toolkit"):
        return {item: {"version": version}}
    if item == "torch_cuda":
        return {"frameworks": {"torch": {"version": "2.8.0", "cuda": version}}}
    return {"frameworks": {item: {"version": version}}}


# cuDNN is locked dotted and compared as torch's integer (test_lock.py); nccl is not in a lock
DRIFT_CASES = [c for c in CASES if c[0] not in ("cudnn", "nccl") and c[2] != "none"]


@pytest.mark.parametrize(("item", "installed", "expected", "matches"), DRIFT_CASES)
def test_drift_applies_it(item: str, installed: str | None, expected: str | None, matches: bool) -> None:
    group = LockGroup(
        name="g", hosts=["h"], host=ResolvedHost.from_json({}), stack=Stack.from_json(_locked(item, expected))
    )
    assert (drift(group, {item: installed}) == []) is matches


@pytest.mark.parametrize(
    ("item", "installed", "expected", "matches"), [c for c in CASES if c[0] in ("torch", "tensorflow", "jax")]
)
def test_the_planner_applies_it(item: str, installed: str, expected: str, matches: bool) -> None:
    assert _same_framework(installed, FrameworkPin.from_json("torch", {"version": expected}, "t")) is matches


@pytest.mark.parametrize(
    ("installed", "variant", "matches"),
    [("2.8.0+cu128", "cu128", True), ("2.8.0+cu126", "cu128", False), ("2.8.0", "cu128", True), (None, "cpu", True)],
)
def test_the_build_is_the_locked_variant(installed: str | None, variant: str, matches: bool) -> None:
    assert build_matches(installed, variant) is matches
    if installed is not None:
        assert _same_framework(installed, FrameworkPin("torch", "2.8.0", "", None, None, variant)) is matches


def test_the_rule_travels_with_the_smoke_job() -> None:
    assert "versions.py" in FILES
    # one file: the bundle carries the model's own module, and the job in the tree loads that same file
    assert SOURCES["versions.py"] == Path(provision.model.versions.__file__).resolve()
    assert not (SOURCES["job.py"].parent / "versions.py").exists()
    import provision.remote.smoke.versions as on_hosts

    assert Path(str(on_hosts.__file__)).resolve() == SOURCES["versions.py"]


def test_the_controller_does_not_import_what_runs_on_hosts() -> None:
    """drift, the planner and the report take the rule from provision/model/, not from remote/."""
    package = Path(provision.model.versions.__file__).resolve().parents[1]
    for module in ("stack/drift.py", "fleet/planning.py", "fleet/report.py"):
        assert "provision.remote" not in (package / module).read_text(), module


# --- the verify role: its filter asks the one rule ------------------------------------------------


@functools.cache
def _task(name: str) -> dict[str, Any]:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    for block in tasks:
        for task in block.get("block", [block]):
            if task.get("name") == name:
                return dict(task)
    raise AssertionError(f"no task {name!r} in the verify role")


def _assert_passes(task: dict[str, Any], variables: dict[str, Any]) -> bool:
    """Evaluate an assert task as Ansible does: its vars, the role's filters, then every ``that``."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import filter_loader
    from ansible.template import Templar, trust_as_template

    filter_loader.add_directory(str(ROLE / "filter_plugins"))  # as Ansible does for a role's plugins
    trusted = {k: trust_as_template(v) for k, v in task.get("vars", {}).items()}
    templar = Templar(loader=DataLoader(), variables={**variables, **trusted})
    that = task["ansible.builtin.assert"]["that"]
    results = [
        templar.template(trust_as_template("{{ " + cond + " }}"))
        for cond in ([that] if isinstance(that, str) else that)
    ]
    assert all(isinstance(r, bool) for r in results), results
    return all(results)


def test_the_verify_role_has_no_copy_of_the_rule() -> None:
    """The role asks the rule through its filter (filter_plugins/version_rule.py, which loads
    provision/model/versions.py): no Jinja copy of it in vars/, no version split in its tasks."""
    assert not (ROLE / "vars").exists()
    for path in ROLE.rglob("*.yml"):
        text = path.read_text()
        assert "__verify_version_matches" not in text and ".split('+'" not in text, path
    asks = [t for t in map(_task, ROLE_TASKS) if "verify_version_matches" in json.dumps(t)]
    assert len(asks) == len(ROLE_TASKS)
    plugin = (ROLE / "filter_plugins" / "version_rule.py").read_text()
    assert "def version_matches" not in plugin and "provision.model" in plugin


def test_a_run_dir_carries_the_rule_for_the_filter(tmp_path: Path) -> None:
    """`plan --out` copies the roles; the verify role's copy carries the rule's file, byte for byte."""
    from provision.ansible.rundir import _copy_roles

    _copy_roles(tmp_path / "roles")
    carried = tmp_path / "roles" / "verify" / "files" / "versions.py"
    assert carried.read_bytes() == Path(provision.model.versions.__file__).read_bytes()


ROLE_TASKS = ("Fail when the GPUs do not run the lock's driver", "Fail when a framework is not at the lock's version")
ROLE_CASES = [c for c in CASES if c[0] != "cudnn" and c[1] is not None and c[2] not in (None, "none")]


@pytest.mark.parametrize(("item", "installed", "expected", "matches"), ROLE_CASES)
def test_the_verify_role_agrees_on_frameworks(item: str, installed: str, expected: str, matches: bool) -> None:
    task = _task("Fail when a framework is not at the lock's version")
    variables = {
        "item": {"item": "torch", "stdout": json.dumps({"torch": installed})},
        "verify_frameworks": {"torch": expected},
    }
    assert _assert_passes(task, variables) is matches is version_matches(item, installed, expected)


@pytest.mark.parametrize(("item", "installed", "expected", "matches"), ROLE_CASES)
def test_the_verify_role_agrees_on_the_driver(item: str, installed: str, expected: str, matches: bool) -> None:
    task = _task("Fail when the GPUs do not run the lock's driver")
    variables = {"verify_smi": {"rc": 0, "stdout_lines": [installed, installed]}, "verify_driver_version": expected}
    assert _assert_passes(task, variables) is matches


def test_the_verify_role_fails_without_nvidia_smi_or_with_mixed_drivers() -> None:
    task = _task("Fail when the GPUs do not run the lock's driver")
    failed = {"rc": 9, "stdout_lines": []}
    mixed = {"rc": 0, "stdout_lines": ["580.95.05", "575.57.08"]}
    for smi in (failed, mixed):
        assert not _assert_passes(task, {"verify_smi": smi, "verify_driver_version": "580.95.05"})
