"""report.json documents as `provision up` writes them, for the report's tests.

Built from the real parts wherever no GPU is needed: the lock groups come from the resolver
(torch 2.8.0 on H100 SXM, a CPU torch on Debian), each host's smoke report is the job's own
``build_report`` over measurement records in the job's format (the verdict, checks, pass lines
and messages are the job's, from references.json), the expectations are verify's, and the
document is ``UpResult.report_json()``. The measurements themselves are recorded figures (no
GPU here): an H100 SXM near its reference, one GPU of another host slow, a torch that drifted.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from provision.fleet.planning import HostPlan
from provision.fleet.records import HostRun, UpResult
from provision.fleet.up import group_hash
from provision.fleet.verify import HostResult, expectations, failures
from provision.remote.smoke import DIR
from provision.remote.smoke.job import build_report
from provision.stack.drift import expected_versions
from provision.stack.lock import LockGroup, lock_group
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve
from tests.support.smoke_records import h200_record

REFS: dict[str, Any] = json.loads((DIR / "references.json").read_text())

# The roles in the order site.yml runs them (playbooks/roles), and seconds like a first apply's.
ROLE_SECONDS = {
    "preflight": 6.2,
    "signed_repo": 3.1,
    "package_plan": 2.4,
    "nvidia_driver": 212.5,
    "fabric_manager": 18.0,
    "cuda_toolkit": 96.3,
    "cudnn": 41.7,
    "container_toolkit": 22.9,
    "dcgm": 9.4,
    "python_env": 14.8,
    "frameworks": 143.6,
    "verify": 3.2,
}


def gpu_group(hosts: list[str]) -> LockGroup:
    resolution = resolve(
        StackRequest.build(frameworks=["torch==2.8.0"], driver="580"),
        HostSpec.describe(gpu="H100-SXM", gpu_count=2, os="ubuntu-22.04"),
    )
    return lock_group("h100_sxm_x2_ubuntu_22_04", hosts, resolution)


def cpu_group(hosts: list[str]) -> LockGroup:
    resolution = resolve(StackRequest.build(frameworks=["torch==2.13.0+cpu"]), HostSpec.describe(os="debian-12"))
    return lock_group("cpu_debian_12", hosts, resolution)


def _health() -> dict[str, Any]:
    """A healthy GPU's NVML readings (the smoke verdict tests' record: 44 C instead of 41)."""
    return {**h200_record()["gpus"][0]["health"], "temperature_c": 44}


def installed_versions(group: LockGroup) -> dict[str, Any]:
    """What the smoke job reads on a host that has exactly ``group``'s stack."""
    locked = expected_versions(group)
    torch = f"{locked['torch']}+{locked['torch_variant']}" if locked.get("torch_variant") else locked["torch"]
    return {
        "driver": locked.get("driver"),
        "cuda_driver": "13.0",
        "torch": torch,
        "torch_cuda": locked.get("torch_cuda"),
        "cudnn": locked.get("cudnn"),
        "nccl": "2.27.3",
        "python": f"{locked['python']}.4",  # the OS release's Python, a patch release of the locked one
    }


def gpu_measurements(host: str, group: LockGroup, gemm_bf16: tuple[float, ...] = (741.8, 744.2)) -> dict[str, Any]:
    """An H100 SXM host's measurements, one GPU per figure in ``gemm_bf16``."""
    gpus = [
        {
            "index": i,
            "name": "NVIDIA H100 80GB HBM3",
            "compute_capability": "9.0",
            "memory_gib": 80,
            "uuid": f"GPU-{host}-{i}",
            "kernel_ok": True,
            "health": _health(),
            "speed": {"gemm_bf16": bf16, "gemm_tf32": 381.0, "copy_d2d": 2850.0, "copy_h2d": 53.1, "copy_d2h": 52.4},
        }
        for i, bf16 in enumerate(gemm_bf16)
    ]
    loss = [round(2.31 * 0.982**s + 0.03, 4) for s in range(0, 200, 4)]
    return {
        "host": host,
        "counts": {"torch": len(gpus), "nvml": len(gpus), "lspci": len(gpus)},
        "versions": installed_versions(group),
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
        "gpus": gpus,
        "training": {
            "device": "cuda",
            "precision": "bf16",
            "steps": 200,
            "batch": 512,
            "loss_first": loss[0],
            "loss_last": 0.061,
            "loss_bound": 0.5,
            "loss_curve": loss,
            "loss_curve_steps": list(range(1, 201, 4)),
            "samples_per_s": 40800.0,
            "gpu_util_mean_pct": 96.4,
            "gpu_util_series": [31, 88, 97, 98, 97, 99, 98, 97, 98, 99, 97, 98],
            "gpu_util_period_s": 0.1,
        },
        "frameworks": {},
        "warnings": [],
        "errors": [],
    }


