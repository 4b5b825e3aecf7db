"""The NVML path of the probe against a STAND-IN NVML library (tests/fakenvml, not NVIDIA's).

No GPU or driver exists on development machines, so a small fake ``libnvidia-ml.so.1`` answers
the calls. The snippet that runs on hosts is exercised for real, through pynvml (nvidia-ml-py,
as in this venv) and through ctypes (a Python without pynvml), by the local transport.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from provision.hosts import facts as hf
from provision.hosts import gather
from provision.hosts import parse_system as ps
from provision.hosts.local import LocalTransport
from tests import fakenvml
from tests.support.probe_fixtures import table_lookup


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the stand-in NVML library")
    return fakenvml.build(tmp_path_factory.mktemp("fakenvml"))


def _env(lib: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML")}
    env["LD_LIBRARY_PATH"] = str(lib)
    # this venv's python first: it has pynvml (nvidia-ml-py), as a provisioned host's venv would
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(extra)
    return env


def _query(env: dict[str, str]) -> tuple[hf.NvmlInventory | None, str | None]:
    # as the probe script runs it: its own py function (no part given, the script only defines it)
    script = gather.PROBE_SCRIPT.read_text() + '\npy python3 -B "$PROVISION_NVML_PY"\n'
    nvml = gather.probe_env(gather.GatherOptions(), ["main"])["PROVISION_NVML_PY"]
    result = LocalTransport(env={**env, "PROVISION_NVML_PY": nvml}).run(["sh", "-c", script])
    assert result.ok, result.stderr
    return ps.parse_nvml_json(result.stdout)


def test_nvml_through_pynvml(fake_lib: Path) -> None:
    inv, error = _query(_env(fake_lib, FAKE_NVML_GPUS="NVIDIA A10G:24;NVIDIA A10G:24", FAKE_NVML_DRIVER="550.127.05"))
    assert error is None and inv is not None
    assert inv.source == "pynvml"
    assert (inv.driver_version, inv.cuda_version) == ("550.127.05", "12.4")
    assert [(g.index, g.name, g.memory_mib, g.compute_capability) for g in inv.gpus] == [
        (0, "NVIDIA A10G", 24 * 1024, "8.6"),
        (1, "NVIDIA A10G", 24 * 1024, "8.6"),
    ]
    assert inv.gpus[1].uuid == "GPU-00000000-0000-0000-0000-000000000001"
    assert inv.gpus[0].pci_id is None  # the stand-in has no PCI info call; the rest still counts


def test_nvml_through_ctypes(fake_lib: Path) -> None:
    inv, error = _query(_env(fake_lib, FAKE_NVML_GPUS="NVIDIA H100 80GB HBM3:80", PROVISION_NVML_VIA="ctypes"))
    assert error is None and inv is not None
    assert inv.source == "nvml"
    assert [(g.name, g.memory_mib) for g in inv.gpus] == [("NVIDIA H100 80GB HBM3", 80 * 1024)]
    assert inv.driver_version == "550.127.05"


@pytest.mark.parametrize("via", ["pynvml", "ctypes"])
def test_nvml_driver_not_loaded_is_an_error_fact(fake_lib: Path, via: str) -> None:
    inv, error = _query(_env(fake_lib, FAKE_NVML_FAIL="1", PROVISION_NVML_VIA=via))
    assert inv is None and error is not None and "Driver Not Loaded" in error


def test_no_nvml_library_means_no_inventory(tmp_path: Path) -> None:
    inv, error = _query(_env(tmp_path, PROVISION_NVML_VIA="ctypes"))
    assert (inv, error) == (None, None)


def test_full_local_probe_reports_the_stand_in_gpus(fake_lib: Path) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("a real nvidia-smi is here; the probe asks it instead of NVML")
    env = _env(fake_lib, FAKE_NVML_GPUS="NVIDIA L4:24")
    facts = gather.gather(LocalTransport(env=env), gather.GatherOptions(lookup=table_lookup, imds_disabled=True))
    assert facts.nvml is not None and [g.name for g in facts.nvml.gpus] == ["NVIDIA L4"]
    assert facts.to_json()["nvml"]["gpus"][0]["memory_mib"] == 24 * 1024
