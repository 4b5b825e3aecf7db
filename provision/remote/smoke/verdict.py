"""The verdict: pure functions from recorded measurements to checks and ``pass``/``fail``/``no-gpu``.

Nothing here touches torch, NVML or the machine: the job records what it measured into a plain
dict (see ``measure`` in job.py), and :func:`decide` turns that into the report's ``checks``,
``warnings`` and ``verdict``. Tests feed it recorded measurements to walk every failure path.
Standard library only: this file is copied to hosts with the rest of the smoke job.
"""

from __future__ import annotations

import re
from typing import Any

from .versions import cudnn_dotted, version_matches

__all__ = ["cudnn_dotted", "version_matches"]  # also read from here by the job and its tests

Check = dict[str, Any]
Measurements = dict[str, Any]

UTIL_MIN_PCT = 70.0

# NVML clock-event reasons that mean the hardware slowed itself down (nvml.h, nvmlClocksEventReason*).
# SW power cap, idle, application clocks and sync boost are normal operation and only reported.
THROTTLE_BAD = {
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
THROTTLE_INFO = {0x1: "idle", 0x2: "application clocks", 0x4: "software power cap", 0x10: "sync boost"}

LOW_UTIL_CAUSES = (
    "the input pipeline cannot feed the GPU (data loading or augmentation on the CPU)",
    "the batch is too small to fill the GPU",
    "host-side work between steps (synchronisation such as .item(), logging, Python overhead)",
    "another process is using the GPU or the CPU",
)


# --- GPU architecture ------------------------------------------------------------------------


def arch_supported(cc: str, arch_list: list[str]) -> tuple[bool, str]:
    """Whether a torch build with ``arch_list`` has a kernel image for compute capability ``cc``.

    SASS for ``sm_XY`` runs on the same major with an equal or higher minor; PTX
    (``compute_XY``) JIT-compiles for any equal or newer GPU. Arch-specific targets
    (``sm_90a``) run only on exactly that GPU.
    """
    major, minor = (int(x) for x in cc.split(".")[:2])
    target = major * 10 + minor
    for entry in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)([a-z]?)", entry)
        if not m:
            continue
        kind, num, suffix = m.group(1), int(m.group(2)), m.group(3)
        if kind == "sm" and (num == target or (not suffix and num // 10 == major and num <= target)):
            return True, f"sm_{target} runs {entry} kernels"
        if kind == "compute" and not suffix and num <= target:
            return True, f"sm_{target} runs by JIT from {entry} PTX (slower first start)"
    return False, f"sm_{target} is not in this torch build's arch list ({' '.join(arch_list) or 'empty'})"


# --- reference figures -----------------------------------------------------------------------


def find_model(name: str, references: dict[str, Any]) -> dict[str, Any] | None:
    for model in references.get("models", []):
        if re.search(model["pattern"], name):
            return dict(model)
    return None


def speed_threshold(metric: str, gpu: dict[str, Any], references: dict[str, Any]) -> tuple[float | None, str]:
    """The pass line for one speed metric of one GPU, and where it comes from."""
    fraction = float(references["pass_fraction"])
    if metric in ("copy_h2d", "copy_d2h"):
        pcie = (gpu.get("health") or {}).get("pcie") or {}
        gen, width = pcie.get("max_gen"), pcie.get("max_width")
        lane = references["pcie_lane_gbps"].get(str(gen))
        if lane is None or not width:
            return None, "no PCIe link figures from NVML"
        eff = float(references["efficiency"]["copy_pcie"])
        return fraction * eff * float(lane) * int(width), f"PCIe gen{gen} x{width}"
    model = find_model(str(gpu.get("name", "")), references)
    if model is None:
        return None, f"no reference figures for {gpu.get('name')!r}"
    peak_key = {
        "gemm_bf16": "bf16_tflops",
        "gemm_fp16": "fp16_tflops",
        "gemm_tf32": "tf32_tflops",
        "copy_d2d": "mem_gbps",
    }[metric]
    peak = model["peak"].get(peak_key)
    if peak is None:
        return None, f"no {peak_key} figure for {model['model']}"
    eff = float({**references["efficiency"], **model.get("efficiency", {})}[metric])
    return fraction * eff * float(peak), str(model["model"])


SPEED_UNITS = {
    "gemm_bf16": "TFLOP/s",
    "gemm_fp16": "TFLOP/s",
    "gemm_tf32": "TFLOP/s",
    "copy_d2d": "GB/s",
    "copy_h2d": "GB/s",
    "copy_d2h": "GB/s",
    "gemm_fp32": "TFLOP/s",
}


# --- per-GPU checks --------------------------------------------------------------------------


def check(
    name: str,
    ok: bool,
    value: Any = None,
    unit: str | None = None,
    threshold: Any = None,
    *,
    code: str | None = None,
    message: str | None = None,
    gpu: int | None = None,
    pass_if: str | None = None,
) -> Check:
    """One entry of the report's ``checks``; a failed one carries a ``code`` and a ``message``.

    ``pass_if`` says how ``value`` must stand to ``threshold`` to pass (``>=``, ``<``, ``=``, or
    ``matches``: the version rule of versions.py), so a reader of the report sees "≥ 593.4"
    rather than a bare number.
    """
    entry: Check = {"name": name, "ok": ok, "value": value, "unit": unit, "threshold": threshold}
    if pass_if is not None:
        entry["pass_if"] = pass_if
    if gpu is not None:
        entry["gpu"] = gpu
    if not ok:
        entry["code"] = code or name
        entry["message"] = message or f"{name} failed"
    return entry


def version_checks(versions: dict[str, Any], expect: dict[str, str]) -> list[Check]:
    checks = []
    for key, expected in sorted(expect.items()):
        actual = versions.get(key)
        actual_s = None if actual is None else str(actual)
        shown = "not installed" if actual_s is None else actual_s
        if key == "cudnn" and actual_s:
            shown = f"{cudnn_dotted(actual_s)} ({actual_s})"
        checks.append(
            check(
                f"version_{key}",
                version_matches(key, actual_s, str(expected)),
                actual_s,
                threshold=str(expected),
                pass_if="matches",
                code="drift",
                message=f"drift: {key} is {shown} on this host, expected {expected}",
            )
        )
    return checks


def health_checks(health: dict[str, Any], label: str, idx: int, warnings: list[dict[str, str]]) -> list[Check]:
    """NVML's view of one GPU: memory errors, throttling, the PCIe link, temperature."""
    checks: list[Check] = []
    if health.get("ecc_uncorrected") is not None:
        n = int(health["ecc_uncorrected"])
        checks.append(
            check(
                "ecc",
                n == 0,
                n,
                "errors",
                0,
                gpu=idx,
                pass_if="=",
                message=(
                    f"{label}: {n} uncorrectable ECC errors since the driver loaded "
                    "(drain the GPU, reset it, check dmesg for Xid 48/63/64)"
                ),
            )
        )
    if health.get("retired_pages_pending") is not None:
        pending = bool(health["retired_pages_pending"])
        checks.append(
            check(
                "retired_pages",
                not pending,
                pending,
                threshold=False,
                gpu=idx,
                pass_if="=",
                code="memory_remap",
                message=f"{label}: page retirements are pending (reset the GPU or reboot to apply them)",
            )
        )
    remap = health.get("row_remap")
    if remap is not None:
        what = "failed (the GPU needs service)" if remap.get("failure") else "is pending (reset the GPU to apply it)"
        checks.append(
            check(
                "row_remap",
                not (remap.get("pending") or remap.get("failure")),
                remap,
                gpu=idx,
                code="memory_remap",
                message=f"{label}: row remapping {what}",
            )
        )
    reasons = health.get("throttle_reasons")
    if reasons is not None:
        bad = [n for bit, n in THROTTLE_BAD.items() if int(reasons) & bit]
        info = [n for bit, n in THROTTLE_INFO.items() if int(reasons) & bit]
        checks.append(
            check(
                "throttle",
                not bad,
                ", ".join(bad + info) or "none",
                gpu=idx,
                message=(
                    f"{label}: clocks slowed by {', '.join(bad)} under load "
                    "(check cooling, power supply and nvidia-smi -q -d PERFORMANCE)"
                ),
            )
        )
    pcie = health.get("pcie")
    if pcie and pcie.get("cur_gen") is not None and pcie.get("max_gen") is not None:
        cur = f"gen{pcie['cur_gen']} x{pcie['cur_width']}"
        best = f"gen{pcie['max_gen']} x{pcie['max_width']}"
        loaded = pcie.get("under_load", True)
        # An idle link trains down to a lower generation to save power: judge the generation only
        # from readings taken under load; a narrower link is wrong at any time.
        gen_ok = int(pcie["cur_gen"]) >= int(pcie["max_gen"]) or not loaded
        ok = gen_ok and int(pcie["cur_width"]) >= int(pcie["max_width"])
        checks.append(
            check(
                "pcie_link",
                ok,
                cur,
                threshold=best,
                gpu=idx,
                pass_if=">=",
                code="pcie",
                message=(
                    f"{label}: PCIe link runs at {cur} {'under load' if loaded else 'at rest'}, "
                    "the link supports "
                    f"{best} (reseat the card or riser, check BIOS link settings)"
                ),
            )
        )
    if health.get("persistence") is False:
        warnings.append(
            {
                "code": "persistence_off",
                "message": f"{label}: persistence mode is off "
                "(enable nvidia-persistenced so the driver stays loaded between jobs)",
            }
        )
    temp = health.get("temperature_c")
    if temp is not None:
        limit = int(health.get("temperature_slowdown_c") or 87)
        checks.append(
            check(
                "temperature",
                int(temp) < limit,
                int(temp),
                "C",
                limit,
                gpu=idx,
                pass_if="<",
                message=(f"{label}: {temp} C reaches the slowdown temperature {limit} C (check airflow and fans)"),
            )
        )
    return checks


def speed_checks(
    gpu: dict[str, Any], label: str, references: dict[str, Any], warnings: list[dict[str, str]]
) -> list[Check]:
    checks: list[Check] = []
    for metric, value in (gpu.get("speed") or {}).items():
        if value is None or metric not in SPEED_UNITS:
            continue
        unit, rounded = SPEED_UNITS[metric], round(float(value), 1)
        threshold, basis = speed_threshold(metric, gpu, references)
        if threshold is None:
            warnings.append(
                {"code": "no_reference", "message": f"{label}: {metric} {rounded} {unit} not judged: {basis}"}
            )
            checks.append(check(metric, True, rounded, unit, gpu=gpu["index"]))
            continue
        checks.append(
            check(
                metric,
                float(value) >= threshold,
                rounded,
                unit,
                round(threshold, 1),
                gpu=gpu["index"],
                pass_if=">=",
                code="slow",
                message=(
                    f"{label}: {metric} {rounded} {unit} is below the pass line "
                    f"{threshold:.1f} ({references['pass_fraction']} x the reference for {basis})"
                ),
            )
        )
    return checks


def gpu_checks(
    gpu: dict[str, Any],
    arch_list: list[str],
    references: dict[str, Any],
    warnings: list[dict[str, str]],
    on_gpu: bool,
) -> list[Check]:
    idx = gpu["index"]
    label = f"GPU {idx} ({gpu.get('name')})"
    checks: list[Check] = []
    if on_gpu and gpu.get("compute_capability"):
        ok, why = arch_supported(str(gpu["compute_capability"]), arch_list)
        checks.append(
            check(
                "arch",
                ok,
                f"sm_{str(gpu['compute_capability']).replace('.', '')}",
                gpu=idx,
                message=(
                    f"{label}: {why}: kernels would fail with "
                    "'no kernel image is available for execution on the device' "
                    "(install a torch build whose arch list covers this GPU)"
                ),
            )
        )
    if on_gpu and "kernel_ok" in gpu:
        checks.append(
            check(
                "kernel",
                bool(gpu["kernel_ok"]),
                gpu=idx,
                message=f"{label}: a CUDA kernel failed: {gpu.get('kernel_error')}",
            )
        )
    checks += health_checks(gpu.get("health") or {}, label, idx, warnings)
    if on_gpu:
        checks += speed_checks(gpu, label, references, warnings)
    return checks


# --- training and the rest -------------------------------------------------------------------


def training_checks(training: dict[str, Any], warnings: list[dict[str, str]]) -> list[Check]:
    first, last, bound = training.get("loss_first"), training.get("loss_last"), training.get("loss_bound")
    if first is None or last is None or bound is None:
        return [
            check(
                "training_loss",
                False,
                threshold=bound,
                code="training",
                message=f"training did not finish: {training.get('error') or 'no loss recorded'}",
            )
        ]
    ok = float(last) <= float(bound) and float(last) < float(first)
    checks = [
        check(
            "training_loss",
            ok,
            round(float(last), 4),
            "loss",
            bound,
            pass_if="<=",
            code="loss",
            message=(
                f"the training loss did not fall below {bound}: "
                f"{float(first):.3f} -> {float(last):.3f} after "
                f"{training.get('steps')} steps (a broken kernel, cuDNN or a numerics problem)"
            ),
        ),
        check("training_speed", True, training.get("samples_per_s"), "samples/s"),
    ]
    if training.get("device") == "cuda":
        util = training.get("gpu_util_mean_pct")
        if util is None:
            warnings.append({"code": "no_utilization", "message": "GPU utilization was not sampled (no NVML)"})
        else:
            checks.append(
                check(
                    "training_util",
                    float(util) >= UTIL_MIN_PCT,
                    round(float(util), 1),
                    "%",
                    UTIL_MIN_PCT,
                    pass_if=">=",
                    code="low_util",
                    message=(
                        f"mean GPU utilization during training was {float(util):.0f}% "
                        f"(< {UTIL_MIN_PCT:.0f}%); likely causes: " + "; ".join(LOW_UTIL_CAUSES)
                    ),
                )
            )
    return checks


def distributed_checks(prefix: str, dist: dict[str, Any]) -> list[Check]:
    world = dist.get("world_size")
    if dist.get("error"):
        return [
            check(
                f"{prefix}_allreduce",
                False,
                code="distributed",
                message=f"{prefix} ({dist.get('backend')}, {world} ranks): {dist['error']}",
            )
        ]
    checks = [
        check(
            f"{prefix}_allreduce",
            bool(dist.get("allreduce_ok")),
            dist.get("allreduce_busbw_gbps"),
            "GB/s",
            code="distributed",
            message=(f"{prefix}: all-reduce over {world} ranks returned a wrong sum ({dist.get('allreduce_detail')})"),
        )
    ]
    if dist.get("ddp_loss_first") is not None:
        first, last = float(dist["ddp_loss_first"]), float(dist["ddp_loss_last"])
        ok = last < first and bool(dist.get("ddp_in_sync", True))
        checks.append(
            check(
                f"{prefix}_ddp",
                ok,
                round(last, 4),
                "loss",
                code="distributed",
                message=(
                    f"{prefix}: DDP training over {world} ranks did not converge in step "
                    f"(loss {first:.3f} -> "
                    f"{last:.3f}, replicas in sync: {dist.get('ddp_in_sync')})"
                ),
            )
        )
    return checks


def framework_checks(frameworks: dict[str, Any], on_gpu: bool) -> list[Check]:
    checks = []
    for name, result in sorted(frameworks.items()):
        ok = bool(result.get("ok")) and (not on_gpu or int(result.get("gpus") or 0) > 0)
        why = result.get("error") or f"{name} sees no GPU"
        checks.append(check(name, ok, result.get("version"), code="framework", message=f"{name}: {why}"))
    return checks


def count_check(m: Measurements, allow_cpu: bool) -> Check:
    counts = m.get("counts", {})
    torch_gpus = int(counts.get("torch") or 0)
    others = [int(v) for k, v in counts.items() if k != "torch" and v is not None]
    seen = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v is not None)
    if any(v != torch_gpus for v in others):
        why = m.get("torch_error") or "a GPU is hidden, lost from the bus or not usable"
        return check("gpu_count", False, torch_gpus, "GPUs", message=f"GPU counts disagree ({seen}): {why}")
    return check(
        "gpu_count",
        torch_gpus > 0 or allow_cpu,
        torch_gpus,
        "GPUs",
        code="no_gpu",
        message=(
            f"no usable GPU ({m.get('torch_error') or 'torch sees none'}); pass --allow-cpu to verify a CPU-only host"
        ),
    )


def decide(m: Measurements, references: dict[str, Any], expect: dict[str, str], allow_cpu: bool) -> dict[str, Any]:
    """checks, warnings and the verdict for one host's measurements."""
    warnings: list[dict[str, str]] = list(m.get("warnings", []))
    on_gpu = int(m.get("counts", {}).get("torch") or 0) > 0
    checks = [count_check(m, allow_cpu)]
    if not on_gpu and allow_cpu:
        warnings.append({"code": "cpu_only", "message": "no usable GPU: the job ran on the CPU (--allow-cpu)"})
    checks += version_checks(m.get("versions", {}), expect)
    for gpu in m.get("gpus", []):
        checks += gpu_checks(gpu, m.get("arch_list", []), references, warnings, on_gpu)
    if m.get("training") is not None:
        checks += training_checks(m["training"], warnings)
    if m.get("distributed") is not None:
        checks += distributed_checks("ddp_local", m["distributed"])
    if m.get("multihost") is not None:
        checks += distributed_checks("multihost", m["multihost"])
    for metric, value in sorted((m.get("cpu_speed") or {}).items()):  # figures only: no CPU reference
        checks.append(check(f"cpu_{metric}", True, round(float(value), 6), SPEED_UNITS.get(metric, "GB/s")))
    checks += framework_checks(m.get("frameworks", {}), on_gpu)
    for err in m.get("errors", []):
        checks.append(check(f"stage_{err['stage']}", False, code="error", message=f"{err['stage']}: {err['message']}"))

    if not on_gpu and not allow_cpu:
        verdict = "no-gpu"
    elif all(c["ok"] for c in checks):
        verdict = "pass"
    else:
        verdict = "fail"
    return {"ok": verdict == "pass", "verdict": verdict, "checks": checks, "warnings": warnings}
