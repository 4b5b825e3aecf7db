"""One batch of `up`: apply the run dir to its hosts (ansible-runner), verify them with the smoke
job, remember each host's outcome in the state DB, and stop `--serial` after a batch that did not
pass. Also the per-host steps around it: a host the probe could not reach, a host whose run lock
another run holds, and `--check` on a host without a GPU.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from provision.ansible.apply import listed_tasks, run_playbook
from provision.ansible.render import become_answers
from provision.ansible.rundir import write_host_vars
from provision.errors import ProvisionError
from provision.fleet import verify as verify_api
from provision.fleet.health_spec import LAST_VERIFY, LastVerify, last_verify
from provision.fleet.planning import HostPlan
from provision.fleet.records import DRAIN_TASK, LOCK_TASK, NOT_VERIFIED, PROBE_TASK, RESUME_TASK, HostRun
from provision.fleet.rolling import HookFailed, Rolling, failed_reason, upgrade_reason
from provision.fleet.verify import HostResult, failures
from provision.model.components import TORCH_VARIANT
from provision.model.lock import Lock, dumps_lock

if TYPE_CHECKING:
    from provision.config import Config
    from provision.fleet.planning import ProbeFailure
    from provision.fleet.records import Progress, UpOptions, UpResult
    from provision.fleet.state import State
    from provision.fleet.verify import HostResult
    from provision.hosts.inventory import HostTarget
    from provision.hosts.runlock import RunLocks


def lock_failed(h: HostRun, line: str, say: Callable[[str], None]) -> None:
    # Not recorded in the state DB: the host is the other run's, and what it does there is its record.
    h.failed_task, h.message, h.verdict = LOCK_TASK, line, "fail"
    say(f"{line}; the other hosts go on")


@dataclass(frozen=True)
class BatchRun:
    """What every batch of one `up` run shares: the run's folder, lock, hosts by name, settings,
    state DB and result, how it reports (``say``, ``on_progress``, ``on_total``), and the hosts'
    run locks (None before they are taken)."""

    run_dir: Path
    lock: Lock
    targets: dict[str, HostTarget]
    config: Config
    options: UpOptions
    state: State
    result: UpResult
    say: Callable[[str], None]
    on_progress: Progress | None = None
    on_total: Callable[[int | None], None] | None = None
    locks: RunLocks | None = None
    rolling: Rolling | None = None  # up --rolling (never in check mode: check mode changes nothing)


def run_batch(number: int, batches: list[list[HostRun]], run: BatchRun) -> bool:
    """Apply, verify and remember one batch; False when --serial must stop after it."""

    run_dir, lock, targets, config, options = run.run_dir, run.lock, run.targets, run.config, run.options
    state, result, say, locks = run.state, run.result, run.say, run.locks
    on_progress, on_total = run.on_progress, run.on_total
    batch = batches[number - 1]
    for h in batch:
        h.batch = number if options.serial else None
    to_apply = [h for h in batch if not h.converged]
    # --rolling: the hosts this batch changes leave the scheduler's hands first (converged hosts
    # change nothing and are only verified, as in every run)
    drained = _take_out(run.rolling, to_apply, run) if run.rolling is not None and to_apply else []
    to_apply = [h for h in to_apply if h.failed_task is None]
    if to_apply:
        say(
            f"batch {number}/{len(batches)}: applying {', '.join(h.host for h in to_apply)}"
            + (" (check mode)" if options.check else "")
        )
        become = {n: t.become_password for n, t in targets.items() if t.become_password is not None}
        _apply(run_dir, to_apply, options, on_progress, on_total, become=become)
    for h in batch:
        if h.converged:
            say(f"{h.host}: converged with this lock; only verifying (--force re-applies)")
    if locks is not None:  # a reboot in the apply ended the host's lock holder: take it again first
        lost = locks.still_held([targets[h.host] for h in batch if h.failed_task is None])
        for h in batch:
            if h.host in lost:
                lock_failed(h, lost[h.host].reason(), say)
    to_verify = [h for h in batch if h.failed_task is None]
    if to_verify:
        say(f"batch {number}/{len(batches)}: verifying {', '.join(h.host for h in to_verify)}")
        _verify([targets[h.host] for h in to_verify], to_verify, lock, config.install.venv, config, options)
        if not options.check:  # check mode changes nothing on a host, this record neither
            _record_last_verify([h for h in to_verify if h.verify is not None], targets, options, say)
    if run.rolling is not None:
        _hand_back(run.rolling, drained, say)
    for h in batch:
        if h.failed_task is not None:
            h.verdict = "fail"
        # the host's own time: its tasks plus its smoke job (hosts in a batch run side by side)
        job_s = float((h.verify or {}).get("duration_s") or 0.0)
        h.duration_s = sum(h.role_seconds.values()) + job_s if (h.role_seconds or job_s) else 0.0
        if not options.check:
            if h.lock_hash and (h.applied or h.verify is not None):  # its content, for a later rollback
                state.keep_lock(h.lock_hash, dumps_lock(Lock(lock.knowledge, [lock.group_for(h.host)])))
            if h.applied and h.failed_task is None:
                state.record_applied(result.run, h.host, h.lock_hash, h.changed, rolled_back_from=h.rolled_back_from)
            if h.failed_task is not None:
                state.record_failed(result.run, h.host, h.failed_task, h.lock_hash or None)
            if h.verify is not None:
                state.record_verdict(result.run, h.host, h.lock_hash, h.verdict)
    if options.serial is None or all(h.ok for h in batch) or number == len(batches):
        return True
    result.stopped_after_batch = number
    failed = ", ".join(h.host for h in batch if not h.ok)
    say(f"batch {number} did not pass ({failed}): stopping before the next batch")
    for later, rest in enumerate(batches[number:], start=number + 1):
        for h in rest:
            h.batch = later
            h.message = f"not run: batch {number} did not pass ({failed}); --serial stopped here"
    return False


def _hook_failed(h: HostRun, task: str, line: str, say: Callable[[str], None]) -> None:
    h.failed_task, h.message, h.verdict = task, line, "fail"
    say(line)


def _take_out(rolling: Rolling, hosts: list[HostRun], run: BatchRun) -> list[HostRun]:
    """Drain each host with ``provision-upgrade: <old lock> -> <new lock>``, then wait, side by
    side, until each runs nothing. A host whose drain fails, or that is still busy at
    --drain-timeout, fails alone and is not applied; one that was drained is handed back (nothing on
    it changed, and its jobs were never touched). The hosts ready to apply."""
    drained: list[HostRun] = []
    for h in hosts:
        known = run.state.host(h.host)
        reason = upgrade_reason(known.lock_hash if known is not None else None, h.lock_hash)
        try:
            rolling.drain(h.host, reason)
        except HookFailed as exc:
            _hook_failed(h, DRAIN_TASK, str(exc), run.say)
            continue
        run.say(f"{h.host}: drained ({reason}); waiting until it runs nothing")
        drained.append(h)

    def wait(h: HostRun) -> str | None:
        try:
            run.say(f"{h.host}: idle after {rolling.wait_idle(h.host):.0f} s")
        except HookFailed as exc:
            return str(exc)
        return None

    with ThreadPoolExecutor(max_workers=max(1, len(drained))) as pool:
        busy = list(pool.map(wait, drained))
    for h, why in zip(drained, busy, strict=True):
        if why is None:
            continue
        _hook_failed(h, DRAIN_TASK, why, run.say)
        try:
            rolling.resume(h.host)
        except HookFailed as exc:
            h.message = f"{why}; {exc}"
    return [h for h in drained if h.failed_task is None]


def _hand_back(rolling: Rolling, hosts: list[HostRun], say: Callable[[str], None]) -> None:
    """After the verify: resume each host that passed; one that did not stays drained, its reason
    rewritten to say why (``provision-upgrade: verify failed: ...``). A resume that fails makes the
    host fail: it passed, but it is not back in service, and the next `up --rolling` retries it."""
    for h in hosts:
        if h.ok and h.failed_task is None:
            try:
                rolling.resume(h.host)
            except HookFailed as exc:
                _hook_failed(h, RESUME_TASK, str(exc), say)
                continue
            say(f"{h.host}: resumed")
            continue
        reason = failed_reason(h.message or h.failed_task or "did not pass")
        try:
            rolling.drain(h.host, reason)
        except HookFailed as exc:
            h.message = f"{h.message}; {exc}" if h.message else str(exc)
            continue
        say(f"{h.host}: left drained ({reason})")


def unprobed_run(failure: ProbeFailure) -> HostRun:
    """A host the probe could not reach: it fails alone, with the probe's reason, never applied."""

    hp = HostPlan(failure.host, group="-", probed=False, present={}, changes=[], reboot="no")
    return HostRun(
        host=failure.host,
        group="-",
        lock_hash="",
        plan=hp,
        failed_task=PROBE_TASK,
        message=failure.reason,
        verdict="fail",
    )


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def make_batches(hosts: list[HostRun], serial: int | None, canary: int | None = None) -> list[list[HostRun]]:
    """The run's batches: ``serial`` hosts each (one batch without it), the first ``canary`` hosts
    alone first when given (``up --rolling --canary N``)."""
    if canary and hosts:
        return [hosts[:canary], *make_batches(hosts[canary:], serial or 1)] if hosts[canary:] else [hosts]
    if not serial:
        return [hosts]
    return [hosts[i : i + serial] for i in range(0, len(hosts), serial)]


