"""The stack options (--framework, --driver, ...) on resolve, plan and up: declared once, merged over the config.

Real processes (`python -m provision`), real resolves from the shipped data, real lock files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from provision.files import read_lock
from tests.cli_run import provision
from tests.support.cloud_cli import offline_aws, run_cli

__all__ = ["offline_aws"]

BIN = Path(sys.executable).parent
STACK_FLAGS = (
    "--framework",
    "--driver",
    "--kernel-modules",
    "--cuda-toolkit",
    "--cudnn",
    "--python",
    "--torch-index",
    "--torch-variant",
    "--install-method",
    "--python-source",
)


def _provision(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return provision(*args, cwd=cwd)


@pytest.mark.parametrize("command", ["resolve", "plan", "up"])
def test_help_lists_every_stack_option(command: str, tmp_path: Path) -> None:
    r = _provision(command, "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    missing = [flag for flag in STACK_FLAGS if flag not in r.stdout]
    assert missing == []


def test_each_flag_reaches_the_lock(tmp_path: Path) -> None:
    r = _provision(
        "plan",
        "--assume",
        "os=debian-12,gpu=T4:1,name=h1",
        "--framework",
        "torch==2.13.0",
        "--driver",
        "580",
        "--kernel-modules",
        "proprietary",
        "--cuda-toolkit",
        "12.8",
        "--cudnn",
        "none",
        "--python",
        "3.11",
        "--torch-index",
        "pytorch",
        "--torch-variant",
        "cu126",
        "--install-method",
        "nvidia-repo",
        "--python-source",
        "os",
        "--json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    [group] = read_lock(tmp_path / "provision.lock").groups
    assert group.hosts == ["h1"]
    stack = group.stack.to_json()
    assert stack["driver"]["branch"] == "580"
    assert stack["driver"]["kernel_modules"] == "proprietary"
    assert stack["driver"]["install_method"] == "nvidia-repo"
    assert stack["cuda_toolkit"] == {"version": "12.8"}
    assert stack["cudnn"] is None
    torch = stack["frameworks"]["torch"]
    assert (torch["version"], torch["variant"]) == ("2.13.0", "cu126")
    assert torch["index_url"].startswith("https://download.pytorch.org/")
    assert (stack["python"], stack["python_source"]) == ("3.11", "os")
    # what the run dir renders is the same lock
    assert (tmp_path / ".provision/run/provision.lock").read_text() == (tmp_path / "provision.lock").read_text()


def test_the_other_choices_reach_the_lock_too(tmp_path: Path) -> None:
    """distro, pypi, a standalone CPython: the values the first test did not take."""
    r = _provision(
        "plan",
        "--assume",
        "os=debian-12,gpu=T4:1,name=h1",
        "--framework",
        "torch==2.10.0",
        "--python",
        "3.12",
        "--python-source",
        "standalone",
        "--install-method",
        "distro",
        "--torch-index",
        "pypi",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    [group] = read_lock(tmp_path / "provision.lock").groups
    stack = group.stack.to_json()
    assert stack["driver"]["install_method"] == "distro"
    assert stack["frameworks"]["torch"]["index_url"] == "https://pypi.org/simple"
    assert (stack["python"], stack["python_source"]) == ("3.12", "standalone")


def test_a_flag_beats_the_configs_value_and_the_rest_of_the_config_stays(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml").write_text(
        "stack:\n  frameworks: ['torch==2.10.0']\n  driver: '570'\n  kernel_modules: proprietary\n"
        "install:\n  method: nvidia-repo\n"
    )
    base = ("plan", "--assume", "os=debian-12,gpu=T4:1,name=h1", "-c", "provision.yaml")
    r = _provision(*base, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [group] = read_lock(tmp_path / "provision.lock").groups
    assert group.stack.driver.branch == "570"  # the config alone
    r = _provision(*base, "--driver", "580", "--framework", "torch==2.13.0", "--torch-variant", "cu126", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [group] = read_lock(tmp_path / "provision.lock").groups
    assert group.stack.driver.branch == "580"
    assert group.stack.frameworks["torch"].version == "2.13.0"
    assert group.stack.driver.kernel_modules == "proprietary"  # not given: the config's


def test_resolve_merges_the_same_way(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml").write_text("stack:\n  driver: '570'\n  frameworks: ['torch==2.10.0']\n")
    r = _provision(
        "resolve", "--gpu", "T4", "--os", "debian-12", "-c", "provision.yaml", "--driver", "580", "--json", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["stack"]["driver"]["branch"] == "580"
    assert doc["stack"]["frameworks"]["torch"]["version"] == "2.10.0"


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("plan", ["--assume", "os=debian-12,gpu=T4:1,name=h1"]),
        # up: refused before any host is read or contacted (the inventory does not even exist)
        ("up", ["-i", "missing-inventory.ini", "--yes"]),
    ],
)
def test_a_bad_stack_flag_is_one_line_exit_2_and_writes_nothing(command: str, extra: list[str], tmp_path: Path) -> None:
    r = _provision(command, *extra, "--framework", "torhc==2.13.0", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") <= 2 and "torhc" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


CLOUD = ["up", "--cloud", "--instance-type", "g5.xlarge", "--ssh-cidr", "203.0.113.7/32", "--ami", "ami-0abc1234"]


def test_up_cloud_refuses_a_bad_stack_option_before_launching(
    offline_aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """No AWS (offline_aws): a run past its checks fails to connect (exit 1); a bad flag is exit 2 first."""
    code, _, err = run_cli([*CLOUD, "--yes", "--framework", "torhc==2.13.0"], capsys)
    assert code == 2 and "torhc" in err
    code, _, err = run_cli([*CLOUD, "--yes", "--framework", "torch==2.13.0", "--driver", "580"], capsys)
    assert code == 1, err  # the stack options were taken; the launch then could not reach AWS
