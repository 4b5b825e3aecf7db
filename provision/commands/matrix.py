"""`provision matrix`: Show what the compatibility knowledge says."""

from provision.commands._pending import pending_command

matrix = pending_command("matrix", "Show what the compatibility knowledge says.")
