"""Making a lock: a resolution as a lock group, the groups stamped with the knowledge (pure).

The records and their one reader and writer are :mod:`provision.model.lock` (re-exported here for
the stages that make and read locks); the file itself is read and written by :mod:`provision.files`.
Drift against a host is :mod:`provision.stack.drift`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from provision.matrix import load
from provision.model.lock import SCHEMA, Lock, LockGroup, PythonPackage, dumps_lock, find_group, parse_lock

if TYPE_CHECKING:
    from provision.matrix import Knowledge
    from provision.stack.resolution import Resolution

__all__ = [
    "SCHEMA",
    "Lock",
    "LockGroup",
    "PythonPackage",
    "build_lock",
    "dumps_lock",
    "find_group",
    "lock_group",
    "parse_lock",
]


def lock_group(name: str, hosts: Sequence[str], resolution: Resolution) -> LockGroup:
    """The lock group of ``hosts``, which ``resolution`` resolved."""
    return LockGroup(
        name=name,
        hosts=list(hosts),
        host=resolution.host,
        stack=resolution.stack,
        packages=resolution.packages,
        warnings=[w.to_json() for w in resolution.warnings],
        reasons=list(resolution.reasons),
    )


def build_lock(groups: Sequence[LockGroup], knowledge: Knowledge | None = None) -> Lock:
    """A lock over ``groups`` stamped with the knowledge they were resolved with."""
    if knowledge is None:
        knowledge = load()
    return Lock({"version": knowledge.version, "sha256": knowledge.sha256}, list(groups))
