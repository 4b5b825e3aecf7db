"""``provision.lock``: the resolved versions per host group (drift against a host: :mod:`provision.stack.drift`).

The file is JSON (indent 2, a fixed key order, a trailing newline) so that it diffs well and
the same resolution always writes the same bytes::

    {"schema": "provision.lock/2",
     "knowledge": {"version": ..., "sha256": ...},
     "groups": [{"name": ..., "hosts": [...], "host": {...}, "stack": {...},
                 "packages": {...}, "python_packages": [...],
                 "warnings": [...], "reasons": [...]}]}

``host`` and ``stack`` are exactly the ``host`` and ``stack`` of ``provision resolve --json``;
``packages`` is the package plan (:class:`provision.stack.packages.PackagePlan`);
``python_packages`` is the wheel closure of the frameworks (:class:`PythonPackage`, sorted by
name; written by :mod:`provision.fleet.closure`), empty where none was resolved. A missing or
unreadable lock is bad input (exit 2), and so is a lock of the older schema (``/1``, before
the package plan): it is regenerated, never read half-way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from provision.errors import BadInput
from provision.files import write_durably
from provision.stack.packages import PackagePlan

if TYPE_CHECKING:
    from provision.matrix import Knowledge
    from provision.stack.resolution import Resolution

SCHEMA = "provision.lock/2"
OLD_SCHEMAS = ("provision.lock/1",)
GROUP_KEYS = ("name", "hosts", "host", "stack", "packages", "python_packages", "warnings", "reasons")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")


@dataclass(frozen=True)
class PythonPackage:
    """One wheel of a group's closure: hosts install exactly this file (``--require-hashes
    --no-deps``) from ``index``, the index it was resolved on ("": the install's own sources,
    find-links, where the closure was resolved without an index)."""

    name: str
    version: str
    sha256: str
    url: str
    index: str

    def requirement(self) -> str:
        """The hashed requirement line pip and uv install from (``name==version --hash=sha256:...``)."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "url": self.url, "index": self.index}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> PythonPackage:
        """An entry of a lock group's ``python_packages``; BadInput (one line) when malformed:
        the names and versions end up in pip's requirement files on the hosts."""
        keys = ("name", "version", "sha256", "url", "index")
        if not isinstance(doc, Mapping) or any(not isinstance(doc.get(k), str) for k in keys):
            raise BadInput(
                f"{where} is not an object of {', '.join(keys)} (text)", "regenerate it with `provision plan`"
            )
        pkg = cls(*(str(doc[k]) for k in keys))
        for ok, what in (
            (_NAME.fullmatch(pkg.name), "name"),
            (_VERSION.fullmatch(pkg.version), "version"),
            (_SHA256.fullmatch(pkg.sha256), "sha256 (64 lower-case hex digits)"),
        ):
            if not ok:
                raise BadInput(f"{where} has a malformed {what}", "regenerate it with `provision plan`")
        return pkg


