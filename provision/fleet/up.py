"""`provision up` as a function: plan, (ask), apply, verify, remember, report.

Everything a user can get wrong (targets, config, --limit, --serial, --set, -F and each host's
SSH settings, the state DB, a missing --yes without a terminal) is checked before any host is
contacted. Then every host is probed and planned (:func:`provision.fleet.planning.plan`); a host that
cannot be probed fails alone (failed task ``(probe)``) while the others go on. Hosts whose
probed versions equal the lock and whose last verification with this lock passed skip the apply
(the fast converge path), the rest are applied with ansible-runner in batches (``--serial``: a
batch that does not pass stops the run, later hosts are ``not-run``) and every host is verified
with the smoke job. Success is every host's verdict, never Ansible's ``failed=0``.

Re-running after an interruption is safe by construction: the roles are idempotent, and the
state DB only records an apply once Ansible reported the host done and a verdict once the job
answered, so a killed run leaves nothing that makes the next run skip work it did not finish.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput
from provision.ids import new_run_id

if TYPE_CHECKING:
    from provision.ansible.apply import HostProgress
    from provision.config import Config
    from provision.fleet.planning import HostPlan, PlanResult, ProbeFailure
    from provision.fleet.state import State
    from provision.fleet.verify import HostResult
    from provision.hosts.inventory import HostTarget
    from provision.hosts.runlock import RunLocks
    from provision.stack.lock import Lock, LockGroup

RUNS_DIR = Path(".provision") / "runs"

# verdicts beyond the smoke job's pass / fail / no-gpu
NOT_RUN = "not-run"  # --serial stopped before this host's batch, or Ctrl-C before it was verified
# the failed_task of a host that could not be probed (it fails alone; the others go on)
PROBE_TASK = "(probe)"
# the failed_task of a host whose run lock another run holds (provision/hosts/runlock.py)
LOCK_TASK = "(host lock)"


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

    @property
    def ok(self) -> bool:
        return self.verdict == "pass"

    def to_json(self) -> dict[str, Any]:
        """Exactly DESIGN.md's `up --json` host object."""
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
    cache: dict[str, Any] | None = None  # what the fleet cache did (provision.cache.CacheReport)
    report_error: str | None = None  # report.json/html could not be written (a note, not the outcome)
    started: float = field(default_factory=time.time)
    finished: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.hosts) and all(h.ok for h in self.hosts)

    def to_json(self) -> dict[str, Any]:
        """Exactly DESIGN.md's `up --json` document."""
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


# --- checks that happen before any host is contacted -----------------------------------------


def limit_patterns(limit: str | None) -> list[str]:
    """``--limit a,b*`` / ``a:b`` as patterns; empty parts are bad input."""
    if limit is None:
        return []
    parts = [p.strip() for p in limit.replace(":", ",").split(",")]
    if not all(parts):
        raise BadInput(f"--limit {limit!r} has an empty part", "write host names or globs: --limit th1,th2 or 'th*'")
    return parts


def apply_limit(names: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The names a limit keeps, in order; a pattern that matches no host is bad input."""
    if not patterns:
        return list(names)
    for p in patterns:
        if not any(fnmatch.fnmatchcase(n, p) for n in names):
            raise BadInput(
                f"--limit pattern {p!r} matches no host",
                f"the hosts are {', '.join(names[:8])}" + (" ..." if len(names) > 8 else ""),
            )
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def load_targets(local: bool, inventory: str | None) -> dict[str, HostTarget]:
    """The hosts `up` may reach, by name, in inventory order."""
    from provision.hosts.inventory import LOCALHOST, load_inventory

    if local and inventory:
        raise BadInput("give --local or -i INVENTORY, not both", "provision this machine or an inventory's hosts")
    return {t.name: t for t in (load_inventory(inventory) if inventory else [LOCALHOST])}


def group_hash(group: LockGroup) -> str:
    """A lock group's identity for the state DB: what is installed, not which hosts share it."""
    doc = {"host": group.host, "stack": group.stack, "packages": group.packages}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --- the run ---------------------------------------------------------------------------------


@dataclass
class UpOptions:
    local: bool = False
    inventory: str | None = None
    check: bool = False
    limit: str | None = None
    serial: int | None = None
    force: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)
    accept_new_host_keys: bool = False
    ssh_config: Path | None = None
    reboot_controller: bool = False
    state_path: Path | None = None  # --state; else config.state.path; else the default
    runs_dir: Path = RUNS_DIR


