"""A stand-in ``libnvidia-ml.so.1`` built from fakenvml.c, for the NVML code paths on machines
without an NVIDIA driver. It answers the NVML calls provision makes with GPUs described by
FAKE_NVML_GPUS ("NVIDIA A10G:24;NVIDIA A10G:24", name:GiB); FAKE_NVML_FAIL=1 makes init fail
with "Driver Not Loaded". It is not NVIDIA's library: tests that use it say so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fakenvml.c")


def build(directory: Path) -> Path:
    """Compile the stand-in into ``directory/libnvidia-ml.so.1``; returns the directory."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("a C compiler (cc) is needed to build the stand-in NVML library")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(directory / "libnvidia-ml.so.1"), str(SOURCE)],
        check=True,
    )
    return directory
