"""The result of a resolve (:class:`Resolution`) and its explanations.

:func:`assemble` turns the chosen frameworks, Python and driver into the host summary
(:class:`~provision.model.host.ResolvedHost`), the stack (:class:`~provision.model.stack.Stack`) and the
package plan, with the reasons for
each choice and the caveats the rules raised. Their ``to_json()`` is the ``host`` and ``stack``
of the JSON contract (``provision resolve --json``, the lock's groups).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provision.matrix import Knowledge
from provision.model.host import ResolvedHost
from provision.model.packages import PackagePlan
from provision.model.stack import DriverPin, FrameworkPin, Stack, SystemCudnn
from provision.stack.candidates import DriverChoice, FwChoice
from provision.stack.packages import dedupe, package_plan
from provision.stack.request import NO_GPU_FOUND, HostSpec, StackRequest
from provision.stack.rules import Caveat, Check


@dataclass
class Resolution:
    """A resolved stack: the host, the stack, the package plan, explanations."""

    host: ResolvedHost
    stack: Stack
    packages: PackagePlan
    warnings: list[Caveat]
    reasons: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "host": self.host.to_json(),
            "stack": self.stack.to_json(),
            "warnings": [w.to_json() for w in self.warnings],
            "reasons": list(self.reasons),
        }


def assemble(
    req: StackRequest,
    host: HostSpec,
    k: Knowledge,
    chosen: tuple[Sequence[FwChoice], str, DriverChoice],
    c: Check,
    *,
    cudnn_major: int | None,
    standalone_why: str | None = None,
) -> Resolution:
    """The resolution of ``chosen`` (frameworks, Python, driver) that passed with ``c``.

    ``cudnn_major`` is the CUDA major of the system cuDNN build (from the cudnn rules);
    ``standalone_why``, when set, says why the Python is a standalone CPython, not the OS's.
    """
    combo, python, d = chosen
    reasons: list[str] = []
    gpu = host.gpu
    if gpu is not None:
        reasons.append(f"{host.gpu_count} x {gpu.name}: {gpu.arch}, compute capability {gpu.compute_capability}")
    elif host.probed is not None:
        reasons.append(f"{NO_GPU_FOUND}: rules that need a GPU are skipped")
    else:
        reasons.append("no GPU model given: rules that need one are skipped")
    driver: DriverPin | None = None
    fm_version: str | None = None
    b = d.branch
    if b is not None and d.version is not None:
        driver = DriverPin(str(b.branch), d.version, d.flavour, d.method)
        eol_text = b.eol_text(k.t.snapshot)
        eol = f", {eol_text}" if eol_text else ""
        why = "pinned" if req.driver not in ("auto",) else "chosen"
        reasons.append(f"driver {d.version} ({why}; branch {b.branch}: {b.cls}{eol}) via {d.method}")
        rule = gpu.kernel_modules if gpu else "open-recommended"
        reasons.append(f"{d.flavour} kernel modules ({rule.replace('-', ' ')} for {gpu.name if gpu else 'this GPU'})")
        if host.needs_fabric_manager:
            fm_version = d.version
            reasons.append(
                f"{host.gpu_count} x {gpu.name if gpu else 'GPU'} on an NVSwitch baseboard: "
                "the Fabric Manager "
                f"{d.version} (must equal the driver version)"
            )
    elif req.driver == "auto" and host.probed is not None and gpu is None:
        reasons.append("driver: none installed (no NVIDIA GPU on this host; pin stack.driver to install one)")
    elif req.driver == "none":
        found = f"; the host has {d.version}" if d.version else ""
        reasons.append(f"driver: left alone (driver: none){found}")
        if host.needs_fabric_manager:
            c.warn(
                "fabric_manager_unmanaged",
                "this NVSwitch host needs the Fabric Manager at exactly the driver's version; "
                "it is left alone with the driver",
            )
    else:
        reasons.append("CPU-only stack: no NVIDIA driver needed")
    cpu = [f"{fw.name} {fw.version}+cpu from {fw.index_url}" for fw in combo if fw.variant == "cpu"]
    asked = req.torch_variant or any(f.local for f in req.frameworks)  # chosen here, not asked for
    if cpu and host.probed is not None and gpu is None and not asked:
        why = "no NVIDIA GPU on this host; ask for a +cuNNN variant for another"
        reasons.append("the CPU build: " + ", ".join(cpu) + f" ({why})")
    frameworks = {
        fw.name: FrameworkPin(fw.name, fw.version, fw.index_url, fw.cuda, fw.cudnn, fw.variant, fw.extras)
        for fw in combo
    }
    toolkit = req.cuda_toolkit or None
    cudnn = SystemCudnn(req.cudnn, cudnn_major) if req.cudnn else None
    if toolkit is None and cudnn is None:
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
    sp = k.t.standalone_python
    if standalone_why is not None and sp is not None:
        py_why = f"a standalone CPython: python-build-standalone, installed by uv {sp.uv}; {standalone_why}"
    reasons.append(f"Python {python} ({py_why})")
    reasons += c.reasons
    source = "standalone" if standalone_why is not None else "os"
    stack = Stack(driver, fm_version, toolkit, cudnn, frameworks, python, source)
    resolved = ResolvedHost(
        gpu.name if gpu else None,
        gpu.compute_capability if gpu else None,
        host.gpu_count,
        host.os.id,
        host.arch,
        python,
        host.instance_type or None,
    )
    plan = package_plan(k, req, host, d, combo, cudnn_major=cudnn_major, python=python)
    reasons += _beside_the_driver(plan, gpu.name if gpu else "this GPU")
    return Resolution(resolved, stack, plan, list(c.warnings), dedupe(reasons))


# The driver role's packages that are neither the driver nor the Fabric Manager, and why the plan
# installs them: resolve names every component plan installs (packaging.yaml decides which).
_BESIDE_THE_DRIVER = {
    "nvidia-imex": "IMEX, for the multi-node NVLink domain of {gpu} NVL racks (at the driver's version)",
    "nvlsm": "the NVLink Subnet Manager, which the Fabric Manager starts on {gpu}'s fourth-generation NVSwitches",
}


def _beside_the_driver(plan: PackagePlan, gpu: str) -> list[str]:
    out = []
    for i in plan.install:
        what = next((w for prefix, w in _BESIDE_THE_DRIVER.items() if i.name.startswith(prefix)), None)
        if what is not None:
            version = f" {i.version}" if i.version else ""
            out.append(f"{i.name}{version}: " + what.format(gpu=gpu))
    return out
