"""`provision plan`: resolve per host, write provision.lock and the Ansible run dir; change nothing."""

from provision.commands._pending import pending_command

plan = pending_command(
    "plan", "Resolve per host, write provision.lock and the Ansible run dir; change nothing."
)
