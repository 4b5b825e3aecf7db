"""Inventories as Ansible users keep them: a folder of inventory files, group_vars/ and host_vars/.

What provision reads is compared with what the real `ansible-inventory --list` (the venv's
ansible-core) reads from the same files: hosts, groups, addresses, users, ports and every var.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.hosts.inventory import load_inventory
from tests.ansible_inventory import same_as_ansible

BIN = Path(sys.executable).parent


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# Several files (INI, YAML, a subfolder), files Ansible skips, group_vars as files and as a
# folder, host_vars with and without an extension; the values are chosen so that each level of
# Ansible's precedence decides at least one of them; `true` in INI is no Python literal, and
# Ansible keeps it as the string (`True` is the bool).
FOLDER = {
    "01-hosts.ini": (
        "[gpu_servers]\ng1 ansible_host=10.0.0.1\ng2 ansible_host=10.0.0.2 ansible_port=2201\n\n"
        "[trainers]\ng2\nt1\n\n[gpu_servers:children]\ntrainers\n\n"
        "[gpu_servers:vars]\nansible_user=ubuntu\nsite_var=from_ini_group\nflag_word=true\nflag_literal=True\n"
    ),
    "02-more.yml": (
        "all:\n  hosts:\n    lone:\n      ansible_host: 10.0.0.9\n  children:\n    trainers:\n"
        "      hosts:\n        t1:\n          ansible_host: 10.0.0.3\n"
        "      vars:\n        ansible_user: trainer\n        trainer_var: yes\n"
    ),
    "sub/03-extra.ini": "[extra]\nx1 ansible_host=10.0.0.7\n",
    # no extension: YAML (after a comment, so only a YAML parse tells), as Ansible's yaml plugin takes it
    "sub/04-lab": "# the lab\nall:\n  children:\n    lab:\n      hosts:\n        l1:\n          ansible_host: 10.0.0.11\n",
    # skipped by Ansible's defaults: they would not parse, or would add hosts
    "README.md": "this is [not an inventory\n",
    "notes.txt": "zz1 ansible_host=10.9.9.1\n",
    "hosts.ini~": "zz2 ansible_host=10.9.9.2\n",
    "old.orig": "zz3\n",
    "ansible.cfg": "[defaults]\n",
    "site.retry": "zz4\n",
    ".hidden": "zz5\n",
    "group_vars/all.yml": "ansible_port: 2222\neveryone: 1\n",
    "group_vars/gpu_servers.yml": "ansible_user: gpuadmin\n",
    "group_vars/trainers/a.yml": "ansible_port: 2300\n",
    "group_vars/trainers/b.yaml": "extra: x\nansible_port: 2301\n",
    "group_vars/trainers/c.txt": "ignored: true\n",
    "group_vars/extra.json": '{"ansible_user": "json-user"}',
    "host_vars/g1.yml": "ansible_user: alice\n",
    "host_vars/t1": "ansible_port: 2400\n",
    "host_vars/x1/main.yml": "ansible_host: 10.0.0.70\n",
}


def test_a_folder_inventory_reads_as_ansible_reads_it(tmp_path: Path) -> None:
    inv = tmp_path / "project" / "inventory"
    _write(inv, FOLDER)
    targets = load_inventory(inv)
    same_as_ansible(inv, targets, inv.parent.parent)
    by_name = {t.name: t for t in targets}
    # the levels that decided, spelt out (the comparison above is the proof)
    assert by_name["g1"].user == "alice"  # host_vars over everything
    assert by_name["g2"].port == 2201  # the inventory's host var over group_vars
    assert by_name["t1"].user == "gpuadmin"  # a parent's group_vars file over a child's inventory var
    assert by_name["t1"].port == 2400  # host_vars without an extension
    assert by_name["x1"].address == "10.0.0.70" and by_name["x1"].user == "json-user"
    assert by_name["lone"].port == 2222 and by_name["lone"].groups == ("ungrouped",)
    assert [t.name for t in targets][:3] == ["g1", "g2", "t1"]  # the files' order, as Ansible parses them


def test_a_file_inventory_reads_the_group_vars_and_host_vars_beside_it(tmp_path: Path) -> None:
    inv = tmp_path / "project" / "inventory"
    _write(
        inv,
        {
            "hosts.yml": "all:\n  children:\n    gpu:\n      hosts:\n        a1: {ansible_host: 10.1.0.1}\n"
            "        a2:\n      vars: {ansible_user: ops}\n",
            "group_vars/all/connection.yml": "ansible_port: 2022\n",
            "group_vars/all/more.yml": "ansible_port: 2023\n",
            "group_vars/gpu.yaml": "ansible_user: gpu-ops\n",
            "host_vars/a2.json": '{"ansible_host": "10.1.0.2", "ansible_user": "root"}',
        },
    )
    targets = load_inventory(inv / "hosts.yml")
    same_as_ansible(inv / "hosts.yml", targets, inv.parent.parent)
    assert [(t.name, t.address, t.user, t.port) for t in targets] == [
        ("a1", "10.1.0.1", "gpu-ops", 2023),
        ("a2", "10.1.0.2", "root", 2023),
    ]


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"README.md": "x\n"}, "holds no inventory file"),
        ({"aws_ec2.yml": "plugin: amazon.aws.aws_ec2\n"}, "runs no inventory plugin"),
        ({"h.ini": "a1\n", "group_vars/all.yml": "$ANSIBLE_VAULT;1.1;AES256\n6162\n"}, "vault-encrypted"),
        ({"h.ini": "a1\n", "host_vars/a1.yml": "pw: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n"}, "vault"),
        ({"h.ini": "a1\n", "group_vars/all.yml": "- a\n- b\n"}, "not a mapping"),
        ({"h.ini": "a1\n", "group_vars/all.yml": "a: [\n"}, "not valid YAML"),
        ({"h.ini": "a1\n", "group_vars/all.yml": "ansible_port: many\n"}, "invalid port `many`"),
        ({"h.ini": "[bad\n"}, "h.ini"),  # the file that does not parse is named
    ],
)
def test_a_folder_that_cannot_be_read_is_one_bad_input(tmp_path: Path, files: dict[str, str], words: str) -> None:
    inv = tmp_path / "inventory"
    inv.mkdir()
    _write(inv, files)
    with pytest.raises(BadInput) as err:
        load_inventory(inv)
    assert words in str(err.value.message)


def test_plan_takes_a_folder_inventory(tmp_path: Path) -> None:
    """The folder through a real command (-i DIR), not only load_inventory: no IsADirectoryError."""
    inv = tmp_path / "inventory"
    _write(inv, {k: v for k, v in FOLDER.items() if not k.startswith(("README", "notes"))})
    r = subprocess.run(
        [sys.executable, "-m", "provision", "plan", "-i", "inventory", "--assume", "os=debian-12,gpu=T4:1", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(h["host"] for h in json.loads(r.stdout)["hosts"]) == ["g1", "g2", "l1", "lone", "t1", "x1"]
