"""Launch policy against moto, with AWS failures injected at the boto3 layer.

moto never runs out of capacity, throttles or enforces quotas, so those answers are injected
with a ``before-call`` event hook on the real client: the hook returns an AWS error for the
calls it picks (by operation, instance type and subnet) and lets every other call through to
the moto server. The code under test cannot tell the difference from a real EC2 answer.
"""

from __future__ import annotations

import base64
import socket
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.cloud.aws.ec2 import Ec2
from provision.cloud.aws.images import ImageQuery, aws_lookup
from provision.cloud.errors import CloudError
from provision.cloud.request import LaunchRequest, describe_type
from provision.errors import BadInput, ProvisionError
from provision.ids import new_run_id
from tests.integration.cloud_fixtures import REGION, Aws, Http, aws, aws_error, moto_url, nothing_left, tags

__all__ = ["aws", "moto_url"]


class Injector:
    """Answers chosen EC2 calls with an error; records every call it saw."""

    def __init__(self, client: Any, subnet_zone: dict[str, str]) -> None:
        self.rules: list[tuple[str, Callable[[dict[str, Any]], bool], str, int, int]] = []
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.subnet_zone = subnet_zone
        client.meta.events.register("before-call.ec2.*", self._hook)

    def fail(
        self,
        op: str,
        code: str,
        when: Callable[[dict[str, Any]], bool] = lambda b: True,
        status: int = 400,
        times: int = 10**6,
    ) -> None:
        self.rules.append((op, when, code, status, times))

    def _hook(self, model: Any, params: dict[str, Any], **_: Any) -> Any:
        body = dict(params.get("body") or {})
        if "NetworkInterface.1.SubnetId" in body:
            body["zone"] = self.subnet_zone.get(body["NetworkInterface.1.SubnetId"], "?")
        self.seen.append((model.name, body))
        for n, (op, when, code, status, times) in enumerate(self.rules):
            if op == model.name and times > 0 and when(body):
                self.rules[n] = (op, when, code, status, times - 1)
                return aws_error(code, status)
        return None

    def launches(self) -> list[tuple[str, str, str]]:
        return [
            (b["InstanceType"], b["zone"], "spot" if "InstanceMarketOptions.MarketType" in b else "on-demand")
            for op, b in self.seen
            if op == "RunInstances"
        ]


@pytest.fixture
def cloud(aws: Aws) -> Iterator[tuple[Ec2, Injector]]:
    sleeps: list[float] = []
    ec2 = Ec2(aws.session(), REGION, sleep=sleeps.append, poll_s=0.01)
    subnets = ec2.client.describe_subnets()["Subnets"]
    inj = Injector(ec2.client, {s["SubnetId"]: s["AvailabilityZone"] for s in subnets})
    ec2.sleeps = sleeps  # type: ignore[attr-defined]
    yield ec2, inj


def request(aws: Aws, types: list[str], **kw: Any) -> LaunchRequest:
    base: dict[str, Any] = {
        "run": new_run_id(),
        "region": REGION,
        "types": tuple(describe_type(t) for t in types),
        "count": 1,
        "ttl": timedelta(hours=8),
        "ssh_cidr": "198.51.100.0/24",
        "image": None,
        "ami": aws.ami(),
        "wait_ssh": False,
        "os_id": "ubuntu-22.04",
    }
    base.update(kw)
    return LaunchRequest(**base)


