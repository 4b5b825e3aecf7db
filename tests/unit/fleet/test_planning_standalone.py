"""A host whose venv already runs the lock's standalone CPython plans no change for the Python, so
a converged host is not applied again for it (up skips a host with no changes whose last verify
passed with the lock); the probe's venv snippet reports the venv's base installation for that."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from provision.fleet.planning import _host_plan, _Target
from provision.hosts.facts import HostFacts, VenvFacts
from provision.hosts.parse_system import parse_venv_json
from provision.model.defaults import STANDALONE_PYTHON_DIR
from provision.model.stack import Stack

SNIPPET = Path(__file__).resolve().parents[3] / "provision" / "remote" / "snippets" / "venv_packages.py"
STANDALONE = f"{STANDALONE_PYTHON_DIR}/cpython-3.11.7-linux-x86_64-gnu"


STACK = Stack(
    driver=None, fabric_manager=None, cuda_toolkit=None, cudnn=None, python="3.11", python_source="standalone"
)
CHANGE = "python 3.11 (a standalone CPython, installed by uv)"


@pytest.mark.parametrize(
    ("venv_facts", "planned"),
    [
        (VenvFacts("/opt/provision/venv", "3.11", base_prefix=STANDALONE), []),
        (VenvFacts("/opt/provision/venv", "3.12", base_prefix=STANDALONE), [CHANGE]),  # another minor
        (VenvFacts("/opt/provision/venv", "3.11", base_prefix="/usr"), [CHANGE]),  # the OS's python3.11
        (VenvFacts("/opt/provision/venv", "3.11", base_prefix=f"{STANDALONE_PYTHON_DIR}-old/x"), [CHANGE]),
        (VenvFacts("/opt/provision/venv", "3.11"), [CHANGE]),  # an older probe: no base_prefix
        (None, [CHANGE]),  # no venv yet
    ],
)
def test_only_a_venv_made_from_python_env_s_standalone_cpython_of_the_minor_plans_nothing(
    venv_facts: VenvFacts | None, planned: list[str]
) -> None:
    target = _Target("h", {}, facts=HostFacts(venv=venv_facts))
    assert _host_plan(target, "g", STACK, "auto").changes == planned


def test_a_host_planned_without_a_probe_gets_the_python() -> None:
    assert _host_plan(_Target("h", {}), "g", STACK, "auto").changes == [CHANGE]


def test_the_probe_snippet_reports_the_venv_s_base_installation(tmp_path: Path) -> None:
    """Run for real in a venv made from the Python running the tests: its base_prefix is that Python's."""
    venv.create(tmp_path / "v", with_pip=False)
    out = subprocess.run([str(tmp_path / "v/bin/python"), str(SNIPPET)], capture_output=True, text=True, check=True)
    facts = parse_venv_json(str(tmp_path / "v"), out.stdout)
    assert facts.base_prefix == sys.base_prefix and facts.python == "{}.{}".format(*sys.version_info[:2])
    assert json.loads(out.stdout)["packages"] == {}
