"""Shared helpers of the probe tests: fixture files, a stand-in for the knowledge data, a whole host."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from provision.hosts import gather

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "probe"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@dataclass(frozen=True)
class FakeModel:
    name: str
    compute_capability: str


# A deliberately tiny table: the parsers must take whatever lookup they are given. The tests
# that use the real knowledge data call provision.matrix directly.
TABLE = {
    "10de:2330": FakeModel("H100-SXM", "9.0"),
    "10de:2237": FakeModel("A10G", "8.6"),
    "10de:2684": FakeModel("RTX-4090", "8.9"),
    "10de:27b8": FakeModel("L4", "8.9"),
}


def table_lookup(pci_id: str) -> FakeModel | None:
    return TABLE.get(pci_id)


OPTIONS = gather.GatherOptions(lookup=table_lookup)


def hgx_ubuntu_2204() -> dict[str, str]:
    """An HGX H100 x 8 on Ubuntu 22.04 with the open 580 driver: the gather script's raw sections."""
    return {
        "id": "root\n0",
        "hostname": "hgx-07",
        "os_release": fixture("os-release/ubuntu-22.04"),
        "uname": "5.15.0-157-generic\nx86_64",
        "lspci": fixture("lspci/hgx-h100-8gpu.txt"),
        "proc_modules": fixture("proc-modules/nvidia.txt"),
        "proc_driver": fixture("proc-driver-version/open-580.txt"),
        "modinfo": fixture("modinfo/nvidia-open-580.txt"),
        "dpkg": fixture("dpkg/ubuntu-22.04-hgx.txt"),
        "headers_build": "yes",
        "apt_headers": "@@lists yes\n" + fixture("apt-cache-policy/installed.txt"),
        "efi": "yes",
        "mokutil": fixture("mokutil/disabled.txt"),
        "nvidia_smi": fixture("nvidia-smi/hgx-h100-8gpu.xml"),
        "cuda_dirs": "@@file /usr/local/cuda-12.8\n" + fixture("cuda/version-12.8.json"),
        "nvcc": "/usr/local/cuda/bin/nvcc\n" + fixture("cuda/nvcc-12.8.txt"),
        "cudnn_header": "@@file /usr/include/x86_64-linux-gnu/cudnn_version_v9.h\n" + fixture("cuda/cudnn_version.h"),
        "python": "Python 3.10.12",
        "pythons": "python3.10\n",
        "df": fixture("df/hgx.txt"),
        "meminfo": fixture("meminfo/hgx.txt"),
        "nproc": "224",
        "units": fixture("systemctl/ubuntu-default.txt"),
        "processes": "systemd\nsshd\nnv-fabricmanager\n",
        "apt_periodic": fixture("apt-config/periodic-off.txt"),
        "runtimes": "docker /usr/bin/docker\nnvidia-ctk /usr/bin/nvidia-ctk",
        "imds": "",
        "locks": '{"held": [], "denied": []}',
    }


def run_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`provision probe ARGS` in a fresh process, never asking a real EC2 metadata service."""
    full_env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "provision", "probe", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=180,
    )
