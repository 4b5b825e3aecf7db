"""What the loader refuses in the shipped tables beyond their shape: contradictions the resolver
would take as truth (lists not newest first, a GPU floor that cannot run the GPU's own CUDA)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from packaging.version import Version

from provision.matrix.model import Tables, cc_tuple


class DataError(Exception):
    """The shipped knowledge data is malformed (a bug in data/*.yaml, not in user input)."""


def check_gpu_driver_floors(t: Tables) -> None:
    """A GPU's driver floor must run its ``min_cuda`` (B300: CUDA 12.9 needs R575, not Blackwell's
    R570) and its ``min_driver`` must be a release of that floor branch: the resolver takes the
    floor as the whole truth about the driver, so data that contradicts itself is refused here."""
    for g in t.gpus:
        floor = next((b for b in t.branches if b.branch == g.min_driver_branch), None)
        if floor is not None and Version(floor.max_cuda) < Version(g.min_cuda):
            runs = [b.branch for b in t.branches if Version(b.max_cuda) >= Version(g.min_cuda)]
            raise DataError(
                f"gpu {g.name}: min_driver_branch {g.min_driver_branch} runs CUDA {floor.max_cuda}, below "
                f"its min_cuda {g.min_cuda} (the lowest branch that runs it: {min(runs) if runs else 'none'})"
            )
        if g.min_driver is not None and not g.min_driver.startswith(f"{g.min_driver_branch}."):
            raise DataError(
                f"gpu {g.name}: min_driver {g.min_driver} is not of its min_driver_branch {g.min_driver_branch}"
            )


def check_sorted(t: Tables) -> None:
    """Newest first is what the resolver relies on when it takes the first that fits."""

    def descending(name: str, keys: Iterable[Any]) -> None:
        ks = list(keys)
        if ks != sorted(ks, reverse=True):
            raise DataError(f"data: `{name}` is not ordered newest first")

    descending("gpus", (cc_tuple(g.compute_capability) for g in t.gpus))
    descending("cuda_toolkits", (Version(c.version) for c in t.toolkits))
    descending("driver_branches", (b.branch for b in t.branches))
    descending("cudnn", (Version(c.version) for c in t.cudnn))
    descending("pytorch", (Version(r.version) for r in t.torch))
    descending("tensorflow", (Version(r.version) for r in t.tensorflow))
    descending("jax", (Version(r.version) for r in t.jax))
