"""Suggestions for an unsatisfiable request: concrete changes that do resolve.

Each suggestion comes from resolving again with constraints relaxed (one at a time first, then
several together) and lists every option it changes, with the values the relaxed resolve chose,
so applying all of a suggestion's ``changes`` is guaranteed to resolve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from packaging.version import Version

from provision.errors import Unsatisfiable
from provision.matrix import Knowledge
from provision.stack.request import FRAMEWORKS, FrameworkSpec, HostSpec, StackRequest
from provision.stack.resolution import Resolution, Stack
from provision.stack.search import Resolver


def _v(text: str) -> Version:
    return Version(text)


def _extras(spec: FrameworkSpec) -> str:
    return f"[{','.join(sorted(spec.extras))}]" if spec.extras else ""


def _try(request: StackRequest, host: HostSpec, k: Knowledge) -> Resolution | None:
    try:
        return Resolver(request, host, k).run()
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
        "cuda_toolkit": ("--cuda-toolkit", "none"),
        "cudnn": ("--cudnn", "none"),
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
    if request.driver not in ("auto", "none"):
        attempt(replace(request, driver="auto"), "driver >= {stack.driver.branch} ({stack.driver.version})")
    if request.torch_variant is not None:
        attempt(replace(request, torch_variant=None), "torch variant {stack.frameworks[torch].variant}")
    if request.torch_index != "auto":
        attempt(replace(request, torch_index="auto"), "--torch-index auto (the vendor's per-CUDA indexes)")
    if request.kernel_modules != "auto":
        attempt(replace(request, kernel_modules="auto"), "{stack.driver.kernel_modules} kernel modules")
    if request.python is not None:
        attempt(replace(request, python=None), "Python {stack.python}")
    if request.install_method != "auto":
        attempt(replace(request, install_method="auto"), "install method {stack.driver.install_method}")
    if request.cuda_toolkit is not None:
        attempt(replace(request, cuda_toolkit=None), "no system CUDA toolkit")
    if request.cudnn is not None:
        attempt(replace(request, cudnn=None), "no system cuDNN")
    if host.gpu is not None and host.gpu.host_arch and host.arch != host.gpu.host_arch:
        attempt(request, f"--arch {host.gpu.host_arch}", replace(host, arch=host.gpu.host_arch))
    if not out:
        for osr in k.os_releases:
            if osr.id != host.os.id and attempt(
                replace(request, python=None), f"{osr.id} (Python {{stack.python}})", replace(host, os=osr)
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
            attempt(replace(loose, cuda_toolkit=None, cudnn=None), "the newest set that fits")
    return out[:5]


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
