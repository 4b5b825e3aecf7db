"""The whole smoke job, run for real on this machine's CPU (torch CPU build), as a host runs it:
a copy of the smoke folder alone, started as ``python smoke/job.py``.

NVML paths run against a stand-in ``libnvidia-ml.so.1`` (tests/fakenvml, compiled here): it
answers NVML's calls with values set by FAKE_NVML_* variables, so these tests prove that the job
reads and judges what NVML says, not that a real driver says it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.remote.smoke import DIR, FILES, SOURCES
from provision.remote.smoke.verdict import decide
from tests import fakenvml

# Only environment and version checks: enough for verdict paths that need no training.
QUICK = ["--skip", "speed", "--skip", "train", "--skip", "ddp", "--skip", "frameworks"]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke folder copied alone, as `provision verify` copies it to a host."""
    root = tmp_path_factory.mktemp("host")
    (root / "smoke").mkdir()
    for name in FILES:
        shutil.copy(SOURCES[name], root / "smoke" / name)
    return root / "smoke" / "job.py"


def run(
    job: Path, *args: str, env: dict[str, str] | None = None, python_flags: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    out = job.parent.parent / "report.json"
    out.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, *python_flags, str(job), "--json-out", str(out), *args],
        capture_output=True,
        text=True,
        cwd=job.parent.parent,
        env=env,
        timeout=300,
    )
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def cpu_run(job: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    versions = {"torch": __import__("torch").__version__.split("+")[0], "torch_cuda": "none"}
    expect = job.parent.parent / "expect.json"
    expect.write_text(json.dumps(versions))
    proc, report = run(
        job, "--allow-cpu", "--cpu-ranks", "2", "--expect", str(expect), python_flags=("-X", "importtime")
    )
    assert report is not None, proc.stderr[-2000:]
    return proc, report


@pytest.mark.slow  # the whole job, two DDP ranks in real processes
def test_the_whole_job_passes_on_the_cpu_with_allow_cpu(cpu_run: tuple[Any, dict[str, Any]]) -> None:
    proc, report = cpu_run
    log = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 0, ([c for c in report["checks"] if not c["ok"]], log[-40:])
    assert report["schema"] == "provision.verify/1" and report["verdict"] == "pass" and report["ok"] is True
    for key in ("host", "duration_s", "versions", "gpus", "checks", "training"):
        assert key in report
    training = report["training"]
    assert training["device"] == "cpu" and training["steps"] == 30
    assert training["loss_last"] < training["loss_bound"] < training["loss_first"]
    assert training["samples_per_s"] > 0
    # each point of the curve with its step, for the report's x axis
    assert len(training["loss_curve_steps"]) == len(training["loss_curve"]) == 30
    assert training["loss_curve_steps"] == list(range(1, 31)) and training["loss_curve"][0] == training["loss_first"]
    found = checks(report)
    assert found["version_torch"]["ok"] and found["version_torch_cuda"]["ok"]
    assert found["cpu_gemm_fp32"]["value"] > 0 and found["cpu_copy_d2d"]["value"] > 0
    assert report["memory"]["host_peak_gib"] < 4.0


@pytest.mark.slow  # the whole job, two DDP ranks in real processes
def test_report_html_reads_the_real_report(cpu_run: tuple[Any, dict[str, Any]]) -> None:
    """The job's own report, as `up` keeps it, in report.html: every check in the host's table,
    the loss over numbered steps."""
    import xml.etree.ElementTree as ET

    from provision.fleet.report import render_html
    from provision.model.report import UpReport

    _, report = cpu_run
    detail = {"host": "controller", "group": "cpu", "verdict": report["verdict"], "verify": report}
    page = render_html(UpReport.from_json({"ok": True, "run": "r1", "details": [detail]}))
    table = page[page.index("<h3>Checks:") : page.index("</details>")]
    assert all(f"<td>{c['name']}</td>" in table for c in report["checks"])
    loss = next(s for s in re.findall(r"<svg.*?</svg>", page, re.S) if 'aria-label="Training loss' in s)
    texts = {t.text for t in ET.fromstring(loss).iter("{http://www.w3.org/2000/svg}text")}
    assert {"training step", "loss", "0", "10", "20", "30"} <= texts, texts


@pytest.mark.slow  # the whole job, two DDP ranks in real processes
def test_ddp_runs_across_two_cpu_ranks_with_gloo(cpu_run: tuple[Any, dict[str, Any]]) -> None:
    proc, report = cpu_run
    dist = report["distributed"]
    log = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert dist["error"] is None and dist["backend"] == "gloo" and dist["world_size"] == 2, (dist, log[-40:])
    assert dist["allreduce_ok"] and dist["allreduce_detail"] == "min 3.0 max 3.0, expected 3.0"
    assert dist["ddp_in_sync"] and dist["ddp_loss_last"] < dist["ddp_loss_first"]
    assert checks(report)["ddp_local_allreduce"]["ok"] and checks(report)["ddp_local_ddp"]["ok"]


@pytest.mark.slow  # the whole job, two DDP ranks in real processes
def test_the_job_never_imports_the_rest_of_provision(cpu_run: tuple[Any, dict[str, Any]]) -> None:
    proc, _ = cpu_run
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "smoke.verdict" in imported and "torch" in imported
    assert [name for name in imported if name == "provision" or name.startswith("provision.")] == []


@pytest.mark.slow  # the whole job, two DDP ranks in real processes
def test_the_summary_is_readable(cpu_run: tuple[Any, dict[str, Any]]) -> None:
    proc, report = cpu_run
    summary = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert any(line.startswith(f"provision verify: {report['host']}: PASS") for line in summary)
    assert any(line.strip().startswith("training: cpu fp32, 30 steps, loss 2.") for line in summary)


@pytest.mark.slow  # the whole job, two DDP ranks in real processes
def test_a_recorded_report_decides_the_same_again(cpu_run: tuple[Any, dict[str, Any]]) -> None:
    """The report is a complete record: feeding it back to the verdict gives the same checks."""
    _, report = cpu_run
    refs = json.loads((DIR / "references.json").read_text())
    again = decide(report, refs, report["expected"], allow_cpu=True)
    assert again["checks"] == report["checks"] and again["verdict"] == report["verdict"]


def test_without_allow_cpu_a_host_without_gpu_is_no_gpu(job: Path) -> None:
    proc = subprocess.run([sys.executable, str(job), "--json", *QUICK], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)  # --json: the report alone on stdout
    assert report["verdict"] == "no-gpu" and report["ok"] is False and report["training"] is None
    assert "CPU-only build" in checks(report)["gpu_count"]["message"]


def test_versions_that_differ_from_the_expectations_are_drift(job: Path, tmp_path: Path) -> None:
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"torch": "2.8.0", "torch_cuda": "12.8"}))
    proc, report = run(job, "--allow-cpu", "--expect", str(expect), *QUICK)
    assert proc.returncode == 1 and report is not None and report["verdict"] == "fail"
    found = checks(report)
    torch_version = report["versions"]["torch"]
    assert found["version_torch"]["message"] == f"drift: torch is {torch_version} on this host, expected 2.8.0"
    assert found["version_torch_cuda"]["message"] == "drift: torch_cuda is not installed on this host, expected 12.8"
    assert f"FAIL version_torch: drift: torch is {torch_version}" in proc.stderr


