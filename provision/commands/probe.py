"""`provision probe`: Collect facts from the local machine or SSH hosts."""

from provision.commands._pending import pending_command

probe = pending_command("probe", "Collect facts from the local machine or SSH hosts.")
