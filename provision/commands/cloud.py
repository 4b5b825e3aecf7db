"""`provision cloud`: launch, list and tear down EC2 GPU instances."""

from provision.commands._pending import pending_group

cloud = pending_group(
    "cloud",
    "Launch, list and tear down EC2 GPU instances.",
    {
        "up": "Launch tagged GPU instances and write an inventory.",
        "ls": "List the instances provision launched, with their cost so far.",
        "down": "Terminate instances by run, expiry or all.",
    },
)
