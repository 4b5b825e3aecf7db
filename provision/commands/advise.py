"""`provision advise`: the seed article's advice made executable."""

from provision.commands._pending import pending_group

advise = pending_group(
    "advise",
    "Cost and GPU-sizing advice with numbers.",
    {
        "cost": "Cloud against own server: yearly costs and the break-even hours per day.",
        "gpu": "Memory a model needs and the GPUs and instance types that fit.",
    },
)
