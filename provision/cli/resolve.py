"""`provision resolve`: what would be installed for a described host (no host contact).

Reads only the options (and ``-c provision.yaml``'s ``stack:`` when given) and the shipped
knowledge; prints the docs/explanation/design.md JSON contract with ``--json``, else a table with the reasons.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import NONEMPTY, command_options, config_option, stack_options
from provision.cli.output import emit
from provision.stack.request import HostSpec, StackRequest

if TYPE_CHECKING:
    from rich.console import Console

    from provision.stack.resolution import Resolution


@click.command(name="resolve")
@click.option(
    "--gpu", type=NONEMPTY, help="GPU model, NVML name or PCI ID (10de:2330); case, spaces and hyphens ignored."
)
@click.option("--gpu-count", type=int, help="GPUs per host (default 1 with --gpu).")
@click.option("--instance-type", type=NONEMPTY, help="EC2 instance type; implies GPU, count and arch.")
@click.option(
    "--os", "os_name", type=NONEMPTY, help="os-release ID-VERSION_ID, e.g. ubuntu-22.04, debian-12, rhel-9, amzn-2023."
)
@click.option("--arch", type=NONEMPTY, help="x86_64 or aarch64 (default: the GPU's host arch, else x86_64).")
@stack_options
@config_option("provision.yaml whose stack: section is the default request.")
@command_options
def resolve(
    *,
    gpu: str | None,
    gpu_count: int | None,
    instance_type: str | None,
    os_name: str | None,
    arch: str | None,
    stack_flags: dict[str, Any],
    config_path: Path | None,
    as_json: bool,
) -> int:
    """Show what would be installed for a described host (no host contact).

    With no options: any NVIDIA GPU, the default OS, the newest compatible versions.
    Exit 3 when no compatible set exists, naming the failing rule and changes that would work.
    """
    from provision.config import Config, load_config  # noqa: PLC0415 (start-up: `provision --help` loads this module, not config)
    from provision.stack.resolve import resolve as run_resolve  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.resolve)

    config = load_config(config_path) if config_path is not None else Config()
    request = StackRequest.build(**config.request_args(stack_flags))
    host = HostSpec.describe(gpu=gpu, gpu_count=gpu_count, instance_type=instance_type, os=os_name, arch=arch)
    result = run_resolve(request, host)
    emit(result.to_json(), as_json, lambda con: render(con, result))
    return 0


def render(con: Console, result: Resolution) -> None:
    """The readable form: one table of what gets installed, then warnings and reasons."""
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    h, s = result.host, result.stack
    gpu = f"{h.gpu_count} x {h.gpu} (cc {h.compute_capability})" if h.gpu else "any NVIDIA GPU"
    con.print(f"[bold]{gpu}[/bold], {h.os} {h.arch}, Python {h.python}")
    table = Table(show_header=True, header_style="bold")
    table.add_column("component")
    table.add_column("version")
    table.add_column("details")
    d = s.driver
    table.add_row(
        "driver",
        d.version if d else "-",
        f"branch {d.branch}, {d.kernel_modules} modules, {d.install_method}" if d else "not managed",
    )
    fm = s.fabric_manager
    table.add_row("fabric manager", fm or "-", "NVSwitch baseboard" if fm else "not needed")
    imex = next((i for i in result.packages.install if i.name.startswith("nvidia-imex")), None)
    if imex is not None:  # plan installs it for NVL racks (GB200/GB300): resolve shows it too
        table.add_row("IMEX", d.version if d else "-", f"{imex.name} (multi-node NVLink)")
    tk, dnn = s.cuda_toolkit, s.cudnn
    table.add_row("CUDA toolkit", tk or "-", "system" if tk else "none (wheels bring CUDA)")
    table.add_row("cuDNN", dnn.version if dnn else "-", "system" if dnn else "none (wheels bring cuDNN)")
    for name, fw in s.frameworks.items():
        variant = fw.variant or (",".join(fw.extras) if name != "torch" else "") or "-"
        # a variant whose bundled cuDNN the knowledge does not pin says so, never "cuDNN None"
        cudnn = f"cuDNN {fw.cudnn}" if fw.cudnn else "its own cuDNN (version not pinned in the knowledge)"
        cuda = f"CUDA {fw.cuda}, {cudnn}" if fw.cuda else "CPU only"
        table.add_row(name, fw.version, f"{variant}: {cuda}; {fw.index_url}")
    table.add_row("python", s.python, "venv" if s.python_source == "os" else "venv, standalone CPython (uv)")
    con.print(table)
    for w in result.warnings:
        con.print(f"[yellow]warning[/yellow] {w.code}: {w.message}")
    con.print("[bold]why[/bold]")
    for r in result.reasons:
        con.print(f"  - {r}")
