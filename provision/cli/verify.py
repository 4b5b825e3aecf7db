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

from provision.cli.options import (
    NONEMPTY,
    command_options,
    connect_timeout_option,
    lock_option,
    parallel_option,
    ssh_options,
    target_options,
    timeout_option,
)
from provision.errors import ExitCode
from provision.model.defaults import DEFAULT_VENV

if TYPE_CHECKING:
    from rich.console import Console

    from provision.fleet.verify import HostResult


@click.command(name="verify")
@target_options(
    local="Verify the machine provision runs on (the default).",
    inventory="Verify the hosts of an Ansible inventory (INI or YAML).",
)
@lock_option("Compare installed versions with this provision.lock.")
@click.option(
    "--venv",
    type=NONEMPTY,
    metavar="PATH",
    help=f"Run the job with this venv's Python (default: {DEFAULT_VENV} when present, "
    "else python3 on hosts and this Python locally).",
)
@click.option("--allow-cpu", is_flag=True, help="Let a host without a usable GPU pass on the CPU (CI, laptops).")
@ssh_options()
@timeout_option(900.0, "Give up on a host whose job runs longer.", minimum=10)
@parallel_option(16, "Hosts verified at once.")
@click.option(
    "--multi-host",
    is_flag=True,
    help="Also run the all-reduce and DDP check across all hosts at once (torchrun, c10d; needs -i).",
)
@connect_timeout_option()
@command_options
def verify(
    *,
    local: bool,
    inventory: str | None,
    lock_path: Path | None,
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
    from provision.fleet import verify as api  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.verify)

    lock = api.load_lock(lock_path) if lock_path is not None else None
    from provision.fleet.targets import select_targets  # noqa: PLC0415 (start-up: `provision verify --help` loads this module, not fleet.targets)

    targets = select_targets(local, inventory, hint="verify this machine or an inventory's hosts").targets
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
        host_lock=True,
    )
    for r in outcome.all_results:
        if r.error is not None:
            sys.stderr.write(r.error.one_line() + "\n")
    doc = outcome.hosts[0].to_json() if inventory is None else api.fleet_json(outcome.hosts, outcome.multihost)
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision verify --help` loads this module, not cli.output)

    emit(doc, as_json, lambda console: _human(console, outcome.all_results))
    return int(ExitCode.OK if outcome.ok else ExitCode.FAILED)


def _human(console: Console, results: list[HostResult]) -> None:
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    from provision.fleet.verify import failures, table_row  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.verify)

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
