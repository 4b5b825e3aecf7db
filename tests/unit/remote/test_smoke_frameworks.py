"""The TensorFlow/JAX stage with a real JAX (CPU wheels from the package index, installed into a
folder of their own so the other tests' venv stays as it is): the job finds it, runs a matmul in
a separate process, reports its version, and a locked version that differs is drift."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.remote.smoke import DIR

# downloads and installs jax + jaxlib from the package index (about 20 s)
pytestmark = [pytest.mark.slow, pytest.mark.network]

ONLY_FRAMEWORKS = ["--skip", "speed", "--skip", "train", "--skip", "ddp"]


@pytest.fixture(scope="module")
def jax_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("jax")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "jax", "jaxlib"],
        check=True,
        timeout=600,
    )
    return target


def run_job(jax_path: Path, tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(jax_path)}
    subprocess.run(
        [
            sys.executable,
            str(DIR / "job.py"),
            "--allow-cpu",
            "--quiet",
            "--json-out",
            str(out),
            *ONLY_FRAMEWORKS,
            *args,
        ],
        env=env,
        timeout=300,
        check=False,
    )
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_an_installed_jax_runs_a_matmul(jax_path: Path, tmp_path: Path) -> None:
    report = run_job(jax_path, tmp_path)
    jax = report["frameworks"]["jax"]
    assert jax["ok"] is True and jax["gpus"] == 0 and jax["version"]
    assert report["versions"]["jax"] == jax["version"]
    assert report["verdict"] == "pass"
    assert next(c for c in report["checks"] if c["name"] == "jax")["ok"]


def test_a_jax_that_differs_from_the_lock_is_drift(jax_path: Path, tmp_path: Path) -> None:
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"jax": "0.4.1"}))
    report = run_job(jax_path, tmp_path, "--expect", str(expect))
    failing = [c for c in report["checks"] if not c["ok"]]
    assert [c["name"] for c in failing] == ["version_jax"]
    assert failing[0]["message"].endswith("expected 0.4.1")
