"""The driver's entries of a package plan, for the tests of Ubuntu's distro driver (Python and role)."""

from __future__ import annotations

from typing import Any


def ubuntu_entries(facts: dict[str, Any] | None, version: str, open_modules: bool = True) -> list[tuple[str, Any]]:
    """The driver's (name, version) entries of the package plan (the packaging table's Ubuntu
    distro row) for a probed host (``facts``) or a described one (None)."""
    from dataclasses import replace

    from provision.matrix import load
    from provision.model.facts import ProbedHost
    from provision.stack.candidates import DriverChoice
    from provision.stack.packages import package_plan
    from provision.stack.request import HostSpec, StackRequest

    k = load()
    branch = k.branch(int(version.split(".", maxsplit=1)[0]))
    assert branch is not None
    probed = ProbedHost.from_json(facts) if facts is not None else None
    host = replace(HostSpec.describe(gpu="L4", gpu_count=1, os="ubuntu-22.04"), probed=probed)
    d = DriverChoice(branch, version, "distro", "open" if open_modules else "proprietary")
    plan = package_plan(k, StackRequest.build(), host, d, [], cudnn_major=None)
    return [(i.name, i.version) for i in plan.for_role("nvidia_driver")]
