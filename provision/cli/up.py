"""`provision up`: plan, apply and verify the whole stack on the hosts; report.

``--cloud`` is the one-shot path: launch EC2 instances (``cloud up``'s options and code), run
``up`` on the run's inventory, and with ``--down-after`` end the run whatever the outcome.

Exit status: 0 every host's verdict is pass, 1 a host failed (apply or verification), 2 bad input
(checked before any host is contacted and before anything is launched), 3 unsatisfiable, 130
interrupted or not confirmed.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from provision.cli.cloud import confirm_launch, launch_options, stderr_say, warn_before_launch
from provision.cli.options import (
    command_options,
    config_option,
    deprecated_lock_option,
    host_defaults,
    limit_option,
    lock_option,
    login_options,
    parse_sets,
    reboot_controller_option,
    refuse_unasked,
    set_option,
    ssh_options,
    stack_options,
    state_option,
    target_options,
    verbose_option,
    yes_option,
)
from provision.cli.sections import LAUNCH, OUTPUT, SSH, STACK, SectionedCommand
from provision.cloud import launcher
from provision.errors import BadInput, ExitCode, LockMismatch, signals_as_interrupt
from provision.stack.request import StackRequest

if TYPE_CHECKING:
    from rich.console import Console

    from provision.ansible.apply import HostProgress
    from provision.cloud.launcher import LaunchArgs
    from provision.cloud.oneshot import CloudRun
    from provision.fleet.planning import PlanResult
    from provision.fleet.records import HostRun, UpOptions, UpResult
    from provision.fleet.rolling import Hooks


ROLLING = (
    "rolling",
    "max_unavailable",
    "canary",
    "drain_cmd",
    "wait_idle_cmd",
    "resume_cmd",
    "slurm_via",
    "drain_timeout",
)


@dataclass(frozen=True)
class RollingArgs:
    """The --rolling options as given (:func:`rolling_click_options` passes them as one value)."""

    rolling: str | None = None
    max_unavailable: int | None = None
    canary: int | None = None
    drain_cmd: str | None = None
    wait_idle_cmd: str | None = None
    resume_cmd: str | None = None
    slurm_via: str | None = None
    drain_timeout: float | None = None


def rolling_options(args: RollingArgs, serial: int | None) -> tuple[Hooks | None, int | None]:
    """``--rolling hooks|slurm`` and its options as the run's hooks and batch size
    (``--max-unavailable``, 1 by default, is ``--serial`` under another name); every misuse is bad
    input before any host."""
    from provision.fleet.rolling import Hooks, slurm_hooks  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet)

    commands = {"--drain-cmd": args.drain_cmd, "--wait-idle-cmd": args.wait_idle_cmd, "--resume-cmd": args.resume_cmd}
    given = {
        **commands,
        "--slurm-via": args.slurm_via,
        "--drain-timeout": args.drain_timeout,
        "--max-unavailable": args.max_unavailable,
    }
    if args.rolling is None:
        extra = [name for name, value in given.items() if value is not None]
        if extra:
            raise BadInput(f"{', '.join(extra)} only with --rolling", "add --rolling slurm or hooks, or leave them out")
        return None, serial
    if serial is not None and args.max_unavailable is not None:
        raise BadInput("--serial and --max-unavailable are one setting", "give --max-unavailable N alone")
    if args.rolling == "slurm":
        extra = [name for name, value in commands.items() if value is not None]
        if extra:
            raise BadInput(f"{', '.join(extra)} only with --rolling hooks", "--rolling slurm runs scontrol itself")
        built = slurm_hooks(args.slurm_via, args.drain_timeout)
    else:
        if args.slurm_via is not None:
            raise BadInput("--slurm-via only with --rolling slurm", "put it in your --*-cmd templates instead")
        built = Hooks.build(
            drain=args.drain_cmd,
            resume=args.resume_cmd,
            wait_idle=args.wait_idle_cmd,
            drain_timeout_s=args.drain_timeout,
        )
    flag, batch = (
        ("--max-unavailable", args.max_unavailable) if args.max_unavailable is not None else ("--serial", serial)
    )
    if batch is not None and batch < 1:
        raise BadInput(f"{flag} {batch} is not a batch size", f"give {flag} 1 or more")
    return built, batch or 1


_ROLLING_OPTIONS = (
    click.option(
        "--rolling",
        type=click.Choice(["slurm", "hooks"]),
        help="Drain each batch's hosts through a scheduler first, resume those that pass"
        " (slurm: scontrol; hooks: the commands below).",
    ),
    click.option(
        "--max-unavailable", type=int, metavar="N", help="With --rolling: hosts drained at a time (default 1)."
    ),
    click.option("--canary", type=int, metavar="N", help="With --rolling: a first batch of N hosts alone."),
    click.option("--drain-cmd", metavar="TEMPLATE", help="With --rolling hooks: drains {host} with {reason}."),
    click.option("--wait-idle-cmd", metavar="TEMPLATE", help="With --rolling hooks: exits 0 once {host} runs nothing."),
    click.option("--resume-cmd", metavar="TEMPLATE", help="With --rolling hooks: hands {host} back to the scheduler."),
    click.option(
        "--slurm-via",
        metavar="COMMAND",
        help="With --rolling slurm: run scontrol through this command (e.g. 'ssh login1'), not here.",
    ),
    click.option(
        "--drain-timeout",
        type=float,
        metavar="SECONDS",
        help="With --rolling (required): how long a host's running jobs may take to finish.",
    ),
)


def rolling_click_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Declare the --rolling options, the same for `up` and `rollback` (rollback applies through
    up's run), and pass them to ``func`` as one ``rolling: RollingArgs`` (as launch_options does)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, rolling=RollingArgs(**{n: kwargs.pop(n) for n in ROLLING}), **kwargs)

    decorated: Any = wrapper
    for option in reversed(_ROLLING_OPTIONS):
        decorated = option(decorated)
    return cast(Callable[..., Any], decorated)


# up's --help in sections (cli/sections.py): what to act on, what to install, how to run, output
UP_SECTIONS = (
    ("Targets", ("local", "inventory", "limit", "login_user", "private_key", "ask_become_pass", *SSH)),
    ("Stack (what to install)", ("config_path", "lock_path", "bundle_path", "signed_by", *STACK)),
    ("Install", ("install_method", "python_source", "sets", "force", "reboot_controller")),
    ("Run", ("check", "yes", "serial", "state_path")),
    ("Rolling (through a scheduler)", ROLLING),
    ("Cloud (with --cloud)", ("cloud", *LAUNCH, "down_after", "keep_on_failure")),
    ("Output", ("verbosity", *OUTPUT)),
)


@click.command(name="up", cls=SectionedCommand, sections=UP_SECTIONS)
@target_options(local="Provision the machine provision runs on.", inventory="Provision an Ansible inventory's hosts.")
@config_option()
@lock_option(
    "Apply exactly this lock (from `provision plan`): hosts are only checked against it, not resolved.",
    name="--from-lock",
)
@deprecated_lock_option("--from-lock")
@click.option(
    "--bundle",
    "bundle_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Install from this bundle (`provision bundle`) alone, with no network use: its lock, packages and wheels.",
)
@click.option(
    "--signed-by",
    "signed_by",
    metavar="FINGERPRINT",
    help="With --bundle: its MANIFEST must carry a good signature by the key of this fingerprint.",
)
@stack_options
@click.option("-C", "--check", is_flag=True, help="Ansible check mode: change nothing, verify what is there.")
@yes_option("Do not ask before changing hosts.")
@limit_option()
@click.option("--serial", type=int, metavar="N", help="Roll through N hosts at a time; stop when a batch fails.")
@click.option("--force", is_flag=True, help="Apply even to hosts that are converged with this lock.")
@rolling_click_options
@set_option()
@reboot_controller_option()
@ssh_options()
@login_options()
@state_option()
@click.option("--cloud", is_flag=True, help="Launch EC2 instances (the launch options below) and provision them.")
@launch_options
@click.option("--down-after", is_flag=True, help="With --cloud: end the run when done, whatever the outcome.")
@click.option(
    "--keep-on-failure",
    is_flag=True,
    help="With --cloud: keep what a failed launch or a failed run left, for debugging.",
)
@verbose_option()
@command_options
def up(
    *,
    cloud: bool,
    launch: LaunchArgs,
    down_after: bool,
    keep_on_failure: bool,
    local: bool,
    inventory: str | None,
    config_path: Path | None,
    lock_path: Path | None,
    old_lock_path: Path | None,
    bundle_path: Path | None,
    signed_by: str | None,
    stack_flags: dict[str, Any],
    check: bool,
    yes: bool,
    limit: str | None,
    serial: int | None,
    force: bool,
    rolling: RollingArgs,
    sets: tuple[str, ...],
    reboot_controller: bool,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
    login_user: str | None,
    private_key: Path | None,
    ask_become_pass: bool,
    state_path: Path | None,
    verbosity: int,
    as_json: bool,
) -> int:
    """Probe, resolve, plan, apply with Ansible, verify every host, report.

    Without --yes it shows the plan and asks (check mode changes nothing and does not ask).
    With --from-lock FILE it applies exactly that lock: each host is probed only to check it is the
    host its lock group was planned for (OS, arch, GPU model and count); one that is not, or that
    the lock does not name, is refused (exit 2) before any change.
    Hosts already converged with this lock (probed versions equal the lock, last verification
    with it passed) are only verified. Each run keeps .provision/runs/<run-id>/ (lock, Ansible
    run dir, events.jsonl, verify reports, report.json, report.html).

    With --cloud it first launches EC2 instances (same options as `provision cloud up`), then
    provisions them through the run's inventory; --down-after terminates them and deletes the
    run's security group and key pair at the end, also after a failure or Ctrl-C.

    With --bundle FILE (from `provision bundle`) it applies the lock inside the file: every file
    is checked against its MANIFEST before any host is contacted, copied once to each host and
    checked there again, and apt, pip and uv install from it alone, with no network use.

    The stack options override the config's stack: section.

    Exit status: 0 every host passes, 1 a host failed (or a file of --bundle does not match its
    MANIFEST), 2 bad input, 3 unsatisfiable.
    """
    from provision.config import Config, load_config  # noqa: PLC0415 (start-up: `provision --help` loads this module, not config)
    from provision.fleet.bundle_host import mismatch as bundle_mismatch  # noqa: PLC0415 (start-up: as above)
    from provision.fleet.up import check_options  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.up)
    from provision.fleet.up import up as run_up  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.up)

    lock_path = lock_path or old_lock_path
    if signed_by is not None and bundle_path is None:
        raise BadInput("--signed-by checks a bundle: it goes with --bundle", "add --bundle FILE, or drop --signed-by")
    if bundle_path is not None:
        if lock_path is not None:
            raise BadInput("--bundle with --from-lock: the bundle holds its own lock", "drop --from-lock")
        if check:
            raise BadInput("--bundle with --check: check mode does not install from a bundle", "drop --check")
        refuse_stack_with_lock(cloud, stack_flags, "--bundle")
    elif lock_path is not None:
        refuse_stack_with_lock(cloud, stack_flags)
    check_up_targets(
        cloud=cloud,
        local=local,
        inventory=inventory,
        limit=limit,
        launch=launch,
        down_after=down_after,
        keep_on_failure=keep_on_failure,
    )
    if not check:  # check mode changes nothing and does not ask
        refuse_unasked(yes, as_json, "up changes hosts", "pass --yes to go ahead without asking")
    if cloud:
        refuse_unasked(yes, as_json, "up --cloud launches paid instances", "pass --yes to launch without asking")
    rolling_hooks, serial = rolling_options(rolling, serial)
    config = load_config(config_path) if config_path is not None else Config()
    options = apply_options(
        local=local,
        inventory=inventory,
        limit=limit,
        sets=sets,
        accept_new_host_keys=accept_new_host_keys,
        ssh_config=ssh_config,
        reboot_controller=reboot_controller,
        state_path=state_path,
        login=(login_user, private_key, ask_become_pass),
        verbosity=verbosity,
    )
    options.check, options.serial, options.force, options.lock = check, serial, force, lock_path
    options.rolling, options.canary = rolling_hooks, rolling.canary
    check_options(options)
    if bundle_path is not None:  # every byte checked here, before any host is contacted
        from provision.fleet.bundle_host import open_bundle  # noqa: PLC0415 (start-up: as above)

        click.echo(f"bundle: checking {bundle_path} against its MANIFEST", err=True)
        options.bundle, options.lock = open_bundle(bundle_path, options.runs_dir.parent / "bundles", signed_by)
    # the stack request, parsed once, here: a bad stack option launches nothing
    options.request = StackRequest.build(**config.request_args(stack_flags))
    view = ProgressView(as_json)
    confirm = None if (yes or check) else _ask

    def provision(inv: str | None) -> UpResult:
        if inv is not None:  # --cloud: the run's inventory, known once the instances are up
            options.inventory = inv
        try:
            return run_up(
                config, options, confirm=confirm, on_progress=view.update, on_phase=view.phase, on_total=view.set_total
            )
        except LockMismatch as exc:
            if options.bundle is None:
                raise
            raise bundle_mismatch(exc, options.bundle) from None  # said as the bundle's refusal
        finally:
            view.stop()

    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not cli.output)

    if not cloud:
        # SIGTERM / SIGHUP (a cancelled CI job, a closed terminal) end the run as Ctrl-C does:
        # Ansible stopped and waited for, the host locks released, report.json written
        # (interrupted), exit 128 + the signal's number. --cloud has the same around its launch.
        def say(msg: str) -> None:
            sys.stderr.write(msg + "\n")

        with signals_as_interrupt(say):
            result = provision(None)
        emit(result.to_json(), as_json, lambda con: _human(con, result))
        return int(ExitCode.OK if result.ok else ExitCode.FAILED)

    from provision.cloud.oneshot import up_on_cloud  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cloud.oneshot)

    prepared = launcher.prepare(launch)  # every launch option checked; nothing sent to AWS yet
    warn_before_launch(prepared)  # before the confirmation prompt: what --ssh-cidr opens
    say = stderr_say(as_json)
    say(launcher.describe(prepared.request) + (" (ended when done: --down-after)" if down_after else ""))
    if not yes:
        confirm_launch()
    result, run = up_on_cloud(
        prepared,
        provision,
        cloud=launcher.connect(prepared),
        down_after=down_after,
        keep_on_failure=keep_on_failure,
        say=say,
    )
    # `up --json` plus the run: docs/explanation/design.md's document with one more key, `cloud`.
    emit({**result.to_json(), "cloud": run.to_json()}, as_json, lambda con: _human(con, result, run))
    return int(ExitCode.OK if result.ok else ExitCode.FAILED)


def apply_options(
    *,
    local: bool,
    inventory: str | None,
    limit: str | None,
    sets: tuple[str, ...],
    accept_new_host_keys: bool,
    ssh_config: Path | None,
    reboot_controller: bool,
    state_path: Path | None,
    login: tuple[str | None, Path | None, bool],
    verbosity: int,
) -> UpOptions:
    """The run's options from what `up` and `rollback` share: targets, --set, SSH, login, state, -v.

    ``login`` is ``-u``, ``--private-key`` and ``-K``: -K asks for the password here, so call this
    after every check that needs no host."""
    from provision.fleet.records import UpOptions  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.records)

    return UpOptions(
        local=local,
        inventory=inventory,
        limit=limit,
        overrides=parse_sets(sets),
        accept_new_host_keys=accept_new_host_keys,
        ssh_config=ssh_config,
        reboot_controller=reboot_controller,
        state_path=state_path,
        host_defaults=host_defaults(*login),
        verbosity=verbosity,
    )


def refuse_stack_with_lock(cloud: bool, stack_flags: Mapping[str, Any], option: str = "--from-lock") -> None:
    """`up --lock` takes no stack option (the lock decided the versions) and no --cloud (the
    instances it would launch have names no lock can know)."""
    ctx = click.get_current_context()
    given = [p.opts[0] for p in ctx.command.params if p.name in stack_flags]
    if given:
        raise BadInput(
            f"{', '.join(given)} with {option}: the lock already decided the stack",
            "drop them, or run provision plan with them and apply its lock",
        )
    if cloud:
        raise BadInput(
            f"{option} with --cloud: the instances it launches are in no lock",
            "run provision cloud up, plan -i its inventory, then up -i that inventory --from-lock FILE",
        )


def _ask(planned: PlanResult, hosts: list[HostRun]) -> bool:
    from provision.cli.output import console  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not cli.output)
    from provision.cli.plan import review  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not the plan review)
    from provision.fleet.review import host_ranges  # noqa: PLC0415 (start-up: as above)

    con = console()
    # the same grouped plan `provision plan` prints, then what this run skips
    review(con, planned)
    converged = [h.host for h in hosts if h.converged]
    if converged:
        con.print(f"converged with this lock, verify only: {host_ranges(converged)}", markup=False, soft_wrap=True)
    return click.confirm("apply this plan?", default=False)


class ProgressView:
    """A live table on a terminal, plain lines otherwise, nothing with --json."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.live: Any = None
        self.rows: dict[str, HostProgress] = {}
        self.started = time.monotonic()
        self.last: dict[str, tuple[str | None, str | None]] = {}
        self.tty = sys.stdout.isatty()
        self.total: int | None = None

    def set_total(self, total: int | None) -> None:
        if not self.as_json:
            self.total = total

    def _done(self, p: HostProgress) -> str:
        # dynamically included tasks are not listed: the estimate grows to what was done
        return f"{p.tasks_done} of ~{max(self.total, p.tasks_done)}" if self.total else str(p.tasks_done)

    def phase(self, text: str) -> None:
        if self.as_json:
            return
        if self.live is not None:
            self.live.console.print(text, markup=False)
        else:
            print(text, flush=True)

    def update(self, progress: HostProgress) -> None:
        if self.as_json:
            return
        self.rows[progress.host] = progress
        if self.tty:
            if self.live is None:
                from rich.live import Live  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

                self.live = Live(self._table(), refresh_per_second=4, transient=False)
                self.live.start()
            self.live.update(self._table())
            return
        key = (progress.role, progress.task)
        if self.last.get(progress.host) != key:  # one line per task a host starts, not per event
            self.last[progress.host] = key
            elapsed = time.monotonic() - self.started
            print(
                f"{progress.host}: [{progress.role or '-'}] {progress.task or '-'} "
                f"({self._done(progress)} done, {elapsed:.0f}s)",
                flush=True,
            )

    def _table(self) -> Any:
        from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

        table = Table(show_edge=False)
        for header in ("host", "role", "task", "tasks done", "elapsed"):
            table.add_column(header)
        elapsed = f"{time.monotonic() - self.started:.0f}s"
        for name, p in sorted(self.rows.items()):
            state = " (failed)" if p.failed or p.unreachable else ""
            table.add_row(name, p.role or "-", (p.task or "-")[:60] + state, self._done(p), elapsed)
        return table

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _human(con: Console, result: UpResult, run: CloudRun | None = None) -> None:
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    from provision.fleet.records import CPU_CHECK_NOTE, ran_on_cpu  # noqa: PLC0415 (start-up, as UpOptions above)

    table = Table(show_edge=False)
    for header in ("host", "verdict", "changed", "reboots", "seconds", "failed task / note"):
        table.add_column(header)
    colours = {"pass": "green", "fail": "red", "no-gpu": "yellow", "not-verified": "yellow"}
    for h in result.hosts:
        note = h.failed_task or ""
        if h.message:
            note = f"{note}: {h.message}" if note else h.message
        if h.converged:
            note = note or "converged: apply skipped"
        if ran_on_cpu(h.cpu_only_check, h.verdict, h.failed_task):
            note = f"{CPU_CHECK_NOTE}. {note}".strip()
        table.add_row(
            h.host,
            f"[{colours.get(h.verdict, 'red')}]{h.verdict}[/]",
            str(h.changed),
            str(h.reboots),
            f"{h.duration_s:.0f}",
            note,
        )
    con.print(table)
    if result.stopped_after_batch is not None:
        con.print(f"--serial stopped after batch {result.stopped_after_batch}: a host of it did not pass", markup=False)
    if result.report_error is None:
        con.print(f"report: {result.run_dir / 'report.html'}", markup=False)
    else:  # the note was said on stderr when it happened; the table above is the outcome
        con.print(f"report: none ({result.report_error})", markup=False)
    if run is not None:
        ids = ", ".join(i.id for i in run.launch.instances)
        if run.ended:
            con.print(f"cloud run {run.launch.run}: ended ({ids} terminated)", markup=False)
        else:
            con.print(
                f"cloud run {run.launch.run}: {ids} still running (cost money) until "
                f"`{run.down_command()}`; expires {run.launch.expires_at}",
                markup=False,
            )


