"""Pure parsers of what package managers print: installed packages and what they carry.

``dpkg-query`` and ``rpm -qa`` listings, the driver, CUDA toolkit and cuDNN packages among them
(any distro's naming), and whether the package index offers a package (``apt-cache policy``,
``dnf list``). Nothing here runs a command or touches a host.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from provision.hosts.facts import CudaToolkit, Cudnn, DriverInfo
from provision.model.facts import AptVersions, PrecompiledModules


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
    return sorted(found.values(), key=lambda t: version_key(t.version))


def version_key(version: str) -> tuple[int, ...]:
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


def parse_apt_cache_show(text: str) -> list[dict[str, str]]:
    """``apt-cache show --no-all-versions PKG...``: one dict of fields per record (continuations joined)."""
    records: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                records.append(current)
            current, key = {}, ""
        elif line[0] in " \t" and key:
            current[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    if current:
        records.append(current)
    return records


def parse_apt_cache_policy_all(text: str) -> dict[str, AptVersions]:
    """``apt-cache policy A B ...``: per package its Installed and Candidate (``(none)`` -> None)."""
    found: dict[str, AptVersions] = {}
    for m in re.finditer(r"^(\S+):\n\s+Installed:\s*(\S+)\n\s+Candidate:\s*(\S+)", text, re.M):
        installed, candidate = (None if v == "(none)" else v for v in (m.group(2), m.group(3)))
        found[m.group(1)] = AptVersions(installed, candidate)
    return found


_PRECOMPILED = re.compile(r"^linux-modules-nvidia-(\d+)-server(-open)?-(.+)$")
_KERNEL_COMMON = re.compile(r"nvidia-kernel-common-(\d+)-server\s*\(>=\s*([^)\s]+)\)")


def precompiled_modules(records: list[dict[str, str]], kernel: str) -> list[PrecompiledModules]:
    """Canonical's ``linux-modules-nvidia-<b>-server[-open]-<kernel>`` records: the driver each was built for.

    The driver version is the floor of its ``nvidia-kernel-common-<b>-server (>= X)`` dependency
    (NVIDIA GPU Operator docs, precompiled drivers: `apt show linux-modules-nvidia-525-server-5.15.0-69-generic`
    ``Depends: ..., nvidia-kernel-common-525-server (>= 525.85.12)``).
    """
    out = []
    for r in records:
        m = _PRECOMPILED.match(r.get("Package", ""))
        if not m or m.group(3) != kernel:
            continue
        dep = _KERNEL_COMMON.search(r.get("Depends", ""))
        driver = _upstream(dep.group(2)) if dep and dep.group(1) == m.group(1) else None
        out.append(PrecompiledModules(m.group(0), int(m.group(1)), bool(m.group(2)), r.get("Version", ""), driver))
    return sorted(out, key=lambda p: (p.branch, p.open))


def kernel_metapackages(text: str) -> dict[str, str]:
    """``dpkg-query`` rows of installed ``linux-image-*``: the metapackages (``linux-image-generic-hwe-22.04``)
    by flavour (``generic-hwe-22.04``) with their versions; the per-kernel images are left out."""
    metas = {}
    for name, version in parse_dpkg_query(text).items():
        flavour = name.removeprefix("linux-image-")
        if flavour != name and not flavour[:1].isdigit() and not flavour.startswith(("unsigned-", "extra-")):
            metas[flavour] = version
    return metas


def kernel_flavour(kernel: str | None, metas: Mapping[str, str]) -> str | None:
    """The flavour of Canonical's module metapackages for the running kernel.

    ``uname -r`` ends in the kernel's flavour (``6.8.0-1021-aws`` -> ``aws``), but a 22.04 HWE
    kernel says ``generic`` like the GA one; the installed ``linux-image-<flavour>`` metapackage
    tells them apart (``generic-hwe-22.04``; Canonical's kernel docs, "HWE kernels": install
    ``linux-generic-hwe-22.04``). Among the metapackages of the kernel's flavour the one whose
    version is the running kernel's (``6.8.0.52.54~22.04.1`` for ``6.8.0-52-generic``) wins; else
    one only of them; else the flavour ``uname -r`` says.
    """
    if not kernel:
        return None
    m = re.match(r"^(\d+\.\d+\.\d+)-(\d+)-(.+)$", kernel)
    if not m:
        return None
    base, abi, suffix = m.groups()
    mine = {f: v for f, v in metas.items() if f == suffix or f.startswith(suffix + "-")}
    running = [f for f, v in mine.items() if v.startswith(f"{base}.{abi}.")]
    if len(running) == 1:
        return running[0]
    if len(mine) == 1:
        return next(iter(mine))
    return suffix
