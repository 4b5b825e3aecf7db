"""Ubuntu's ``distro`` driver: the version the host's own package index can install, and its packages.

Why the host decides: Ubuntu's archive keeps only the newest version of each package per pocket,
and Canonical's signed precompiled modules (``linux-modules-nvidia-<b>-server[-open]-<uname -r>``,
source linux-restricted-modules) are built per kernel for one driver version, the floor of their
``nvidia-kernel-common-<b>-server (>= X)`` dependency (NVIDIA GPU Operator docs, "precompiled
drivers", `apt show linux-modules-nvidia-525-server-5.15.0-69-generic`). The knowledge's
per-release version is a guess that goes stale; probe reads the host's index instead
(``ProbedHost.ubuntu_driver_index``, read by provision/hosts/gather.py) and this module turns it into the
driver version the lock holds. Without facts (``--assume``) the version is decided on the host:
the plan says so (version null, the kernel's flavour and release left in the names as
``{kernel_flavour}`` and ``{kernel}``) and the run records what was installed.

The packages are the headless set on Canonical's precompiled modules, as NVIDIA's precompiled
driver container installs them (NVIDIA/gpu-driver-container ubuntu22.04/precompiled/local-repo.sh:
``linux-modules-nvidia-<b>-server[-open]-<kernel>``, ``nvidia-headless-no-dkms-<b>-server``,
``nvidia-utils-<b>-server``): ``-no-dkms``, because ``nvidia-headless-<b>-server[-open]`` pulls in
``nvidia-dkms-*`` and builds the module a second time. Nothing here reads a host: it reads facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from provision.model.facts import ProbedHost

# In a package name of the plan, what the host fills in where the plan had no facts (--assume).
KERNEL_FLAVOUR = "{kernel_flavour}"
KERNEL = "{kernel}"
# What the host puts there, in the shape Ubuntu's kernels have: a name with the parts left open is
# checked as a package name in this shape (role_vars), so only those two parts may stay open.
_FILLED_EXAMPLE = {KERNEL_FLAVOUR: "generic", KERNEL: "6.8.0-1-generic"}


def filled_example(name: str) -> str:
    """``name`` with the parts the host fills in replaced by values of their shape."""
    for part, example in _FILLED_EXAMPLE.items():
        name = name.replace(part, example)
    return name


@dataclass(frozen=True)
class UbuntuDriver:
    """The driver the host's index offers for a branch, or why it offers none (``refused``).

    ``version`` None and ``refused`` None: decided on the host (no facts to read).
    """

    version: str | None
    kernel: str | None
    kernel_flavour: str | None
    refused: str | None = None
    note: str = ""

    @property
    def decided_on_host(self) -> bool:
        return self.version is None and self.refused is None


def _suffix(open_modules: bool) -> str:
    return "-open" if open_modules else ""


def userspace_packages(branch: int, open_modules: bool) -> tuple[str, ...]:
    """The headless set whose index entries probe read (the package plan's names come from the
    packaging table's Ubuntu distro rows: tests/unit/stack/test_distro_versions.py keeps the two in step)."""
    return (f"nvidia-headless-no-dkms-{branch}-server{_suffix(open_modules)}", f"nvidia-utils-{branch}-server")


def _upstream(version: str) -> str:
    return version.split(":", 1)[-1].split("-", 1)[0]


def ubuntu_driver(probed: ProbedHost | None, branch: int, open_modules: bool) -> UbuntuDriver:
    """What the host's index (read at probe) offers for ``branch``.

    Refused (one line, for the resolver's failures) when the running kernel has no precompiled
    module of the branch and flavour, or when the index's headless set is at another version
    than the one those modules were built for: apt would then mix a new user space with an old
    module, which the driver refuses at load.
    """
    index = probed.ubuntu_driver_index if probed is not None else None
    kernel = probed.kernel if probed is not None else None
    if index is None:
        return UbuntuDriver(None, kernel, None, note="decided on the host: its kernel's precompiled modules fix it")
    flavour = index.kernel_flavour
    if not index.lists:
        return UbuntuDriver(None, kernel, flavour, note="decided on the host: apt had no package lists at probe")
    kind = f"{branch}-server{_suffix(open_modules)}"
    module = next((m for m in index.modules if m.branch == branch and m.open == open_modules), None)
    if module is None:
        return UbuntuDriver(
            None,
            kernel,
            flavour,
            refused=f"install_method: Ubuntu has no precompiled {kind} modules for kernel {kernel} in the host's index",
        )
    version = module.driver_version
    if not version:
        return UbuntuDriver(None, kernel, flavour, note=f"decided on the host: {module.package} names no driver")
    for name in userspace_packages(branch, open_modules):
        found = index.userspace.get(name)
        candidate = found.candidate if found is not None else None
        if candidate is None:
            return UbuntuDriver(
                None, kernel, flavour, refused=f"install_method: {name} is not in the host's index (apt-get update?)"
            )
        if _upstream(candidate) != version:
            return UbuntuDriver(
                None,
                kernel,
                flavour,
                refused=(
                    f"install_method: the host's index has {name} {_upstream(candidate)}, but kernel {kernel}'s "
                    f"precompiled modules are {version} (Ubuntu keeps only the newest); boot the newest kernel "
                    "and probe again, or use install_method nvidia-repo"
                ),
            )
    return UbuntuDriver(version, kernel, flavour, note=f"from the host's index ({module.package})")
