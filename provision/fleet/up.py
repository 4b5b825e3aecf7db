"""`provision up` as a function: plan, (ask), apply, verify, remember, report.

Everything a user can get wrong (targets, config, --limit, --serial, --set, -F and each host's
SSH settings, the state DB, a missing --yes without a terminal) is checked before any host is
contacted. Then every host is probed and planned (:func:`provision.fleet.planning.plan`); a host that
cannot be probed fails alone (failed task ``(probe)``) while the others go on. Hosts whose
probed versions equal the lock and whose last verification with this lock passed skip the apply
(the fast converge path), the rest are applied with ansible-runner in batches (``--serial``: a
batch that does not pass stops the run, later hosts are ``not-run``) and every host is verified
with the smoke job. Success is every host's verdict, never Ansible's ``failed=0``.

With ``--lock FILE`` (:attr:`UpOptions.lock`) nothing is resolved: the hosts are probed only to
check that each still fits its lock group's host description, a host that does not (or that the
lock does not name) is bad input before any change, and the run applies that lock.

Re-running after an interruption is safe by construction: the roles are idempotent, and the
state DB only records an apply once Ansible reported the host done and a verdict once the job
answered, so a killed run leaves nothing that makes the next run skip work it did not finish.
"""

from __future__ import annotations

import fnmatch
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from provision.ansible.role_vars import check_lock_group
from provision.ansible.rundir import private_umask, write_host_vars
from provision.ansible.settings import split_credentials
from provision.errors import BadInput, Interrupted
from provision.files import private_dir, read_lock
from provision.fleet import verify as verify_api
from provision.fleet.batch import BatchRun, check_without_gpu, lock_failed, make_batches, run_batch, unprobed_run
from provision.fleet.bundle_host import BUNDLE_TASK
from provision.fleet.bundle_host import host_vars as bundle_vars
from provision.fleet.bundle_host import stage as stage_bundle
from provision.fleet.cache.config import start_cache
from provision.fleet.health_spec import group_hash
from provision.fleet.integrations import check_hosts, slurm_conf_lines
from provision.fleet.planning import NoHostProbed, PlanInputs, PlanRun, check_inputs, check_locked_names, plan
from provision.fleet.records import LOCK_TASK, NOT_RUN, PROBE_TASK, HostRun, Progress, UpOptions, UpResult
from provision.fleet.report import finish_reports
from provision.fleet.rolling import Rolling
from provision.fleet.state import State, state_path
from provision.fleet.targets import select_targets
from provision.hosts.runlock import RunLocks, describe_leftovers
from provision.ids import new_run_id
from provision.stack.drift import expected_versions

if TYPE_CHECKING:
    from provision.config import Config
    from provision.fleet.planning import PlanResult
    from provision.hosts.inventory import HostTarget
    from provision.hosts.runlock import RunLocks
    from provision.model.lock import LockGroup


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


# --- the run ---------------------------------------------------------------------------------


def check_options(options: UpOptions) -> None:
    """The checks that need no host and no inventory (``up --cloud`` makes them before launching)."""
    if options.serial is not None and options.serial < 1:
        raise BadInput(f"--serial {options.serial} is not a batch size", "give --serial 1 or more")
    if options.canary is not None:
        if options.rolling is None:
            raise BadInput("--canary is a batch of --rolling", "add --rolling, or leave --canary out")
        if options.canary < 1:
            raise BadInput(f"--canary {options.canary} is not a batch size", "give --canary 1 or more")
    limit_patterns(options.limit)


