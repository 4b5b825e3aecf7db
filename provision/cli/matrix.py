"""`provision matrix`: what the compatibility knowledge says, as tables (or one JSON document).

``--gpu X`` answers "which drivers can drive it, which framework wheels run on it";
``--framework torch`` lists releases and variants; ``--instances`` and ``--drivers`` list those
tables. Every row comes from ``provision/matrix/data`` (see its sources there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import NONEMPTY, command_options
from provision.cli.output import emit

if TYPE_CHECKING:
    from rich.console import Console


@click.command(name="matrix")
@click.option("--gpu", type=NONEMPTY, help="Show what runs on this GPU (drivers, framework wheels).")
@click.option(
    "--framework", "frameworks", type=NONEMPTY, multiple=True, help="torch, tensorflow or jax (a specifier narrows it)."
)
@click.option("--instances", is_flag=True, help="List the known EC2 GPU instance types.")
@click.option("--drivers", is_flag=True, help="List the driver branches.")
@command_options
def matrix(*, gpu: str | None, frameworks: tuple[str, ...], instances: bool, drivers: bool, as_json: bool) -> int:
    """Show what the compatibility knowledge says: which torch variants and drivers run on a GPU."""
    from provision.matrix import load  # noqa: PLC0415 (start-up: `provision matrix --help` loads this module, not matrix)
    from provision.stack.request import FrameworkSpec  # noqa: PLC0415 (start-up: `provision matrix --help` loads this module, not stack.request)
    from provision.stack.tables import driver_rows, framework_rows, gpu_row, instance_rows  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.tables)

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


def render(con: Console, doc: dict[str, Any]) -> None:
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

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
