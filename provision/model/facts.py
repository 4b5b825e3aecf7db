"""What the resolver reads of a probe: :class:`ProbedHost`, built once at the edge.

``provision.hosts`` builds it from its :class:`~provision.hosts.facts.HostFacts`
(``probed_host``); ``from_json`` reads it from the ``facts`` object of ``provision probe --json``.
The resolver (``provision.stack``) reads only this record, never the facts themselves: the stack
stays pure and does not import the hosts package (docs/explanation/design.md's arrows).
The Ubuntu driver index lives here, not in ``hosts/``, because both sides read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from provision.errors import BadInput


@dataclass(frozen=True)
class AptVersions:
    """``apt-cache policy``: the installed version and the one apt would install (None: none)."""

    installed: str | None
    candidate: str | None


@dataclass(frozen=True)
class PrecompiledModules:
    """Canonical's signed module package for the running kernel (linux-restricted-modules).

    ``linux-modules-nvidia-<branch>-server[-open]-<uname -r>``: its own version is the kernel's;
    the driver it was built for is the ``nvidia-kernel-common-<branch>-server (>= X)`` it depends on.
    """

    package: str
    branch: int
    open: bool
    version: str
    driver_version: str | None


@dataclass(frozen=True)
class UbuntuDriverIndex:
    """What the host's own apt index offers for Ubuntu's ``distro`` driver (read at probe).

    ``kernel_flavour``: the flavour of Canonical's module metapackages for the running kernel
    (``generic``, ``generic-hwe-22.04``, ``aws``, ...); ``modules``: the precompiled module packages
    for the running kernel; ``userspace``: the headless and utils packages of those branches.
    ``lists`` False: apt had no package lists (nothing could be read; ``apt-get update`` first).
    """

    kernel_flavour: str | None
    modules: tuple[PrecompiledModules, ...] = ()
    userspace: Mapping[str, AptVersions] = field(default_factory=dict)
    lists: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel_flavour": self.kernel_flavour,
            "lists": self.lists,
            "modules": [asdict(m) for m in self.modules],
            "userspace": {name: asdict(v) for name, v in self.userspace.items()},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> UbuntuDriverIndex:
        """The ``ubuntu_driver_index`` object of ``probe --json`` (bad input when malformed)."""
        what = "facts.ubuntu_driver_index"
        try:
            modules = tuple(
                PrecompiledModules(
                    package=_text(m["package"], f"{what}.modules.package"),
                    branch=_int(m["branch"], f"{what}.modules.branch"),
                    open=bool(m["open"]),
                    version=_text(m["version"], f"{what}.modules.version"),
                    driver_version=_opt_text(m.get("driver_version"), f"{what}.modules.driver_version"),
                )
                for m in _list(doc.get("modules"), f"{what}.modules")
            )
            userspace = {
                str(name): AptVersions(
                    _opt_text(v.get("installed"), f"{what}.userspace.installed"),
                    _opt_text(v.get("candidate"), f"{what}.userspace.candidate"),
                )
                for name, v in _mapping(doc.get("userspace"), f"{what}.userspace").items()
            }
        except (KeyError, AttributeError, TypeError) as exc:
            raise BadInput(f"{what}: malformed ({exc})", _HINT) from None
        return cls(
            kernel_flavour=_opt_text(doc.get("kernel_flavour"), f"{what}.kernel_flavour"),
            modules=modules,
            userspace=userspace,
            lists=bool(doc.get("lists", True)),
        )


@dataclass(frozen=True)
class ProbedGpu:
    """One GPU as the probe found it: the knowledge's model name when it knew the PCI ID."""

    model: str | None
    pci_id: str
    # NVML's compute capability (a host with a loaded driver): what tells an unknown model's
    # architecture when its device ID does not (provision.matrix Knowledge.assumed_gpu)
    compute_capability: str | None = None


@dataclass(frozen=True)
class ProbedHost:
    """Exactly what the resolver needs from a probe.

    ``os``: the ``ID-VERSION_ID`` slug (``ubuntu-22.04``); ``gpus``: what was on the PCI bus;
    ``nvswitch_count``: NVSwitches seen (None: not known); ``instance_type``: the EC2 instance type
    when the host is one; ``kernel``: ``uname -r``; ``ubuntu_driver_index``: what the host's apt
    index offers for Ubuntu's distro driver (Ubuntu hosts only); ``driver_version``: the NVIDIA
    driver found (loaded, else installed), which a stack that leaves the driver alone runs on.
    """

    os: str | None = None
    arch: str | None = None
    gpus: tuple[ProbedGpu, ...] = ()
    nvswitch_count: int | None = None
    instance_type: str | None = None
    kernel: str | None = None
    ubuntu_driver_index: UbuntuDriverIndex | None = None
    driver_version: str | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ProbedHost:
        """The ``facts`` object of ``provision probe --json``, validated once (bad input when malformed)."""
        gpus = []
        for g in _list(doc.get("gpus"), "facts.gpus"):
            if not isinstance(g, Mapping):
                raise BadInput("facts.gpus: each GPU must be an object", _HINT)
            gpus.append(
                ProbedGpu(
                    _opt_text(g.get("model"), "facts.gpus.model"),
                    str(g.get("pci_id") or ""),
                    _opt_text(g.get("compute_capability"), "facts.gpus.compute_capability"),
                )
            )
        index = doc.get("ubuntu_driver_index")
        count = doc.get("nvswitch_count")
        return cls(
            os=_opt_text(doc.get("os"), "facts.os"),
            arch=_opt_text(doc.get("arch"), "facts.arch"),
            gpus=tuple(gpus),
            nvswitch_count=None if count is None else _int(count, "facts.nvswitch_count"),
            instance_type=_opt_text(doc.get("ec2_instance_type"), "facts.ec2_instance_type"),
            kernel=_opt_text(doc.get("kernel"), "facts.kernel"),
            ubuntu_driver_index=UbuntuDriverIndex.from_json(_mapping(index, "facts.ubuntu_driver_index"))
            if index
            else None,
            driver_version=_opt_text(doc.get("driver_version"), "facts.driver_version"),
        )


_HINT = "give the facts object `provision probe --json` prints"


def _opt_text(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{what}: expected text, got {type(value).__name__}", _HINT)
    return value


def _text(value: Any, what: str) -> str:
    text = _opt_text(value, what)
    if text is None:
        raise BadInput(f"{what}: missing", _HINT)
    return text


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{what}: expected a whole number, got {value!r}", _HINT)
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise BadInput(f"{what}: expected a list", _HINT)
    return list(value)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadInput(f"{what}: expected an object", _HINT)
    return value
