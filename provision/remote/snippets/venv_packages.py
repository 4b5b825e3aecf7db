"""Framework versions in a virtual environment, run ON the target by that venv's Python.

Reads package metadata only (importing torch takes seconds and may touch the GPU); torch's CUDA
version comes from the text of torch/version.py. Prints {"python", "base_prefix", "packages",
"torch_cuda"}: ``base_prefix`` is the installation the venv was made from (sys.base_prefix, "the
value of prefix before site.py ran", the Python docs' sys module), which tells a standalone
CPython python_env installed from the OS's own.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import re
import sys
from pathlib import Path

DISTRIBUTIONS = (
    "torch",
    "torchvision",
    "torchaudio",
    "tensorflow",
    "tensorflow-cpu",
    "jax",
    "jaxlib",
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime",
    "nvidia-ml-py",
    "triton",
)


def torch_cuda() -> str | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        version_py = Path(location) / "version.py"
        if version_py.is_file():
            m = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", version_py.read_text(), re.M)
            return m.group(1) if m else None
    return None


def main() -> None:
    packages = {}
    for name in DISTRIBUTIONS:
        try:
            packages[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    print(
        json.dumps(
            {
                "python": "{}.{}".format(*sys.version_info[:2]),
                "base_prefix": sys.base_prefix,
                "packages": packages,
                "torch_cuda": torch_cuda() if "torch" in packages else None,
            }
        )
    )


if __name__ == "__main__":
    main()
