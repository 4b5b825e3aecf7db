"""The resolver: (stack request, host description) -> an exact, explained set of versions.

Pure: it reads only the compatibility knowledge (:mod:`provision.matrix`) and its arguments,
never a host, the network or the clock, so the same request always gives the same answer.

The search takes candidates newest first (frameworks, then their CUDA variant with the one PyPI
serves first, then Python, then the driver branch preferring no caveats, then long-term and
production branches) and returns the first set that passes every rule. A rule either passes,
passes with a warning (a caveat: minor-version compatibility, an end-of-life branch, PTX JIT),
or fails with a message naming the rule. When nothing passes, :class:`Unsatisfiable` names the
failing rules and carries concrete changes that would work (:mod:`provision.suggest`).
The request and host types live in :mod:`provision.request`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

from provision.errors import Unsatisfiable
from provision.matrix import Gpu, Knowledge, TorchRelease, TorchVariant, cc_tuple, load
from provision.matrix.model import DriverBranch, JaxRelease, TensorflowRelease
from provision.stack.request import DRIVER_SPEC, FRAMEWORKS, FrameworkSpec, HostSpec, StackRequest

__all__ = ["FRAMEWORKS", "FrameworkSpec", "HostSpec", "Resolution", "StackRequest", "resolve"]

BRANCH_RANK = {"ltsb": 0, "production": 1, "new-feature": 2}
RULE_ORDER = {
    rule: i
    for i, rule in enumerate(
        (
            "gpu_host_arch",
            "os_arch",
            "install_method",
            "gpu_arch",
            "arch",
            "driver_gpu",
            "kernel_modules",
            "driver_cuda",
            "toolkit_gpu",
            "toolkit_os",
            "cudnn_gpu",
            "cudnn_cuda",
            "cudnn_driver",
            "tf_system_cuda",
            "env_conflict",
            "fabric_manager",
            "driver",
            "python",
        )
    )
}


# --- the result -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caveat:
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass
class Resolution:
    """A resolved stack: the ``host`` and ``stack`` of the JSON contract, packages, explanations."""

    host: dict[str, Any]
    stack: dict[str, Any]
    packages: dict[str, Any]
    warnings: list[Caveat]
    reasons: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "host": self.host,
            "stack": self.stack,
            "warnings": [w.to_json() for w in self.warnings],
            "reasons": list(self.reasons),
        }


# --- rule results -----------------------------------------------------------------------------


@dataclass
class Check:
    """What the rules said about one candidate: failures (rule: message), caveats, reasons."""

    failures: list[str] = field(default_factory=list)
    warnings: list[Caveat] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def fail(self, rule: str, message: str) -> None:
        self.failures.append(f"{rule}: {message}")

    def warn(self, code: str, message: str) -> None:
        if all(w.code != code or w.message != message for w in self.warnings):
            self.warnings.append(Caveat(code, message))

    def merge(self, other: Check) -> None:
        self.failures += other.failures
        for w in other.warnings:
            self.warn(w.code, w.message)
        self.reasons += other.reasons

    @property
    def ok(self) -> bool:
        return not self.failures


def _v(text: str) -> Version:
    return Version(text)


def _driver_floor(k: Knowledge, cuda: str) -> tuple[str | None, str | None]:
    """(full-compatibility driver, minor-compatibility floor) for a CUDA ``major.minor``."""
    tk = next((t for t in k.t.toolkits if t.version == cuda), None)
    major = int(cuda.split(".", maxsplit=1)[0])
    full = tk.full_compat_min_driver if tk else None
    return full, k.minor_floor(major)


def check_driver_for_cuda(k: Knowledge, what: str, cuda: str, driver: str | None, via_ptx: bool) -> Check:
    """Rule driver_cuda: the driver runs code built with CUDA ``cuda``."""
    c = Check()
    full, floor = _driver_floor(k, cuda)
    if driver is None:
        need = full or floor
        c.warn(
            "driver_unmanaged",
            f"{what} needs a host driver >= {need} (CUDA {cuda}); the driver is left alone",
        )
        return c
    if full is not None and _v(driver) >= _v(full):
        c.reasons.append(f"driver {driver} >= {full}: runs CUDA {cuda} ({what}) with full compatibility")
        return c
    if floor is not None and _v(driver) >= _v(floor):
        if via_ptx:
            c.fail(
                "driver_cuda",
                f"{what} reaches this GPU only through PTX JIT, which needs driver >= {full} "
                f"(CUDA {cuda}); {driver} has only minor-version compatibility",
            )
            return c
        c.warn(
            "minor_version_compat",
            f"driver {driver} runs {what} (CUDA {cuda}) through minor-version compatibility "
            f"(>= {floor}); full compatibility needs >= {full or 'a newer driver'}",
        )
        return c
    c.fail("driver_cuda", f"{what} (CUDA {cuda}) needs driver >= {floor or full}; {driver} is older")
    return c


def gpu_kernels(gpu: Gpu, arch_list: Sequence[str], ptx: bool) -> str | None:
    """How a wheel's compiled code reaches ``gpu``: ``sass``, ``compatible`` (same major, older
    minor SASS), ``ptx`` (JIT from the newest arch's PTX) or None ("no kernel image")."""
    cc = gpu.cc
    ccs = [cc_tuple(a) for a in arch_list]
    if cc in ccs:
        return "sass"
    if any(a[0] == cc[0] and a[1] <= cc[1] for a in ccs):
        return "compatible"
    if ptx and ccs and cc > max(ccs):
        return "ptx"
    return None


def check_wheel_arch(gpu: Gpu | None, what: str, arch_list: Sequence[str], ptx: bool) -> tuple[Check, bool]:
    """Rule gpu_arch: the wheel carries code this GPU can run. Returns (check, reached via PTX)."""
    c = Check()
    if gpu is None:
        return c, False
    how = gpu_kernels(gpu, arch_list, ptx)
    sm = gpu.compute_capability
    if how is None:
        listed = ", ".join(arch_list) or "none"
        c.fail(
            "gpu_arch",
            f"{what} has no kernels for {gpu.name} (compute capability {sm}); it is built for {listed}",
        )
    elif how == "compatible":
        c.reasons.append(
            f"{what} does not list compute capability {sm}; {gpu.name} runs its "
            f"sm_{cc_tuple(sm)[0]}x code (binary compatible within a major version)"
        )
    elif how == "ptx":
        c.warn(
            "ptx_jit",
            f"{what} has no kernels compiled for {gpu.name} (sm {sm}); they are JIT-compiled from PTX "
            "at first use (slow start, caveats)",
        )
    else:
        c.reasons.append(f"{what} has kernels for {gpu.name} (compute capability {sm})")
    return c, how == "ptx"


# --- candidates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DriverChoice:
    branch: DriverBranch | None
    version: str | None
    method: str  # nvidia-repo | distro
    flavour: str | None  # open | proprietary


@dataclass(frozen=True)
class FwChoice:
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


class Resolver:
    """One resolution: the request, the host and the knowledge; :meth:`run` searches."""

    def __init__(self, request: StackRequest, host: HostSpec, knowledge: Knowledge) -> None:
        self.req = request
        self.host = host
        self.k = knowledge
        self.failures: list[str] = []  # rules that failed before the search (no candidates at all)
        self._nearest_key: tuple[int, int] | None = None
        self._nearest_miss: list[str] | None = None

    # frameworks -----------------------------------------------------------------------------
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
        others = sorted((v for v in cuda if v.name != rel.pypi_default), key=lambda v: _v(v.cuda or "0"), reverse=True)
        return default + others

    def _torch_index(self, rel: TorchRelease, variant: TorchVariant) -> str | None:
        """Where this wheel comes from under --torch-index, or None when that index lacks it."""
        vendor = f"{self.k.t.torch_index}/{variant.name}"
        if self.req.torch_index == "pypi":
            return self.k.t.pypi_index if variant.name == rel.pypi_default else None
        return vendor

    def tf_candidates(self, spec: FrameworkSpec) -> Iterator[FwChoice]:
        for rel in self.k.t.tensorflow:
            if not spec.allows(rel.version):
                continue
            extras = ("and-cuda",) if rel.and_cuda else ()
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

    def candidates(self, spec: FrameworkSpec) -> Iterator[FwChoice]:
        if spec.name == "torch":
            return self.torch_candidates(spec)
        if spec.name == "tensorflow":
            return self.tf_candidates(spec)
        return self.jax_candidates(spec)

    # host-level rules (independent of the driver) ------------------------------------------
    def check_framework_static(self, fw: FwChoice, python: str) -> tuple[Check, bool]:
        """Python, arch, GPU architecture: the rules that do not depend on the driver.

        Returns the check and whether the GPU is reached only through PTX JIT (which the
        driver rules then treat more strictly).
        """
        c = Check()
        if python not in fw.python:
            c.fail("python", f"{fw.label} has no wheels for Python {python} (has {', '.join(fw.python)})")
        if fw.name == "torch":
            via_ptx = self._static_torch(fw, c)
        elif fw.name == "tensorflow":
            via_ptx = self._static_tf(fw, c)
        else:
            via_ptx = False
            line = self.k.t.jax_lines[int(fw.cuda or 12)]
            gpu = self.host.gpu
            if gpu is not None and gpu.cc < cc_tuple(line.min_cc):
                c.fail(
                    "gpu_arch",
                    f"jax[{line.extra}] needs compute capability >= {line.min_cc}; "
                    f"{gpu.name} is {gpu.compute_capability}",
                )
        return c, via_ptx

    def _static_torch(self, fw: FwChoice, c: Check) -> bool:
        host = self.host
        rel = next(r for r in self.k.t.torch if r.version == fw.version)
        if fw.variant == "cpu":
            c.reasons.append(f"{fw.label}: CPU-only wheels from {fw.index_url}")
            return False
        if host.arch == "aarch64":
            variant = rel.variant(fw.variant or "")
            on_pypi = fw.index_url == self.k.t.pypi_index
            if (on_pypi and not rel.pypi_aarch64_cuda) or (not on_pypi and variant and not variant.aarch64):
                where = " on PyPI" if on_pypi else ""
                c.fail("arch", f"{fw.label} has no linux-aarch64 CUDA wheel{where}")
        arch_check, via_ptx = check_wheel_arch(host.gpu, fw.label, fw.arch_list, fw.ptx)
        c.merge(arch_check)
        return via_ptx

    def _static_tf(self, fw: FwChoice, c: Check) -> bool:
        host, rel = self.host, fw.tf
        assert rel is not None
        if host.arch != "x86_64":
            c.fail("arch", f"TensorFlow GPU wheels are Linux x86_64 only; this host is {host.arch}")
        system_ok = self.req.cuda_toolkit == rel.cuda and (self.req.cudnn or "").startswith(rel.cudnn)
        if not rel.and_cuda and not system_ok:
            c.fail(
                "tf_system_cuda",
                f"{fw.label} has no [and-cuda] extra: it needs a system CUDA {rel.cuda} and cuDNN {rel.cudnn}",
            )
        gpu = host.gpu
        if gpu is None:
            return False
        if gpu.cc < cc_tuple(rel.min_cc):
            c.fail(
                "gpu_arch",
                f"{fw.label} needs compute capability >= {rel.min_cc}; {gpu.name} is {gpu.compute_capability}",
            )
            return False
        tk = self.k.toolkit(rel.cuda)
        if gpu.cc[0] * 10 + gpu.cc[1] > tk.sm_max:
            c.warn(
                "ptx_jit",
                f"{fw.label} is built with CUDA {rel.cuda} (up to sm_{tk.sm_max}); {gpu.name} runs it "
                "through PTX JIT, untested by TensorFlow",
            )
            return True
        return False

    def check_framework_driver(self, fw: FwChoice, driver: str | None, via_ptx: bool) -> Check:
        what = fw.label
        if fw.variant == "cpu":
            return Check()
        if fw.name == "jax":
            line = self.k.t.jax_lines[int(fw.cuda or 12)]
            c = Check()
            if driver is None:
                c.warn("driver_unmanaged", f"jax[{line.extra}] needs a host driver >= {line.min_driver}")
            elif _v(driver) < _v(line.min_driver):
                c.fail("driver_cuda", f"jax[{line.extra}] needs driver >= {line.min_driver}; {driver} is older")
            else:
                c.reasons.append(f"driver {driver} >= {line.min_driver} needed by jax[{line.extra}]")
            return c
        assert fw.cuda is not None
        return check_driver_for_cuda(self.k, what, fw.cuda, driver, via_ptx)

    def check_together(self, fws: Sequence[FwChoice]) -> Check:
        """Rule env_conflict: frameworks whose pinned CUDA libraries cannot share one venv."""
        c = Check()
        for i, a in enumerate(fws):
            for b in fws[i + 1 :]:
                msg = self._conflict(a, b) or self._conflict(b, a)
                if msg is not None:
                    c.fail("env_conflict", msg)
        return c

    def _conflict(self, a: FwChoice, b: FwChoice) -> str | None:
        if a.variant == "cpu" or b.variant == "cpu":
            return None
        for known in self.k.t.conflicts:
            if _matches(known.first, a) and _matches(known.second, b):
                return None if known.ok else f"{a.requirement} and {b.requirement} in one environment: {known.why}"
        a_major = (a.cuda or "").split(".")[0]
        b_major = (b.cuda or "").split(".")[0]
        if a_major != b_major:
            return None  # different nvidia-*-cuNN package names: no shared pins
        if a.tf is not None and a.tf.exact_pins and b.name == "torch":
            return (
                f"{a.requirement} pins exact CUDA {a.cuda} libraries and cuDNN {a.cudnn}; "
                f"{b.requirement} pins CUDA {b.cuda} / cuDNN {b.cudnn}: pip cannot install both"
            )
        if a.tf is not None and b.name == "torch" and b.cuda and _v(b.cuda) < _v(a.tf.cuda):
            return f"{a.requirement} needs CUDA {a.tf.cuda}+ libraries; {b.requirement} pins CUDA {b.cuda}"
        nccl_min = a.tf.nccl_min if a.tf is not None else None
        if nccl_min and b.name == "torch" and b.nccl and _v(b.nccl) < _v(nccl_min):
            return f"{a.requirement} needs nvidia-nccl >= {nccl_min}; {b.requirement} pins {b.nccl}"
        floor = (a.cudnn or "").lstrip(">=") if a.name in ("jax", "tensorflow") else None
        if floor and b.name == "torch" and b.cudnn and _v(b.cudnn) < _v(floor):
            return f"{a.requirement} needs cuDNN >= {floor}; {b.requirement} pins {b.cudnn}"
        return None

    # drivers --------------------------------------------------------------------------------
    def driver_choices(self) -> list[DriverChoice]:
        """Drivers allowed by the GPU, the pin, the OS's install methods and the module flavours."""
        req, host, k = self.req, self.host, self.k
        if req.driver == "none":
            return [DriverChoice(None, None, "none", None)]
        if req.driver == "auto" and host.gpu is None and req.cpu_only:
            return [DriverChoice(None, None, "none", None)]
        pin_branch: int | None = None
        pin_version: str | None = None
        if req.driver != "auto":
            m = DRIVER_SPEC.match(req.driver)
            assert m is not None
            pin_branch = int(m.group(1))
            pin_version = req.driver if m.group(2) else None
        methods = self._methods()
        out: list[DriverChoice] = []
        noted = len(self.failures)
        for b in k.t.branches:
            if pin_branch is not None and b.branch != pin_branch:
                continue
            for method in methods:
                version = self._branch_version(b, method, pin_version)
                if version is None:
                    continue
                flavour = self._flavour(b)
                if flavour is None:
                    continue
                out.append(DriverChoice(b, version, method, flavour))
        if out:  # why single branches were skipped matters only when none is left
            del self.failures[noted:]
        return out

    def _methods(self) -> list[str]:
        avail = list(self.host.os.install_methods)
        if self.req.install_method == "auto":
            return avail
        return [self.req.install_method] if self.req.install_method in avail else []

    def _branch_version(self, b: DriverBranch, method: str, pin: str | None) -> str | None:
        if method == "distro":
            have = b.distro.get(self.host.os.id)
            if have is None:
                if self.req.install_method == "distro":  # else nvidia-repo covers the branch
                    self.failures.append(
                        f"install_method: {self.host.os.id}'s own packages do not carry branch {b.branch}"
                    )
                return None
            if pin is not None and pin != have:
                self.failures.append(f"install_method: {self.host.os.id} packages carry {have}, not {pin}")
                return None
            return have
        if pin is not None:
            return pin
        if b.newest is None and self.req.driver != "auto":
            self.failures.append(f"driver: no known release of branch {b.branch}; pin an exact version")
        return b.newest

    def _flavour(self, b: DriverBranch) -> str | None:
        """Rule kernel_modules: the module flavour for this GPU and branch (None: impossible)."""
        want = self.req.kernel_modules
        rule = self.host.gpu.kernel_modules if self.host.gpu else "open-recommended"
        has_open = b.branch >= 515
        has_proprietary = b.branch < 620
        if want == "auto":
            if rule == "proprietary-only":
                want = "proprietary"
            elif rule == "open-only" or has_open:
                want = "open"
            else:
                want = "proprietary"
        name = self.host.gpu.name if self.host.gpu else "this GPU"
        if want == "open" and rule == "proprietary-only":
            self.failures.append(f"kernel_modules: {name} (pre-Turing) needs the proprietary kernel modules")
            return None
        if want == "proprietary" and rule == "open-only":
            self.failures.append(f"kernel_modules: {name} needs the open kernel modules")
            return None
        if want == "open" and not has_open:
            self.failures.append(f"kernel_modules: branch {b.branch} has no open kernel modules (from 515)")
            return None
        if want == "proprietary" and not has_proprietary:
            self.failures.append(f"kernel_modules: branch {b.branch} ships open kernel modules only")
            return None
        return want

    def check_driver_gpu(self, d: DriverChoice) -> Check:
        """Rules driver_gpu and eol_branch for the driver itself."""
        c = Check()
        b, gpu = d.branch, self.host.gpu
        if b is None:
            return c
        if gpu is not None:
            if b.branch < gpu.min_driver_branch:
                c.fail("driver_gpu", f"{gpu.name} ({gpu.arch}) needs driver branch >= {gpu.min_driver_branch}")
            if gpu.last_driver_branch is not None and b.branch > gpu.last_driver_branch:
                c.fail(
                    "driver_gpu",
                    f"{gpu.name} ({gpu.arch}) is supported up to driver branch "
                    f"{gpu.last_driver_branch}, not {b.branch}",
                )
        if b.eol and self.k.t.snapshot and b.eol < self.k.t.snapshot:
            c.warn("eol_branch", f"driver branch {b.branch} reached end of life in {b.eol}")
        return c

    # system CUDA toolkit and cuDNN ---------------------------------------------------------
    def check_system_cuda(self, driver: str | None) -> tuple[Check, int | None]:
        c = Check()
        req, host, k = self.req, self.host, self.k
        cuda_major: int | None = None
        if req.cuda_toolkit is not None:
            tk = k.toolkit(req.cuda_toolkit)
            cuda_major = tk.major
            c.merge(check_driver_for_cuda(k, f"CUDA toolkit {tk.version}", tk.version, driver, False))
            if host.gpu is not None:
                sm = host.gpu.cc[0] * 10 + host.gpu.cc[1]
                if sm > tk.sm_max:
                    c.fail(
                        "toolkit_gpu",
                        f"CUDA {tk.version} cannot compile for {host.gpu.name} (sm_{sm}; up to sm_{tk.sm_max})",
                    )
                if sm < tk.sm_min:
                    c.fail(
                        "toolkit_gpu",
                        f"CUDA {tk.version} dropped {host.gpu.name} (sm_{sm}; from sm_{tk.sm_min})",
                    )
            if tk.os and host.os.id not in tk.os:
                if tk.os_confidence == "low":
                    c.warn(
                        "os_not_listed",
                        f"CUDA {tk.version} may not be packaged for {host.os.id} (unverified list)",
                    )
                else:
                    c.fail("toolkit_os", f"CUDA {tk.version} is not packaged for {host.os.id}")
            if tk.gcc_max is not None and host.os.gcc > tk.gcc_max:
                c.warn(
                    "host_gcc",
                    f"{host.os.id}'s gcc {host.os.gcc} is newer than CUDA {tk.version} accepts "
                    f"({tk.gcc_max}); install an older gcc for nvcc",
                )
        if req.cudnn is not None:
            rel = k.cudnn_release(req.cudnn)
            builds = [b for b in rel.builds if cuda_major is None or b.cuda_major == cuda_major]
            usable = [b for b in builds if driver is None or _v(driver) >= _v(b.min_driver)]
            if not builds:
                c.fail("cudnn_cuda", f"cuDNN {rel.version} has no build for CUDA {cuda_major}")
            elif not usable:
                c.fail("cudnn_driver", f"cuDNN {rel.version} needs driver >= {builds[-1].min_driver}")
            else:
                cuda_major = cuda_major or max(b.cuda_major for b in usable)
            if host.gpu is not None and host.gpu.cc < cc_tuple(rel.min_cc):
                c.fail(
                    "cudnn_gpu",
                    f"cuDNN {rel.version} no longer supports {host.gpu.name} (compute capability "
                    f"{host.gpu.compute_capability}; needs >= {rel.min_cc})",
                )
            elif host.gpu is not None and host.gpu.cc < (7, 5) and rel.series == "9.10":
                c.warn(
                    "deprecated_gpu",
                    f"cuDNN {rel.version} lists {host.gpu.name} as deprecated (the last release for it)",
                )
        return c, cuda_major

    # search ---------------------------------------------------------------------------------
    def pythons(self) -> list[str]:
        osr = self.host.os
        if self.req.python is not None:
            if self.req.python not in osr.pythons:
                self.failures.append(
                    f"python: Python {self.req.python} is not packaged for {osr.id} (it has {', '.join(osr.pythons)})"
                )
                return []
            return [self.req.python]
        rest = sorted(osr.pythons[1:], key=_v, reverse=True)
        return [osr.default_python, *rest]

    def host_check(self) -> Check:
        c = Check()
        host = self.host
        if host.gpu is not None and host.gpu.host_arch and host.gpu.host_arch != host.arch:
            c.fail("gpu_host_arch", f"{host.gpu.name} sits on an {host.gpu.host_arch} host, not {host.arch}")
        if host.arch not in host.os.archs:
            c.fail("os_arch", f"{host.os.id} is not supported on {host.arch}")
        if host.os.eol and self.k.t.snapshot and host.os.eol < self.k.t.snapshot:
            c.warn("eol_os", f"{host.os.id} reached end of standard support in {host.os.eol}")
        if not self._methods():
            c.fail("install_method", f"{self.req.install_method} is not available on {host.os.id}")
        return c

    def run(self) -> Resolution:
        base = self.host_check()
        if not base.ok:
            raise self._unsatisfiable(base.failures)
        specs = self.framework_specs()
        pythons = self.pythons()
        drivers = self.driver_choices()
        driver_checks = {id(d): self.check_driver_gpu(d) for d in drivers}
        fm_needed = self.host.needs_fabric_manager
        cand_lists = [list(self.candidates(s)) for s in specs]
        for spec, cands in zip(specs, cand_lists, strict=True):
            if not cands:
                self.failures.append(f"{spec.name}: no known release matches `{spec.text}`" + self._index_note(spec))
        if any(not c for c in cand_lists) or not pythons or not drivers:
            raise self._unsatisfiable(self.failures)
        for combo in _product(cand_lists):
            for python in pythons:
                static = Check()
                ptx: dict[str, bool] = {}
                for fw in combo:
                    ch, via = self.check_framework_static(fw, python)
                    static.merge(ch)
                    ptx[fw.name] = via
                static.merge(self.check_together(combo))
                if not static.ok:
                    self._closest(static.failures, stage=1)
                    continue
                best: tuple[tuple[int, ...], DriverChoice, Check] | None = None
                for d in drivers:
                    c = Check()
                    c.merge(driver_checks[id(d)])
                    for fw in combo:
                        c.merge(self.check_framework_driver(fw, d.version, ptx[fw.name]))
                    sys_check, _ = self.check_system_cuda(d.version)
                    c.merge(sys_check)
                    if fm_needed and d.method == "distro" and not self._fm_packages(d):
                        c.fail(
                            "fabric_manager",
                            f"{self.host.os.id}'s own packages have no Fabric Manager; use the nvidia-repo method",
                        )
                    if not c.ok:
                        self._closest(c.failures, stage=0)
                        continue
                    key = self._driver_rank(d, c)
                    if best is None or key < best[0]:
                        best = (key, d, c)
                if best is not None:
                    total = Check()
                    total.merge(base)
                    total.merge(static)
                    total.merge(best[2])
                    return self.assemble(combo, python, best[1], total)
        # Rules every driver choice fails on its own (a pinned branch too old for the GPU) are
        # part of the answer whatever the nearest framework candidate was.
        driver_only = [f for d in drivers for f in driver_checks[id(d)].failures]
        if drivers and all(not driver_checks[id(d)].ok for d in drivers):
            self.failures += driver_only
        raise self._unsatisfiable(self.failures + (self._nearest_miss or []))

    def _index_note(self, spec: FrameworkSpec) -> str:
        if spec.name == "torch" and self.req.torch_index == "pypi" and (spec.local or self.req.torch_variant):
            return " on PyPI (PyPI serves one variant per release, without a local tag)"
        return ""

    def _driver_rank(self, d: DriverChoice, c: Check) -> tuple[int, ...]:
        """Prefer: no caveats, then LTSB/production, then the newest branch, then nvidia-repo."""
        b = d.branch
        if b is None:
            return (0,)
        return (
            len(c.warnings),
            BRANCH_RANK.get(b.cls, 3),
            -b.branch,
            0 if d.method == "nvidia-repo" else 1,
        )

    def _closest(self, failures: list[str], stage: int) -> None:
        """Keep the failures of the candidate that came nearest: fewest failing rules, then the
        one that got further (past the driver-independent rules), then the newest."""
        key = (len({f.split(":")[0] for f in failures}), stage)
        if self._nearest_key is None or key < self._nearest_key:
            self._nearest_key = key
            self._nearest_miss = list(failures)

    def _unsatisfiable(self, failures: list[str]) -> Unsatisfiable:
        # The most fundamental rule first: a wrong GPU architecture is not fixed by another Python.
        ranked = sorted(_dedupe(failures), key=lambda f: RULE_ORDER.get(f.split(":")[0], len(RULE_ORDER)))
        conflicts = ranked[:8] or ["no candidate passed every rule"]
        return Unsatisfiable(
            f"no compatible set of versions: {conflicts[0]}",
            "see the conflicts and suggestions; `provision matrix` shows what is known",
            conflicts=conflicts,
        )

    # output ---------------------------------------------------------------------------------
    def _fm_packages(self, d: DriverChoice) -> list[str]:
        p = self.k.t.packages
        if p is None:
            return []
        fam = self._family(d.method)
        return [
            n.format(branch=d.branch.branch if d.branch else "", version=d.version or "")
            for n in p.fabric_manager.get(d.method, {}).get(fam, ())
        ]

    def _family(self, method: str) -> str:
        if method == "distro":
            return self.host.os.id.split("-")[0]
        return self.host.os.family

    def assemble(self, combo: Sequence[FwChoice], python: str, d: DriverChoice, c: Check) -> Resolution:
        host, req = self.host, self.req
        reasons: list[str] = []
        gpu = host.gpu
        if gpu is not None:
            reasons.append(f"{host.gpu_count} x {gpu.name}: {gpu.arch}, compute capability {gpu.compute_capability}")
        else:
            reasons.append("no GPU model given: rules that need one are skipped")
        driver_json: dict[str, Any] | None = None
        fm_json: dict[str, Any] | None = None
        b = d.branch
        if b is not None and d.version is not None:
            driver_json = {
                "branch": str(b.branch),
                "version": d.version,
                "kernel_modules": d.flavour,
                "install_method": d.method,
            }
            eol = f", supported until {b.eol}" if b.eol else ""
            why = "pinned" if req.driver not in ("auto",) else "chosen"
            reasons.append(f"driver {d.version} ({why}; branch {b.branch}: {b.cls}{eol}) via {d.method}")
            rule = gpu.kernel_modules if gpu else "open-recommended"
            reasons.append(
                f"{d.flavour} kernel modules ({rule.replace('-', ' ')} for {gpu.name if gpu else 'this GPU'})"
            )
            if host.needs_fabric_manager:
                fm_json = {"version": d.version}
                reasons.append(
                    f"{host.gpu_count} x {gpu.name if gpu else 'GPU'} on an NVSwitch baseboard: "
                    "nvidia-fabricmanager "
                    f"{d.version} (must equal the driver version)"
                )
        elif req.driver == "none":
            reasons.append("driver: left alone (driver: none)")
            if host.needs_fabric_manager:
                c.warn(
                    "fabric_manager_unmanaged",
                    "this NVSwitch host needs nvidia-fabricmanager at exactly the driver's version; "
                    "it is left alone with the driver",
                )
        else:
            reasons.append("CPU-only stack: no NVIDIA driver needed")
        frameworks: dict[str, Any] = {}
        for fw in combo:
            entry: dict[str, Any] = {"version": fw.version}
            if fw.name == "torch":
                entry.update(variant=fw.variant, index_url=fw.index_url, cuda=fw.cuda, cudnn=fw.cudnn)
            else:
                entry.update(extras=list(fw.extras), index_url=fw.index_url, cuda=fw.cuda, cudnn=fw.cudnn)
            frameworks[fw.name] = entry
        _, cudnn_major = self.check_system_cuda(d.version)
        tk_json = {"version": req.cuda_toolkit} if req.cuda_toolkit else None
        dnn_json = {"version": req.cudnn, "cuda_major": cudnn_major} if req.cudnn else None
        if tk_json is None and dnn_json is None:
            bundled = [f"{fw.name} brings CUDA {fw.cuda}" for fw in combo if fw.cuda and fw.variant != "cpu"]
            if bundled:
                reasons.append("no system CUDA toolkit or cuDNN: " + "; ".join(bundled) + " as pip packages")
        py_why = (
            "pinned"
            if req.python
            else f"{host.os.id}'s python3"
            if python == host.os.default_python
            else f"packaged for {host.os.id}"
        )
        reasons.append(f"Python {python} ({py_why})")
        reasons += c.reasons
        stack = {
            "driver": driver_json,
            "fabric_manager": fm_json,
            "cuda_toolkit": tk_json,
            "cudnn": dnn_json,
            "frameworks": frameworks,
            "python": python,
        }
        host_json: dict[str, Any] = {
            "gpu": gpu.name if gpu else None,
            "compute_capability": gpu.compute_capability if gpu else None,
            "gpu_count": host.gpu_count,
            "os": host.os.id,
            "arch": host.arch,
            "python": python,
        }
        if host.instance_type:
            host_json["instance_type"] = host.instance_type
        return Resolution(host_json, stack, self.packages(d, combo, cudnn_major), list(c.warnings), _dedupe(reasons))

    def packages(self, d: DriverChoice, combo: Sequence[FwChoice], cudnn_major: int | None) -> dict[str, Any]:
        """Package names per install method and OS, index URLs and pip requirement lines."""
        p, host, req = self.k.t.packages, self.host, self.req
        out: dict[str, Any] = {
            "os_family": host.os.family,
            "driver": None,
            "fabric_manager": [],
            "cuda_toolkit": [],
            "cudnn": [],
        }
        if p is not None and d.branch is not None and d.flavour is not None:
            fam = self._family(d.method)
            flavour = d.flavour
            if d.method == "nvidia-repo" and d.branch.branch >= p.new_packaging_from:
                flavour += "_pinned"
            names = p.driver.get(d.method, {}).get(fam, {}).get(flavour, ())
            out["driver"] = {
                "method": d.method,
                "names": [n.format(branch=d.branch.branch, version=d.version) for n in names],
                "repo": f"{p.repo_url}/{host.os.repo_name}/{'sbsa' if host.arch == 'aarch64' else 'x86_64'}/"
                if d.method == "nvidia-repo" and host.os.repo_name
                else None,
            }
            if host.needs_fabric_manager:
                out["fabric_manager"] = self._fm_packages(d)
        if p is not None and req.cuda_toolkit:
            major, minor = req.cuda_toolkit.split(".")
            out["cuda_toolkit"] = [
                n.format(cuda_major=major, cuda_minor=minor) for n in p.cuda_toolkit.get(host.os.family, ())
            ]
        if p is not None and req.cudnn and cudnn_major is not None:
            out["cudnn"] = [
                n.format(cudnn_major=req.cudnn.split(".")[0], cuda_major=cudnn_major, cudnn=req.cudnn)
                for n in p.cudnn.get(host.os.family, ())
            ]
        indexes = _dedupe([fw.index_url for fw in combo])
        pypi = self.k.t.pypi_index
        index_url = next((i for i in indexes if i != pypi), pypi)
        extra = [i for i in indexes if i != index_url]
        if index_url != pypi and any(fw.name != "torch" for fw in combo) and pypi not in extra:
            extra.append(pypi)
        if index_url != pypi and pypi not in extra:
            extra.append(pypi)  # torch's own dependencies (filelock, sympy, nvidia-*) come from PyPI
        out["pip"] = {
            "index_url": index_url,
            "extra_index_urls": extra,
            "requirements": [fw.requirement for fw in combo],
        }
        return out


def _matches(requirement: str, fw: FwChoice) -> bool:
    r = Requirement(requirement)
    return r.name == fw.name and r.specifier.contains(Version(fw.version), prereleases=True)


def _product(lists: Sequence[Sequence[FwChoice]]) -> Iterator[tuple[FwChoice, ...]]:
    """Combinations in preference order: the first framework's newest first, and so on."""
    if not lists:
        yield ()
        return
    for head in lists[0]:
        for tail in _product(lists[1:]):
            yield (head, *tail)


def _dedupe(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for i in items:
        if i not in out:
            out.append(i)
    return out


# --- the public function ----------------------------------------------------------------------


def resolve(request: StackRequest, host: HostSpec, knowledge: Knowledge | None = None) -> Resolution:
    """The newest set of versions that passes every rule, or :class:`Unsatisfiable`.

    Unsatisfiable carries ``conflicts`` (the failing rules) and ``suggestions``: each a change to
    the request that does resolve, with what it would give.
    """
    k = knowledge or load()
    try:
        return Resolver(request, host, k).run()
    except Unsatisfiable as err:
        from provision.stack.suggest import suggest

        suggestions = suggest(request, host, k)
        err.suggestions = suggestions
        if suggestions:
            err.hint = "try " + "; or ".join(s["summary"] for s in suggestions[:2])
        raise