@pytest.mark.parametrize(
    ("content", "why"),
    [("{not json", "is not JSON"), ("[1, 2]", "must hold a JSON object"), (None, "cannot read")],
)
def test_a_bad_expectations_file_is_exit_2_with_one_line(
    job: Path, tmp_path: Path, content: str | None, why: str
) -> None:
    expect = tmp_path / "expect.json"
    if content is not None:
        expect.write_text(content)
    proc, report = run(job, "--expect", str(expect))
    assert proc.returncode == 2 and report is None
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and why in lines[0]


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fakenvml.build(tmp_path_factory.mktemp("fakenvml"))


def test_nvml_health_and_versions_through_a_stand_in_driver(job: Path, fake_nvml: Path, tmp_path: Path) -> None:
    """Stand-in NVML: two H200s, the second with ECC errors, a x8 link and persistence off."""
    env = fakenvml.env(
        fake_nvml,
        gpus="NVIDIA H200:141;NVIDIA H200:141",
        driver="580.95.05",
        ecc_uncorrected="0;3",
        pcie="5x16/5x16;5x8/5x16",
        persistence="1;0",
        cc="9.0",
    )
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"driver": "580.95.05", "cuda_driver": "12.4"}))
    proc, report = run(job, "--allow-cpu", "--expect", str(expect), *QUICK, env=env)
    assert report is not None, proc.stderr
    assert report["counts"]["nvml"] == 2 and report["counts"]["torch"] == 0
    assert report["versions"]["driver"] == "580.95.05"
    assert [g["name"] for g in report["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert [g["memory_gib"] for g in report["gpus"]] == [141, 141]
    assert report["gpus"][1]["health"]["ecc_uncorrected"] == 3
    failing = {(c["name"], c.get("gpu")) for c in report["checks"] if not c["ok"]}
    # torch (a CPU build) cannot use the two GPUs NVML sees: a failure even with --allow-cpu
    assert failing == {("gpu_count", None), ("ecc", 1), ("pcie_link", 1)}
    assert checks(report)["version_driver"]["ok"] and checks(report)["version_cuda_driver"]["ok"]
    assert [w["code"] for w in report["warnings"]].count("persistence_off") == 1


def test_a_driver_that_drifted_is_named_from_nvml(job: Path, fake_nvml: Path, tmp_path: Path) -> None:
    """Stand-in NVML reporting driver 550.127.05 where 580.95.05 is expected."""
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"driver": "580.95.05"}))
    env = fakenvml.env(fake_nvml, gpus="NVIDIA L4:22")
    _, report = run(job, "--allow-cpu", "--expect", str(expect), *QUICK, env=env)
    assert report is not None
    assert checks(report)["version_driver"]["message"] == "drift: driver is 550.127.05 on this host, expected 580.95.05"