def check_options(options: UpOptions) -> None:
    """The checks that need no host and no inventory (``up --cloud`` makes them before launching)."""
    if options.serial is not None and options.serial < 1:
        raise BadInput(f"--serial {options.serial} is not a batch size", "give --serial 1 or more")
    limit_patterns(options.limit)


Confirm = Callable[["PlanResult", list["HostRun"]], bool]
Progress = Callable[["HostProgress"], None]


def up(
    config: Config,
    options: UpOptions,
    *,
    confirm: Confirm | None = None,
    on_progress: Progress | None = None,
    on_phase: Callable[[str], None] | None = None,
    on_total: Callable[[int | None], None] | None = None,
) -> UpResult:
    """Run `provision up`; host failures are in the result, input problems raise BadInput first."""
    from provision.ansible.render import private_umask

    with private_umask():  # every file of the run (reports, events, artifacts) is the user's only
        return _up(config, options, confirm=confirm, on_progress=on_progress, on_phase=on_phase, on_total=on_total)


def _up(
    config: Config,
    options: UpOptions,
    *,
    confirm: Confirm | None,
    on_progress: Progress | None,
    on_phase: Callable[[str], None] | None,
    on_total: Callable[[int | None], None] | None,
) -> UpResult:
    from provision.ansible.render import private_dir
    from provision.fleet.planning import check_inputs, plan
    from provision.fleet.state import State, state_path
    from provision.stack.lock import read_lock

    say = on_phase or (lambda _: None)
    check_options(options)
    targets = load_targets(options.local, options.inventory)
    selected = apply_limit(list(targets), limit_patterns(options.limit))
    check_inputs(config, options.overrides, [targets[n] for n in selected], options.ssh_config)
    state = State(state_path(options.state_path, config.state.path))

    run = new_run_id()
    run_dir = (options.runs_dir / run).resolve()  # ansible-runner changes directory
    try:
        private_dir(run_dir)  # 0700: the run's secrets.yml, inventory and artifacts are the user's only
    except OSError as exc:
        state.close()
        raise BadInput(
            f"cannot make the run folder {run_dir}: {exc.strerror}", "run provision up from a writable directory"
        ) from None
    result = UpResult(run=run, run_dir=run_dir, check=options.check, hosts=[])
    say(f"run {run}: probing {len(selected)} host(s)")
    try:
        planned = plan(
            config=config,
            local=options.local,
            inventory=options.inventory,
            out=run_dir / "ansible",
            lock_path=run_dir / "provision.lock",
            overrides=options.overrides,
            reboot_controller=options.reboot_controller,
            accept_new_host_keys=options.accept_new_host_keys,
            ssh_config=options.ssh_config,
            only=selected,
            skip_unprobed=True,
        )
    except BaseException:
        state.close()
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing was planned: leave no empty run behind
        raise
    lock = read_lock(planned.lock_path)
    hashes = {h: group_hash(g) for g in lock.groups for h in g.hosts}
    for hp in planned.hosts:
        hr = HostRun(host=hp.host, group=hp.group, lock_hash=hashes[hp.host], plan=hp)
        known = state.host(hp.host)
        hr.converged = not options.force and not hp.changes and known is not None and known.converged(hr.lock_hash)
        result.hosts.append(hr)
    for failure in planned.unprobed:
        say(f"{failure.host}: cannot probe: {failure.reason}; the other hosts go on")
        result.hosts.append(_unprobed(failure))
    order = {name: i for i, name in enumerate(selected)}
    result.hosts.sort(key=lambda h: order.get(h.host, len(order)))  # inventory order, also for --serial
    if confirm is not None and not confirm(planned, result.hosts):
        from provision.errors import Interrupted

        raise Interrupted("nothing was changed: the plan was not confirmed", "run again and answer y, or pass --yes")

    if options.check:
        _check_without_gpu(run_dir / "ansible", [h for h in result.hosts if h.failed_task != PROBE_TASK], say)
    if not options.check:
        for h in result.hosts:
            if h.failed_task == PROBE_TASK:
                state.record_failed(run, h.host, PROBE_TASK)
    cache = None
    locks: RunLocks | None = None
    try:
        if not options.check:  # check mode changes nothing: it cannot break another run's host
            locks = _take_host_locks(run, result.hosts, targets, options, say)
        batches = _batches([h for h in result.hosts if h.failed_task not in (PROBE_TASK, LOCK_TASK)], options.serial)
        to_apply = [targets[h.host] for batch in batches for h in batch if not h.converged]
        cache = _start_cache(config, options, run_dir, lock, to_apply, say=say)
        for number in range(1, len(batches) + 1):
            if not _run_batch(
                number,
                batches,
                run_dir,
                lock,
                targets,
                config,
                options,
                state,
                result,
                say,
                on_progress,
                on_total,
                locks,
            ):
                break
    except KeyboardInterrupt:
        # Ctrl-C: keep what is known (the state DB already has every finished host) and say
        # which hosts were not finished; the same command run again completes them
        result.interrupted = True
        for h in result.hosts:
            if h.verdict == NOT_RUN:
                h.message = "interrupted before this host was verified; run the same command again"
        from provision.errors import Interrupted

        raise Interrupted(
            f"interrupted; what the run got to is in {run_dir / 'report.html'}",
            "run the same command again to complete the hosts not verified",
        ) from None
    finally:
        if locks is not None:
            locks.release()
        if cache is not None:
            result.cache = cache.close().to_json()
        state.close()
        result.finished = time.time()
        finish_reports(result)
    return result


