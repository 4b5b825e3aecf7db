"""Which hosts a command acts on: ``--local``, ``HOST...``, ``-i INVENTORY`` or ``--cloud``.

Checked before any host is contacted and before anything is launched: a mix of targets, or a
launch option without ``--cloud``, is bad input (exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from provision.errors import BadInput

if TYPE_CHECKING:
    from provision.cloud.launcher import LaunchArgs
    from provision.hosts.inventory import HostTarget


def select_targets(
    local: bool, inventory: str | None, hosts: Sequence[str] | None = None, *, hint: str
) -> list[HostTarget]:
    """``--local | HOST... | -i INVENTORY`` -> targets (none given: this machine); BadInput for a mix.

    ``hosts`` is None for a command that takes no ``HOST...`` arguments; ``hint`` says what the
    command can act on, for the error.
    """
    from provision.hosts.inventory import LOCALHOST, load_inventory, parse_hosts

    chosen = (("--local", local), ("HOST", bool(hosts)), ("-i", inventory is not None))
    given = [name for name, on in chosen if on]
    if len(given) > 1:
        offered = ["--local", *(["HOST..."] if hosts is not None else []), "-i INVENTORY"]
        raise BadInput(f"give one of {', '.join(offered[:-1])} or {offered[-1]}, not {' and '.join(given)}", hint)
    if hosts:
        return parse_hosts(hosts)
    if inventory is not None:
        return load_inventory(inventory)
    return [LOCALHOST]


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
    needs_cloud = sorted("--" + {"os_name": "os"}.get(n, n).replace("_", "-") for n in launch.given)
    needs_cloud += ["--down-after"] * down_after + ["--keep-on-failure"] * keep_on_failure
    if needs_cloud:
        raise BadInput(f"{', '.join(needs_cloud)}: only with --cloud", "add --cloud to launch instances, or drop them")
    if not local and inventory is None:
        raise BadInput("nothing to provision", "give --local, -i INVENTORY or --cloud")
