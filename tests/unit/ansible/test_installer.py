"""install.installer: the config's choice, what render makes of it for the frameworks and
python_env roles, and that their argument specs take what render writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from provision.ansible.role_vars import group_vars, installer
from provision.config import parse_config
from provision.errors import BadInput
from provision.matrix import load
from provision.model import LockGroup
from provision.model.settings import InstallSettings, PipSettings
from provision.stack.lock import PythonPackage

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "unit" / "golden" / "render"
SHA = "0" * 64
CLOSURE = [
    {"name": "torch", "version": "2.13.0+cpu", "sha256": SHA, "url": "https://download.pytorch.org/whl/cpu/torch.whl",
     "index": "https://download.pytorch.org/whl/cpu"},
    {"name": "filelock", "version": "4.3.1", "sha256": "1" * 64, "url": "https://files.example/filelock.whl",
     "index": "https://pypi.org/simple"},
]  # fmt: skip


def _group(closure: list[dict[str, str]]) -> dict[str, Any]:
    group: dict[str, Any] = json.loads((GOLDEN / "debian-12.lock").read_text())["groups"][0]
    return {**group, "python_packages": closure}


def _validate(role: str, out: dict[str, Any]) -> None:
    """The role's meta/argument_specs.yml, as Ansible checks it before the role runs."""
    spec = yaml.safe_load((ROOT / "playbooks" / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    mine = {k: v for k, v in out.items() if k in options}
    result = ArgumentSpecValidator(options).validate(mine)
    assert not result.error_messages, result.error_messages
    assert mine  # the role's own variables were there to check


def test_the_config_takes_auto_uv_or_pip_and_refuses_others() -> None:
    assert parse_config({}).install.installer == "auto"
    assert parse_config({"install": {"installer": "UV"}}).install.installer == "uv"
    with pytest.raises(BadInput, match=r"install\.installer.*auto, uv, pip"):
        parse_config({"install": {"installer": "conda"}})
    assert parse_config({"install": {"installer": "pip"}}).install.installer == "pip"


@pytest.mark.parametrize(
    ("setting", "closure", "want"),
    [("auto", CLOSURE, "uv"), ("uv", CLOSURE, "uv"), ("pip", CLOSURE, "pip"), ("auto", [], "pip"), ("uv", [], "pip")],
)
def test_render_passes_the_installer_and_the_roles_take_it(
    setting: str, closure: list[dict[str, str]], want: str
) -> None:
    """uv installs only the closure's hashed lists: a lock without one gets pip whatever the
    setting; with uv, python_env installs the knowledge's uv from install.pip's index."""
    install = InstallSettings(
        pip=PipSettings(index_url="https://mirror.example/simple", trusted_hosts=("mirror.example",)), installer=setting
    )
    out = group_vars(LockGroup.from_json(_group(closure)), install)
    assert out["frameworks_installer"] == want
    assert out.get("python_env_install_uv", False) is (want == "uv")
    if want == "uv":
        sp = load().t.standalone_python
        assert sp is not None and out["python_env_uv_version"] == sp.uv
        assert out["python_env_pip_args"] == [
            "--index-url=https://mirror.example/simple",
            "--trusted-host=mirror.example",
        ]
        # the same per-index lists as pip's, PyPI's half sent to the mirror
        assert [e["index_url"] for e in out["frameworks_locked"]] == [
            "https://download.pytorch.org/whl/cpu",
            "https://mirror.example/simple",
        ]
    _validate("frameworks", out)
    _validate("python_env", out)


def test_the_role_defaults_keep_pip_and_the_spec_refuses_another_installer() -> None:
    defaults = yaml.safe_load((ROOT / "playbooks/roles/frameworks/defaults/main.yml").read_text())
    assert defaults["frameworks_installer"] == "pip"
    spec = yaml.safe_load((ROOT / "playbooks/roles/frameworks/meta/argument_specs.yml").read_text())
    result = ArgumentSpecValidator(spec["argument_specs"]["main"]["options"]).validate(
        {"frameworks_installer": "poetry"}
    )
    assert result.error_messages and "frameworks_installer" in result.error_messages[0]


def test_auto_keeps_pip_for_a_closure_from_a_wheelhouse() -> None:
    """A find-links wheel (index "") may sit in an air-gapped folder without uv's wheel: auto
    keeps pip there, uv only when asked for."""
    indexed = [PythonPackage.from_json(p, "x") for p in CLOSURE]
    local = [*indexed, PythonPackage.from_json({**CLOSURE[1], "name": "sympy", "index": ""}, "x")]
    assert (installer("auto", indexed), installer("auto", local)) == ("uv", "pip")
    assert (installer("uv", local), installer("pip", indexed), installer("uv", [])) == ("uv", "pip", "pip")
    # an index behind a login (the hosts' netrc): pip under auto
    assert (installer("auto", indexed, index_login=True), installer("uv", indexed, index_login=True)) == ("pip", "uv")


def test_installer_refuses_an_unknown_setting() -> None:
    closure = [PythonPackage.from_json(CLOSURE[0], "x")]
    with pytest.raises(BadInput, match="installer"):
        installer("conda", closure)
