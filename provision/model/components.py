"""The stack's components, declared once: what the lock pins, the smoke job reports, drift compares
and the report shows, in the report's order.

Each is a flat item (``driver``, ``torch_cuda``, ...): the key of
:func:`provision.stack.drift.expected_versions`, of drift and of the smoke job's ``versions``. The
smoke job (``provision/remote/smoke/``, standard library only on the hosts) keeps its own list;
a unit test checks it equals :data:`JOB_REPORTS`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    key: str  # the flat item
    label: str  # how the report names it
    locked: bool  # the lock pins a version of it (expected_versions has the key where the stack has it)
    reported: bool  # the smoke job reports its version on a host (under ``key``)


COMPONENTS: tuple[Component, ...] = (
    Component("driver", "NVIDIA driver", locked=True, reported=True),
    Component("cuda_driver", "CUDA the driver supports", locked=False, reported=True),
    Component("cuda_toolkit", "CUDA toolkit", locked=True, reported=False),
    Component("torch_cuda", "CUDA runtime in torch", locked=True, reported=True),
    Component("cudnn", "cuDNN", locked=True, reported=True),
    Component("nccl", "NCCL", locked=False, reported=True),
    Component("fabric_manager", "NVIDIA fabric manager", locked=True, reported=False),
    Component("python", "Python", locked=True, reported=True),
    Component("torch", "torch", locked=True, reported=True),
    Component("tensorflow", "TensorFlow", locked=True, reported=True),
    Component("jax", "JAX", locked=True, reported=True),
)

# torch's build (cu128, cpu): locked beside torch's version, read on a host from the local label
# of the torch version it reports; the report shows it with torch, not as a row of its own.
TORCH_VARIANT = "torch_variant"

# What the smoke job reports, and what of the lock it can check (the lock's other items are probed).
JOB_REPORTS: tuple[str, ...] = tuple(c.key for c in COMPONENTS if c.reported)
JOB_CHECKS: tuple[str, ...] = tuple(c.key for c in COMPONENTS if c.reported and c.locked)
