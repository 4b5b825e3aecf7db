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


# Each table's columns: (the JSON key, a short header). Short headers, no box and one space between
# columns keep every table readable at 80 columns (a terminal's default width).
GPU_TITLE = "GPUs (cc: compute capability; FM: needs Fabric Manager; driver: branches (first release))"
GPU_COLUMNS = (
    ("name", "GPU"),
    ("arch", "arch"),
    ("compute_capability", "cc"),
    ("memory_gib", "GiB"),
    ("kernel_modules", "modules"),
    ("fabric_manager", "FM"),
    ("driver_branches", "driver"),
)
DRIVER_COLUMNS = (
    ("branch", "branch"),
    ("class", "class"),
    ("max_cuda", "max CUDA"),
    ("newest", "newest"),
    ("eol", "EOL"),
    ("usable", "usable"),
    ("why", "why not"),
)
FRAMEWORK_COLUMNS = {
    "torch": (
        ("version", "version"),
        ("variant", "variant"),
        ("pypi", "PyPI"),
        ("cuda", "CUDA"),
        ("cudnn", "cuDNN"),
        ("arch_list", "compiled for"),
        ("min_driver", "min driver"),
        ("runs", "runs"),
    ),
    "tensorflow": (
        ("version", "version"),
        ("cuda", "CUDA"),
        ("cudnn", "cuDNN"),
        ("and_cuda", "and-cuda"),
        ("python", "Python"),
        ("runs", "runs"),
    ),
    "jax": (
        ("version", "version"),
        ("extra", "extra"),
        ("min_driver", "min driver"),
        ("python", "Python"),
        ("runs", "runs"),
    ),
}
INSTANCE_COLUMNS = (
    ("name", "instance type"),
    ("gpu", "GPU"),
    ("gpu_count", "GPUs"),
    ("gpu_memory_gib", "GiB"),
    ("arch", "arch"),
    ("fabric_manager", "FM"),
    ("usd_per_hour", "$/h"),
    ("price_read", "price read"),
)
# how a cell reads in a table (the JSON keeps the value as it is)
_SHOWN = {
    "kernel_modules": lambda v: str(v).replace("-", " "),  # "open recommended": wraps at the space
    # ">= 575 (from 575.57.08), <= 580": one part a line, the exact floor in parentheses
    "driver_branches": lambda v: str(v).replace(" (from ", "\n(").replace(", ", "\n"),
}


def render(con: Console, doc: dict[str, Any]) -> None:
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    def table(title: str, rows: list[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
        t = Table(title=title, box=None, padding=(0, 1, 0, 0), header_style="bold", title_justify="left")
        for i, (_, header) in enumerate(columns):
            t.add_column(header, no_wrap=i == 0, overflow="fold")  # fold, never hide a value behind "…"
        for r in rows:
            t.add_row(*(_arches(r) if key == "arch_list" else _SHOWN.get(key, _cell)(r.get(key)) for key, _ in columns))
        con.print(t)

    if "gpu" in doc:
        g = doc["gpu"]
        con.print(
            f"[bold]{g['name']}[/bold]: {g['arch']}, compute capability {g['compute_capability']}, "
            f"{g['memory_gib']:g} GiB, kernel modules {g['kernel_modules']}, "
            f"fabric manager {'on NVSwitch boards' if g['fabric_manager'] else 'no'}",
        )
    if "gpus" in doc:
        table(GPU_TITLE, doc["gpus"], GPU_COLUMNS)
    if "drivers" in doc:
        table("driver branches", doc["drivers"], DRIVER_COLUMNS)
    for name, rows in doc.get("frameworks", {}).items():
        table(name, rows, FRAMEWORK_COLUMNS[name])
    if "instances" in doc:
        table("EC2 instance types", doc["instances"], INSTANCE_COLUMNS)


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
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"  # 80.0 GiB reads 80
    return str(value)
