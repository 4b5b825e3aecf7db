"""`provision status`: the fleet as the state DB remembers it; with --check-drift, what drifted.

Exit status: 0 listed (and nothing drifted; also when there is no state yet), 1 a host drifted or
could not be probed, 2 bad input. It only reads: no state DB is created, none is written to.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import NONEMPTY, command_options, config_option, ssh_options, state_option, target_options
from provision.errors import BadInput, ExitCode
from provision.fleet.targets import check_one_source
from provision.model.defaults import DEFAULT_VENV

if TYPE_CHECKING:
    from rich.console import Console


@click.command(name="status")
@config_option("provision.yaml: its state.path and install.venv, as `up` used them.")
@state_option()
@click.option("--check-drift", is_flag=True, help="Probe the hosts and name every version that left the lock.")
@target_options(
    local="With --check-drift: the hosts are this machine.", inventory="With --check-drift: how to reach the hosts."
)
@click.option(
    "--runs",
    "runs_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".provision/runs"),
    show_default=True,
    help="Where up keeps runs and locks.",
)
@click.option(
    "--venv",
    type=NONEMPTY,
    metavar="PATH",
    help="With --check-drift: the venv whose frameworks are compared (default: install.venv "
    f"in the config, else {DEFAULT_VENV}).",
)
@ssh_options()
@command_options
def status(
    *,
    config_path: Path | None,
    state_path: Path | None,
    check_drift: bool,
    local: bool,
    inventory: str | None,
    runs_dir: Path,
    venv: str | None,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
    as_json: bool,
) -> int:
    """List the fleet from the state DB: the lock applied and the one before, whether a rollback is
    possible, the last verdict, when, last health, last run.

    With --check-drift (and -i INVENTORY or --local to reach the hosts) each host is probed and
    compared with the lock of its last run; every version that differs is named.
    """
    from provision.config import Config, load_config  # noqa: PLC0415 (start-up: `provision --help` loads this module, not config)
    from provision.fleet.planning import check_ssh_config  # noqa: PLC0415 (start-up: `provision status --help` loads this module, not fleet.planning)
    from provision.fleet.status import check_drift as run_check_drift  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.status)
    from provision.fleet.status import fleet_hosts, locate_state  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.status)

    config = load_config(config_path) if config_path is not None else Config()
    path = locate_state(state_path, config.state.path, config_path)
    if check_drift and not (local or inventory):
        raise BadInput("--check-drift needs to reach the hosts", "give -i INVENTORY or --local")
    check_one_source(local, inventory, hint="check drift on this machine or an inventory's hosts")
    check_ssh_config(ssh_config)
    known = fleet_hosts(path)  # None: no state DB yet (the default path; a named one must exist)
    hosts = known or []
    ok = True
    if check_drift and hosts:
        ok = run_check_drift(hosts, runs_dir, inventory, venv or config.install.venv, accept_new_host_keys, ssh_config)
    doc = {"ok": ok, "state": str(path), "state_exists": known is not None, "hosts": hosts}
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision status --help` loads this module, not cli.output)

    emit(doc, as_json, lambda con: _human(con, hosts, check_drift, None if known is not None else path))
    return int(ExitCode.OK if ok else ExitCode.FAILED)


def _human(con: Console, hosts: list[dict[str, Any]], check_drift: bool, missing: Path | None) -> None:
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    if missing is not None:
        con.print(f"no state yet ({missing} does not exist): run `provision up`", markup=False)
        return
    if not hosts:
        con.print("no hosts yet: run `provision up`", markup=False)
        return
    table = Table(show_edge=False)
    columns = [
        "host",
        "lock",
        "before",
        "rollback",
        "verdict",
        "converged",
        "applied",
        "verified",
        "health",
        "last run",
    ]
    columns += ["drift"] if check_drift else []
    for c in columns:  # a lock hash folds onto a second line in a narrow terminal, never cut short
        table.add_column(c, overflow="fold" if c in {"lock", "before", "rollback"} else "ellipsis")
    for h in hosts:
        row = [
            h["host"],
            str(h["lock_hash"] or "-")
            + (f" (rolled back from {h['rolled_back_from']})" if h["rolled_back_from"] else ""),
            str(h["previous_lock_hash"] or "-"),
            _rollback_cell(h["rollback"]),
            str(h["verdict"]),
            "yes" if h["converged"] else "no",
            str(h["applied_at"] or "-"),
            str(h["verified_at"] or "-"),
            _health_cell(h.get("health")),
            str(h["last_run"] or "-"),
        ]
        if check_drift:
            row.append(h.get("error") or ("; ".join(h.get("drift_text") or []) or "none"))
        table.add_row(*row)
    con.print(table)


def _rollback_cell(rollback: dict[str, Any]) -> str:
    """What `provision rollback` would re-apply: the lock of the host's last other passing run."""
    return f"to {rollback['lock_hash']}" if rollback["possible"] else "no"


def _health_cell(health: dict[str, Any] | None) -> str:
    """The last `provision health`: its status and time, then what it named."""
    if health is None:
        return "-"
    problems = "; ".join(health["problems"])
    return f"{health['status']} {health['checked_at']}" + (f": {problems}" if problems else "")
