#!/usr/bin/python
"""Ansible module: dnf versionlock entries for exactly one role's held packages.

Why a module and not substring checks on `dnf versionlock list`: the entries carry the epoch and
the release (`kmod-nvidia-open-dkms-3:575.51-1.fc41.*`, NVIDIA's Driver Installation Guide,
"Version locking"), so "is the version in the output" re-added locks on every run, and deleting
"every nvidia|cuda line at another version" removed the locks of other roles. Here each entry is
parsed into name and epoch:version-release, and only the given names are touched:

- stage ``release`` (before installing): a lock on one of ``locks``' names whose EVR does not
  match that package's planned version, and every lock on a name in ``drop``, is deleted, so dnf
  can move the package to the plan's version.
- stage ``lock`` (after installing): each name in ``locks`` without an entry is locked at its
  installed EVR (`dnf versionlock add <name>` locks what is installed).

Runs on the managed host (RHEL/Rocky/Amazon Linux, dnf 4 with python3-dnf-plugin-versionlock).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: package_plan_versionlock
short_description: Add and delete dnf versionlock entries of the given packages only
options:
  locks:
    description: Packages to hold, each {name, version}; version null keeps any EVR.
    type: list
    elements: dict
    default: []
  drop:
    description: Names whose locks all go (packages of the role's previous plan).
    type: list
    elements: str
    default: []
  stage:
    description: release (before install) or lock (after install).
    type: str
    choices: [release, lock]
    required: true
"""

RETURN = r"""
added: {description: Names locked., type: list, returned: always}
deleted: {description: Entries deleted., type: list, returned: always}
"""

# name-[epoch:]version-release[.arch][.*]; the name may itself contain dashes and digits.
_ENTRY = re.compile(r"^(?P<name>.+?)-(?:(?P<epoch>\d+):)?(?P<version>[^-:]+)-(?P<release>[^-:]+)$")


def parse_entry(line: str) -> tuple[str, str] | None:
    """``(name, "epoch:version-release")`` of a versionlock entry line; None for other lines.

    Excludes (``!name-...``) and comments are no locks of ours; a missing epoch reads as 0.
    """
    text = line.strip()
    if not text or text.startswith(("#", "!")) or any(c.isspace() for c in text):
        return None
    text = text.removesuffix(".*")
    m = _ENTRY.match(text)
    if not m:
        return None
    return m["name"], f"{m['epoch'] or '0'}:{m['version']}-{m['release']}"


def matches(evr: str, version: str | None) -> bool:
    """Whether a lock's ``epoch:version-release`` is the plan's version expression.

    The expression is the one dnf installs (``name-<expression>``): with or without an epoch,
    with or without the release, globs allowed (``<x.y.z>``, ``3:<x.y.z>``, ``1:<x.y.z>-1``).
    """
    if version is None:
        return True
    epoch = evr.partition(":")[0]
    want = version if ":" in version else f"{epoch}:{version}"
    return fnmatch.fnmatchcase(evr, want) or fnmatch.fnmatchcase(evr, f"{want}-*")


def plan(
    lines: Iterable[str], locks: Sequence[Mapping[str, Any]], drop: Sequence[str], stage: str
) -> tuple[list[str], list[str]]:
    """(entries to delete, names to add) for the current ``dnf versionlock list`` lines."""
    entries: dict[str, list[tuple[str, str]]] = {}
    for line in lines:
        parsed = parse_entry(line)
        if parsed:
            entries.setdefault(parsed[0], []).append((line.strip(), parsed[1]))
    wanted = {str(p["name"]): p.get("version") for p in locks}
    if stage == "release":
        delete = [raw for name in drop if name not in wanted for raw, _ in entries.get(name, [])]
        for name, version in wanted.items():
            delete += [raw for raw, evr in entries.get(name, []) if not matches(evr, version)]
        return delete, []
    return [], [name for name in wanted if name not in entries]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "locks": {"type": "list", "elements": "dict", "default": []},
            "drop": {"type": "list", "elements": "str", "default": []},
            "stage": {"type": "str", "choices": ["release", "lock"], "required": True},
        },
        supports_check_mode=True,
    )
    rc, out, err = module.run_command(["dnf", "-q", "versionlock", "list"])
    if rc != 0:
        module.fail_json(msg=f"dnf versionlock list failed: {err.strip() or out.strip()}")
    delete, add = plan(out.splitlines(), module.params["locks"], module.params["drop"], module.params["stage"])
    if not module.check_mode:
        for argv in ([["dnf", "-q", "versionlock", "delete", *delete]] if delete else []) + (
            [["dnf", "-q", "versionlock", "add", *add]] if add else []
        ):
            rc, out, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(msg=f"{' '.join(argv[:4])} failed: {err.strip() or out.strip()}")
    module.exit_json(changed=bool(delete or add), added=add, deleted=delete)


if __name__ == "__main__":
    main()
