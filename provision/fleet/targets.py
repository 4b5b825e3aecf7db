"""Which hosts a command acts on: ``--local``, ``HOST...`` or ``-i INVENTORY``, the one selector
every command uses (``--cloud`` is the command line's: provision/cli/up.py).

Checked before any host is contacted: a mix of targets is bad input (exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput

if TYPE_CHECKING:
    from provision.hosts.inventory import HostTarget, Inventory


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


@dataclass(frozen=True)
class HostDefaults:
    """What the command line says of every host whose inventory says nothing of it, as
    ansible-playbook's flags do: ``-u USER``, ``--private-key FILE``, and ``-K``'s sudo password
    (asked at the terminal). An inventory's own value wins, as a host variable beats these flags in
    Ansible. The password then travels the path an inventory's password takes (the play's prompt,
    answered from memory by ansible-runner; never a file, an environment or a log)."""

    user: str | None = None
    key_file: str | None = None
    become_password: str | None = field(default=None, repr=False)

    def fill(self, target: HostTarget) -> HostTarget:
        changes: dict[str, Any] = {}
        if self.become_password is not None and target.become_password is None:
            changes["vars"] = {**target.vars, "ansible_become_password": self.become_password}
        if not target.local:  # this machine is reached without SSH: no login, no key
            if self.user is not None and target.user is None:
                changes["user"] = self.user
            if self.key_file is not None and target.key_file is None:
                changes["key_file"] = self.key_file
        return replace(target, **changes) if changes else target


def select_targets(
    local: bool,
    inventory: str | None,
    hosts: Sequence[str] | None = None,
    *,
    hint: str,
    defaults: HostDefaults | None = None,
) -> Inventory:
    """``--local | HOST... | -i INVENTORY`` -> the hosts and, with ``-i``, the inventory's groups
    (none given: this machine); BadInput for a mix (:func:`check_one_source`); ``defaults`` (the
    command line's -u, --private-key, -K) filled in where a host has none."""
    from provision.hosts.inventory import LOCALHOST, Inventory, parse_hosts, read_inventory  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.inventory)

    check_one_source(local, inventory, hosts, hint=hint)
    if hosts:
        chosen = Inventory(parse_hosts(hosts), {})
    elif inventory:
        chosen = read_inventory(inventory)
    else:
        chosen = Inventory([LOCALHOST], {})
    if defaults is None:
        return chosen
    return replace(chosen, targets=[defaults.fill(t) for t in chosen.targets])
