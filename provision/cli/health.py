"""`provision health`: ask every host's provision-health at once and show the fleet.

Exit status (the CLI contract, /DESIGN's: 2 is bad input only): 0 every host is healthy; 1 a host
is unhealthy, could not tell (its program answered `unknown`), has no provision-health, or could
not be reached; 2 bad input (inventory, --limit, state), checked before any host is asked. The
JSON's per-host ``status`` tells those apart. Each answer is recorded in the state DB, and
`provision status` shows it beside the last verify.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from provision.cli.options import (
    command_options,
    config_option,
    connect_timeout_option,
    limit_option,
    parallel_option,
    ssh_options,
    state_option,
    target_options,
    timeout_option,
)
from provision.errors import ExitCode
from provision.model.defaults import HEALTH_PARALLEL, HEALTH_TIMEOUT_S

if TYPE_CHECKING:
    from rich.console import Console

    from provision.fleet.health import HostHealth


@click.command(name="health")
@target_options(
    local="Check the machine provision runs on (the default).",
    inventory="Check the hosts of an Ansible inventory (INI or YAML).",
)
@limit_option()
@config_option("provision.yaml: its state.path, where each host's answer is recorded.")
@state_option()
@ssh_options()
@timeout_option(HEALTH_TIMEOUT_S, "Give up on a host whose provision-health has not answered by then.", minimum=1)
@parallel_option(HEALTH_PARALLEL, "Hosts asked at once.")
@connect_timeout_option()
@command_options
def health(
    *,
    local: bool,
    inventory: str | None,
    limit: str | None,
    config_path: Path | None,
    state_path: Path | None,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
    timeout: float,
    parallel: int,
    connect_timeout: float,
    as_json: bool,
) -> int:
    """Run provision-health on each host and show the fleet: host, verdict, problems, lock hash.

    provision-health, which `provision up` installs on every host it applies, compares the host
    with the lock applied there and its last verify (driver loaded and installed, GPUs, ECC and
    row remapping, Xid events, Fabric Manager, the venv's distributions) in under two seconds.

    Exit status: 0 every host healthy, 1 a host unhealthy, unknown or unreachable, 2 bad input.
    """
    from provision.config import Config, load_config  # noqa: PLC0415 (start-up: `provision --help` loads this module, not config)
    from provision.fleet import health as api  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.health)
    from provision.fleet.planning import check_ssh_config  # noqa: PLC0415 (start-up: `provision health --help` loads this module, not fleet.planning)
    from provision.fleet.state import State  # noqa: PLC0415 (start-up: as above)
    from provision.fleet.state import state_path as where_state  # noqa: PLC0415 (start-up: as above)
    from provision.fleet.targets import select_targets  # noqa: PLC0415 (start-up: as above)
    from provision.fleet.up import apply_limit, limit_patterns  # noqa: PLC0415 (start-up: as above)
    from provision.fleet.verify import default_connect  # noqa: PLC0415 (start-up: as above)

    config = load_config(config_path) if config_path is not None else Config()
    check_ssh_config(ssh_config)
    targets = select_targets(local, inventory, hint="check this machine or an inventory's hosts").targets
    names = apply_limit([t.name for t in targets], limit_patterns(limit))
    state = State(where_state(state_path, config.state.path))  # before any host: a bad path is bad input
    connect = default_connect(
        accept_new_host_keys=accept_new_host_keys, ssh_config=ssh_config, connect_timeout=connect_timeout
    )
    try:
        results = api.check_hosts(
            [t for t in targets if t.name in set(names)], connect, parallel=parallel, timeout=timeout
        )
        for r in results:
            state.record_health(r.host, r.status, r.problems or ([r.error] if r.error else []), r.lock_hash)
    finally:
        state.close()
    for r in results:
        if r.error is not None:
            sys.stderr.write(r.error + "\n")
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision health --help` loads this module, not cli.output)

    emit(api.fleet_json(results), as_json, lambda console: _human(console, results))
    return int(ExitCode.OK if api.fleet_ok(results) else ExitCode.FAILED)


def _human(console: Console, results: list[HostHealth]) -> None:
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table is printed, not for --json or --help)

    table = Table(title=None, show_edge=False, pad_edge=False)
    for header in ("host", "verdict", "problems", "lock"):
        table.add_column(header)
    colours = {"healthy": "green", "unhealthy": "red"}
    for r in results:
        verdict = f"[{colours.get(r.status, 'yellow')}]{r.status}[/]"
        table.add_row(r.host, verdict, r.line() or "-", r.lock_hash or "-")
    console.print(table)
