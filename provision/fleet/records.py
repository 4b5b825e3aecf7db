"""What `up`'s parts hand each other: the run's options (:class:`UpOptions`), one host's way
through the run (:class:`HostRun`, with the verdicts and failed tasks `up` adds to the smoke
job's) and the run's result (:class:`UpResult`, the ``--json`` document and report.json).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from provision.ansible.apply import HostProgress
    from provision.fleet.bundle_host import Bundle
    from provision.fleet.planning import HostPlan
    from provision.fleet.rolling import Hooks
    from provision.fleet.targets import HostDefaults
    from provision.stack.request import StackRequest


RUNS_DIR = Path(".provision") / "runs"

# verdicts beyond the smoke job's pass / fail / no-gpu
NOT_RUN = "not-run"  # --serial stopped before this host's batch, or Ctrl-C before it was verified
# `up --check` where torch is not importable by the job's Python: check mode installed nothing, so
# there is nothing to verify; that is not a failed host (exit 0), and the message names the reason
NOT_VERIFIED = "not-verified"
# the failed_task of a host that could not be probed (it fails alone; the others go on)
PROBE_TASK = "(probe)"
# the failed_task of a host whose run lock another run holds (provision/hosts/runlock.py)
LOCK_TASK = "(host lock)"
# the failed_task of a host that `up --rolling` could not take out of, or hand back to, its
# scheduler (provision/fleet/rolling.py)
DRAIN_TASK = "(drain)"
RESUME_TASK = "(resume)"
# What a check run says of a host without a GPU whose smoke job ran there (on its CPU).
CPU_CHECK_NOTE = "no GPU on this host: the smoke job ran on the CPU"


def ran_on_cpu(cpu_only_check: bool, verdict: str, failed_task: str | None) -> bool:
    """Whether :data:`CPU_CHECK_NOTE` is true of a host: a check run without a GPU whose smoke job
    ran, not one the job never reached (probe or host lock failed, not run, nothing to verify)."""
    return cpu_only_check and verdict not in (NOT_RUN, NOT_VERIFIED) and failed_task not in (PROBE_TASK, LOCK_TASK)


@dataclass
class HostRun:
    """One host's way through `up`."""

    host: str
    group: str
    lock_hash: str
    plan: HostPlan
    converged: bool = False  # fast path: apply skipped
    applied: bool = False
    changed: int = 0
    failed_task: str | None = None
    message: str | None = None
    reboots: int = 0
    verdict: str = NOT_RUN
    duration_s: float = 0.0
    role_seconds: dict[str, float] = field(default_factory=dict)
    verify: dict[str, Any] | None = None
    cpu_only_check: bool = False  # --check on a host without a GPU: the job ran on the CPU
    batch: int | None = None  # --serial: the host's batch (1-based); None for a host never batched
    # the host's lock group as flat versions (provision.stack.drift.expected_versions), for the
    # report's "locked" column; empty for a host the probe never reached
    locked: dict[str, str | None] = field(default_factory=dict)
    rolled_back_from: str | None = None  # `provision rollback`: the lock hash the host ran before

    @property
    def ok(self) -> bool:
        return self.verdict in ("pass", NOT_VERIFIED)

    def to_json(self) -> dict[str, Any]:
        """Exactly docs/explanation/design.md's `up --json` host object."""
        return {
            "host": self.host,
            "ok": self.ok,
            "changed": self.changed,
            "failed_task": self.failed_task,
            "reboots": self.reboots,
            "verdict": self.verdict,
            "duration_s": round(self.duration_s, 1),
        }

    def detail_json(self) -> dict[str, Any]:
        """Everything report.json keeps about the host."""
        return {
            **self.to_json(),
            "group": self.group,
            "lock_hash": self.lock_hash,
            "converged": self.converged,
            "applied": self.applied,
            "message": self.message,
            "changes": self.plan.changes,
            "reboot": self.plan.reboot,
            "cpu_only_check": self.cpu_only_check,
            "batch": self.batch,
            "role_seconds": {k: round(v, 2) for k, v in self.role_seconds.items()},
            "locked": self.locked,
            "rolled_back_from": self.rolled_back_from,
            "probed": self.plan.present,  # what the probe found before this run changed anything
            "verify": self.verify,
        }


@dataclass
class UpResult:
    run: str
    run_dir: Path
    check: bool
    hosts: list[HostRun]
    stopped_after_batch: int | None = None  # --serial: the batch that did not pass
    interrupted: bool = False  # Ctrl-C: the report was written on the way out
    cache: dict[str, Any] | None = None  # what the fleet cache did (provision.fleet.cache.run.CacheReport)
    report_error: str | None = None  # report.json/html could not be written (a note, not the outcome)
    started: float = field(default_factory=time.time)
    finished: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.hosts) and all(h.ok for h in self.hosts)

    def to_json(self) -> dict[str, Any]:
        """Exactly docs/explanation/design.md's `up --json` document."""
        return {"ok": self.ok, "run": self.run, "hosts": [h.to_json() for h in self.hosts]}

    def report_json(self) -> dict[str, Any]:
        return {
            "schema": "provision.up/1",
            **self.to_json(),
            "check": self.check,
            "run_dir": str(self.run_dir),
            "started_at": self.started,
            "finished_at": self.finished,
            "stopped_after_batch": self.stopped_after_batch,
            "interrupted": self.interrupted,
            "cache": self.cache,
            "details": [h.detail_json() for h in self.hosts],
        }


@dataclass
class UpOptions:
    local: bool = False
    inventory: str | None = None
    check: bool = False
    limit: str | None = None
    serial: int | None = None
    force: bool = False
    # --rolling hooks: drain, wait, apply, verify, resume per batch (batches of --serial /
    # --max-unavailable hosts, the first of --canary); None: no scheduler is asked
    rolling: Hooks | None = None
    canary: int | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    accept_new_host_keys: bool = False
    ssh_config: Path | None = None
    reboot_controller: bool = False
    state_path: Path | None = None  # --state; else config.state.path; else the default
    lock: Path | None = None  # --lock: apply exactly this lock (hosts probed only to check they fit it)
    # --bundle: install from this checked bundle only (its lock is ``lock``; provision/fleet/bundle_host.py)
    bundle: Bundle | None = None
    host_defaults: HostDefaults | None = None  # -u, --private-key, -K (its password in memory only)
    runs_dir: Path = RUNS_DIR
    # -v: what ansible-playbook prints, on stderr; each further v is one of ansible-playbook's -v
    verbosity: int = 0
    # the stack request, parsed once by the command line (the stack options given beat the config's)
    request: StackRequest | None = None
    # `provision rollback`: host -> the lock hash it runs now, which the run's lock replaces
    rollback_from: dict[str, str] = field(default_factory=dict)


Progress = Callable[["HostProgress"], None]
