"""The verdict: pure functions from recorded measurements to checks and ``pass``/``fail``/``no-gpu``.

Nothing here touches torch, NVML or the machine: the job records what it measured into a plain
dict (see ``measure`` in job.py), and :func:`decide` turns that into the report's ``checks``,
``warnings`` and ``verdict``. Tests feed it recorded measurements to walk every failure path.
Standard library only: this file is copied to hosts with the rest of the smoke job.
"""

from __future__ import annotations

import re
from typing import Any

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


# --- versions --------------------------------------------------------------------------------


def _parts(version: str) -> list[str]:
    return [p for p in re.split(r"[.]", version.strip()) if p != ""]


def cudnn_dotted(value: str) -> str:
    """torch reports cuDNN as an integer (9.10.2 -> 91002, 8.9.7 -> 8907); give it dotted."""
    if not value.isdigit():
        return value
    number = int(value)
    if number >= 90000:  # cuDNN 9+: major * 10000 + minor * 100 + patch
        return f"{number // 10000}.{number % 10000 // 100}.{number % 100}"
    return f"{number // 1000}.{number % 1000 // 100}.{number % 100}"  # cuDNN <= 8


def version_matches(key: str, actual: str | None, expected: str) -> bool:
    """Whether an installed version satisfies an expected one.

    The expectation may be shorter than the installed version (``580`` matches ``580.95.05``,
    ``2.8`` matches ``2.8.0``); a torch local tag (``+cu128``) counts only when the expectation
    has one. ``none`` expects absence (a CPU torch has no CUDA runtime).
    """
    if expected.strip().lower() == "none":
        return actual is None
    if actual is None:
        return False
    if key == "cudnn":
        actual, expected = cudnn_dotted(actual), cudnn_dotted(expected)
        # torch reports three parts; the lock may name the build too (9.10.2.21)
        return _parts(expected)[:3] == _parts(actual)[: len(_parts(expected)[:3])]
    if "+" not in expected:
        actual = actual.split("+", 1)[0]
    want = _parts(expected)
    return _parts(actual)[: len(want)] == want


