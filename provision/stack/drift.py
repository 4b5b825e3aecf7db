"""Drift: which locked versions a host no longer has (pure; the probing is :mod:`provision.fleet.status`).

:func:`expected_versions` reads a lock group as flat ``{item: version}``; :func:`drift` compares
that with what a probe or the smoke job observed and names every item that left the lock. Whether
a version matches is the one rule of :mod:`provision.model.versions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.model.components import TORCH_VARIANT
from provision.model.lock import LockGroup
from provision.model.versions import build_matches, cudnn_number, split_local, version_matches

if TYPE_CHECKING:
    from provision.stack.request import HostSpec

__all__ = ["Drift", "compare", "cudnn_number", "drift", "expected_versions", "host_differences"]


@dataclass(frozen=True)
class Drift:
    item: str  # driver | fabric_manager | torch | torch_variant | torch_cuda | cudnn | ...
    expected: str | None
    observed: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"item": self.item, "expected": self.expected, "observed": self.observed}

    def __str__(self) -> str:
        return f"{self.item}: locked {self.expected or 'none'}, found {self.observed or 'none'}"


def expected_versions(group: LockGroup) -> dict[str, str | None]:
    """What the lock says a host of ``group`` should report, keyed like :func:`drift`'s input
    (the items of :data:`provision.model.components.COMPONENTS` the lock pins, and torch's variant)."""
    s = group.stack
    out: dict[str, str | None] = {}
    if s.driver:
        out["driver"] = s.driver.version
    if s.fabric_manager is not None:
        out["fabric_manager"] = s.fabric_manager
    if s.cuda_toolkit is not None:
        out["cuda_toolkit"] = s.cuda_toolkit
    torch = s.frameworks.get("torch")
    if torch:
        out["torch"] = torch.version
        out[TORCH_VARIANT] = torch.variant
        out["torch_cuda"] = torch.cuda
        out["cudnn"] = cudnn_number(torch.cudnn) if torch.cudnn else None
    for name in ("tensorflow", "jax"):
        if name in s.frameworks:
            out[name] = s.frameworks[name].version
    if s.python:
        out["python"] = s.python
    return out


def drift(group: LockGroup, observed: Mapping[str, str | None]) -> list[Drift]:
    """Items whose observed version differs from the lock (only items that were observed).

    ``observed`` is what verify/probe found, e.g. ``{"driver": "580.95.05", "torch":
    "2.8.0+cu128", "torch_cuda": "12.8", "cudnn": "91002", "python": "3.11.2"}``; a key that is
    absent was not looked at and is not drift, a key present with ``None`` means "not installed".
    """
    return compare(expected_versions(group), observed)


def compare(expected: Mapping[str, str | None], observed: Mapping[str, str | None]) -> list[Drift]:
    """:func:`drift` for a lock group already read as :func:`expected_versions` (report.json keeps that)."""
    out: list[Drift] = []
    for item, want in expected.items():
        if item == TORCH_VARIANT:  # read from the local tag of the observed torch version
            seen = observed.get("torch")
            if not build_matches(seen, want):
                out.append(Drift(item, want, split_local(seen)[1] if seen else None))
            continue
        if item not in observed:
            continue
        got = observed[item]
        if not version_matches(item, got, want):
            out.append(Drift(item, want, got))
    return out


def host_differences(group: LockGroup, host: HostSpec, driver: str | None = None) -> list[str]:
    """What of ``host`` (a probed host's description, ``driver`` the version its probe found)
    differs from the one ``group`` was resolved for, as ``"os debian-12, locked ubuntu-22.04"``;
    empty when the lock fits the host.

    These are what the resolution stands on (`up --lock` applies a lock only to hosts it fits):
    the OS, the arch, the GPU model and count, the EC2 instance type when the lock names one, and
    a kept driver: a group that plans no driver was resolved against the one the probe found
    (``host.kept_driver``), whose version the locked wheels' CUDA needs. The Python is not
    compared: the lock's is one the OS release installs (or a standalone CPython), and the OS
    release is compared. A group that installs a driver installs its own, so the host's does not
    matter.
    """
    locked = group.host
    gpu = host.gpu.name if host.gpu is not None else None
    pairs: list[tuple[str, object, object]] = [
        ("os", host.os.id, locked.os),
        ("arch", host.arch, locked.arch),
        ("gpu", gpu, locked.gpu),
        ("gpu count", host.gpu_count, locked.gpu_count),
    ]
    if locked.instance_type:
        pairs.append(("instance type", host.instance_type, locked.instance_type))
    if locked.kept_driver and not group.stack.driver:
        pairs.append(("kept driver", driver, locked.kept_driver))
    return [f"{item} {_shown(have)}, locked {_shown(want)}" for item, have, want in pairs if have != want]


def _shown(value: object) -> str:
    return "none" if value is None or value == "" else str(value)
