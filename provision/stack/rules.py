"""The rules: each checks one candidate and passes, warns (a :class:`Caveat`) or fails (naming the rule).

Host rules (GPU on its host arch, OS arch, install method), framework rules that do not depend on
the driver (Python, arch, GPU kernels, frameworks sharing one venv), driver rules (driver_gpu,
driver_cuda, EOL branches, open modules on GeForce/workstation cards, deprecated architectures),
the cuDNN a wheel brings against the GPU, and the system CUDA toolkit and cuDNN rules (OS, GPU,
driver, TensorFlow loading them, wheels that leave them unused). A :class:`Check`
collects what they say about one candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from provision.matrix import Gpu, Knowledge, cc_tuple
from provision.matrix.model import TensorflowRelease
from provision.stack import venv_conflicts
from provision.stack.candidates import DriverChoice, FwChoice
from provision.stack.request import HostSpec, StackRequest, known_releases


@dataclass(frozen=True)
class Caveat:
    """A rule that passed with a warning: a code (``minor_version_compat``, ``ptx_jit``, ...) and why."""

    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


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


def _older(version: str, floor: str) -> bool:
    """``version`` is an older driver release than ``floor`` (a version that does not parse is not)."""
    try:
        return Version(version) < Version(floor)
    except InvalidVersion:
        return False


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
    if full is not None and Version(driver) >= Version(full):
        c.reasons.append(f"driver {driver} >= {full}: runs CUDA {cuda} ({what}) with full compatibility")
        return c
    if floor is not None and Version(driver) >= Version(floor):
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


def cudnn_gpu_problem(k: Knowledge, version: str, gpu: Gpu) -> str | None:
    """Why cuDNN ``version`` (a system package or a wheel's pin) cannot run on ``gpu``, or None."""
    # cudnn.yaml's release when it lists it, else its series' floor (cudnn_series_min_cc)
    rel = next((r for r in k.t.cudnn if r.version == version), None)
    floor = next(cc for start, cc in k.t.cudnn_series_min_cc if Version(version) >= Version(start))
    need = max(floor, rel.min_cc if rel else floor, key=cc_tuple)
    if gpu.cc < cc_tuple(need):
        return f"needs compute capability >= {need}; {gpu.name} is {gpu.compute_capability}"
    first = k.t.cudnn_first_for_arch.get(gpu.arch)
    if first is not None and Version(version) < Version(first):
        return f"has no kernels for {gpu.arch.capitalize()} ({gpu.name}); it needs cuDNN >= {first}"
    return None


@dataclass(frozen=True)
class RangeCudnn:
    """The cuDNN a framework's own range pin admits, against the GPU."""

    package: str  # nvidia-cudnn-cu12
    pin: str  # the framework's specifier: <10.0,>=9.8
    newest: str  # what a fresh install takes
    fits: str | None  # the newest release in the range with kernels for the GPU (None: none has)


def range_cudnn(k: Knowledge, fw: FwChoice, host: HostSpec, python: str) -> RangeCudnn | None:
    """For jax's CUDA plugin and TensorFlow's [and-cuda] on a known GPU: the cuDNN their pins let pip
    install (wheels.yaml), and the newest one in that range that runs on the GPU."""
    gpu = host.gpu
    if gpu is None or fw.name == "torch" or not fw.extras:
        return None
    found = venv_conflicts.allowed(fw.requirement, "nvidia-cudnn-cu", host.arch, python)
    if found is None:
        return None
    name, pin, versions = found
    fits = next((v for v in versions if cudnn_gpu_problem(k, v, gpu) is None), None)
    return RangeCudnn(name, pin, versions[0], fits)


def range_cudnn_pins(
    k: Knowledge, fws: Sequence[FwChoice], host: HostSpec, python: str
) -> list[tuple[FwChoice, RangeCudnn]]:
    """The venv's frameworks whose cuDNN range would give the GPU a release without its kernels
    (``fits`` then names the pin the plan adds, None: none in range has them). Empty beside a CUDA
    torch: its exact cuDNN pin governs the venv, and env_conflict checks the pair."""
    if any(fw.name == "torch" and fw.variant != "cpu" for fw in fws):
        return []
    out = []
    for fw in fws:
        r = range_cudnn(k, fw, host, python)
        if r is not None and r.fits != r.newest:
            out.append((fw, r))
    return out


def same_major(a: str, b: str) -> bool:
    return Version(a).major == Version(b).major


def abi_compatible(built: str, have: str) -> bool:
    """A library built against ``built`` (major.minor) loads ``have``: same major, minor >= built's."""
    b, h = Version(built).release, Version(have).release
    return h[0] == b[0] and h[1:2] >= b[1:2]


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


# The open kernel modules on GeForce/workstation cards: alpha, then Beta, then production, by
# branch (drivers.yaml open_modules_geforce, from NVIDIA/open-gpu-kernel-modules' README per tag).


def geforce_or_workstation(gpu: Gpu) -> bool:
    """A GeForce or workstation card (every PCI form of it is a ``card``/``workstation`` board)."""
    forms = [f.split()[0].lower() for f in gpu.pci_forms.values()]
    return bool(forms) and all(f in ("card", "workstation", "max-q") for f in forms)


def open_modules_beta(k: Knowledge, gpu: Gpu, branch: int) -> bool:
    """Open modules of ``branch`` on ``gpu`` are short of production quality (a caveat)."""
    return (
        gpu.kernel_modules == "open-recommended"
        and geforce_or_workstation(gpu)
        and branch < k.t.open_modules_geforce_production
    )


def open_modules_alpha(k: Knowledge, gpu: Gpu, branch: int) -> bool:
    """Open modules of ``branch`` do not load on ``gpu`` without NVreg_OpenRmEnableUnsupportedGpus=1."""
    return open_modules_beta(k, gpu, branch) and branch < k.t.open_modules_geforce_beta


def install_methods(request: StackRequest, host: HostSpec) -> list[str]:
    """The driver install methods the request allows on this host's OS (none: rule install_method fails)."""
    avail = list(host.os.install_methods)
    if request.install_method == "auto":
        return avail
    return [request.install_method] if request.install_method in avail else []


class Rules:
    """The rules of one request on one host; each method checks one candidate (or the host)."""

    def __init__(self, request: StackRequest, host: HostSpec, knowledge: Knowledge) -> None:
        self.req = request
        self.host = host
        self.k = knowledge

    def host_check(self) -> Check:
        c = Check()
        host = self.host
        if host.gpu is not None and host.gpu.host_arch and host.gpu.host_arch != host.arch:
            c.fail("gpu_host_arch", f"{host.gpu.name} sits on an {host.gpu.host_arch} host, not {host.arch}")
        if host.arch not in host.os.archs:
            c.fail("os_arch", f"{host.os.id} is not supported on {host.arch}")
        if host.assumed:
            c.warn("gpu_assumed", host.assumed)
        if host.os.eol and self.k.t.snapshot and host.os.eol < self.k.t.snapshot:
            c.warn("eol_os", f"{host.os.id} reached end of standard support in {host.os.eol}")
        if not install_methods(self.req, self.host):
            c.fail("install_method", f"{self.req.install_method} is not available on {host.os.id}")
        gpu = host.gpu
        last = self.k.branch(gpu.last_driver_branch) if gpu and gpu.last_driver_branch else None
        if gpu is not None and last is not None and not last.end_of_life(self.k.t.snapshot):
            # Still driven by a supported branch, but the last one: CUDA 12.8+ deprecates Maxwell,
            # Pascal and Volta, CUDA 13.0 drops them and R580 is their last driver branch.
            c.warn(
                "deprecated_gpu",
                f"{gpu.name} ({gpu.arch.capitalize()}) is deprecated by NVIDIA: CUDA {gpu.last_cuda or '?'} is the "
                f"last toolkit and R{last.branch} the last driver branch for it",
            )
        return c

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
            c.merge(self.check_tf_and_cuda(fw, python))
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
        variant = rel.variant(fw.variant or "")
        arch_list = variant.archs(host.arch) if variant is not None else fw.arch_list
        label = fw.label + (" (linux-aarch64 build)" if host.arch == "aarch64" and arch_list != fw.arch_list else "")
        arch_check, via_ptx = check_wheel_arch(host.gpu, label, arch_list, fw.ptx)
        c.merge(arch_check)
        if fw.cudnn is not None and host.gpu is not None and arch_check.ok:
            self._wheel_cudnn_gpu(fw, host.gpu, c)
        return via_ptx

    def check_tf_and_cuda(self, fw: FwChoice, python: str) -> Check:
        """Rule tf_and_cuda: pip can install the [and-cuda] extra on this Python (every pin it
        names has a wheel on PyPI): 2.15.0's tensorrt-libs==8.6.1 never, 2.14's tensorrt==8.5.3.1
        only up to Python 3.10 (tensorflow.yaml and_cuda_python)."""
        c = Check()
        rel = fw.tf
        if rel is None or "and-cuda" not in fw.extras or python not in rel.python:
            return c  # no extra asked for, or the python rule already refuses this Python
        if python not in rel.and_cuda_python:
            where = f" on Python {python} (only on {', '.join(rel.and_cuda_python)})" if rel.and_cuda_python else ""
            why = f": {rel.and_cuda_why}" if rel.and_cuda_why else ""
            c.fail("tf_and_cuda", f"{fw.requirement} cannot be installed from PyPI{where}{why}")
        return c

    def _wheel_cudnn_gpu(self, fw: FwChoice, gpu: Gpu, c: Check) -> None:
        """Rule cudnn_gpu for the cuDNN a torch wheel brings: its kernels must reach the GPU
        (torch >= 2.4 brings cuDNN 9, which has no Kepler even in the cu118 build)."""
        assert fw.cudnn is not None
        why = cudnn_gpu_problem(self.k, fw.cudnn, gpu)
        if why is not None:
            c.fail("cudnn_gpu", f"{fw.label} brings cuDNN {fw.cudnn}, which {why}")

    def _static_tf(self, fw: FwChoice, c: Check) -> bool:
        host, rel = self.host, fw.tf
        assert rel is not None
        if host.arch != "x86_64":
            c.fail("arch", f"TensorFlow GPU wheels are Linux x86_64 only; this host is {host.arch}")
        if "and-cuda" not in fw.extras:
            c.merge(self._tf_system_libs(fw, rel))
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

    def _tf_system_libs(self, fw: FwChoice, rel: TensorflowRelease) -> Check:
        """Rule tf_system_cuda: TensorFlow without ``[and-cuda]`` loads the system CUDA and cuDNN,
        which must have the major it was built with and at least its minor (libcudart.so.12,
        libcudnn.so.9 are per major; a newer minor keeps the ABI, an older one lacks symbols)."""
        c = Check()
        why = "has no [and-cuda] extra" if not rel.and_cuda else "is installed without [and-cuda]"
        problems = []
        libs = (
            ("CUDA", "--cuda-toolkit", rel.cuda, self.req.cuda_toolkit),
            ("cuDNN", "--cudnn", rel.cudnn, self.req.cudnn),
        )
        for lib, option, built, have in libs:
            major = built.split(".")[0]
            if have is None:
                problems.append(f"no system {lib} (needs {lib} {major}.x >= {built}: {option})")
            elif not abi_compatible(built, have):
                problems.append(f"system {lib} {have} does not load (needs {lib} {major}.x >= {built})")
        if problems:
            c.fail("tf_system_cuda", f"{fw.label} {why}: it loads the system CUDA and cuDNN; " + "; ".join(problems))
        else:
            c.reasons.append(
                f"{fw.label} loads the system CUDA {self.req.cuda_toolkit} and cuDNN {self.req.cudnn} "
                f"(built with {rel.cuda} / {rel.cudnn}: same major, newer or equal minor)"
            )
        return c

    def check_system_use(self, fws: Sequence[FwChoice]) -> Check:
        """What a system toolkit or cuDNN means to wheels that bring their own CUDA libraries.

        A system cuDNN is unused by torch, TensorFlow[and-cuda] and JAX (each loads its wheel's);
        a system toolkit whose CUDA major differs from the torch wheel's builds extensions
        (``torch.utils.cpp_extension``) that fail against it: a caveat naming both (the search
        prefers a variant of the same release that matches).
        """
        c = Check()
        req = self.req
        for fw in fws:
            if fw.variant == "cpu" or (fw.name == "tensorflow" and "and-cuda" not in fw.extras):
                continue
            # [and-cuda] loads its own wheel's cuDNN, so this works; but a system cuDNN of another
            # major is of no use to it, and the same TensorFlow without the extra would not load it
            if fw.name == "tensorflow" and req.cudnn and fw.cudnn and not same_major(fw.cudnn, req.cudnn):
                c.warn(
                    "tf_system_cudnn",
                    f"{fw.label} was built with cuDNN {fw.cudnn} (TensorFlow's tested build configurations): "
                    f"the system cuDNN {req.cudnn} cannot serve it; it runs only on its [and-cuda] wheels' "
                    f"cuDNN {Version(fw.cudnn).major}",
                )
                continue
            if req.cudnn is not None:
                brings = f"cuDNN {fw.cudnn}" if fw.cudnn and not fw.cudnn.startswith(">") else "its own cuDNN"
                c.reasons.append(f"the system cuDNN {req.cudnn} is unused by {fw.label}: its wheels bring {brings}")
            if fw.name == "torch" and req.cuda_toolkit is not None and fw.cuda is not None:
                tk_major, fw_major = req.cuda_toolkit.split(".")[0], fw.cuda.split(".")[0]
                if tk_major != fw_major:
                    c.warn(
                        "toolkit_torch_cuda",
                        f"the system CUDA toolkit {req.cuda_toolkit} and {fw.label} (CUDA {fw.cuda}) differ "
                        f"in major version: extensions built with its nvcc fail to load in torch "
                        f"(a torch variant built with CUDA {tk_major}, or a CUDA {fw_major} toolkit, matches)",
                    )
        return c

    def check_framework_driver(self, fw: FwChoice, driver: str | None, via_ptx: bool) -> Check:
        what = fw.label
        if fw.variant == "cpu":
            return Check()
        if fw.name == "jax":
            line = self.k.t.jax_lines[int(fw.cuda or 12)]
            c = Check()
            if driver is None:
                c.warn("driver_unmanaged", f"jax[{line.extra}] needs a host driver >= {line.min_driver}")
            elif Version(driver) < Version(line.min_driver):
                c.fail("driver_cuda", f"jax[{line.extra}] needs driver >= {line.min_driver}; {driver} is older")
            else:
                c.reasons.append(f"driver {driver} >= {line.min_driver} needed by jax[{line.extra}]")
            return c
        assert fw.cuda is not None
        return check_driver_for_cuda(self.k, what, fw.cuda, driver, via_ptx)

    def check_together(self, fws: Sequence[FwChoice], python: str) -> Check:
        """The venv as a whole, from the wheels' own pins (data/wheels.yaml):
        rule env_conflict, frameworks whose pins on shared CUDA packages cannot share one venv
        (:mod:`provision.stack.venv_conflicts`); and rule cudnn_gpu for the cuDNN that jax's CUDA
        plugin or TensorFlow's [and-cuda] lets pip take from its range: a fresh venv gets the newest
        release, whose kernels may not reach the GPU (cuDNN 9.11 on has none below Turing: a V100
        fails at its first convolution). The plan then pins the newest release in the range that
        does reach it (:func:`range_cudnn_pins`, read by packages.pip_plan); none in range fails."""
        c = Check()
        verdict = venv_conflicts.check(venv_conflicts.members(self.k, fws), self.host.arch, python)
        for msg in verdict.conflicts:
            c.fail("env_conflict", msg)
        for msg in verdict.unchecked:
            c.warn("env_unchecked", msg)
        gpu = self.host.gpu
        for fw, r in range_cudnn_pins(self.k, fws, self.host, python):
            assert gpu is not None  # range_cudnn answers only for a known GPU
            why = cudnn_gpu_problem(self.k, r.newest, gpu)
            if r.fits is None:
                c.fail(
                    "cudnn_gpu", f"{fw.label} lets pip install {r.package} {r.newest} (its pin: {r.pin}), which {why}"
                )
            else:
                c.reasons.append(
                    f"{fw.label}: {r.package} pinned to {r.fits}, the newest its pin {r.pin} allows with kernels "
                    f"for {gpu.name} (pip would take {r.newest}, which {why})"
                )
        return c

    def check_driver_gpu(self, d: DriverChoice) -> Check:
        """Rules driver_gpu and eol_branch for the driver itself."""
        c = Check()
        b, gpu = d.branch, self.host.gpu
        if b is None:
            return c
        if gpu is not None:
            if b.branch < gpu.min_driver_branch:
                c.fail("driver_gpu", f"{gpu.name} ({gpu.arch}) needs driver branch >= {gpu.min_driver_branch}")
            elif gpu.min_driver is not None and d.version is not None and _older(d.version, gpu.min_driver):
                c.fail("driver_gpu", f"{gpu.name} needs driver {gpu.min_driver} or later, not {d.version}")
            if gpu.last_driver_branch is not None and b.branch > gpu.last_driver_branch:
                c.fail(
                    "driver_gpu",
                    f"{gpu.name} ({gpu.arch}) is supported up to driver branch "
                    f"{gpu.last_driver_branch}, not {b.branch}",
                )
        if d.version is not None and d.version == self.req.driver and d.version not in known_releases(b):
            # only with --allow-unknown-driver: StackRequest.build refuses an unknown release otherwise
            c.warn(
                "unknown_driver",
                f"driver {d.version} is not a release the knowledge data lists for branch {b.branch} "
                f"(newest known: {b.newest or 'none'}); taken as given (--allow-unknown-driver)",
            )
        if b.end_of_life(self.k.t.snapshot):
            c.warn("eol_branch", f"driver branch {b.branch} {b.eol_text(self.k.t.snapshot)}")
        if gpu is not None and d.flavour == "open" and open_modules_beta(self.k, gpu, b.branch):
            c.warn(
                "open_modules_beta",
                f"the open kernel modules of branch {b.branch} are Beta quality on GeForce and workstation "
                f"GPUs ({gpu.name}); production from R{self.k.t.open_modules_geforce_production} "
                "(NVIDIA/open-gpu-kernel-modules README)",
            )
        return c

    # system CUDA toolkit and cuDNN ---------------------------------------------------------
    def check_system_cuda(self, driver: str | None, method: str) -> tuple[Check, int | None]:
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
            # NVIDIA's repository packages each release for some OSes only; the distro method installs
            # the OS's own nvidia-cuda-toolkit instead, of the one version its archive carries (the
            # role checks it against the lock on the host: cuda_toolkit/tasks/distro-check.yml).
            own = host.os.distro_cuda_toolkit
            if method == "distro" and own != tk.version:
                c.fail(
                    "toolkit_os",
                    f"{host.os.id}'s own nvidia-cuda-toolkit is CUDA {own or 'none'}, not {tk.version}: "
                    "the distro method installs the OS's",
                )
            elif method != "distro" and tk.os and host.os.id not in tk.os:
                here = [t.version for t in k.t.toolkits if host.os.id in t.os]
                c.fail(
                    "toolkit_os",
                    f"CUDA {tk.version} is not packaged for {host.os.id} (NVIDIA's repository has it for "
                    f"{', '.join(tk.os)}); CUDA releases packaged for {host.os.id}: {', '.join(here) or 'none'}",
                )
            if tk.gcc_max is not None and host.os.gcc > tk.gcc_max:
                c.warn(
                    "host_gcc",
                    f"{host.os.id}'s gcc {host.os.gcc} is newer than CUDA {tk.version} accepts "
                    f"({tk.gcc_max}); install an older gcc for nvcc",
                )
        if req.cudnn is not None:
            rel = k.cudnn_release(req.cudnn)
            builds = [b for b in rel.builds if cuda_major is None or b.cuda_major == cuda_major]
            usable = [b for b in builds if driver is None or Version(driver) >= Version(b.min_driver)]
            if not builds:
                c.fail("cudnn_cuda", f"cuDNN {rel.version} has no build for CUDA {cuda_major}")
            elif not usable:
                c.fail("cudnn_driver", f"cuDNN {rel.version} needs driver >= {builds[-1].min_driver}")
            else:
                cuda_major = cuda_major or max(b.cuda_major for b in usable)
            why = cudnn_gpu_problem(k, rel.version, host.gpu) if host.gpu is not None else None
            if why is not None:
                c.fail("cudnn_gpu", f"cuDNN {rel.version} {why}")
            elif host.gpu is not None and host.gpu.cc < (7, 5) and rel.series == "9.10":
                c.warn(
                    "deprecated_gpu",
                    f"cuDNN {rel.version} lists {host.gpu.name} as deprecated (the last release for it)",
                )
        return c, cuda_major
