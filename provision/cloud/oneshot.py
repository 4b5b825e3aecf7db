"""`provision up --cloud`: launch a run, provision and verify its hosts, and end it when asked.

The launch is :mod:`provision.cloud.launcher`'s (the same code as ``cloud up``; a launch that
fails part way removes what it made). The provisioning is whatever callable the command passes
(``provision up -i`` on the run's inventory). What this module owns is the end: with
``--down-after`` the run's instances are terminated and its security group and key pair deleted
whatever happened in between (verdicts, errors, Ctrl-C, SIGTERM, SIGHUP), unless ``--keep-on-failure``
and the run failed; without it the user is told the instances keep running and how to end them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.cloud.aws import prices
from provision.cloud.errors import CloudError
from provision.cloud.launcher import launch, launch_json, signals_as_interrupt
from provision.errors import ProvisionError

if TYPE_CHECKING:
    from provision.cloud.interface import Cloud, DownResult, LaunchResult, Say
    from provision.cloud.launcher import Prepared
    from provision.fleet.records import UpResult


@dataclass
class CloudRun:
    """The run ``up --cloud`` launched and what became of it."""

    launch: LaunchResult
    down: DownResult | None = None  # set once the run was ended
    kept: bool = False  # --keep-on-failure kept a failed run
    down_error: str | None = None  # the run could not be ended (it still costs money)

    @property
    def ended(self) -> bool:
        return self.down is not None

    def down_command(self) -> str:
        return f"provision cloud down --run {self.launch.run}"

    def to_json(self) -> dict[str, Any]:
        doc = launch_json(self.launch)
        doc.update(
            ended=self.ended,
            kept=self.kept,
            down_command=None if self.ended else self.down_command(),
            down_error=self.down_error,
            terminated=self.down.terminated if self.down else [],
            security_groups=self.down.security_groups if self.down else [],
            key_pairs=self.down.key_pairs if self.down else [],
        )
        return doc


Provision = Callable[[str], "UpResult"]


def up_on_cloud(
    prepared: Prepared,
    provision: Provision,
    *,
    cloud: Cloud,
    down_after: bool,
    keep_on_failure: bool,
    say: Say,
    workdir: Path | None = None,
) -> tuple[UpResult, CloudRun]:
    """Launch, run ``provision(inventory_path)``, then end or keep the run as asked.

    An exception from the provisioning (an error, Ctrl-C) still ends the run with
    ``--down-after``; the exception then carries the run in its JSON details and propagates.
    """

    workdir = workdir or Path.cwd()
    with signals_as_interrupt(say):
        launched = launch(prepared, cloud, say, workdir)
        run = CloudRun(launched)
        say(f"run {launched.run}: {len(launched.instances)} instance(s) up; provisioning {launched.inventory}")
        try:
            result = provision(str(launched.inventory))
        except BaseException as exc:
            _finish(
                run,
                cloud,
                failed=True,
                down_after=down_after,
                keep=keep_on_failure,
                say=say,
                workdir=workdir,
                during=exc,
            )
            if isinstance(exc, ProvisionError):
                exc.details["cloud"] = run.to_json()
            raise
        try:
            _finish(
                run,
                cloud,
                failed=not result.ok,
                down_after=down_after,
                keep=keep_on_failure,
                say=say,
                workdir=workdir,
                during=None,
            )
        except ProvisionError as exc:  # the hosts' results still belong in the JSON error
            exc.details["up"] = result.to_json()
            raise
    return result, run


def _finish(
    run: CloudRun,
    cloud: Cloud,
    *,
    failed: bool,
    down_after: bool,
    keep: bool,
    say: Say,
    workdir: Path,
    during: BaseException | None,
) -> None:
    r = run.launch
    if not down_after:
        say(_still_running(r) + f"; end them with `{run.down_command()}`")
        return
    if failed and keep:
        run.kept = True
        say(
            f"the run failed; kept {len(r.instances)} instance(s) for debugging (--keep-on-failure): "
            + _still_running(r)
            + f"; end them with `{run.down_command()}`"
        )
        return
    say(f"ending run {r.run} (--down-after): terminating {', '.join(i.id for i in r.instances)}")
    try:
        with cloud.errors("ending the run"):
            run.down = cloud.down(run=r.run, workdir=workdir)
    except BaseException as exc:  # a failed or interrupted teardown: the instances may still run
        run.down_error = exc.one_line() if isinstance(exc, ProvisionError) else type(exc).__name__
        say(
            f"could not end run {r.run} ({run.down_error}): they may still cost money; "
            f"end them with `{run.down_command()}`"
        )
        if during is not None:
            return  # the first failure is the one to report; this one was said above
        if isinstance(exc, ProvisionError):
            err = CloudError(
                f"run {r.run} was provisioned but could not be ended: {exc.message}",
                f"end it with `{run.down_command()}`",
            )
            err.details["cloud"] = run.to_json()
            raise err from exc
        raise
    d = run.down
    say(
        f"ended run {r.run}: terminated {len(d.terminated)} instance(s), deleted "
        f"{len(d.security_groups)} security group(s) and {len(d.key_pairs)} key pair(s)"
    )


def _still_running(r: LaunchResult) -> str:
    per_hour = [prices.on_demand(i.type)[0] for i in r.instances if i.market == "on-demand"]
    cost = (
        f" (about ${sum(p for p in per_hour if p is not None):.2f}/h on-demand)"
        if per_hour and all(p is not None for p in per_hour)
        else ""
    )
    return (
        f"{len(r.instances)} instance(s) of run {r.run} keep running and cost money{cost} until ended; "
        f"their TTL tag marks them expired at {r.expires_at} for `provision cloud down --expired`"
    )
