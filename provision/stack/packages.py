"""The package plan: exactly what the roles install for a resolved stack (the lock's ``packages``).

Owns filling the packaging table (:mod:`provision.matrix.packaging`) for one host and stack:
the signed repositories, module streams, packages with the manager's version expressions (and
the role that installs each), holds and services, plus pip's index URLs and exact requirement
lines. :class:`PackagePlan` is the typed hand-off from the resolver to the lock, ``plan --json``
and the role variables; its JSON is made only at the edges, by :meth:`PackagePlan.to_json` and
:meth:`PackagePlan.from_json`. :func:`check_plannable` is the plan-time refusal of what the
roles cannot manage (EL8, a repository whose key fingerprint the knowledge lacks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from provision.errors import BadInput
from provision.matrix import Knowledge
from provision.matrix.packaging import Packaging, PackagingRow
from provision.model.packages import Install, PackagePlan, PipPlan, Repository, Service
from provision.stack.candidates import DriverChoice, FwChoice
from provision.stack.distro_versions import KERNEL, KERNEL_FLAVOUR
from provision.stack.request import HostSpec, StackRequest
from provision.stack.rules import range_cudnn_pins

# --- building the plan from the table ---------------------------------------------------------


def packaging(k: Knowledge) -> Packaging:
    if k.t.packaging is None:
        raise BadInput("the knowledge has no packaging table", "reinstall provision")
    return k.t.packaging


def manager_of(host: HostSpec) -> str:
    """apt on the Debian family, dnf on the RPM families (the table's rows say which per OS)."""
    return "apt" if host.os.family == "debian" else "dnf"


def has_driver_packages(k: Knowledge, host: HostSpec, d: DriverChoice) -> bool:
    """Whether the table has the driver's packages for this OS, method, branch and module flavour."""
    b = d.branch.branch if d.branch else None
    return packaging(k).row("driver", host.os.id, method=d.method, branch=b, kernel_modules=d.flavour) is not None


def has_fabric_manager(k: Knowledge, host: HostSpec, d: DriverChoice) -> bool:
    """Whether the table knows the Fabric Manager's packages for this OS and install method."""
    b = d.branch.branch if d.branch else None
    return packaging(k).row("fabric_manager", host.os.id, method=d.method, branch=b) is not None


@dataclass
class _Builder:
    """Fills rows' templates for one host into the plan's parts, in row order."""

    host: HostSpec
    table: Packaging
    values: dict[str, str]
    repositories: list[Repository] = field(default_factory=list)
    module_streams: list[str] = field(default_factory=list)
    install: list[Install] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)

    def fill(self, text: str) -> str:
        return text.format_map(self.values)

    def add(self, row: PackagingRow) -> None:
        self.module_streams += [s for s in map(self.fill, row.module_streams) if s not in self.module_streams]
        for p in row.install:
            name = self.fill(p.name)
            if p.repository is not None:
                self._repository(p.repository)
            self.install.append(Install(name, self.fill(p.version) if p.version else None, row.role, p.repository))
            if p.hold and name not in self.holds:
                self.holds.append(name)
        self.services += [Service(self.fill(s), row.role) for s in row.services]

    def _repository(self, name: str) -> None:
        if any(r.name == name for r in self.repositories):
            return
        t = self.table.repository(name, self.host.os.id)
        if t is None:  # the loader checks every row's repository exists for its OS
            raise BadInput(f"{self.host.os.id}: no `{name}` repository in the knowledge", "report this as a bug")
        self.repositories.append(Repository(name, self.fill(t.url), self.fill(t.key_url), t.key_fingerprint))


def template_values(host: HostSpec) -> dict[str, str]:
    """The host's part of the placeholders: repository dirs and arch names."""
    aarch64 = host.arch == "aarch64"
    probed = host.probed
    index = probed.ubuntu_driver_index if probed is not None else None
    return {
        "repo_dir": host.os.repo_name or "",
        "arch_dir": "sbsa" if aarch64 else "x86_64",
        "deb_arch": "arm64" if aarch64 else "amd64",
        "rpm_arch": "aarch64" if aarch64 else "x86_64",
        # Ubuntu's precompiled modules follow the kernel: its flavour (a 22.04 HWE kernel's is
        # generic-hwe-22.04, not what `uname -r` says) and release come from the probed host's
        # index; a described host (--assume) leaves both in the names for the host to fill in
        # (nvidia_driver's distro-ubuntu.yml, by the rule of provision.stack.distro_versions).
        "kernel_flavour": (index.kernel_flavour if index is not None else None) or KERNEL_FLAVOUR,
        "kernel": (probed.kernel if probed is not None else None) or KERNEL,
    }


