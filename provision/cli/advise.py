"""`provision advise`: the seed article's advice made executable (cost and GPU sizing).

The arithmetic lives in :mod:`provision.advise.cost` and :mod:`provision.advise.gpu`; this module
parses options, turns bad values into one-line errors (exit 2) and prints the answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from provision.cli.options import NONEMPTY, command_options
from provision.cli.output import emit
from provision.errors import BadInput

if TYPE_CHECKING:
    from rich.console import Console


@click.group(name="advise")
def advise() -> None:
    """Cost and GPU-sizing advice with numbers."""


@advise.command(name="cost")
@click.option("--cloud-price", type=float, metavar="USD_PER_HOUR", help="Cloud price per GPU-machine hour.")
@click.option(
    "--instance-type", type=NONEMPTY, metavar="T", help="EC2 instance type: its price from the knowledge data."
)
@click.option("--spot", is_flag=True, help="With --instance-type: the spot price (where the data has one).")
@click.option("--hours-per-day", type=float, required=True, metavar="H", help="Hours of use per day, 0-24.")
@click.option("--server-price", type=float, required=True, metavar="USD", help="Price of the own server.")
@click.option("--years", type=float, default=3.0, show_default=True, help="Amortisation period of the server.")
@click.option("--power-kw", type=float, default=0.0, show_default=True, help="Server power draw under load, kW.")
@click.option(
    "--electricity",
    type=float,
    default=0.0,
    show_default=True,
    metavar="USD_PER_KWH",
    help="Electricity price.",
)
@click.option(
    "--ops-per-year",
    type=float,
    default=0.0,
    show_default=True,
    metavar="USD",
    help="Yearly running costs of the own server (hosting, support, admin).",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PNG",
    help="Write a PNG of both yearly costs against hours per day (needs provision-gpu[plot]).",
)
@command_options
def cost(
    *,
    cloud_price: float | None,
    instance_type: str | None,
    spot: bool,
    hours_per_day: float,
    server_price: float,
    years: float,
    power_kw: float,
    electricity: float,
    ops_per_year: float,
    plot: Path | None,
    as_json: bool,
) -> None:
    """Cloud against own server: yearly costs and the break-even hours per day.

    \b
    cloud_per_year = cloud_price x H x 365
    own_per_year   = server_price / years + ops_per_year + power_kw x H x 365 x electricity
    """
    from provision.advise import cost as c  # noqa: PLC0415 (start-up: `provision --help` loads this module, not advise.cost)

    if (cloud_price is None) == (instance_type is None):
        raise BadInput("give exactly one of --cloud-price and --instance-type", "see 'provision advise cost --help'")
    if spot and instance_type is None:
        raise BadInput("--spot needs --instance-type", "with --cloud-price give the spot price itself")
    inputs = c.CostInputs(
        cloud_price=cloud_price if cloud_price is not None else 0.0,
        hours_per_day=hours_per_day,
        server_price=server_price,
        years=years,
        power_kw=power_kw,
        electricity=electricity,
        ops_per_year=ops_per_year,
    )

    ctx = click.get_current_context()
    defaulted = frozenset(
        n
        for n in ("years", "power_kw", "electricity", "ops_per_year")
        if ctx.get_parameter_source(n) in (ParameterSource.DEFAULT, None)
    )
    doc = c.advise(inputs, instance_type=instance_type, spot=spot, plot=plot, defaulted=defaulted)
    emit(doc, as_json, lambda con: _cost_human(con, doc))


def _cost_human(con: Console, doc: dict[str, Any]) -> None:
    p = doc["cloud_price"]
    i = doc["inputs"]
    if p["origin"] == "flag":
        con.print(f"cloud price     {p['usd_per_hour']:,.4g} USD/h (given)")
    else:
        kind = "spot" if p["spot"] else "on-demand"
        con.print(f"cloud price     {p['usd_per_hour']:,.4g} USD/h ({p['instance_type']} {kind})")
        con.print(f"price read      {p['read']} ({', '.join(p['source'])}, {p['confidence']} confidence)")
    con.print(f"usage           {i['hours_per_day']:g} h/day, server amortised over {i['years']:g} years")
    con.print(f"cloud per year  {doc['cloud_per_year']:>12,.2f} USD")
    con.print(f"own per year    {doc['own_per_year']:>12,.2f} USD")
    be = doc["break_even_hours_per_day"]
    con.print(
        "break-even      "
        + (
            f"{be:.2f} h/day (owning is cheaper above it)"
            if be is not None
            else "never: the cloud is cheaper at any usage"
        )
    )
    choice = "rent in the cloud" if doc["recommendation"] == "cloud" else "buy your own server"
    con.print(f"[bold]recommendation  {choice}[/bold] (saves {doc['savings_per_year']:,.2f} USD per year)")
    if "plot" in doc:
        con.print(f"plot            {doc['plot']}")
    con.print("assumptions")
    for a in doc["assumptions"]:
        mark = f" [yellow](default; set with {a['flag']})[/yellow]" if a["origin"] == "default" else ""
        con.print(f"  {a['name']:<14} {a['value']:g}{mark}: {a['meaning']}", soft_wrap=True)


@advise.command(name="gpu")
@click.option(
    "--params", "params_text", type=NONEMPTY, required=True, metavar="N", help="Parameter count: 7e9, 7B, 70b, 350M."
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "bf16", "fp16", "fp8", "int8", "int4"]),
    default="bf16",
    show_default=True,
)
@click.option(
    "--mode",
    type=click.Choice(["inference", "train", "lora", "qlora"]),
    default="inference",
    show_default=True,
    help="train: full training; lora: adapters on a frozen 16-bit base; qlora: adapters on a 4-bit NF4 base.",
)
@click.option(
    "--optimizer",
    type=click.Choice(["adam", "sgd"]),
    default="adam",
    show_default=True,
    help="Optimizer for --mode train, lora and qlora.",
)
@click.option(
    "--lora-rank",
    type=int,
    default=None,
    metavar="R",
    help="Adapter rank for --mode lora/qlora [default: the knowledge's, 64 as in the QLoRA paper].",
)
@click.option(
    "--checkpointing/--no-checkpointing",
    default=None,
    help="Activation checkpointing in training modes [default: on for qlora, off otherwise].",
)
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--seq-len", type=int, default=2048, show_default=True)
@click.option(
    "--top", type=click.IntRange(min=1), default=12, show_default=True, help="Priced rows of the table (JSON has all)."
)
@command_options
def gpu(
    *,
    params_text: str,
    precision: str,
    mode: str,
    optimizer: str,
    lora_rank: int | None,
    checkpointing: bool | None,
    batch: int,
    seq_len: int,
    top: int,
    as_json: bool,
) -> None:
    """Memory a model needs (an estimate) and the GPUs and instance types that fit, cheapest first."""
    from provision.advise import gpu as g  # noqa: PLC0415 (start-up: `provision --help` loads this module, not advise.gpu)
    from provision.matrix import load  # noqa: PLC0415 (start-up: `provision advise --help` loads this module, not matrix)

    spec = g.ModelSpec(
        params=g.parse_params(params_text),
        precision=precision,  # type: ignore[arg-type]  # click.Choice narrowed it
        mode=mode,  # type: ignore[arg-type]
        optimizer=optimizer,  # type: ignore[arg-type]
        batch=batch,
        seq_len=seq_len,
        lora_rank=lora_rank,
        checkpointing=checkpointing,
    )
    k = load()
    est = g.estimate(spec, k.t.finetune_memory)
    recs, excluded = g.recommend(est, k.gpus, k.instance_types)
    doc = g.to_json(est, recs, excluded, k.t.sources)
    emit(doc, as_json, lambda con: _gpu_human(con, doc, top))


def _gpu_human(con: Console, doc: dict[str, Any], top: int) -> None:
    from rich.table import Table  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    from provision.advise import gpu as g  # noqa: PLC0415 (start-up: `provision --help` loads this module, not advise.gpu)

    m = doc["model"]
    what = f"{g.human_params(m['params'])} parameters, {m['precision']}, {m['mode']}"
    if m["mode"] in ("lora", "qlora"):
        what += f" rank {m['lora_rank']}"
    if m["optimizer"]:
        what += f" with {m['optimizer']}"
    con.print(f"[bold]{what}: about {doc['memory_gib']:.1f} GiB[/bold] (estimate)")
    for term, gib in doc["breakdown"].items():
        con.print(f"  {term.replace('_', ' '):<18} {gib:>8.2f} GiB  [dim]{doc['how'].get(term, '')}[/dim]")
    for note in doc["notes"]:
        con.print(f"  [dim]{note}[/dim]")
    if doc["constants"]:
        con.print("  constants (provision/matrix/data/finetune.yaml):")
        for c in doc["constants"]:
            value = str(c["value"]).lower() if isinstance(c["value"], bool) else f"{c['value']:g}"
            con.print(f"    {c['name']} = {value} ({c['confidence']}): {', '.join(c['source'])}", soft_wrap=True)
    recs = doc["recommendations"]
    if not recs:
        con.print("No GPU in the knowledge holds it, even split over 64 GPUs.")
        return
    priced = [r for r in recs if r["price_status"] == "priced"]
    unpriced = [r for r in recs if r["price_status"] == "unpriced"]
    no_ec2 = [r for r in recs if r["price_status"] == "no_instance_type"]
    table = Table(title="EC2 instance types that hold it, cheapest first", title_justify="left")
    for col in ("gpu", "GPUs", "GiB/GPU", "instance type", "GPU link", "USD/h"):
        table.add_column(col, justify="right" if col in ("GPUs", "GiB/GPU", "USD/h") else "left")
    for r in priced[:top]:
        table.add_row(
            r["gpu"], str(r["count"]), f"{r['per_gpu_gib']:.1f}", _inst(r), r["link"] or "-", f"{r['usd_per_hour']:.2f}"
        )
    con.print(table)
    a = doc["assumptions"]
    con.print(
        f"[dim]prices: {a['prices']}; read {', '.join(a['price_read'])} from {', '.join(a['price_source'])}[/dim]",
        soft_wrap=True,  # URLs stay whole (copyable) where the terminal wraps them
    )
    if len(priced) > top:
        con.print(f"[dim]{len(priced) - top} more priced with --top {len(priced)} or --json[/dim]")
    shown = [r for r in priced[:top] if r["count"] > 1]
    linked = [r for r in shown if r["interconnect"] and r["gpus_provisioned"] > r["instances"]]  # >1 GPU each
    for kind in dict.fromkeys(r["interconnect"] for r in linked):
        short, text = g.kind_text(kind)
        con.print(f"  [yellow]GPU link {short}:[/yellow] {text}")
    if any(r["instances"] > 1 for r in shown):
        con.print(f"  [yellow]EFA/net x N:[/yellow] the model spans N instances: {g.NETWORK_CAVEAT}")
    if unpriced:
        con.print(
            "unpriced (no on-demand price in the knowledge; give one to `advise cost --cloud-price`): "
            + ", ".join(f"{_inst(r)} for {r['count']} x {r['gpu']}" for r in unpriced)
        )
    if no_ec2:
        con.print(
            "also hold it, no EC2 type in the knowledge: "
            + ", ".join(f"{r['count']} x {r['gpu']}" if r["count"] > 1 else r["gpu"] for r in no_ec2)
        )


def _inst(r: dict[str, Any]) -> str:
    inst = str(r["instance_type"])
    if r["instances"] > 1:
        inst = f"{r['instances']} x {inst}"
    if r["gpus_provisioned"] > r["count"]:
        inst += f" ({r['gpus_provisioned']} GPUs)"
    return inst
