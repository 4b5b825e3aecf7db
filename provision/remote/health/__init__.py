"""provision-health: the host-side health check (see check.py and docs/reference/health.md).

Like the smoke job (``provision/remote/smoke/``) nothing here imports the rest of provision: it
runs on the host with the standard library alone (no torch, no pynvml). The version rule's one
home is provision/model/versions.py: the host's copy of this folder carries it as
``health/versions.py`` (:data:`SOURCES`); run from provision itself it is loaded from its home,
by path, under this package's name, so ``from .versions import ...`` is the same everywhere.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

DIR = Path(__file__).resolve().parent
VERSIONS = DIR.parent.parent / "model" / "versions.py"
if not (DIR / "versions.py").is_file() and f"{__name__}.versions" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(f"{__name__}.versions", VERSIONS)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _module
    _spec.loader.exec_module(_module)
# What a host needs (run there as `python3 -m health` from the folder above this one).
FILES = ("__init__.py", "__main__.py", "check.py", "probes.py", "nvml.py", "versions.py")
SOURCES = {name: VERSIONS if name == "versions.py" else DIR / name for name in FILES}
