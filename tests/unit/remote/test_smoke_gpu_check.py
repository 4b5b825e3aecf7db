"""benchmarks/gpu_check.sh in its CPU mode: the same steps as on a GPU machine (environment, the
standalone job, the independent reference, memory, summary) with tiny sizes, so the prepared
script is known to run before it meets a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# this machine's run lock: one such test at a time across xdist workers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("this_machine")

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


# the whole benchmark script: environment, the smoke job and the tune job in real processes
@pytest.mark.slow
def test_gpu_check_runs_every_step_in_cpu_mode(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # Run from another folder with this venv's Python: the script must find the job by itself.
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--cpu"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("verify.json", "reference.json", "memory.json", "summary.json", "env.txt", "gpu_check.log"):
        assert (out / name).is_file(), name
    report = json.loads((out / "verify.json").read_text())
    assert report["schema"] == "provision.verify/1" and report["verdict"] == "pass"
    reference = json.loads((out / "reference.json").read_text())
    assert reference["device"] == "cpu" and reference["gemm_fp32"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "pass" and summary["time_to_verdict_s"] > 0
    assert summary["gemm"]["metric"] == "gemm_fp32" and summary["gemm"]["ratio"] > 0
    assert 0 < summary["memory"]["host_peak_gib"] < 4
    # provision itself on the host (its dependencies are in this venv): probe, a plan that keeps
    # the driver (none here), up --check; the figures in each are the machine's own
    prov = out / "provision"
    probe = json.loads((prov / "probe.json").read_text())
    assert probe["ok"] and probe["hosts"][0]["facts"]["os_id"], probe
    plan = json.loads((prov / "plan.json").read_text())
    assert plan["groups"][0]["stack"]["driver"] is None, plan
    assert "torch" in plan["groups"][0]["stack"]["frameworks"]
    assert (prov / "provision.lock").is_file() and "will install" in (prov / "plan.txt").read_text()
    up_check = json.loads((prov / "up_check.json").read_text())
    assert up_check["ok"] and up_check["hosts"][0]["verdict"] == "pass", up_check
    assert not (prov / "run").exists()  # the run dirs are not carried back
    tune = json.loads((out / "tune" / "tune.json").read_text())  # issue 9's sweeps run last
    assert tune["best_batch_size"] >= 1 and tune["batch_sizes"]
    assert "every step ran" in proc.stderr


def test_gpu_check_refuses_bad_arguments(tmp_path: Path) -> None:
    for args in ([], [str(tmp_path), "--gpu"], [str(tmp_path), "--cpu", "x"]):
        proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and proc.stderr.startswith("usage: "), args