def _apply(
    run_dir: Path,
    hosts: list[HostRun],
    options: UpOptions,
    on_progress: Progress | None,
    on_total: Callable[[int | None], None] | None,
    *,
    become: dict[str, str] | None = None,
) -> None:
    """Apply the run dir to ``hosts``; ``become`` ({host: sudo password}) answers the play's prompts."""

    ansible_dir = run_dir / "ansible"
    limit = ",".join(h.host for h in hosts)
    if on_total is not None:  # the progress view shows "done of ~total"; --list-tasks costs a second or two
        on_total(listed_tasks(ansible_dir, "site.yml", inventory=ansible_dir / "inventory.yml", limit=limit))
    artifacts = run_dir / "apply" / "-".join(sorted(h.host for h in hosts))[:80]
    try:
        outcome = run_playbook(
            ansible_dir,
            "site.yml",
            inventory=ansible_dir / "inventory.yml",
            artifacts=artifacts,
            check=options.check,
            limit=limit,
            forks=max(5, min(50, len(hosts))),
            on_progress=on_progress,
            passwords=become_answers(become or {}),
            verbosity=max(0, options.verbosity - 1),
            echo=_to_stderr if options.verbosity else None,
        )
    finally:  # also on Ctrl-C: the run's events.jsonl has whatever this apply got to
        _append_events(artifacts / "events.jsonl", run_dir / "events.jsonl")
    for h in hosts:
        got = outcome.hosts.get(h.host)
        if got is None:  # the play never reached it: the runner died or was cancelled
            h.failed_task = "(not run)"
            h.message = f"ansible-runner ended {outcome.status} before this host ran" + (
                f": {outcome.error}" if outcome.error else ""
            )
            continue
        h.applied = not options.check
        h.changed = got.changed
        h.role_seconds = dict(got.role_seconds)
        if not got.ok:
            h.failed_task = got.failed_task or "(unknown task)"
            h.message = got.message
        elif h.plan.reboot == "yes" and not options.check:
            h.reboots = 1


