"""`provision plan`: resolve per host, write provision.lock and the Ansible run dir; change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.app import command_options
from provision.errors import BadInput

if TYPE_CHECKING:
    from rich.console import Console

    from provision.fleet.planning import PlanResult


def _overrides(pairs: tuple[str, ...]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep:
            raise BadInput(
                f"--set {pair!r} is not NAME=VALUE",
                "write e.g. --set nvidia_driver_repo_url=http://mirror/cuda/repos/ubuntu2204/x86_64",
            )
        try:
            out[name.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            raise BadInput(f"--set {name}: the value is not YAML", "quote strings; lists as [a, b]") from None
    return out


@click.command(name="plan")
@click.option("--local", is_flag=True, help="Plan for the machine provision runs on (probed).")
@click.option("-i", "--inventory", metavar="INVENTORY", help="Plan for an Ansible inventory's hosts (probed).")
@click.option(
    "--assume",
    metavar="FACTS",
    help="Do not contact hosts; assume os=ID-VERSION,gpu=NAME:COUNT[,arch=,nvswitch=N,python=X.Y,name=HOST].",
)
@click.option("-c", "--config", "config_path", type=click.Path(path_type=Path), help="provision.yaml.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".provision/run"),
    show_default=True,
    help="The run dir to write.",
)
@click.option(
    "--lock",
    "lock_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("provision.lock"),
    show_default=True,
    help="Where to write the lock.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="VAR=VALUE",
    help="Set a role variable in the run dir (mirrors, air-gapped repositories); repeatable.",
)
@click.option(
    "--reboot-controller",
    is_flag=True,
    help="Allow rebooting the machine that runs Ansible (--local) when the driver needs it.",
)
@click.option("--accept-new-host-keys", is_flag=True, help="Record the key of a host not yet in known_hosts.")
@click.option("-F", "--ssh-config", type=click.Path(dir_okay=False, path_type=Path), help="SSH config file.")
@command_options
def plan(
    *,
    local: bool,
    inventory: str | None,
    assume: str | None,
    config_path: Path | None,
    out: Path,
    lock_path: Path,
    sets: tuple[str, ...],
    reboot_controller: bool,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
    as_json: bool,
) -> int:
    """Resolve per host, write provision.lock and the Ansible run dir; no host is changed.

    Then `cd OUT && ansible-playbook site.yml` applies it with plain Ansible. With --assume the
    hosts are not contacted (with -i: the inventory's hosts, all assumed alike).
    Exit status: 0 planned, 1 a host could not be probed, 2 bad input, 3 unsatisfiable.
    """
    from provision.config import Config, load_config
    from provision.fleet.planning import parse_assume
    from provision.fleet.planning import plan as run_plan

    config = load_config(config_path) if config_path is not None else Config()
    result = run_plan(
        config=config,
        local=local,
        inventory=inventory,
        assume=parse_assume(assume) if assume else None,
        out=out,
        lock_path=lock_path,
        overrides=_overrides(sets),
        reboot_controller=reboot_controller,
        accept_new_host_keys=accept_new_host_keys,
        ssh_config=ssh_config,
    )
    from provision.cli.output import emit

    emit(result.to_json(), as_json, lambda con: _human(con, result))
    return 0


def _human(con: Console, result: PlanResult) -> None:
    for h in result.hosts:
        con.print(f"[bold]{h.host}[/bold]  (group {h.group})", markup=True)
        if h.probed:
            fw = ", ".join(f"{k} {v}" for k, v in (h.present.get("frameworks") or {}).items())
            now = f"driver {h.present.get('driver') or 'none'}" + (f"; {fw}" if fw else "")
        else:
            now = "not probed (--assume)"
        con.print(f"  there now:    {now}", markup=False)
        con.print("  will install: " + ("\n                ".join(h.changes) or "nothing"), markup=False)
        con.print(f"  reboot:       {h.reboot}", markup=False)
    for g in result.groups:
        for w in g["warnings"]:
            con.print(f"warning ({g['name']}): {w['message']}", markup=False)
    con.print(f"lock: {result.lock_path}", markup=False)
    con.print(f"apply: cd {result.out} && ansible-playbook site.yml", markup=False)
