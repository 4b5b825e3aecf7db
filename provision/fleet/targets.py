"""Which hosts a command acts on: ``--local``, ``HOST...`` or ``-i INVENTORY``, the one selector
every command uses (``--cloud`` is the command line's: provision/cli/up.py).

Checked before any host is contacted: a mix of targets is bad input (exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from provision.errors import BadInput

if TYPE_CHECKING:
    from provision.hosts.inventory import Inventory


def check_one_source(local: bool, inventory: str | None, hosts: Sequence[str] | None = None, *, hint: str) -> None:
    """At most one of ``--local``, ``HOST...`` and ``-i INVENTORY``; BadInput for a mix.

    ``hosts`` is None for a command that takes no ``HOST...`` arguments; ``hint`` says what the
    command can act on, for the error.
    """
    chosen = (("--local", local), ("HOST", bool(hosts)), ("-i", bool(inventory)))
    given = [name for name, on in chosen if on]
    if len(given) <= 1:
        return
    if hosts is None:
        raise BadInput("give --local or -i INVENTORY, not both", hint)
    offered = ["--local", "HOST...", "-i INVENTORY"]
    raise BadInput(f"give one of {', '.join(offered[:-1])} or {offered[-1]}, not {' and '.join(given)}", hint)


def select_targets(local: bool, inventory: str | None, hosts: Sequence[str] | None = None, *, hint: str) -> Inventory:
    """``--local | HOST... | -i INVENTORY`` -> the hosts and, with ``-i``, the inventory's groups
    (none given: this machine); BadInput for a mix (:func:`check_one_source`)."""
    from provision.hosts.inventory import LOCALHOST, Inventory, parse_hosts, read_inventory  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.inventory)

    check_one_source(local, inventory, hosts, hint=hint)
    if hosts:
        return Inventory(parse_hosts(hosts), {})
    if inventory:
        return read_inventory(inventory)
    return Inventory([LOCALHOST], {})
