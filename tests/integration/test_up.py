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
from typing import Any

import pytest

from provision.hosts.runlock import APPLY_MARK
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration.up_harness import run_up, up_args, up_env, up_until

pytestmark = pytest.mark.slow  # installs torch on every host


# What provision-health says on the test hosts, as installed by `up` (the health role): they have
# no GPU and the CPU stack's lock has no driver, so neither the driver, NVML nor the kernel log's
# Xids are asked for (the containers' kernel log is not theirs to read: with a driver locked that
# would be the honest `unknown`, exit 2); the venv and the last verify are checked for real.
HEALTHY = 0


def provision_health(hostset: harness.HostSet, name: str) -> tuple[int, dict[str, Any]]:
    """``provision-health --json`` on a host over SSH (as root): its exit status and report."""
    ran = subprocess.run(
        ["ssh", "-F", str(hostset.ssh_config), name, "provision-health --json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.stdout.strip(), f"{name}: provision-health printed nothing: rc={ran.returncode} {ran.stderr}"
    return ran.returncode, json.loads(ran.stdout)


def provision_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", *args], cwd=cwd, capture_output=True, text=True, env=up_env()
    )


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

    # the broken host repaired: it is applied; of the others, converged (verified with this lock),
    # the one whose provision-health spec was removed is applied again (the probe sees it gone),
    # the rest are converged and only verified
    lost = testhosts.hosts[1]
    rh.ssh(testhosts, lost, "rm /etc/provision/health.json")
    rc, doc = run_up(tmp_path, up_args(testhosts, config))
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert rc == 0 and doc["ok"] is True, doc
    assert hosts[broken.name]["changed"] > 0 and hosts[lost.name]["changed"] > 0
    assert all(hosts[h.name]["changed"] == 0 for h in testhosts.hosts[2:])
    details = json.loads((tmp_path / ".provision/runs" / doc["run"] / "report.json").read_text())["details"]
    assert [d["host"] for d in details if d["converged"]] == [h.name for h in testhosts.hosts[2:]]
    assert rh.ssh(testhosts, lost, "test -s /etc/provision/health.json && echo back").strip() == "back"

    # --force re-applies a converged host and Ansible changes nothing (one host: every converged
    # apply of the suite's role tests shows the same, and each costs the two cores about 10 s).
    # Under --limit the host's group keeps its name (planning._group_label), so its health spec
    # is the same file: a name derived from the hosts planned beside it once changed it here.
    forced = testhosts.hosts[2]
    rc, doc = run_up(tmp_path, up_args(testhosts, config, "--force", "--limit", forced.name))
    assert rc == 0 and [(h["host"], h["changed"], h["verdict"]) for h in doc["hosts"]] == [(forced.name, 0, "pass")]
    forced_detail = json.loads((tmp_path / ".provision/runs" / doc["run"] / "report.json").read_text())["details"]
    assert [d["applied"] for d in forced_detail] == [True], forced_detail

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

    # provision-health, which up installed with each host's spec, answers from the lock that
    # the state DB holds for the host, and from the verdict up wrote after its job
    for h in listed:
        rc, health = provision_health(testhosts, h["host"])
        assert health["lock_hash"] == h["lock_hash"], health
        assert health["facts"]["verify"]["verdict"] == "pass", health
        assert (rc, health["status"], health["problems"], health["unknown"]) == (HEALTHY, "healthy", [], []), health
    # drift: a different torch in one host's venv is named by status --check-drift
    moved = testhosts.hosts[1]
    rh.ssh(testhosts, moved, "/opt/provision/venv/bin/pip uninstall -q -y torch")
    rc, health = provision_health(testhosts, moved.name)
    assert rc == 1 and health["status"] == "unhealthy", health
    # the line names it with the closure's pin (2.13.0+cpu) and nothing found
    assert (
        [p for p in health["problems"] if p.startswith("drift torch: locked 2.13.0")]
        == [p for p in health["problems"] if p.endswith(", found none")]
        != []
    ), health
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

    # `provision health` asks every host at once over SSH: exit 1, the drifted host named, the
    # others healthy, each answer in the state DB and in `status` beside the last verify
    fleet = provision_cli(tmp_path, "health", "--json", "-i", str(testhosts.inventory), "-F", str(testhosts.ssh_config))
    assert fleet.returncode == 1, fleet.stdout + fleet.stderr
    answers = {h["host"]: h for h in json.loads(fleet.stdout)["hosts"]}
    assert answers[moved.name]["status"] == "unhealthy" and answers[moved.name]["problems"] == health["problems"]
    assert all(answers[h.name]["status"] == "healthy" for h in testhosts.hosts if h is not moved), answers
    shown = {h["host"]: h["health"] for h in json.loads(provision_cli(tmp_path, "status", "--json").stdout)["hosts"]}
    assert shown[moved.name]["status"] == "unhealthy" and shown[moved.name]["problems"] == health["problems"]
    assert all(shown[h.name]["status"] == "healthy" for h in testhosts.hosts if h is not moved), shown


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
