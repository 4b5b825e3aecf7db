"""Run the tuning job (:mod:`provision.remote.tune_job`) on a host and read its JSON answer.

The job is one self-contained file: locally it runs with an interpreter that has torch (this
one by default); on a remote host it is copied over the :class:`~provision.hosts.transport.Transport`
to a private folder (:class:`~provision.hosts.remote_job.RemoteJob`) and run with the host's venv.
Either way its stdout ends with one JSON document and its exit status
says whether it measured (0) or not (1: no GPU without ``--allow-cpu``, torch missing).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from provision.errors import OperationFailed
from provision.hosts.remote_job import RemoteJob, last_json_line
from provision.hosts.transport import Transport

JOB = Path(__file__).resolve().parents[1] / "remote" / "tune_job.py"
DEFAULT_TIMEOUT_S = 900.0


def job_args(allow_cpu: bool, scale: str | None) -> list[str]:
    args = ["--allow-cpu"] if allow_cpu else []
    return args + (["--scale", scale] if scale else [])


def parse(host: str, rc: int, stdout: str, stderr: str, python: str) -> dict[str, Any]:
    """The job's document, or the failure it reports as one line (OperationFailed, exit 1)."""
    doc = last_json_line(stdout)
    if doc is None:
        tail = " ".join(stderr.strip().splitlines()[-1:]) or f"exit status {rc}"
        raise OperationFailed(
            f"the tuning job on {host} gave no result ({tail[:300]})",
            f"check that `{python}` runs Python 3 with torch on {host}; rerun with --debug",
        )
    doc["host"] = host
    if rc == 0 and doc.get("ok"):
        return doc
    error = str(doc.get("error") or f"exit status {rc}")
    if doc.get("verdict") == "no-gpu":
        raise OperationFailed(
            f"{error} on {host}",
            "rerun with --allow-cpu to measure on the CPU, scaled down",
            details={"result": doc},
        )
    if error.startswith("cannot import"):
        raise OperationFailed(
            f"{error} with {python} on {host}",
            "install torch there (pip install 'provision-gpu[torch]' locally) or point --python at a venv that has it",
            details={"result": doc},
        )
    raise OperationFailed(f"the tuning job failed on {host}: {error}", "rerun with --debug", details={"result": doc})


def run_local(python: str | None, allow_cpu: bool, scale: str | None, timeout: float) -> dict[str, Any]:
    """Run the job here; its progress lines go straight to our stderr."""
    exe = python or sys.executable
    cmd = [exe, str(JOB), *job_args(allow_cpu, scale)]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise OperationFailed(f"no interpreter `{exe}` here", "give --python PATH of a Python with torch") from None
    except subprocess.TimeoutExpired:
        raise OperationFailed(
            f"the tuning job ran past {timeout:g}s on localhost",
            "raise --timeout, or check what else uses the GPU",
        ) from None
    return parse("localhost", proc.returncode, proc.stdout, "", exe)


def run_via(transport: Transport, python: str, allow_cpu: bool, scale: str | None, timeout: float) -> dict[str, Any]:
    """Copy the job to a private folder on the host, run it with ``python`` there, and remove it again."""
    with RemoteJob(transport, {JOB.name: JOB}, prefix="provision-tune") as job:
        res = job.run([python, job.path(JOB.name), *job_args(allow_cpu, scale)], timeout=timeout)
    return parse(transport.name, res.exit_status, res.stdout, res.stderr, python)