@dataclass
class LockGroup:
    """Hosts that share one resolved stack (same GPU, count, OS, arch)."""

    name: str
    hosts: list[str]
    host: dict[str, Any]
    stack: dict[str, Any]
    packages: PackagePlan | None = None  # None: a lock without one (written as {})
    python_packages: list[PythonPackage] = field(default_factory=list)  # the wheel closure, by name
    warnings: list[dict[str, str]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc = {k: getattr(self, k) for k in GROUP_KEYS}
        doc["packages"] = self.packages.to_json() if self.packages else {}
        doc["python_packages"] = [p.to_json() for p in sorted(self.python_packages, key=_by_name)]
        return doc

    @classmethod
    def from_json(cls, g: Mapping[str, Any]) -> LockGroup:
        """A group from its JSON object (parse_lock has checked its shape)."""
        packages = g.get("packages")
        closure = g.get("python_packages") or []  # a /2 lock from before the closure: none
        if not isinstance(closure, list):
            raise BadInput(
                f"lock group {g['name']!r}: python_packages is not a list", "regenerate it with `provision plan`"
            )
        return cls(
            name=str(g["name"]),
            hosts=[str(h) for h in g["hosts"]],
            host=dict(g["host"]),
            stack=dict(g["stack"]),
            packages=PackagePlan.from_json(packages) if packages else None,
            python_packages=[
                PythonPackage.from_json(p, f"lock group {g['name']!r}: python_packages[{i}]")
                for i, p in enumerate(closure)
            ],
            warnings=list(g.get("warnings") or []),
            reasons=[str(r) for r in g.get("reasons") or []],
        )

    @classmethod
    def from_resolution(cls, name: str, hosts: Sequence[str], resolution: Resolution) -> LockGroup:
        doc = resolution.to_json()
        return cls(
            name=name,
            hosts=list(hosts),
            host=doc["host"],
            stack=doc["stack"],
            packages=resolution.packages,
            warnings=doc["warnings"],
            reasons=doc["reasons"],
        )


@dataclass
class Lock:
    knowledge: dict[str, str]
    groups: list[LockGroup]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "knowledge": {
                "version": self.knowledge.get("version", ""),
                "sha256": self.knowledge.get("sha256", ""),
            },
            "groups": [g.to_json() for g in self.groups],
        }

    def group_for(self, host: str) -> LockGroup:
        """The group that lists ``host``; BadInput when the lock does not cover it."""
        group = find_group(self, host)
        if group is None:
            known = sorted(h for g in self.groups for h in g.hosts)
            raise BadInput(
                f"host `{host}` is not in the lock",
                "run `provision plan` for this inventory"
                + (f" (locked hosts: {', '.join(known[:5])})" if known else ""),
                suggestions=known[:5],
            )
        return group


def _by_name(p: PythonPackage) -> tuple[str, str]:
    return (canonicalize_name(p.name), p.version)


def build_lock(groups: Sequence[LockGroup], knowledge: Knowledge | None = None) -> Lock:
    """A lock over ``groups`` stamped with the knowledge they were resolved with."""
    if knowledge is None:
        from provision.matrix import load

        knowledge = load()
    return Lock({"version": knowledge.version, "sha256": knowledge.sha256}, list(groups))


def find_group(lock: Lock, host: str) -> LockGroup | None:
    for group in lock.groups:
        if host in group.hosts:
            return group
    return None


def dumps_lock(lock: Lock) -> str:
    return json.dumps(lock.to_json(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_lock(lock: Lock, path: Path | str) -> Path:
    """Write atomically and durably (a reader never sees half a lock, nor a crash an empty one)."""
    return write_durably(Path(path), dumps_lock(lock))


def read_lock(path: Path | str) -> Lock:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"no lock file at {p}", "run `provision plan` first or pass --lock FILE") from None
    except OSError as exc:
        raise BadInput(f"cannot read lock file {p}: {exc.strerror}", "check the path and permissions") from None
    return parse_lock(text, str(p))


def parse_lock(text: str, where: str = "provision.lock") -> Lock:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{where} is not valid JSON (line {exc.lineno})", "regenerate it with `provision plan`"
        ) from None
    except RecursionError:  # json nests by recursion: a hostile lock is bad input, not an internal error
        raise BadInput(f"{where} nests too deep to be a lock", "regenerate it with `provision plan`") from None
    if isinstance(doc, dict) and doc.get("schema") in OLD_SCHEMAS:
        raise BadInput(
            f"{where} is a {doc['schema']} file, written before the package plan (this provision reads {SCHEMA})",
            "regenerate it with `provision plan`",
        )
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise BadInput(f"{where} is not a {SCHEMA} file (schema: {found!r})", "regenerate it with `provision plan`")
    knowledge = doc.get("knowledge")
    groups = doc.get("groups")
    if not isinstance(knowledge, dict) or not isinstance(groups, list):
        raise BadInput(f"{where} lacks `knowledge` or `groups`", "regenerate it with `provision plan`")
    out: list[LockGroup] = []
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or any(k not in g for k in ("name", "hosts", "host", "stack")):
            raise BadInput(f"{where}: group {i} lacks name/hosts/host/stack", "regenerate it with `provision plan`")
        packages = g.get("packages")
        if packages and not isinstance(packages, dict):
            raise BadInput(f"{where}: group {i}'s packages is not an object", "regenerate it with `provision plan`")
        out.append(LockGroup.from_json(g))
    return Lock({str(k): str(v) for k, v in knowledge.items()}, out)
