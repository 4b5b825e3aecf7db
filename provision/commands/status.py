"""`provision status`: List the fleet and, with --check-drift, what drifted from the lock."""

from provision.commands._pending import pending_command

status = pending_command("status", "List the fleet and, with --check-drift, what drifted from the lock.")
