"""`provision tune -i` against a real SSH test host (Debian 12, no GPU).

The host gets python3-venv from apt and the CPU torch wheel from the local wheelhouse in
/opt/provision/venv (the default venv, as `provision up` leaves a CPU-only host). The real
command then copies the tuning job over SSH (host keys verified), runs it there at the `test`
scale with --allow-cpu, reads its JSON and removes the copied file.
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

pytestmark = pytest.mark.slow  # installs torch on the host


def tune(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "provision", "tune", *args, "--allow-cpu", "--scale", "test", "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def host(testhosts: harness.HostSet, wheelhouse: Path) -> harness.HostSet:
    install_cpu_torch(testhosts, wheelhouse, first_only=True)
    return testhosts


def test_tune_inventory_on_a_cpu_host(host: harness.HostSet, tmp_path: Path) -> None:
    inv = tmp_path / "one.ini"  # the first host only: one host answers with one document
    names = [t.name for t in load_inventory(host.inventory)]
    lines = host.inventory.read_text().splitlines()
    inv.write_text("\n".join(ln for ln in lines if ln.split(" ")[0] not in names[1:]) + "\n")
    first = load_inventory(inv)[0]
    assert [t.name for t in load_inventory(inv)] == names[:1]
    proc = tune("-i", str(inv))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["host"] == first.name
    assert doc["ok"] is True and doc["device"] == "cpu"
    assert doc["batch_sizes"] and doc["workers"] and doc["recommendations"]
    transport = connect(first)
    try:
        left = transport.run("ls -d /tmp/provision-tune.* 2>/dev/null || true").stdout.split()
    finally:
        transport.close()
    assert left == []


def test_tune_inventory_without_torch_names_the_fix(host: harness.HostSet, tmp_path: Path) -> None:
    proc = tune("-i", str(host.inventory), "--python", "/usr/bin/python3")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    failed = doc["hosts"] if "hosts" in doc else [{"ok": False, "error": doc["error"]}]
    assert failed and all(not h["ok"] for h in failed)
    assert all("cannot import torch with /usr/bin/python3" in h["error"]["message"] for h in failed)
