"""The typed model: the records the stages hand each other, and their one JSON reader each.

Pure, frozen dataclasses that import nothing of provision but :mod:`provision.errors`. Each record
written as JSON is read back by its ``from_json``, which validates once (bad input names the key,
exit 2); ``to_json`` writes the same bytes the contract documents (``provision.lock/2``).
"""

from provision.model.components import COMPONENTS, Component
from provision.model.host import ResolvedHost
from provision.model.lock import SCHEMA, Lock, LockGroup, PythonPackage, dumps_lock, find_group, parse_lock
from provision.model.packages import Install, PackagePlan, PipPlan, Repository, Service
from provision.model.stack import DriverPin, FrameworkPin, Stack, SystemCudnn

__all__ = [
    "COMPONENTS",
    "SCHEMA",
    "Component",
    "DriverPin",
    "FrameworkPin",
    "Install",
    "Lock",
    "LockGroup",
    "PackagePlan",
    "PipPlan",
    "PythonPackage",
    "Repository",
    "ResolvedHost",
    "Service",
    "Stack",
    "SystemCudnn",
    "dumps_lock",
    "find_group",
    "parse_lock",
]
