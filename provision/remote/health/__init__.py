"""provision-health: the host-side health check (see check.py and docs/how-to/health.md).

Like the smoke job (``provision/remote/smoke/``) nothing here imports the rest of provision: it
runs on the host with the standard library alone (no torch, no pynvml). The version rule's one
home is provision/model/versions.py: the host's copy of this folder carries it as
``health/versions.py`` (:data:`SOURCES`); run from provision itself it is loaded from its home
by the smoke package (:mod:`provision.remote.smoke`), whose module this package's ``.versions``
then is, so ``from .versions import ...`` is the same everywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

DIR = Path(__file__).resolve().parent
if (DIR / "versions.py").is_file():  # on a host: the copy beside this file
    VERSIONS = DIR / "versions.py"
else:  # in provision itself: the smoke package has loaded the rule from its home; share that module
    from ..smoke import VERSIONS
    from ..smoke import versions as _versions

    sys.modules.setdefault(f"{__name__}.versions", _versions)
# What a host needs (run there as `python3 -m health` from the folder above this one).
FILES = ("__init__.py", "__main__.py", "check.py", "probes.py", "nvml.py", "exporters.py", "slurm.py", "versions.py")
SOURCES = {name: VERSIONS if name == "versions.py" else DIR / name for name in FILES}
