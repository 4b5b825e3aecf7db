"""`provision verify` on this machine (the job copied to a work folder and run, as on any host),
the lock -> expectations mapping, and bad input refused before any host runs anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.errors import BadInput
from provision.fleet.verify import expectations, load_lock, lock_group
from provision.stack.lock import Lock, parse_lock

# this machine's run lock: one such test at a time across xdist workers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("this_machine")

TORCH = __import__("torch").__version__


def provision(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", "verify", *args], capture_output=True, text=True, timeout=timeout
    )


def lock_doc(torch_version: str, variant: str = "cpu", hosts: list[str] | None = None) -> dict[str, Any]:
    """A lock in the provision.lock/2 contract (see DESIGN.md's resolve output for `stack`)."""
    return {
        "schema": "provision.lock/2",
        "knowledge": {"version": "test", "sha256": ""},
        "groups": [
            {
                "name": "all",
                "hosts": hosts or ["localhost"],
                "host": {"gpu": None, "os": "debian-12", "arch": "x86_64", "python": "3.11"},
                "stack": {
                    "driver": None,
                    "fabric_manager": None,
                    "cuda_toolkit": None,
                    "cudnn": None,
                    "frameworks": {
                        "torch": {
                            "version": torch_version,
                            "variant": variant,
                            "index_url": "https://download.pytorch.org/whl/cpu",
                            "cuda": None,
                            "cudnn": None,
                        }
                    },
                    "python": "3.11",
                },
            }
        ],
    }


GPU_GROUP = {
    "name": "gpu",
    "hosts": ["g1", "g2"],
    "host": {"gpu": "H100-SXM", "gpu_count": 8, "os": "ubuntu-22.04", "arch": "x86_64", "python": "3.12"},
    "stack": {
        "driver": {"branch": "580", "version": "580.95.05", "kernel_modules": "open"},
        "fabric_manager": {"version": "580.95.05"},
        "cuda_toolkit": None,
        "cudnn": None,
        "frameworks": {
            "torch": {"version": "2.8.0", "variant": "cu128", "cuda": "12.8", "cudnn": "9.10.2.21"},
            "jax": {"version": "0.7.2"},
        },
        "python": "3.12",
    },
}


def lock_of(*groups: dict[str, Any]) -> Lock:
    return parse_lock(json.dumps({"schema": "provision.lock/2", "knowledge": {}, "groups": list(groups)}))


def test_a_lock_group_becomes_the_jobs_flat_expectations() -> None:
    # fabric_manager is locked too, but the job cannot read it: it is left out, not "missing"
    assert expectations(lock_of(GPU_GROUP).groups[0]) == {
        "driver": "580.95.05",
        "python": "3.12",
        "torch": "2.8.0",
        "torch_cuda": "12.8",
        "cudnn": "91002",
        "jax": "0.7.2",
    }
    cpu = expectations(lock_of(*lock_doc("2.13.0+cpu")["groups"]).groups[0])
    assert cpu == {"python": "3.11", "torch": "2.13.0+cpu", "torch_cuda": "none"}


def test_hosts_find_their_group_and_an_unknown_host_is_bad_input() -> None:
    lock = lock_of(GPU_GROUP, {**GPU_GROUP, "name": "b", "hosts": ["b1"]})
    assert lock_group(lock, "g2").name == "gpu"
    assert lock_group(lock, "web", aliases=["b1"]).name == "b"
    with pytest.raises(BadInput, match="host `x9` is not in the lock"):
        lock_group(lock, "x9")
    assert lock_group(lock_of(GPU_GROUP), "anything").name == "gpu"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no lock file at"),
        ("{broken", "is not valid JSON"),
        ('{"schema": "other/1", "groups": []}', "is not a provision.lock/2 file"),
    ],
)
def test_a_bad_lock_is_bad_input(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "provision.lock"
    if content is not None:
        path.write_text(content)
    with pytest.raises(BadInput, match=message):
        load_lock(path)


@pytest.fixture(scope="module")
def local_run() -> subprocess.CompletedProcess[str]:
    return provision("--local", "--allow-cpu", "--json")


def test_verify_local_allow_cpu_passes_with_one_json_document(
    local_run: subprocess.CompletedProcess[str],
) -> None:
    assert local_run.returncode == 0, local_run.stderr
    report = json.loads(local_run.stdout)
    assert report["schema"] == "provision.verify/1" and report["host"] == "localhost"
    assert report["ok"] is True and report["verdict"] == "pass"
    assert report["training"]["device"] == "cpu"
    assert report["training"]["loss_last"] < report["training"]["loss_first"]


def test_verify_local_prints_the_table(tmp_path: Path) -> None:
    proc = provision("--allow-cpu")
    assert proc.returncode == 0, proc.stderr
    header, *rows = [line for line in proc.stdout.splitlines() if line.strip()]
    for column in ("host", "GPUs", "verdict", "GEMM TFLOP/s", "bandwidth GB/s", "samples/s", "util"):
        assert column in header
    assert rows[1].split()[0:5:2] == ["localhost", "CPU", "pass"]


def test_without_allow_cpu_this_machine_is_no_gpu_and_exit_1() -> None:
    proc = provision("--local", "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["verdict"] == "no-gpu" and report["ok"] is False


def test_drift_against_the_lock_fails_naming_both_versions(tmp_path: Path) -> None:
    lock = tmp_path / "provision.lock"
    lock.write_text(json.dumps(lock_doc("2.7.1+cpu")))
    proc = provision("--local", "--allow-cpu", "--lock", str(lock), "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    failing = [c for c in report["checks"] if not c["ok"]]
    assert [c["name"] for c in failing] == ["version_torch"]
    assert failing[0]["message"] == f"drift: torch is {TORCH} on this host, expected 2.7.1+cpu"


def test_a_matching_lock_passes(tmp_path: Path) -> None:
    lock = tmp_path / "provision.lock"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    doc = lock_doc(TORCH)
    doc["groups"][0]["stack"]["python"] = python
    lock.write_text(json.dumps(doc))
    proc = provision("--local", "--allow-cpu", "--lock", str(lock), "--json")
    assert proc.returncode == 0, proc.stdout
    assert {c["name"] for c in json.loads(proc.stdout)["checks"]} >= {
        "version_torch",
        "version_torch_cuda",
        "version_python",
    }


def one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_bad_input_is_exit_2_in_one_line_before_any_host_runs(tmp_path: Path) -> None:
    # An inventory whose host does not exist: any contact would take the connect timeout and fail
    # with exit 1, so exit 2 in one line proves nothing was contacted.
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu]\nnowhere.invalid ansible_host=192.0.2.1\n")
    broken = tmp_path / "broken.lock"
    broken.write_text("{")
    assert "is not valid JSON" in one_line_exit_2(provision("-i", str(inventory), "--lock", str(broken)))
    missing = one_line_exit_2(provision("-i", str(inventory), "--lock", str(tmp_path / "none.lock")))
    assert "no lock file at" in missing
    bad_inventory = tmp_path / "bad.yml"
    bad_inventory.write_text("all:\n  hosts: [\n")
    assert "inventory does not parse" in one_line_exit_2(provision("-i", str(bad_inventory)))
    assert "no Python in the venv" in one_line_exit_2(provision("--local", "--venv", str(tmp_path)))
    other = tmp_path / "other.lock"
    other.write_text(
        json.dumps(
            {
                "schema": "provision.lock/2",
                "knowledge": {},
                "groups": [GPU_GROUP, {**GPU_GROUP, "hosts": ["h"]}],
            }
        )
    )
    assert "host `nowhere.invalid` is not in the lock" in one_line_exit_2(
        provision("-i", str(inventory), "--lock", str(other))
    )


def test_bad_input_with_json_is_the_error_object(tmp_path: Path) -> None:
    proc = provision("--local", "--json", "--lock", str(tmp_path / "none.lock"))
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["error"]["code"] == "bad_input"
