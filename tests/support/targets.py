"""Test hosts as provision's targets, for the tests that connect to them."""

from __future__ import annotations

from provision.hosts.inventory import HostTarget
from tests.hosts import harness


def target_for(hostset: harness.HostSet, host: harness.TestHost, user: str, key: bool = True) -> HostTarget:
    """A test host as an inventory would give it: address, user, the set's key and known_hosts."""
    return HostTarget(
        host.name,
        host.address,
        user=user,
        key_file=str(hostset.key) if key else None,
        vars={"ansible_ssh_common_args": f"-o UserKnownHostsFile={hostset.known_hosts}"},
    )
