"""Candidates: each requested framework's releases and wheels, best first, and the driver choice type.

Torch candidates come per release and CUDA variant (the one PyPI serves first, then newer CUDA),
TensorFlow per release, JAX per release and CUDA line. Each is a :class:`FwChoice`: what the rules
check and what the package plan installs. :class:`DriverChoice` is one driver candidate
(:mod:`provision.stack.drivers` lists them). Reads only the request and the knowledge.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from packaging.version import Version

from provision.matrix import Knowledge, TorchRelease, TorchVariant
from provision.matrix.model import DriverBranch, JaxRelease, TensorflowRelease
from provision.stack.request import FrameworkSpec, StackRequest


@dataclass(frozen=True)
class DriverChoice:
    """One driver candidate (branch None: no driver is managed)."""

    branch: DriverBranch | None
    version: str | None
    method: str  # nvidia-repo | distro
    flavour: str | None  # open | proprietary


@dataclass(frozen=True)
class FwChoice:
    """One framework candidate: a release (and torch variant) from one index, and what it needs."""

    name: str
    version: str
    variant: str | None  # torch variant
    extras: tuple[str, ...]
    cuda: str | None
    cudnn: str | None
    index_url: str
    requirement: str
    arch_list: tuple[str, ...] = ()
    ptx: bool = False
    tf: TensorflowRelease | None = None
    jax: JaxRelease | None = None
    python: tuple[str, ...] = ()
    nccl: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}" + (f" {self.variant}" if self.variant else "")


class Candidates:
    """The framework candidates of one request, each framework's best first."""

    def __init__(self, request: StackRequest, knowledge: Knowledge, *, no_gpu: bool = False) -> None:
        self.req = request
        self.k = knowledge
        # a probed host where the probe found no NVIDIA GPU: torch's CPU build comes first (a
        # CUDA build is gigabytes of libraries nothing can use there, and up's preflight refuses it)
        self.no_gpu = no_gpu

    def framework_specs(self) -> tuple[FrameworkSpec, ...]:
        return self.req.frameworks or (FrameworkSpec.parse("torch"),)

    def torch_candidates(self, spec: FrameworkSpec) -> Iterator[FwChoice]:
        k = self.k
        want_variant = spec.local or self.req.torch_variant
        for rel in k.t.torch:
            if not spec.allows(rel.version):
                continue
            for variant in self._variant_order(rel, want_variant):
                index = self._torch_index(rel, variant)
                if index is None:
                    continue
                pypi = index == k.t.pypi_index
                req = f"torch=={rel.version}" if pypi else f"torch=={rel.version}+{variant.name}"
                yield FwChoice(
                    "torch",
                    rel.version,
                    variant.name,
                    tuple(sorted(spec.extras)),
                    variant.cuda,
                    variant.cudnn,
                    index,
                    req,
                    variant.arch_list,
                    variant.ptx,
                    python=rel.python,
                    nccl=self._torch_nccl(rel, variant),
                )

    @staticmethod
    def _torch_nccl(rel: TorchRelease, variant: TorchVariant) -> str | None:
        """The NCCL pin, known for the PyPI wheel and the variants of its CUDA major."""
        default = rel.variant(rel.pypi_default)
        if default is None or variant.cuda_major is None or variant.cuda_major != default.cuda_major:
            return None
        return rel.nccl

    def _variant_order(self, rel: TorchRelease, want: str | None) -> list[TorchVariant]:
        if want is not None:
            v = rel.variant(want)
            return [v] if v else []
        cuda = [v for v in rel.variants if v.cuda is not None]
        default = [v for v in cuda if v.name == rel.pypi_default]
        others = sorted(
            (v for v in cuda if v.name != rel.pypi_default), key=lambda v: Version(v.cuda or "0"), reverse=True
        )
        cpu = [v for v in rel.variants if v.cuda is None] if self.no_gpu else []
        return cpu + default + others

    def _torch_index(self, rel: TorchRelease, variant: TorchVariant) -> str | None:
        """Where this wheel comes from under --torch-index, or None when that index lacks it."""
        vendor = f"{self.k.t.torch_index}/{variant.name}"
        if self.req.torch_index == "pypi":
            return self.k.t.pypi_index if variant.name == rel.pypi_default else None
        return vendor

    def tf_candidates(self, spec: FrameworkSpec) -> Iterator[FwChoice]:
        # `tensorflow` without [and-cuda] next to a system CUDA toolkit asks for the build that
        # loads the system CUDA and cuDNN; otherwise the extra (where it exists) brings them.
        system = "and-cuda" not in spec.extras and self.req.cuda_toolkit is not None
        for rel in self.k.t.tensorflow:
            if not spec.allows(rel.version):
                continue
            extras = ("and-cuda",) if rel.and_cuda and not system else ()
            name = "tensorflow[and-cuda]" if extras else "tensorflow"
            yield FwChoice(
                "tensorflow",
                rel.version,
                None,
                extras,
                rel.cuda,
                rel.cudnn,
                self.k.t.pypi_index,
                f"{name}=={rel.version}",
                tf=rel,
                python=rel.python,
            )

    def jax_candidates(self, spec: FrameworkSpec) -> Iterator[FwChoice]:
        asked = sorted(spec.extras)
        for rel in self.k.t.jax:
            if not spec.allows(rel.version):
                continue
            for major in rel.cuda_majors:  # newest CUDA line first
                extra = f"cuda{major}"
                if asked and extra not in asked:
                    continue
                yield FwChoice(
                    "jax",
                    rel.version,
                    None,
                    (extra,),
                    str(major),
                    f">={rel.cudnn_min.get(major, '9')}",
                    self.k.t.pypi_index,
                    f"jax[{extra}]=={rel.version}",
                    jax=rel,
                    python=rel.python,
                )

    def for_spec(self, spec: FrameworkSpec) -> Iterator[FwChoice]:
        if spec.name == "torch":
            return self.torch_candidates(spec)
        if spec.name == "tensorflow":
            return self.tf_candidates(spec)
        return self.jax_candidates(spec)

    def index_note(self, spec: FrameworkSpec) -> str:
        if spec.name == "torch" and self.req.torch_index == "pypi" and (spec.local or self.req.torch_variant):
            return " on PyPI (PyPI serves one variant per release, without a local tag)"
        return ""
