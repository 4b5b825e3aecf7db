"""`provision cloud up|ls|down`: launch, list and tear down tagged EC2 GPU instances."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click
from click.core import ParameterSource

from provision.cli.options import (
    NONEMPTY,
    ask_first,
    command_options,
    deprecated_alias,
    refuse_unasked,
    take_alias,
    yes_option,
)
from provision.cloud import launcher
from provision.cloud.launcher import DEFAULT_KEY, LaunchArgs, open_region
from provision.errors import BadInput

if TYPE_CHECKING:
    from rich.console import Console

    from provision.cloud.interface import CloudInstance, DownResult, LaunchResult, Skipped
    from provision.cloud.launcher import Prepared

F = TypeVar("F", bound=Callable[..., Any])


@click.group(name="cloud")
def cloud() -> None:
    """Launch, list and tear down EC2 GPU instances.

    Uses boto3's standard session: AWS_PROFILE, AWS_REGION / AWS_DEFAULT_REGION and
    AWS_ENDPOINT_URL work as in every AWS tool. Everything created is tagged provision:run and
    provision:expires-at.
    """


def stderr_say(as_json: bool) -> Any:
    from provision.cli.output import console  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not cli.output)

    con = console(stderr=True)
    return lambda msg: con.print(f"[dim]cloud:[/dim] {msg}", soft_wrap=True)


def warn_before_launch(prepared: Prepared) -> None:
    """Each warning as a `warning: ...` line on stderr, before anything is sent to AWS."""
    from provision.cli.output import console  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not cli.output)

    con = console(stderr=True)
    for w in prepared.warnings:
        con.print(f"warning: {w}", markup=False, soft_wrap=True)


def confirm_launch() -> None:
    """The question `cloud up` and `up --cloud` ask once the run is described (stderr): a "no"
    launches nothing (exit 130)."""
    ask_first(
        "launch these instances (they cost money while they run)?",
        "nothing was launched: the launch was not confirmed",
    )


# The launch options `cloud up` and `up --cloud` share: declared once, gathered into LaunchArgs.
_LAUNCH_OPTIONS: list[Callable[[Any], Any]] = [
    click.option(
        "--instance-type",
        "instance_type",
        type=NONEMPTY,
        metavar="T[,T2...]",
        help="EC2 type(s); a list is the fallback order.",
    ),
    click.option(
        "--gpu",
        type=NONEMPTY,
        metavar="NAME",
        help="GPU model; the cheapest type that fits is chosen (with --gpu-count).",
    ),
    # --gpu-count: the one spelling of a GPU count (resolve's too); --gpus is the old one
    click.option("--gpu-count", "gpus", type=int, metavar="N", help="GPUs per instance with --gpu (default 1)."),
    deprecated_alias("--gpus", "--gpu-count", "gpus", type=int),
    click.option("--count", type=int, default=1, show_default=True, help="Instances to launch."),
    click.option("--region", type=NONEMPTY, help="AWS region (default: the profile's or AWS_REGION)."),
    click.option("--spot", is_flag=True, help="Spot instances (one-time, terminate on interruption)."),
    click.option("--on-demand-fallback", is_flag=True, help="With --spot: on-demand when no spot capacity is left."),
    click.option(
        "--ttl",
        type=NONEMPTY,
        default="8h",
        show_default=True,
        help="Expiry written in provision:expires-at (30m, 8h, 2d).",
    ),
    click.option(
        "--ssh-cidr", type=NONEMPTY, metavar="CIDR", help="Who may reach port 22 (required; e.g. your-ip/32)."
    ),
    click.option(
        "--ssh-key", type=NONEMPTY, metavar="PUB", help=f"Public key to import (default {DEFAULT_KEY} when it exists)."
    ),
    click.option("--new-key", is_flag=True, help="Create a key pair; its private key goes 0600 into the run dir."),
    click.option("--ami", type=NONEMPTY, help="The image to boot (its OS given by --os for the SSH user)."),
    click.option(
        "--os", "os_name", type=NONEMPTY, default=None, help="ubuntu-22.04|ubuntu-24.04|debian-12|amzn-2023|rhel-9."
    ),
    click.option(
        "--base",
        type=click.Choice(["os", "dlami"]),
        default="os",
        show_default=True,
        help="dlami: the Deep Learning Base AMI with NVIDIA's driver already installed.",
    ),
    click.option("--root-gib", type=int, default=100, show_default=True, help="Root volume size (gp3, encrypted)."),
    click.option("--max-hourly-usd", type=float, help="Refuse a launch whose on-demand price is above this."),
    click.option(
        "--ssh-address",
        type=click.Choice(["public", "private"]),
        default="public",
        show_default=True,
        help="Which address goes into the inventory.",
    ),
]


def launch_options(func: F) -> F:
    """Declare the launch options and pass them to ``func`` as one ``launch: LaunchArgs``.

    ``--keep-on-failure`` is not among them: each command declares it and says what it keeps.
    """
    names = [f.name for f in fields(LaunchArgs) if f.name not in ("given", "keep_on_failure")]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        given = frozenset(n for n in names if ctx.get_parameter_source(n) not in (ParameterSource.DEFAULT, None))
        values = {n: kwargs.pop(n) for n in names}
        values["gpus"] = take_alias("gpus", values["gpus"])
        if values["gpus"] is not None:
            given |= {"gpus"}
        launch = LaunchArgs(**values, keep_on_failure=kwargs.get("keep_on_failure", False), given=given)
        return func(*args, launch=launch, **kwargs)

    decorated: Any = wrapper
    for option in reversed(_LAUNCH_OPTIONS):
        decorated = option(decorated)
    return cast(F, decorated)


@cloud.command(name="up")
@launch_options
@click.option("--keep-on-failure", is_flag=True, help="Leave what a failed launch created (for debugging).")
@click.option("--no-wait-ssh", is_flag=True, help="Return once status checks pass, without waiting for SSH.")
@yes_option("Launch without asking (needed with --json or without a terminal).")
@command_options
def up(*, launch: LaunchArgs, keep_on_failure: bool, no_wait_ssh: bool, yes: bool, as_json: bool) -> int:
    """Launch tagged GPU instances and write inventory/ec2-<run>.yml.

    Without --yes it says what it will launch (count, types, region, price per hour) and asks.
    """

    # prepare() is local: bad input costs nothing and creates nothing.
    prepared = launcher.prepare(launch, wait_ssh=not no_wait_ssh)
    warn_before_launch(prepared)  # before the question (or the refusal): what --ssh-cidr opens
    refuse_unasked(yes, as_json, "cloud up launches paid instances", "pass --yes to launch without asking")
    say = stderr_say(as_json)
    say(launcher.describe(prepared.request))
    if not yes:
        confirm_launch()
    with launcher.signals_as_interrupt(say):
        result = launcher.launch(prepared, launcher.connect(prepared), say)
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not cli.output)

    emit({"ok": True, **launcher.launch_json(result)}, as_json, lambda con: _up_human(con, result))
    return 0


def _up_human(con: Console, r: LaunchResult) -> None:
    for i in r.instances:
        con.print(f"{i.id}  {i.type}  {i.zone}  {i.market}  {i.public_ip or '-'}  {i.state}", soft_wrap=True)
    con.print(f"run {r.run} expires {r.expires_at}; inventory {r.inventory}", soft_wrap=True)
    con.print(f"next: provision probe -i {r.inventory}   then: provision cloud down --run {r.run}", soft_wrap=True)


@cloud.command(name="ls")
@click.option("--region", type=NONEMPTY, help="AWS region (default: the profile's or AWS_REGION).")
@command_options
def ls(region: str | None, as_json: bool) -> int:
    """List the instances provision launched, with price per hour, cost so far and expiry."""
    from datetime import datetime, timezone  # noqa: PLC0415 (start-up: `provision --help` loads this module, and datetime only this path)

    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not cli.output)

    client = open_region(region)
    reg = client.region
    with client.errors("listing instances"):
        items, skipped = client.listing()
    now = datetime.now(timezone.utc)
    doc = {
        "ok": True,
        "region": reg,
        "instances": [dict(i.to_json(), expired=i.expired(now)) for i in items],
        "usd_per_hour": round(sum(i.usd_per_hour or 0.0 for i in items), 4),
        "cost_so_far_usd": round(sum(i.cost_so_far_usd or 0.0 for i in items), 4),
        "unpriced": [i.id for i in items if i.usd_per_hour is None],
        # instances whose provision:run tag is not an id provision makes: not provision's, not listed
        "skipped": [s.to_json() for s in skipped],
    }
    emit(doc, as_json, lambda con: _ls_human(con, items, now, doc, skipped))
    return 0


def _ls_human(con: Console, items: list[CloudInstance], now: Any, doc: dict[str, Any], skipped: list[Skipped]) -> None:
    for s in skipped:
        con.print(s.line(), markup=False, soft_wrap=True)
    if not items:
        con.print(f"no provision instances in {doc['region']}")
        return
    # "on host": the instance powers itself off (and so terminates) at the expiry, see hostttl
    rows = [("run", "instance", "type", "market", "state", "address", "$/h", "cost $", "expires", "on host")]
    for i in items:
        left = (i.expires_at - now).total_seconds() / 3600 if i.expires_at else None
        rows.append(
            (
                i.run,
                i.id,
                i.type,
                i.market,
                i.state,
                i.public_ip or i.private_ip or "-",
                "?" if i.usd_per_hour is None else f"{i.usd_per_hour:.3f}",
                "?" if i.cost_so_far_usd is None else f"{i.cost_so_far_usd:.2f}",
                "never" if left is None else ("EXPIRED" if left <= 0 else f"in {left:.1f}h"),
                "armed" if i.ttl_on_host else "no",
            )
        )
    # Plain columns, never truncated: ids and addresses get copied from here.
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        con.print(
            "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip(),
            markup=False,
            soft_wrap=True,
        )
    unpriced = len(doc["unpriced"])
    con.print(
        f"total {doc['usd_per_hour']:.2f} $/h, {doc['cost_so_far_usd']:.2f} $ so far"
        + (f" (+ {unpriced} without a known price)" if unpriced else ""),
        soft_wrap=True,
    )


@cloud.command(name="down")
@click.option("--run", "run", type=NONEMPTY, metavar="ID", help="Terminate one run.")
@click.option("--expired", is_flag=True, help="Terminate every run past its provision:expires-at (cron-able).")
@click.option("--all", "all_runs", is_flag=True, help="Terminate everything provision launched in the region (asks).")
@click.option("--region", type=NONEMPTY, help="AWS region (default: the profile's or AWS_REGION).")
@yes_option("With --all: end without asking (needed with --json or without a terminal).")
@click.option("--dry-run", is_flag=True, help="Say what would be ended, and end nothing.")
@command_options
def down(
    *, run: str | None, expired: bool, all_runs: bool, region: str | None, yes: bool, dry_run: bool, as_json: bool
) -> int:
    """Terminate instances by run, expiry or all; then their security groups and key pairs.

    Only what provision made is ended: its provision-<run> key pair and security group, and the
    instances launched with both. Anything else tagged with a run is listed as skipped, with the
    reason, and left alone. --all says what it will end and asks (or takes --yes); --run ID
    (one run, named) and --expired (for cron: only what is past its TTL) do not ask.
    """
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not cli.output)
    from provision.ids import check_run_id  # noqa: PLC0415 (start-up: `provision --help` loads this module, not ids)

    if sum([run is not None, expired, all_runs]) != 1:
        raise BadInput(
            "say what to end: exactly one of --run ID, --expired, --all", "see 'provision cloud down --help'"
        )
    if run is not None:
        check_run_id(run)  # it names local paths: bad input before any AWS call
    client = open_region(region)  # local configuration only: no AWS call yet
    if dry_run:  # what would be ended, found as a real run finds it, then stopped before any change
        with client.errors("listing what would be ended"):
            try:
                # nothing of provision's to end: down returned without asking (and ended nothing)
                planned = client.down(run=run, expired=expired, all_runs=all_runs, workdir=Path.cwd(), confirm=_stop)
            except _Planned as stop:
                planned = stop.planned
        doc = {**_down_json(planned, client.region), "dry_run": True}
        emit(doc, as_json, lambda con: _down_human(con, planned, dry_run=True))
        return 0
    if all_runs:
        refuse_unasked(
            yes, as_json, "cloud down --all ends every run provision launched", "pass --yes to end them without asking"
        )
    reg = client.region
    with client.errors("ending instances"):
        res = client.down(
            run=run,
            expired=expired,
            all_runs=all_runs,
            workdir=Path.cwd(),
            confirm=None if (yes or not all_runs) else _confirm_down,
        )
    doc = _down_json(res, reg)
    emit(doc, as_json, lambda con: _down_human(con, res))
    return 0


def _down_json(r: DownResult, region: str) -> dict[str, Any]:
    return {
        "ok": True,
        "region": region,
        "runs": r.runs,
        "terminated": r.terminated,
        "security_groups": r.security_groups,
        "key_pairs": r.key_pairs,
        "local_files": r.local_files,
        "skipped": [s.to_json() for s in r.skipped],
    }


class _Planned(Exception):
    """`cloud down --dry-run`: what would be ended, raised before anything is."""

    def __init__(self, planned: DownResult) -> None:
        super().__init__("dry run")
        self.planned = planned


def _stop(planned: DownResult) -> None:
    raise _Planned(planned)


def _confirm_down(planned: DownResult) -> None:
    """What `cloud down --all` would end, with counts, then the question (on stderr, like `cloud up`)."""
    from provision.cli.output import console  # noqa: PLC0415 (start-up: `provision up --help` loads this module, not cli.output)

    left = len(planned.skipped)
    console(stderr=True).print(
        f"about to end {len(planned.runs)} run(s) ({', '.join(planned.runs)}): terminate "
        f"{len(planned.terminated)} instance(s) ({', '.join(sorted(planned.terminated)) or 'none'}), delete "
        f"{len(planned.security_groups)} security group(s) and {len(planned.key_pairs)} key pair(s)"
        + (f"; {left} tagged resource(s) provision did not make are left alone (listed after)" if left else ""),
        markup=False,
        soft_wrap=True,
    )
    ask_first("end them?", "nothing was ended: the teardown was not confirmed")


def _down_human(con: Console, r: DownResult, *, dry_run: bool = False) -> None:
    for s in r.skipped:
        con.print(s.line(), markup=False, soft_wrap=True)
    if not r.runs:
        con.print("nothing to end")
        return
    if dry_run:
        con.print(
            f"would end run(s) {', '.join(r.runs)}: terminate {len(r.terminated)} instance(s) "
            f"({', '.join(sorted(r.terminated))}), delete {len(r.security_groups)} security group(s), "
            f"{len(r.key_pairs)} key pair(s); nothing was ended (--dry-run)",
            markup=False,
            soft_wrap=True,
        )
        return
    con.print(
        f"ended run(s) {', '.join(r.runs)}: terminated {len(r.terminated)} instance(s), "
        f"deleted {len(r.security_groups)} security group(s), {len(r.key_pairs)} key pair(s)"
    )
