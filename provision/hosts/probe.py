"""Host facts: the typed, JSON-serialisable :class:`HostFacts` and the pure parsers behind it.

Every parser takes the text a real tool printed (``lspci -nn``, ``/etc/os-release``,
``nvidia-smi -q -x``, ``/proc/driver/nvidia/version``, ``mokutil --sb-state``, ``dpkg-query``,
``rpm -qa``, ``df -P``, ...) and returns plain values; nothing here runs a command or touches a
host (that is :mod:`provision.hosts.gather`). The mapping from PCI IDs to GPU models is passed in
(:data:`GpuLookup`), so these functions are tested with fixture outputs alone.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

NVIDIA_VENDOR = "10de"
# Distributions reported as "frameworks" (the venv entry lists the CUDA wheels beside them).
FRAMEWORKS = ("torch", "torchvision", "torchaudio", "tensorflow", "tensorflow-cpu", "jax", "jaxlib")
# PCI class codes (pci.ids): 03xx display controllers (0300 VGA, 0302 3D); 0680 "other bridge"
# is how NVSwitch chips enumerate on HGX baseboards.
_DISPLAY_CLASS_PREFIX = "03"
_BRIDGE_OTHER_CLASS = "0680"


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
# The resolver's view of a host


@dataclass(frozen=True)
class HostDescription:
    """What resolve needs to know of a host: DESIGN.md's ``host`` object."""

    gpu: str | None
    compute_capability: str | None
    gpu_count: int
    os: str | None
    arch: str | None
    python: str | None
    nvswitch_count: int = 0
    instance_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        """DESIGN.md's ``host`` object of ``provision resolve --json``."""
        return {
            "gpu": self.gpu,
            "compute_capability": self.compute_capability,
            "gpu_count": self.gpu_count,
            "os": self.os,
            "arch": self.arch,
            "python": self.python,
        }

    def resolver_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``provision.resolve.HostSpec.describe`` (python goes to the request)."""
        # A GPU the knowledge data does not name cannot be counted as a model: "any NVIDIA GPU".
        count = self.gpu_count if self.gpu and self.gpu_count else None
        return {
            "gpu": self.gpu,
            "gpu_count": count,
            "instance_type": self.instance_type,
            "os": self.os,
            "arch": self.arch,
            "nvswitch_count": self.nvswitch_count,
        }


def host_description(facts: HostFacts) -> HostDescription:
    """The host as resolve sees it. A mixed machine is described by its most common known GPU."""
    known = [g for g in facts.gpus if g.model]
    top = Counter(g.model for g in known).most_common(1)
    model = top[0][0] if top else None
    cc = next((g.compute_capability for g in known if g.model == model), None)
    if model is None and facts.nvml and facts.nvml.gpus:  # an ID the data lacks: NVML still knows cc
        cc = facts.nvml.gpus[0].compute_capability
    python = facts.venv.python if facts.venv and facts.venv.python else facts.python
    return HostDescription(
        gpu=model,
        compute_capability=cc,
        gpu_count=sum(1 for g in facts.gpus if g.model == model) if model else len(facts.gpus),
        os=facts.os.slug if facts.os else None,
        arch=facts.arch,
        python=python,
        nvswitch_count=facts.nvswitch_count,
        instance_type=facts.ec2_instance_type,
    )


# ---------------------------------------------------------------------------------------------
# Parsers


def parse_os_release(text: str) -> OsRelease:
    """``/etc/os-release`` (shell-style KEY=value lines, values optionally quoted)."""
    values: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw)
        except ValueError:
            parts = [raw.strip("\"'")]
        values[key] = parts[0] if parts else ""
    codename = values.get("VERSION_CODENAME") or values.get("UBUNTU_CODENAME") or None
    return OsRelease(
        id=values.get("ID", "linux").lower(),
        version_id=values.get("VERSION_ID", ""),
        codename=codename,
        pretty_name=values.get("PRETTY_NAME"),
        id_like=tuple(values.get("ID_LIKE", "").split()),
    )


_LSPCI_LINE = re.compile(
    r"^(?P<slot>\S+)\s+(?P<cls_name>.*?)\s*\[(?P<cls>[0-9a-fA-F]{4})\]:\s+(?P<desc>.*?)\s*"
    r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\](?:\s*\(rev [0-9a-fA-F]+\))?\s*$"
)


def parse_lspci_nn(text: str) -> list[PciDevice]:
    """``lspci -nn`` lines: ``18:00.0 3D controller [0302]: NVIDIA ... [10de:2330] (rev a1)``."""
    devices = []
    for line in text.splitlines():
        m = _LSPCI_LINE.match(line.strip())
        if m:
            devices.append(PciDevice(m["slot"], m["cls"].lower(), m["vendor"].lower(), m["device"].lower(), m["desc"]))
    return devices


def parse_sysfs_pci(text: str) -> list[PciDevice]:
    """Lines ``SLOT CLASS VENDOR DEVICE`` read from /sys/bus/pci/devices (where lspci is missing).

    sysfs gives ``0x030200`` for class and ``0x10de`` for ids.
    """
    devices = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        slot, cls, vendor, device = parts
        devices.append(
            PciDevice(
                slot,
                cls.lower().removeprefix("0x")[:4],
                vendor.lower().removeprefix("0x"),
                device.lower().removeprefix("0x"),
            )
        )
    return devices


def classify_pci(devices: Iterable[PciDevice], lookup: GpuLookup = no_lookup) -> tuple[list[Gpu], int]:
    """NVIDIA display controllers are GPUs; NVIDIA "other bridge" devices are NVSwitches.

    Audio, USB and serial functions of consumer boards (same vendor, other classes) are neither.
    """
    gpus: list[Gpu] = []
    nvswitches = 0
    for dev in devices:
        if dev.vendor != NVIDIA_VENDOR:
            continue
        if dev.class_code.startswith(_DISPLAY_CLASS_PREFIX):
            model = lookup(dev.pci_id)
            gpus.append(
                Gpu(
                    dev.pci_id,
                    dev.slot,
                    model.name if model else None,
                    model.compute_capability if model else None,
                    dev.description,
                )
            )
        elif dev.class_code == _BRIDGE_OTHER_CLASS:
            nvswitches += 1
    return gpus, nvswitches


_NVRM = re.compile(r"NVRM version:\s*(?P<what>.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)?)\s")


def parse_proc_driver_version(text: str) -> DriverInfo | None:
    """``/proc/driver/nvidia/version``: present only while the module is loaded."""
    m = _NVRM.search(text + " ")
    if not m:
        return None
    flavor = "open" if "Open Kernel Module" in m["what"] else "proprietary"
    return DriverInfo(m["version"], flavor)


def parse_modinfo(text: str) -> DriverInfo | None:
    """``modinfo nvidia``: the installed (maybe not loaded) module; the license tells the flavor."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("version", "license") and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    if "version" not in fields:
        return None
    license_ = fields.get("license", "")
    flavor = "open" if "GPL" in license_ else ("proprietary" if license_ else None)
    return DriverInfo(fields["version"], flavor)


