"""Pure parsers of what a host's tools print about the system: os-release, PCI, driver, NVML.

Every parser takes the text a real tool printed (``lspci -nn``, ``/etc/os-release``,
``nvidia-smi -q -x``, ``/proc/driver/nvidia/version``, ``mokutil --sb-state``, ``df -P``, ...)
and returns plain values or :mod:`provision.hosts.facts` types; nothing here runs a command or
touches a host. The mapping from PCI IDs to GPU models is passed in (:data:`GpuLookup`), so these
functions are tested with fixture outputs alone. Package-manager outputs are
:mod:`provision.hosts.parse_packages`'.
"""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import Any

from provision.hosts.facts import (
    DiskSpace,
    DriverInfo,
    Gpu,
    GpuLookup,
    InstalledHealth,
    NvmlGpu,
    NvmlInventory,
    OsRelease,
    PackageLock,
    PciDevice,
    UnattendedUpgrades,
    VenvFacts,
    no_lookup,
)
from provision.hosts.parse_packages import version_key

NVIDIA_VENDOR = "10de"
# PCI class codes (pci.ids): 03xx display controllers (0300 VGA, 0302 3D); 0680 "other bridge"
# is how NVSwitch chips enumerate on HGX baseboards.
_DISPLAY_CLASS_PREFIX = "03"
_BRIDGE_OTHER_CLASS = "0680"


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
    return sorted(found, key=version_key)


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
    base = doc.get("base_prefix")
    return VenvFacts(path, doc.get("python"), packages, doc.get("torch_cuda"), base_prefix=str(base) if base else None)


def parse_ec2_instance_type(text: str) -> str | None:
    value = text.strip()
    return value if re.fullmatch(r"[a-z0-9-]+\.[a-z0-9-]+", value) else None


def parse_container_runtimes(text: str) -> list[str]:
    """Lines ``NAME PATH`` for the runtimes found on PATH."""
    return sorted({line.split()[0] for line in text.splitlines() if len(line.split()) >= 2})


def parse_installed_health(text: str) -> InstalledHealth:
    """probe.sh's ``health`` section: ``@@spec`` and the spec file's JSON (absent: no spec), then
    ``@@files`` and ``sha256sum``'s lines (``HEX  NAME``) for the program's files (none: no program)."""
    spec_text, _, files_text = text.partition("@@files")
    spec_text = spec_text.split("@@spec", 1)[1] if "@@spec" in spec_text else ""
    spec: dict[str, Any] | None = None
    if spec_text.strip():
        try:
            doc = json.loads(spec_text)
        except json.JSONDecodeError:
            doc = None
        spec = doc if isinstance(doc, dict) else None
    files = {}
    for line in files_text.splitlines():
        digest, _, name = line.partition("  ")  # sha256sum's text mode: two spaces
        if re.fullmatch(r"[0-9a-f]{64}", digest) and name:
            files[name] = digest
    return InstalledHealth(spec, files)
