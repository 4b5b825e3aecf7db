"""`provision tune`: Measure batch size, loader workers and mixed precision on the target GPU."""

from provision.commands._pending import pending_command

tune = pending_command("tune", "Measure batch size, loader workers and mixed precision on the target GPU.")