def parse_proc_modules(text: str) -> set[str]:
    """``/proc/modules``: the names of loaded kernel modules."""
    return {line.split()[0] for line in text.splitlines() if line.split()}


def parse_mokutil_sb_state(text: str) -> bool | None:
    """``mokutil --sb-state``: ``SecureBoot enabled`` / ``SecureBoot disabled`` / not EFI (None)."""
    low = text.lower()
    if "secureboot enabled" in low:
        return True
    if "secureboot disabled" in low:
        return False
    return None


def parse_efivar_secure_boot(text: str) -> bool | None:
    """``od -An -tu1`` of the SecureBoot efivar: 4 attribute bytes, then the value (1 = on)."""
    numbers = text.split()
    if len(numbers) < 5 or not numbers[-1].isdigit():
        return None
    return numbers[-1] == "1"


def _gpu_pci_id_from_smi(value: str | None) -> str | None:
    # nvidia-smi prints the PCI device ID as DEVICEVENDOR in hex: 0x233010DE -> 10de:2330
    if not value:
        return None
    hexed = value.lower().removeprefix("0x")
    if len(hexed) != 8:
        return None
    return f"{hexed[4:]}:{hexed[:4]}"


def _mib(value: str | None) -> int | None:
    if not value:
        return None
    m = re.match(r"\s*(\d+)\s*MiB", value)
    return int(m.group(1)) if m else None


