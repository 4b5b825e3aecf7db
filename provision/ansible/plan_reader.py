"""The lock group's package plan (lock schema provision.lock/2, the contract's ``packages``), read
into typed values and turned, mechanically, into each role's package variables.

The plan names every package, version expression, hold, repository, module stream and service;
this module checks their shape and splits them by role, and derives nothing: a role installs
exactly ``<role>_packages``, holds ``<role>_holds``, adds ``<role>_repositories`` first and
enables ``<role>_services`` (the roles' defaults/main.yml document these).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provision.ansible.checks import _check_package, _check_text, _check_url
from provision.errors import BadInput

# The roles a plan's install entries and services belong to (site.yml's order).
PACKAGE_ROLES: tuple[str, ...] = (
    "nvidia_driver",
    "fabric_manager",
    "cuda_toolkit",
    "cudnn",
    "container_toolkit",
    "dcgm",
)
MANAGERS = ("apt", "dnf")


@dataclass(frozen=True)
class Repository:
    name: str
    url: str
    key_url: str
    key_fingerprint: str

    def to_vars(self) -> dict[str, str]:
        return {"name": self.name, "url": self.url, "key_url": self.key_url, "key_fingerprint": self.key_fingerprint}


@dataclass(frozen=True)
class Install:
    name: str
    version: str | None
    role: str
    repository: str | None


@dataclass(frozen=True)
class Service:
    name: str
    role: str


@dataclass(frozen=True)
class RolePlan:
    """The lock group's ``packages`` (without ``pip``, which the frameworks role reads)."""

    manager: str
    repositories: tuple[Repository, ...] = ()
    module_streams: tuple[str, ...] = ()
    install: tuple[Install, ...] = ()
    holds: tuple[str, ...] = ()
    services: tuple[Service, ...] = ()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RolePlan:
        """The contract's ``packages`` object; BadInput naming the part with the wrong shape."""
        manager = doc.get("manager")
        if manager not in MANAGERS:
            raise _bad("manager", "apt or dnf")
        repos = tuple(_repository(r, i) for i, r in enumerate(_list(doc, "repositories")))
        names = {r.name for r in repos}
        install = tuple(_install(e, i, names) for i, e in enumerate(_list(doc, "install")))
        installed = {e.name for e in install}
        holds = tuple(_check_package(h, "packages.holds entry") for h in _list(doc, "holds"))
        for h in holds:
            if h not in installed:
                raise _bad("holds", f"a list of installed names ({h!r} is not in packages.install)")
        streams = tuple(_check_text(s, "packages.module_streams entry") for s in _list(doc, "module_streams"))
        for s in streams:
            if ":" not in s or " " in s or manager != "dnf":
                raise _bad("module_streams", "a list of dnf module:stream names")
        services = tuple(_service(s, i) for i, s in enumerate(_list(doc, "services")))
        return cls(manager, repos, streams, install, holds, services)

    def role_vars(self) -> dict[str, Any]:
        """Every role's ``_packages``, ``_holds``, ``_repositories``, ``_services``, and the driver's streams."""
        out: dict[str, Any] = {}
        for role in PACKAGE_ROLES:
            mine = [e for e in self.install if e.role == role]
            names = {e.name for e in mine}
            used = {e.repository for e in mine}
            out[f"{role}_packages"] = [{"name": e.name, "version": e.version} for e in mine]
            out[f"{role}_holds"] = [h for h in self.holds if h in names]
            out[f"{role}_repositories"] = [r.to_vars() for r in self.repositories if r.name in used]
            out[f"{role}_services"] = [s.name for s in self.services if s.role == role]
        out["nvidia_driver_module_streams"] = list(self.module_streams)
        return out


def _bad(where: str, what: str) -> BadInput:
    return BadInput(f"the lock's packages.{where} is not {what}", "regenerate the lock with `provision plan`")


def _list(doc: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise _bad(key, "a list")
    return value


def _entry(value: Any, where: str, keys: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or any(k not in value for k in keys):
        raise _bad(where, f"an object with {', '.join(keys)}")
    return value


def _repository(value: Any, i: int) -> Repository:
    doc = _entry(value, f"repositories[{i}]", ("name", "url", "key_url", "key_fingerprint"))
    fingerprint = _check_text(doc["key_fingerprint"], f"packages.repositories[{i}].key_fingerprint")
    if len(fingerprint) != 40 or any(c not in "0123456789ABCDEFabcdef" for c in fingerprint):
        raise _bad(f"repositories[{i}].key_fingerprint", "a full (40 hex digit) fingerprint")
    return Repository(
        _check_package(doc["name"], f"packages.repositories[{i}].name"),
        _check_url(_check_text(doc["url"], "repository URL"), "repository URL"),
        _check_url(_check_text(doc["key_url"], "repository key URL"), "repository key URL"),
        fingerprint.upper(),
    )


def _install(value: Any, i: int, repositories: set[str]) -> Install:
    doc = _entry(value, f"install[{i}]", ("name", "version", "role"))
    role = doc["role"]
    if role not in PACKAGE_ROLES:
        raise _bad(f"install[{i}].role", f"one of {', '.join(PACKAGE_ROLES)}")
    version = doc["version"]
    if version is not None:
        version = _check_text(version, f"packages.install[{i}].version")
        if not version or " " in version:
            raise _bad(f"install[{i}].version", "a version expression or null")
    repository = doc.get("repository")
    if repository is not None and repository not in repositories:
        raise _bad(
            f"install[{i}].repository", f"the name of an entry of packages.repositories or null ({repository!r})"
        )
    return Install(_check_package(doc["name"], f"packages.install[{i}].name"), version, role, repository)


def _service(value: Any, i: int) -> Service:
    doc = _entry(value, f"services[{i}]", ("name", "role"))
    if doc["role"] not in PACKAGE_ROLES:
        raise _bad(f"services[{i}].role", f"one of {', '.join(PACKAGE_ROLES)}")
    return Service(_check_package(doc["name"], f"packages.services[{i}].name"), doc["role"])
