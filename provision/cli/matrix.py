"""`provision matrix`: what the compatibility knowledge says, as tables (or one JSON document).

``--gpu X`` answers "which drivers can drive it, which framework wheels run on it";
``--framework torch`` lists releases and variants; ``--instances`` and ``--drivers`` list those
tables. Every row comes from ``provision/matrix/data`` (see its sources there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import command_options
from provision.cli.output import emit

if TYPE_CHECKING:
    from rich.console import Console

    from provision.matrix import Gpu, Knowledge
    from provision.stack.resolve import FrameworkSpec


@click.command(name="matrix")
@click.option("--gpu", help="Show what runs on this GPU (drivers, framework wheels).")
@click.option("--framework", "frameworks", multiple=True, help="torch, tensorflow or jax (a specifier narrows it).")
@click.option("--instances", is_flag=True, help="List the known EC2 GPU instance types.")
@click.option("--drivers", is_flag=True, help="List the driver branches.")
@command_options
def matrix(*, gpu: str | None, frameworks: tuple[str, ...], instances: bool, drivers: bool, as_json: bool) -> int:
    """Show what the compatibility knowledge says.

    Examples: `provision matrix --gpu A10G --framework torch` (which torch variants run on an
    A10G), `provision matrix --gpu V100` (which drivers a V100 can use).
    """
    from provision.matrix import load
    from provision.stack.resolve import FrameworkSpec

    k = load()
    specs = [FrameworkSpec.parse(f) for f in frameworks]
    doc: dict[str, Any] = {"ok": True, "knowledge": {"version": k.version, "sha256": k.sha256}}
    if instances:
        doc["instances"] = instance_rows(k)
    if drivers:
        doc["drivers"] = driver_rows(k, None)
    g = k.gpu(gpu) if gpu else None
    if g is not None:
        doc["gpu"] = gpu_row(g)
        doc["drivers"] = driver_rows(k, g)
    if specs or g is not None:
        doc["frameworks"] = framework_rows(k, g, specs or None)
    if not (instances or drivers or g is not None or specs):
        doc["gpus"] = [gpu_row(x) for x in k.gpus]
    emit(doc, as_json, lambda con: render(con, doc))
    return 0


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
                usable, why = False, f"{g.arch} needs >= {g.min_driver_branch}"
            elif g.last_driver_branch is not None and b.branch > g.last_driver_branch:
                usable, why = False, f"{g.arch} ends at {g.last_driver_branch}"
            elif g.kernel_modules == "proprietary-only" and b.branch >= 620:
                usable, why = False, "open kernel modules only"
        eol = bool(b.eol and k.t.snapshot and b.eol < k.t.snapshot)
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
    from provision.stack.resolve import gpu_kernels

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
    from provision.matrix import cc_tuple

    return cc_tuple(text)


def render(con: Console, doc: dict[str, Any]) -> None:
    from rich.table import Table

    def table(title: str, rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
        t = Table(title=title, show_header=True, header_style="bold", title_justify="left")
        for i, c in enumerate(columns):
            t.add_column(c, no_wrap=i == 0, overflow="fold")  # fold, never hide a value behind "…"
        for r in rows:
            t.add_row(*(_cell(r.get(c)) if c != "arch_list" else _arches(r) for c in columns))
        con.print(t)

    if "gpu" in doc:
        g = doc["gpu"]
        con.print(
            f"[bold]{g['name']}[/bold]: {g['arch']}, compute capability {g['compute_capability']}, "
            f"{g['memory_gib']:g} GiB, kernel modules {g['kernel_modules']}, "
            f"fabric manager {'on NVSwitch boards' if g['fabric_manager'] else 'no'}",
            soft_wrap=True,
        )
    if "gpus" in doc:
        cols = [
            "name",
            "arch",
            "compute_capability",
            "memory_gib",
            "kernel_modules",
            "fabric_manager",
            "driver_branches",
        ]
        table("GPUs", doc["gpus"], cols)
    if "drivers" in doc:
        table(
            "driver branches",
            doc["drivers"],
            ["branch", "class", "max_cuda", "newest", "eol", "usable", "why"],
        )
    for name, rows in doc.get("frameworks", {}).items():
        cols = {
            "torch": ["version", "variant", "pypi", "cuda", "cudnn", "arch_list", "min_driver", "runs"],
            "tensorflow": ["version", "cuda", "cudnn", "and_cuda", "python", "runs"],
            "jax": ["version", "extra", "min_driver", "python", "runs"],
        }[name]
        table(name, rows, cols)
    if "instances" in doc:
        cols = [
            "name",
            "gpu",
            "gpu_count",
            "gpu_memory_gib",
            "arch",
            "fabric_manager",
            "usd_per_hour",
            "price_read",
        ]
        table("EC2 instance types", doc["instances"], cols)


def _arches(row: dict[str, Any]) -> str:
    """``5.0 .. 9.0`` (+PTX): the compiled range; the JSON has the full list."""
    arches = row.get("arch_list") or []
    text = f"{arches[0]} .. {arches[-1]}" if len(arches) > 1 else "".join(arches) or "-"
    return text + ("+PTX" if row.get("ptx") else "")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
