"""Host facts: the typed, JSON-serialisable :class:`HostFacts` and its summary (a ``ResolvedHost``).

Pure data: nothing here runs a command or touches a host (that is :mod:`provision.hosts.gather`)
or parses a tool's output (:mod:`provision.hosts.parse_system`, :mod:`provision.hosts.parse_packages`).
The mapping from PCI IDs to GPU models is passed in (:data:`GpuLookup`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from provision.model.defaults import STANDALONE_PYTHON_DIR
from provision.model.facts import ProbedGpu, ProbedHost, UbuntuDriverIndex
from provision.model.host import ResolvedHost

# Distributions reported as "frameworks" (the venv entry lists the CUDA wheels beside them).
FRAMEWORKS = ("torch", "torchvision", "torchaudio", "tensorflow", "tensorflow-cpu", "jax", "jaxlib")


class GpuModel(Protocol):
    """What the knowledge data says about a PCI ID (provision.matrix's Gpu satisfies this)."""

    @property
    def name(self) -> str: ...

    @property
    def compute_capability(self) -> str: ...


GpuLookup = Callable[[str], GpuModel | None]


def no_lookup(pci_id: str) -> GpuModel | None:
    return None


# ---------------------------------------------------------------------------------------------
# Typed facts


_PER_MAJOR_OS = ("rhel", "rocky", "almalinux", "centos", "ol")


@dataclass(frozen=True)
class OsRelease:
    id: str
    version_id: str
    codename: str | None = None
    pretty_name: str | None = None
    id_like: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        """``ID-VERSION_ID`` as resolve's ``--os`` takes it (``ubuntu-22.04``, ``amzn-2023``).

        Enterprise Linux rebuilds say ``VERSION_ID="9.6"`` but are one platform per major release
        (NVIDIA's repositories are ``rhel9``), so their slug is ``rhel-9``.
        """
        if not self.version_id:
            return self.id
        version = self.version_id
        if self.id in _PER_MAJOR_OS:
            version = version.split(".")[0]
        return f"{self.id}-{version}"


@dataclass(frozen=True)
class PciDevice:
    slot: str
    class_code: str  # 4 hex digits, e.g. "0302"
    vendor: str  # 4 hex digits, e.g. "10de"
    device: str
    description: str = ""

    @property
    def pci_id(self) -> str:
        return f"{self.vendor}:{self.device}"


@dataclass(frozen=True)
class Gpu:
    """A GPU found on the PCI bus. ``model`` is None when the knowledge data does not know the ID."""

    pci_id: str
    slot: str
    model: str | None
    compute_capability: str | None
    description: str = ""


@dataclass(frozen=True)
class DriverInfo:
    version: str | None
    flavor: str | None  # "open" | "proprietary" | None (unknown)


@dataclass(frozen=True)
class NvmlGpu:
    index: int
    name: str
    uuid: str | None = None
    memory_mib: int | None = None
    compute_capability: str | None = None
    pci_bus_id: str | None = None
    pci_id: str | None = None


@dataclass(frozen=True)
class NvmlInventory:
    """What the loaded driver reports (nvidia-smi or NVML)."""

    source: str  # "nvidia-smi" | "nvml"
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[NvmlGpu, ...] = ()
    fabric_state: str | None = None


@dataclass(frozen=True)
class CudaToolkit:
    version: str
    path: str | None = None


@dataclass(frozen=True)
class Cudnn:
    version: str
    source: str  # a header path or a package name


@dataclass(frozen=True)
class DiskSpace:
    mount: str
    total_bytes: int
    free_bytes: int

    @property
    def free_gib(self) -> float:
        return round(self.free_bytes / 2**30, 1)


@dataclass(frozen=True)
class PackageLock:
    path: str
    pid: int | None
    process: str | None


@dataclass(frozen=True)
class KernelHeaders:
    installed: bool
    installable: bool | None  # None: the package index could not be asked
    package: str | None


@dataclass(frozen=True)
class UnattendedUpgrades:
    enabled: bool
    running: bool
    units: Mapping[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.enabled or self.running


@dataclass(frozen=True)
class VenvFacts:
    path: str
    python: str | None
    packages: Mapping[str, str] = field(default_factory=dict)
    torch_cuda: str | None = None
    error: str | None = None
    base_prefix: str | None = None  # the Python installation the venv was made from

    def standalone(self, python: str) -> bool:
        """The venv runs a standalone CPython ``python`` (X.Y) that python_env's uv installed (it
        was made from a Python under python_env's standalone dir): `up` plans nothing for it."""
        base = self.base_prefix or ""
        return self.python == python and base.startswith(STANDALONE_PYTHON_DIR.rstrip("/") + "/")


@dataclass(frozen=True)
class InstalledHealth:
    """provision-health as the probe found it at the health role's default places: ``spec`` the
    installed spec (None: none, or not a JSON object), ``files`` {program file name: its sha256}
    (empty: no program). `up` compares both with what it would install (a host whose last verify
    passed with the same lock is skipped only when they match)."""

    spec: Mapping[str, Any] | None
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass
class HostFacts:
    """Everything probe learns about one host; ``to_json()`` is the ``facts`` object of the CLI."""

    hostname: str | None = None
    user: str | None = None
    privileged: bool = False
    os: OsRelease | None = None
    arch: str | None = None
    kernel: str | None = None
    kernel_headers: KernelHeaders | None = None
    efi: bool | None = None
    secure_boot: bool | None = None
    nouveau_loaded: bool = False
    nvidia_module_loaded: bool = False
    gpus: list[Gpu] = field(default_factory=list)
    nvswitch_count: int = 0
    driver: DriverInfo = field(default_factory=lambda: DriverInfo(None, None))
    driver_packages: dict[str, str] = field(default_factory=dict)
    ubuntu_driver_index: UbuntuDriverIndex | None = None  # Ubuntu hosts only
    nvml: NvmlInventory | None = None
    nvml_error: str | None = None
    cuda_toolkits: list[CudaToolkit] = field(default_factory=list)
    cudnn: Cudnn | None = None
    python: str | None = None
    pythons: list[str] = field(default_factory=list)
    venv: VenvFacts | None = None
    disks: list[DiskSpace] = field(default_factory=list)
    memory_bytes: int | None = None
    cpus: int | None = None
    package_locks: list[PackageLock] | None = None  # None: could not be checked (needs root)
    unattended_upgrades: UnattendedUpgrades | None = None
    container_runtimes: list[str] = field(default_factory=list)
    ec2_instance_type: str | None = None
    health: InstalledHealth | None = None  # None: not probed (a stand-in's facts, an older probe's)
    warnings: list[str] = field(default_factory=list)

    @property
    def disk_free_gib(self) -> float | None:
        """Free space where packages land: the smaller of / and /var."""
        return min((d.free_gib for d in self.disks), default=None)

    def frameworks(self) -> dict[str, str]:
        packages = self.venv.packages if self.venv else {}
        return {k: v for k, v in packages.items() if k in FRAMEWORKS}

    def to_json(self) -> dict[str, Any]:
        os_ = self.os
        gpus = [asdict(g) for g in self.gpus]
        return {
            "hostname": self.hostname,
            "user": self.user,
            "privileged": self.privileged,
            "os": os_.slug if os_ else None,
            "os_id": os_.id if os_ else None,
            "os_version": os_.version_id if os_ else None,
            "os_codename": os_.codename if os_ else None,
            "os_name": os_.pretty_name if os_ else None,
            "arch": self.arch,
            "kernel": self.kernel,
            "kernel_headers": asdict(self.kernel_headers) if self.kernel_headers else None,
            "efi": self.efi,
            "secure_boot": self.secure_boot,
            "nouveau_loaded": self.nouveau_loaded,
            "gpus": gpus,
            "gpu_count": len(self.gpus),
            "nvswitch_count": self.nvswitch_count,
            "driver_version": self.driver.version,
            "driver_kernel_modules": self.driver.flavor,
            "driver_loaded": self.nvidia_module_loaded,
            "driver_packages": dict(self.driver_packages),
            "ubuntu_driver_index": self.ubuntu_driver_index.to_json() if self.ubuntu_driver_index else None,
            "nvml": _nvml_json(self.nvml),
            "nvml_error": self.nvml_error,
            "cuda_toolkits": [asdict(t) for t in self.cuda_toolkits],
            "cudnn": asdict(self.cudnn) if self.cudnn else None,
            "python": self.python,
            "pythons": list(self.pythons),
            "venv": _venv_json(self.venv),
            "frameworks": self.frameworks(),
            "disk_free_gib": self.disk_free_gib,
            "disks": {
                d.mount: {"free_gib": d.free_gib, "total_gib": round(d.total_bytes / 2**30, 1)} for d in self.disks
            },
            "memory_gib": round(self.memory_bytes / 2**30, 1) if self.memory_bytes is not None else None,
            "cpus": self.cpus,
            "package_locks": [asdict(lock) for lock in self.package_locks] if self.package_locks is not None else None,
            "unattended_upgrades": _unattended_json(self.unattended_upgrades),
            "container_runtimes": list(self.container_runtimes),
            "ec2_instance_type": self.ec2_instance_type,
            "warnings": list(self.warnings),
        }


def _nvml_json(nvml: NvmlInventory | None) -> dict[str, Any] | None:
    if nvml is None:
        return None
    doc = asdict(nvml)
    doc["gpus"] = [asdict(g) for g in nvml.gpus]
    return doc


def _venv_json(venv: VenvFacts | None) -> dict[str, Any] | None:
    if venv is None:
        return None
    doc = asdict(venv)
    doc["packages"] = dict(venv.packages)
    return doc


def _unattended_json(u: UnattendedUpgrades | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {"active": u.active, "enabled": u.enabled, "running": u.running, "units": dict(u.units)}


# ---------------------------------------------------------------------------------------------
# A summary of the host (what resolve reads is provision.stack.request.HostSpec.from_facts)


def host_description(facts: HostFacts) -> ResolvedHost:
    """The host in brief; the venv's Python when a venv was probed, else the system's.

    A mixed machine is summed up by its most common known GPU; resolving one is refused
    (``HostSpec.from_facts``: one driver and one stack per GPU model).
    """
    known = [g for g in facts.gpus if g.model]
    top = Counter(g.model for g in known).most_common(1)
    model = top[0][0] if top else None
    cc = next((g.compute_capability for g in known if g.model == model), None)
    if model is None and facts.nvml and facts.nvml.gpus:  # an ID the data lacks: NVML still knows cc
        cc = facts.nvml.gpus[0].compute_capability
    python = facts.venv.python if facts.venv and facts.venv.python else facts.python
    return ResolvedHost(
        gpu=model,
        compute_capability=cc,
        gpu_count=sum(1 for g in facts.gpus if g.model == model) if model else len(facts.gpus),
        os=facts.os.slug if facts.os else None,
        arch=facts.arch,
        python=python,
    )


def _nvml_cc(facts: HostFacts, pci_id: str) -> str | None:
    """NVML's compute capability for the GPUs of this PCI ID (a host whose driver is loaded)."""
    nvml = facts.nvml.gpus if facts.nvml else ()
    return next((g.compute_capability for g in nvml if g.pci_id == pci_id and g.compute_capability), None)


def probed_host(facts: HostFacts) -> ProbedHost:
    """What the resolver reads of these facts (``HostSpec.from_facts``): built once, here at the edge."""
    return ProbedHost(
        os=facts.os.slug if facts.os else None,
        arch=facts.arch,
        gpus=tuple(ProbedGpu(g.model, g.pci_id, g.compute_capability or _nvml_cc(facts, g.pci_id)) for g in facts.gpus),
        nvswitch_count=facts.nvswitch_count,
        instance_type=facts.ec2_instance_type,
        kernel=facts.kernel,
        ubuntu_driver_index=facts.ubuntu_driver_index,
        driver_version=facts.driver.version,
    )
