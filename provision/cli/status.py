"""`provision status`: the fleet as the state DB remembers it; with --check-drift, what drifted.

Exit status: 0 listed (and nothing drifted), 1 a host drifted or could not be probed, 2 bad input.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.app import command_options
from provision.errors import BadInput, ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from provision.hosts.probe import HostFacts


def observed_versions(facts: HostFacts) -> dict[str, str | None]:
    """What a probe saw, keyed like :func:`provision.stack.drift.drift`'s input."""
    observed: dict[str, str | None] = {"driver": facts.driver.version}
    for name, version in facts.frameworks().items():
        observed[name] = version
    if facts.venv is not None:  # a venv that lacks a locked framework: "not installed"
        for name in ("torch", "tensorflow", "jax"):
            observed.setdefault(name, None)
    if facts.cuda_toolkits:
        observed["cuda_toolkit"] = facts.cuda_toolkits[0].version
    return observed


def _when(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else None


@click.command(name="status")
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="provision.yaml: its state.path and install.venv, as `up` used them.",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The fleet state DB (default: state.path in the config, else .provision/state.db).",
)
@click.option("--check-drift", is_flag=True, help="Probe the hosts and name every version that left the lock.")
@click.option("--local", is_flag=True, help="With --check-drift: the hosts are this machine.")
@click.option("-i", "--inventory", metavar="INVENTORY", help="With --check-drift: how to reach the hosts.")
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
    metavar="PATH",
    help="With --check-drift: the venv whose frameworks are compared (default: install.venv "
    "in the config, else /opt/provision/venv).",
)
@click.option("--accept-new-host-keys", is_flag=True, help="Record the key of a host not yet in known_hosts.")
@click.option("-F", "--ssh-config", type=click.Path(dir_okay=False, path_type=Path), help="SSH config file.")
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
    """List the fleet from the state DB: lock applied, last verdict, when, last run.

    With --check-drift (and -i INVENTORY or --local to reach the hosts) each host is probed and
    compared with the lock of its last run; every version that differs is named.
    """
    from provision.config import Config, load_config
    from provision.fleet.state import State
    from provision.fleet.state import state_path as where_state

    config = load_config(config_path) if config_path is not None else Config()
    path = where_state(state_path, config.state.path)
    if (state_path is not None or config.state.path) and not path.exists():
        source = "--state" if state_path is not None else f"state.path in {config_path}"
        raise BadInput(
            f"no state database at {path} ({source})",
            "run `provision up` with the same --state / config first, or fix the path",
        )
    if check_drift and not (local or inventory):
        raise BadInput("--check-drift needs to reach the hosts", "give -i INVENTORY or --local")
    if local and inventory:
        raise BadInput("give --local or -i INVENTORY, not both", "check drift on this machine or an inventory's hosts")
    from provision.fleet.planning import check_ssh_config

    check_ssh_config(ssh_config)
    state = State(path)
    try:
        rows = state.hosts()
    finally:
        state.close()
    hosts: list[dict[str, Any]] = [
        {
            "host": r.host,
            "lock_hash": r.lock_hash,
            "applied_at": _when(r.applied_at),
            "verdict": r.verdict,
            "verified_lock_hash": r.verified_lock_hash,
            "verified_at": _when(r.verified_at),
            "last_run": r.last_run,
            "converged": r.lock_hash is not None and r.converged(r.lock_hash),
        }
        for r in rows
    ]
    ok = True
    if check_drift:
        ok = _check_drift(hosts, runs_dir, inventory, venv or config.install.venv, accept_new_host_keys, ssh_config)
    doc = {"ok": ok, "state": str(path), "hosts": hosts}
    from provision.cli.output import emit

    emit(doc, as_json, lambda con: _human(con, hosts, check_drift))
    return int(ExitCode.OK if ok else ExitCode.FAILED)


def _check_drift(  # noqa: PLR0917
    hosts: list[dict[str, Any]],
    runs_dir: Path,
    inventory: str | None,
    venv: str,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
) -> bool:
    from provision.hosts.gather import GatherOptions, matrix_lookup, probe_hosts
    from provision.hosts.inventory import LOCALHOST, load_inventory
    from provision.stack.drift import drift
    from provision.stack.lock import find_group, read_lock

    targets = {t.name: t for t in (load_inventory(inventory) if inventory else [LOCALHOST])}
    known = [h for h in hosts if h["host"] in targets and h["last_run"]]
    options = GatherOptions.from_env(venv=venv, lookup=matrix_lookup())
    results = probe_hosts(
        [targets[h["host"]] for h in known], options, accept_new_host_keys=accept_new_host_keys, ssh_config=ssh_config
    )
    ok = True
    for h, r in zip(known, results, strict=True):
        lock_path = runs_dir / str(h["last_run"]) / "provision.lock"
        if r.error is not None or r.facts is None:
            h["drift"], h["error"] = None, r.error.one_line() if r.error else "no facts"
            ok = False
            continue
        if not lock_path.exists():
            h["drift"], h["error"] = None, f"the lock of run {h['last_run']} is gone ({lock_path})"
            ok = False
            continue
        group = find_group(read_lock(lock_path), h["host"])
        found = drift(group, observed_versions(r.facts)) if group is not None else []
        h["drift"] = [d.to_json() for d in found]
        h["drift_text"] = [str(d) for d in found]
        ok = ok and not found
    for h in hosts:
        if h["host"] not in targets:
            h.setdefault("drift", None)
            h.setdefault("error", "not in the given inventory: not probed")
    return ok


def _human(con: Console, hosts: list[dict[str, Any]], check_drift: bool) -> None:
    from rich.table import Table

    if not hosts:
        con.print("no hosts yet: run `provision up`", markup=False)
        return
    table = Table(show_edge=False)
    columns = ["host", "verdict", "converged", "applied", "verified", "last run"] + (["drift"] if check_drift else [])
    for c in columns:
        table.add_column(c)
    for h in hosts:
        row = [
            h["host"],
            str(h["verdict"]),
            "yes" if h["converged"] else "no",
            str(h["applied_at"] or "-"),
            str(h["verified_at"] or "-"),
            str(h["last_run"] or "-"),
        ]
        if check_drift:
            row.append(h.get("error") or ("; ".join(h.get("drift_text") or []) or "none"))
        table.add_row(*row)
    con.print(table)
