"""What is installed and what is visible: versions, GPU counts from torch / NVML / lspci, arch list.

Runs on the target inside the smoke job (standard library + torch + optional NVML).
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from typing import Any

from .nvml import Nvml

# PCI classes of NVIDIA compute devices: 0300 VGA controller, 0302 3D controller. NVSwitches
# (0680) and the GPUs' audio functions (0403) are not GPUs.
_GPU_CLASSES = ("0300", "0302")


def lspci_gpu_count() -> int | None:
    """NVIDIA GPUs on the PCI bus, or None when lspci is not installed or fails."""
    if shutil.which("lspci") is None:
        return None
    try:
        out = subprocess.run(["lspci", "-n"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return count_lspci(out)


def count_lspci(text: str) -> int:
    """Count ``lspci -n`` lines like ``17:00.0 0302: 10de:2335 (rev a1)``."""
    count = 0
    for line in text.splitlines():
        m = re.match(r"\S+\s+([0-9a-f]{4}):\s+10de:[0-9a-f]{4}", line.strip(), re.IGNORECASE)
        if m and m.group(1) in _GPU_CLASSES:
            count += 1
    return count


def driver_from_proc() -> str | None:
    """The kernel module's version, for hosts without NVML bindings."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?)", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def torch_gpu_state(torch: Any) -> tuple[int, str | None]:
    """How many GPUs torch can use, and why none when it cannot."""
    if torch.version.cuda is None:
        hip = getattr(torch.version, "hip", None)
        return 0, (
            f"torch {torch.__version__} is a ROCm build"
            if hip
            else f"torch {torch.__version__} is a CPU-only build (install a CUDA build)"
        )
    try:
        if torch.cuda.is_available():
            return int(torch.cuda.device_count()), None
        torch.cuda.init()  # raises with the driver's reason (no driver, too old, no device)
    except Exception as exc:
        return 0, f"CUDA is not usable from torch: {' '.join(str(exc).split())[:300]}"
    return 0, "CUDA is not usable from torch (no device found)"


# The keys of the job's ``versions``: these, and each framework of ``frameworks.CHECKS`` found
# installed. The controller declares the same list (provision.model.components, which this job,
# standard library only on the hosts, cannot import); tests/unit/model/test_model.py checks they agree.
VERSION_KEYS = ("driver", "cuda_driver", "torch", "torch_cuda", "cudnn", "nccl", "python")


def versions(torch: Any, nvml: Nvml | None, on_gpu: bool) -> dict[str, Any]:
    found: dict[str, Any] = {
        "driver": (nvml.driver_version() if nvml else None) or driver_from_proc(),
        "cuda_driver": nvml.cuda_driver_version() if nvml else None,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": None,
        "nccl": None,
        "python": platform.python_version(),
    }
    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        found["cudnn"] = None if cudnn is None else str(cudnn)
    except Exception:
        found["cudnn"] = None
    if on_gpu:
        try:
            nccl = torch.cuda.nccl.version()
            found["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            found["nccl"] = None
    return found


def torch_gpus(torch: Any, count: int) -> list[dict[str, Any]]:
    gpus = []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        uuid = getattr(props, "uuid", None)
        gpus.append(
            {
                "index": i,
                "name": props.name,
                "uuid": None if uuid is None else (str(uuid) if str(uuid).startswith("GPU-") else f"GPU-{uuid}"),
                "compute_capability": f"{props.major}.{props.minor}",
                "memory_gib": round(props.total_memory / 2**30),
            }
        )
    return gpus


def nvml_index_for(gpu: dict[str, Any], nvml_gpus: list[dict[str, Any]]) -> int | None:
    """The NVML index of a torch device: by UUID (CUDA may order devices differently), else position."""
    for n in nvml_gpus:
        if gpu.get("uuid") and n.get("uuid") == gpu["uuid"]:
            return int(n["index"])
    return gpu["index"] if gpu["index"] < len(nvml_gpus) else None
