"""EC2 through boto3: launch a run of tagged GPU instances, list them, terminate them.

One run = the instances of one ``cloud up`` plus the security group and key pair made for them,
all tagged ``provision:run`` and ``provision:expires-at``. AWS is the record: ``ls`` and ``down``
read the tags, so they work from any machine with the credentials, and a crashed ``up`` leaves
nothing that ``down --run`` cannot find. The session is boto3's standard one (``AWS_PROFILE``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from provision.cloud import errors as cerr
from provision.cloud import hostttl, prices
from provision.cloud.images import AmiLookup, ImageQuery, ssh_user
from provision.cloud.inventory import (
    Host,
    host_keys_from_console,
    inventory_doc,
    write_inventory,
    write_known_hosts,
)
from provision.cloud.request import LaunchRequest, TypeChoice, cidr_warnings
from provision.errors import BadInput, ProvisionError

TAG_RUN = "provision:run"
TAG_EXPIRES = "provision:expires-at"
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]

Say = Callable[[str], None]
# (instance id, address EC2 gave) -> (address, port) to reach it; tests map onto SSH test hosts.
AddressMap = Callable[[str, str], tuple[str, int]]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def new_run_id(now: datetime | None = None) -> str:
    return f"{(now or _utcnow()).strftime('%Y%m%d-%H%M%S')}-{os.urandom(2).hex()}"


# The only form new_run_id makes. A run id names paths (.provision/runs/<id>/, inventory/ec2-<id>.yml)
# and anyone who may tag in the account can write a `provision:run` tag, so every id read from a
# tag or from the command line is checked against this before it is used.
_RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")


def is_run_id(text: str) -> bool:
    """True for an id of the form :func:`new_run_id` makes (and nothing else, no path parts)."""
    return _RUN_ID.fullmatch(text) is not None


def check_run_id(text: str, what: str = "--run") -> str:
    """A run id from the command line; bad input (exit 2) unless it is of the form provision makes."""
    if not is_run_id(text):
        raise BadInput(
            f"{what} {text[:80]!r} is not a provision run id",
            "give the id `provision cloud ls` shows, e.g. 20261130-020846-fc86",
        )
    return text


def open_session(region: str | None) -> tuple[Any, str]:
    """boto3's standard session; refuses (exit 2) when no region or no credentials are found.

    Only local configuration is read here: nothing is sent to AWS before the input is known good.
    """
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        session = boto3.session.Session()
    except ProfileNotFound as exc:
        raise BadInput(f"AWS profile not found: {exc}", "check AWS_PROFILE against ~/.aws/config") from exc
    region = region or session.region_name or os.environ.get("AWS_REGION")
    if not region:
        raise BadInput("no AWS region given", "pass --region, or set AWS_REGION or a region in your profile")
    if session.get_credentials() is None:
        raise BadInput(
            "no AWS credentials found",
            "set AWS_PROFILE (and `aws sso login`), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        )
    return session, region


def client_config() -> Any:
    from botocore.config import Config

    # botocore's retries off: errors.call owns the retry policy, so every attempt is visible.
    return Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=10, read_timeout=60)


def _tags(d: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in d.items()]


def _tag_map(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", []) or []}


@dataclass(frozen=True)
class Image:
    id: str
    arch: str
    root_device: str
    root_gib: int


@dataclass
class Created:
    """What a launch has made so far, in order: the cleanup undoes this and what carries the run tag."""

    key_name: str | None = None
    key_file: Path | None = None
    security_group: str | None = None
    instances: list[str] = field(default_factory=list)
    # RunInstances was sent and no answer read yet: instances may exist whose ids we never got
    launching: bool = False

    def describe(self) -> str:
        parts = [*self.instances]
        if self.security_group:
            parts.append(self.security_group)
        if self.key_name:
            parts.append(f"key pair {self.key_name}")
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True)
class Attempt:
    instance_type: str
    zone: str
    market: str  # spot | on-demand
    outcome: str  # launched | the AWS error code


@dataclass(frozen=True)
class Launched:
    id: str
    type: str
    zone: str
    market: str
    public_ip: str | None
    private_ip: str | None
    state: str


@dataclass
class LaunchResult:
    run: str
    region: str
    inventory: Path
    run_dir: Path
    instances: list[Launched]
    attempts: list[Attempt]
    host_keys: int
    private_key: Path | None
    expires_at: str
    warnings: list[str] = field(default_factory=list)  # said on stderr before the launch, kept for --json


@dataclass(frozen=True)
class CloudInstance:
    id: str
    run: str
    type: str
    state: str
    zone: str
    market: str
    public_ip: str | None
    private_ip: str | None
    launched: datetime
    expires_at: datetime | None
    usd_per_hour: float | None
    price_source: str | None
    cost_so_far_usd: float | None
    # the launch carried the user data that powers the host off at expires_at (and
    # terminate-on-shutdown): the TTL holds without this controller (see hostttl)
    ttl_on_host: bool = False

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["launched"] = iso(self.launched)
        d["expires_at"] = iso(self.expires_at) if self.expires_at else None
        return d


@dataclass(frozen=True)
class Skipped:
    """A resource whose ``provision:run`` tag is not an id provision makes: reported, never acted on."""

    resource: str  # instance id, security group id or key pair name
    run: str  # the tag's value as Python's repr shows it, cut to 80 characters (it may hold anything)
    reason: str = "not a provision run id"

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    def line(self) -> str:
        return f"skipped {self.resource}: its {TAG_RUN} tag {self.run} is {self.reason}; left as it is"


def _skipped(resource: str, tags: dict[str, str]) -> Skipped:
    return Skipped(resource, repr(tags.get(TAG_RUN, ""))[:80])


def _split_by_run_id(resources: list[dict[str, Any]], id_key: str) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """(the resources tagged with a valid run id, the others as Skipped)."""
    ok: list[dict[str, Any]] = []
    bad: list[Skipped] = []
    for r in resources:
        tags = _tag_map(r)
        if is_run_id(tags.get(TAG_RUN, "")):
            ok.append(r)
        else:
            bad.append(_skipped(str(r[id_key]), tags))
    return ok, bad


@dataclass
class DownResult:
    runs: list[str]
    terminated: list[str]
    security_groups: list[str]
    key_pairs: list[str]
    local_files: list[str]
    skipped: list[Skipped] = field(default_factory=list)


class Ec2:
    """One region's EC2 client plus the policies of this module (retries, waits, tags)."""

    def __init__(
        self,
        session: Any,
        region: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], datetime] = _utcnow,
        poll_s: float = 5.0,
    ) -> None:
        self.session = session
        self.region = region
        self.client = session.client("ec2", region_name=region, config=client_config())
        self.sleep = sleep
        self.now = now
        self.poll_s = poll_s

    def call(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        return cerr.call(fn, sleep=self.sleep, **kwargs)

    @staticmethod
    def _as_error(exc: BaseException) -> ProvisionError | None:
        """The one-line error for an AWS error that escaped a step; None to re-raise as it is."""
        if isinstance(exc, ProvisionError) or not isinstance(exc, Exception):
            return None
        c = cerr.classify(exc)
        return cerr.to_provision_error(c, "launching") if c else None

    def fail(self, exc: BaseException, what: str) -> ProvisionError:
        c = cerr.classify(exc)
        if c is None:
            raise exc
        return cerr.to_provision_error(c, what)

    def _paged(self, op: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = self.call(getattr(self.client, op), **kwargs, **({"NextToken": token} if token else {}))
            if key == "Reservations":
                for r in page.get(key, []):
                    yield from r.get("Instances", [])
            else:
                yield from page.get(key, [])
            token = page.get("NextToken")
            if not token:
                return

    # --- launch -------------------------------------------------------------------------------
    def default_subnets(self) -> tuple[str, dict[str, str]]:
        vpcs = self.call(self.client.describe_vpcs, Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
        if not vpcs:
            raise BadInput(
                f"no default VPC in {self.region}",
                "create one with `aws ec2 create-default-vpc`, or use another --region",
            )
        vpc = vpcs[0]["VpcId"]
        subnets = self._paged("describe_subnets", "Subnets", Filters=[{"Name": "vpc-id", "Values": [vpc]}])
        by_zone: dict[str, str] = {}
        for s in subnets:
            if s.get("DefaultForAz", True):
                by_zone.setdefault(s["AvailabilityZone"], s["SubnetId"])
        return vpc, by_zone

    def zones_offering(self, instance_type: str) -> list[str]:
        offers = self._paged(
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}],
        )
        return sorted({o["Location"] for o in offers})

    def describe_image(self, ami: str) -> Image:
        try:
            images = self.call(self.client.describe_images, ImageIds=[ami])["Images"]
        except Exception as exc:
            raise self.fail(exc, f"AMI {ami}") from exc
        if not images:
            raise cerr.CloudError(
                f"AMI {ami} not found in {self.region}",
                "check the id and the region",
                aws_code="InvalidAMIID.NotFound",
            )
        img = images[0]
        root = img.get("RootDeviceName") or "/dev/sda1"
        size = 8
        for m in img.get("BlockDeviceMappings", []):
            if m.get("DeviceName") == root and "Ebs" in m:
                size = int(m["Ebs"].get("VolumeSize", size))
        return Image(id=img["ImageId"], arch=img.get("Architecture", "x86_64"), root_device=root, root_gib=size)

    def launch(
        self,
        req: LaunchRequest,
        *,
        ami_lookup: AmiLookup | None,
        workdir: Path,
        say: Say = lambda _m: None,
        address_map: AddressMap | None = None,
        ssh_timeout_s: float = 600.0,
        boot_timeout_s: float = 900.0,
        accept_no_host_keys: bool = True,
    ) -> LaunchResult:
        check_run_id(req.run, "run")  # it names the run dir below
        now = self.now()
        expires = iso(now + req.ttl)
        tags = {TAG_RUN: req.run, TAG_EXPIRES: expires, "Name": f"provision-{req.run}", **req.tags}
        run_dir = workdir / ".provision" / "runs" / req.run
        created = Created()

        # Everything that only reads comes first: a bad image or a missing VPC creates nothing.
        vpc, subnets = self.default_subnets()
        images = self._images(req, ami_lookup)
        types = [t for t in req.types if t.arch in images]
        if not types:
            raise BadInput(
                f"the AMI is {', '.join(images)}; {', '.join(t.name for t in req.types)} need another arch",
                "pass an AMI of the type's architecture, or use --os to look one up",
            )
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            run_dir.chmod(0o700)  # it holds the private key of a new key pair
            key_name, private_key = self._key_pair(req, tags, run_dir, created)
            self._security_group(req, vpc, tags, created)
            launched, attempts = self._run_instances(
                req=req,
                types=types,
                images=images,
                subnets=subnets,
                key_name=key_name,
                tags=tags,
                created=created,
                say=say,
            )
            ids = [i.id for i in launched]
            say(f"launched {', '.join(ids)}; waiting for them to run")
            described = self._wait_running(ids, boot_timeout_s)
            say("running; waiting for the status checks")
            self._wait_status_ok(ids, boot_timeout_s)
            hosts, final = self._hosts(req, described, address_map)
            if req.wait_ssh:
                say("status checks passed; waiting for SSH")
                self._wait_ssh(hosts, ssh_timeout_s)
            hosts = self._with_host_keys(hosts, patient=req.wait_ssh)
            known = run_dir / "known_hosts"
            n_keys = write_known_hosts(known, hosts)
            if n_keys == 0:
                say("no host keys in the console output yet: probe/up will need --accept-new-host-keys")
            os_id = req.os_id
            doc = inventory_doc(
                run=req.run,
                region=self.region,
                hosts=hosts,
                private_key=private_key,
                known_hosts=known if n_keys else None,
                base=req.image.base if req.image else req.base,
                os_id=os_id,
            )
            inv = write_inventory(workdir / "inventory" / f"ec2-{req.run}.yml", doc)
            record = {
                "run": req.run,
                "region": self.region,
                "expires_at": expires,
                "instances": [asdict(i) for i in final],
                "security_group": created.security_group,
                "key_pair": created.key_name,
                "inventory": str(inv),
            }
            (run_dir / "cloud.json").write_text(json.dumps(record, indent=2) + "\n")
        except BaseException as exc:
            err = self._as_error(exc)
            if req.keep_on_failure:
                kept = created.describe()
                say(f"launch failed; kept {kept} (--keep-on-failure): `provision cloud down --run {req.run}`")
                if err is not None:
                    raise err from exc
                raise
            self._cleanup(created, say, exc, req.run)
            if err is not None:
                raise err from exc
            raise
        return LaunchResult(
            req.run,
            self.region,
            inv,
            run_dir,
            final,
            attempts,
            n_keys,
            private_key,
            expires,
            cidr_warnings(req.ssh_cidr),
        )

    def _images(self, req: LaunchRequest, lookup: AmiLookup | None) -> dict[str, Image]:
        """arch -> image, for every architecture among the requested types."""
        if req.ami:
            img = self.describe_image(req.ami)
            return {img.arch: img}
        assert req.image is not None and lookup is not None
        out: dict[str, Image] = {}
        for arch in dict.fromkeys(t.arch for t in req.types):
            q = ImageQuery(os=req.image.os, arch=arch, base=req.image.base)
            try:
                ami = lookup(q)
            except ProvisionError:
                raise
            except Exception as exc:
                raise self.fail(exc, f"looking up the {q.os} {arch} image") from exc
            img = self.describe_image(ami)
            if img.arch != arch:
                raise cerr.CloudError(f"{ami} is {img.arch}, not {arch}", "pass --ami of the right architecture")
            out[arch] = img
        return out

    def _key_pair(
        self, req: LaunchRequest, tags: dict[str, str], run_dir: Path, created: Created
    ) -> tuple[str, Path | None]:
        name = f"provision-{req.run}"
        spec = [{"ResourceType": "key-pair", "Tags": _tags(tags)}]
        try:
            if req.ssh_public_key is not None:
                material = req.ssh_public_key.read_bytes()
                self.call(
                    self.client.import_key_pair,
                    KeyName=name,
                    PublicKeyMaterial=material,
                    TagSpecifications=spec,
                )
                created.key_name = name
                private = req.ssh_public_key.with_suffix("")
                return name, private if private != req.ssh_public_key and private.exists() else None
            key = self.call(self.client.create_key_pair, KeyName=name, KeyType="ed25519", TagSpecifications=spec)
            created.key_name = name
        except ProvisionError:
            raise
        except Exception as exc:
            raise self.fail(exc, "creating the key pair") from exc
        path = run_dir / "id_ed25519"
        # Created 0600 from the start: the secret never sits in a world-readable file.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key["KeyMaterial"].rstrip("\n") + "\n")
        created.key_file = path
        return name, path

    def _security_group(self, req: LaunchRequest, vpc: str, tags: dict[str, str], created: Created) -> None:
        try:
            sg = self.call(
                self.client.create_security_group,
                GroupName=f"provision-{req.run}",
                Description=f"provision run {req.run}: SSH from {req.ssh_cidr} only",
                VpcId=vpc,
                TagSpecifications=[{"ResourceType": "security-group", "Tags": _tags(tags)}],
            )["GroupId"]
            created.security_group = sg
            ip_range = "Ipv6Ranges" if ":" in req.ssh_cidr else "IpRanges"
            cidr_key = "CidrIpv6" if ":" in req.ssh_cidr else "CidrIp"
            self.call(
                self.client.authorize_security_group_ingress,
                GroupId=sg,
                IpPermissions=[
                    {
                        "IpProtocol": "tcp",
                        "FromPort": 22,
                        "ToPort": 22,
                        ip_range: [{cidr_key: req.ssh_cidr, "Description": "SSH for provision"}],
                    }
                ],
            )
        except ProvisionError:
            raise
        except Exception as exc:
            raise self.fail(exc, "creating the security group") from exc

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
                            raise cerr.CloudError(
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
        raise cerr.CloudError(
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
                {"ResourceType": "instance", "Tags": _tags({**tags, hostttl.TAG_HOST_TTL: hostttl.HOST_TTL_ARMED})},
                {"ResourceType": "volume", "Tags": _tags(tags)},
            ],
            "ClientToken": f"provision-{req.run}-{t.name}-{subnet}-{market}"[:64],
        }
        if market == "spot":
            kwargs["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        from botocore.exceptions import ClientError

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

    def _describe(self, ids: list[str]) -> list[dict[str, Any]]:
        return list(self._paged("describe_instances", "Reservations", InstanceIds=ids))

    def _wait_running(self, ids: list[str], timeout_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                found = self._describe(ids)
            except Exception as exc:
                c = cerr.classify(exc)
                # Just after RunInstances the ids may not be visible yet (eventual consistency).
                if c is None or c.code != "InvalidInstanceID.NotFound":
                    raise
                found = []
            states = {i["InstanceId"]: i["State"]["Name"] for i in found}
            gone = [i for i, s in states.items() if s in ("shutting-down", "terminated", "stopping", "stopped")]
            if gone:
                reason = next(
                    (i.get("StateReason", {}).get("Message", "") for i in found if i["InstanceId"] in gone),
                    "",
                )
                raise cerr.CloudError(
                    f"{', '.join(gone)} stopped before running ({reason})", "try again or another zone"
                )
            if len(states) == len(ids) and all(s == "running" for s in states.values()):
                return found
            if time.monotonic() > deadline:
                raise cerr.CloudError(
                    f"instances not running after {timeout_s:.0f}s: {states}", "check the EC2 console"
                )
            self.sleep(self.poll_s)

    def _wait_status_ok(self, ids: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.call(self.client.describe_instance_status, InstanceIds=ids, IncludeAllInstances=True)
            checks = {
                s["InstanceId"]: (
                    s.get("InstanceStatus", {}).get("Status"),
                    s.get("SystemStatus", {}).get("Status"),
                )
                for s in st.get("InstanceStatuses", [])
            }
            bad = [i for i, c in checks.items() if "impaired" in c]
            if bad:
                raise cerr.CloudError(
                    f"status checks failed on {', '.join(bad)}",
                    "the hardware or image is faulty; launch again",
                )
            if len(checks) == len(ids) and all(c == ("ok", "ok") for c in checks.values()):
                return
            if time.monotonic() > deadline:
                raise cerr.CloudError(
                    f"status checks not passed after {timeout_s:.0f}s: {checks}", "check the EC2 console"
                )
            self.sleep(self.poll_s)

    def _hosts(
        self, req: LaunchRequest, described: list[dict[str, Any]], address_map: AddressMap | None
    ) -> tuple[list[Host], list[Launched]]:
        hosts: list[Host] = []
        final: list[Launched] = []
        user = ssh_user(req.os_id)
        for i in sorted(described, key=lambda d: d["InstanceId"]):
            addr = i.get("PublicIpAddress") if req.ssh_address == "public" else i.get("PrivateIpAddress")
            if not addr:
                raise cerr.CloudError(
                    f"{i['InstanceId']} has no {req.ssh_address} address",
                    "use --ssh-address private from inside the VPC, or a subnet that maps public IPs",
                )
            host, port = address_map(i["InstanceId"], addr) if address_map else (addr, 22)
            hosts.append(
                Host(
                    i["InstanceId"],
                    host,
                    port,
                    user,
                    i["InstanceType"],
                    i["Placement"]["AvailabilityZone"],
                    (),
                )
            )
            final.append(
                Launched(
                    i["InstanceId"],
                    i["InstanceType"],
                    i["Placement"]["AvailabilityZone"],
                    "spot" if i.get("InstanceLifecycle") == "spot" else "on-demand",
                    i.get("PublicIpAddress"),
                    i.get("PrivateIpAddress"),
                    i["State"]["Name"],
                )
            )
        return hosts, final

    def _wait_ssh(self, hosts: list[Host], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(hosts)
        while waiting:
            waiting = [h for h in waiting if not ssh_answers(h.address, h.port)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise cerr.CloudError(
                    f"SSH not answering on {', '.join(f'{h.address}:{h.port}' for h in waiting)}"
                    f" after {timeout_s:.0f}s",
                    "check that --ssh-cidr covers this machine's address; or use --no-wait-ssh",
                )
            self.sleep(self.poll_s)

    def _with_host_keys(self, hosts: list[Host], patient: bool) -> list[Host]:
        """Host keys from each console; cloud-init's output can lag SSH by a minute, so retry."""
        out = []
        for h in hosts:
            keys: list[tuple[str, str]] = []
            for _ in range(12 if patient else 1):
                text = self.call(self.client.get_console_output, InstanceId=h.name, Latest=True).get("Output") or ""
                keys = host_keys_from_console(text)
                if keys or not patient:
                    break
                self.sleep(self.poll_s)
            out.append(Host(h.name, h.address, h.port, h.user, h.instance_type, h.zone, tuple(keys)))
        return out

    def _of_run(self, run: str) -> Created:
        """What AWS holds tagged ``provision:run=<run>``: instances not yet terminated, group, key pair.

        A launch interrupted while RunInstances (or CreateKeyPair...) was in flight never got
        the ids back, but EC2 made the resources with the run's tags (TagSpecifications), so the
        tag finds them.
        """
        run_filter = [{"Name": f"tag:{TAG_RUN}", "Values": [run]}]
        insts = self._paged(
            "describe_instances",
            "Reservations",
            Filters=[*run_filter, {"Name": "instance-state-name", "Values": LIVE_STATES}],
        )
        groups = list(self._paged("describe_security_groups", "SecurityGroups", Filters=run_filter))
        keys = list(self._paged("describe_key_pairs", "KeyPairs", Filters=run_filter))
        return Created(
            key_name=keys[0]["KeyName"] if keys else None,
            security_group=groups[0]["GroupId"] if groups else None,
            instances=[i["InstanceId"] for i in insts],
        )

    def _await_launched(self, run: str, tagged: Created, say: Say, tries: int = 6) -> Created:
        """The run's instances, looked up again for a while after an interrupted RunInstances.

        EC2's API is eventually consistent: instances just made can take a moment to appear in
        DescribeInstances (Amazon EC2 API Reference, "Eventual consistency in the Amazon EC2
        API", https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html). The
        call may also never have reached EC2, so the wait is bounded and then said.
        """
        for _ in range(tries):
            self.sleep(self.poll_s)
            tagged = self._of_run(run)
            if tagged.instances:
                return tagged
        say(
            f"RunInstances was interrupted in flight and no instance tagged {TAG_RUN}={run} showed up in "
            f"{tries * self.poll_s:.0f}s; if it reached EC2, they power off at their TTL, or end them with "
            f"`provision cloud down --run {run}`"
        )
        return tagged

    def _cleanup(self, created: Created, say: Say, cause: BaseException, run: str) -> None:
        try:
            tagged = self._of_run(run)
            if created.launching and not tagged.instances:
                tagged = self._await_launched(run, tagged, say)
        except Exception as exc:
            c = cerr.classify(exc)
            if c is None:
                raise
            say(f"could not look up run {run} by its tag ({c.code}); removing what was recorded")
            tagged = Created()
        instances = list(dict.fromkeys([*created.instances, *tagged.instances]))
        groups = list(dict.fromkeys(g for g in (created.security_group, tagged.security_group) if g))
        keys = list(dict.fromkeys(k for k in (created.key_name, tagged.key_name) if k))
        unrecorded = [i for i in instances if i not in created.instances]
        say(
            f"launch failed ({type(cause).__name__}); removing "
            + (", ".join([*instances, *groups, *(f"key pair {k}" for k in keys)]) or "nothing")
            + (f" ({', '.join(unrecorded)} found by the run tag)" if unrecorded else "")
        )
        leftovers = self._remove(instances, groups, keys)
        if created.key_file is not None:
            created.key_file.unlink(missing_ok=True)
        if leftovers:
            raise cerr.CloudError(
                f"launch failed and {', '.join(leftovers)} could not be removed",
                "run `provision cloud down --all` (or --run) once AWS answers again",
            ) from cause

    def _remove(self, instances: list[str], groups: list[str], keys: list[str]) -> list[str]:
        """Terminate, wait, then delete groups and key pairs; returns what could not be removed."""
        left: list[str] = []
        if instances:
            try:
                self.call(self.client.terminate_instances, InstanceIds=instances)
                self._wait_terminated(instances)
            except Exception as exc:
                if cerr.classify(exc) is None:
                    raise
                left += instances
        for g in groups:
            if not self._delete_group(g):
                left.append(g)
        for k in keys:
            try:
                self.call(self.client.delete_key_pair, KeyName=k)
            except Exception as exc:
                if cerr.classify(exc) is None:
                    raise
                left.append(f"key pair {k}")
        return left

    def _wait_terminated(self, ids: list[str], timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = {i["InstanceId"]: i["State"]["Name"] for i in self._describe(ids)}
            if all(s == "terminated" for s in states.values()):
                return
            self.sleep(self.poll_s)
        raise cerr.CloudError(f"instances not terminated after {timeout_s:.0f}s", "check the EC2 console")

    def _delete_group(self, group: str) -> bool:
        # A group stays in use a little while after its instances terminate (DependencyViolation).
        for _ in range(20):
            try:
                self.call(self.client.delete_security_group, GroupId=group)
                return True
            except Exception as exc:
                c = cerr.classify(exc)
                if c is None:
                    raise
                if c.code == "InvalidGroup.NotFound":
                    return True
                if c.code != "DependencyViolation":
                    return False
                self.sleep(self.poll_s)
        return False

    # --- list -------------------------------------------------------------------------------------
    def _live_instances(self) -> tuple[list[dict[str, Any]], list[Skipped]]:
        """Live instances carrying a run tag: those whose tag is a run id, and those it is not."""
        return _split_by_run_id(
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
            tags = _tag_map(i)
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

    # --- down -------------------------------------------------------------------------------------
    def _tagged(self, op: str, key: str) -> list[dict[str, Any]]:
        return list(self._paged(op, key, Filters=[{"Name": "tag-key", "Values": [TAG_RUN]}]))

    def down(
        self,
        *,
        run: str | None = None,
        expired: bool = False,
        all_runs: bool = False,
        workdir: Path | None = None,
    ) -> DownResult:
        if run is not None:
            check_run_id(run)
        now = self.now()
        insts, skipped_i = self._live_instances()
        # A tag that is not a run id is someone else's (or an attack on the paths below):
        # its resources are reported and neither terminated nor deleted, and no path is built from it.
        groups, skipped_g = _split_by_run_id(self._tagged("describe_security_groups", "SecurityGroups"), "GroupId")
        keys, skipped_k = _split_by_run_id(self._tagged("describe_key_pairs", "KeyPairs"), "KeyName")
        skipped = [*skipped_i, *skipped_g, *skipped_k]

        def chosen(tags: dict[str, str]) -> bool:
            if all_runs:
                return True
            if run is not None:
                return tags.get(TAG_RUN) == run
            exp = parse_iso(tags.get(TAG_EXPIRES, ""))
            return expired and exp is not None and exp <= now

        t_ids = [i["InstanceId"] for i in insts if chosen(_tag_map(i))]
        runs = sorted({_tag_map(r)[TAG_RUN] for r in [*insts, *groups, *keys] if chosen(_tag_map(r))})
        # A run's group and key pair go only once none of its instances is left alive.
        alive = {_tag_map(i)[TAG_RUN] for i in insts if i["InstanceId"] not in t_ids}
        g_ids = [g["GroupId"] for g in groups if chosen(_tag_map(g)) and _tag_map(g)[TAG_RUN] not in alive]
        k_names = [k["KeyName"] for k in keys if chosen(_tag_map(k)) and _tag_map(k)[TAG_RUN] not in alive]
        spot_requests = [
            i["SpotInstanceRequestId"] for i in insts if i["InstanceId"] in t_ids and i.get("SpotInstanceRequestId")
        ]
        try:
            if spot_requests:
                self.call(self.client.cancel_spot_instance_requests, SpotInstanceRequestIds=spot_requests)
            left = self._remove(t_ids, g_ids, k_names)
        except ProvisionError:
            raise
        except Exception as exc:
            raise self.fail(exc, "terminating") from exc
        if left:
            raise cerr.CloudError(f"could not remove {', '.join(left)}", "run the same `cloud down` again in a minute")
        local: list[str] = []
        if workdir is not None:
            for r in runs:
                if r in alive:
                    continue
                for p in local_files(workdir, r):
                    if p.exists():
                        p.unlink()
                        local.append(str(p))
        return DownResult(runs, t_ids, g_ids, k_names, local, skipped)


def local_files(workdir: Path, run: str) -> tuple[Path, Path]:
    """The run's private key and inventory under ``workdir``; only for a valid run id."""
    if not is_run_id(run):  # every caller filtered already: this is the last line of defence
        raise ValueError(f"not a run id: {run!r}")
    return workdir / ".provision" / "runs" / run / "id_ed25519", workdir / "inventory" / f"ec2-{run}.yml"


def ssh_answers(host: str, port: int, timeout_s: float = 5.0) -> bool:
    """True when something at host:port speaks SSH (sends the ``SSH-`` banner)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.settimeout(timeout_s)
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def default_ttl() -> timedelta:
    return timedelta(hours=8)
