"""The bundled verification job that ``provision verify`` copies to each host (see job.py).

Nothing in this folder may import the rest of ``provision``: it runs on the target with only the
standard library, torch and nvidia-ml-py. The controller reads :data:`FILES` to know what to copy.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

DIR = Path(__file__).resolve().parent
# The version rule's one home is provision/model/versions.py (standard library only, imports
# nothing): the bundle carries it to hosts as smoke/versions.py, beside the job (SOURCES). Where
# this package runs from provision itself (the source tree, an installed wheel) it is not beside
# this file: it is loaded from its home, by path, under this package's name, so the job's
# `from .versions import ...` is the same on hosts and on the controller.
VERSIONS = DIR.parent.parent / "model" / "versions.py"
if not (DIR / "versions.py").is_file() and f"{__name__}.versions" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(f"{__name__}.versions", VERSIONS)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _module
    _spec.loader.exec_module(_module)
# What a host needs: every module of the job and its reference figures.
FILES = (
    "__init__.py",
    "job.py",
    "verdict.py",
    "versions.py",
    "nvml.py",
    "environment.py",
    "speed.py",
    "train.py",
    "dist.py",
    "frameworks.py",
    "references.json",
)
# Where each file of FILES comes from on the controller.
SOURCES = {name: VERSIONS if name == "versions.py" else DIR / name for name in FILES}
