"""The package plan: the lock's ``packages`` (what every role installs, in order, and how it is
held), and its one reader. The plan is built from the packaging table by
:func:`provision.stack.packages.package_plan`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from provision.errors import BadInput

MANAGERS = ("apt", "dnf")
FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")
# The roles that install packages (the plan's ``role``), in the order they run.
ROLES = ("nvidia_driver", "fabric_manager", "cuda_toolkit", "cudnn", "container_toolkit", "dcgm")
REGENERATE = "regenerate the lock with `provision plan`"


R = TypeVar("R", bound="_Record")


class _Record:
    """A contract object of text fields: its JSON is its fields in order (``OPTIONAL`` may be null)."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls: type[R], doc: Mapping[str, Any], where: str) -> R:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        if any(n not in doc for n in names):  # null is a value; a missing key is a malformed lock
            raise _bad(where.rstrip("."), f"an object with {', '.join(names)}")
        return cls(**{n: (_text if n in cls.OPTIONAL else _req_text)(doc, n, where) for n in names})


@dataclass(frozen=True)
class Repository(_Record):
    """A signed repository a role adds (through signed_repo) before it installs from it."""

    OPTIONAL = ("key_fingerprint",)
    name: str  # cuda | container-toolkit
    url: str
    key_url: str
    key_fingerprint: str | None  # None only in a plan that check_plannable refuses


@dataclass(frozen=True)
class Install(_Record):
    """One package: ``version`` is the manager's expression (apt ``=``, dnf ``-``); None: unversioned."""

    OPTIONAL = ("version", "repository")
    name: str
    version: str | None
    role: str
    repository: str | None  # a Repository's name; None: the OS's own archive


@dataclass(frozen=True)
class Service(_Record):
    name: str  # the systemd unit
    role: str


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
    """The lock's ``packages``: what every role installs, in order, and how it is held."""

    manager: str  # apt | dnf
    repositories: tuple[Repository, ...] = ()
    module_streams: tuple[str, ...] = ()
    install: tuple[Install, ...] = ()
    holds: tuple[str, ...] = ()
    services: tuple[Service, ...] = ()
    pip: PipPlan | None = None

    def for_role(self, role: str) -> tuple[Install, ...]:
        """The packages ``role`` installs, in order."""
        return tuple(i for i in self.install if i.role == role)

    def to_json(self) -> dict[str, Any]:
        """The contract's object (its key order is part of the lock's bytes)."""
        return {
            "manager": self.manager,
            "repositories": [r.to_json() for r in self.repositories],
            "module_streams": list(self.module_streams),
            "install": [i.to_json() for i in self.install],
            "holds": list(self.holds),
            "services": [s.to_json() for s in self.services],
            "pip": self.pip.to_json() if self.pip else None,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PackagePlan:
        """A lock's ``packages`` object; BadInput (one line) when a part has the wrong shape."""
        manager = _text(doc, "manager")
        if manager not in MANAGERS:
            raise _bad("manager", "apt or dnf")
        pip = doc.get("pip")
        if pip is not None and not isinstance(pip, Mapping):
            raise _bad("pip", "an object")
        plan = cls(
            manager=manager,
            repositories=tuple(
                Repository.from_json(r, f"repositories[{i}].") for i, r in _objects(doc, "repositories")
            ),
            module_streams=_texts(doc, "module_streams"),
            install=tuple(Install.from_json(p, f"install[{i}].") for i, p in _objects(doc, "install")),
            holds=_texts(doc, "holds"),
            services=tuple(Service.from_json(s, f"services[{i}].") for i, s in _objects(doc, "services")),
            pip=PipPlan.from_json(pip) if pip else None,
        )
        _check_plan(plan)
        return plan


def _check_plan(plan: PackagePlan) -> None:
    """What the shapes alone do not say: the parts refer to each other and to known roles."""
    for i, r in enumerate(plan.repositories):
        if r.key_fingerprint is not None and not FINGERPRINT.match(r.key_fingerprint):
            raise _bad(f"repositories[{i}].key_fingerprint", "a full (40 upper-case hex digit) fingerprint")
    repos = {r.name for r in plan.repositories}
    for i, e in enumerate(plan.install):
        if e.role not in ROLES:
            raise _bad(f"install[{i}].role", f"one of {', '.join(ROLES)}")
        if e.version is not None and (not e.version or " " in e.version):
            raise _bad(f"install[{i}].version", "a version expression or null")
        if e.repository is not None and e.repository not in repos:
            raise _bad(f"install[{i}].repository", f"the name of an entry of packages.repositories ({e.repository!r})")
    names = {e.name for e in plan.install}
    for h in plan.holds:
        if h not in names:
            raise _bad("holds", f"a list of installed names ({h!r} is not in packages.install)")
    for s in plan.module_streams:
        if plan.manager != "dnf" or ":" not in s or " " in s:
            raise _bad("module_streams", "a list of dnf module:stream names")
    for i, svc in enumerate(plan.services):
        if svc.role not in ROLES:
            raise _bad(f"services[{i}].role", f"one of {', '.join(ROLES)}")


def _bad(where: str, what: str) -> BadInput:
    return BadInput(f"the lock's packages.{where} is not {what}", REGENERATE)


def _objects(doc: Mapping[str, Any], key: str) -> list[tuple[int, Mapping[str, Any]]]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise _bad(key, "a list of objects")
    return list(enumerate(value))


def _text(doc: Mapping[str, Any], key: str, where: str = "") -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise _bad(where + key, "text")
    return value


def _req_text(doc: Mapping[str, Any], key: str, where: str) -> str:
    value = _text(doc, key, where)
    if not value:
        raise _bad(where + key, "text")
    return value


def _texts(doc: Mapping[str, Any], key: str, where: str = "") -> tuple[str, ...]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(where + key, "a list of text")
    return tuple(value)
