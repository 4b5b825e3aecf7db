"""`provision verify -i` against two real SSH test hosts (Debian 12, no GPU).

Each host gets python3-venv from apt and the CPU torch wheel from the local wheelhouse in
/opt/provision/venv (the default venv), the way `provision up` leaves a CPU-only host. Then the
real command copies the smoke job over SSH, runs it on every host at once, and collects the
reports; the multi-host check runs torchrun on every host with a c10d rendezvous and gloo.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from provision.hosts.inventory import load_inventory
from provision.hosts.ssh import connect
from tests.hosts import harness
from tests.hosts.venv import install_cpu_torch

pytestmark = pytest.mark.slow  # installs torch on every host


@pytest.fixture(scope="module")
def hosts(testhosts: harness.HostSet, wheelhouse: Path) -> harness.HostSet:
    install_cpu_torch(testhosts, wheelhouse)
    return testhosts


def verify(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", "verify", *args], capture_output=True, text=True, timeout=timeout
    )


def leftovers(hostset: harness.HostSet) -> list[str]:
    found = []
    for target in load_inventory(hostset.inventory):
        transport = connect(target)
        try:
            found += transport.run("ls -d /tmp/provision-verify.* 2>/dev/null || true").stdout.split()
        finally:
            transport.close()
    return found


def test_verify_inventory_allow_cpu_passes_on_both_hosts(hosts: harness.HostSet) -> None:
    proc = verify("-i", str(hosts.inventory), "--allow-cpu", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    fleet = json.loads(proc.stdout)
    assert fleet["ok"] is True
    assert [h["host"] for h in fleet["hosts"]] == [h.name for h in hosts.hosts]
    for report in fleet["hosts"]:
        assert report["schema"] == "provision.verify/1" and report["verdict"] == "pass"
        assert report["versions"]["torch"] == harness.TORCH_CPU.split("==")[1] + "+cpu"
        assert report["versions"]["python"].startswith("3.11")  # the hosts' Python, not ours
        assert report["training"]["device"] == "cpu"
        assert report["training"]["loss_last"] < report["training"]["loss_bound"]
    assert leftovers(hosts) == []


def test_without_allow_cpu_both_hosts_are_no_gpu_in_the_table(hosts: harness.HostSet) -> None:
    proc = verify("-i", str(hosts.inventory))
    assert proc.returncode == 1
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if "│" in line}
    assert set(rows) == {h.name for h in hosts.hosts}
    assert all("no-gpu" in row for row in rows.values())
    assert all(f"{h.name}: no usable GPU" in proc.stdout for h in hosts.hosts)


def test_drift_against_a_lock_fails_each_host_naming_both_versions(hosts: harness.HostSet, tmp_path: Path) -> None:
    lock = tmp_path / "provision.lock"
    stack = {
        "driver": None,
        "frameworks": {"torch": {"version": "2.12.0+cpu", "variant": "cpu"}},
        "python": "3.11",
    }
    lock.write_text(
        json.dumps(
            {
                "schema": "provision.lock/2",
                "knowledge": {},
                "groups": [{"name": "cpu", "hosts": [h.name for h in hosts.hosts], "host": {}, "stack": stack}],
            }
        )
    )
    proc = verify("-i", str(hosts.inventory), "--allow-cpu", "--lock", str(lock), "--json")
    assert proc.returncode == 1
    for report in json.loads(proc.stdout)["hosts"]:
        failing = [c for c in report["checks"] if not c["ok"]]
        assert [c["message"] for c in failing] == [
            f"drift: torch is {harness.TORCH_CPU.split('==')[1]}+cpu on this host, expected 2.12.0+cpu"
        ]


def test_a_venv_without_python_is_bad_input_before_the_job_runs(hosts: harness.HostSet) -> None:
    proc = verify("-i", str(hosts.inventory), "--venv", "/opt/nothing-here")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: no Python at /opt/nothing-here/bin/python on ")
    assert all(h.name in lines[0] for h in hosts.hosts)
    assert leftovers(hosts) == []


def test_an_unreachable_host_fails_alone(hosts: harness.HostSet, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    # an address on the test bridge where no host answers
    inventory.write_text(
        hosts.inventory.read_text().replace("[testhosts]\n", f"[testhosts]\nghost ansible_host={hosts.net}.250\n")
    )
    proc = verify("-i", str(inventory), "--allow-cpu", "--json", "--connect-timeout", "3")
    assert proc.returncode == 1
    by_host = {r["host"]: r for r in json.loads(proc.stdout)["hosts"]}
    assert by_host["ghost"]["verdict"] == "fail" and by_host["ghost"]["error"]["code"] == "unreachable"
    assert all(by_host[h.name]["verdict"] == "pass" for h in hosts.hosts)
    assert "error: cannot reach ghost" in proc.stderr


def test_multi_host_ddp_over_gloo_across_every_host(hosts: harness.HostSet) -> None:
    proc = verify("-i", str(hosts.inventory), "--allow-cpu", "--multi-host", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    fleet = json.loads(proc.stdout)
    multi = fleet["multihost"]
    assert multi["verdict"] == "pass"
    dist = multi["multihost"]
    # one rank per host, whatever the session's number of test hosts (PROVISION_TESTHOSTS)
    assert dist["backend"] == "gloo" and dist["world_size"] == len(hosts.hosts)
    assert dist["hosts"] == sorted(h.name for h in hosts.hosts)  # one rank on each host
    assert dist["allreduce_ok"] and dist["ddp_in_sync"] and dist["ddp_loss_last"] < dist["ddp_loss_first"]
    assert {c["name"] for c in multi["checks"] if c["ok"]} >= {"multihost_allreduce", "multihost_ddp"}
    assert leftovers(hosts) == []
