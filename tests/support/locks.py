"""A second lock for the tests that need lock B after lock A: A's group plus one distribution more
(uv, its pinned wheel from the test wheelhouse: the cheapest real difference of closure there)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from provision.matrix import load
from provision.model.lock import LockGroup, PythonPackage
from tests.hosts import harness
from tests.wheels import sha256


def uv_wheel() -> Path:
    """uv's pinned wheel in the test wheelhouse (knowledge os.yaml standalone_python.uv)."""
    sp = load().t.standalone_python
    assert sp is not None
    (wheel,) = harness.fill_wheelhouse().glob(f"uv-{sp.uv}-*x86_64*.whl")
    return wheel


def plus_uv(group: LockGroup, hosts: list[str], url: str | None = None) -> LockGroup:
    """``group`` for ``hosts`` with uv's wheel added to its Python packages, recorded at ``url``
    (default: the wheelhouse's file; the hosts install it from find-links by name and hash)."""
    sp = load().t.standalone_python
    assert sp is not None
    wheel = uv_wheel()
    extra = PythonPackage("uv", sp.uv, sha256(wheel), url or wheel.as_uri(), "")
    return replace(group, hosts=hosts, python_packages=[*group.python_packages, extra])
