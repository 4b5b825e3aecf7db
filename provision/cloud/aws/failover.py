"""Getting the instances: RunInstances per type, zone and market, moving on when EC2 has no capacity.

Capacity errors move to the next zone, then the next type; a spot quota moves to on-demand when
``--on-demand-fallback`` allows it; anything else stops. :class:`Created` records what was sent,
so an interrupted RunInstances is still cleaned up.
"""

from __future__ import annotations

from typing import Any

from provision.cloud.aws import errors as cerr
from provision.cloud.aws import hostttl
from provision.cloud.aws.images import Image
from provision.cloud.aws.session import Ec2Session, aws_tags
from provision.cloud.aws.teardown import Created
from provision.cloud.errors import CloudError
from provision.cloud.interface import TAG_EXPIRES, Attempt, Launched, Say, parse_iso
from provision.cloud.request import LaunchRequest, TypeChoice


class Failover(Ec2Session):
    """RunInstances with the zone / type / market failover (``Ec2._run_instances``)."""

    def zones_offering(self, instance_type: str) -> list[str]:
        offers = self._paged(
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}],
        )
        return sorted({o["Location"] for o in offers})

    def _run_instances(
        self,
        *,
        req: LaunchRequest,
        types: list[TypeChoice],
        images: dict[str, Image],
        subnets: dict[str, str],
        key_name: str,
        tags: dict[str, str],
        created: Created,
        say: Say,
    ) -> tuple[list[Launched], list[Attempt]]:
        """Next zone on a capacity error, then the next type; spot first, on-demand if asked."""
        markets = (
            ["spot", "on-demand"] if req.spot and req.on_demand_fallback else ["spot"] if req.spot else ["on-demand"]
        )
        attempts: list[Attempt] = []
        for market in markets:
            for t in types:
                zones = [z for z in self.zones_offering(t.name) if z in subnets]
                if not zones:
                    attempts.append(Attempt(t.name, "-", market, "not offered in region"))
                    continue
                for zone in zones:
                    try:
                        resp = self._run_one(
                            req=req,
                            t=t,
                            image=images[t.arch],
                            subnet=subnets[zone],
                            key_name=key_name,
                            tags=tags,
                            market=market,
                            created=created,
                        )
                    except Exception as exc:
                        c = cerr.classify(exc)
                        if c is None:
                            raise
                        attempts.append(Attempt(t.name, zone, market, c.code))
                        if c.kind is cerr.Kind.CAPACITY:
                            say(f"{t.name} {market} in {zone}: {c.code}; trying the next zone")
                            continue
                        if c.kind is cerr.Kind.QUOTA:
                            code, quota = cerr.quota_for(t.name, market == "spot")
                            if market == "spot" and "on-demand" in markets:
                                say(f"spot quota reached ({quota}); falling back to on-demand")
                                break
                            raise CloudError(
                                f"{t.name} x{req.count} ({market}) exceeds your quota: {c.code}: {c.message}",
                                f"raise the EC2 quota '{quota}' ({code}) in Service Quotas for {self.region}",
                                aws_code=c.code,
                            ) from exc
                        raise cerr.to_provision_error(c, f"launching {t.name} in {zone}") from exc
                    attempts.append(Attempt(t.name, zone, market, "launched"))
                    return resp, attempts
                else:
                    continue
                break  # a spot quota: the whole spot market is out, go to on-demand
        tried = "; ".join(f"{a.instance_type} {a.market} {a.zone}: {a.outcome}" for a in attempts)
        raise CloudError(
            f"no capacity for {', '.join(t.name for t in types)} x{req.count} in {self.region} ({tried})",
            "try another --region, more types in --instance-type, "
            + ("--on-demand-fallback, " if req.spot and not req.on_demand_fallback else "")
            + "or later",
            aws_code="InsufficientInstanceCapacity",
        )

    def _run_one(
        self,
        *,
        req: LaunchRequest,
        t: TypeChoice,
        image: Image,
        subnet: str,
        key_name: str,
        tags: dict[str, str],
        market: str,
        created: Created,
    ) -> list[Launched]:
        assert created.security_group is not None
        expires = parse_iso(tags[TAG_EXPIRES])
        assert expires is not None  # launch() wrote it with iso()
        kwargs: dict[str, Any] = {
            "ImageId": image.id,
            "InstanceType": t.name,
            "MinCount": req.count,  # all or nothing: a partial fleet is a failed launch
            "MaxCount": req.count,
            "KeyName": key_name,
            "NetworkInterfaces": [
                {
                    "DeviceIndex": 0,
                    "SubnetId": subnet,
                    "Groups": [created.security_group],
                    "AssociatePublicIpAddress": req.ssh_address == "public",
                    "DeleteOnTermination": True,
                }
            ],
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpEndpoint": "enabled",
                "HttpPutResponseHopLimit": 2,
            },
            "BlockDeviceMappings": [
                {
                    "DeviceName": image.root_device,
                    "Ebs": {
                        "VolumeSize": max(req.root_gib, image.root_gib),
                        "VolumeType": "gp3",
                        "Encrypted": True,
                        "DeleteOnTermination": True,
                    },
                }
            ],
            # The TTL held on the host (hostttl): the user data powers the instance off at the
            # expiry, and a shutdown from inside the OS terminates it instead of stopping it.
            "InstanceInitiatedShutdownBehavior": hostttl.SHUTDOWN_BEHAVIOR,
            "UserData": hostttl.user_data(req.run, expires),
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": aws_tags({**tags, hostttl.TAG_HOST_TTL: hostttl.HOST_TTL_ARMED})},
                {"ResourceType": "volume", "Tags": aws_tags(tags)},
            ],
            "ClientToken": f"provision-{req.run}-{t.name}-{subnet}-{market}"[:64],
        }
        if market == "spot":
            kwargs["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        from botocore.exceptions import ClientError  # noqa: PLC0415 (botocore is heavy: only an AWS call loads it)

        created.launching = True
        try:
            resp = self.call(self.client.run_instances, **kwargs)
        except ClientError:
            # EC2 answered with an error, and MinCount = MaxCount makes that all or nothing: it
            # made none. (A dropped connection or an interrupt leaves `launching` set.)
            created.launching = False
            raise
        created.launching = False
        out = [
            Launched(
                id=i["InstanceId"],
                type=i["InstanceType"],
                zone=i.get("Placement", {}).get("AvailabilityZone", ""),
                market=market,
                public_ip=i.get("PublicIpAddress"),
                private_ip=i.get("PrivateIpAddress"),
                state=i["State"]["Name"],
            )
            for i in resp["Instances"]
        ]
        created.instances.extend(i.id for i in out)
        return out