Confirm = Callable[["PlanResult", list["HostRun"]], bool]


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
    say = on_phase or (lambda _: None)
    check_options(options)
    chosen = select_targets(
        options.local,
        options.inventory,
        hint="provision this machine or an inventory's hosts",
        defaults=options.host_defaults,
    )
    targets = {t.name: t for t in chosen.targets}  # the hosts `up` may reach, in inventory order
    selected = apply_limit(list(targets), limit_patterns(options.limit))
    check_inputs(options.overrides, [targets[n] for n in selected], options.ssh_config)
    if options.rolling is not None and not options.check:  # e.g. no scontrol here: bad input before any host
        Rolling(options.rolling).preflight()
    locked = None
    if options.lock is not None:  # --lock: read and checked against the hosts' names before any contact
        locked = read_lock(options.lock)
        check_locked_names(locked, selected)
        bare, _ = split_credentials(config.install)
        for group in locked.groups:  # an edited lock: its repositories and values (role_vars)
            check_lock_group(group, bare)
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
    say(f"run {run}: probing {len(selected)} host(s)" + (f" to check them against {options.lock}" if locked else ""))
    try:
        planned = plan(
            PlanInputs(
                config=config,
                request=options.request,
                local=options.local,
                inventory=options.inventory,
                overrides=options.overrides,
                reboot_controller=options.reboot_controller,
                locked=locked,
                host_defaults=options.host_defaults,
            ),
            PlanRun(
                out=run_dir / "ansible",
                lock_path=run_dir / "provision.lock",
                accept_new_host_keys=options.accept_new_host_keys,
                ssh_config=options.ssh_config,
                only=selected,
                skip_unprobed=True,
                check=options.check,
                bundle_roles=False,
                run_id=run,
            ),
        )
        # what integrations: asks of each probed host, before any change on any host
        check_hosts(
            config.integrations,
            [targets[h.host] for h in planned.hosts],
            verify_api.default_connect(
                accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
            ),
        )
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP while probing: nothing was changed
        state.close()
        result.interrupted = True
        result.finished = time.time()
        finish_reports(result)
        raise Interrupted.after(
            exc,
            f"interrupted while probing the hosts; nothing was changed ({run_dir / 'report.html'})",
            "run the same command again",
        ) from None
    except NoHostProbed as exc:
        # every host unreachable: the run's report says so, host by host, with each one's reason
        # (not an empty run folder and no report)
        result.hosts = [unprobed_run(f) for f in exc.failures]
        if not options.check:
            for h in result.hosts:
                state.record_failed(run, h.host, PROBE_TASK)
        state.close()
        result.finished = time.time()
        finish_reports(result)
        where = f"report: {run_dir / 'report.html'}" if result.report_error is None else result.report_error
        raise NoHostProbed(f"{exc.message}; {where}", exc.hint or "", exc.failures) from None
    except BaseException:
        state.close()
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing was planned: leave no empty run behind
        raise
    for note in planned.notes:
        say(note)
    if config.integrations.slurm.enabled:  # provision never edits slurm.conf: the user adds these
        gpus = {h.host: h.gpus for h in planned.hosts}
        say(
            "slurm.conf lines to add (docs/how-to/slurm.md): " + " | ".join(slurm_conf_lines(config.integrations, gpus))
        )
    lock = planned.lock  # what plan wrote to planned.lock_path, not read back
    groups = {h: g for g in lock.groups for h in g.hosts}
    for hp in planned.hosts:
        group = groups[hp.host]
        hr = HostRun(
            host=hp.host, group=hp.group, lock_hash=group_hash(group), plan=hp, locked=expected_versions(group)
        )
        hr.rolled_back_from = options.rollback_from.get(hp.host)
        known = state.host(hp.host)
        hr.converged = not options.force and not hp.changes and known is not None and known.converged(hr.lock_hash)
        if hr.converged and hp.health:  # verified with this lock, but its health program is not this run's
            hr.converged = False
            say(f"{hp.host}: {hp.health}: applied again")
        result.hosts.append(hr)
    for failure in planned.unprobed:
        say(f"{failure.host}: cannot probe: {failure.reason}; the other hosts go on")
        result.hosts.append(unprobed_run(failure))
    order = {name: i for i, name in enumerate(selected)}
    result.hosts.sort(key=lambda h: order.get(h.host, len(order)))  # inventory order, also for --serial
    if confirm is not None and not confirm(planned, result.hosts):
        state.close()
        raise Interrupted(
            f"nothing was changed: the plan was not confirmed (its lock and Ansible run dir are in {run_dir})",
            "run again and answer y, or pass --yes",
        )

    if options.check:
        check_without_gpu(run_dir / "ansible", [h for h in result.hosts if h.failed_task != PROBE_TASK], say)
    if not options.check:
        for h in result.hosts:
            if h.failed_task == PROBE_TASK:
                state.record_failed(run, h.host, PROBE_TASK)
    cache = None
    locks: RunLocks | None = None
    try:
        # Check mode too: it changes nothing, but its play writes and removes files of its own
        # on the host, and what it reads and verifies while another run applies says nothing.
        locks = _take_host_locks(run, result.hosts, targets, options, say)
        batches = make_batches(
            [h for h in result.hosts if h.failed_task not in (PROBE_TASK, LOCK_TASK)], options.serial, options.canary
        )
        # planned.run_vars: the role variables plan rendered into the run dir, not read back from it
        assert planned.run_vars is not None  # plan always writes the run dir it returns
        if options.bundle is not None and not options.check:
            to_stage = [targets[h.host] for batch in batches for h in batch if not h.converged]
            _stage_bundle(
                options,
                to_stage,
                groups=groups,
                environment=planned.run_vars.everyone.get("provision_environment") or {},
                run=run,
                state=state,
                result=result,
                say=say,
            )
            batches = make_batches(
                [h for h in result.hosts if h.failed_task not in (PROBE_TASK, LOCK_TASK, BUNDLE_TASK)],
                options.serial,
                options.canary,
            )
        to_apply = [targets[h.host] for batch in batches for h in batch if not h.converged]
        if options.bundle is None:  # a bundle's hosts reach nothing but the bundle
            cache = start_cache(config, options, run_dir, lock, rendered=planned.run_vars, targets=to_apply, say=say)
        rolling = Rolling(options.rolling) if options.rolling is not None and not options.check else None
        shared = BatchRun(
            run_dir, lock, targets, config, options, state, result, say, on_progress, on_total, locks, rolling
        )
        for number in range(1, len(batches) + 1):
            if not run_batch(number, batches, shared):
                break
    except KeyboardInterrupt as exc:
        # Ctrl-C, SIGTERM, SIGHUP (errors.SignalInterrupt; Ansible already stopped): keep what is
        # known (the state DB already has every finished host) and say which hosts were not
        # finished; the same command run again completes them
        result.interrupted = True
        for h in result.hosts:
            if h.verdict == NOT_RUN:
                h.message = "interrupted before this host was verified; run the same command again"

        raise Interrupted.after(
            exc,
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


def _stage_bundle(
    options: UpOptions,
    hosts: list[HostTarget],
    *,
    groups: dict[str, LockGroup],
    environment: Mapping[str, str],
    run: str,
    state: State,
    result: UpResult,
    say: Callable[[str], None],
) -> None:
    """The bundle on each host the run applies to, and its host_vars; a host where it cannot be
    staged fails alone (task ``(bundle)``) with nothing installed."""
    bundle = options.bundle
    if bundle is None or not hosts:
        return
    say(
        f"bundle: copying {bundle.path.name} ({bundle.size / 1e6:.1f} MB) to {len(hosts)} host(s) and checking it there"
    )
    connect = verify_api.default_connect(
        accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
    )
    group_of = {h.name: groups[h.name].name for h in hosts}
    failed = stage_bundle(bundle, hosts, group_of, connect, say)
    ready = {t.name: bundle_vars(bundle, group_of[t.name], environment) for t in hosts if t.name not in failed}
    write_host_vars(result.run_dir / "ansible", ready, "install from the bundle only (provision/fleet/bundle_host.py)")
    for h in result.hosts:
        if h.host in failed:
            h.failed_task, h.message, h.verdict = BUNDLE_TASK, f"{h.host}: {failed[h.host]}", "fail"
            state.record_failed(run, h.host, BUNDLE_TASK)
            say(f"{h.message}; the other hosts go on")


def _take_host_locks(
    run: str, hosts: list[HostRun], targets: dict[str, HostTarget], options: UpOptions, say: Callable[[str], None]
) -> RunLocks:
    """Take each probed host's run lock (provision/hosts/runlock.py); a host another run holds fails alone."""

    connect = verify_api.default_connect(
        accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
    )
    locks = RunLocks(run, connect)
    lockable = [h for h in hosts if h.failed_task is None]
    failed = locks.take([targets[h.host] for h in lockable])
    for h in lockable:
        if h.host in failed:
            lock_failed(h, failed[h.host].reason(), say)
        elif waited := locks.waited(h.host):
            say(f"{h.host}: waited for an earlier apply's processes to end first: {describe_leftovers(waited)}")
    return locks
