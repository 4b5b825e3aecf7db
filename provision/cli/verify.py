"""`provision verify`: run the bundled smoke job on each host and compare what is installed with the lock.

Exit status: 0 when every host passes, 1 when a host fails (or has no usable GPU, or cannot be
reached), 2 for bad input (lock, inventory, venv), all of which is checked before any host runs
the job.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from provision.cli.app import command_options
from provision.errors import BadInput, ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from provision.fleet.verify import HostResult
    from provision.hosts.inventory import HostTarget


def select_targets(local: bool, inventory: str | None) -> list[HostTarget]:
    from provision.hosts.inventory import LOCALHOST, load_inventory

    if local and inventory is not None:
        raise BadInput("give one of --local or -i INVENTORY, not both", "verify this machine or an inventory's hosts")
    return load_inventory(inventory) if inventory is not None else [LOCALHOST]


@click.command(name="verify")
@click.option("--local", is_flag=True, help="Verify the machine provision runs on (the default).")
@click.option("-i", "--inventory", metavar="INVENTORY", help="Verify the hosts of an Ansible inventory (INI or YAML).")
@click.option("--lock", "lock_path", metavar="FILE", help="Compare installed versions with this provision.lock.")
@click.option(
    "--venv",
    metavar="PATH",
    help="Run the job with this venv's Python (default: /opt/provision/venv when present, "
    "else python3 on hosts and this Python locally).",
)
@click.option("--allow-cpu", is_flag=True, help="Let a host without a usable GPU pass on the CPU (CI, laptops).")
@click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Record the key of a host not yet in known_hosts (a changed key is still refused).",
)
@click.option(
    "-F",
    "--ssh-config",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="SSH config file to read instead of ~/.ssh/config.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=10),
    default=900.0,
    show_default=True,
    metavar="SECONDS",
    help="Give up on a host whose job runs longer.",
)
@click.option("--parallel", type=click.IntRange(min=1), default=16, show_default=True, help="Hosts verified at once.")
@click.option(
    "--multi-host",
    is_flag=True,
    help="Also run the all-reduce and DDP check across all hosts at once (torchrun, c10d; needs -i).",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Give up on a host that does not answer SSH within this time.",
)
@command_options
def verify(
    *,
    local: bool,
    inventory: str | None,
    lock_path: str | None,
    venv: str | None,
    allow_cpu: bool,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
    timeout: float,
    multi_host: bool,
    connect_timeout: float,
    parallel: int,
    as_json: bool,
) -> int:
    """Run the bundled smoke job on each host and compare against the lock.

    The job checks that torch sees every GPU, that each GPU is healthy (ECC, remapped rows,
    throttling, PCIe link, temperature) and as fast as its model should be (GEMM, memory and
    PCIe bandwidth against 0.75 x a reference), that a small CNN trains, and that DDP works
    across the GPUs. With --lock, a version that differs from the lock fails the host (drift).

    Exit status: 0 every host passes, 1 a host failed, 2 bad input.
    """
    from provision.fleet import verify as api

    lock = api.load_lock(lock_path) if lock_path is not None else None
    targets = select_targets(local, inventory)
    connect = api.default_connect(
        accept_new_host_keys=accept_new_host_keys, ssh_config=ssh_config, connect_timeout=connect_timeout
    )
    outcome = api.verify(
        targets,
        lock=lock,
        venv=venv,
        allow_cpu=allow_cpu,
        multi_host=multi_host,
        connect=connect,
        parallel=parallel,
        timeout=timeout,
    )
    for r in outcome.all_results:
        if r.error is not None:
            sys.stderr.write(r.error.one_line() + "\n")
    doc = outcome.hosts[0].to_json() if inventory is None else api.fleet_json(outcome.hosts, outcome.multihost)
    from provision.cli.output import emit

    emit(doc, as_json, lambda console: _human(console, outcome.all_results))
    return int(ExitCode.OK if outcome.ok else ExitCode.FAILED)


def _human(console: Console, results: list[HostResult]) -> None:
    from rich.table import Table

    from provision.fleet.verify import failures, table_row

    table = Table(title=None, show_edge=False, pad_edge=False)
    for header, justify in (
        ("host", "left"),
        ("GPUs", "left"),
        ("verdict", "left"),
        ("GEMM TFLOP/s", "right"),
        ("bandwidth GB/s", "right"),
        ("samples/s", "right"),
        ("util", "right"),
    ):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    colours = {"pass": "green", "fail": "red", "no-gpu": "yellow"}
    for r in results:
        row = table_row(r)
        verdict = f"[{colours.get(row['verdict'], 'red')}]{row['verdict']}[/]"
        table.add_row(row["host"], row["gpus"], verdict, row["gemm"], row["bandwidth"], row["samples"], row["util"])
    console.print(table)
    for r in results:
        for line in failures(r):
            console.print(f"{r.host}: {line}", markup=False)
        for w in (r.report or {}).get("warnings", []):
            console.print(f"{r.host}: warning: {w['message']}", markup=False)
