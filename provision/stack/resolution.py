"""The result of a resolve (:class:`Resolution`) and its explanations.

:func:`assemble` turns the chosen frameworks, Python and driver into the ``host`` and ``stack``
of the JSON contract and the package plan, with the reasons for each choice and the caveats the
rules raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provision.matrix import Knowledge
from provision.stack.candidates import DriverChoice, FwChoice
from provision.stack.packages import PackagePlan, dedupe, package_plan
from provision.stack.request import HostSpec, StackRequest
from provision.stack.rules import Caveat, Check


@dataclass
class Resolution:
    """A resolved stack: the ``host`` and ``stack`` of the JSON contract, packages, explanations."""

    host: dict[str, Any]
    stack: dict[str, Any]
    packages: PackagePlan
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


def assemble(
    req: StackRequest,
    host: HostSpec,
    k: Knowledge,
    chosen: tuple[Sequence[FwChoice], str, DriverChoice],
    c: Check,
    *,
    cudnn_major: int | None,
) -> Resolution:
    """The resolution of ``chosen`` (frameworks, Python, driver) that passed with ``c``.

    ``cudnn_major`` is the CUDA major of the system cuDNN build (from the cudnn rules).
    """
    combo, python, d = chosen
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
        reasons.append(f"{d.flavour} kernel modules ({rule.replace('-', ' ')} for {gpu.name if gpu else 'this GPU'})")
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
    plan = package_plan(k, req, host, d, combo, cudnn_major=cudnn_major)
    return Resolution(host_json, stack, plan, list(c.warnings), dedupe(reasons))
