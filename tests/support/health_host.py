"""A STAND-IN host for provision-health (provision/remote/health/), named as such:

- a stand-in proc tree (``driver/nvidia/version`` in the format both kernel modules print,
  ``sys/kernel/random/boot_id``);
- stand-in ``dpkg-query`` and ``systemctl`` scripts that answer as the real tools do;
- a stand-in kernel log in /dev/kmsg's record format (``prio,seq,usec,flags;message``);
- the stand-in NVML library (tests/fakenvml, compiled by the ``nvml_dir`` fixture);
- a venv holding REAL distributions: iniconfig and distro copied, files and dist-info, from this
  project's own .venv (pip installed them).

Shared by tests/unit/remote/test_health_check.py and test_health_exporters.py through the
fixtures of tests/unit/remote/conftest.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from provision.remote.health import check
from tests import fakenvml

REPO = Path(__file__).resolve().parents[2]
SITE = Path(sysconfig.get_paths()["purelib"])
DRIVER = "595.58.03"
# The open kernel module's line (the proprietary module prints "... x86_64 Kernel Module  595.58.03 ...").
PROC_VERSION = (
    f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}  Release Build  (dvs-builder@U22)  Wed Mar  4\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)


def copy_dist(name: str, site: Path) -> str:
    """Copy an installed distribution (its RECORD's files under site-packages) from this venv."""
    info = next(SITE.glob(f"{name}-*.dist-info"))
    for line in (info / "RECORD").read_text().splitlines():
        path = line.split(",")[0]
        if path:  # ../../../bin/distro: the console script, in the venv's bin/
            (site / path).resolve().parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(SITE / path, (site / path).resolve())
    return copy_version(name)


def copy_version(name: str) -> str:
    return next(SITE.glob(f"{name}-*.dist-info")).name.removesuffix(".dist-info").split("-")[1]


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def make_host(tmp_path: Path, nvml_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A healthy stand-in host and the spec that describes it (the ``host`` fixture of
    tests/unit/remote/conftest.py)."""
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text(PROC_VERSION)
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text("6a1f0c9e-0000-4000-8000-000000000001\n")
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    versions = {n: copy_dist(n, site) for n in ("iniconfig", "distro")}
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.2\n")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,100,-;Linux version 6.1.0\n6,2,200,-;nvidia: loading out-of-tree module\n")
    for knob in ("GPUS", "PCI", "ECC_UNCORRECTED", "RETIRED_PENDING", "ROWREMAP", "PERSISTENCE", "FAIL"):
        monkeypatch.delenv(f"FAKE_NVML_{knob}", raising=False)
    monkeypatch.setenv("FAKE_NVML_GPUS", "NVIDIA H100 80GB HBM3:80;NVIDIA H100 80GB HBM3:80")
    monkeypatch.setenv("FAKE_NVML_PCI", "00000000:3B:00.0;00000000:5C:00.0")
    roots = check.Roots(
        proc=proc,
        kmsg=kmsg,
        dpkg_query=script(tmp_path / "dpkg-query", f'[ "$3" = nvidia-open ] && echo "ii |{DRIVER}-1" || exit 1\n'),
        systemctl=script(tmp_path / "systemctl", 'echo "${FM_STATE:-active}"; [ "${FM_STATE:-active}" = active ]\n'),
        nvml_library=str(nvml_dir / fakenvml.LIBRARY),
        state=tmp_path / "state" / "health-state.json",
        last_verify=tmp_path / "state" / "last-verify.json",
    )
    spec = {
        "schema": check.SCHEMA,
        "lock_hash": "0123456789abcdef",
        "expected": {"driver": DRIVER, "python": "3.11"},
        "driver": {"manager": "apt", "package": "nvidia-open"},
        "gpus": {"count": 2, "models": ["NVIDIA H100 80GB HBM3"] * 2, "nvswitches": 4},
        "fabric_manager": "nvidia-fabricmanager.service",
        "persistence": True,
        "venv": str(tmp_path / "venv"),
        "python_packages": [{"name": n, "version": v, "sha256": "0" * 64} for n, v in versions.items()],
        "verify": {"verdict": "pass", "at": "2026-12-01T10:00:00+00:00", "max_age_s": None},
    }
    return {"roots": roots, "spec": spec, "site": site, "kmsg": kmsg, "proc": proc, "tmp": tmp_path}


def cli(host: dict[str, Any], *args: str, spec: Path | None = None) -> subprocess.CompletedProcess[str]:
    if spec is None:
        spec = host["tmp"] / "health.json"
        spec.write_text(json.dumps(host["spec"]))
    r = host["roots"]
    argv = [sys.executable, "-m", "provision.remote.health", "--spec", str(spec), "--state", str(r.state)]
    argv += ["--proc", str(r.proc), "--kmsg", str(r.kmsg), "--dpkg-query", r.dpkg_query]
    argv += ["--systemctl", r.systemctl, "--nvml-library", r.nvml_library, "--last-verify", str(r.last_verify), *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