def _append_events(src: Path, dest: Path) -> None:
    if src.exists():
        with src.open("rb") as fin, dest.open("ab") as fout:
            shutil.copyfileobj(fin, fout)


def _verify(  # noqa: PLR0917
    targets: list[HostTarget],
    hosts: list[HostRun],
    lock: Lock,
    venv: str,
    config: Config,
    options: UpOptions,
) -> None:
    by_name = {h.host: h for h in hosts}
    # A host the probe found without a GPU, in check mode, runs the job on its CPU and says so:
    # check mode installs nothing, so "what is here works (on the CPU)" is the only honest answer.
    cpu_check = {h.host for h in hosts if h.cpu_only_check}
    # A host whose lock asks for torch's CPU build and no driver (the default where the probe found
    # no NVIDIA GPU, or a `+cpu` pin) passes on the CPU: that is the stack it was planned to have.
    cpu_check |= {h.host for h in hosts if _cpu_stack(h.locked)}
    groups: dict[bool, list[HostTarget]] = {}
    for t in targets:
        groups.setdefault(config.verify.allow_cpu or t.name in cpu_check, []).append(t)
    connect = verify_api.default_connect(
        accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
    )
    for allow_cpu, subset in groups.items():
        # check mode installed nothing: on this machine the job takes the locked venv where it
        # exists already (an earlier `up` made it), else the default venv or python3 (on a host:
        # the default venv or python3), and verifies what is there
        here = all(t.local for t in subset) and Path(venv, "bin", "python").exists()
        job_venv = venv if not options.check or here else None
        try:
            # check mode installed nothing: verify what is there, not against the lock
            plans = verify_api.plan_hosts(subset, None if options.check else lock)
            results: list[HostResult] = verify_api.verify_hosts(plans, connect, venv=job_venv, allow_cpu=allow_cpu)
        except ProvisionError as exc:  # e.g. no Python on a host: each of these hosts fails with it
            for t in subset:
                h = by_name[t.name]
                h.verdict, h.message = "fail", exc.one_line()
            continue
        for r in results:
            h = by_name[r.host]
            h.verify = r.to_json()
            h.verdict = r.verdict
            if options.check and (why := _nothing_to_verify(r)):
                h.verdict, h.message = NOT_VERIFIED, why
                continue
            if not r.ok and h.message is None:
                lines = failures(r)  # every failed check, the root cause first, on one line
                h.message = "; ".join(lines) if lines else (r.error.one_line() if r.error else None)


