"""Suggestions for an unsatisfiable request: concrete changes that do resolve.

Each suggestion comes from resolving again with constraints relaxed (one at a time first, then
several together) and lists every option it changes, with the values the relaxed resolve chose,
so applying all of a suggestion's ``changes`` is guaranteed to resolve. Besides relaxing: the
variants a pinned release really has, another OS (its Python, its packages), a CUDA toolkit
packaged for the OS or an OS that packages the toolkit, the cuDNN a system TensorFlow loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from packaging.version import Version

from provision.errors import Unsatisfiable
from provision.matrix import Knowledge, OsRelease
from provision.model.stack import Stack
from provision.stack.request import FRAMEWORKS, FrameworkSpec, HostSpec, StackRequest
from provision.stack.resolution import Resolution
from provision.stack.rules import abi_compatible
from provision.stack.search import Resolver


def _v(text: str) -> Version:
    return Version(text)


def _extras(spec: FrameworkSpec) -> str:
    return f"[{','.join(sorted(spec.extras))}]" if spec.extras else ""


def _try(request: StackRequest, host: HostSpec, k: Knowledge) -> Resolution | None:
    try:
        return Resolver(request, host, k, explain=False).run()
    except Unsatisfiable:
        return None


def _changes(
    before: StackRequest, after: StackRequest, host_before: HostSpec, host_after: HostSpec, res: Resolution
) -> list[dict[str, str]]:
    """The options a user changes to turn ``before`` into ``after``, with concrete values."""
    out: list[dict[str, str]] = []
    stack, drv = res.stack, res.stack.driver
    if after.frameworks != before.frameworks:
        for name, fw in stack.frameworks.items():
            spec = next((f for f in after.frameworks if f.name == name), None)
            extras = f"[{','.join(fw.extras)}]" if fw.extras and name != "torch" else ""
            tag = f"+{fw.variant}" if name == "torch" and "pypi.org" not in fw.index_url else ""
            if spec is not None or len(stack.frameworks) == 1:
                out.append({"option": "--framework", "value": f"{name}{extras}=={fw.version}{tag}"})
    torch = stack.frameworks.get("torch")
    simple = {
        "driver": ("--driver", drv.branch if drv else "none"),
        "kernel_modules": ("--kernel-modules", drv.kernel_modules if drv else "auto"),
        "python": ("--python", stack.python),
        "torch_index": ("--torch-index", "auto"),
        "torch_variant": ("--torch-variant", torch.variant if torch else "auto"),
        "install_method": ("--install-method", drv.install_method if drv else "auto"),
        "python_source": ("--python-source", stack.python_source),
        "cuda_toolkit": ("--cuda-toolkit", stack.cuda_toolkit or "none"),
        "cudnn": ("--cudnn", stack.cudnn.version if stack.cudnn else "none"),
    }
    for field_name, (option, value) in simple.items():
        if getattr(after, field_name) != getattr(before, field_name):
            out.append({"option": option, "value": str(value)})
    if host_after.os.id != host_before.os.id:
        out.append({"option": "--os", "value": host_after.os.id})
    if host_after.arch != host_before.arch:
        out.append({"option": "--arch", "value": host_after.arch})
    return out


def suggest(request: StackRequest, host: HostSpec, k: Knowledge) -> list[dict[str, Any]]:
    """Concrete changes that resolve: relax one constraint at a time (then several together)
    and report what the relaxed request gives. Each suggestion lists every option it changes,
    so applying all of ``changes`` is guaranteed to resolve."""
    out: list[dict[str, Any]] = []

    def attempt(
        after: StackRequest,
        summary: str | Callable[[Stack], str],
        host_after: HostSpec | None = None,
    ) -> Resolution | None:
        h = host_after or host
        res = _try(after, h, k)
        if res is None:
            return None
        changes = _changes(request, after, host, h, res)
        if changes:
            try:
                text = summary(res.stack) if callable(summary) else summary.format(stack=res.stack)
            except (AttributeError, KeyError):  # the relaxed stack lacks the part the summary names
                text = " ".join(f"{c['option']} {c['value']}" for c in changes)
            if len(changes) > 1:
                text = " ".join(f"{c['option']} {c['value']}" for c in changes) + f" ({text})"
            item = {**changes[0], "changes": changes, "summary": text}
            if all(o["changes"] != changes for o in out):
                out.append(item)
        return res

    for i, spec in enumerate(request.frameworks):
        for version in _later_versions(spec, k)[:6]:  # the nearest newer release that works
            frameworks = list(request.frameworks)
            frameworks[i] = FrameworkSpec.parse(f"{spec.name}{_extras(spec)}=={version}")
            if attempt(replace(request, frameworks=tuple(frameworks)), _fw_summary(spec.name)):
                break
        for keep_extras in (True, False):
            if (keep_extras and not (spec.specifier or spec.local)) or (not keep_extras and not spec.extras):
                continue
            relaxed = list(request.frameworks)
            relaxed[i] = spec.relaxed(keep_extras)
            if attempt(replace(request, frameworks=tuple(relaxed)), _fw_summary(spec.name)):
                break
    for i, spec in enumerate(request.frameworks):
        for text in _real_variants(spec, k):  # torch==2.7.1+cu130 -> the variants 2.7.1 has
            frameworks = list(request.frameworks)
            frameworks[i] = FrameworkSpec.parse(text)
            attempt(replace(request, frameworks=tuple(frameworks)), _fw_summary(spec.name))
    for i, spec in enumerate(request.frameworks):
        if spec.name == "tensorflow" and "and-cuda" not in spec.extras and request.cuda_toolkit is not None:
            frameworks = list(request.frameworks)  # the [and-cuda] extra: the wheels bring CUDA and cuDNN
            frameworks[i] = FrameworkSpec.parse(f"tensorflow[and-cuda]{spec.specifier}")
            attempt(
                replace(request, frameworks=tuple(frameworks)),
                "tensorflow[and-cuda] {stack.frameworks[tensorflow].version}",
            )
            for version in [v for v in _cudnn_for_tf(spec, k) if v != request.cudnn][:4]:
                if attempt(replace(request, cudnn=version), f"system cuDNN {version} for TensorFlow"):
                    break
    if request.driver not in ("auto", "none"):
        attempt(replace(request, driver="auto"), _driver_summary(request.driver))
    if request.cuda_toolkit is not None:
        for version in _toolkits_for(request.cuda_toolkit, host, k)[:2]:
            attempt(replace(request, cuda_toolkit=version), f"CUDA toolkit {version} (packaged for {host.os.id})")
        for osr in _oses_for(request.cuda_toolkit, host, k)[:1]:
            attempt(
                replace(request, python=None, host_python=None),
                f"{osr.id} (CUDA {request.cuda_toolkit} is packaged there)",
                replace(host, os=osr),
            )
    if request.torch_variant is not None:
        attempt(replace(request, torch_variant=None), "torch variant {stack.frameworks[torch].variant}")
    if request.torch_index != "auto":
        attempt(replace(request, torch_index="auto"), "--torch-index auto (the vendor's per-CUDA indexes)")
    if request.kernel_modules != "auto":
        attempt(replace(request, kernel_modules="auto"), "{stack.driver.kernel_modules} kernel modules")
    if request.python is not None:
        attempt(replace(request, python=None), "Python {stack.python}")
    if request.python_source == "os":  # a Python the OS does not package: a standalone CPython
        attempt(
            replace(request, python_source="auto"),
            "a standalone CPython {stack.python} (python-build-standalone, installed by uv)",
        )
    if request.install_method != "auto":
        attempt(replace(request, install_method="auto"), "install method {stack.driver.install_method}")
    if request.cuda_toolkit is not None:
        attempt(replace(request, cuda_toolkit=None), "no system CUDA toolkit")
    if request.cudnn is not None:
        attempt(replace(request, cudnn=None), "no system cuDNN")
    if host.gpu is not None and host.gpu.host_arch and host.arch != host.gpu.host_arch:
        attempt(request, f"--arch {host.gpu.host_arch}", replace(host, arch=host.gpu.host_arch))
    others = [o for o in k.os_releases if o.id != host.os.id and host.arch in o.archs]
    others.sort(key=lambda o: o.family != host.os.family)  # the same family first (stable: newest first)
    for osr in others:  # another OS: its Python, its packages (torch 2.0.1 is no wheel for 3.12)
        if attempt(
            replace(request, python=None, host_python=None),
            f"{osr.id} (Python {{stack.python}})",
            replace(host, os=osr),
        ):
            break
    if not out:
        for i, spec in enumerate(request.frameworks):
            for other in (f for f in FRAMEWORKS if f != spec.name and f not in {s.name for s in request.frameworks}):
                swapped = list(request.frameworks)
                swapped[i] = FrameworkSpec.parse(other)
                if attempt(replace(request, frameworks=tuple(swapped)), f"{other} instead of {spec.name}"):
                    break
    if not out:
        loose = replace(
            request,
            frameworks=tuple(s.relaxed() for s in request.frameworks),
            driver="auto" if request.driver != "none" else "none",
            kernel_modules="auto",
            python=None,
            torch_variant=None,
            torch_index="auto",
            install_method="auto",
        )
        if attempt(loose, "the newest set that fits these constraints") is None:
            bare = replace(loose, cuda_toolkit=None, cudnn=None)
            if attempt(bare, "the newest set that fits") is None:
                # nothing fits on this OS at all (a V100 on Debian 13: NVIDIA's debian13 repository
                # starts after the last branch that drives it): the newest set on another OS
                for osr in others:
                    if attempt(
                        replace(bare, python=None, host_python=None),
                        f"{osr.id} with the newest set that fits",
                        replace(host, os=osr),
                    ):
                        break
    if not out and any(s.name == "torch" for s in request.frameworks):
        # no CUDA build reaches this GPU anywhere (a T4G, sm_75: no aarch64 torch wheel carries it):
        # torch's CPU build still runs on the host
        attempt(replace(loose, torch_variant="cpu", cuda_toolkit=None, cudnn=None), "torch's CPU build (no CUDA)")
    return out[:6]


def _fw_summary(name: str) -> Callable[[Stack], str]:
    def summary(stack: Stack) -> str:
        fw = stack.frameworks[name]
        if name != "torch":
            return f"{name} {fw.version}"
        where = "PyPI" if "pypi.org" in fw.index_url else f"the {fw.variant} index"
        return f"torch {fw.version} from {where}"

    return summary


def _later_versions(spec: FrameworkSpec, k: Knowledge) -> list[str]:
    """For a pin like ``torch==2.6.0``: the known newer releases, nearest first."""
    pinned = [sp.version for sp in spec.specifier if sp.operator in ("==", "===")]
    if len(pinned) != 1 or "*" in pinned[0]:
        return []
    versions = {"torch": [r.version for r in k.t.torch], "tensorflow": [r.version for r in k.t.tensorflow]}
    newest_patch: dict[tuple[int, ...], str] = {}
    for v in versions.get(spec.name, []):  # newest first: keep the newest patch of each minor
        if _v(v) > _v(pinned[0]):
            newest_patch.setdefault(_v(v).release[:2], v)
    return sorted(newest_patch.values(), key=_v)


def _driver_summary(pinned: str) -> Callable[[Stack], str]:
    """The summary of a driver change in its direction: "driver <= 470" for a GPU that needs an
    older branch (a K80), "driver >= 570" for one that needs a newer (Blackwell)."""

    def summary(stack: Stack) -> str:
        drv = stack.driver
        if drv is None:
            return "no managed driver"
        older = int(drv.branch) < int(pinned.split(".", maxsplit=1)[0])
        return f"driver {'<=' if older else '>='} {drv.branch} ({drv.version})"

    return summary


def _real_variants(spec: FrameworkSpec, k: Knowledge) -> list[str]:
    """For a torch pin with a local tag (``torch==2.7.1+cu130``): the variants those releases have."""
    if spec.name != "torch" or spec.local is None:
        return []
    out: list[str] = []
    for rel in k.t.torch:
        if spec.allows(rel.version):
            out += [f"torch=={rel.version}+{v.name}" for v in rel.variants if v.name != spec.local]
            break  # the newest release the pin allows
    return out


def _toolkits_for(version: str, host: HostSpec, k: Knowledge) -> list[str]:
    """CUDA toolkits packaged for the host's OS, nearest to ``version`` (the same major first)."""
    want = _v(version)
    here = [t for t in k.t.toolkits if host.os.id in t.os and t.version != version]
    return [
        t.version
        for t in sorted(
            here, key=lambda t: (t.major != want.major, abs(_v(t.version).minor - want.minor), -_v(t.version).minor)
        )
    ]


def _oses_for(version: str, host: HostSpec, k: Knowledge) -> list[OsRelease]:
    """The OS releases CUDA ``version`` is packaged for (the host's family first)."""
    tk = k.toolkit(version)
    oses = [o for o in k.os_releases if o.id in tk.os and o.id != host.os.id and host.arch in o.archs]
    return sorted(oses, key=lambda o: o.family != host.os.family)


def _cudnn_for_tf(spec: FrameworkSpec, k: Knowledge) -> list[str]:
    """System cuDNN releases the newest TensorFlow ``spec`` allows can load (newest first)."""
    rel = next((r for r in k.t.tensorflow if spec.allows(r.version)), None)
    if rel is None:
        return []
    return [c.version for c in k.t.cudnn if abi_compatible(rel.cudnn, c.version)]
