"""`provision tune` end to end on the CPU (the `test` scale: seconds), the job's own rules
(sweet spot, worker counts, low-utilization flags), its stand-alone-ness, and bad input.

The end-to-end runs are real: the CLI starts the real job in a subprocess with this venv's CPU
torch, which decodes and augments real samples in real DataLoader workers and trains the real
network. Only the GPU-specific numbers (memory, NVML utilization) are absent on this machine:
they are null, and the low-utilization flags fall back on the measured share of time the step
waited for data.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.advise import tune as t
from provision.errors import OperationFailed
from provision.remote import tune_job as job

# this machine's run lock: one such test at a time across xdist workers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("this_machine")

REPO = Path(__file__).resolve().parents[3]


def provision(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def check_document(doc: dict[str, Any]) -> None:
    """What the issue's JSON promises, and that the numbers obey the job's own rules."""
    assert doc["schema"] == "provision.tune/1"
    assert doc["ok"] is True
    assert doc["device"] == "cpu"
    rows = doc["batch_sizes"]
    assert [r["batch_size"] for r in rows] == [2, 4, 8][: len(rows)]
    for r in rows:
        assert set(r) == {"batch_size", "samples_per_s", "memory_gib", "gpu_util_pct"}
        assert r["samples_per_s"] > 0
        assert r["memory_gib"] is None and r["gpu_util_pct"] is None  # no GPU here: not invented
    best = max(r["samples_per_s"] for r in rows)
    spot = min(r["batch_size"] for r in rows if r["samples_per_s"] >= 0.95 * best)
    assert doc["best_batch_size"] == spot
    assert doc["batch_sweep_stopped"] in {"max_batch", "time_budget"}
    counts = [w["workers"] for w in doc["workers"]]
    assert counts == job.worker_counts(len(os.sched_getaffinity(0)))
    assert all(w["pin_memory"] is False for w in doc["workers"])  # nothing to pin for on a CPU
    assert all(0 <= w["data_wait_pct"] <= 100 and w["samples_per_s"] > 0 for w in doc["workers"])
    assert doc["best_workers"]["workers"] in counts
    amp = doc["amp"]
    assert amp["dtype"] == "bfloat16"
    assert amp["speedup"] == pytest.approx(amp["amp_samples_per_s"] / amp["fp32_samples_per_s"], rel=1e-2)
    gc = doc["grouped_conv"]
    assert gc["grouped_params"] < gc["standard_params"]  # same width, 1/groups of the 3x3 weights
    topics = {r["topic"] for r in doc["recommendations"]}
    assert {"batch_size", "dataloader", "mixed_precision", "channels_last", "grouped_conv"} <= topics
    for f in doc["flags"]:  # every flag is a run under 70% busy, with a cause
        assert f["busy_pct"] < 70 and f["likely_cause"]


def test_tune_local_on_cpu_end_to_end(tmp_path: Path) -> None:
    png = tmp_path / "tune.png"
    res = provision("tune", "--local", "--allow-cpu", "--scale", "test", "--json", "--plot", str(png))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)  # one JSON document and nothing else on stdout
    check_document(doc)
    assert doc["host"] == "localhost"
    assert doc["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tune: batch 2:" in res.stderr  # progress goes to stderr


def test_tune_without_gpu_and_without_allow_cpu_fails_with_the_fix() -> None:
    res = provision("tune", "--scale", "test", "--json", timeout=120)
    assert res.returncode == 1
    err = json.loads(res.stdout)["error"]
    assert err["code"] == "failed"
    assert "no usable GPU" in err["message"]
    assert "--allow-cpu" in err["hint"]
    assert err["result"]["verdict"] == "no-gpu"
    assert res.stderr.strip().splitlines()[-1].startswith("error: no usable GPU")


def test_tune_over_an_inventory_runs_the_copied_job(tmp_path: Path) -> None:
    """The -i path with a real inventory whose host is reached with ansible_connection=local:
    the job file is copied to /tmp, run with the given interpreter and removed again."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\nbox ansible_connection=local\n")
    before = set(Path("/tmp").glob("provision-tune-*.py"))
    res = provision("tune", "-i", str(inv), "--allow-cpu", "--scale", "test", "--python", sys.executable, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    check_document(doc)
    assert doc["host"] == "box"
    assert set(Path("/tmp").glob("provision-tune-*.py")) == before


def test_tune_fleet_reports_each_host_and_fails_for_the_unreachable_one(tmp_path: Path) -> None:
    """Two inventory hosts: one local, one whose SSH port refuses (127.0.0.1:1). The fleet
    document has both, the good one measured and plotted, the other with its error; exit 1."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  hosts:\n    box: {ansible_connection: local}\n    gone: {ansible_host: 127.0.0.1, ansible_port: 1}\n"
    )
    png = tmp_path / "tune.png"
    res = provision(
        "tune",
        "-i",
        str(inv),
        "--allow-cpu",
        "--scale",
        "test",
        "--python",
        sys.executable,
        "--plot",
        str(png),
        "--json",
    )
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is False
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert set(hosts) == {"box", "gone"}
    check_document(hosts["box"])
    assert hosts["box"]["plot"] == str(tmp_path / "tune-box.png")
    assert (tmp_path / "tune-box.png").read_bytes()[:4] == b"\x89PNG"
    assert hosts["gone"]["ok"] is False
    assert hosts["gone"]["error"]["code"] == "unreachable"


def test_job_imports_only_stdlib_torch_and_nvml() -> None:
    tree = ast.parse(Path(job.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports: the file runs alone on the host"
            names.add((node.module or "").split(".")[0])
    third_party = {n for n in names if n not in sys.stdlib_module_names}
    assert third_party <= {"torch", "pynvml"}, third_party
    assert "provision" not in names


def test_sweet_spot_is_the_smallest_within_five_percent() -> None:
    rows = [{"batch_size": b, "samples_per_s": s} for b, s in ((16, 500), (32, 940), (64, 990), (128, 1000))]
    assert job.sweet_spot(rows)["batch_size"] == 64  # 940 is under 95% of 1000, 990 is not
    rows[1]["samples_per_s"] = 950.0  # exactly 95% of the best counts as within
    assert job.sweet_spot(rows)["batch_size"] == 32


def test_worker_counts() -> None:
    assert job.worker_counts(1) == [0, 1]
    assert job.worker_counts(2) == [0, 1, 2]
    assert job.worker_counts(16) == [0, 1, 2, 4, 8, 16]
    assert job.worker_counts(12) == [0, 1, 2, 4, 8, 12]


def gpu_doc() -> dict[str, Any]:
    """A result shaped like an H200 run: NVML utilization per run."""
    return {
        "batch_sizes": [
            {"batch_size": 16, "samples_per_s": 900.0, "memory_gib": 1.0, "gpu_util_pct": 41.0},
            {"batch_size": 256, "samples_per_s": 5000.0, "memory_gib": 9.0, "gpu_util_pct": 97.0},
        ],
        "best_batch_size": 256,
        "batch_sweep_stopped": "out_of_memory",
        "workers": [
            {
                "workers": 0,
                "pin_memory": False,
                "samples_per_s": 400.0,
                "data_wait_pct": 92.0,
                "gpu_util_pct": 8.0,
            },
            {
                "workers": 16,
                "pin_memory": True,
                "samples_per_s": 4800.0,
                "data_wait_pct": 4.0,
                "gpu_util_pct": 93.0,
            },
        ],
        "best_workers": {"workers": 16, "pin_memory": True, "samples_per_s": 4800.0, "data_wait_pct": 4.0},
        "amp": {"dtype": "bfloat16", "speedup": 2.4},
        "channels_last": {"speedup": 1.3},
        "grouped_conv": {"groups": 32, "params_ratio": 0.41, "speedup": 0.8},
    }


def test_low_gpu_utilization_is_flagged_with_its_cause() -> None:
    flags, advice = job.flags_and_advice(gpu_doc(), on_gpu=True)
    where = {f["where"]: f for f in flags}
    assert set(where) == {"batch_size=16", "workers=0 pin_memory=false"}
    assert "batch too small" in where["batch_size=16"]["likely_cause"]
    assert "input pipeline" in where["workers=0 pin_memory=false"]["likely_cause"]
    text = " ".join(a["advice"] for a in advice)
    assert "use batch size 256" in text
    assert "num_workers=16, pin_memory=True" in text and "12.0x" in text
    assert "autocast(bfloat16): 2.4x fp32" in text
    assert "channels_last: 1.3x contiguous -- use it" in text
    assert "fewer FLOPs do not always mean faster kernels" in text


def test_parse_reports_a_job_that_printed_nothing() -> None:
    with pytest.raises(OperationFailed) as err:
        t.parse("th1", 1, "", "ModuleNotFoundError: No module named 'torch'", "/usr/bin/python3")
    assert "th1" in err.value.message and "No module named 'torch'" in err.value.message
    assert "/usr/bin/python3" in err.value.hint


def test_parse_reports_missing_torch() -> None:
    out = json.dumps({"ok": False, "verdict": "fail", "error": "cannot import torch"})
    with pytest.raises(OperationFailed) as err:
        t.parse("th1", 1, out, "", "/opt/provision/venv/bin/python")
    assert err.value.message == "cannot import torch with /opt/provision/venv/bin/python on th1"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--local", "-i", "hosts.ini"], "give --local or -i INVENTORY, not both"),
        (["--timeout", "0"], "--timeout 0 is not positive"),
        (["-i", "/nonexistent/hosts.ini"], "/nonexistent/hosts.ini"),
        (["--plot", "out.svg"], "not a .png file name"),
    ],
)
def test_bad_input(args: list[str], needle: str) -> None:
    res = provision("tune", *args, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1
    assert needle in res.stderr


def test_util_sampler_averages_nvml_samples() -> None:
    """A stand-in NVML module (no GPU here) answering 40 then 80: the sampler's thread polls it
    between start() and stop() and reports the mean; a failing read loses that sample only."""
    import threading
    import time as _time

    class Rates:
        def __init__(self, gpu: int) -> None:
            self.gpu = gpu

    class StandInNvml:
        def __init__(self) -> None:
            self.calls = 0
            self.lock = threading.Lock()

        def nvmlDeviceGetUtilizationRates(self, handle: object) -> Rates:
            with self.lock:
                self.calls += 1
                n = self.calls
            if n == 2:
                raise RuntimeError("NVML_ERROR_UNKNOWN")
            return Rates(40 if n % 2 else 80)

    nvml = StandInNvml()
    sampler = job.UtilSampler(handle=object(), nvml=nvml)
    sampler.start()
    _time.sleep(0.4)
    mean = sampler.stop()
    assert nvml.calls >= 4
    assert mean is not None and 40 <= mean <= 80
    assert job.UtilSampler(object(), nvml).stop() is None  # never started: nothing measured


def test_batch_sweep_stops_at_the_first_size_that_does_not_fit() -> None:
    """The real sweep over a Bench whose compute raises CUDA's out-of-memory error from batch 64
    on (a stand-in: no GPU here): the sizes that fit are kept, the sweep says why it stopped."""
    import torch

    class OomAt16(job.Bench):
        def compute(self, batch: int, v: job.Variant) -> dict[str, Any]:
            if batch >= 64:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return {
                "batch_size": batch,
                "samples_per_s": 100.0 * batch,
                "memory_gib": batch / 8,
                "gpu_util_pct": 90.0,
            }

    scale = job.SCALES["gpu"]
    rows, stopped = job.batch_sweep(OomAt16(torch, torch.device("cpu"), scale, None), budget_s=60)
    assert scale.batch_min == 16
    assert [r["batch_size"] for r in rows] == [16, 32]
    assert stopped == "out_of_memory"

    class Never(job.Bench):
        def compute(self, batch: int, v: job.Variant) -> dict[str, Any]:
            raise RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR")

    with pytest.raises(RuntimeError, match="CUDNN_STATUS_INTERNAL_ERROR"):  # other errors are not hidden
        job.batch_sweep(Never(torch, torch.device("cpu"), scale, None), budget_s=60)
