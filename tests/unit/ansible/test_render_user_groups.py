"""The run dir's inventory.yml keeps the user's inventory groups beside the lock's groups.

Checked with the real ansible-inventory / ansible-playbook of the venv on a run dir that the
real `provision plan -i` wrote: membership, hierarchy, and that the role variables the run dir
wrote in group_vars/ still reach every host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ansible.render import render_run
from provision.errors import BadInput
from provision.files import read_lock
from provision.hosts.inventory import read_inventory
from provision.model import Lock
from provision.model.settings import InstallSettings

BIN = Path(sys.executable).parent
GOLDEN_LOCK = Path(__file__).parents[1] / "golden" / "render" / "debian-12.lock"
ENV = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
INVENTORY = """\
[gpu_servers]
g1 ansible_host=10.0.0.1
g2 ansible_host=10.0.0.2

[trainers]
g2
t1 ansible_host=10.0.0.3 ansible_user=trainer

[gpu_servers:children]
trainers
"""


def _run(*args: str, cwd: Path) -> str:
    r = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _members(listing: dict[str, Any], group: str) -> set[str]:
    body = listing.get(group, {})
    return set(body.get("hosts", [])).union(*(_members(listing, c) for c in body.get("children", [])))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    _run(sys.executable, "-m", "provision", "plan", "-i", "hosts.ini", "--assume", "os=debian-12,gpu=T4:1",
         "--out", "run", cwd=tmp_path)  # fmt: skip
    return tmp_path / "run"


def test_the_users_groups_and_the_lock_group_hold_their_hosts(run_dir: Path) -> None:
    [group] = read_lock(run_dir / "provision.lock").groups
    listing = json.loads(_run(str(BIN / "ansible-inventory"), "-i", "inventory.yml", "--list", cwd=run_dir))
    assert _members(listing, group.name) == {"g1", "g2", "t1"}
    assert _members(listing, "gpu_servers") == {"g1", "g2", "t1"}
    assert _members(listing, "trainers") == {"g2", "t1"}
    assert listing["gpu_servers"]["children"] == ["trainers"]  # the hierarchy is kept
    # the connection variables are the inventory's, once per host
    hostvars = listing["_meta"]["hostvars"]
    assert hostvars["t1"]["ansible_host"] == "10.0.0.3" and hostvars["t1"]["ansible_user"] == "trainer"


def test_the_run_dirs_group_vars_still_apply_to_every_host(run_dir: Path) -> None:
    [group] = read_lock(run_dir / "provision.lock").groups
    written: dict[str, Any] = {}
    for name in ("all", group.name):
        written.update(yaml.safe_load((run_dir / "group_vars" / f"{name}.yml").read_text()))
    assert "nvidia_driver_enabled" in written
    for host in ("g1", "g2", "t1"):
        got = json.loads(_run(str(BIN / "ansible-inventory"), "-i", "inventory.yml", "--host", host, cwd=run_dir))
        assert {k: got.get(k) for k in written} == written, host


def test_site_yml_still_targets_the_lock_groups_and_a_user_group_limits_it(run_dir: Path) -> None:
    out = _run(str(BIN / "ansible-playbook"), "site.yml", "--list-hosts", cwd=run_dir)
    assert {"g1", "g2", "t1"} <= set(out.split())
    out = _run(str(BIN / "ansible-playbook"), "site.yml", "--list-hosts", "--limit", "trainers", cwd=run_dir)
    assert "hosts (2)" in out and "g1" not in out.split()


def _render(tree: dict[str, dict[str, list[str]]]) -> dict[str, Any]:
    lock = json.loads(GOLDEN_LOCK.read_text())  # one group: gpu-1.example and gpu-2.example
    hosts = {h: {} for h in lock["groups"][0]["hosts"]}
    files = render_run(Lock.from_json(lock), hosts, InstallSettings(), roles_path="/r", user_groups=tree).files
    doc: dict[str, Any] = yaml.safe_load(files["inventory.yml"])
    return doc["all"]["children"]


def test_hosts_outside_the_lock_are_left_out_and_so_are_groups_left_empty(tmp_path: Path) -> None:
    (tmp_path / "hosts.ini").write_text(
        "[fleet]\ngpu-1.example\ngpu-2.example\nother.example\n[fleet:children]\nspare\n"
        "[spare]\nother.example\n[b200]\ngpu-2.example\n"
    )
    tree = read_inventory(tmp_path / "hosts.ini").group_tree()
    children = _render(tree)
    assert children["fleet"] == {"hosts": {"gpu-1.example": None, "gpu-2.example": None}}  # no `spare`
    assert children["b200"] == {"hosts": {"gpu-2.example": None}}
    assert "spare" not in children and "ungrouped" not in children


def test_a_user_group_named_like_the_lock_group_is_refused() -> None:
    name = "a100_80gb_x8_debian_12"  # what render names the golden lock's group
    with pytest.raises(BadInput, match="name of a lock group"):
        _render({name: {"hosts": ["gpu-1.example"], "children": []}})
