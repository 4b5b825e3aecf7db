"""What an instance costs: on-demand from the knowledge data, spot from EC2's price history.

On-demand prices are data (``matrix/data/ec2.yaml``, us-east-1 Linux, with the month they were
read); a type the data has no price for shows as unknown rather than a guess. Spot prices move,
so they are read from ``DescribeSpotPriceHistory`` (the newest point for the instance's zone).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from provision.matrix import load


def on_demand(instance_type: str) -> tuple[float | None, str | None]:
    """(USD per hour, month read) from the knowledge data, or (None, None) when it has no price."""

    try:
        it = load().instance_type(instance_type)
    except Exception:  # a type launched by hand that the data does not list: unknown, not an error
        return None, None
    return (it.price.usd_per_hour, it.price.read) if it.price else (None, None)


def spot(ec2: Any, instance_type: str, zone: str | None, call: Callable[..., Any]) -> float | None:
    """The newest spot price for the type (in the zone when known), or None when EC2 has none."""
    kwargs: dict[str, Any] = {
        "InstanceTypes": [instance_type],
        "ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
        "StartTime": datetime.now(timezone.utc),
        "MaxResults": 20,
    }
    if zone:
        kwargs["AvailabilityZone"] = zone
    points = call(ec2.describe_spot_price_history, **kwargs).get("SpotPriceHistory", [])
    if not points:
        return None
    newest = max(points, key=lambda p: p["Timestamp"])
    return float(newest["SpotPrice"])


def cost_so_far(usd_per_hour: float | None, launched: datetime, now: datetime | None = None) -> float | None:
    """Hourly price x hours since launch (EC2 bills Linux per second)."""
    if usd_per_hour is None:
        return None
    now = now or datetime.now(timezone.utc)
    hours = max(0.0, (now - launched).total_seconds() / 3600)
    return round(usd_per_hour * hours, 4)
