"""A CPU-only Python environment on test hosts, the way `provision up` leaves a GPU-less host:
python3-venv from apt (through the set's proxy) and the CPU torch wheel from the wheelhouse in
/opt/provision/venv, the default venv of verify and tune."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provision.hosts.inventory import HostTarget, load_inventory
from provision.hosts.ssh import connect
from tests.hosts import harness

VENV = "/opt/provision/venv"


def install_cpu_torch(hostset: harness.HostSet, wheelhouse: Path, *, first_only: bool = False) -> None:
    """Install on every host of the set (or the first one), in parallel; idempotent."""
    script = (
        "set -e; python3 -c 'import ensurepip' 2>/dev/null || "
        "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv); "
        f"test -x {VENV}/bin/python || python3 -m venv {VENV}; "
        f"{VENV}/bin/python -c 'import torch' 2>/dev/null || "
        f"{VENV}/bin/pip install -q --no-index --find-links {wheelhouse} '{harness.TORCH_CPU}'"
    )

    def one(target: HostTarget) -> str:
        transport = connect(target)
        try:
            result = transport.run(script, timeout=1200)
            return "" if result.ok else f"{target.name}: {result.stderr[-1000:]}"
        finally:
            transport.close()

    targets = load_inventory(hostset.inventory)[: 1 if first_only else None]
    with ThreadPoolExecutor(len(targets)) as pool:
        errors = [e for e in pool.map(one, targets) if e]
    assert not errors, errors
