"""`provision up`: Plan, apply and verify the whole stack on the hosts."""

from provision.commands._pending import pending_command

up = pending_command("up", "Plan, apply and verify the whole stack on the hosts.")
