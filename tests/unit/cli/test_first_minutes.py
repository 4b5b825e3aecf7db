"""The first five minutes (issue 28), through the real CLI on this machine: `up --local --check`
where torch is not importable says what it did not verify (verdict not-verified, exit 0), and
`plan --local` on a machine without an NVIDIA GPU locks torch's CPU build and no driver.

Both probe this machine for real; a machine with an NVIDIA GPU skips the no-GPU expectations.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import provision

# this machine's run lock: one such test at a time across xdist workers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("this_machine")

# the lock without a wheel closure: download.pytorch.org (where the +cpu wheels are) is not
# reachable from the test machines, and the closure is tests/integration's business
NO_CLOSURE = "install: {lock_closure: never}\n"


def _has_nvidia_gpu() -> bool:
    return Path("/proc/driver/nvidia/gpus").is_dir() or shutil.which("nvidia-smi") is not None


@pytest.mark.slow
def test_check_mode_without_torch_is_not_verified_and_exits_0(tmp_path: Path) -> None:
    # the locked venv exists but holds no torch, as on a fresh `pipx install` before any `up`:
    # check mode installs nothing, so there is nothing to verify, and that is no failed host
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # with pip: the role checks it
    (tmp_path / "p.yaml").write_text(f"install: {{venv: '{venv}', lock_closure: never}}\n")
    r = provision("up", "--local", "--check", "--yes", "-v", "-c", "p.yaml", "--json", cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "TASK [" in r.stderr and "PLAY RECAP" in r.stderr  # -v: what ansible-playbook printed, on stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True
    [host] = doc["hosts"]
    assert host["verdict"] == "not-verified" and host["ok"] is True
    [run] = list((tmp_path / ".provision" / "runs").iterdir())
    report = json.loads((run / "report.json").read_text())
    [detail] = report["details"]
    # the reason is named: which Python could not import torch, and what would install it
    assert "torch is not importable" in detail["message"] and str(venv) in detail["message"]
    assert "without --check installs" in detail["message"]
    html = (run / "report.html").read_text()
    assert "not verified" in html and "every host passed" not in html
    # the job never ran (nothing importable), so nothing says it ran on the CPU
    assert "the smoke job ran on the CPU" not in html + r.stdout


def test_plan_local_without_a_gpu_locks_the_cpu_build_and_no_driver(tmp_path: Path) -> None:
    if _has_nvidia_gpu():
        pytest.skip("this machine has an NVIDIA GPU: the default is the CUDA build there")
    (tmp_path / "p.yaml").write_text(NO_CLOSURE)
    r = provision("plan", "--local", "-c", "p.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lock = json.loads((tmp_path / "provision.lock").read_text())
    [group] = lock["groups"]
    stack = group["stack"]
    assert stack["driver"] is None
    torch = stack["frameworks"]["torch"]
    assert torch["variant"] == "cpu" and torch["index_url"].endswith("/whl/cpu") and torch["cuda"] is None
    reasons = " ".join(group["reasons"])
    assert "the CPU build: torch" in reasons and "no NVIDIA GPU on this host" in reasons


def test_a_variant_asked_for_is_kept_on_a_host_without_a_gpu(tmp_path: Path) -> None:
    if _has_nvidia_gpu():
        pytest.skip("this machine has an NVIDIA GPU")
    (tmp_path / "p.yaml").write_text(NO_CLOSURE)
    r = provision("plan", "--local", "-c", "p.yaml", "--torch-variant", "cu128", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [group] = json.loads((tmp_path / "provision.lock").read_text())["groups"]
    assert group["stack"]["frameworks"]["torch"]["variant"] == "cu128"
    assert "the CPU build" not in " ".join(group["reasons"])


# --- reviewing a plan (issue 28, item 4) ------------------------------------------------------

H100 = "os=ubuntu-22.04,gpu=H100-SXM:8"


def _fleet(tmp_path: Path, n: int = 128) -> Path:
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpu]\n" + "".join(f"node{i:03d}\n" for i in range(1, n + 1)))
    return inv


def test_replanning_prints_the_change_against_the_lock_it_replaces(tmp_path: Path) -> None:
    _fleet(tmp_path)
    first = provision("plan", "-i", "inv.ini", "--assume", H100, "--driver", "570", cwd=tmp_path, offline=True)
    assert first.returncode == 0, first.stderr
    assert "against the previous" not in first.stdout  # there was no lock to compare with
    old = json.loads((tmp_path / "provision.lock").read_text())["groups"][0]["stack"]
    r = provision("plan", "-i", "inv.ini", "--assume", H100, cwd=tmp_path, offline=True)
    assert r.returncode == 0, r.stderr
    new = json.loads((tmp_path / "provision.lock").read_text())["groups"][0]["stack"]
    assert old["driver"]["version"] != new["driver"]["version"]
    # one block for all 128 alike hosts, the change component by component
    assert "128 hosts: node[001-128]  (group h100_sxm_x8_ubuntu_22_04)" in r.stdout
    assert "  node[001-128]:\n" in r.stdout
    assert f"    driver {old['driver']['version']} -> {new['driver']['version']}\n" in r.stdout
    assert f"fabric manager {old['fabric_manager']['version']} -> {new['fabric_manager']['version']}" in r.stdout
    assert len(r.stdout.splitlines()) < 40  # was 795 lines for 128 hosts
    again = provision("plan", "-i", "inv.ini", "--assume", H100, "--json", cwd=tmp_path, offline=True)
    assert json.loads(again.stdout)["lock_changes"] == []  # the same plan: nothing changed


def test_added_and_removed_components_and_hosts(tmp_path: Path) -> None:
    _fleet(tmp_path, 3)
    args = ("plan", "-i", "inv.ini", "--assume", H100, "--json")
    assert (
        provision(*args, "--cudnn", "9.10.2.21", "--cuda-toolkit", "12.8", cwd=tmp_path, offline=True).returncode == 0
    )
    _fleet(tmp_path, 4)
    r = provision(*args, cwd=tmp_path, offline=True)
    assert r.returncode == 0, r.stderr
    changes = json.loads(r.stdout)["lock_changes"]
    by_hosts = {tuple(c["hosts"]): c["changes"] for c in changes}
    assert "- cudnn" in by_hosts[("node001", "node002", "node003")]
    assert "- cuda-toolkit" in by_hosts[("node001", "node002", "node003")]
    assert by_hosts[("node004",)] == ["+ host (not in the previous lock)"]


def test_the_old_lock_spelling_still_works_with_a_note(tmp_path: Path) -> None:
    r = provision("plan", "--assume", H100 + ",name=g1", "--lock", "x.lock", cwd=tmp_path, offline=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "x.lock").is_file()
    assert "--lock is deprecated here; use --lock-out x.lock" in r.stderr
    r = provision("plan", "--assume", H100 + ",name=g1", "--lock-out", "y.lock", cwd=tmp_path, offline=True)
    assert (tmp_path / "y.lock").is_file() and "deprecated" not in r.stderr
    assert "provision up (the same hosts) --from-lock y.lock" in r.stdout


def test_host_ranges_collapse_runs_only() -> None:
    from provision.fleet.review import host_ranges

    assert host_ranges(["node001", "node002", "node003", "node005", "gpu-a", "n9", "n10"]) == (
        "node[001-003], node005, gpu-a, n9, n10"
    )
    assert host_ranges(["a1"]) == "a1"


def test_resolve_never_prints_cudnn_none(tmp_path: Path) -> None:
    r = provision("resolve", "--gpu", "L4", "--driver", "580", cwd=tmp_path, offline=True)
    assert r.returncode == 0, r.stderr
    assert "cuDNN None" not in r.stdout and "CUDA" in r.stdout


def test_short_flags_mean_the_long_ones(tmp_path: Path) -> None:
    # -l is --limit: a pattern that matches no host is refused before any contact, naming it
    r = provision("up", "--local", "-y", "-C", "-l", "nothere", cwd=tmp_path)
    assert r.returncode == 2 and "matches no host" in r.stderr, r.stderr
    helps = provision("up", "--help", cwd=tmp_path).stdout
    assert "-y, --yes" in helps and "-l, --limit" in helps and "-C, --check" in helps
    assert "-y, --yes" in provision("cloud", "down", "--help", cwd=tmp_path).stdout
    assert "--dry-run" in provision("cloud", "down", "--help", cwd=tmp_path).stdout
