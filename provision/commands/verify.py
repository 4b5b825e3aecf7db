"""`provision verify`: Run the bundled smoke job on each host and compare against the lock."""

from provision.commands._pending import pending_command

verify = pending_command("verify", "Run the bundled smoke job on each host and compare against the lock.")
