"""Typed records of the compatibility knowledge (what ``data/*.yaml`` says, after validation).

Every record keeps ``source`` (ids of ``sources.yaml`` or URLs) and ``confidence`` so that the
resolver's reasons and ``provision matrix`` can say where a fact comes from.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

from packaging.version import Version

from provision.matrix.packaging import Packaging

KernelModuleRule = Literal["open-only", "open-recommended", "proprietary-only"]
BranchClass = Literal["ltsb", "production", "new-feature"]


@functools.lru_cache(maxsize=256)  # the search compares the same few dozen strings tens of thousands of times
def cc_tuple(cc: str) -> tuple[int, int]:
    """``"9.0"`` -> ``(9, 0)``; compute capabilities compare as tuples, never as floats."""
    major, _, minor = cc.partition(".")
    return int(major), int(minor or 0)


def version_key(text: str) -> Version:
    return Version(text)


@dataclass(frozen=True)
class Architecture:
    name: str
    compute_capabilities: tuple[str, ...]
    first_cuda: str
    min_driver_branch: int
    last_driver_branch: int | None
    last_cuda: str | None
    kernel_modules: KernelModuleRule
    source: tuple[str, ...]
    confidence: str


@dataclass(frozen=True)
class Gpu:
    """One GPU model. ``name`` is canonical (``H100-SXM``); the other names map onto it."""

    name: str
    arch: str
    compute_capability: str
    memory_gib: float
    pci_ids: tuple[str, ...]  # "10de:2330", lower case
    pci_forms: dict[str, str]  # pci id -> "sxm" | "pcie" | "card" | ... (with notes)
    nvml_names: tuple[str, ...]
    aliases: tuple[str, ...]
    needs_fabric_manager: bool  # its HGX/NVSwitch baseboard form needs nvidia-fabricmanager
    kernel_modules: KernelModuleRule
    min_driver_branch: int
    last_driver_branch: int | None  # None: still supported by the newest branches
    min_cuda: str
    last_cuda: str | None
    host_arch: str | None  # "aarch64" for Grace superchips and AWS Graviton parts
    note: str
    source: tuple[str, ...]
    confidence: str
    # The first driver release that drives it, where that is above its branch floor's first release
    # (its name table names the model from there: B300 580.82.07; B200 570.133.20); None: any
    # release of a branch >= min_driver_branch.
    min_driver: str | None = None

    @property
    def cc(self) -> tuple[int, int]:
        return cc_tuple(self.compute_capability)


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    read: str  # when the price was read (YYYY-MM-DD, or YYYY-MM in older entries)
    source: tuple[str, ...]
    confidence: str


@dataclass(frozen=True)
class Interconnect:
    """How the GPUs inside one instance reach each other (ec2.yaml `interconnect`)."""

    kind: str  # "nvswitch" | "nvlink" | "nvlink-multinode" | "pcie"
    source: tuple[str, ...]
    confidence: str


@dataclass(frozen=True)
class InstanceType:
    name: str
    family: str
    gpu: Gpu
    gpu_count: int
    arch: str
    fabric_manager: bool
    efa: bool
    gpu_memory_gib: float
    price: Price | None
    note: str
    source: tuple[str, ...]
    confidence: str
    interconnect: Interconnect | None = None  # None: the data does not say


@dataclass(frozen=True)
class OsRelease:
    id: str  # "ubuntu-22.04": os-release ID-VERSION_ID
    family: str  # debian | rhel | amzn
    pythons: tuple[str, ...]  # installable from the OS's packages; the default first
    gcc: int
    archs: tuple[str, ...]
    install_methods: tuple[str, ...]  # nvidia-repo, distro
    repo_name: str | None  # the CUDA repository's directory name (ubuntu2204, rhel9, ...)
    eol: str | None
    aliases: tuple[str, ...]
    source: tuple[str, ...]
    confidence: str
    unmanaged: str | None = None  # why provision cannot manage it (plan refuses it); None: it can
    # the major.minor of the OS archive's own nvidia-cuda-toolkit (the distro method's toolkit); None: none
    distro_cuda_toolkit: str | None = None
    # the oldest driver branch NVIDIA's repository for this OS (repo_name) carries: the nvidia-repo
    # method cannot install an older one here; None: not known to be limited
    repo_first_branch: int | None = None
    # the release's codename in its archive's suite names (dists/bookworm, bookworm-updates); None:
    # not an apt release, or not known
    codename: str | None = None

    @property
    def default_python(self) -> str:
        return self.pythons[0]


@dataclass(frozen=True)
class StandalonePython:
    """python-build-standalone CPython, installed by uv: the minors on offer (newest first)."""

    uv: str  # the uv release that installs them (its embedded list and hashes)
    # that release's own wheels per host CPU, {filename: sha256} as the index lists them:
    # python_env installs uv with --require-hashes from these alone
    uv_wheels: dict[str, dict[str, str]]
    pythons: tuple[str, ...]
    archs: tuple[str, ...]
    read: str
    source: tuple[str, ...]
    confidence: str


@dataclass(frozen=True)
class CudaToolkit:
    version: str  # "12.8"
    releases: dict[str, str]  # GA/U1.. -> bundled driver
    full_compat_min_driver: str | None
    minor_compat_min_driver: str
    sm_min: int
    sm_max: int
    gcc_max: int | None
    os: tuple[str, ...]
    os_confidence: str
    source: tuple[str, ...]
    confidence: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


EOL_PAST = "past"  # drivers.yaml `eol: past`: NVIDIA lists the branch as end of life, with no month


@dataclass(frozen=True)
class DriverBranch:
    branch: int
    cls: BranchClass
    max_cuda: str
    eol: str | None  # YYYY-MM, EOL_PAST (ended, month not given), None: no end of life announced
    newest: str | None  # newest known release; None: no exact version known
    releases: tuple[str, ...]
    distro: dict[str, str]  # os id -> the version the distribution's own packages carry
    note: str
    source: tuple[str, ...]
    confidence: str
    # every release NVIDIA tagged in open-gpu-kernel-modules (drivers.yaml release_tags): known to
    # exist, so an exact --driver may name one; the resolver itself picks from ``releases``
    tagged: tuple[str, ...] = ()

    def end_of_life(self, snapshot: str) -> bool:
        """The branch had reached end of life by ``snapshot`` (YYYY-MM, the data's "now")."""
        if self.eol == EOL_PAST:
            return True
        return bool(self.eol and snapshot and self.eol < snapshot)

    def eol_text(self, snapshot: str) -> str:
        """How the reasons phrase the branch's end of life ("" when none is announced)."""
        if self.eol == EOL_PAST:
            return "end of life (NVIDIA gives no month)"
        if not self.eol:
            return ""
        return f"reached end of life in {self.eol}" if self.end_of_life(snapshot) else f"supported until {self.eol}"


@dataclass(frozen=True)
class CudnnBuild:
    cuda_major: int
    min_driver: str


@dataclass(frozen=True)
class CudnnRelease:
    version: str  # "9.10.2.21"
    builds: tuple[CudnnBuild, ...]
    min_cc: str
    max_cuda_minor: dict[int, str]  # cuda major -> newest CUDA minor the build supports
    source: tuple[str, ...]
    confidence: str
    sass: tuple[str, ...] = ()  # compute capabilities with SASS, where measured in full; () unknown

    @property
    def series(self) -> str:
        return ".".join(self.version.split(".")[:2])


@dataclass(frozen=True)
class TorchVariant:
    name: str  # cu128 | cpu
    cuda: str | None  # "12.8"
    cudnn: str | None
    arch_list: tuple[str, ...]  # compute capabilities with SASS
    ptx: bool  # PTX for the last arch (newer GPUs can JIT)
    aarch64: bool  # a linux-aarch64 build of this variant exists
    confidence: str
    # Compute capabilities with SASS in the linux-aarch64 (sbsa) build, which PyTorch compiles
    # for fewer architectures than x86_64; the loader defaults it to ``arch_list``.
    arch_list_aarch64: tuple[str, ...] = ()
    # "high": measured from the aarch64 wheel itself; "medium": PyTorch's CI build script's list
    arch_list_aarch64_confidence: str = "high"

    def archs(self, arch: str) -> tuple[str, ...]:
        """The SASS list of this variant's wheel for the host ``arch`` (x86_64 | aarch64)."""
        return self.arch_list_aarch64 if arch == "aarch64" else self.arch_list

    @property
    def cuda_major(self) -> int | None:
        return int(self.cuda.split(".")[0]) if self.cuda else None


@dataclass(frozen=True)
class TorchRelease:
    version: str  # "2.8.0"
    python: tuple[str, ...]
    pypi_default: str
    variants: tuple[TorchVariant, ...]
    pypi_aarch64_cuda: bool  # the PyPI aarch64 wheel carries CUDA (from 2.11)
    nccl: str | None  # the PyPI wheel's nvidia-nccl pin (shared by variants of its CUDA major)
    note: str
    source: tuple[str, ...]
    confidence: str
    python_x86_64_only: tuple[str, ...] = ()  # of `python`: no linux-aarch64 wheel for these

    def variant(self, name: str) -> TorchVariant | None:
        return next((v for v in self.variants if v.name == name), None)


@dataclass(frozen=True)
class TensorflowRelease:
    version: str
    python: tuple[str, ...]
    cuda: str
    cudnn: str
    and_cuda: bool  # the [and-cuda] extra exists
    exact_pins: bool  # the extra pins exact CUDA library versions (clash with other pins)
    nccl_min: str | None  # the extra's NCCL floor where it uses ranges
    min_cc: str
    note: str
    source: tuple[str, ...]
    confidence: str
    # The Pythons on which `tensorflow[and-cuda]==version` installs from PyPI (every pin has a
    # wheel); () = nowhere (2.15.0's tensorrt-libs==8.6.1) or no extra. and_cuda_why: why not.
    and_cuda_python: tuple[str, ...] = ()
    and_cuda_why: str = ""


@dataclass(frozen=True)
class JaxRelease:
    version: str
    python: tuple[str, ...]
    cuda_majors: tuple[int, ...]
    cudnn_min: dict[int, str]
    note: str
    source: tuple[str, ...]
    confidence: str


@dataclass(frozen=True)
class JaxCudaLine:
    extra: str  # cuda12 | cuda13
    cuda_major: int
    min_driver: str
    min_cc: str
    source: tuple[str, ...]
    confidence: str


@dataclass(frozen=True)
class Source:
    id: str
    url: str
    what: str


@dataclass(frozen=True)
class MinorCompat:
    cuda_major: int
    min_driver: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class Constant:
    """One sourced number of an estimate's formula (finetune.yaml): advice, not compatibility."""

    name: str
    value: float | bool  # a bool for a switch (qlora_checkpointing)
    what: str
    source: tuple[str, ...]
    confidence: str


@dataclass
class Tables:
    """Every table of the knowledge, filled by the loader."""

    architectures: dict[str, Architecture] = field(default_factory=dict)
    gpus: list[Gpu] = field(default_factory=list)
    instance_types: dict[str, InstanceType] = field(default_factory=dict)
    os_releases: dict[str, OsRelease] = field(default_factory=dict)
    standalone_python: StandalonePython | None = None
    toolkits: list[CudaToolkit] = field(default_factory=list)
    minor_compat: dict[int, MinorCompat] = field(default_factory=dict)
    branches: list[DriverBranch] = field(default_factory=list)
    cudnn: list[CudnnRelease] = field(default_factory=list)
    torch: list[TorchRelease] = field(default_factory=list)
    tensorflow: list[TensorflowRelease] = field(default_factory=list)
    jax: list[JaxRelease] = field(default_factory=list)
    jax_lines: dict[int, JaxCudaLine] = field(default_factory=dict)
    packaging: Packaging | None = None
    # cuDNN floors for releases the cudnn table lacks: (series start, min compute capability),
    # newest series first; and per architecture the first cuDNN with kernels for it
    cudnn_series_min_cc: tuple[tuple[str, str], ...] = ()
    cudnn_first_for_arch: dict[str, str] = field(default_factory=dict)
    # branches from which the open kernel modules are Beta, then production, on GeForce/workstation
    open_modules_geforce_beta: int = 0
    open_modules_geforce_production: int = 0
    finetune_memory: dict[str, Constant] = field(default_factory=dict)
    # gpus.yaml pci_device_ranges: (first, last device ID as ints, architecture, compute capability)
    pci_device_ranges: tuple[tuple[int, int, str, str], ...] = ()
    sources: dict[str, Source] = field(default_factory=dict)
    default_os: str = "ubuntu-24.04"
    snapshot: str = ""
    torch_index: str = "https://download.pytorch.org/whl"
    pypi_index: str = "https://pypi.org/simple"
