"""Listing a region's runs from their tags, with price per hour and cost so far (``cloud ls``).

Only resources whose ``provision:run`` tag is a run id are provision's; the others come back as
:class:`Skipped` and are never acted on.
"""

from __future__ import annotations

from datetime import timezone
from typing import Any

from provision.cloud.aws import hostttl, prices
from provision.cloud.aws.session import LIVE_STATES, Ec2Session, tag_map
from provision.cloud.interface import TAG_EXPIRES, TAG_RUN, CloudInstance, Skipped, parse_iso
from provision.ids import is_run_id


def _skipped(resource: str, tags: dict[str, str]) -> Skipped:
    return Skipped(resource, repr(tags.get(TAG_RUN, ""))[:80])


def split_by_run_id(resources: list[dict[str, Any]], id_key: str) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """(the resources tagged with a valid run id, the others as Skipped)."""
    ok: list[dict[str, Any]] = []
    bad: list[Skipped] = []
    for r in resources:
        tags = tag_map(r)
        if is_run_id(tags.get(TAG_RUN, "")):
            ok.append(r)
        else:
            bad.append(_skipped(str(r[id_key]), tags))
    return ok, bad


class Listing(Ec2Session):
    """The live instances carrying a run tag (``Ec2.listing``)."""

    def _live_instances(self) -> tuple[list[dict[str, Any]], list[Skipped]]:
        """Live instances carrying a run tag: those whose tag is a run id, and those it is not."""
        return split_by_run_id(
            list(
                self._paged(
                    "describe_instances",
                    "Reservations",
                    Filters=[
                        {"Name": "tag-key", "Values": [TAG_RUN]},
                        {"Name": "instance-state-name", "Values": LIVE_STATES},
                    ],
                )
            ),
            "InstanceId",
        )

    def instances(self) -> list[CloudInstance]:
        return self.listing()[0]

    def listing(self) -> tuple[list[CloudInstance], list[Skipped]]:
        """The live instances of provision's runs, and those whose run tag is not a run id."""
        now = self.now()
        found, skipped = self._live_instances()
        out = []
        spot_cache: dict[tuple[str, str], float | None] = {}
        for i in found:
            tags = tag_map(i)
            market = "spot" if i.get("InstanceLifecycle") == "spot" else "on-demand"
            zone = i.get("Placement", {}).get("AvailabilityZone", "")
            itype = i["InstanceType"]
            price: float | None
            if market == "spot":
                if (itype, zone) not in spot_cache:
                    spot_cache[(itype, zone)] = prices.spot(self.client, itype, zone, self.call)
                price = spot_cache[(itype, zone)]
                source: str | None = "spot price history"
            else:
                price, read = prices.on_demand(itype)
                source = f"on-demand, knowledge data read {read}" if read else None
            launched = i["LaunchTime"]
            if launched.tzinfo is None:
                launched = launched.replace(tzinfo=timezone.utc)
            running = i["State"]["Name"] in ("pending", "running")
            out.append(
                CloudInstance(
                    id=i["InstanceId"],
                    run=tags.get(TAG_RUN, ""),
                    type=itype,
                    state=i["State"]["Name"],
                    zone=zone,
                    market=market,
                    public_ip=i.get("PublicIpAddress"),
                    private_ip=i.get("PrivateIpAddress"),
                    launched=launched,
                    expires_at=parse_iso(tags.get(TAG_EXPIRES, "")),
                    usd_per_hour=price if running else 0.0,
                    price_source=source if price is not None else None,
                    cost_so_far_usd=prices.cost_so_far(price, launched, now),
                    ttl_on_host=tags.get(hostttl.TAG_HOST_TTL) == hostttl.HOST_TTL_ARMED,
                )
            )
        return sorted(out, key=lambda c: (c.run, c.id)), skipped
