"""A stand-in ``libnvidia-ml.so.1`` for machines without an NVIDIA driver.

fakenvml.c is the project's shared fake NVML (from ../shared/tools) plus the health queries the
smoke job reads (ECC, retired pages, row remapping, clock-event reasons, PCIe link, persistence),
each steered by a FAKE_NVML_* environment variable (see the comment in the C file). It is a
stand-in: tests that use it say so, and it proves only that our NVML code paths read and judge
what NVML answers, not that a real driver answers the same.

:func:`build` compiles it once per directory; :func:`env` gives the environment a subprocess
needs to load it instead of a real driver (pynvml dlopens ``libnvidia-ml.so.1``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fakenvml.c")
LIBRARY = "libnvidia-ml.so.1"


def build(directory: Path) -> Path:
    """Compile the fake into ``directory/libnvidia-ml.so.1``; return the directory."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("building the fake NVML needs a C compiler (apt-get install gcc)")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / LIBRARY
    if not target.exists() or target.stat().st_mtime < SOURCE.stat().st_mtime:
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(target), str(SOURCE)], check=True)
    return directory


def env(directory: Path, **knobs: str) -> dict[str, str]:
    """os.environ with the fake first on the library path and FAKE_NVML_* knobs set."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    path = ":".join(p for p in (str(directory), base.get("LD_LIBRARY_PATH", "")) if p)
    return {**base, "LD_LIBRARY_PATH": path, **{f"FAKE_NVML_{k.upper()}": v for k, v in knobs.items()}}
