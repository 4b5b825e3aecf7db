"""Ansible filter ``verify_version_matches``: the one version rule, provision/model/versions.py.

Not a copy of it: the filter loads that file. Ansible runs the role from provision's own
environment (`provision up`, and plain `ansible-playbook` next to an installed provision), where
the rule imports as ``provision.model.versions``; a `plan --out` run dir taken to a machine
without provision carries the file beside its roles (provision/ansible/rundir.py copies it to
roles/verify/files/versions.py), and the filter loads it from there.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

# where a run dir's copy of the roles carries the rule (provision/ansible/rundir.py _copy_roles)
BUNDLED = Path(__file__).resolve().parents[1] / "files" / "versions.py"


def _rule() -> ModuleType:
    if BUNDLED.is_file():
        spec = importlib.util.spec_from_file_location("provision_verify_versions", BUNDLED)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    from provision.model import versions

    return versions


def verify_version_matches(installed: Any, locked: Any, item: str = "") -> bool:
    """``installed | verify_version_matches(locked)``: whether the installed version is the locked one."""
    return bool(_rule().version_matches(item, str(installed), str(locked)))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"verify_version_matches": verify_version_matches}
