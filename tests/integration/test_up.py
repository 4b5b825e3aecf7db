"""`provision up -i` end to end on the SSH test hosts (Debian 12, no GPU) with the CPU torch stack.

Real parts throughout: the probe over SSH, the resolver, the rendered run dir, ansible-runner
applying the roles (python3-venv from apt through the test proxy, `torch==2.13.0+cpu` from the
local wheelhouse), the smoke job over SSH with `verify.allow_cpu`, and the SQLite state.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from provision.hosts.runlock import APPLY_MARK
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration.up_harness import run_up, up_args, up_env, up_until

pytestmark = pytest.mark.slow  # installs torch on every host


def test_fleet_one_broken_host_fails_alone_then_everything_converges(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    config = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)
    broken = testhosts.hosts[0]
    # a file where the venv's parent folder should be: the venv cannot be made on this host
    rh.ssh(testhosts, broken, "rm -rf /opt/provision && touch /opt/provision")
    try:
        rc, doc = run_up(tmp_path, up_args(testhosts, config))
    finally:
        rh.ssh(testhosts, broken, "rm -f /opt/provision")
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert rc == 1 and doc["ok"] is False
    assert set(hosts) == {h.name for h in testhosts.hosts}
    assert set(hosts[broken.name]) == {"host", "ok", "changed", "failed_task", "reboots", "verdict", "duration_s"}
    assert hosts[broken.name]["verdict"] == "fail" and hosts[broken.name]["failed_task"]
    for h in testhosts.hosts[1:]:
        assert hosts[h.name]["verdict"] == "pass" and hosts[h.name]["changed"] > 0, hosts[h.name]
    run_dir = tmp_path / ".provision" / "runs" / doc["run"]
    for name in ("provision.lock", "events.jsonl", "report.json", "report.html", "ansible/site.yml"):
        assert (run_dir / name).is_file(), name
    report = json.loads((run_dir / "report.json").read_text())
    detail = {d["host"]: d for d in report["details"]}
    assert "Not a directory" in detail[broken.name]["message"], detail[broken.name]
    assert (run_dir / f"verify-{testhosts.hosts[1].name}.json").is_file()

    # the broken host repaired: it is applied, the three others are converged and only verified
    rc, doc = run_up(tmp_path, up_args(testhosts, config))
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert rc == 0 and doc["ok"] is True, doc
    assert hosts[broken.name]["changed"] > 0
    assert all(hosts[h.name]["changed"] == 0 for h in testhosts.hosts[1:])
    details = json.loads((tmp_path / ".provision/runs" / doc["run"] / "report.json").read_text())["details"]
    assert [d["host"] for d in details if d["converged"]] == [h.name for h in testhosts.hosts[1:]]

    # a third run changes nothing anywhere; --force re-applies and Ansible still changes nothing
    rc, doc = run_up(tmp_path, up_args(testhosts, config, "--force"))
    assert rc == 0 and all(h["changed"] == 0 and h["verdict"] == "pass" for h in doc["hosts"]), doc

    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "status",
            "--json",
            "--check-drift",
            "-i",
            str(testhosts.inventory),
            "-F",
            str(testhosts.ssh_config),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=up_env(),
    )
    assert status.returncode == 0, status.stdout + status.stderr
    listed = json.loads(status.stdout)["hosts"]
    assert {h["host"] for h in listed} == {h.name for h in testhosts.hosts}
    assert all(h["verdict"] == "pass" and h["converged"] and h["drift"] == [] for h in listed)

    # drift: a different torch in one host's venv is named by status --check-drift
    moved = testhosts.hosts[1]
    rh.ssh(testhosts, moved, "/opt/provision/venv/bin/pip uninstall -q -y torch")
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "status",
            "--json",
            "--check-drift",
            "-i",
            str(testhosts.inventory),
            "-F",
            str(testhosts.ssh_config),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=up_env(),
    )
    assert status.returncode == 1
    drifted = {h["host"]: h for h in json.loads(status.stdout)["hosts"]}[moved.name]
    assert [(d["item"], d["observed"]) for d in drifted["drift"]] == [("torch", None)], drifted


def test_a_run_killed_half_way_completes_on_the_next_run(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    config = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)
    host = testhosts.hosts[-1]
    rh.ssh(testhosts, host, "rm -rf /opt/provision")
    args = up_args(testhosts, config, "--limit", host.name)
    args.remove("--json")
    # the controller and ansible with it, mid-role
    proc, seen = up_until(tmp_path, args, "[frameworks]", signal.SIGKILL, 900)
    proc.communicate()
    assert any("[frameworks]" in line for line in seen), "".join(seen[-20:])

    rc, doc = run_up(tmp_path, up_args(testhosts, config, "--limit", host.name))
    assert rc == 0, doc
    [only] = doc["hosts"]
    assert only["host"] == host.name and only["verdict"] == "pass"
    # the killed run's Ansible tasks (sshd sends no SIGHUP without a terminal) were waited for by
    # the host lock, never raced: none of either run's marked processes is left
    marked = rh.ssh(testhosts, host, f"grep -l {APPLY_MARK}= /proc/[0-9]*/environ 2>/dev/null || true")
    assert marked.strip() == "", marked
