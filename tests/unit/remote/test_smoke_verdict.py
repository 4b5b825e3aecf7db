"""The smoke job's verdict, fed recorded measurements: every failure path without a GPU.

The GPU measurements below are hand-built records in the job's own format, with the figures of
DESIGN.md's H200 example (742 TFLOP/s bf16, 41000 samples/s, 97% utilization); each test changes
one thing and checks that exactly that thing fails, with a message that names it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provision.remote.smoke.verdict import arch_supported, cudnn_dotted, decide, find_model, version_matches
from tests.support.smoke_records import LOCKED, REFS, h200_record


def failed(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["checks"] if not c["ok"]}


def test_a_healthy_h200_passes_with_the_design_threshold() -> None:
    result = decide(h200_record(), REFS, LOCKED, allow_cpu=False)
    assert result["verdict"] == "pass" and result["ok"], failed(result)
    gemm = next(c for c in result["checks"] if c["name"] == "gemm_bf16")
    # 0.75 x (0.8 x 989 dense bf16 TFLOP/s): DESIGN.md's example threshold
    assert gemm["threshold"] == pytest.approx(593.4, abs=0.1)
    assert gemm["gpu"] == 0 and gemm["unit"] == "TFLOP/s"
    assert {c["name"] for c in result["checks"]} >= {
        "gpu_count",
        "version_driver",
        "version_torch",
        "version_torch_cuda",
        "version_cudnn",
        "arch",
        "kernel",
        "ecc",
        "retired_pages",
        "row_remap",
        "throttle",
        "pcie_link",
        "temperature",
        "gemm_tf32",
        "copy_d2d",
        "copy_h2d",
        "copy_d2h",
        "training_loss",
        "training_speed",
        "training_util",
    }


def test_loss_that_does_not_fall_fails() -> None:
    m = h200_record()
    m["training"].update(loss_first=2.30, loss_last=2.29)
    result = decide(m, REFS, {}, allow_cpu=False)
    assert result["verdict"] == "fail"
    assert list(failed(result)) == ["training_loss"]
    assert failed(result)["training_loss"]["code"] == "loss"
    assert "2.300 -> 2.290" in failed(result)["training_loss"]["message"]


def test_training_that_did_not_finish_fails_with_its_error() -> None:
    m = h200_record()
    m["training"] = {
        "device": "cuda",
        "loss_first": 2.3,
        "loss_last": None,
        "loss_bound": 0.5,
        "error": "the loss is not finite (NaN or inf)",
    }
    assert "NaN" in failed(decide(m, REFS, {}, allow_cpu=False))["training_loss"]["message"]


@pytest.mark.parametrize(
    ("key", "locked", "installed", "shown"),
    [
        ("driver", "580.95.05", "550.127.05", "550.127.05"),
        ("torch", "2.8.0", "2.7.1+cu126", "2.7.1+cu126"),
        ("torch_cuda", "12.8", "12.6", "12.6"),
        ("cudnn", "9.10.2.21", "90501", "9.5.1 (90501)"),
    ],
)
def test_a_version_that_differs_from_the_lock_is_drift_naming_both(
    key: str, locked: str, installed: str, shown: str
) -> None:
    m = h200_record()
    m["versions"][key] = installed
    result = decide(m, REFS, {**LOCKED, key: locked}, allow_cpu=False)
    assert result["verdict"] == "fail"
    check = failed(result)[f"version_{key}"]
    assert check["code"] == "drift"
    assert check["message"] == f"drift: {key} is {shown} on this host, expected {locked}"


def test_a_locked_framework_that_is_missing_is_drift() -> None:
    result = decide(h200_record(), REFS, {"tensorflow": "2.20.0"}, allow_cpu=False)
    assert (
        failed(result)["version_tensorflow"]["message"]
        == "drift: tensorflow is not installed on this host, expected 2.20.0"
    )


@pytest.mark.parametrize(
    ("key", "installed", "expected", "ok"),
    [
        ("driver", "580.95.05", "580", True),
        ("driver", "580.95.05", "580.95.05", True),
        ("driver", "580.95.05", "58", False),
        ("torch", "2.8.0+cu128", "2.8.0", True),
        ("torch", "2.8.0+cu128", "2.8", True),
        ("torch", "2.8.0+cu128", "2.8.0+cu126", False),
        ("torch", "2.13.0+cpu", "2.13.0+cpu", True),
        ("cudnn", "91002", "9.10.2.21", True),
        ("cudnn", "91002", "9.10", True),
        ("cudnn", "91002", "91002", True),
        ("cudnn", "8907", "8.9.7.29", True),
        ("cudnn", "91002", "9.1.0", False),
        ("torch_cuda", None, "none", True),
        ("torch_cuda", "12.8", "none", False),
        ("nccl", None, "2.27.3", False),
    ],
)
def test_version_matching(key: str, installed: str | None, expected: str, ok: bool) -> None:
    assert version_matches(key, installed, expected) is ok


def test_cudnn_numbers_read_as_dotted_versions() -> None:
    assert cudnn_dotted("91002") == "9.10.2"
    assert cudnn_dotted("90100") == "9.1.0"
    assert cudnn_dotted("8907") == "8.9.7"


def test_a_gpu_missing_from_the_arch_list_fails_before_training_with_the_kernel_image_message() -> None:
    m = h200_record()
    m["arch_list"] = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]
    m["gpus"][0].pop("kernel_ok")  # the job runs no kernel on a GPU that fails the arch check
    m["gpus"][0]["speed"] = None
    m["training"] = None
    result = decide(m, REFS, {}, allow_cpu=False)
    assert list(failed(result)) == ["arch"]
    message = failed(result)["arch"]["message"]
    assert "sm_90 is not in this torch build's arch list (sm_50 sm_60 sm_70 sm_75 sm_80 sm_86)" in message
    assert "no kernel image is available" in message


@pytest.mark.parametrize(
    ("cc", "arch_list", "ok"),
    [
        ("9.0", ["sm_80", "sm_90"], True),
        ("8.6", ["sm_80"], True),  # same major, newer minor runs sm_80 SASS
        ("8.0", ["sm_86"], False),  # but not the other way round
        ("10.0", ["sm_90", "compute_90"], True),  # PTX JIT-compiles forward
        ("10.0", ["sm_90a"], False),  # arch-specific code runs only on sm_90
        ("9.0", ["sm_90a"], True),
        ("12.0", ["sm_80", "sm_90", "sm_100"], False),  # RTX 50 on a build without sm_120
        ("7.5", [], False),
    ],
)
def test_arch_support(cc: str, arch_list: list[str], ok: bool) -> None:
    assert arch_supported(cc, arch_list)[0] is ok


def test_utilization_under_70_percent_is_flagged_with_likely_causes() -> None:
    m = h200_record()
    m["training"]["gpu_util_mean_pct"] = 52.0
    check = failed(decide(m, REFS, {}, allow_cpu=False))["training_util"]
    assert check["code"] == "low_util" and check["threshold"] == 70.0
    for cause in ("input pipeline", "batch is too small", "host-side work"):
        assert cause in check["message"]


def test_a_slow_gpu_fails_and_an_unknown_model_only_warns() -> None:
    m = h200_record()
    m["gpus"][0]["speed"]["gemm_bf16"] = 500.0
    slow = failed(decide(m, REFS, {}, allow_cpu=False))["gemm_bf16"]
    assert slow["code"] == "slow"
    assert slow["message"] == (
        "GPU 0 (NVIDIA H200): gemm_bf16 500.0 TFLOP/s is below the pass line 593.4 (0.75 x the reference for H200)"
    )

    m = h200_record()
    m["gpus"][0]["name"] = "NVIDIA Imaginary X1"
    result = decide(m, REFS, {}, allow_cpu=False)
    assert result["verdict"] == "pass"
    assert any(w["code"] == "no_reference" and "gemm_bf16" in w["message"] for w in result["warnings"])


def test_pcie_threshold_follows_the_link_and_a_narrow_link_fails() -> None:
    m = h200_record()
    m["gpus"][0]["health"]["pcie"].update(cur_width=8)
    check = failed(decide(m, REFS, {}, allow_cpu=False))["pcie_link"]
    assert "gen5 x8 under load" in check["message"] and "gen5 x16" in check["message"]
    h2d = next(c for c in decide(h200_record(), REFS, {}, allow_cpu=False)["checks"] if c["name"] == "copy_h2d")
    assert h2d["threshold"] == pytest.approx(0.75 * 0.8 * 3.938 * 16, abs=0.1)


def test_a_lower_pcie_generation_counts_only_under_load() -> None:
    m = h200_record()
    m["gpus"][0]["health"]["pcie"].update(cur_gen=1, under_load=False)
    assert "pcie_link" not in failed(decide(m, REFS, {}, allow_cpu=False))
    m["gpus"][0]["health"]["pcie"]["under_load"] = True
    assert "pcie_link" in failed(decide(m, REFS, {}, allow_cpu=False))


@pytest.mark.parametrize(
    ("field", "value", "name"),
    [
        ("ecc_uncorrected", 2, "ecc"),
        ("retired_pages_pending", True, "retired_pages"),
        ("row_remap", {"corrected": 0, "uncorrected": 1, "pending": True, "failure": False}, "row_remap"),
        ("throttle_reasons", 0x40 | 0x4, "throttle"),
        ("temperature_c", 91, "temperature"),
    ],
)
def test_nvml_health_faults_fail(field: str, value: Any, name: str) -> None:
    m = h200_record()
    m["gpus"][0]["health"][field] = value
    result = decide(m, REFS, {}, allow_cpu=False)
    assert list(failed(result)) == [name]
    assert failed(result)[name]["message"].startswith("GPU 0 (NVIDIA H200): ")


def test_a_power_capped_gpu_is_not_a_fault_but_thermal_slowdown_is_named() -> None:
    m = h200_record()
    m["gpus"][0]["health"]["throttle_reasons"] = 0x4 | 0x1
    assert decide(m, REFS, {}, allow_cpu=False)["verdict"] == "pass"
    m["gpus"][0]["health"]["throttle_reasons"] = 0x20
    assert "software thermal slowdown" in failed(decide(m, REFS, {}, allow_cpu=False))["throttle"]["message"]


def test_persistence_off_is_a_warning() -> None:
    m = h200_record()
    m["gpus"][0]["health"]["persistence"] = False
    result = decide(m, REFS, {}, allow_cpu=False)
    assert result["verdict"] == "pass"
    assert [w["code"] for w in result["warnings"]] == ["persistence_off"]


def cpu_record(nvml: int | None = None) -> dict[str, Any]:
    return {
        "host": "laptop",
        "counts": {"torch": 0, "nvml": nvml, "lspci": None},
        "torch_error": "torch 2.13.0+cpu is a CPU-only build (install a CUDA build)",
        "versions": {"torch": "2.13.0+cpu", "torch_cuda": None},
        "gpus": [],
        "arch_list": [],
        "training": {
            "device": "cpu",
            "steps": 30,
            "loss_first": 2.30,
            "loss_last": 0.11,
            "loss_bound": 0.5,
            "samples_per_s": 900.0,
            "gpu_util_mean_pct": None,
        },
        "frameworks": {},
        "warnings": [],
        "errors": [],
    }


def test_no_gpu_without_allow_cpu_and_pass_with_it() -> None:
    no_train = cpu_record()
    no_train["training"] = None
    result = decide(no_train, REFS, {}, allow_cpu=False)
    assert result["verdict"] == "no-gpu" and not result["ok"]
    assert "pass --allow-cpu" in failed(result)["gpu_count"]["message"]
    result = decide(cpu_record(), REFS, {"torch": "2.13.0", "torch_cuda": "none"}, allow_cpu=True)
    assert result["verdict"] == "pass", failed(result)
    assert any(w["code"] == "cpu_only" for w in result["warnings"])


def test_gpus_that_torch_cannot_use_fail_even_with_allow_cpu() -> None:
    result = decide(cpu_record(nvml=8), REFS, {}, allow_cpu=True)
    assert result["verdict"] == "fail"
    assert failed(result)["gpu_count"]["message"].startswith("GPU counts disagree (nvml 8, torch 0): torch 2.13.0+cpu")


def test_counts_that_disagree_fail() -> None:
    m = h200_record()
    m["counts"]["lspci"] = 2
    assert "lspci 2" in failed(decide(m, REFS, {}, allow_cpu=False))["gpu_count"]["message"]


def test_distributed_faults_fail() -> None:
    m = h200_record()
    m["distributed"] = {
        "world_size": 8,
        "backend": "nccl",
        "error": None,
        "allreduce_ok": False,
        "allreduce_detail": "min 35.0 max 36.0, expected 36.0",
        "allreduce_busbw_gbps": 350.0,
        "ddp_loss_first": 2.3,
        "ddp_loss_last": 1.9,
        "ddp_in_sync": False,
    }
    result = failed(decide(m, REFS, {}, allow_cpu=False))
    assert set(result) == {"ddp_local_allreduce", "ddp_local_ddp"}
    m["distributed"] = {"world_size": 8, "backend": None, "error": "NCCL error: unhandled system error"}
    assert "NCCL error" in failed(decide(m, REFS, {}, allow_cpu=False))["ddp_local_allreduce"]["message"]


def test_a_framework_without_the_gpu_fails_and_a_stage_error_is_reported() -> None:
    m = h200_record()
    m["frameworks"] = {"jax": {"version": "0.7.0", "gpus": 0, "ok": True}}
    m["errors"] = [{"stage": "speed_gpu0", "message": "RuntimeError: CUDA error: an illegal memory access"}]
    result = failed(decide(m, REFS, {}, allow_cpu=False))
    assert result["jax"]["message"] == "jax: jax sees no GPU"
    assert "illegal memory access" in result["stage_speed_gpu0"]["message"]


@pytest.mark.parametrize(
    ("nvml_name", "model"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200-NVL"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", None),  # no public datasheet figures: measured and warned about, not judged
        ("Tesla T4", None),
    ],
)
def test_nvml_names_find_their_reference_model(nvml_name: str, model: str | None) -> None:
    found = find_model(nvml_name, REFS)
    assert (found["model"] if found else None) == model


def test_every_reference_has_a_source_and_the_figures_it_needs() -> None:
    assert REFS["pass_fraction"] == 0.75 and REFS["pass_fraction_source"]
    for model in REFS["models"]:
        assert model["source"].startswith("https://"), model["model"]
        assert set(model["peak"]) >= {"bf16_tflops", "tf32_tflops", "mem_gbps"}


def test_deciding_does_not_change_the_record() -> None:
    m = h200_record()
    before = copy.deepcopy(m)
    decide(m, REFS, LOCKED, allow_cpu=False)
    assert m == before


def test_the_summary_of_a_gpu_report() -> None:
    import argparse
    import time

    from provision.remote.smoke.job import build_report, summary

    report = build_report(h200_record(), REFS, LOCKED, argparse.Namespace(allow_cpu=False), time.monotonic())
    lines = summary(report).splitlines()
    assert lines[0].startswith("provision verify: gpu1: PASS (")
    assert lines[1] == (
        "  GPUs: 1 x NVIDIA H200; driver 580.95.05, torch 2.8.0+cu128, CUDA 12.8, cuDNN 9.10.2, NCCL 2.27.3"
    )
    assert lines[2].startswith("  GPU 0: gemm_bf16 742.0, gemm_tf32 380.0, copy_d2d 4100.0")
    assert lines[3] == (
        "  training: cuda bf16, 200 steps, loss 2.31 -> 0.042 (bound 0.5), 41000.0 samples/s, GPU util 97.0%"
    )
    assert report["schema"] == "provision.verify/1" and report["verdict"] == "pass"
