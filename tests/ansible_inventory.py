"""What the real `ansible-inventory --list` (the venv's ansible-core) reads from an inventory, and
the check that provision's own loader (provision/hosts/inventory.py) reads the same: hosts,
groups, addresses, users, ports and every var."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from provision.hosts.inventory import HostTarget

BIN = Path(sys.executable).parent


def ansible_inventory(inventory: Path, workdir: Path) -> dict[str, Any]:
    """``ansible-inventory -i INVENTORY --list`` run in ``workdir`` (no playbook's group_vars
    there), with Ansible's defaults whatever the machine's ansible.cfg says."""
    cfg = workdir / "empty-ansible.cfg"
    cfg.write_text("[defaults]\n")
    r = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"],
        capture_output=True,
        text=True,
        cwd=workdir,
        env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false", "ANSIBLE_CONFIG": str(cfg)},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def ansible_groups(listing: dict[str, Any]) -> dict[str, set[str]]:
    """host -> every group it is in (through children), without `all`, as HostTarget.groups."""

    def hosts(group: str) -> set[str]:
        body = listing.get(group, {})
        return set(body.get("hosts", [])).union(*(hosts(c) for c in body.get("children", [])))

    out: dict[str, set[str]] = {}
    for group in listing:
        if group in ("_meta", "all"):
            continue
        for host in hosts(group):
            out.setdefault(host, set()).add(group)
    return out


def same_as_ansible(inventory: Path, targets: list[HostTarget], workdir: Path) -> dict[str, Any]:
    """Assert that ``targets`` (provision's reading of ``inventory``) is Ansible's; Ansible's listing."""
    listing = ansible_inventory(inventory, workdir)
    hostvars = listing["_meta"]["hostvars"]
    assert sorted(t.name for t in targets) == sorted(hostvars)
    groups = ansible_groups(listing)
    for t in targets:
        want = hostvars[t.name]
        assert dict(t.vars) == want, t.name
        assert t.address == want.get("ansible_host", t.name)
        assert t.user == want.get("ansible_user")
        assert t.port == want.get("ansible_port")
        assert set(t.groups) == groups[t.name], t.name
    return listing
