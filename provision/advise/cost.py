"""Rent or buy: yearly cost of cloud GPUs against an own server, and the break-even usage.

The formulas are the issue's, exactly (hours ``H`` per day, prices in USD):

- ``cloud_per_year = cloud_price * H * 365``
- ``own_per_year = server_price / years + ops_per_year + power_kw * H * 365 * electricity``
- ``break_even_hours_per_day = (server_price / years + ops_per_year)
  / (365 * (cloud_price - power_kw * electricity))``, or ``None`` when the cloud is cheaper at any
  usage (an hour of cloud costs no more than an hour of own power, or break-even is past 24 h).

Cloud prices come from the flag or from the knowledge data (``matrix/data/ec2.yaml``), which
carries the date each price was read; nothing here hard-codes a price.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provision.advise.plot import check_target, cost_plot, require_matplotlib
from provision.errors import BadInput
from provision.matrix import load

DAYS_PER_YEAR = 365


@dataclass(frozen=True)
class CloudPrice:
    """An hourly cloud price and where it came from (``flag`` or the knowledge data)."""

    usd_per_hour: float
    origin: str  # "flag" | "knowledge"
    instance_type: str | None = None
    spot: bool = False
    read: str | None = None  # when the price was read (YYYY-MM), for knowledge prices
    source: tuple[str, ...] = ()
    confidence: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["source"] = list(self.source)
        return doc


@dataclass(frozen=True)
class CostInputs:
    cloud_price: float  # USD per hour of use
    hours_per_day: float
    server_price: float
    years: float = 3.0
    power_kw: float = 0.0
    electricity: float = 0.0  # USD per kWh
    ops_per_year: float = 0.0

    def validate(self) -> None:
        """Bad input as one line each: the first problem found, with how to fix it."""
        for name, value in asdict(self).items():
            if not math.isfinite(value):  # nan/inf parse as floats but answer nothing
                flag = "--" + name.replace("_", "-")
                raise BadInput(f"{flag} {value} is not a finite number", f"give {flag} as a plain number")
        if not 0 <= self.hours_per_day <= 24:
            raise BadInput(
                f"--hours-per-day {self.hours_per_day:g} is outside 0-24",
                "give the hours of GPU use per day, between 0 and 24",
            )
        for flag, value in (
            ("--cloud-price", self.cloud_price),
            ("--server-price", self.server_price),
            ("--power-kw", self.power_kw),
            ("--electricity", self.electricity),
            ("--ops-per-year", self.ops_per_year),
        ):
            if value < 0:
                raise BadInput(f"{flag} {value:g} is negative", f"give {flag} as a number >= 0")
        if self.years <= 0:
            raise BadInput(f"--years {self.years:g} is not positive", "give the amortisation period, e.g. --years 3")


@dataclass(frozen=True)
class CostResult:
    cloud_per_year: float
    own_per_year: float
    break_even_hours_per_day: float | None
    recommendation: str  # "cloud" | "own"

    @property
    def savings_per_year(self) -> float:
        """What the recommended choice saves per year against the other one."""
        return abs(self.cloud_per_year - self.own_per_year)


def cloud_per_year(cloud_price: float, hours_per_day: float) -> float:
    return cloud_price * hours_per_day * DAYS_PER_YEAR


def own_per_year(i: CostInputs, hours_per_day: float | None = None) -> float:
    h = i.hours_per_day if hours_per_day is None else hours_per_day
    return i.server_price / i.years + i.ops_per_year + i.power_kw * h * DAYS_PER_YEAR * i.electricity


def break_even_hours_per_day(i: CostInputs) -> float | None:
    """Hours per day from which owning is cheaper; None when the cloud is cheaper at any usage."""
    per_hour_saving = i.cloud_price - i.power_kw * i.electricity
    if per_hour_saving <= 0:  # an hour in the cloud costs no more than an hour of own power
        return None
    hours = (i.server_price / i.years + i.ops_per_year) / (DAYS_PER_YEAR * per_hour_saving)
    return hours if hours <= 24 else None


def compute(i: CostInputs) -> CostResult:
    i.validate()
    cloud = cloud_per_year(i.cloud_price, i.hours_per_day)
    own = own_per_year(i)
    # A tie goes to the cloud: the same money without buying, housing and running a server.
    return CostResult(cloud, own, break_even_hours_per_day(i), "cloud" if cloud <= own else "own")


def curve(i: CostInputs, points: int = 97) -> tuple[list[float], list[float], list[float]]:
    """Hours per day 0..24 and both yearly costs at each (what the plot draws)."""
    hours = [24 * k / (points - 1) for k in range(points)]
    return hours, [cloud_per_year(i.cloud_price, h) for h in hours], [own_per_year(i, h) for h in hours]


def knowledge_price(instance_type: str, spot: bool) -> CloudPrice:
    """The hourly price of an EC2 instance type from the knowledge data, with when it was read.

    Unknown names are bad input with the nearest known names (the loader's lookup). The data has
    on-demand prices for some types only, and no spot prices yet: both are a clear bad-input line
    pointing at ``--cloud-price``, never a guess.
    """

    it = load().instance_type(instance_type)
    if spot:
        # Adapter: the knowledge model has no spot field today; read one if a later data version
        # adds it (an InstanceType.spot_price shaped like .price), else say there is none.
        price = getattr(it, "spot_price", None)
        if price is None:
            raise BadInput(
                f"no spot price for `{it.name}` in the knowledge data",
                f"give the spot price you see with --cloud-price USD_PER_HOUR; "
                f"on-demand in the data: {_on_demand_text(it)}",
            )
    else:
        price = it.price
        if price is None:
            raise BadInput(
                f"no on-demand price for `{it.name}` in the knowledge data",
                "give it with --cloud-price USD_PER_HOUR",
            )
    return CloudPrice(
        usd_per_hour=float(price.usd_per_hour),
        origin="knowledge",
        instance_type=it.name,
        spot=spot,
        read=str(price.read),
        source=tuple(price.source),
        confidence=str(price.confidence),
    )


def _on_demand_text(it: Any) -> str:
    p = it.price
    return f"{p.usd_per_hour:g} USD/h read {p.read}" if p is not None else "not in the data either"


# What each input means for the answer, and the flag that sets it (the human output and the JSON
# both state every one: a default of 0 that silently drops a cost is the mistake this guards).
_FLAGS = {
    "hours_per_day": "--hours-per-day",
    "server_price": "--server-price",
    "years": "--years",
    "power_kw": "--power-kw",
    "electricity": "--electricity",
    "ops_per_year": "--ops-per-year",
}


def assumptions(
    i: CostInputs, price: CloudPrice, defaulted: frozenset[str], urls: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every assumption of the answer: ``name``, ``value``, ``origin`` ("given", "default",
    "knowledge"), the flag that sets it and what it means. ``defaulted``: the inputs left at
    their defaults; ``urls``: the knowledge's sources by id, to name a price's source by URL."""
    urls = urls or {}

    def item(name: str, value: Any, meaning: str) -> dict[str, Any]:
        return {
            "name": name,
            "value": value,
            "origin": "default" if name in defaulted else "given",
            "flag": _FLAGS[name],
            "meaning": meaning,
        }

    out: list[dict[str, Any]] = []
    if price.origin == "knowledge":
        out.append(
            {
                "name": "cloud_price",
                "value": price.usd_per_hour,
                "origin": "knowledge",
                "flag": "--instance-type",
                "meaning": (
                    f"{price.instance_type} {'spot' if price.spot else 'on-demand'} Linux, us-east-1, read {price.read}"
                    f" from {', '.join(urls.get(x, x) for x in price.source)} ({price.confidence} confidence);"
                    " storage, data transfer and other regions are not included"
                ),
            }
        )
    else:
        out.append(
            {
                "name": "cloud_price",
                "value": price.usd_per_hour,
                "origin": "given",
                "flag": "--cloud-price",
                "meaning": "your hourly price for the whole cloud machine; storage and data transfer not included",
            }
        )
    h = i.hours_per_day
    out.append(
        item(
            "hours_per_day",
            h,
            f"the GPUs are used {h:g} h a day, 365 days a year ({h / 24:.0%} utilization): the cloud machine is billed"
            " only for those hours (stopped otherwise), the own server draws power only then",
        )
    )
    out.append(
        item("server_price", i.server_price, "purchase price of the own server, as you gave it (no source here)")
    )
    out.append(
        item(
            "years",
            i.years,
            f"straight-line amortization over {i.years:g} years: no resale value, no interest, no financing",
        )
    )
    out.append(
        item(
            "power_kw",
            i.power_kw,
            f"the own server draws {i.power_kw:g} kW during the hours of use"
            if i.power_kw
            else "no power draw counted (0): the own server's electricity is left out; give --power-kw",
        )
    )
    out.append(
        item(
            "electricity",
            i.electricity,
            f"{i.electricity:g} USD per kWh"
            if i.electricity
            else "electricity costs nothing in this answer (0); give --electricity USD_PER_KWH",
        )
    )
    ops = (
        f"{i.ops_per_year:g} USD a year for hosting, cooling, support and admin"
        if i.ops_per_year
        else "not counted (0): hosting, cooling, support and admin are left out; give --ops-per-year"
    )
    out.append(item("ops_per_year", i.ops_per_year, ops))
    return out


def to_json(i: CostInputs, price: CloudPrice, r: CostResult) -> dict[str, Any]:
    return {
        "ok": True,
        "cloud_per_year": round(r.cloud_per_year, 2),
        "own_per_year": round(r.own_per_year, 2),
        "break_even_hours_per_day": (
            None if r.break_even_hours_per_day is None else round(r.break_even_hours_per_day, 3)
        ),
        "recommendation": r.recommendation,
        "savings_per_year": round(r.savings_per_year, 2),
        "cloud_price": price.to_json(),
        "inputs": asdict(i),
    }


def advise(
    inputs: CostInputs,
    *,
    instance_type: str | None,
    spot: bool,
    plot: Path | None,
    defaulted: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """`provision advise cost`: check, price (the flag's or ``instance_type``'s), compute, plot; the JSON.

    Everything that can be bad input is checked before the knowledge is read or a file written.
    ``defaulted``: the inputs the user left at their defaults (the answer says so).
    """
    inputs.validate()
    if plot is not None:
        check_target(plot)
        require_matplotlib()
    if instance_type is not None:
        price = knowledge_price(instance_type, spot)
        inputs = CostInputs(**{**inputs.__dict__, "cloud_price": price.usd_per_hour})
    else:
        price = CloudPrice(usd_per_hour=inputs.cloud_price, origin="flag")
    result = compute(inputs)
    doc = to_json(inputs, price, result)
    urls: dict[str, str] = {}
    if price.origin == "knowledge":
        urls = {k: v.url for k, v in load().t.sources.items()}
    doc["assumptions"] = assumptions(inputs, price, defaulted, urls)
    if plot is not None:
        hours, cloud_curve, own_curve = curve(inputs)
        title = f"cloud {price.usd_per_hour:g} USD/h" + (f" ({price.instance_type})" if price.instance_type else "")
        cost_plot(
            plot,
            hours=hours,
            cloud=cloud_curve,
            own=own_curve,
            break_even=result.break_even_hours_per_day,
            hours_per_day=inputs.hours_per_day,
            title=title,
        )
        doc["plot"] = str(plot)
    return doc
