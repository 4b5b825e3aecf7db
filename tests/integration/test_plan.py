"""`provision plan -i INVENTORY` probes the SSH test hosts (real SSH, verified host keys) and writes a
run dir for what they are; nothing on them changes. (The hosts are the session's: what earlier
tests installed there is what the probe must report.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.hosts import harness
from tests.integration import roles_harness as rh


def test_plan_probes_inventory_hosts_and_changes_nothing(testhosts: harness.HostSet, tmp_path: Path) -> None:
    before = {h.name: rh.host_snapshot(testhosts, h) for h in testhosts.hosts}
    # the frameworks alone: the test machine reaches no PyTorch index (the wheel closure of a lock is
    # test_up_lock's, from the hosts' wheelhouse)
    (tmp_path / "p.yaml").write_text("stack: {frameworks: ['torch==2.13.0+cpu']}\ninstall: {lock_closure: never}\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "plan",
            "-i",
            str(testhosts.inventory),
            "-F",
            str(testhosts.ssh_config),
            "-c",
            "p.yaml",
            "--out",
            "run",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert set(hosts) == {h.name for h in testhosts.hosts}
    for host in testhosts.hosts:
        h = hosts[host.name]
        assert h["probed"] is True and h["present"]["os"] == "debian-12" and h["reboot"] == "no"
        torch = rh.ssh(
            testhosts, host, "/opt/provision/venv/bin/python -c 'import torch; print(torch.__version__)'", check=False
        ).strip()
        assert h["present"]["frameworks"].get("torch") == (torch or None)
        assert h["changes"] == ([] if torch == "2.13.0+cpu" else ["torch 2.13.0 (cpu)"])
    [group] = doc["groups"]  # same facts, same stack: one group
    assert group["name"] == "cpu_debian_12" and group["stack"]["driver"] is None
    inventory = (tmp_path / "run" / "inventory.yml").read_text()
    assert all(f"ansible_host: {h.address}" in inventory for h in testhosts.hosts)
    assert {h.name: rh.host_snapshot(testhosts, h) for h in testhosts.hosts} == before