def package_plan(
    k: Knowledge,
    req: StackRequest,
    host: HostSpec,
    d: DriverChoice,
    combo: Sequence[FwChoice],
    *,
    cudnn_major: int | None,
    extras: Mapping[str, Mapping[str, str]] | None = None,
    python: str = "",
) -> PackagePlan:
    """The package plan of a resolved stack on ``host``, from the packaging table.

    ``extras``: components the stack adds beside the resolved ones, with their template values
    (``{"container_toolkit": {"container_toolkit_version": "1.17.8"}, "dcgm": {...}}``).
    """
    table = packaging(k)
    values = template_values(host)
    b = d.branch.branch if d.branch is not None and d.version is not None else None
    if b is not None and d.version is not None:
        values.update(branch=str(b), version=d.version)
    if req.cuda_toolkit:
        major, minor = req.cuda_toolkit.split(".")[:2]
        values.update(cuda_major=major, cuda_minor=minor)
    if req.cudnn and cudnn_major is not None:
        values.update(cudnn=req.cudnn, cudnn_major=req.cudnn.split(".")[0], cudnn_cuda_major=str(cudnn_major))
    build = _Builder(host, table, values)
    gpu = host.gpu.name if host.gpu else None
    os_id = host.os.id

    def add(
        component: str,
        *,
        method: str | None = None,
        branch: int | None = None,
        kernel_modules: str | None = None,
        gpu: str | None = None,
        cudnn_major: int | None = None,
    ) -> None:
        row = table.row(
            component,
            os_id,
            method=method,
            branch=branch,
            kernel_modules=kernel_modules,
            gpu=gpu,
            cudnn_major=cudnn_major,
        )
        if row is not None:
            build.add(row)

    if b is not None:
        add("dkms", method=d.method, branch=b)
        add("driver", method=d.method, branch=b, kernel_modules=d.flavour)
        add("imex", method=d.method, branch=b, gpu=gpu)
        if host.needs_fabric_manager:
            add("fabric_manager", method=d.method, branch=b)
            add("nvlsm", method=d.method, branch=b, gpu=gpu)
    if req.cuda_toolkit:
        add("cuda_toolkit", method=d.method)
    if req.cudnn and cudnn_major is not None:
        add("cudnn", cudnn_major=int(req.cudnn.split(".")[0]))
    for component, more in (extras or {}).items():
        values.update(more)
        add(component)
    install = tuple(build.install)
    if d.method == "distro" and host.os.id.startswith("ubuntu") and host.probed is None:
        # No index was read: the host's kernel decides the version (the run records it).
        install = tuple(replace(i, version=None) if i.role == "nvidia_driver" else i for i in install)
    return PackagePlan(
        manager=manager_of(host),
        repositories=tuple(build.repositories),
        module_streams=tuple(build.module_streams),
        install=install,
        holds=tuple(build.holds),
        services=tuple(build.services),
        pip=pip_plan(k, combo, host, python),
    )


def pip_plan(k: Knowledge, combo: Sequence[FwChoice], host: HostSpec | None = None, python: str = "") -> PipPlan:
    """pip's index (the first non-PyPI index the frameworks need), extra indexes and pins; a cuDNN
    pin where a framework's own range would give the GPU a cuDNN without its kernels (rules.range_cudnn_pins)."""
    indexes = dedupe([fw.index_url for fw in combo])
    pypi = k.t.pypi_index
    index_url = next((i for i in indexes if i != pypi), pypi)
    extra = [i for i in indexes if i != index_url]
    if index_url != pypi and pypi not in extra:
        extra.append(pypi)  # torch's own dependencies (filelock, sympy, nvidia-*) come from PyPI
    requirements = [fw.requirement for fw in combo]
    if host is not None:
        pins = range_cudnn_pins(k, combo, host, python)
        requirements += [f"{r.package}=={r.fits}" for _, r in pins if r.fits is not None]
    return PipPlan(index_url, tuple(extra), tuple(dict.fromkeys(requirements)))


def check_plannable(host: HostSpec, plan: PackagePlan | None = None) -> None:
    """Plan-time refusal (BadInput, one line) of what the roles cannot manage on this host."""
    if host.os.unmanaged:
        raise BadInput(f"{host.os.id} is not supported: {host.os.unmanaged}", "use an EL9 or newer release")
    for r in plan.repositories if plan else ():
        if r.key_fingerprint is None:
            key = r.key_url.rsplit("/", 1)[-1]
            raise BadInput(
                f"{host.os.id}: the fingerprint of NVIDIA's {r.name} repository key {key} is not verified yet",
                "pin it in provision/matrix/data/packaging.yaml, or use another OS",
            )


def dedupe(items: Sequence[str]) -> list[str]:
    """``items`` in order, each once."""
    out: list[str] = []
    for i in items:
        if i not in out:
            out.append(i)
    return out
