"""`provision resolve`: what would be installed for a described host (no host contact).

Reads only the options (and ``-c provision.yaml``'s ``stack:`` when given) and the shipped
knowledge; prints the docs/design.md JSON contract with ``--json``, else a table with the reasons.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import NONEMPTY, command_options, config_option
from provision.cli.output import emit
from provision.stack.request import PYTHON_SOURCES

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
@click.option("--python", type=NONEMPTY, help="Python X.Y for the venv (default: the OS's python3 when it fits).")
@click.option(
    "--framework",
    "frameworks",
    type=NONEMPTY,
    multiple=True,
    help="PEP 508 spec, repeatable: torch>=2.6, torch==2.7.1+cu128, jax[cuda12].",
)
@click.option("--torch-index", type=click.Choice(["auto", "pypi", "pytorch"]), help="Where torch wheels may come from.")
@click.option(
    "--torch-variant", type=NONEMPTY, help="Constrain torch's CUDA variant (cu128, cpu) when the spec is a range."
)
@click.option("--driver", type=NONEMPTY, help="auto, none, a branch (580) or an exact version (580.95.05).")
@click.option(
    "--kernel-modules",
    type=click.Choice(["auto", "open", "proprietary"]),
    help="Driver kernel-module flavour.",
)
@click.option("--cuda-toolkit", type=NONEMPTY, help="System CUDA toolkit VERSION or none (default none).")
@click.option("--cudnn", type=NONEMPTY, help="System cuDNN VERSION or none (default none).")
@click.option(
    "--install-method",
    type=click.Choice(["auto", "nvidia-repo", "distro"]),
    help="How the driver is installed.",
)
@click.option(
    "--python-source",
    type=click.Choice(PYTHON_SOURCES),
    help="The venv's Python: the OS's, a standalone CPython (installed by uv), or auto (the OS's when it fits).",
)
@config_option("provision.yaml whose stack: section is the default request.")
@command_options
def resolve(
    *,
    gpu: str | None,
    gpu_count: int | None,
    instance_type: str | None,
    os_name: str | None,
    arch: str | None,
    python: str | None,
    frameworks: tuple[str, ...],
    torch_index: str | None,
    torch_variant: str | None,
    driver: str | None,
    kernel_modules: str | None,
    cuda_toolkit: str | None,
    cudnn: str | None,
    install_method: str | None,
    python_source: str | None,
    config_path: Path | None,
    as_json: bool,
) -> int:
    """Show what would be installed for a described host (no host contact).

    With no options: any NVIDIA GPU, the default OS, the newest compatible versions.
    Exit 3 when no compatible set exists, naming the failing rule and changes that would work.
    """
    from provision.stack.request import HostSpec, StackRequest
    from provision.stack.resolve import resolve as run_resolve

    stack: dict[str, Any] = {}
    if config_path is not None:
        from provision.config import load_config

        stack = load_config(config_path).request_args()
    cli_args = {
        "frameworks": list(frameworks) or None,
        "driver": driver,
        "kernel_modules": kernel_modules,
        "cuda_toolkit": cuda_toolkit,
        "cudnn": cudnn,
        "python": python,
        "torch_index": torch_index,
        "torch_variant": torch_variant,
        "install_method": install_method,
        "python_source": python_source,
    }
    merged = {**stack, **{k: v for k, v in cli_args.items() if v is not None}}
    request = StackRequest.build(**merged)
    host = HostSpec.describe(gpu=gpu, gpu_count=gpu_count, instance_type=instance_type, os=os_name, arch=arch)
    result = run_resolve(request, host)
    emit(result.to_json(), as_json, lambda con: render(con, result))
    return 0


def render(con: Console, result: Resolution) -> None:
    """The readable form: one table of what gets installed, then warnings and reasons."""
    from rich.table import Table

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
    tk, dnn = s.cuda_toolkit, s.cudnn
    table.add_row("CUDA toolkit", tk or "-", "system" if tk else "none (wheels bring CUDA)")
    table.add_row("cuDNN", dnn.version if dnn else "-", "system" if dnn else "none (wheels bring cuDNN)")
    for name, fw in s.frameworks.items():
        variant = fw.variant or (",".join(fw.extras) if name != "torch" else "") or "-"
        cuda = f"CUDA {fw.cuda}, cuDNN {fw.cudnn}" if fw.cuda else "CPU only"
        table.add_row(name, fw.version, f"{variant}: {cuda}; {fw.index_url}")
    table.add_row("python", s.python, "venv" if s.python_source == "os" else "venv, standalone CPython (uv)")
    con.print(table)
    for w in result.warnings:
        con.print(f"[yellow]warning[/yellow] {w.code}: {w.message}")
    con.print("[bold]why[/bold]")
    for r in result.reasons:
        con.print(f"  - {r}")
