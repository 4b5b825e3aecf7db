"""What DESIGN.md names, as lists the tests check the code and the data against."""

from __future__ import annotations

# the one list of GPUs DESIGN.md names
DESIGN_GPUS = [
    "K80",
    "P100",
    "V100",
    "T4",
    "A10",
    "A10G",
    "A30",
    "A40",
    "A100-40GB",
    "A100-80GB",
    "L4",
    "L40",
    "L40S",
    "H100-PCIe",
    "H100-SXM",
    "H100-NVL",
    "H200",
    "B200",
    "B300",
    "GB200",
    "RTX-3090",
    "RTX-4090",
    "RTX-5090",
    "RTX-A6000",
    "RTX-6000-Ada",
    "RTX-PRO-6000-Blackwell",
]