def _text(node: Any, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = str(found.text).strip()
    return None if value in ("", "N/A") else value


def parse_nvidia_smi_xml(text: str) -> NvmlInventory:
    """``nvidia-smi -q -x``: driver and CUDA versions, each GPU's name, UUID, memory, PCI IDs."""
    import xml.etree.ElementTree as ET

    # The DOCTYPE names a DTD file that is not there; ElementTree ignores it (no external fetch).
    root = ET.fromstring(text)
    gpus = []
    fabric = None
    for index, gpu in enumerate(root.findall("gpu")):
        gpus.append(
            NvmlGpu(
                index=index,
                name=_text(gpu, "product_name") or "unknown",
                uuid=_text(gpu, "uuid"),
                memory_mib=_mib(_text(gpu, "fb_memory_usage/total")),
                compute_capability=_text(gpu, "compute_cap"),
                pci_bus_id=_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
                pci_id=_gpu_pci_id_from_smi(_text(gpu, "pci/pci_device_id")),
            )
        )
        fabric = fabric or _text(gpu, "fabric/state")
    return NvmlInventory("nvidia-smi", _text(root, "driver_version"), _text(root, "cuda_version"), tuple(gpus), fabric)


def parse_nvml_json(text: str) -> tuple[NvmlInventory | None, str | None]:
    """The NVML snippet's JSON: the inventory, or why NVML could not be read."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None, "the NVML query printed no JSON"
    if not isinstance(doc, dict):
        return None, "the NVML query printed no JSON object"
    if doc.get("error"):
        return None, str(doc["error"])
    if not doc.get("available"):
        return None, None
    gpus = tuple(
        NvmlGpu(
            index=int(g["index"]),
            name=str(g.get("name") or "unknown"),
            uuid=g.get("uuid"),
            memory_mib=g.get("memory_mib"),
            compute_capability=g.get("compute_capability"),
            pci_bus_id=g.get("pci_bus_id"),
            pci_id=g.get("pci_id"),
        )
        for g in doc.get("gpus", [])
    )
    return NvmlInventory(str(doc.get("via") or "nvml"), doc.get("driver_version"), doc.get("cuda_version"), gpus), None


def parse_dpkg_query(text: str) -> dict[str, str]:
    """``dpkg-query -W -f='${db:Status-Abbrev}\\t${Package}\\t${Version}\\n'``: installed packages.

    ``ii`` is installed; ``rc`` (removed, config left) and others are not.
    """
    packages = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0].strip() in ("ii", "hi", "iU", "hU"):
            packages[parts[1].strip()] = parts[2].strip()
    return packages


def parse_rpm_query(text: str) -> dict[str, str]:
    """``rpm -qa --qf '%{NAME}\\t%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\\n'``."""
    packages = {}
    for line in text.splitlines():
        name, sep, version = line.partition("\t")
        if sep and name.strip():
            packages[name.strip()] = version.strip()
    return packages


def _upstream(version: str) -> str:
    """``3:580.95.05-1.el9`` / ``580.95.05-0ubuntu1`` -> ``580.95.05``."""
    return version.split(":", 1)[-1].split("-", 1)[0].split("~", 1)[0]


_DRIVER_PACKAGE = re.compile(
    r"^(nvidia-driver(-\d+)?(-open|-server|-server-open)?|nvidia-open(-\d+)?|cuda-drivers(-\d+)?|"
    r"kmod-nvidia(-open|-latest)?-dkms|nvidia-kernel-(open-)?dkms|nvidia-driver-cuda|"
    r"nvidia-fabric-?manager(-\d+)?|nvidia-kernel-common(-\d+)?|libnvidia-compute(-\d+)?)$"
)


def driver_packages(packages: Mapping[str, str]) -> dict[str, str]:
    """The packages that carry the NVIDIA driver (any distro's naming)."""
    return {name: version for name, version in packages.items() if _DRIVER_PACKAGE.match(name)}


def driver_from_packages(packages: Mapping[str, str]) -> DriverInfo | None:
    """The driver an installed package provides (before a reboot loads it)."""
    candidates = {n: v for n, v in driver_packages(packages).items() if "fabricmanager" not in n}
    if not candidates:
        return None
    kernel = [n for n in candidates if "kernel" in n or "dkms" in n or n.startswith(("nvidia-driver", "nvidia-open"))]
    name = sorted(kernel or candidates)[0]
    open_names = [n for n in candidates if "open" in n]
    flavor = "open" if open_names else ("proprietary" if kernel else None)
    return DriverInfo(_upstream(candidates[name]), flavor)


_CUDA_PACKAGE = re.compile(r"^(cuda-toolkit|cuda-nvcc|cuda-compiler)-(\d+)-(\d+)$")


def cuda_toolkits_from_packages(packages: Mapping[str, str]) -> list[CudaToolkit]:
    """NVIDIA's versioned toolkit packages (``cuda-toolkit-12-8``) and Debian's ``nvidia-cuda-toolkit``."""
    found: dict[str, CudaToolkit] = {}
    for name, version in packages.items():
        m = _CUDA_PACKAGE.match(name)
        if m:
            v = f"{m.group(2)}.{m.group(3)}"
            found.setdefault(v, CudaToolkit(v, f"/usr/local/cuda-{v}"))
        elif name == "nvidia-cuda-toolkit":
            v = ".".join(_upstream(version).split(".")[:2])
            found.setdefault(v, CudaToolkit(v, "/usr"))
    return sorted(found.values(), key=lambda t: _version_key(t.version))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def parse_cuda_version_file(path: str, text: str) -> CudaToolkit | None:
    """``version.json`` (CUDA >= 11.1) or ``version.txt`` (``CUDA Version 10.2.89``) of a toolkit dir."""
    version = None
    try:
        doc = json.loads(text)
        version = str(doc["cuda"]["version"])
    except (json.JSONDecodeError, KeyError, TypeError):
        m = re.search(r"CUDA Version\s+(\d+\.\d+(?:\.\d+)?)", text)
        version = m.group(1) if m else None
    if not version:
        return None
    return CudaToolkit(".".join(version.split(".")[:2]), path)


def parse_nvcc_version(text: str) -> str | None:
    """``nvcc --version``: ``Cuda compilation tools, release 12.8, V12.8.93`` -> ``12.8``."""
    m = re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if m else None


def parse_cudnn_header(text: str) -> str | None:
    """``cudnn_version.h``: CUDNN_MAJOR / CUDNN_MINOR / CUDNN_PATCHLEVEL defines."""
    parts = {}
    for key in ("MAJOR", "MINOR", "PATCHLEVEL"):
        m = re.search(rf"#define\s+CUDNN_{key}\s+(\d+)", text)
        if not m:
            return None
        parts[key] = m.group(1)
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCHLEVEL']}"


def cudnn_from_packages(packages: Mapping[str, str]) -> Cudnn | None:
    """``libcudnn9-cuda-12`` / ``libcudnn8`` (deb) or ``libcudnn9-cuda-12`` (rpm) -> version."""
    for name in sorted(packages):
        if re.match(r"^(lib)?cudnn\d*(-cuda-\d+)?$", name):
            return Cudnn(_upstream(packages[name]), name)
    return None


def parse_df(text: str) -> list[DiskSpace]:
    """``df -P -k / /var``: 1024-byte blocks; one row per mount, duplicates (same fs) kept apart."""
    disks = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 6 and parts[1].isdigit() and parts[3].isdigit():
            disks.append(DiskSpace(parts[5], int(parts[1]) * 1024, int(parts[3]) * 1024))
    return disks


def parse_meminfo(text: str) -> int | None:
    """``/proc/meminfo``: MemTotal in bytes."""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def parse_python_version(text: str) -> str | None:
    """``python3 --version`` (``Python 3.11.2``) -> ``3.11``."""
    m = re.search(r"Python (\d+)\.(\d+)", text)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def parse_python_list(text: str) -> list[str]:
    """Executable names such as ``python3.11`` (from ls of bin dirs) -> sorted unique ``3.11``."""
    found = {m.group(1) for m in re.finditer(r"python(\d+\.\d+)(?:\s|$)", text)}
    return sorted(found, key=_version_key)


def parse_apt_cache_policy(text: str, have_lists: bool = True) -> bool | None:
    """``apt-cache policy PKG``: installable when there is a candidate.

    With no package lists (fresh cloud images before ``apt-get update``) apt knows nothing:
    that is "unknown" (None), not "not installable".
    """
    m = re.search(r"Candidate:\s*(\S+)", text)
    if m and m.group(1) != "(none)":
        return True
    return False if have_lists else None


def parse_dnf_list(text: str, exit_status: int) -> bool | None:
    """``dnf -q --cacheonly list --available PKG``: a package row means installable."""
    if re.search(r"^kernel-devel\S*\s+\S+", text, re.M):
        return True
    return False if exit_status in (0, 1) and "Error: No matching Packages" in text else None


def parse_systemctl_states(text: str) -> dict[str, str]:
    """Lines ``UNIT STATE`` (``systemctl is-active`` per unit, paired by the gather script)."""
    states = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            states[parts[0]] = parts[1]
    return states


# Timers that upgrade packages on their own: apt's (acts only when APT::Periodic says so, which
# the unattended-upgrades package sets up) and RHEL/Amazon Linux's dnf-automatic.
_APT_UPGRADE_TIMER = "apt-daily-upgrade.timer"
_DNF_TIMERS = ("dnf-automatic.timer", "dnf-automatic-install.timer")
_UPGRADE_RUNNING = (
    "apt-daily.service",
    "apt-daily-upgrade.service",
    "dnf-automatic.service",
    "dnf-automatic-install.service",
)


def parse_unattended(states_text: str, processes_text: str, apt_periodic: str = "") -> UnattendedUpgrades:
    """Whether something upgrades packages by itself, on a timer (enabled) or right now (running).

    ``states_text``: ``UNIT STATE`` lines; ``processes_text``: ``ps -eo comm=``; ``apt_periodic``:
    the ``APT::Periodic::Unattended-Upgrade`` lines of apt's configuration files, in the order
    apt reads them (none, or the last one "0": off).
    """
    states = parse_systemctl_states(states_text)
    # apt reads /etc/apt/apt.conf.d/* in order and the last setting wins.
    periodic = re.findall(r'^\s*APT::Periodic::Unattended-Upgrade\s+"([^"]*)"', apt_periodic, re.M)
    apt_on = bool(periodic) and periodic[-1] not in ("", "0")
    enabled = (states.get(_APT_UPGRADE_TIMER) == "active" and apt_on) or any(
        states.get(u) == "active" for u in _DNF_TIMERS
    )
    running = any(states.get(u) in ("active", "activating") for u in _UPGRADE_RUNNING)
    running = running or bool(
        re.search(r"^(unattended-upgr\S*|apt\.systemd\.dai\S*|dnf-automatic)$", processes_text, re.M)
    )
    return UnattendedUpgrades(enabled=enabled, running=running, units=states)


def parse_locks_json(text: str) -> tuple[list[PackageLock] | None, str | None]:
    """The lock snippet's JSON: the locks held, or why they could not be checked."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None, "the package-lock check printed no JSON"
    if doc.get("denied"):
        return None, "package locks not checked: " + ", ".join(doc["denied"]) + " not readable (needs root)"
    return [PackageLock(str(h["path"]), h.get("pid"), h.get("process")) for h in doc.get("held", [])], None


def parse_venv_json(path: str, text: str) -> VenvFacts:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return VenvFacts(path, None, error=f"no Python at {path}/bin/python or it failed")
    packages = {str(k): str(v) for k, v in (doc.get("packages") or {}).items()}
    return VenvFacts(path, doc.get("python"), packages, doc.get("torch_cuda"))


def parse_ec2_instance_type(text: str) -> str | None:
    value = text.strip()
    return value if re.fullmatch(r"[a-z0-9-]+\.[a-z0-9-]+", value) else None


def parse_container_runtimes(text: str) -> list[str]:
    """Lines ``NAME PATH`` for the runtimes found on PATH."""
    return sorted({line.split()[0] for line in text.splitlines() if len(line.split()) >= 2})