def _record_last_verify(
    hosts: list[HostRun], targets: dict[str, HostTarget], options: UpOptions, say: Callable[[str], None]
) -> None:
    """Write each verified host's verdict where its provision-health reads it (LAST_VERIFY, as root,
    through the Transport, in parallel). A host where it cannot be written keeps its verdict: the
    program there then says "never verified" (a note), and the line here says why."""
    connect = verify_api.default_connect(
        accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
    )
    at = datetime.now(timezone.utc)
    folder = shlex.quote(str(Path(LAST_VERIFY).parent))
    final = shlex.quote(LAST_VERIFY)
    # renamed into place: the program never reads half a file
    command = f"umask 022 && mkdir -p {folder} && cat > {final}.tmp && mv -f {final}.tmp {final}"

    def write(h: HostRun) -> str | None:
        # the run's verdict (not-verified where the job could not run) with the report's figures
        verified = replace(LastVerify.from_result(HostResult(h.host, report=h.verify), at), verdict=h.verdict)
        doc = json.dumps(last_verify(h.lock_hash, verified)).encode()
        try:
            transport = connect(targets[h.host])
        except ProvisionError as exc:
            return exc.one_line()
        try:
            ran = transport.run(command, sudo=True, stdin=doc, timeout=60)
            return None if ran.ok else (ran.stderr.strip().splitlines() or [f"exit status {ran.exit_status}"])[-1]
        except ProvisionError as exc:
            return exc.one_line()
        finally:
            transport.close()

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        for h, why in zip(hosts, pool.map(write, hosts), strict=True):
            if why is not None:
                say(f"{h.host}: the verdict for provision-health not written to {LAST_VERIFY}: {why}")


def _cpu_stack(locked: dict[str, str | None]) -> bool:
    """The lock group (as flat versions) is a CPU-only stack: torch's CPU build, no driver."""
    return locked.get(TORCH_VARIANT) == "cpu" and not locked.get("driver")


def _nothing_to_verify(r: HostResult) -> str | None:
    """Why a check-mode host has nothing to verify (torch is not importable there), or None.

    Check mode installs nothing, so a host (or a fresh `pipx install` of provision) without torch
    has no stack to verify yet: failing it would blame the host for what check mode chose not to
    install. Every other failed check stays a failure.
    """
    if r.report is None:
        return None
    checks = r.report.get("checks") or []
    if not any(c.get("name") == "stage_import" and not c.get("ok") for c in checks):
        return None
    where = f" by {r.python}" if r.python else ""
    return (
        f"nothing to verify: torch is not importable{where} and check mode installs nothing; "
        "`provision up` without --check installs the locked stack, then verifies it"
    )


# Role variables that leave the driver out; see check_without_gpu.
NO_GPU_CHECK_VARS = {
    "preflight_require_gpu": False,
    "preflight_driver_install": False,
    "nvidia_driver_enabled": False,
    "verify_driver_version": "",
}


def check_without_gpu(ansible_dir: Path, hosts: list[HostRun], say: Callable[[str], None]) -> None:
    """``--check`` on a host where the probe found no NVIDIA GPU: check the rest of the stack.

    A real run refuses such a host in preflight (a driver without a GPU is a mistake). A check
    run is a dry run that people make on laptops and CI machines first, so it says plainly that
    there is no GPU, leaves the driver roles out for that host only (host_vars in this run's
    Ansible dir, never in the lock) and runs the smoke job on the CPU.
    """
    for h in hosts:
        if _has_gpu(h):
            continue
        h.cpu_only_check = True
        say(f"{h.host}: no NVIDIA GPU found: check mode leaves the driver out and the smoke job runs on the CPU")
        why = "provision up --check: no NVIDIA GPU on this host (see docs/tutorials/workstation.md)"
        write_host_vars(ansible_dir, {h.host: dict(NO_GPU_CHECK_VARS)}, why)


def _has_gpu(h: HostRun) -> bool:
    return bool(h.plan.present.get("gpu_count"))
