"""The smoke job on a real NVIDIA GPU (skipped where there is none; see tests/conftest.py).

Runs the standalone job as a host would and checks that every GPU check ran and passed; the
speed and utilization targets are measured by benchmarks/gpu_check.sh, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from provision.remote.smoke import DIR


def test_the_job_passes_on_this_gpu(tmp_path: Path) -> None:
    out = tmp_path / "verify.json"
    proc = subprocess.run(
        [sys.executable, str(DIR / "job.py"), "--json-out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(out.read_text())
    failing = [c for c in report["checks"] if not c["ok"]]
    assert proc.returncode == 0 and report["verdict"] == "pass", failing
    names = {c["name"] for c in report["checks"]}
    assert {"arch", "kernel", "gemm_tf32", "copy_d2d", "copy_h2d", "copy_d2h", "training_loss"} <= names
    assert names & {"gemm_bf16", "gemm_fp16"}
    assert report["training"]["device"] == "cuda"
    assert report["counts"]["torch"] == report["counts"]["nvml"] >= 1
    assert all(peak < 8 for peak in report["memory"]["gpu_peak_gib"])