def check_up_targets(
    *,
    cloud: bool,
    local: bool,
    inventory: str | None,
    limit: str | None,
    launch: LaunchArgs,
    down_after: bool,
    keep_on_failure: bool,
) -> None:
    """Which hosts: exactly one of --local, -i, --cloud; the launch options only with --cloud."""
    if cloud:
        if local or inventory is not None:
            given = "--local" if local else "-i"
            raise BadInput(
                f"give --cloud or {given}, not both", "--cloud provisions the instances it launches; drop one of them"
            )
        if limit is not None:
            raise BadInput(
                "--limit picks among known hosts; --cloud provisions every instance it launches",
                "drop --limit (use --count for fewer instances)",
            )
        return
    spelled = {"os_name": "os", "gpus": "gpu-count"}  # LaunchArgs' names whose option is spelled otherwise
    needs_cloud = sorted("--" + spelled.get(n, n).replace("_", "-") for n in launch.given)
    needs_cloud += ["--down-after"] * down_after + ["--keep-on-failure"] * keep_on_failure
    if needs_cloud:
        raise BadInput(f"{', '.join(needs_cloud)}: only with --cloud", "add --cloud to launch instances, or drop them")
    if not local and inventory is None:
        raise BadInput("nothing to provision", "give --local, -i INVENTORY or --cloud")