def _take_host_locks(
    run: str, hosts: list[HostRun], targets: dict[str, HostTarget], options: UpOptions, say: Callable[[str], None]
) -> RunLocks:
    """Take each probed host's run lock (provision/hosts/runlock.py); a host another run holds fails alone."""
    from provision.fleet import verify as verify_api
    from provision.hosts.runlock import RunLocks

    connect = verify_api.default_connect(
        accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
    )
    locks = RunLocks(run, connect)
    lockable = [h for h in hosts if h.failed_task is None]
    failed = locks.take([targets[h.host] for h in lockable])
    for h in lockable:
        if h.host in failed:
            _lock_failed(h, failed[h.host].reason(), say)
    return locks


def _lock_failed(h: HostRun, line: str, say: Callable[[str], None]) -> None:
    # Not recorded in the state DB: the host is the other run's, and what it does there is its record.
    h.failed_task, h.message, h.verdict = LOCK_TASK, line, "fail"
    say(f"{line}; the other hosts go on")


def _start_cache(
    config: Config, options: UpOptions, run_dir: Path, lock: Any, targets: list[Any], *, say: Callable[[str], None]
) -> Any:
    """The fleet cache for the hosts this run applies to (None: off, check mode or no SSH host)."""
    if config.install.cache == "off" or options.check or not any(not t.local for t in targets):
        return None
    import sys

    import yaml

    from provision.ansible.render import default_roles_path
    from provision.fleet import verify as verify_api
    from provision.fleet.cache import FleetCache, RepoSources, WheelSet, default_root, role_defaults

    ansible = run_dir / "ansible"
    inventory = yaml.safe_load((ansible / "inventory.yml").read_text())
    group_of = {h: g for g, body in inventory["all"]["children"].items() for h in (body.get("hosts") or {})}
    platform = {h: g.host for g in lock.groups for h in g.hosts}
    group_vars = {
        g: yaml.safe_load((ansible / "group_vars" / f"{g}.yml").read_text()) or {}
        for g in {group_of[t.name] for t in targets}
    }
    secrets_path = ansible / "secrets.yml"  # render.SECRETS_FILE: index logins for the controller's pip
    secrets = (yaml.safe_load(secrets_path.read_text()) or {}) if secrets_path.exists() else {}
    netrc = "".join(f["content"] for f in secrets.get("provision_credential_files") or [] if f["name"] == "netrc")
    wheel_sets = {
        t.name: WheelSet.from_group_vars(group_vars[group_of[t.name]], platform.get(t.name) or {}, netrc=netrc)
        for t in targets
    }
    everyone = yaml.safe_load((ansible / "group_vars" / "all.yml").read_text()) or {}
    # squid fetches only from what these hosts' variables and roles name, and their OS archives
    sources = RepoSources.for_run(
        [everyone, *group_vars.values()],
        [str((platform.get(t.name) or {}).get("os") or "") for t in targets],
        role_defaults(Path(default_roles_path())),
    )
    root = Path(config.install.cache_dir).expanduser() if config.install.cache_dir else default_root()
    cache = FleetCache(root, run_dir, python_exe=sys.executable, say=say)
    connect = verify_api.default_connect(
        accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
    )
    try:
        per_host = cache.start(
            targets, wheel_sets, everyone.get("provision_environment") or {}, connect=connect, sources=sources
        )
    except BaseException:
        cache.close()
        raise
    for note in cache.report.notes:
        say(f"fleet cache: {note}")
    _write_host_vars(ansible, per_host, "the fleet cache's tunnels for this run (provision/cache.py)")
    return cache


