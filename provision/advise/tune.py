"""Run the tuning job (:mod:`provision.advise.tune_job`) on a host and read its JSON answer.

The job is one self-contained file: locally it runs with an interpreter that has torch (this
one by default); on a remote host it is copied over the :class:`~provision.hosts.transport.Transport`
and run with the host's venv. Either way its stdout is one JSON document and its exit status
says whether it measured (0) or not (1: no GPU without ``--allow-cpu``, torch missing).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Protocol

from provision.errors import OperationFailed

JOB = Path(__file__).resolve().parents[1] / "remote" / "tune_job.py"
DEFAULT_TIMEOUT_S = 900.0


class _Result(Protocol):
    exit_status: int
    stdout: str
    stderr: str


class _Transport(Protocol):
    """The part of :class:`provision.hosts.transport.Transport` the job needs."""

    @property
    def name(self) -> str: ...

    def run(self, command: list[str] | str, *, timeout: float = ...) -> Any: ...

    def put(self, local: Path, remote: str, mode: int = ...) -> None: ...


def job_args(allow_cpu: bool, scale: str | None) -> list[str]:
    args = ["--allow-cpu"] if allow_cpu else []
    return args + (["--scale", scale] if scale else [])


def parse(host: str, rc: int, stdout: str, stderr: str, python: str) -> dict[str, Any]:
    """The job's document, or the failure it reports as one line (OperationFailed, exit 1)."""
    doc: dict[str, Any] | None = None
    for line in reversed(stdout.strip().splitlines()):
        try:
            doc = json.loads(line)
            break
        except ValueError:
            continue
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
            "install torch there (pip install 'provision[torch]' locally) or point --python at a venv that has it",
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


def run_via(transport: _Transport, python: str, allow_cpu: bool, scale: str | None, timeout: float) -> dict[str, Any]:
    """Copy the job to the host, run it with ``python`` there, and remove it again."""
    remote = f"/tmp/provision-tune-{uuid.uuid4().hex[:12]}.py"
    transport.put(JOB, remote, 0o644)
    try:
        res: _Result = transport.run([python, remote, *job_args(allow_cpu, scale)], timeout=timeout)
    finally:
        # leaving a temp file behind must not hide the job's own outcome
        with contextlib.suppress(Exception):
            transport.run(["rm", "-f", remote], timeout=30)
    return parse(transport.name, res.exit_status, res.stdout, res.stderr, python)
