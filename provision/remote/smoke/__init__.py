"""The bundled verification job that ``provision verify`` copies to each host (see job.py).

Nothing in this folder may import the rest of ``provision``: it runs on the target with only the
standard library, torch and nvidia-ml-py. The controller reads :data:`FILES` to know what to copy.
"""

from __future__ import annotations

from pathlib import Path

DIR = Path(__file__).resolve().parent
# What a host needs: every module of the job and its reference figures.
FILES = (
    "__init__.py",
    "job.py",
    "verdict.py",
    "versions.py",
    "nvml.py",
    "environment.py",
    "speed.py",
    "train.py",
    "dist.py",
    "frameworks.py",
    "references.json",
)
