"""`provision tune`: measure batch size, loader workers and mixed precision on the target GPU.

The measuring is :mod:`provision.remote.tune_job`, run on the host (see
:mod:`provision.advise.tune`); this module picks the targets, prints the answer and draws the
plot on the controller, where matplotlib may be installed (the hosts need only torch).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import NONEMPTY, command_options, host_keys_option, target_options, timeout_option
from provision.cli.output import emit
from provision.errors import BadInput, ExitCode, ProvisionError
from provision.fleet.targets import check_one_source
from provision.model.defaults import DEFAULT_VENV

if TYPE_CHECKING:
    from rich.console import Console

    from provision.hosts.inventory import HostTarget

# The venv `provision up` installs the frameworks into (docs/explanation/design.md, config `install.venv`).
REMOTE_PYTHON = f"{DEFAULT_VENV}/bin/python"


@click.command(name="tune")
@target_options(
    local="Tune on this machine (the default without -i).", inventory="Tune on every host of an Ansible inventory."
)
@click.option("--allow-cpu", is_flag=True, help="Without a usable GPU, measure on the CPU (scaled down).")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PNG",
    help="Write a PNG: throughput against batch size and against workers (needs provision-gpu[plot]).",
)
@click.option(
    "--python",
    "python",
    type=NONEMPTY,
    metavar="PATH",
    help=f"Interpreter with torch on the target [local: this one; remote: {REMOTE_PYTHON}].",
)
@timeout_option(900.0, "Seconds per host.")
@host_keys_option()
# Test and benchmark sizes: `test` runs in seconds, `cpu` in under two minutes on a small CPU.
@click.option("--scale", type=click.Choice(["gpu", "cpu", "test"]), hidden=True)
@command_options
def tune(
    *,
    local: bool,
    inventory: str | None,
    allow_cpu: bool,
    plot: Path | None,
    python: str | None,
    timeout: float,
    accept_new_host_keys: bool,
    scale: str | None,
    as_json: bool,
) -> int:
    """Measure batch size, DataLoader workers and mixed precision on the target GPU.

    A synthetic image pipeline whose samples cost CPU time to decode and augment feeds a small
    ResNeXt-like network: a batch-size sweep up to the largest that fits (the sweet spot is the
    smallest batch within 5% of the best throughput), a DataLoader sweep (0 to the CPU count
    workers, pinned memory or not), mixed precision against fp32, channels_last, and a grouped
    against a standard convolution. GPU utilization (NVML) under 70% is flagged with its likely
    cause.
    """
    from provision.advise import tune as t  # noqa: PLC0415 (start-up: `provision --help` loads this module, not advise.tune)

    check_one_source(local, inventory, hint="tune this machine or an inventory's hosts")
    if timeout <= 0:
        raise BadInput(f"--timeout {timeout:g} is not positive", "give the seconds allowed per host")
    if plot is not None:
        from provision.advise.plot import check_target, require_matplotlib  # noqa: PLC0415 (start-up: `provision --help` loads this module, not advise.plot)

        check_target(plot)
        require_matplotlib()
    if inventory is None:
        doc = t.run_local(python, allow_cpu, scale, timeout)
        _plot(plot, [doc])
        emit(doc, as_json, lambda con: _human(con, doc))
        return int(ExitCode.OK)
    return _fleet(
        inventory,
        python=python or REMOTE_PYTHON,
        allow_cpu=allow_cpu,
        scale=scale,
        timeout=timeout,
        accept_new=accept_new_host_keys,
        plot=plot,
        as_json=as_json,
    )


def _fleet(
    inventory: str,
    *,
    python: str,
    allow_cpu: bool,
    scale: str | None,
    timeout: float,
    accept_new: bool,
    plot: Path | None,
    as_json: bool,
) -> int:
    from provision.advise import tune as t  # noqa: PLC0415 (start-up: `provision --help` loads this module, not advise.tune)
    from provision.hosts.inventory import load_inventory  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.inventory)
    from provision.hosts.ssh import connect  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.ssh)

    targets = load_inventory(inventory)  # bad inventory: exit 2 before any host is contacted

    def one(target: HostTarget) -> tuple[dict[str, Any], ProvisionError | None]:
        try:
            transport = connect(target, accept_new_host_keys=accept_new)
            try:
                return t.run_via(transport, python, allow_cpu, scale, timeout), None
            finally:
                transport.close()
        except ProvisionError as exc:
            return {"host": target.name, "ok": False, "error": exc.to_json()["error"]}, exc

    # Hosts in parallel: each measures its own GPU, and a fleet should not take N times as long.
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(targets)))) as pool:
        outcomes = list(pool.map(one, targets))
    results = [doc for doc, _ in outcomes]
    failures = [exc for _, exc in outcomes if exc is not None]
    if len(results) == 1 and failures:
        raise failures[0]  # one host: its error is the command's error, per the CLI contract
    good = [r for r in results if r.get("ok")]
    _plot(plot, good, per_host=len(results) > 1)
    if len(results) == 1:
        emit(results[0], as_json, lambda con: _human(con, results[0]))
        return int(ExitCode.OK)
    doc = {"ok": not failures, "hosts": results}

    def human(con: Console) -> None:
        for r in results:
            con.rule(str(r["host"]))
            if r.get("ok"):
                _human(con, r)
            else:
                con.print(f"[red]failed[/red]: {r['error']['message']} ({r['error']['hint']})")

    emit(doc, as_json, human)
    return int(ExitCode.FAILED if failures else ExitCode.OK)


def _plot(plot: Path | None, docs: list[dict[str, Any]], per_host: bool = False) -> None:
    if plot is None:
        return
    from provision.advise.plot import tune_plot  # noqa: PLC0415 (start-up: `provision --help` loads this module, not advise.plot)

    for doc in docs:
        path = plot.with_name(f"{plot.stem}-{doc['host']}{plot.suffix}") if per_host else plot
        tune_plot(path, doc)
        doc["plot"] = str(path)


def _human(con: Console, doc: dict[str, Any]) -> None:
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}%"

    con.print(
        f"[bold]{doc['host']}[/bold]: {doc['device_name']} ({doc['device']}), torch {doc['torch']}, "
        f"{doc['cpu_count']} CPUs, {doc['duration_s']}s"
    )
    if doc.get("gpu_util_note"):
        con.print(f"[dim]GPU utilization not sampled: {doc['gpu_util_note']}[/dim]")
    bt = Table(title="batch size (compute only)", title_justify="left")
    for col in ("batch", "samples/s", "memory GiB", "GPU util"):
        bt.add_column(col, justify="right")
    for r in doc["batch_sizes"]:
        mark = " *" if r["batch_size"] == doc["best_batch_size"] else ""
        mem = "-" if r["memory_gib"] is None else f"{r['memory_gib']:.2f}"
        bt.add_row(f"{r['batch_size']}{mark}", f"{r['samples_per_s']:,.0f}", mem, pct(r["gpu_util_pct"]))
    con.print(bt)
    con.print(f"[dim]* sweet spot; the sweep ended by {doc['batch_sweep_stopped'].replace('_', ' ')}[/dim]")
    wt = Table(title=f"DataLoader at batch {doc['workers_batch_size']} (end to end)", title_justify="left")
    for col in ("workers", "pinned", "samples/s", "waiting for data", "GPU util"):
        wt.add_column(col, justify="right")
    for w in doc["workers"]:
        wt.add_row(
            str(w["workers"]),
            "yes" if w["pin_memory"] else "no",
            f"{w['samples_per_s']:,.0f}",
            f"{w['data_wait_pct']:.0f}%",
            pct(w["gpu_util_pct"]),
        )
    con.print(wt)
    a, cl, gc = doc["amp"], doc["channels_last"], doc["grouped_conv"]
    con.print(
        f"mixed precision ({a['dtype']}): {a['speedup']}x fp32 "
        f"({a['amp_samples_per_s']:,.0f} vs {a['fp32_samples_per_s']:,.0f} samples/s)"
    )
    con.print(f"channels_last: {cl['speedup']}x contiguous")
    con.print(f"grouped conv (groups={gc['groups']}): {gc['speedup']}x standard, {gc['params_ratio']}x the parameters")
    for f in doc["flags"]:
        con.print(f"[yellow]low utilization[/yellow] {f['where']}: {f['likely_cause']}")
    con.print("[bold]recommendations[/bold]")
    for r in doc["recommendations"]:
        if r["topic"] != "utilization":  # the flags above say it already
            con.print(f"  - {r['advice']}")
    if "plot" in doc:
        con.print(f"plot: {doc['plot']}")
