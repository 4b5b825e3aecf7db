"""The knowledge as rows: what ``provision matrix`` shows (pure; JSON-ready dicts).

Per GPU its facts, per driver branch whether a GPU can use it, per framework release and variant
what runs on a GPU (:func:`provision.stack.resolve.gpu_kernels`), and the EC2 instance types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from provision.matrix import cc_tuple

if TYPE_CHECKING:
    from provision.matrix import Gpu, Knowledge
    from provision.stack.request import FrameworkSpec


def gpu_row(g: Gpu) -> dict[str, Any]:
    return {
        "name": g.name,
        "arch": g.arch,
        "compute_capability": g.compute_capability,
        "memory_gib": g.memory_gib,
        "pci_ids": list(g.pci_ids),
        "kernel_modules": g.kernel_modules,
        "fabric_manager": g.needs_fabric_manager,
        "driver_branches": f">= {g.min_driver_branch}"
        + (f" (from {g.min_driver})" if g.min_driver else "")
        + (f", <= {g.last_driver_branch}" if g.last_driver_branch else ""),
        "confidence": g.confidence,
    }


def driver_rows(k: Knowledge, g: Gpu | None) -> list[dict[str, Any]]:
    rows = []
    for b in k.t.branches:
        usable = True
        why = ""
        if g is not None:
            if b.branch < g.min_driver_branch:
                usable, why = False, f"{g.name} needs >= {g.min_driver_branch}"
            elif g.last_driver_branch is not None and b.branch > g.last_driver_branch:
                usable, why = False, f"{g.arch} ends at {g.last_driver_branch}"
            elif g.kernel_modules == "proprietary-only" and b.branch >= 620:
                usable, why = False, "open kernel modules only"
        eol = b.end_of_life(k.t.snapshot)
        rows.append(
            {
                "branch": str(b.branch),
                "class": b.cls,
                "max_cuda": b.max_cuda,
                "newest": b.newest,
                "eol": b.eol,
                "end_of_life": eol,
                "usable": usable,
                "why": why,
            }
        )
    return rows


def framework_rows(
    k: Knowledge, g: Gpu | None, specs: Sequence[FrameworkSpec] | None
) -> dict[str, list[dict[str, Any]]]:
    """Per framework, releases (newest first) and what runs on ``g`` when one is given."""
    from provision.stack.rules import gpu_kernels  # noqa: PLC0415 (start-up: `provision matrix` shows the tables without the resolver's rules)

    names = [s.name for s in specs] if specs else ["torch", "tensorflow", "jax"]
    by_name = {s.name: s for s in specs or []}
    out: dict[str, list[dict[str, Any]]] = {}
    if "torch" in names:
        rows = []
        for rel in k.t.torch:
            if "torch" in by_name and not by_name["torch"].allows(rel.version):
                continue
            for v in rel.variants:
                if v.cuda is None:
                    continue
                how = gpu_kernels(g, v.arch_list, v.ptx) if g else "n/a"
                full = next((t.full_compat_min_driver for t in k.t.toolkits if t.version == v.cuda), None)
                rows.append(
                    {
                        "version": rel.version,
                        "variant": v.name,
                        "pypi": v.name == rel.pypi_default,
                        "cuda": v.cuda,
                        "cudnn": v.cudnn,
                        "arch_list": list(v.arch_list),
                        "ptx": v.ptx,
                        "python": list(rel.python),
                        "min_driver": full,
                        "runs": how,
                    }
                )
        out["torch"] = rows
    if "tensorflow" in names:
        out["tensorflow"] = [
            {
                "version": r.version,
                "cuda": r.cuda,
                "cudnn": r.cudnn,
                "and_cuda": r.and_cuda,
                "python": list(r.python),
                "runs": ("yes" if g.cc >= _cc(r.min_cc) else None) if g else "n/a",
            }
            for r in k.t.tensorflow
            if "tensorflow" not in by_name or by_name["tensorflow"].allows(r.version)
        ]
    if "jax" in names:
        rows = []
        for j in k.t.jax:
            if "jax" in by_name and not by_name["jax"].allows(j.version):
                continue
            for major in j.cuda_majors:
                line = k.t.jax_lines[major]
                runs = ("yes" if g.cc >= _cc(line.min_cc) else None) if g else "n/a"
                rows.append(
                    {
                        "version": j.version,
                        "extra": line.extra,
                        "min_driver": line.min_driver,
                        "python": list(j.python),
                        "runs": runs,
                    }
                )
        out["jax"] = rows
    return out


def instance_rows(k: Knowledge) -> list[dict[str, Any]]:
    return [
        {
            "name": it.name,
            "gpu": it.gpu.name,
            "gpu_count": it.gpu_count,
            "gpu_memory_gib": it.gpu_memory_gib,
            "arch": it.arch,
            "fabric_manager": it.fabric_manager,
            "efa": it.efa,
            "usd_per_hour": it.price.usd_per_hour if it.price else None,
            "price_read": it.price.read if it.price else None,
        }
        for it in k.instance_types
    ]


def _cc(text: str) -> tuple[int, int]:
    return cc_tuple(text)