def _write_host_vars(ansible_dir: Path, per_host: dict[str, dict[str, Any]], why: str) -> None:
    """Add variables to this run's host_vars/<host>.yml (never to the lock: they are this run's)."""
    import yaml

    for host, values in per_host.items():
        if not values:
            continue
        path = ansible_dir / "host_vars" / f"{host}.yml"
        path.parent.mkdir(exist_ok=True)
        old = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
        path.write_text(f"# {why}\n" + yaml.safe_dump({**old, **values}, sort_keys=True))


def _run_batch(  # noqa: PLR0917
    number: int,
    batches: list[list[HostRun]],
    run_dir: Path,
    lock: Lock,
    targets: dict[str, HostTarget],
    config: Config,
    options: UpOptions,
    state: State,
    result: UpResult,
    say: Callable[[str], None],
    on_progress: Progress | None,
    on_total: Callable[[int | None], None] | None,
    locks: RunLocks | None = None,
) -> bool:
    """Apply, verify and remember one batch; False when --serial must stop after it."""
    from provision.fleet import verify as verify_api

    batch = batches[number - 1]
    for h in batch:
        h.batch = number if options.serial else None
    to_apply = [h for h in batch if not h.converged]
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
                _lock_failed(h, lost[h.host].reason(), say)
    to_verify = [h for h in batch if h.failed_task is None]
    if to_verify:
        say(f"batch {number}/{len(batches)}: verifying {', '.join(h.host for h in to_verify)}")
        _verify(verify_api, [targets[h.host] for h in to_verify], to_verify, lock, config.install.venv, config, options)
    for h in batch:
        if h.failed_task is not None:
            h.verdict = "fail"
        # the host's own time: its tasks plus its smoke job (hosts in a batch run side by side)
        job_s = float((h.verify or {}).get("duration_s") or 0.0)
        h.duration_s = sum(h.role_seconds.values()) + job_s if (h.role_seconds or job_s) else 0.0
        if not options.check:
            if h.applied and h.failed_task is None:
                state.record_applied(result.run, h.host, h.lock_hash, h.changed)
            if h.failed_task is not None:
                state.record_failed(result.run, h.host, h.failed_task)
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


def _unprobed(failure: ProbeFailure) -> HostRun:
    """A host the probe could not reach: it fails alone, with the probe's reason, never applied."""
    from provision.fleet.planning import HostPlan

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


