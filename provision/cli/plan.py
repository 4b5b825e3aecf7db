"""`provision plan`: resolve per host, write provision.lock and the Ansible run dir; change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from provision.cli.options import (
    command_options,
    config_option,
    lock_option,
    parse_sets,
    reboot_controller_option,
    set_option,
    ssh_options,
    target_options,
)

if TYPE_CHECKING:
    from rich.console import Console

    from provision.fleet.planning import PlanResult


@click.command(name="plan")
@target_options(
    local="Plan for the machine provision runs on (probed).",
    inventory="Plan for an Ansible inventory's hosts (probed).",
)
@click.option(
    "--assume",
    metavar="FACTS",
    help="Do not contact hosts; assume os=ID-VERSION,gpu=NAME:COUNT[,arch=,nvswitch=N,python=X.Y,name=HOST].",
)
@config_option()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".provision/run"),
    show_default=True,
    help="The run dir to write.",
)
@lock_option("Where to write the lock.", default=Path("provision.lock"))
@set_option("Set a role variable in the run dir (mirrors, air-gapped repositories); repeatable.")
@reboot_controller_option()
@ssh_options()
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
        overrides=parse_sets(sets),
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
