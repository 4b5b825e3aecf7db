"""``provision.lock``: the resolved versions per host group, typed, and its one reader and writer.

The file is JSON (indent 2, a fixed key order, a trailing newline) so that it diffs well and
the same resolution always writes the same bytes::

    {"schema": "provision.lock/2",
     "knowledge": {"version": ..., "sha256": ...},
     "groups": [{"name": ..., "hosts": [...], "host": {...}, "stack": {...},
                 "packages": {...}, "python_packages": [...],
                 "warnings": [...], "reasons": [...]}]}

``host`` and ``stack`` are exactly the ``host`` and ``stack`` of ``provision resolve --json``
(:class:`ResolvedHost`, :class:`Stack`); ``packages`` is the package plan (:class:`PackagePlan`);
``python_packages`` is the wheel closure of the frameworks (:class:`PythonPackage`, sorted by
name; written by :mod:`provision.fleet.closure`), empty where none was resolved. :func:`parse_lock`
validates once: a malformed lock is bad input (exit 2) naming the key, and so is a lock of the
older schema (``/1``, before the package plan): it is regenerated, never read half-way.
Reading and writing the file itself is :mod:`provision.files`' (``stack/`` and the model are pure).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from provision.errors import BadInput
from provision.model._json import REGENERATE
from provision.model.host import ResolvedHost
from provision.model.packages import PackagePlan
from provision.model.stack import Stack

SCHEMA = "provision.lock/2"
OLD_SCHEMAS = ("provision.lock/1",)
GROUP_KEYS = ("name", "hosts", "host", "stack", "packages", "python_packages", "warnings", "reasons")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")
# PEP 503's normalised name, as packaging.utils.canonicalize_name has it (the model imports nothing
# outside the standard library): the closure is sorted by it.
_SEPARATORS = re.compile(r"[-_.]+")


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
            raise BadInput(f"{where} is not an object of {', '.join(keys)} (text)", REGENERATE)
        pkg = cls(*(str(doc[k]) for k in keys))
        for ok, what in (
            (_NAME.fullmatch(pkg.name), "name"),
            (_VERSION.fullmatch(pkg.version), "version"),
            (_SHA256.fullmatch(pkg.sha256), "sha256 (64 lower-case hex digits)"),
        ):
            if not ok:
                raise BadInput(f"{where} has a malformed {what}", REGENERATE)
        return pkg


@dataclass(frozen=True)
class LockGroup:
    """Hosts that share one resolved stack (same GPU, count, OS, arch)."""

    name: str
    hosts: list[str]
    host: ResolvedHost
    stack: Stack
    packages: PackagePlan | None = None  # None: a lock without one (written as {})
    python_packages: list[PythonPackage] = field(default_factory=list)  # the wheel closure, by name
    warnings: list[dict[str, str]] = field(default_factory=list)  # {code, message}: the rules' caveats
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hosts": list(self.hosts),
            "host": self.host.to_json(),
            "stack": self.stack.to_json(),
            "packages": self.packages.to_json() if self.packages else {},
            "python_packages": [p.to_json() for p in sorted(self.python_packages, key=_by_name)],
            "warnings": [dict(w) for w in self.warnings],
            "reasons": list(self.reasons),
        }

    @classmethod
    def from_json(cls, g: Any, where: str = "lock group") -> LockGroup:
        """A group from its JSON object; BadInput naming the key when a part is malformed."""
        if not isinstance(g, Mapping) or any(k not in g for k in ("name", "hosts", "host", "stack")):
            raise BadInput(f"{where} lacks name/hosts/host/stack", REGENERATE)
        name = g["name"]
        hosts = g["hosts"]
        if not isinstance(name, str) or not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise BadInput(f"{where}'s name is not text or its hosts not a list of names", REGENERATE)
        packages = g.get("packages")
        if packages and not isinstance(packages, Mapping):
            raise BadInput(f"{where}'s packages is not an object", REGENERATE)
        closure = g.get("python_packages") or []  # a /2 lock from before the closure: none
        if not isinstance(closure, list):
            raise BadInput(f"lock group {name!r}: python_packages is not a list", REGENERATE)
        warnings = g.get("warnings") or []
        if not isinstance(warnings, list) or not all(
            isinstance(w, Mapping) and all(isinstance(v, str) for v in w.values()) for w in warnings
        ):
            raise BadInput(f"lock group {name!r}: warnings is not a list of {{code, message}}", REGENERATE)
        reasons = g.get("reasons") or []
        if not isinstance(reasons, list):
            raise BadInput(f"lock group {name!r}: reasons is not a list", REGENERATE)
        return cls(
            name=name,
            hosts=list(hosts),
            host=ResolvedHost.from_json(g["host"], f"lock group {name!r}: host"),
            stack=Stack.from_json(g["stack"], f"lock group {name!r}: stack"),
            packages=PackagePlan.from_json(packages) if packages else None,
            python_packages=[
                PythonPackage.from_json(p, f"lock group {name!r}: python_packages[{i}]") for i, p in enumerate(closure)
            ],
            warnings=[{str(k): str(v) for k, v in w.items()} for w in warnings],
            reasons=[str(r) for r in reasons],
        )


@dataclass(frozen=True)
class Lock:
    knowledge: dict[str, str]  # version, sha256: the knowledge the groups were resolved with
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

    @classmethod
    def from_json(cls, doc: Any, where: str = "provision.lock") -> Lock:
        """A lock from its JSON document, validated once (BadInput naming what is wrong)."""
        if isinstance(doc, dict) and doc.get("schema") in OLD_SCHEMAS:
            raise BadInput(
                f"{where} is a {doc['schema']} file, written before the package plan (this provision reads {SCHEMA})",
                REGENERATE,
            )
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            found = doc.get("schema") if isinstance(doc, dict) else None
            raise BadInput(f"{where} is not a {SCHEMA} file (schema: {found!r})", REGENERATE)
        knowledge = doc.get("knowledge")
        groups = doc.get("groups")
        if not isinstance(knowledge, dict) or not isinstance(groups, list):
            raise BadInput(f"{where} lacks `knowledge` or `groups`", REGENERATE)
        out = [LockGroup.from_json(g, f"{where}: group {i}") for i, g in enumerate(groups)]
        return cls({str(k): str(v) for k, v in knowledge.items()}, out)


def find_group(lock: Lock, host: str) -> LockGroup | None:
    """The group that lists ``host``; None when none does."""
    for group in lock.groups:
        if host in group.hosts:
            return group
    return None


def _by_name(p: PythonPackage) -> tuple[str, str]:
    return (_SEPARATORS.sub("-", p.name).lower(), p.version)


def dumps_lock(lock: Lock) -> str:
    """The lock's bytes: what :func:`parse_lock` reads back to an equal :class:`Lock`."""
    return json.dumps(lock.to_json(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def parse_lock(text: str, where: str = "provision.lock") -> Lock:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where} is not valid JSON (line {exc.lineno})", REGENERATE) from None
    except RecursionError:  # json nests by recursion: a hostile lock is bad input, not an internal error
        raise BadInput(f"{where} nests too deep to be a lock", REGENERATE) from None
    return Lock.from_json(doc, where)
