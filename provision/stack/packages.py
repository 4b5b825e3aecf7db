"""The package plan: what the roles install for a resolved stack, per component.

Driver package names per install method and OS family (with NVIDIA's repository URL), the
Fabric Manager, the system CUDA toolkit and cuDNN packages, and pip's index URLs and exact
requirement lines. :class:`PackagePlan` is the typed hand-off from the resolver to the lock
and the role variables; its JSON (the lock's ``packages``) is made only at the edges, by
:meth:`PackagePlan.to_json` and :meth:`PackagePlan.from_json`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provision.errors import BadInput
from provision.matrix import Knowledge
from provision.matrix.model import OsRelease
from provision.stack.candidates import DriverChoice, FwChoice
from provision.stack.request import HostSpec, StackRequest


@dataclass(frozen=True)
class DriverPackages:
    """The driver's packages for one install method, and NVIDIA's repository (nvidia-repo only)."""

    method: str  # nvidia-repo | distro
    names: tuple[str, ...]
    repo: str | None

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "names": list(self.names), "repo": self.repo}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DriverPackages:
        return cls(
            _text(doc, "method", "driver.") or "", _texts(doc, "names", "driver."), _text(doc, "repo", "driver.")
        )


@dataclass(frozen=True)
class PipPlan:
    """Where pip finds the frameworks and the exact requirement lines it installs."""

    index_url: str
    extra_index_urls: tuple[str, ...]
    requirements: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "index_url": self.index_url,
            "extra_index_urls": list(self.extra_index_urls),
            "requirements": list(self.requirements),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PipPlan:
        where = "pip."
        return cls(
            _text(doc, "index_url", where) or "",
            _texts(doc, "extra_index_urls", where),
            _texts(doc, "requirements", where),
        )


@dataclass(frozen=True)
class PackagePlan:
    """Per component, what gets installed; empty where the stack leaves a component alone.

    A lock read from disk may lack parts (``os_family`` empty, ``pip`` None): the role
    variables then fall back on the stack's versions and NVIDIA's names.
    """

    os_family: str
    driver: DriverPackages | None = None
    fabric_manager: tuple[str, ...] = ()
    cuda_toolkit: tuple[str, ...] = ()
    cudnn: tuple[str, ...] = ()
    pip: PipPlan | None = None

    def to_json(self) -> dict[str, Any]:
        """The lock's ``packages`` object (its key order is part of the lock's bytes)."""
        return {
            "os_family": self.os_family,
            "driver": self.driver.to_json() if self.driver else None,
            "fabric_manager": list(self.fabric_manager),
            "cuda_toolkit": list(self.cuda_toolkit),
            "cudnn": list(self.cudnn),
            "pip": self.pip.to_json() if self.pip else None,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PackagePlan:
        """A lock's ``packages`` object; BadInput when a part has the wrong shape."""
        driver = _mapping(doc, "driver")
        pip = _mapping(doc, "pip")
        return cls(
            os_family=_text(doc, "os_family") or "",
            driver=DriverPackages.from_json(driver) if driver is not None else None,
            fabric_manager=_texts(doc, "fabric_manager"),
            cuda_toolkit=_texts(doc, "cuda_toolkit"),
            cudnn=_texts(doc, "cudnn"),
            pip=PipPlan.from_json(pip) if pip is not None else None,
        )


def _bad(where: str, what: str) -> BadInput:
    return BadInput(f"the lock's packages.{where} is not {what}", "regenerate the lock with `provision plan`")


