"""Lock group -> role variables: the values every role reads through its documented interface
(defaults/main.yml), from the lock group's host, stack and package plan and the install settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from provision.ansible.checks import _check_package, _check_text, _check_url, _check_version
from provision.ansible.settings import InstallSettings
from provision.errors import BadInput
from provision.stack.packages import PackagePlan

PYPI = "https://pypi.org/simple"


def group_vars(group: Mapping[str, Any], install: InstallSettings) -> dict[str, Any]:
    """The role variables of one lock group (every role's documented interface)."""
    host = group.get("host") or {}
    stack = group.get("stack") or {}
    doc = group.get("packages")
    packages = PackagePlan.from_json(doc) if doc else PackagePlan(manager="apt")
    os_id = _check_text(host.get("os") or "", "the lock's host.os")
    distro = os_id.split("-")[0]
    family = "debian" if distro in ("debian", "ubuntu") else distro
    out: dict[str, Any] = {}

    driver = stack.get("driver")
    method = _method(driver, packages, install)
    uses_dkms = not (method == "distro" and distro == "ubuntu")
    out.update(_driver_vars(driver, packages, method, install, family))
    out.update(
        {
            "preflight_driver_install": driver is not None,
            "preflight_driver_uses_dkms": uses_dkms,
            "preflight_require_gpu": driver is not None,
            "preflight_mok_signing": bool(install.mok_key and install.mok_cert),
            "preflight_disk_paths": ["/", str(Path(install.venv).parent)],
        }
    )

    fm = stack.get("fabric_manager")
    out["fabric_manager_enabled"] = fm is not None
    if fm is not None:
        out["fabric_manager_version"] = _check_version(fm.get("version"), "fabric_manager.version")
        names = _names(packages, "fabric_manager")
        out["fabric_manager_package"] = _fm_package(names, out["fabric_manager_version"], family)

    toolkit = stack.get("cuda_toolkit")
    out["cuda_toolkit_enabled"] = toolkit is not None
    if toolkit is not None:
        out["cuda_toolkit_version"] = _check_version(toolkit.get("version"), "cuda_toolkit.version")
        out["cuda_toolkit_method"] = method
        names = _names(packages, "cuda_toolkit")
        if names and method == "nvidia-repo":
            out["cuda_toolkit_package"] = _check_package(names[0], "cuda_toolkit package")

    cudnn = stack.get("cudnn")
    out["cudnn_enabled"] = cudnn is not None
    if cudnn is not None:
        out["cudnn_version"] = _check_version(cudnn.get("version"), "cudnn.version")
        out["cudnn_cuda_major"] = _check_version(str(cudnn.get("cuda_major") or ""), "cudnn.cuda_major")
        names = [_check_package(n, "cudnn package") for n in _names(packages, "cudnn")]
        if names:
            out["cudnn_packages"] = names

    python = _check_version(stack.get("python") or host.get("python"), "python")
    out.update(
        {
            "python_env_path": install.venv,
            "python_env_python": python,
            "python_env_os_packages": _python_packages(os_id, family, python),
        }
    )
    out.update(_framework_vars(stack, packages, install))

    for extra in ("container_toolkit", "dcgm"):
        item = stack.get(extra)
        out[f"{extra}_enabled"] = item is not None
        if item is not None:
            out[f"{extra}_version"] = _check_text(str(item.get("version") or ""), f"{extra}.version")
    if stack.get("dcgm") is not None:
        out["dcgm_cuda_major"] = str(stack["dcgm"].get("cuda_major") or "")

    out.update(
        {
            "verify_driver_version": driver["version"] if driver else "",
            "verify_frameworks": _pinned_versions(out["frameworks_installs"]),
            "verify_venv": install.venv,
            "verify_stack": dict(stack),
        }
    )
    return out


def _pinned_versions(installs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """{distribution: exact version} of the pinned requirements (``tensorflow[and-cuda]==2.20.0``)."""
    out: dict[str, str] = {}
    for entry in installs:
        for req in entry["packages"]:
            name, _, version = str(req).partition("==")
            out[name.split("[")[0].strip()] = version.strip()
    return out


def _names(packages: PackagePlan, role: str) -> list[str]:
    return [i.name for i in packages.for_role(role)]


def _method(driver: Mapping[str, Any] | None, packages: PackagePlan, install: InstallSettings) -> str:
    locked = (driver or {}).get("install_method")
    if locked:
        return str(locked)
    return "nvidia-repo" if install.method == "auto" else install.method


def _driver_vars(
    driver: Mapping[str, Any] | None,
    packages: PackagePlan,
    method: str,
    install: InstallSettings,
    family: str,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "nvidia_driver_enabled": driver is not None,
        "nvidia_driver_reboot": install.reboot,
        "nvidia_driver_reboot_controller": install.reboot_controller,
    }
    if install.apt_mirror:
        out["nvidia_driver_debian_mirror"] = install.apt_mirror
    if install.mok_key and install.mok_cert:
        out["nvidia_driver_mok_key"] = install.mok_key
        out["nvidia_driver_mok_cert"] = install.mok_cert
    if driver is None:
        return out
    version = _check_version(driver.get("version"), "driver.version")
    flavour = driver.get("kernel_modules")
    if flavour not in ("open", "proprietary"):
        raise BadInput(f"the lock's driver.kernel_modules {flavour!r} is unknown", "regenerate the lock")
    out.update(
        {
            "nvidia_driver_method": method,
            "nvidia_driver_branch": _check_version(str(driver.get("branch")), "driver.branch"),
            "nvidia_driver_version": version,
            "nvidia_driver_kernel_modules": flavour,
        }
    )
    driver_pkgs = packages.for_role("nvidia_driver")
    names = [_check_text(i.name, "driver package") for i in driver_pkgs]
    repo = next((r for r in packages.repositories if r.name == "cuda"), None)
    if repo is not None and method == "nvidia-repo":
        out["nvidia_driver_repo_url"] = _check_url(repo.url.rstrip("/"), "driver repository")
    if method == "nvidia-repo":
        pinning = [n for n in names if n.startswith("nvidia-driver-pinning-")]
        # the role pins these at the driver's version: the unversioned (dkms from EPEL) are not its
        rest = [i.name for i in driver_pkgs if i.name not in pinning and i.version is not None]
        if packages.module_streams:
            # dnf module streams: enable the stream, then install the plan's packages at the version.
            out["nvidia_driver_dnf_module_stream"] = packages.module_streams[0].split(":", 1)[1]
        out["nvidia_driver_repo_pinning_package"] = pinning[0] if pinning else ""
        out["nvidia_driver_repo_packages"] = [_check_package(n, "driver package") for n in rest]
    else:
        # Precompiled module packages follow the kernel's version, headers the kernel's: not pinned.
        floating = [i.name for i in driver_pkgs if i.version is None]
        out["nvidia_driver_distro_packages"] = [_check_package(n, "driver package") for n in names if n not in floating]
        out["nvidia_driver_distro_unpinned_packages"] = [_check_package(n, "driver package") for n in floating]
        if "nvidia-driver" in names:
            # Debian's own packaging: the module is nvidia-current[-open] (dkms.conf of bookworm's
            # nvidia-[open-]kernel-dkms), the persistence daemon its own package (contrib) and version.
            module = "nvidia-current-open" if flavour == "open" else "nvidia-current"
            out["nvidia_driver_module_name"] = module
            out["nvidia_driver_persistenced_package"] = "nvidia-persistenced"
    return out


def _fm_package(names: Sequence[str], version: str, family: str) -> str:
    if not names:
        # NVIDIA's names when the lock has none: apt nvidia-fabricmanager-<branch>, dnf nvidia-fabric-manager.
        return (
            f"nvidia-fabricmanager-{version.split('.', maxsplit=1)[0]}"
            if family == "debian"
            else "nvidia-fabric-manager"
        )
    name = str(names[0]).split("=")[0]
    name = name.split(f"-{version}")[0]
    return _check_package(name, "fabric_manager package")


def _python_packages(os_id: str, family: str, python: str) -> list[str]:
    """OS packages that give ``python<X.Y>`` with its venv module (see docs: the OS table)."""
    default = _default_python(os_id)
    if family == "debian":
        return ["python3", "python3-venv"] if python == default else [f"python{python}", f"python{python}-venv"]
    return ["python3"] if python == default else [f"python{python}"]


def _default_python(os_id: str) -> str | None:
    try:
        from provision.matrix import load

        return load().os_release(os_id).default_python
    except BadInput:
        return None


def _framework_vars(stack: Mapping[str, Any], packages: PackagePlan, install: InstallSettings) -> dict[str, Any]:
    frameworks = stack.get("frameworks") or {}
    pip = packages.pip
    requirements = list(pip.requirements if pip else ())
    if not requirements:  # a lock without packages.pip: exact pins from the stack
        requirements = [f"{name}=={fw['version']}" for name, fw in frameworks.items()]
    for req in requirements:
        _check_text(req, "framework requirement")
        if "==" not in req or " " in req.strip():
            raise BadInput(f"the lock's framework requirement {req!r} is not an exact pin", "regenerate the lock")
    mirror = install.pip.index_url

    def mirrored(url: str) -> str:
        return mirror if mirror and url.rstrip("/") == PYPI else url

    index = pip.index_url if pip else ""
    extras = [mirrored(u) for u in (pip.extra_index_urls if pip else ())] + list(install.pip.extra_index_urls)
    for url in [index, *extras]:
        if url:
            _check_url(url, "index URL")
    return {
        "frameworks_enabled": bool(requirements),
        "frameworks_venv": install.venv,
        "frameworks_installs": [{"packages": requirements, "index_url": mirrored(index)}] if requirements else [],
        "frameworks_index_url": mirror or "",
        "frameworks_extra_index_urls": extras,
        "frameworks_find_links": list(install.pip.find_links),
        "frameworks_trusted_hosts": list(install.pip.trusted_hosts),
    }