def _batches(hosts: list[HostRun], serial: int | None) -> list[list[HostRun]]:
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
    from provision.ansible.apply import listed_tasks, run_playbook
    from provision.ansible.render import become_answers

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
        )
    finally:  # also on Ctrl-C: the run's events.jsonl has whatever this apply got to
        _append_events(artifacts / "events.jsonl", run_dir / "events.jsonl")
    for h in hosts:
        got = outcome.hosts.get(h.host)
        if got is None:  # the play never reached it: the runner died or was cancelled
            h.failed_task = "(not run)"
            h.message = f"ansible-runner ended {outcome.status} before this host ran"
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
    verify_api: Any,
    targets: list[Any],
    hosts: list[HostRun],
    lock: Any,
    venv: str,
    config: Config,
    options: UpOptions,
) -> None:
    from provision.errors import ProvisionError

    by_name = {h.host: h for h in hosts}
    # A host the probe found without a GPU, in check mode, runs the job on its CPU and says so:
    # check mode installs nothing, so "what is here works (on the CPU)" is the only honest answer.
    cpu_check = {h.host for h in hosts if h.cpu_only_check}
    groups: dict[bool, list[Any]] = {}
    for t in targets:
        groups.setdefault(config.verify.allow_cpu or t.name in cpu_check, []).append(t)
    connect = verify_api.default_connect(
        accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
    )
    for allow_cpu, subset in groups.items():
        try:
            # check mode installed nothing: verify what is there, not against the lock
            plans = verify_api.plan_hosts(subset, None if options.check else lock)
            # check mode installed nothing: the job takes the default venv where there is one
            results: list[HostResult] = verify_api.verify_hosts(
                plans, connect, venv=None if options.check else venv, allow_cpu=allow_cpu
            )
        except ProvisionError as exc:  # e.g. no Python on a host: each of these hosts fails with it
            for t in subset:
                h = by_name[t.name]
                h.verdict, h.message = "fail", exc.one_line()
            continue
        for r in results:
            h = by_name[r.host]
            h.verify = r.to_json()
            h.verdict = r.verdict
            if not r.ok and h.message is None:
                from provision.fleet.verify import failures

                lines = failures(r)  # every failed check, the root cause first, on one line
                h.message = "; ".join(lines) if lines else (r.error.one_line() if r.error else None)


# Role variables that leave the driver out; see _check_without_gpu.
NO_GPU_CHECK_VARS = {
    "preflight_require_gpu": False,
    "preflight_driver_install": False,
    "nvidia_driver_enabled": False,
    "verify_driver_version": "",
}


def _check_without_gpu(ansible_dir: Path, hosts: list[HostRun], say: Callable[[str], None]) -> None:
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
        why = "provision up --check: no NVIDIA GPU on this host (see the README on up --local --check)"
        _write_host_vars(ansible_dir, {h.host: dict(NO_GPU_CHECK_VARS)}, why)


def _has_gpu(h: HostRun) -> bool:
    return bool(h.plan.present.get("gpu_count"))


def finish_reports(result: UpResult, note: Callable[[str], None] | None = None) -> None:
    """Write the run's reports; a failure to write them is a note, never an exception.

    This runs in ``up``'s ``finally``: an exception raised here would replace the one that
    stopped the run (Python drops it for the new one), and the user would read "No space left"
    instead of the host that failed. The run's outcome is already in the state DB and in what
    ``up`` returns or raises; the report is a copy of it for people.
    """
    try:
        write_reports(result)
    except Exception as exc:  # any failure: a full disk, a removed run dir, a value json refuses
        reason = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else str(exc)
        result.report_error = f"the report of run {result.run} was not written ({reason or type(exc).__name__})"
        (note or _note)(f"note: {result.report_error}; the outcome above stands, and `provision status` has it")


def _note(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


def write_reports(result: UpResult) -> None:
    from provision.fleet.report import write_html

    doc = result.report_json()
    (result.run_dir / "report.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    for h in result.hosts:
        if h.verify is not None:
            (result.run_dir / f"verify-{h.host}.json").write_text(json.dumps(h.verify, indent=2) + "\n")
    write_html(doc, result.run_dir / "report.html")
