"""What ``provision resolve`` is asked: the stack request and the host description.

Both are validated here, where user-typed values enter: an unknown name, a malformed
specifier or an impossible count is :class:`BadInput` (exit 2) naming the nearest known values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from provision.errors import BadInput
from provision.matrix import Gpu, Knowledge, OsRelease, load
from provision.matrix.model import DriverBranch
from provision.model.defaults import INSTALL_METHOD_CHOICES
from provision.model.facts import ProbedHost

FRAMEWORKS = ("torch", "tensorflow", "jax")
EXTRAS = {"torch": frozenset(), "tensorflow": frozenset({"and-cuda"}), "jax": frozenset({"cuda12", "cuda13"})}
MAX_GPUS_PER_HOST = 16
# A branch (580) or an exact version in one of the forms NVIDIA's releases take, as the
# releases in data/drivers.yaml have them (tests/unit/matrix/test_matrix_data.py checks every one):
# NNN.NN (570.26), NNN.NNN (580.142), NNN.NN.NN (580.95.05), NNN.NNN.NN (580.159.03). A version
# the data does not list may still exist, so the form is checked, not the list; 580.1 cannot.
DRIVER_SPEC = re.compile(r"^(\d{3})(?:\.(\d{2,3})(?:\.(\d{2}))?)?$")
DRIVER_FORMS = "use auto, none, a branch (580) or a version NNN.NN, NNN.NNN, NNN.NN.NN or NNN.NNN.NN (580.95.05)"
_LOCAL_SPEC = re.compile(r"^(===?)\s*([^\s,;+]+)\+([A-Za-z0-9.]+)$")
_VARIANT = re.compile(r"^(cu\d{3}|cpu)$")
_PYTHON = re.compile(r"^3\.\d{1,2}$")
# install.python_source: the OS's Pythons, a standalone CPython (python-build-standalone via uv), or auto.
PYTHON_SOURCES = ("auto", "os", "standalone")


# --- the request ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameworkSpec:
    """One ``--framework`` value: PEP 508 name, extras, PEP 440 specifier, optional local tag."""

    name: str
    extras: frozenset[str]
    specifier: SpecifierSet
    local: str | None  # "cpu", "cu128": the wheel variant the local version tag asks for
    text: str

    @classmethod
    def parse(cls, text: str) -> FrameworkSpec:
        raw = text.strip()
        local: str | None = None
        try:
            req = Requirement(raw)
        except InvalidRequirement as exc:
            raise BadInput(
                f"malformed framework spec `{text}`: {exc}",
                "use a PEP 508 name and PEP 440 specifier, e.g. torch>=2.6 or torch==2.7.1+cu128",
            ) from None
        name = req.name.lower().replace("_", "-")
        if name not in FRAMEWORKS:
            raise BadInput(
                f"unsupported framework `{req.name}`",
                f"supported: {', '.join(FRAMEWORKS)}",
                suggestions=list(FRAMEWORKS),
            )
        if req.marker is not None or req.url:
            raise BadInput(f"framework spec `{text}` has a marker or URL", "give a name and a version specifier only")
        unknown = set(req.extras) - EXTRAS[name]
        if unknown:
            allowed = ", ".join(sorted(EXTRAS[name])) or "none"
            raise BadInput(f"unknown extra `{sorted(unknown)[0]}` for {name}", f"extras {name} takes: {allowed}")
        specs: list[str] = []
        for sp in req.specifier:
            m = _LOCAL_SPEC.match(str(sp))
            if m:  # "==2.7.1+cu128": the tag picks the variant, the version the release
                local = m.group(3).lower()
                specs.append(f"{m.group(1)}{m.group(2)}")
            else:
                specs.append(str(sp))
        if local is not None and name != "torch":
            raise BadInput(f"`{text}`: only torch has local-version variants", f"use {name}=={req.specifier}")
        if local is not None and not _VARIANT.match(local):
            raise BadInput(f"`{text}`: unknown torch variant `+{local}`", "use +cpu or +cuNNN, e.g. +cu128")
        try:
            spec = SpecifierSet(",".join(specs))
        except InvalidSpecifier as exc:  # pragma: no cover - Requirement already validated
            raise BadInput(f"malformed version specifier in `{text}`: {exc}", "see PEP 440") from None
        return cls(name, frozenset(req.extras), spec, local, raw)

    def allows(self, version: str) -> bool:
        return self.specifier.contains(Version(version), prereleases=True)

    def relaxed(self, keep_extras: bool = True) -> FrameworkSpec:
        """The same framework with no version constraint (used to find suggestions)."""
        extras = self.extras if keep_extras else frozenset()
        text = self.name + (f"[{','.join(sorted(extras))}]" if extras else "")
        return replace(self, specifier=SpecifierSet(), local=None, extras=extras, text=text)


@dataclass(frozen=True)
class StackRequest:
    """What the user asks for (``provision resolve`` options or the config's ``stack:``)."""

    frameworks: tuple[FrameworkSpec, ...] = ()
    driver: str = "auto"  # auto | none | "580" | "580.95.05"
    kernel_modules: str = "auto"  # auto | open | proprietary
    cuda_toolkit: str | None = None  # None: no system toolkit
    cudnn: str | None = None  # None: no system cuDNN
    python: str | None = None  # None: auto
    torch_index: str = "auto"  # auto | pypi | pytorch
    torch_variant: str | None = None
    install_method: str = "auto"  # auto | nvidia-repo | distro
    # Where the venv's Python comes from: auto (the OS's when one fits, else a standalone CPython),
    # os, or standalone (python-build-standalone, installed by uv).
    python_source: str = "auto"
    # The probed (or assumed) host's python3: the only OS Python a real host is planned with.
    host_python: str | None = None
    # --allow-unknown-driver: an exact --driver the knowledge data does not list is taken (with a
    # warning) instead of refused; the user says the release exists.
    allow_unknown_driver: bool = False

    @classmethod
    def build(
        cls,
        *,
        frameworks: Sequence[str] = (),
        driver: str | None = None,
        kernel_modules: str | None = None,
        cuda_toolkit: str | None = None,
        cudnn: str | None = None,
        python: str | None = None,
        torch_index: str | None = None,
        torch_variant: str | None = None,
        install_method: str | None = None,
        python_source: str | None = None,
        host_python: str | None = None,
        allow_unknown_driver: bool | None = None,
        knowledge: Knowledge | None = None,
    ) -> StackRequest:
        """Validate user-typed values (BadInput, exit 2, on anything malformed or unknown)."""
        k = knowledge or load()
        specs = tuple(FrameworkSpec.parse(f) for f in frameworks)
        names = [s.name for s in specs]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise BadInput(f"framework `{dup}` given twice", "give each framework once")
        drv = (driver or "auto").strip().lower()
        if drv not in ("auto", "none"):
            m = DRIVER_SPEC.match(drv)
            if not m:
                raise BadInput(f"malformed driver `{driver}`", DRIVER_FORMS)
            branch = k.branch(int(m.group(1)))
            if branch is None:
                known = ", ".join(str(b.branch) for b in k.t.branches[:6])
                raise BadInput(f"unknown driver branch `{m.group(1)}`", f"known branches: {known}, ...")
            if m.group(2) and not allow_unknown_driver and drv not in known_releases(branch):
                # a release that does not exist would be pinned (nvidia-open-580=580.999.99-*) and fail
                # on the host, after the plan; the data's list is NVIDIA's releases as read (drivers.yaml)
                newest = ", ".join(branch.releases[:4]) or "none known"
                raise BadInput(
                    f"unknown driver release `{drv}`: branch {branch.branch}'s known releases are {newest}",
                    f"pin one of them or the branch (--driver {branch.branch}); "
                    "--allow-unknown-driver if you know the release exists",
                    suggestions=list(branch.releases[:4]),
                )
        km = (kernel_modules or "auto").lower()
        if km not in ("auto", "open", "proprietary"):
            raise BadInput(f"unknown kernel module flavour `{kernel_modules}`", "use auto, open or proprietary")
        tk = _none_or(cuda_toolkit)
        if tk is not None:
            tk = k.toolkit(tk).version  # BadInput for versions that never existed (12.7)
        dnn = _none_or(cudnn)
        if dnn is not None:
            dnn = k.cudnn_release(dnn).version
        py = _none_or(python, also=("auto",))
        if py is not None and not _PYTHON.match(py):
            raise BadInput(f"malformed Python version `{python}`", "use X.Y, e.g. 3.11, or auto")
        index = (torch_index or "auto").lower()
        if index not in ("auto", "pypi", "pytorch"):
            raise BadInput(f"unknown torch index `{torch_index}`", "use auto, pypi or pytorch")
        variant = _none_or(torch_variant, also=("auto",))
        if variant is not None:
            variant = variant.lower()
            known_variants = sorted({v.name for r in k.t.torch for v in r.variants})
            if variant not in known_variants:
                raise BadInput(
                    f"unknown torch variant `{torch_variant}`",
                    f"known: {', '.join(known_variants)}",
                    suggestions=known_variants,
                )
            tagged = next((s.local for s in specs if s.name == "torch" and s.local), None)
            if tagged is not None and tagged != variant:  # the spec's tag would win silently
                raise BadInput(
                    f"--torch-variant {variant} contradicts the framework spec's +{tagged}",
                    f"give one variant: drop --torch-variant, or change the spec to +{variant}",
                )
        method = (install_method or "auto").lower()
        if method not in INSTALL_METHOD_CHOICES:
            raise BadInput(f"unknown install method `{install_method}`", f"use {', '.join(INSTALL_METHOD_CHOICES)}")
        source = (python_source or "auto").lower()
        if source not in PYTHON_SOURCES:
            raise BadInput(f"unknown Python source `{python_source}`", "use auto, os or standalone")
        return cls(
            specs, drv, km, tk, dnn, py, index, variant, method, source, allow_unknown_driver=bool(allow_unknown_driver)
        ).on_host(host_python)

    def on_host(self, host_python: str | None) -> StackRequest:
        """This request for a host whose python3 is ``host_python`` (checked: X.Y): the request is
        parsed once and each planned host gets its copy (provision/fleet/planning.py)."""
        hp = _none_or(host_python, also=("auto",))
        if hp is not None and not _PYTHON.match(hp):
            raise BadInput(f"malformed host Python version `{host_python}`", "use X.Y, e.g. 3.11")
        return replace(self, host_python=hp)

    @property
    def cpu_only(self) -> bool:
        """Every framework asks for CPU wheels (torch ``+cpu`` or ``--torch-variant cpu``)."""
        if not self.frameworks:
            return self.torch_variant == "cpu"
        return all(f.name == "torch" and (f.local or self.torch_variant) == "cpu" for f in self.frameworks)


def known_releases(branch: DriverBranch) -> frozenset[str]:
    """The releases of ``branch`` the data knows: NVIDIA's (``releases``, the open-gpu-kernel-modules
    tags) and the distributions' own."""
    return frozenset((*branch.releases, *branch.tagged, *branch.distro.values()))


def _none_or(value: str | None, also: tuple[str, ...] = ()) -> str | None:
    if value is None:
        return None
    v = str(value).strip()
    return None if v.lower() in ("none", "", *also) else v


# --- the host ---------------------------------------------------------------------------------

# What plan and resolve say of a probed host whose probe found no NVIDIA GPU (HostSpec.gpu None
# with facts): no driver is planned for it unless one is pinned.
NO_GPU_FOUND = "no NVIDIA GPU found on this host"


@dataclass(frozen=True)
class HostSpec:
    """A described host: what resolve needs to know about the machine (no contact with it)."""

    gpu: Gpu | None
    gpu_count: int
    os: OsRelease
    arch: str
    instance_type: str | None = None
    fabric_manager: bool | None = None  # known from the instance type or probed NVSwitches
    # What the probe found (None: described with --assume); the resolver reads what the host's own
    # index offers from it (provision.stack.distro_versions).
    probed: ProbedHost | None = field(default=None, compare=False, hash=False, repr=False)
    # A GPU the catalogue lacks, resolved for its architecture: what was assumed (the warning
    # gpu_assumed says it); None: the model is known.
    assumed: str | None = None

    @classmethod
    def describe(
        cls,
        *,
        gpu: str | None = None,
        gpu_count: int | None = None,
        instance_type: str | None = None,
        os: str | None = None,
        arch: str | None = None,
        nvswitch_count: int | None = None,
        knowledge: Knowledge | None = None,
    ) -> HostSpec:
        """Validate a host description (BadInput for unknown names and impossible counts)."""
        k = knowledge or load()
        g = k.gpu(gpu) if gpu else None
        fm: bool | None = None
        count = gpu_count
        a = arch.strip().lower() if arch else None
        if a is not None and a not in ("x86_64", "aarch64"):
            alias = {"amd64": "x86_64", "arm64": "aarch64"}.get(a)
            if alias is None:
                raise BadInput(f"unknown arch `{arch}`", "use x86_64 or aarch64")
            a = alias
        it_name = None
        if instance_type:
            it = k.instance_type(instance_type)
            it_name = it.name
            if g is not None and g.name != it.gpu.name:
                raise BadInput(f"{it.name} has {it.gpu.name} GPUs, not {g.name}", "drop --gpu or --instance-type")
            if count is not None and count != it.gpu_count:
                raise BadInput(
                    f"{it.name} has {it.gpu_count} GPU(s), not {count}", "drop --gpu-count or --instance-type"
                )
            if a is not None and a != it.arch:
                raise BadInput(f"{it.name} is {it.arch}, not {a}", "drop --arch or --instance-type")
            g, count, a, fm = it.gpu, it.gpu_count, it.arch, it.fabric_manager
        if count is not None and not 1 <= count <= MAX_GPUS_PER_HOST:
            raise BadInput(f"impossible GPU count {count}", f"give 1 to {MAX_GPUS_PER_HOST} GPUs per host")
        if count is not None and g is None:
            raise BadInput("--gpu-count without a GPU model", "add --gpu NAME or --instance-type T")
        if nvswitch_count is not None:
            fm = nvswitch_count > 0
        osr = k.os_release(os or k.t.default_os)
        if a is None:
            a = g.host_arch if g is not None and g.host_arch else "x86_64"
        return cls(g, count if count is not None else (1 if g else 0), osr, a, it_name, fm)

    @classmethod
    def from_facts(cls, facts: ProbedHost, knowledge: Knowledge | None = None) -> HostSpec:
        """A host described by what its probe found: the one facts -> HostSpec adapter (plan and up
        build the record from ``HostFacts`` with ``provision.hosts.facts.probed_host``, a ``probe
        --json`` document gives it through ``ProbedHost.from_json``; the stack never imports the
        hosts package).

        GPUs are matched by ``model`` or else ``pci_id``; a host without GPUs resolves as a
        GPU-less host (CPU-only stacks); several different models on one host are bad input: one
        driver and one stack are chosen per GPU model. A PCI ID the catalogue lacks is resolved for
        its architecture (its device-ID range, or NVML's compute capability) with a warning
        (``assumed``); only one whose architecture nothing tells is bad input.
        """
        k = knowledge or load()
        models: list[str] = []
        standin: tuple[Gpu, str] | None = None
        for g in facts.gpus:
            known = k.gpu(g.model) if g.model else k.gpu_by_pci_id(g.pci_id)
            if known is None:
                standin = k.assumed_gpu(g.pci_id, g.compute_capability)
                if standin is None:
                    raise BadInput(f"unknown GPU PCI ID `{g.pci_id}`", k.unknown_gpu_fix(g.pci_id))
                models.append(standin[0].name)
            else:
                models.append(known.name)
        if len(set(models)) > 1:
            raise BadInput(
                f"host has different GPU models ({', '.join(sorted(set(models)))})",
                "provision resolves one GPU model per host; describe it with --assume",
            )
        spec = cls.describe(
            gpu=models[0] if models and standin is None else None,
            gpu_count=len(models) if models and standin is None else None,
            instance_type=facts.instance_type,
            os=facts.os,
            arch=facts.arch,
            nvswitch_count=facts.nvswitch_count,
            knowledge=k,
        )
        if standin is not None:
            spec = replace(spec, gpu=standin[0], gpu_count=len(models), assumed=standin[1])
        return replace(spec, probed=facts)

    @property
    def needs_fabric_manager(self) -> bool:
        if self.gpu is None or not self.gpu.needs_fabric_manager:
            return False
        if self.fabric_manager is not None:
            return self.fabric_manager
        return self.gpu_count >= 8  # HGX 8-GPU baseboards carry the NVSwitches
