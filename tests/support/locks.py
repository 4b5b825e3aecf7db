"""A second lock for the tests that need lock B after lock A: A's group plus one distribution more
(uv, its pinned wheel from the test wheelhouse: the cheapest real difference of closure there)."""

from __future__ import annotations

from dataclasses import replace

from provision.matrix import load
from provision.model.lock import LockGroup, PythonPackage
from tests.hosts import harness
from tests.wheels import sha256


def plus_uv(group: LockGroup, hosts: list[str]) -> LockGroup:
    """``group`` for ``hosts`` with uv's wheel added to its Python packages."""
    sp = load().t.standalone_python
    assert sp is not None
    (uv_wheel,) = harness.fill_wheelhouse().glob(f"uv-{sp.uv}-*x86_64*.whl")
    extra = PythonPackage("uv", sp.uv, sha256(uv_wheel), uv_wheel.as_uri(), "")
    return replace(group, hosts=hosts, python_packages=[*group.python_packages, extra])
