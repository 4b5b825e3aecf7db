"""Listing a region's runs from their tags, with price per hour and cost so far (``cloud ls``).

Tags alone never make a resource provision's: anyone allowed to tag in the account can write
``provision:run`` and ``provision:expires-at`` on anything, and ``cloud down --expired`` (cron)
would end it. A resource is provision's only when its run tag is a run id *and* it carries what
provision gave it at creation, which tagging cannot change (:func:`why_not_owned`). The others come
back as :class:`Skipped`, with the reason, and are never acted on.
"""

from __future__ import annotations

from datetime import timezone
from typing import Any

from provision.cloud.aws import hostttl, prices
from provision.cloud.aws.session import LIVE_STATES, Ec2Session, tag_map
from provision.cloud.interface import TAG_EXPIRES, TAG_RUN, CloudInstance, Skipped, owned_name, parse_iso
from provision.ids import is_run_id

# kind -> (the key of its id, the key of the name provision gave it)
KINDS = {
    "instance": ("InstanceId", "KeyName"),
    "security group": ("GroupId", "GroupName"),
    "key pair": ("KeyName", "KeyName"),
}


def _shown(value: object) -> str:
    # names and tags may hold anything their writer chose: quoted, and cut to 80 characters
    return repr(value)[:80]


def _groups(instance: dict[str, Any]) -> set[str]:
    """The names of an instance's security groups (its own list and its network interfaces')."""
    return {
        str(g.get("GroupName"))
        for g in [
            *instance.get("SecurityGroups", []),
            *(g for n in instance.get("NetworkInterfaces", []) for g in n.get("Groups", [])),
        ]
    }


def why_not_owned(kind: str, resource: dict[str, Any]) -> str | None:
    """Why ``resource`` is not one provision made for the run its tag names; None when it is.

    What counts is set once, at creation, and no tag can change it: a key pair's and a security
    group's name (only CreateKeyPair / ImportKeyPair and CreateSecurityGroup take one; no EC2 call
    renames them), and the key pair an instance was launched with (``KeyName``: "the name of the key
    pair, if this instance was launched with an associated key pair"; ModifyInstanceAttribute
    cannot change it, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifyInstanceAttribute.html
    lists the attributes it can). provision names both ``provision-<run>`` and launches every
    instance with both in the same RunInstances call, so an instance counts only with that key
    pair and in that group. Someone else's server, group or key pair tagged with a run id, even
    the id of a real run, has other names, whatever its tags say.
    """
    run = tag_map(resource).get(TAG_RUN, "")
    if not is_run_id(run):
        return "not a provision run id"
    name = owned_name(run)
    given = resource.get(KINDS[kind][1])
    if given != name:
        made = "launched with key pair" if kind == "instance" else "named"
        return f"{made} {_shown(given)}, not {name}: provision did not make it"
    if kind == "instance" and name not in _groups(resource):
        return f"not in security group {name}: provision did not launch it"
    return None


def split_owned(resources: list[dict[str, Any]], kind: str) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """(the resources provision made for the run their tag names, the others as Skipped with the reason)."""
    ok: list[dict[str, Any]] = []
    bad: list[Skipped] = []
    for r in resources:
        why = why_not_owned(kind, r)
        if why is None:
            ok.append(r)
        else:
            bad.append(Skipped(str(r[KINDS[kind][0]]), _shown(tag_map(r).get(TAG_RUN, "")), why))
    return ok, bad


class Listing(Ec2Session):
    """The live instances carrying a run tag (``Ec2.listing``)."""

    def _tagged_instances(self) -> list[dict[str, Any]]:
        """Live instances carrying a run tag, whoever made them."""
        return list(
            self._paged(
                "describe_instances",
                "Reservations",
                Filters=[
                    {"Name": "tag-key", "Values": [TAG_RUN]},
                    {"Name": "instance-state-name", "Values": LIVE_STATES},
                ],
            )
        )

    def _live_instances(self) -> tuple[list[dict[str, Any]], list[Skipped]]:
        """Live instances carrying a run tag: those provision launched, and the others as Skipped."""
        return split_owned(self._tagged_instances(), "instance")

    def instances(self) -> list[CloudInstance]:
        return self.listing()[0]

    def listing(self) -> tuple[list[CloudInstance], list[Skipped]]:
        """The live instances of provision's runs, and the others tagged with a run as Skipped."""
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
