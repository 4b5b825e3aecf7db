"""`provision verify` as functions: read the lock, copy the smoke job to each host, run it, collect reports.

Everything a user can get wrong (the lock, the inventory, the venv) is checked before any host
runs the job. Hosts then run in parallel and each answers on its own: an unreachable host or a
failing job is that host's ``fail``, never the end of the others.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import BadInput, OperationFailed, ProvisionError, Unreachable
from provision.files import read_lock
from provision.hosts.inventory import HostTarget
from provision.hosts.remote_job import Content, RemoteJob
from provision.hosts.runlock import HostBusy, RunLocks
from provision.hosts.ssh import connect
from provision.hosts.transport import CommandResult, Transport
from provision.ids import new_run_id
from provision.model.components import JOB_CHECKS
from provision.model.defaults import DEFAULT_VENV
from provision.model.lock import Lock, LockGroup, find_group
from provision.remote.smoke import SOURCES as SMOKE_SOURCES
from provision.stack.drift import expected_versions

SCHEMA = "provision.verify/1"
# Where `provision up` puts the frameworks (config `install.venv`); used when it exists.
# The job itself stops its stages well before this; the margin covers torch's import on a cold disk.
DEFAULT_TIMEOUT_S = 900.0

Connect = Callable[[HostTarget], Transport]


# --- the lock --------------------------------------------------------------------------------

# The locked versions the smoke job reads on a host, under the names provision.stack.drift.expected_versions uses.
JOB_KEYS = JOB_CHECKS


def load_lock(path: str | Path) -> Lock:
    """The lockfile (provision.lock's reader: BadInput when missing, unreadable or malformed)."""
    return read_lock(path)


def lock_group(lock: Lock, host: str, aliases: Sequence[str] = ()) -> LockGroup:
    """The lock group that names ``host`` (or one of its aliases); a single group serves every host."""
    for name in (host, *aliases):
        group = find_group(lock, name)
        if group is not None:
            return group
    if len(lock.groups) == 1:
        return lock.groups[0]
    return lock.group_for(host)  # raises BadInput naming the locked hosts


def expectations(group: LockGroup) -> dict[str, str]:
    """A lock group as the smoke job's flat expectations (what the job cannot read is left out)."""
    expect: dict[str, str] = {}
    for key, value in expected_versions(group).items():
        if key not in JOB_KEYS:
            continue
        if value is not None:
            expect[key] = str(value)
        elif key == "torch_cuda":
            expect[key] = "none"  # a CPU torch build: the host must have no CUDA runtime in torch
    return expect


# --- per-host results ------------------------------------------------------------------------


@dataclass
class HostResult:
    """One host's answer: the job's report, or why there is none."""

    host: str
    report: dict[str, Any] | None = None
    error: ProvisionError | None = None
    duration_s: float = 0.0
    python: str | None = None
    stderr_tail: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report is not None and bool(self.report.get("ok"))

    @property
    def verdict(self) -> str:
        return str(self.report["verdict"]) if self.report is not None else "fail"

    def to_json(self) -> dict[str, Any]:
        if self.report is not None:
            return self.report
        assert self.error is not None
        return {
            "schema": SCHEMA,
            "host": self.host,
            "ok": False,
            "verdict": "fail",
            "duration_s": round(self.duration_s, 2),
            "error": self.error.to_json()["error"],
            "checks": [],
            "gpus": [],
            "versions": {},
            "training": None,
        }


# --- running the job -------------------------------------------------------------------------


def local_python(venv: str | None) -> str:
    """The Python that runs the job here: ``venv``'s (which must exist), the default venv, or this one."""
    if venv is not None:
        python = Path(venv) / "bin" / "python"
        if not python.is_file():
            raise BadInput(
                f"no Python in the venv {venv} (looked for {python})",
                f"give the venv that holds the frameworks, e.g. --venv {DEFAULT_VENV}",
            )
        return str(python)
    default = Path(DEFAULT_VENV) / "bin" / "python"
    return str(default) if default.is_file() else sys.executable


def remote_python(transport: Transport, venv: str | None) -> str | None:
    """The job's Python on a host: ``venv``'s, the default venv's, or python3; None when ``venv`` has none."""
    candidates = [f"{venv}/bin/python"] if venv is not None else [f"{DEFAULT_VENV}/bin/python", "python3"]
    for python in candidates:
        probe = transport.run(f"command -v {shlex.quote(python)}", timeout=30)
        if probe.ok and probe.stdout.strip():
            return probe.stdout.strip().splitlines()[0]
    return None


def job_command(python: str, workdir: str, host: str, allow_cpu: bool, extra: Sequence[str] = ()) -> list[str]:
    command = [
        python,
        f"{workdir}/smoke/job.py",
        "--json-out",
        f"{workdir}/report.json",
        "--expect",
        f"{workdir}/expect.json",
        "--host",
        host,
        "--quiet",
        *extra,
    ]
    if allow_cpu:
        command.append("--allow-cpu")
    return command


def smoke_job(transport: Transport, expect: dict[str, str]) -> RemoteJob:
    """The smoke job and the expectations, for a fresh folder on the host (``with`` copies them)."""
    files: dict[str, Content] = {f"smoke/{name}": source for name, source in SMOKE_SOURCES.items()}
    files["expect.json"] = json.dumps(expect).encode()
    return RemoteJob(transport, files, prefix="provision-verify")


def run_job(
    transport: Transport,
    python: str,
    expect: dict[str, str],
    allow_cpu: bool,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> HostResult:
    """Copy, run and collect the job on one host (the transport stays open)."""
    started = time.monotonic()
    result = HostResult(host=transport.name, python=python)
    try:
        with smoke_job(transport, expect) as job:
            command = job_command(python, job.workdir, transport.name, allow_cpu)
            ran = job.run(command, timeout=timeout, env={"PYTHONUNBUFFERED": "1"})
            result.stderr_tail = ran.stderr.strip().splitlines()[-5:]
            try:
                report, torn = job.document("report.json"), False
            except ValueError:
                report, torn = None, True
            if ran.exit_status not in (0, 1) or (report is None and not torn):
                why = result.stderr_tail[-1] if result.stderr_tail else f"exit status {ran.exit_status}"
                raise OperationFailed(
                    f"the smoke job did not finish on {transport.name}: {why}",
                    f"run `{python} smoke/job.py` there by hand to see the whole output",
                )
            if torn:
                raise OperationFailed(
                    f"the smoke job on {transport.name} wrote a report that is not JSON",
                    "report this as a bug with the file's content",
                )
            result.report = report
    finally:
        result.duration_s = time.monotonic() - started
    return result


@dataclass(frozen=True)
class Plan:
    """What verify will do on one host, settled before any host runs anything."""

    target: HostTarget
    expect: dict[str, str]


def plan_hosts(targets: Sequence[HostTarget], lock: Lock | None) -> list[Plan]:
    plans = []
    for target in targets:
        expect: dict[str, str] = {}
        if lock is not None:
            aliases = [target.address] + ([socket.gethostname(), "localhost"] if target.local else [])
            expect = expectations(lock_group(lock, target.name, aliases))
        plans.append(Plan(target, expect))
    return plans


def verify_hosts(
    plans: Sequence[Plan],
    connect: Connect,
    *,
    venv: str | None,
    allow_cpu: bool,
    parallel: int = 16,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[HostResult]:
    """Run the job on every planned host in parallel; results in the order of ``plans``.

    Connections are opened and each host's Python is found first; a venv that holds no Python
    on any host is BadInput before the job runs anywhere.
    """
    local_py = local_python(venv) if any(p.target.local for p in plans) else None

    def prepare(plan: Plan) -> tuple[Transport | None, str | None, HostResult | None]:
        try:
            transport = connect(plan.target)
        except ProvisionError as exc:
            return None, None, HostResult(host=plan.target.name, error=exc)
        try:
            python = local_py if plan.target.local else remote_python(transport, venv)
        except ProvisionError as exc:
            transport.close()
            return None, None, HostResult(host=plan.target.name, error=exc)
        return transport, python, None

    workers = max(1, min(parallel, len(plans)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        prepared = list(pool.map(prepare, plans))
    missing = [
        plan.target.name for plan, (t, py, _) in zip(plans, prepared, strict=True) if t is not None and py is None
    ]
    if missing:
        for transport, _, _ in prepared:
            if transport is not None:
                transport.close()
        where = f"{venv}/bin/python" if venv else f"{DEFAULT_VENV}/bin/python or python3"
        raise BadInput(
            f"no Python at {where} on {', '.join(missing)}",
            "give the venv that holds the frameworks with --venv, or run `provision up` first",
        )

    def run_one(item: tuple[Plan, tuple[Transport | None, str | None, HostResult | None]]) -> HostResult:
        plan, (transport, python, early) = item
        if early is not None:
            return early
        assert transport is not None and python is not None
        try:
            return run_job(transport, python, plan.expect, allow_cpu, timeout)
        except ProvisionError as exc:
            return HostResult(host=plan.target.name, error=exc, python=python)
        finally:
            transport.close()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run_one, zip(plans, prepared, strict=True)))


MULTIHOST_PORT = 29400


def _interface_towards(transport: Transport, address: str) -> str | None:
    """The network interface a host uses to reach ``address`` (for GLOO/NCCL_SOCKET_IFNAME)."""
    route = transport.run(["ip", "-o", "route", "get", address], timeout=30)
    words = route.stdout.split()
    if route.ok and "dev" in words and words.index("dev") + 1 < len(words):
        dev = words[words.index("dev") + 1]
        return None if dev == "lo" else dev
    return None


def run_multihost(
    plans: Sequence[Plan],
    connect: Connect,
    *,
    venv: str | None,
    allow_cpu: bool,
    port: int = MULTIHOST_PORT,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> HostResult:
    """The all-reduce and DDP check across every host at once: torchrun on each, c10d rendezvous
    at the first host, one rank per GPU (one CPU rank with gloo on a host without GPUs).

    Returns one result labelled ``multi-host`` holding rank 0's report.
    """
    if len(plans) < 2:
        raise BadInput("--multi-host needs at least two hosts", "give an inventory with two or more hosts")
    started = time.monotonic()
    transports: list[Transport] = []
    stack = contextlib.ExitStack()  # the job folders, removed before the connections close
    try:
        for plan in plans:
            transports.append(connect(plan.target))
        pythons = [
            remote_python(t, venv) if not p.target.local else local_python(venv)
            for t, p in zip(transports, plans, strict=True)
        ]
        missing = [p.target.name for p, py in zip(plans, pythons, strict=True) if py is None]
        if missing:
            raise BadInput(
                f"no Python for the job on {', '.join(missing)}",
                "give the venv that holds the frameworks with --venv",
            )
        endpoint = plans[0].target.address
        peers = [plans[1].target.address] + [endpoint] * (len(plans) - 1)
        jobs = [stack.enter_context(smoke_job(t, p.expect)) for t, p in zip(transports, plans, strict=True)]

        def launch(i: int) -> CommandResult:
            transport, job, python = transports[i], jobs[i], pythons[i]
            assert python is not None
            gpus = transport.run("nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true", timeout=60).stdout.strip()
            nproc = int(gpus) if gpus.isdigit() and int(gpus) > 0 else 1
            env = {"PYTHONUNBUFFERED": "1"}
            dev = _interface_towards(transport, peers[i])
            if dev:
                env |= {"GLOO_SOCKET_IFNAME": dev, "NCCL_SOCKET_IFNAME": dev}
            command = [
                python,
                "-m",
                "torch.distributed.run",
                f"--nnodes={len(plans)}",
                f"--nproc-per-node={nproc}",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}:{port}",
                # the address others reach this host at (its hostname may not resolve elsewhere)
                f"--local-addr={plans[i].target.address}",
                "--rdzv-id=provision-verify",
                "--rdzv-conf=join_timeout=120",
                "--max-restarts=0",
                *job_command(python, job.workdir, "multi-host", allow_cpu, ["--multi-host"])[1:],
            ]
            return job.run(command, timeout=timeout, env=env)

        with ThreadPoolExecutor(max_workers=len(plans)) as pool:
            ran = list(pool.map(launch, range(len(plans))))
        result = HostResult(host="multi-host")
        for job in jobs:
            with contextlib.suppress(ValueError):  # an empty or torn report: that rank has none
                report = job.document("report.json")
                if report is not None:
                    result.report = report
            job.close()
        if result.report is None:
            tails = [r.stderr.strip().splitlines()[-1] for r in ran if r.stderr.strip()]
            result.error = OperationFailed(
                f"the multi-host job gave no report: {tails[0] if tails else 'no output'}",
                f"check that the hosts reach {endpoint}:{port} and each other",
            )
        result.duration_s = time.monotonic() - started
        return result
    finally:
        stack.close()
        for transport in transports:
            transport.close()


def fleet_json(results: Sequence[HostResult], multihost: HostResult | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"ok": all(r.ok for r in results), "hosts": [r.to_json() for r in results]}
    if multihost is not None:
        doc["ok"] = doc["ok"] and multihost.ok
        doc["multihost"] = multihost.to_json()
    return doc


# --- the whole command as one call ------------------------------------------------------------


@dataclass
class Outcome:
    """Every host's result, and the cross-host result when --multi-host asked for it."""

    hosts: list[HostResult]
    multihost: HostResult | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.hosts) and (self.multihost is None or self.multihost.ok)

    @property
    def all_results(self) -> list[HostResult]:
        return self.hosts + ([self.multihost] if self.multihost is not None else [])


def default_connect(
    *, accept_new_host_keys: bool = False, ssh_config: Path | None = None, connect_timeout: float = 10.0
) -> Connect:
    def open_transport(target: HostTarget) -> Transport:
        return connect(
            target,
            accept_new_host_keys=accept_new_host_keys,
            ssh_config=ssh_config,
            connect_timeout=connect_timeout,
        )

    return open_transport


def verify(
    targets: Sequence[HostTarget],
    *,
    lock: Lock | None = None,
    venv: str | None = None,
    allow_cpu: bool = False,
    multi_host: bool = False,
    connect: Connect | None = None,
    parallel: int = 16,
    timeout: float = DEFAULT_TIMEOUT_S,
    host_lock: bool = False,
) -> Outcome:
    """Verify ``targets`` (what `provision verify` and `provision up` run).

    Raises BadInput (a host the lock does not cover, a venv without Python, --multi-host with
    one host) before any host runs the job; host failures are in the returned results.
    ``host_lock`` (`provision verify`; `up` holds its own): each host's run lock is held while its
    job runs (provision/hosts/runlock.py); a host another run holds fails naming that run.
    """
    plans = plan_hosts(targets, lock)
    if venv is not None and any(t.local for t in targets):
        local_python(venv)
    if multi_host and len(plans) < 2:
        raise BadInput("--multi-host needs at least two hosts", "give an inventory with two or more hosts")
    connect = connect or default_connect()
    busy: dict[str, ProvisionError] = {}
    locks = _hold_locks([p.target for p in plans], connect) if host_lock else None
    try:
        if locks is not None:
            busy = locks[1]
        free = [p for p in plans if p.target.name not in busy]
        results = verify_hosts(free, connect, venv=venv, allow_cpu=allow_cpu, parallel=parallel, timeout=timeout)
        multihost = None
        if multi_host and not busy:
            multihost = run_multihost(plans, connect, venv=venv, allow_cpu=allow_cpu, timeout=timeout)
    finally:
        if locks is not None:
            locks[0].release()
    return Outcome([*results, *(HostResult(name, error=exc) for name, exc in busy.items())], multihost)


def _hold_locks(targets: Sequence[HostTarget], connect: Connect) -> tuple[Any, dict[str, ProvisionError]]:
    """Take each host's run lock; the locks, and the hosts another run holds (a host whose lock
    cannot be taken for another reason, no sudo on it, is verified all the same, with a warning:
    the job changes nothing there)."""

    locks = RunLocks(new_run_id(), connect)
    busy: dict[str, ProvisionError] = {}
    for name, exc in locks.take(targets).items():
        if isinstance(exc, HostBusy):
            busy[name] = exc
        elif not isinstance(exc, Unreachable):  # an unreachable host fails in its job, saying so
            sys.stderr.write(f"warning: verifying without the host lock: {exc.reason()}\n")
    return locks, busy


# --- the table -------------------------------------------------------------------------------


def _figure(report: dict[str, Any], names: Sequence[str]) -> float | None:
    """The lowest value of the named checks across GPUs (the slowest GPU is the host's figure)."""
    values = [
        float(c["value"])
        for c in report.get("checks", [])
        if c.get("name") in names and isinstance(c.get("value"), int | float)
    ]
    return min(values) if values else None


@dataclass(frozen=True)
class KeyFigures:
    """A verify's key figures: the slowest GPU's half-precision GEMM and device-to-device copy; on a
    host without a GPU, the CPU's fp32 GEMM and memory copy (``gpu`` is then ``CPU``)."""

    on_gpu: bool
    gpu: str | None  # the (first) GPU's model
    gemm_tflops: float | None
    copy_gbps: float | None


def key_figures(result: HostResult) -> KeyFigures:
    report = result.report or {}
    on_gpu = int((report.get("counts") or {}).get("torch") or 0) > 0
    names = [str(g["name"]) for g in report.get("gpus", []) if g.get("name")]
    return KeyFigures(
        on_gpu,
        (names[0] if names else None) if on_gpu else "CPU",
        _figure(report, ("gemm_bf16", "gemm_fp16")) if on_gpu else _figure(report, ("cpu_gemm_fp32",)),
        _figure(report, ("copy_d2d",)) if on_gpu else _figure(report, ("cpu_copy_d2d",)),
    )


def table_row(result: HostResult) -> dict[str, str]:
    """One row of the human table: host, GPUs, verdict, GEMM, bandwidth, samples/s, util."""

    def show(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    report = result.report
    if report is None:
        return {
            "host": result.host,
            "gpus": "-",
            "verdict": "fail",
            "gemm": "-",
            "bandwidth": "-",
            "samples": "-",
            "util": "-",
        }
    names = [g.get("name") for g in report.get("gpus", [])]
    figures = key_figures(result)
    on_gpu, gemm, bandwidth = figures.on_gpu, figures.gemm_tflops, figures.copy_gbps
    gpus = (
        f"{len(names)} x {str(names[0]).removeprefix('NVIDIA ')}"
        if names and on_gpu
        else ("CPU" if not on_gpu else "-")
    )
    training = report.get("training") or {}
    util = training.get("gpu_util_mean_pct")
    return {
        "host": result.host,
        "gpus": gpus,
        "verdict": str(report.get("verdict")),
        "gemm": show(gemm, 1 if on_gpu else 3),
        "bandwidth": show(bandwidth),
        "samples": show(training.get("samples_per_s"), 0),
        "util": "-" if util is None else f"{float(util):.0f}%",
    }


def failures(result: HostResult) -> list[str]:
    """Why a host did not pass, one line each; a stage that broke (e.g. torch not importable)
    first, since the checks after it fail because of it."""
    if result.report is None:
        return [result.error.reason()] if result.error else ["no report"]
    failed = [c for c in result.report.get("checks", []) if not c.get("ok")]
    failed.sort(key=lambda c: c.get("code") != "error")  # stable: the job's order otherwise
    return [str(c.get("message") or c["name"]) for c in failed]