def version_checks(versions: dict[str, Any], expect: dict[str, str]) -> list[Check]:
    checks = []
    for key, expected in sorted(expect.items()):
        actual = versions.get(key)
        actual_s = None if actual is None else str(actual)
        ok = version_matches(key, actual_s, str(expected))
        check: Check = {
            "name": f"version_{key}",
            "ok": ok,
            "value": actual_s,
            "unit": None,
            "threshold": str(expected),
        }
        if not ok:
            shown = "not installed" if actual_s is None else actual_s
            if key == "cudnn" and actual_s:
                shown = f"{cudnn_dotted(actual_s)} ({actual_s})"
            check["code"] = "drift"
            check["message"] = f"drift: {key} is {shown} on this host, expected {expected}"
        checks.append(check)
    return checks


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

    def add(  # noqa: PLR0917
        name: str,
        ok: bool,
        value: Any = None,
        unit: str | None = None,
        threshold: Any = None,
        code: str | None = None,
        message: str | None = None,
    ) -> None:
        check: Check = {
            "name": name,
            "gpu": idx,
            "ok": ok,
            "value": value,
            "unit": unit,
            "threshold": threshold,
        }
        if not ok:
            check["code"] = code or name
            check["message"] = f"{label}: {message}" if message else f"{label}: {name} failed"
        checks.append(check)

    if on_gpu and gpu.get("compute_capability"):
        ok, why = arch_supported(str(gpu["compute_capability"]), arch_list)
        add(
            "arch",
            ok,
            f"sm_{str(gpu['compute_capability']).replace('.', '')}",
            None,
            None,
            "arch",
            f"{why}: kernels would fail with 'no kernel image is available for execution on the device' "
            "(install a torch build whose arch list covers this GPU)",
        )
    if on_gpu and "kernel_ok" in gpu:
        add(
            "kernel",
            bool(gpu["kernel_ok"]),
            None,
            None,
            None,
            "kernel",
            f"a CUDA kernel failed: {gpu.get('kernel_error')}",
        )

    health = gpu.get("health") or {}
    if health.get("ecc_uncorrected") is not None:
        n = int(health["ecc_uncorrected"])
        add(
            "ecc",
            n == 0,
            n,
            "errors",
            0,
            "ecc",
            f"{n} uncorrectable ECC errors since the driver loaded "
            "(drain the GPU, reset it, check dmesg for Xid 48/63/64)",
        )
    if health.get("retired_pages_pending") is not None:
        pending = bool(health["retired_pages_pending"])
        add(
            "retired_pages",
            not pending,
            pending,
            None,
            False,
            "memory_remap",
            "page retirements are pending (reset the GPU or reboot to apply them)",
        )
    remap = health.get("row_remap")
    if remap is not None:
        bad = bool(remap.get("pending")) or bool(remap.get("failure"))
        add(
            "row_remap",
            not bad,
            remap,
            None,
            None,
            "memory_remap",
            "row remapping "
            + (
                "failed (the GPU needs service)"
                if remap.get("failure")
                else "is pending (reset the GPU to apply it)"
            ),
        )
    reasons = health.get("throttle_reasons")
    if reasons is not None:
        bad_names = [n for bit, n in THROTTLE_BAD.items() if int(reasons) & bit]
        info = [n for bit, n in THROTTLE_INFO.items() if int(reasons) & bit]
        add(
            "throttle",
            not bad_names,
            ", ".join(bad_names + info) or "none",
            None,
            None,
            "throttle",
            f"clocks slowed by {', '.join(bad_names)} under load "
            "(check cooling, power supply and nvidia-smi -q -d PERFORMANCE)",
        )
    pcie = health.get("pcie")
    if pcie and pcie.get("cur_gen") is not None and pcie.get("max_gen") is not None:
        cur = f"gen{pcie['cur_gen']} x{pcie['cur_width']}"
        best = f"gen{pcie['max_gen']} x{pcie['max_width']}"
        # An idle link trains down to a lower generation to save power: judge the generation only
        # from readings taken under load; a narrower link is wrong at any time.
        gen_ok = int(pcie["cur_gen"]) >= int(pcie["max_gen"]) or not pcie.get("under_load", True)
        ok = gen_ok and int(pcie["cur_width"]) >= int(pcie["max_width"])
        add(
            "pcie_link",
            ok,
            cur,
            None,
            best,
            "pcie",
            f"PCIe link runs at {cur} {'under load' if pcie.get('under_load', True) else 'at rest'}, "
            "the link "
            f"supports {best} (reseat the card or riser, check BIOS link settings)",
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
        limit = health.get("temperature_slowdown_c") or 87
        add(
            "temperature",
            int(temp) < int(limit),
            int(temp),
            "C",
            int(limit),
            "temperature",
            f"{temp} C reaches the slowdown temperature {limit} C (check airflow and fans)",
        )

    for metric, value in (gpu.get("speed") or {}).items():
        if value is None or metric not in SPEED_UNITS:
            continue
        threshold, basis = speed_threshold(metric, gpu, references) if on_gpu else (None, "CPU")
        rounded = round(float(value), 1)
        if threshold is None:
            if on_gpu:
                warnings.append(
                    {
                        "code": "no_reference",
                        "message": f"{label}: {metric} {rounded} {SPEED_UNITS[metric]} not judged: {basis}",
                    }
                )
            add(metric, True, rounded, SPEED_UNITS[metric], None)
            continue
        add(
            metric,
            float(value) >= threshold,
            rounded,
            SPEED_UNITS[metric],
            round(threshold, 1),
            "slow",
            f"{metric} {rounded} {SPEED_UNITS[metric]} is below the pass line {threshold:.1f} "
            f"(0.75 x the reference for {basis})",
        )
    return checks


# --- training and the rest -------------------------------------------------------------------


def training_checks(training: dict[str, Any], warnings: list[dict[str, str]]) -> list[Check]:
    checks: list[Check] = []
    first, last, bound = training.get("loss_first"), training.get("loss_last"), training.get("loss_bound")
    if first is None or last is None or bound is None:
        return [
            {
                "name": "training_loss",
                "ok": False,
                "value": None,
                "unit": None,
                "threshold": bound,
                "code": "training",
                "message": f"training did not finish: {training.get('error', 'no loss recorded')}",
            }
        ]
    ok = float(last) <= float(bound) and float(last) < float(first)
    check: Check = {
        "name": "training_loss",
        "ok": ok,
        "value": round(float(last), 4),
        "unit": "loss",
        "threshold": bound,
    }
    if not ok:
        check["code"] = "loss"
        check["message"] = (
            f"the training loss did not fall below {bound}: {float(first):.3f} -> {float(last):.3f} "
            f"after {training.get('steps')} steps (a broken kernel, cuDNN or a numerics problem)"
        )
    checks.append(check)
    checks.append(
        {
            "name": "training_speed",
            "ok": True,
            "value": training.get("samples_per_s"),
            "unit": "samples/s",
            "threshold": None,
        }
    )
    if training.get("device") == "cuda":
        util = training.get("gpu_util_mean_pct")
        if util is None:
            warnings.append(
                {"code": "no_utilization", "message": "GPU utilization was not sampled (NVML unavailable)"}
            )
        else:
            low = float(util) < UTIL_MIN_PCT
            check = {
                "name": "training_util",
                "ok": not low,
                "value": round(float(util), 1),
                "unit": "%",
                "threshold": UTIL_MIN_PCT,
            }
            if low:
                check["code"] = "low_util"
                check["message"] = (
                    f"mean GPU utilization during training was {float(util):.0f}% (< {UTIL_MIN_PCT:.0f}%); "
                    "likely causes: " + "; ".join(LOW_UTIL_CAUSES)
                )
            checks.append(check)
    return checks


def distributed_checks(prefix: str, dist: dict[str, Any]) -> list[Check]:
    world = dist.get("world_size")
    if dist.get("error"):
        return [
            {
                "name": f"{prefix}_allreduce",
                "ok": False,
                "value": None,
                "unit": None,
                "threshold": None,
                "code": "distributed",
                "message": f"{prefix} ({dist.get('backend')}, {world} ranks): {dist['error']}",
            }
        ]
    checks: list[Check] = []
    ok = bool(dist.get("allreduce_ok"))
    check: Check = {
        "name": f"{prefix}_allreduce",
        "ok": ok,
        "value": dist.get("allreduce_busbw_gbps"),
        "unit": "GB/s",
        "threshold": None,
    }
    if not ok:
        check["code"] = "distributed"
        check["message"] = (
            f"{prefix}: all-reduce over {world} ranks returned a wrong sum ({dist.get('allreduce_detail')})"
        )
    checks.append(check)
    if dist.get("ddp_loss_first") is not None:
        fell = float(dist["ddp_loss_last"]) < float(dist["ddp_loss_first"])
        check = {
            "name": f"{prefix}_ddp",
            "ok": fell and bool(dist.get("ddp_in_sync", True)),
            "value": round(float(dist["ddp_loss_last"]), 4),
            "unit": "loss",
            "threshold": None,
        }
        if not check["ok"]:
            check["code"] = "distributed"
            check["message"] = (
                f"{prefix}: DDP training over {world} ranks did not converge in step "
                f"(loss {dist['ddp_loss_first']:.3f} -> {dist['ddp_loss_last']:.3f}, "
                f"replicas in sync: {dist.get('ddp_in_sync')})"
            )
        checks.append(check)
    return checks


def framework_checks(frameworks: dict[str, Any], on_gpu: bool) -> list[Check]:
    checks: list[Check] = []
    for name, result in sorted(frameworks.items()):
        ok = bool(result.get("ok")) and (not on_gpu or int(result.get("gpus") or 0) > 0)
        check: Check = {
            "name": name,
            "ok": ok,
            "value": result.get("version"),
            "unit": None,
            "threshold": None,
        }
        if not ok:
            check["code"] = "framework"
            why = result.get("error") or f"{name} sees no GPU"
            check["message"] = f"{name}: {why}"
        checks.append(check)
    return checks


def decide(
    m: Measurements, references: dict[str, Any], expect: dict[str, str], allow_cpu: bool
) -> dict[str, Any]:
    """checks, warnings and the verdict for one host's measurements."""
    warnings: list[dict[str, str]] = list(m.get("warnings", []))
    counts = m.get("counts", {})
    torch_gpus = int(counts.get("torch") or 0)
    others = {k: v for k, v in counts.items() if k != "torch" and v is not None}
    on_gpu = torch_gpus > 0
    checks: list[Check] = []

    agree = all(int(v) == torch_gpus for v in others.values())
    seen = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v is not None)
    count_check: Check = {
        "name": "gpu_count",
        "ok": agree and (on_gpu or allow_cpu),
        "value": torch_gpus,
        "unit": "GPUs",
        "threshold": None,
    }
    if not agree:
        count_check["code"] = "gpu_count"
        count_check["message"] = f"GPU counts disagree ({seen}): " + (
            m.get("torch_error") or "a GPU is hidden, lost from the bus or not usable"
        )
    elif not on_gpu and not allow_cpu:
        count_check["code"] = "no_gpu"
        count_check["message"] = (
            f"no usable GPU ({m.get('torch_error') or 'torch sees none'}); "
            "pass --allow-cpu to verify a CPU-only host"
        )
    checks.append(count_check)
    if not on_gpu and allow_cpu:
        warnings.append(
            {"code": "cpu_only", "message": "no usable GPU: the job ran on the CPU (--allow-cpu)"}
        )

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
        checks.append(
            {
                "name": f"cpu_{metric}",
                "ok": True,
                "value": round(float(value), 3),
                "unit": SPEED_UNITS.get(metric, "GB/s"),
                "threshold": None,
            }
        )
    checks += framework_checks(m.get("frameworks", {}), on_gpu)
    for err in m.get("errors", []):
        checks.append(
            {
                "name": f"stage_{err['stage']}",
                "ok": False,
                "value": None,
                "unit": None,
                "threshold": None,
                "code": "error",
                "message": f"{err['stage']}: {err['message']}",
            }
        )

    if not on_gpu and not allow_cpu:
        verdict = "no-gpu"
    elif all(c["ok"] for c in checks):
        verdict = "pass"
    else:
        verdict = "fail"
    return {"ok": verdict == "pass", "verdict": verdict, "checks": checks, "warnings": warnings}