def test_capacity_fails_over_zone_then_type(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, inj = cloud
    # g5.xlarge has no capacity anywhere; g6.xlarge has none in its first zone.
    inj.fail("RunInstances", "InsufficientInstanceCapacity", lambda b: b["InstanceType"] == "g5.xlarge")
    inj.fail("RunInstances", "Unsupported", lambda b: b["InstanceType"] == "g6.xlarge" and b["zone"] == "us-east-1a")
    res = ec2.launch(request(aws, ["g5.xlarge", "g6.xlarge"]), ami_lookup=None, workdir=aws.workdir)
    g5_zones = ec2.zones_offering("g5.xlarge")
    assert inj.launches() == [("g5.xlarge", z, "on-demand") for z in g5_zones] + [
        ("g6.xlarge", "us-east-1a", "on-demand"),
        ("g6.xlarge", "us-east-1b", "on-demand"),
    ]
    assert [(a.instance_type, a.zone, a.outcome) for a in res.attempts][-2:] == [
        ("g6.xlarge", "us-east-1a", "Unsupported"),
        ("g6.xlarge", "us-east-1b", "launched"),
    ]
    (inst,) = aws.live()
    assert inst["InstanceType"] == "g6.xlarge" and inst["Placement"]["AvailabilityZone"] == "us-east-1b"


def test_no_capacity_anywhere_fails_and_removes_everything(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, inj = cloud
    inj.fail("RunInstances", "InsufficientInstanceCapacity")
    with pytest.raises(CloudError) as exc:
        ec2.launch(request(aws, ["g5.xlarge"]), ami_lookup=None, workdir=aws.workdir)
    assert exc.value.message.startswith("no capacity for g5.xlarge x1 in us-east-1")
    assert "another --region" in exc.value.hint
    assert nothing_left(aws)


def test_throttling_is_retried_with_backoff(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, inj = cloud
    inj.fail("RunInstances", "RequestLimitExceeded", times=2)
    inj.fail("CreateSecurityGroup", "InternalError", status=500, times=1)
    ec2.launch(request(aws, ["g5.xlarge"]), ami_lookup=None, workdir=aws.workdir)
    assert len(inj.launches()) == 3  # two throttled, then through, in the same zone
    assert len({z for _, z, _ in inj.launches()}) == 1
    assert len(ec2.sleeps) >= 3  # type: ignore[attr-defined]
    assert len(aws.live()) == 1 and len(aws.groups()) == 1


def test_quota_stops_names_the_quota_and_cleans_up(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, inj = cloud
    inj.fail("RunInstances", "VcpuLimitExceeded")
    with pytest.raises(CloudError) as exc:
        ec2.launch(request(aws, ["g5.xlarge", "g6.xlarge"]), ami_lookup=None, workdir=aws.workdir)
    assert len(inj.launches()) == 1  # no zone or type hopping on a quota
    assert "Running On-Demand G and VT instances" in exc.value.hint and "L-DB2E81BA" in exc.value.hint
    assert nothing_left(aws)


@pytest.mark.parametrize("code, kind", [("UnauthorizedOperation", BadInput), ("InvalidAMIID.NotFound", CloudError)])
def test_auth_and_bad_image_stop_at_once(aws: Aws, cloud: tuple[Ec2, Injector], code: str, kind: type) -> None:
    ec2, inj = cloud
    inj.fail("RunInstances", code)
    with pytest.raises(kind) as exc:
        ec2.launch(request(aws, ["g5.xlarge", "g6.xlarge"]), ami_lookup=None, workdir=aws.workdir)
    assert len(inj.launches()) == 1
    assert code in exc.value.message
    assert nothing_left(aws)


def test_failure_after_instances_exist_terminates_them(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    """The launch dies after RunInstances (status checks refused): instances, group, key all go."""
    ec2, inj = cloud
    inj.fail("DescribeInstanceStatus", "UnauthorizedOperation")
    req = request(aws, ["g5.xlarge"], count=2)
    with pytest.raises(BadInput):
        ec2.launch(req, ami_lookup=None, workdir=aws.workdir)
    terminated = [op for op, _ in inj.seen if op == "TerminateInstances"]
    assert terminated == ["TerminateInstances"]
    assert nothing_left(aws)
    assert not (aws.workdir / ".provision" / "runs" / req.run / "id_ed25519").exists()
    assert not (aws.workdir / "inventory" / f"ec2-{req.run}.yml").exists()


def test_keep_on_failure_keeps_what_was_made(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, inj = cloud
    inj.fail("DescribeInstanceStatus", "UnauthorizedOperation")
    req = request(aws, ["g5.xlarge"], keep_on_failure=True)
    with pytest.raises(BadInput):
        ec2.launch(req, ami_lookup=None, workdir=aws.workdir)
    assert len(aws.live()) == 1 and len(aws.groups()) == 1 and len(aws.key_pairs()) == 1
    res = ec2.down(run=req.run, workdir=aws.workdir)
    assert res.runs == [req.run]
    assert nothing_left(aws)


def test_interrupt_mid_launch_cleans_up(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, _ = cloud

    def interrupt(model: Any, **_: Any) -> None:
        raise KeyboardInterrupt

    ec2.client.meta.events.register("before-call.ec2.DescribeInstanceStatus", interrupt)
    with pytest.raises(KeyboardInterrupt):
        ec2.launch(request(aws, ["g5.xlarge"]), ami_lookup=None, workdir=aws.workdir)
    assert nothing_left(aws)


def test_spot_capacity_falls_back_to_on_demand(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, inj = cloud
    inj.fail("RunInstances", "InsufficientInstanceCapacity", lambda b: "InstanceMarketOptions.MarketType" in b)
    res = ec2.launch(
        request(aws, ["g5.xlarge"], spot=True, on_demand_fallback=True), ami_lookup=None, workdir=aws.workdir
    )
    markets = [m for _, _, m in inj.launches()]
    assert set(markets[:-1]) == {"spot"} and markets[-1] == "on-demand"
    assert [i.market for i in res.instances] == ["on-demand"]
    (inst,) = aws.live()
    assert "InstanceLifecycle" not in inst


def test_spot_quota_with_fallback_goes_on_demand(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, inj = cloud
    inj.fail("RunInstances", "MaxSpotInstanceCountExceeded", lambda b: "InstanceMarketOptions.MarketType" in b)
    res = ec2.launch(
        request(aws, ["g5.xlarge", "g6.xlarge"], spot=True, on_demand_fallback=True),
        ami_lookup=None,
        workdir=aws.workdir,
    )
    # one spot try (a quota is not a zone problem), then on-demand in the first type's first zone
    assert [(t, m) for t, _, m in inj.launches()] == [("g5.xlarge", "spot"), ("g5.xlarge", "on-demand")]
    assert [i.market for i in res.instances] == ["on-demand"]


def test_spot_without_fallback_fails(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, inj = cloud
    inj.fail("RunInstances", "InsufficientInstanceCapacity", lambda b: "InstanceMarketOptions.MarketType" in b)
    with pytest.raises(CloudError) as exc:
        ec2.launch(request(aws, ["g5.xlarge"], spot=True), ami_lookup=None, workdir=aws.workdir)
    assert "--on-demand-fallback" in exc.value.hint
    assert {m for _, _, m in inj.launches()} == {"spot"}
    assert nothing_left(aws)


def test_ami_lookup_through_ssm_per_architecture(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    """moto carries Amazon's al2023 SSM parameters: the real look-up path runs against it."""
    ec2, _ = cloud
    lookup = aws_lookup(aws.session(), REGION, ec2.call)
    expected = (
        aws.session()
        .client("ssm")
        .get_parameter(Name="/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64")["Parameter"][
            "Value"
        ]
    )
    assert lookup(ImageQuery(os="amzn-2023", arch="x86_64", base="os")) == expected
    req = request(aws, ["g5.xlarge"], ami=None, image=ImageQuery("amzn-2023", "x86_64", "os"), os_id="amzn-2023")
    res = ec2.launch(req, ami_lookup=lookup, workdir=aws.workdir)
    (inst,) = aws.live()
    assert inst["ImageId"] == expected
    inv = yaml.safe_load(res.inventory.read_text())
    assert inv["all"]["hosts"][inst["InstanceId"]]["ansible_user"] == "ec2-user"
    with pytest.raises(BadInput, match=r"no public image for ubuntu-24\.04"):
        lookup(ImageQuery(os="ubuntu-24.04", arch="x86_64", base="os"))  # moto lacks Canonical's


def test_injected_lookup_picks_an_image_per_architecture(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, _ = cloud
    asked: list[ImageQuery] = []

    def lookup(q: ImageQuery) -> str:
        asked.append(q)
        return aws.ami(q.arch)

    req = request(aws, ["g5g.xlarge"], ami=None, image=ImageQuery("ubuntu-24.04", "arm64", "dlami"))
    res = ec2.launch(req, ami_lookup=lookup, workdir=aws.workdir)
    assert asked == [ImageQuery("ubuntu-24.04", "arm64", "dlami")]
    (inst,) = aws.live()
    assert inst["ImageId"] == aws.ami("arm64") and inst["InstanceType"] == "g5g.xlarge"
    assert yaml.safe_load(res.inventory.read_text())["all"]["vars"]["provision_base"] == "dlami"


def test_ami_of_the_wrong_architecture_is_refused_before_creating(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, _ = cloud
    with pytest.raises(BadInput, match="need another arch"):
        ec2.launch(request(aws, ["g5g.xlarge"]), ami_lookup=None, workdir=aws.workdir)  # x86_64 AMI
    assert nothing_left(aws)


def test_missing_ami_is_refused_before_creating(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, _ = cloud
    with pytest.raises(ProvisionError, match=r"InvalidAMIID\.NotFound"):
        ec2.launch(request(aws, ["g5.xlarge"], ami="ami-0123456789abcdef0"), ami_lookup=None, workdir=aws.workdir)
    assert nothing_left(aws)


@pytest.fixture
def ssh_banner() -> Iterator[tuple[str, int]]:
    """A stand-in SSH server: it only sends the SSH banner, which is all the SSH wait reads."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 stand-in\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[:2]
    stop.set()
    t.join()
    srv.close()


def test_waits_for_ssh_and_takes_host_keys_from_the_console(
    aws: Aws, cloud: tuple[Ec2, Injector], ssh_banner: tuple[str, int], tmp_path: Path
) -> None:
    ec2, _ = cloud
    key = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    console = (
        "[   10.1] cloud-init[900]: ci-info: no authorized SSH keys\n"
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        f"{kind} {blob} root@ip-10-0-0-1\n"
        "-----END SSH HOST KEY KEYS-----\n"
    )
    console_calls = []

    def console_output(params: dict[str, Any], **_: Any) -> Any:
        console_calls.append(1)
        # cloud-init prints the keys a little after boot: the first answer has none yet.
        text = "booting\n" if len(console_calls) == 1 else console
        return Http(200), {"InstanceId": "i-x", "Output": base64.b64encode(text.encode()).decode()}

    ec2.client.meta.events.register("before-call.ec2.GetConsoleOutput", console_output)
    host, port = ssh_banner
    mapped: list[str] = []

    def address_map(instance_id: str, address: str) -> tuple[str, int]:
        mapped.append(address)
        return host, port

    req = request(aws, ["g5.xlarge"], wait_ssh=True)
    res = ec2.launch(req, ami_lookup=None, workdir=aws.workdir, address_map=address_map)
    assert res.host_keys == 1 and len(console_calls) == 2
    known = res.run_dir / "known_hosts"
    assert known.read_text() == f"[{host}]:{port} {kind} {blob}\n"
    inv = yaml.safe_load(res.inventory.read_text())
    (hv,) = inv["all"]["hosts"].values()
    assert (hv["ansible_host"], hv["ansible_port"]) == (host, port)
    assert mapped == [res.instances[0].public_ip]
    assert f"UserKnownHostsFile={known}" in inv["all"]["vars"]["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in inv["all"]["vars"]["ansible_ssh_common_args"]


def test_ssh_that_never_answers_fails_and_cleans_up(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, _ = cloud
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    req = request(aws, ["g5.xlarge"], wait_ssh=True)
    with pytest.raises(CloudError, match="SSH not answering"):
        ec2.launch(
            req, ami_lookup=None, workdir=aws.workdir, address_map=lambda i, a: ("127.0.0.1", port), ssh_timeout_s=0.5
        )
    assert nothing_left(aws)


def test_private_key_file_is_0600_from_creation(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    ec2, _ = cloud
    res = ec2.launch(request(aws, ["g5.xlarge"]), ami_lookup=None, workdir=aws.workdir)
    assert res.private_key is not None
    assert stat.S_IMODE(res.private_key.stat().st_mode) == 0o600
    (kp,) = aws.key_pairs()
    assert tags(kp)["provision:run"] == res.run


def test_interrupt_inside_run_instances_finds_the_instances_by_the_run_tag(
    aws: Aws, cloud: tuple[Ec2, Injector]
) -> None:
    """Ctrl-C after moto made the instances but before their ids were read (an after-call hook).

    Stand-in for EC2's eventual consistency: the first two tag look-ups answer no instances, as
    DescribeInstances may just after RunInstances; the cleanup looks again and finds them.
    """
    ec2, _ = cloud

    def interrupt(**_: Any) -> None:
        raise KeyboardInterrupt

    lagging = [2]

    def describe(params: dict[str, Any], **_: Any) -> Any:
        if lagging[0] and "tag:provision:run" in params["body"].values():
            lagging[0] -= 1
            return Http(200), {"Reservations": []}
        return None

    ec2.client.meta.events.register("after-call.ec2.RunInstances", interrupt)
    ec2.client.meta.events.register("before-call.ec2.DescribeInstances", describe)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        ec2.launch(request(aws, ["g5.xlarge"], count=2), ami_lookup=None, workdir=aws.workdir, say=said.append)
    assert lagging == [0]
    assert any("found by the run tag" in m for m in said), said
    assert nothing_left(aws)


def test_an_interrupted_run_instances_that_made_nothing_is_said(aws: Aws, cloud: tuple[Ec2, Injector]) -> None:
    """Ctrl-C before RunInstances reached EC2 (a before-call hook): nothing to find, and it says so."""
    ec2, _ = cloud

    def interrupt(**_: Any) -> None:
        raise KeyboardInterrupt

    ec2.client.meta.events.register("before-call.ec2.RunInstances", interrupt)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        ec2.launch(request(aws, ["g5.xlarge"]), ami_lookup=None, workdir=aws.workdir, say=said.append)
    assert any("RunInstances was interrupted in flight" in m and "cloud down --run" in m for m in said), said
    assert nothing_left(aws)