def smoke_report(m: dict[str, Any], group: LockGroup, allow_cpu: bool = False) -> dict[str, Any]:
    """The smoke job's report for measurements ``m``, judged against ``group`` as verify sends it."""
    args = argparse.Namespace(allow_cpu=allow_cpu)
    return build_report(m, REFS, expectations(group), args, time.monotonic() - 48.0)


def host_run(
    host: str,
    group: LockGroup,
    report: dict[str, Any] | None,
    *,
    present: dict[str, Any] | None = None,
    failed_task: str | None = None,
    message: str | None = None,
    role_seconds: dict[str, float] | None = None,
) -> HostRun:
    """A host as `up` leaves it: verdict and message set the way batch.py sets them."""
    plan = HostPlan(host, group.name, probed=True, present=present or {}, changes=[], reboot="no")
    hr = HostRun(host, group.name, group_hash(group), plan, locked=expected_versions(group))
    hr.applied, hr.changed = True, 17
    hr.role_seconds = dict(role_seconds if role_seconds is not None else ROLE_SECONDS)
    hr.failed_task, hr.message = failed_task, message
    if report is not None:
        hr.verify, hr.verdict = report, str(report["verdict"])
        if not report["ok"] and hr.message is None:
            hr.message = "; ".join(failures(HostResult(host=host, report=report)))
    if failed_task is not None:
        hr.verdict = "fail"
    hr.duration_s = sum(hr.role_seconds.values()) + float((report or {}).get("duration_s") or 0.0)
    return hr


def fleet_doc(tmp: Path) -> dict[str, Any]:
    """Four hosts: one passes, one has a slow GPU and a torch that left the lock, one failed in
    its apply (never verified), one CPU host verified on its CPU."""
    gpu = gpu_group(["gpu-node-a01", "gpu-node-a02", "gpu-node-a03"])
    cpu = cpu_group(["cpu-builder-1"])
    good = smoke_report(gpu_measurements("gpu-node-a01", gpu), gpu)
    slow_m = gpu_measurements("gpu-node-a02", gpu, gemm_bf16=(742.5, 402.3))
    slow_m["versions"].update(torch="2.7.1+cu126", torch_cuda="12.6")  # someone pip-installed over the lock
    slow_m["training"]["gpu_util_series"] = [22, 61, 74, 70, 72, 69, 73, 71]
    slow_m["training"]["loss_curve"] = [round(2.28 * 0.975**s + 0.05, 4) for s in range(0, 200, 4)]
    slow = smoke_report(slow_m, gpu)
    cpu_m: dict[str, Any] = {
        "host": "cpu-builder-1",
        "counts": {"torch": 0, "nvml": None, "lspci": 0},
        "versions": {**installed_versions(cpu), "driver": None, "cuda_driver": None, "nccl": None},
        "arch_list": [],
        "gpus": [],
        "cpu_speed": {"gemm_fp32": 0.412, "copy_d2d": 6.8},
        "training": {
            "device": "cpu",
            "precision": "fp32",
            "steps": 30,
            "loss_first": 2.35,
            "loss_last": 0.38,
            "loss_bound": 0.5,
            "loss_curve": [round(2.35 * 0.93**s, 4) for s in range(30)],
            "loss_curve_steps": list(range(1, 31)),
            "samples_per_s": 910.0,
        },
        "frameworks": {},
        "warnings": [],
        "errors": [],
    }
    before = {
        "os": "ubuntu-22.04",
        "gpu_count": 2,
        "driver": "550.163.01",
        "cuda_toolkits": [],
        "cudnn": None,
        "frameworks": {},
        "nouveau_loaded": False,
    }
    hosts = [
        host_run("gpu-node-a01", gpu, good, present=before),
        host_run("gpu-node-a02", gpu, slow, present={**before, "driver": expected_versions(gpu)["driver"]}),
        host_run(
            "gpu-node-a03",
            gpu,
            None,
            present=before,
            failed_task="frameworks : Install the locked wheels",
            message="ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE (torch)",
            role_seconds={k: v for k, v in ROLE_SECONDS.items() if k not in ("verify",)},
        ),
        host_run(
            "cpu-builder-1",
            cpu,
            smoke_report(cpu_m, cpu, allow_cpu=True),
            present={"os": "debian-12", "gpu_count": 0, "driver": None, "cuda_toolkits": [], "frameworks": {}},
            role_seconds={"preflight": 4.1, "python_env": 12.2, "frameworks": 61.0, "verify": 2.0},
        ),
    ]
    result = UpResult(run="20261203-081500-c0de", run_dir=tmp, check=False, hosts=hosts)
    result.started, result.finished = 1796286900.0, 1796287512.0
    return result.report_json()
