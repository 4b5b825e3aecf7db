"""The packaging table (``data/packaging.yaml``): typed rows, their loader and the one row lookup.

Owns what NVIDIA's packaging looks like per OS, install method and driver branch range: the
signed repositories (URL templates, key file, full fingerprint), and per component the package
names with version expressions, holds, module streams, headers and services. The package plan
(:mod:`provision.stack.packages`) fills the templates; nothing else in provision names packages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provision.model.packages import FINGERPRINT, MANAGERS, ROLES

COMPONENTS = ("dkms", "driver", "fabric_manager", "nvlsm", "imex", "cuda_toolkit", "cudnn", "container_toolkit", "dcgm")


class PackagingError(ValueError):
    """data/packaging.yaml is malformed (the loader turns it into DataError)."""


@dataclass(frozen=True)
class RepoTemplate:
    """A signed repository for a set of OS releases; ``url``/``key_url`` are templates."""

    id: str
    name: str  # what the lock and the roles call it: cuda | container-toolkit
    os: tuple[str, ...]
    url: str
    key_url: str
    key_fingerprint: str | None  # None: not verified yet (the plan refuses the repository)
    note: str
    source: tuple[str, ...]
    confidence: str


@dataclass(frozen=True)
class PackageTemplate:
    name: str
    version: str | None  # the manager's version expression; None: the host/repository decides
    hold: bool
    repository: str | None  # where it comes from: the row's repository unless the entry says


@dataclass(frozen=True)
class BranchRange:
    """``from_`` and newer, below ``below``; None: open on that side."""

    from_: int | None = None
    below: int | None = None

    def has(self, branch: int | None) -> bool:
        if branch is None:
            return self.from_ is None and self.below is None
        return (self.from_ is None or branch >= self.from_) and (self.below is None or branch < self.below)

    def overlaps(self, other: BranchRange) -> bool:
        lo = max(self.from_ or 0, other.from_ or 0)
        hi = min(self.below or 10**6, other.below or 10**6)
        return lo < hi

    def __str__(self) -> str:
        if self.from_ is None and self.below is None:
            return "every branch"
        if self.below is None:
            return f"from {self.from_}"
        if self.from_ is None:
            return f"below {self.below}"
        return f"{self.from_} to {self.below - 1}"


@dataclass(frozen=True)
class PackagingRow:
    component: str
    role: str
    manager: str
    os: tuple[str, ...]
    method: str | None  # nvidia-repo | distro; None: any
    branches: BranchRange
    kernel_modules: str | None  # open | proprietary; None: either
    gpus: tuple[str, ...]  # () any GPU
    cudnn_major: int | None  # cuDNN rows: the cuDNN major whose package names they carry; None: any
    repository: str | None
    module_streams: tuple[str, ...]
    install: tuple[PackageTemplate, ...]
    headers: tuple[str, ...]
    services: tuple[str, ...]
    note: str
    source: tuple[str, ...]
    confidence: str

    def applies(
        self,
        os_id: str,
        *,
        method: str | None = None,
        branch: int | None = None,
        kernel_modules: str | None = None,
        gpu: str | None = None,
        cudnn_major: int | None = None,
    ) -> bool:
        """Whether this row is the one for that host and driver (None arguments: not asked)."""
        return (
            os_id in self.os
            and (self.method is None or method is None or self.method == method)
            and (branch is None or self.branches.has(branch))
            and (self.kernel_modules is None or kernel_modules is None or self.kernel_modules == kernel_modules)
            and (not self.gpus or gpu in self.gpus)
            and (self.cudnn_major is None or cudnn_major is None or self.cudnn_major == cudnn_major)
        )


@dataclass(frozen=True)
class Packaging:
    repositories: tuple[RepoTemplate, ...]
    rows: tuple[PackagingRow, ...]
    torch_index: str
    pypi_index: str

    def row(
        self,
        component: str,
        os_id: str,
        *,
        method: str | None = None,
        branch: int | None = None,
        kernel_modules: str | None = None,
        gpu: str | None = None,
        cudnn_major: int | None = None,
    ) -> PackagingRow | None:
        """The one row of ``component`` for that host and driver; None where the table has none."""
        for r in self.rows:
            if r.component == component and r.applies(
                os_id, method=method, branch=branch, kernel_modules=kernel_modules, gpu=gpu, cudnn_major=cudnn_major
            ):
                return r
        return None

    def repository(self, name: str, os_id: str) -> RepoTemplate | None:
        return next((r for r in self.repositories if r.name == name and os_id in r.os), None)

    def os_ids(self) -> set[str]:
        return {o for r in self.rows for o in r.os}


def build_packaging(doc: Mapping[str, Any]) -> Packaging:
    """The typed table from the ``packaging`` section; PackagingError names the bad entry."""
    repos = tuple(_repo(r) for r in _list(doc, "repositories"))
    rows = tuple(_row(i, r) for i, r in enumerate(_list(doc, "rows")))
    ids = [r.id for r in repos]
    if len(set(ids)) != len(ids):
        raise PackagingError("repository ids are not unique")
    for r in rows:
        if r.repository is not None:
            for o in r.os:
                if not any(t.name == r.repository and o in t.os for t in repos):
                    raise PackagingError(f"row {r.component}/{r.manager}: no repository `{r.repository}` for {o}")
    return Packaging(
        repositories=repos,
        rows=rows,
        torch_index=str(doc.get("torch_index", "https://download.pytorch.org/whl")),
        pypi_index=str(doc.get("pypi_index", "https://pypi.org/simple")),
    )


def _list(doc: Mapping[str, Any], key: str) -> Sequence[Mapping[str, Any]]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise PackagingError(f"`{key}` is not a list of objects")
    return value


def _strs(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    return (str(v),) if isinstance(v, str) else tuple(str(x) for x in v)


def _repo(r: Mapping[str, Any]) -> RepoTemplate:
    fpr = r.get("key_fingerprint")
    if fpr is not None and not FINGERPRINT.match(str(fpr)):
        raise PackagingError(f"repository {r.get('id')}: key_fingerprint is not 40 upper-case hex")
    return RepoTemplate(
        id=str(r["id"]),
        name=str(r["name"]),
        os=_strs(r["os"]),
        url=str(r["url"]),
        key_url=str(r["key_url"]),
        key_fingerprint=None if fpr is None else str(fpr),
        note=str(r.get("note", "")),
        source=_strs(r.get("source")),
        confidence=str(r.get("confidence", "medium")),
    )


def _row(i: int, r: Mapping[str, Any]) -> PackagingRow:
    where = f"row {i} ({r.get('component')})"
    component, role, manager = str(r.get("component")), str(r.get("role")), str(r.get("manager"))
    if component not in COMPONENTS or role not in ROLES or manager not in MANAGERS:
        raise PackagingError(f"{where}: unknown component, role or manager")
    b = r.get("branches") or {}
    row_repo = None if r.get("repository") is None else str(r["repository"])
    install = tuple(
        PackageTemplate(
            str(p["name"]),
            None if p.get("version") is None else str(p["version"]),
            bool(p.get("hold")),
            (None if p["repository"] is None else str(p["repository"])) if "repository" in p else row_repo,
        )
        for p in r.get("install") or []
    )
    if not install:
        raise PackagingError(f"{where}: installs nothing")
    streams = _strs(r.get("module_streams"))
    if streams and manager != "dnf":
        raise PackagingError(f"{where}: module streams are dnf's")
    return PackagingRow(
        component=component,
        role=role,
        manager=manager,
        os=_strs(r["os"]),
        method=None if r.get("method") is None else str(r["method"]),
        branches=BranchRange(
            None if b.get("from") is None else int(b["from"]), None if b.get("below") is None else int(b["below"])
        ),
        kernel_modules=None if r.get("kernel_modules") is None else str(r["kernel_modules"]),
        gpus=_strs(r.get("gpus")),
        cudnn_major=None if r.get("cudnn_major") is None else int(r["cudnn_major"]),
        repository=row_repo,
        module_streams=streams,
        install=install,
        headers=_strs(r.get("headers")),
        services=_strs(r.get("services")),
        note=str(r.get("note", "")),
        source=_strs(r.get("source")),
        confidence=str(r.get("confidence", "medium")),
    )