def _mapping(doc: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = doc.get(key)
    if not value:
        return None
    if not isinstance(value, Mapping):
        raise _bad(key, "an object")
    return value


def _text(doc: Mapping[str, Any], key: str, where: str = "") -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise _bad(where + key, "text")
    return value


def _texts(doc: Mapping[str, Any], key: str, where: str = "") -> tuple[str, ...]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(where + key, "a list of text")
    return tuple(value)


def cuda_repo_url(k: Knowledge, os: OsRelease, arch: str) -> str | None:
    """NVIDIA's CUDA repository for this OS and arch (``.../rhel9/x86_64/``), None where it has none."""
    p = k.t.packages
    if p is None or not os.repo_name:
        return None
    return f"{p.repo_url}/{os.repo_name}/{'sbsa' if arch == 'aarch64' else 'x86_64'}/"


def os_family(host: HostSpec, method: str) -> str:
    """The family whose package names apply: the distro itself for its own packages."""
    if method == "distro":
        return host.os.id.split("-")[0]
    return host.os.family


def fabric_manager_packages(k: Knowledge, host: HostSpec, d: DriverChoice) -> tuple[str, ...]:
    """The Fabric Manager's packages at the driver's version (none known: empty)."""
    p = k.t.packages
    if p is None:
        return ()
    fam = os_family(host, d.method)
    return tuple(
        n.format(branch=d.branch.branch if d.branch else "", version=d.version or "")
        for n in p.fabric_manager.get(d.method, {}).get(fam, ())
    )


def package_plan(
    k: Knowledge,
    req: StackRequest,
    host: HostSpec,
    d: DriverChoice,
    combo: Sequence[FwChoice],
    *,
    cudnn_major: int | None,
) -> PackagePlan:
    """Package names per install method and OS, index URLs and pip requirement lines."""
    p = k.t.packages
    driver: DriverPackages | None = None
    fabric_manager: tuple[str, ...] = ()
    cuda_toolkit: tuple[str, ...] = ()
    cudnn: tuple[str, ...] = ()
    if p is not None and d.branch is not None and d.flavour is not None:
        fam = os_family(host, d.method)
        flavour = d.flavour
        if d.method == "nvidia-repo" and d.branch.branch >= p.new_packaging_from:
            flavour += "_pinned"
        names = p.driver.get(d.method, {}).get(fam, {}).get(flavour, ())
        driver = DriverPackages(
            method=d.method,
            names=tuple(n.format(branch=d.branch.branch, version=d.version) for n in names),
            repo=cuda_repo_url(k, host.os, host.arch) if d.method == "nvidia-repo" else None,
        )
        if host.needs_fabric_manager:
            fabric_manager = fabric_manager_packages(k, host, d)
    if p is not None and req.cuda_toolkit:
        major, minor = req.cuda_toolkit.split(".")
        cuda_toolkit = tuple(
            n.format(cuda_major=major, cuda_minor=minor) for n in p.cuda_toolkit.get(host.os.family, ())
        )
    if p is not None and req.cudnn and cudnn_major is not None:
        cudnn = tuple(
            n.format(cudnn_major=req.cudnn.split(".")[0], cuda_major=cudnn_major, cudnn=req.cudnn)
            for n in p.cudnn.get(host.os.family, ())
        )
    indexes = dedupe([fw.index_url for fw in combo])
    pypi = k.t.pypi_index
    index_url = next((i for i in indexes if i != pypi), pypi)
    extra = [i for i in indexes if i != index_url]
    if index_url != pypi and any(fw.name != "torch" for fw in combo) and pypi not in extra:
        extra.append(pypi)
    if index_url != pypi and pypi not in extra:
        extra.append(pypi)  # torch's own dependencies (filelock, sympy, nvidia-*) come from PyPI
    return PackagePlan(
        os_family=host.os.family,
        driver=driver,
        fabric_manager=fabric_manager,
        cuda_toolkit=cuda_toolkit,
        cudnn=cudnn,
        pip=PipPlan(index_url, tuple(extra), tuple(fw.requirement for fw in combo)),
    )


def dedupe(items: Sequence[str]) -> list[str]:
    """``items`` in order, each once."""
    out: list[str] = []
    for i in items:
        if i not in out:
            out.append(i)
    return out