def test_an_nvml_that_does_not_start_leaves_the_job_running(job: Path, fake_nvml: Path) -> None:
    """Stand-in NVML whose init fails with 'Driver Not Loaded'."""
    proc, report = run(job, "--allow-cpu", *QUICK, env=fakenvml.env(fake_nvml, fail="1", gpus="NVIDIA H200:141"))
    assert proc.returncode == 0 and report is not None
    assert report["counts"]["nvml"] is None and report["gpus"] == []


SAMPLER = """
import json, time
from provision.remote.smoke.nvml import Nvml, Sampler
nvml = Nvml.open()
with Sampler(nvml, [0, 1], period=0.1) as s:
    time.sleep(0.45)
health = nvml.health(1)
s.merge_into(1, health)
print(json.dumps({"n": len(s.util[0]), "mean0": s.mean_util(0), "reasons": s.reasons, "health": health}))
"""


def test_the_sampler_reads_utilization_throttling_and_the_link_every_100_ms(fake_nvml: Path) -> None:
    """Stand-in NVML: utilization 55%, GPU 1 in hardware thermal slowdown on a gen4 x16 link."""
    env = fakenvml.env(
        fake_nvml,
        gpus="NVIDIA H200:141;NVIDIA H200:141",
        util="55",
        throttle="0x4;0x44",
        pcie="5x16/5x16;4x16/5x16",
    )
    proc = subprocess.run([sys.executable, "-c", SAMPLER], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert 3 <= got["n"] <= 6 and got["mean0"] == 55
    assert got["reasons"] == {"0": 0x4, "1": 0x44}
    assert got["health"]["pcie"] == {
        "cur_gen": 4,
        "cur_width": 16,
        "max_gen": 5,
        "max_width": 16,
        "under_load": True,
    }
    assert got["health"]["throttle_reasons"] == 0x44


def test_the_copied_files_are_the_whole_job() -> None:
    """verify copies FILES to hosts: a module added to the folder but not to FILES would be missing there."""
    present = {p.name for p in DIR.iterdir() if p.suffix in (".py", ".json")}
    # the version rule is the one file that comes from elsewhere (provision/model/versions.py)
    assert present == {name for name, source in SOURCES.items() if source.parent == DIR}
    assert set(SOURCES) == set(FILES) and all(source.is_file() for source in SOURCES.values())


# Loaded by every Python process of the job (the job and its spawned ranks) through PYTHONPATH:
# at the start of interpreter teardown (atexit) it records the names of the process's threads.
# torch names gloo's threads (pt_gloo_runloop: the ProcessGroup's workers; gloo_tcp_loop: the
# transport's event loop; pt_tcpstore_uv: the TCPStore server in rank 0). One of them alive then
# runs on while the interpreter and the C++ runtime tear themselves down: the race that aborted
# a rank now and then. Before the fix every rank recorded all of them, deterministically.
TEARDOWN_PROBE = """
import atexit, json, os

def _record():
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    with open(os.environ["TEARDOWN_PROBE_OUT"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "threads": sorted(names)}) + "\\n")

atexit.register(_record)
"""
DIST_THREADS = ("gloo", "pt_gloo", "pt_tcpstore")


@pytest.mark.slow  # the whole job, two DDP ranks in real processes
def test_no_rank_reaches_interpreter_teardown_with_gloo_threads_running(job: Path, tmp_path: Path) -> None:
    """The teardown order, checked deterministically: every rank leaves after the barrier and
    destroy_process_group() without running exit-time teardown next to gloo's live threads."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(TEARDOWN_PROBE)
    records = tmp_path / "teardown.jsonl"
    env = {**os.environ, "PYTHONPATH": str(probe), "TEARDOWN_PROBE_OUT": str(records)}
    only_ddp = ["--skip", "speed", "--skip", "train", "--skip", "frameworks"]
    proc, report = run(job, "--allow-cpu", "--cpu-ranks", "2", *only_ddp, env=env)
    assert report is not None, proc.stderr[-2000:]
    dist = report["distributed"]
    assert dist["error"] is None and dist["ddp_in_sync"], (dist, proc.stderr[-2000:])
    seen = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    assert seen, "the probe never ran: not even the job itself recorded its teardown"
    assert [r for r in seen if any(t.startswith(DIST_THREADS) for t in r["threads"])] == [], seen
