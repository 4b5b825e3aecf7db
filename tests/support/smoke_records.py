"""Recorded smoke-job measurements: DESIGN.md's H200 example in the job's own record format.

Hand-built (no GPU here): 742 TFLOP/s bf16, 41000 samples/s, 97% utilization, with the versions
the lock names (LOCKED) and the job's reference figures (REFS); the verdict tests change one
thing at a time, the report and docs tests take it as it is.
"""

from __future__ import annotations

import json
from typing import Any

from provision.remote.smoke import DIR

REFS: dict[str, Any] = json.loads((DIR / "references.json").read_text())
H200_ARCH_LIST = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def h200_record() -> dict[str, Any]:
    health = {
        "ecc_uncorrected": 0,
        "retired_pages_pending": False,
        "row_remap": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
        "throttle_reasons": 0x4,
        "persistence": True,
        "temperature_c": 41,
        "temperature_slowdown_c": 87,
        "pcie": {"cur_gen": 5, "cur_width": 16, "max_gen": 5, "max_width": 16, "under_load": True},
    }
    return {
        "host": "gpu1",
        "counts": {"torch": 1, "nvml": 1, "lspci": 1},
        "versions": {
            "driver": "580.95.05",
            "cuda_driver": "13.0",
            "torch": "2.8.0+cu128",
            "torch_cuda": "12.8",
            "cudnn": "91002",
            "nccl": "2.27.3",
            "python": "3.11.7",
        },
        "arch_list": list(H200_ARCH_LIST),
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "compute_capability": "9.0",
                "memory_gib": 141,
                "kernel_ok": True,
                "health": health,
                "speed": {
                    "gemm_bf16": 742.0,
                    "gemm_tf32": 380.0,
                    "copy_d2d": 4100.0,
                    "copy_h2d": 53.0,
                    "copy_d2h": 52.0,
                },
            }
        ],
        "training": {
            "device": "cuda",
            "precision": "bf16",
            "steps": 200,
            "batch": 512,
            "loss_first": 2.31,
            "loss_last": 0.042,
            "loss_bound": 0.5,
            "samples_per_s": 41000.0,
            "gpu_util_mean_pct": 97.0,
        },
        "frameworks": {},
        "warnings": [],
        "errors": [],
    }


LOCKED = {"driver": "580.95.05", "torch": "2.8.0", "torch_cuda": "12.8", "cudnn": "9.10.2.21"}
