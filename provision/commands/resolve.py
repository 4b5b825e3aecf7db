"""`provision resolve`: Show what would be installed for a described host (no host contact)."""

from provision.commands._pending import pending_command

resolve = pending_command("resolve", "Show what would be installed for a described host (no host contact).")
