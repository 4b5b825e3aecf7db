"""Launching a run: read-only checks first (VPC, subnets, images), then key pair, security group,
instances (through :mod:`failover`), the waits, the inventory and ``cloud.json``; any failure on
the way removes what was made (:mod:`teardown`) unless ``--keep-on-failure``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from provision.cloud.aws.failover import Failover
from provision.cloud.aws.images import AmiLookup, Image, ImageQuery, aws_lookup, ssh_user
from provision.cloud.aws.session import aws_tags
from provision.cloud.aws.teardown import Created, Teardown
from provision.cloud.errors import CloudError
from provision.cloud.interface import (
    TAG_EXPIRES,
    TAG_RUN,
    AddressMap,
    Launched,
    LaunchResult,
    Say,
    iso,
    owned_name,
)
from provision.cloud.inventory import Host, inventory_doc, write_inventory, write_known_hosts
from provision.cloud.request import LaunchRequest, cidr_warnings
from provision.errors import BadInput, ProvisionError
from provision.files import private_dir, replace_file
from provision.ids import check_run_id


class Launching(Failover, Teardown):
    """The launch of one run (``Ec2.launch``) and the read-only look-ups it starts with."""

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

    def describe_image(self, ami: str) -> Image:
        try:
            images = self.call(self.client.describe_images, ImageIds=[ami])["Images"]
        except Exception as exc:
            raise self.fail(exc, f"AMI {ami}") from exc
        if not images:
            raise CloudError(
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
        ami_lookup: AmiLookup | None = None,
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
        tags = {TAG_RUN: req.run, TAG_EXPIRES: expires, "Name": owned_name(req.run), **req.tags}
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
            private_dir(run_dir)  # it holds the private key of a new key pair
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
            replace_file(run_dir / "cloud.json", json.dumps(record, indent=2) + "\n")
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
        assert req.image is not None
        # SSM's public parameters unless the caller brings its own look-up (tests, air-gapped users)
        lookup = lookup or aws_lookup(self.session, self.region, self.call)
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
                raise CloudError(f"{ami} is {img.arch}, not {arch}", "pass --ami of the right architecture")
            out[arch] = img
        return out

    def _key_pair(
        self, req: LaunchRequest, tags: dict[str, str], run_dir: Path, created: Created
    ) -> tuple[str, Path | None]:
        name = owned_name(req.run)  # the name that makes it provision's (listing.why_not_owned)
        spec = [{"ResourceType": "key-pair", "Tags": aws_tags(tags)}]
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
        # 0600 from the start (mkstemp), renamed into place: the secret never sits in a file
        # others can read, and never goes through a link planted at the name.
        replace_file(path, key["KeyMaterial"].rstrip("\n") + "\n")
        created.key_file = path
        return name, path

    def _security_group(self, req: LaunchRequest, vpc: str, tags: dict[str, str], created: Created) -> None:
        try:
            sg = self.call(
                self.client.create_security_group,
                GroupName=owned_name(req.run),  # the name that makes it provision's (listing.why_not_owned)
                Description=f"provision run {req.run}: SSH from {req.ssh_cidr} only",
                VpcId=vpc,
                TagSpecifications=[{"ResourceType": "security-group", "Tags": aws_tags(tags)}],
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

    def _hosts(
        self, req: LaunchRequest, described: list[dict[str, Any]], address_map: AddressMap | None
    ) -> tuple[list[Host], list[Launched]]:
        hosts: list[Host] = []
        final: list[Launched] = []
        user = ssh_user(req.os_id)
        for i in sorted(described, key=lambda d: d["InstanceId"]):
            addr = i.get("PublicIpAddress") if req.ssh_address == "public" else i.get("PrivateIpAddress")
            if not addr:
                raise CloudError(
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
