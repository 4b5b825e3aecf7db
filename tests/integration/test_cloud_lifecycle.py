"""`provision cloud up | ls | down` end to end against a moto EC2 server on loopback.

moto answers the EC2 API for real (instances, volumes, security groups, key pairs, tags,
instance-type validation); SSH cannot answer from moto's fake addresses, so these runs pass
--no-wait-ssh (the SSH wait is tested in test_cloud_launch.py against a local SSH banner).
"""

from __future__ import annotations

import base64
import json
import stat
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from tests.integration.cloud_fixtures import CIDR, Aws, aws, moto_url, run_cli, tags, up

__all__ = ["aws", "moto_url"]  # fixtures used by name


def test_up_ls_down_lifecycle(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    before = datetime.now(timezone.utc)
    code, doc, err = up(aws, capsys, "--instance-type", "g5.xlarge", "--count", "2", "--new-key")
    assert code == 0, err
    assert doc["ok"] is True
    run = doc["run"]
    assert [sorted(i) for i in doc["instances"]] == [
        ["id", "market", "private_ip", "public_ip", "state", "type", "zone"]
    ] * 2
    assert {i["type"] for i in doc["instances"]} == {"g5.xlarge"}
    assert all(i["state"] == "running" and i["public_ip"] for i in doc["instances"])

    live = aws.live()
    assert sorted(i["InstanceId"] for i in live) == sorted(i["id"] for i in doc["instances"])
    for inst in live:
        t = tags(inst)
        assert t["provision:run"] == run
        expires = datetime.fromisoformat(t["provision:expires-at"].replace("Z", "+00:00"))
        # the default TTL is 8h
        assert (
            before + timedelta(hours=8) - timedelta(seconds=5)
            <= expires
            <= datetime.now(timezone.utc) + timedelta(hours=8)
        )
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        vols = aws.ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [inst["InstanceId"]]}])[
            "Volumes"
        ]
        assert len(vols) == 1
        assert vols[0]["VolumeType"] == "gp3" and vols[0]["Encrypted"] is True and vols[0]["Size"] >= 100
        assert tags(vols[0])["provision:run"] == run

    # one security group for the run: port 22 from the given CIDR and nothing else
    (group,) = aws.groups()
    assert tags(group)["provision:run"] == run
    assert [
        (p["IpProtocol"], p["FromPort"], p["ToPort"], [r["CidrIp"] for r in p["IpRanges"]])
        for p in group["IpPermissions"]
    ] == [("tcp", 22, 22, [CIDR])]
    assert {g["GroupId"] for i in live for n in i["NetworkInterfaces"] for g in n["Groups"]} == {group["GroupId"]}

    # a new key pair: tagged in AWS, private key 0600 in the run dir, never printed
    (kp,) = aws.key_pairs()
    assert tags(kp)["provision:run"] == run
    key_file = aws.workdir / ".provision" / "runs" / run / "id_ed25519"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    secret = key_file.read_text()
    assert "PRIVATE KEY" in secret
    body = secret.splitlines()[1]
    assert body not in json.dumps(doc) and body not in err

    # the inventory that probe/up take
    inv_path = Path(doc["inventory"])
    assert inv_path == aws.workdir / "inventory" / f"ec2-{run}.yml"
    inv = yaml.safe_load(inv_path.read_text())
    hosts = inv["all"]["hosts"]
    assert sorted(hosts) == sorted(i["id"] for i in doc["instances"])
    for i in doc["instances"]:
        assert hosts[i["id"]]["ansible_host"] == i["public_ip"]
        assert hosts[i["id"]]["ansible_user"] == "ubuntu"
        assert hosts[i["id"]]["ansible_port"] == 22
    assert inv["all"]["vars"]["ansible_ssh_private_key_file"] == str(key_file)
    assert inv["all"]["vars"]["provision_run"] == run

    # ls: both instances, on-demand, expiry in the future, priced from the data (ec2.yaml's g5.xlarge)
    from provision.matrix import load

    price = load().instance_type("g5.xlarge").price
    assert price is not None
    code, out, err = run_cli(["cloud", "ls", "--json"], capsys)
    assert code == 0, err
    listed = json.loads(out)
    assert sorted(i["id"] for i in listed["instances"]) == sorted(i["id"] for i in doc["instances"])
    assert all(i["run"] == run and i["market"] == "on-demand" and not i["expired"] for i in listed["instances"])
    assert listed["unpriced"] == []
    assert all(i["usd_per_hour"] == price.usd_per_hour for i in listed["instances"])

    code, out, err = run_cli(["cloud", "down", "--run", run, "--json"], capsys)
    assert code == 0, err
    gone = json.loads(out)
    assert sorted(gone["terminated"]) == sorted(i["id"] for i in doc["instances"])
    assert gone["security_groups"] == [group["GroupId"]] and gone["key_pairs"] == [kp["KeyName"]]
    assert aws.live() == [] and aws.groups() == [] and aws.key_pairs() == []
    assert not key_file.exists() and not inv_path.exists()

    code, out, _ = run_cli(["cloud", "ls", "--json"], capsys)
    assert code == 0 and json.loads(out)["instances"] == []


def test_ls_prices_on_demand_from_the_data_and_cost_so_far(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    """--gpu H100-SXM --gpu-count 1 picks p5.4xlarge (the cheapest that fits, priced in the data)."""
    from provision.matrix import load

    price = load().instance_type("p5.4xlarge").price
    assert price is not None
    code, doc, err = up(aws, capsys, "--gpu", "H100-SXM", "--gpu-count", "1")
    assert code == 0, err
    assert [i["type"] for i in doc["instances"]] == ["p5.4xlarge"]
    time.sleep(1.0)
    code, out, err = run_cli(["cloud", "ls", "--json"], capsys)
    assert code == 0, err
    (inst,) = json.loads(out)["instances"]
    assert inst["usd_per_hour"] == price.usd_per_hour
    assert price.read in inst["price_source"]
    assert 0 < inst["cost_so_far_usd"] < price.usd_per_hour  # a few seconds of an hour


def test_max_hourly_usd_refuses_before_any_call(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(
        [
            "cloud",
            "up",
            "--gpu",
            "H100-SXM",
            "--gpu-count",
            "8",
            "--ssh-cidr",
            CIDR,
            "--max-hourly-usd",
            "10",
            "--ami",
            aws.ami(),
        ],
        capsys,
    )
    assert code == 2
    assert err.startswith("error: every candidate costs more than --max-hourly-usd 10") and err.count("\n") == 1
    assert aws.live() == [] and aws.groups() == [] and aws.key_pairs() == []


def test_down_expired_ends_only_what_outlived_its_ttl(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    code, short, err = up(aws, capsys, "--instance-type", "g6.xlarge", "--ttl", "1s", "--new-key")
    assert code == 0, err
    code, long, err = up(aws, capsys, "--instance-type", "g6.xlarge", "--ttl", "2h", "--new-key")
    assert code == 0, err
    time.sleep(1.5)
    code, out, err = run_cli(["cloud", "ls", "--json"], capsys)
    expired = {i["id"]: i["expired"] for i in json.loads(out)["instances"]}
    assert expired == {short["instances"][0]["id"]: True, long["instances"][0]["id"]: False}
    code, out, err = run_cli(["cloud", "down", "--expired", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["runs"] == [short["run"]]
    assert res["terminated"] == [short["instances"][0]["id"]]
    assert [i["InstanceId"] for i in aws.live()] == [long["instances"][0]["id"]]
    assert [tags(g)["provision:run"] for g in aws.groups()] == [long["run"]]
    # --dry-run: what --all would end, found as a real run finds it, and nothing ended (no --yes needed)
    code, out, err = run_cli(["cloud", "down", "--all", "--dry-run", "--json"], capsys)
    assert code == 0, err
    dry = json.loads(out)
    assert dry["dry_run"] is True and dry["runs"] == [long["run"]]
    assert dry["terminated"] == [long["instances"][0]["id"]]
    assert [i["InstanceId"] for i in aws.live()] == [long["instances"][0]["id"]]
    code, out, err = run_cli(["cloud", "down", "--all", "--yes", "--json"], capsys)
    assert code == 0 and json.loads(out)["runs"] == [long["run"]]
    assert aws.live() == [] and aws.groups() == [] and aws.key_pairs() == []


def test_spot_launch_and_imported_key(aws: Aws, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import subprocess

    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    code, doc, err = up(aws, capsys, "--instance-type", "g4dn.xlarge", "--spot")  # default key: ~/.ssh/id_ed25519.pub
    assert code == 0, err
    assert doc["instances"][0]["market"] == "spot"
    (inst,) = aws.live()
    assert inst["InstanceLifecycle"] == "spot"
    (kp,) = aws.key_pairs()
    assert kp["KeyName"] == f"provision-{doc['run']}"
    inv = yaml.safe_load(Path(doc["inventory"]).read_text())
    assert inv["all"]["vars"]["ansible_ssh_private_key_file"] == str(key)
    assert not (aws.workdir / ".provision" / "runs" / doc["run"] / "id_ed25519").exists()
    code, out, _ = run_cli(["cloud", "ls", "--json"], capsys)
    (listed,) = json.loads(out)["instances"]
    assert listed["market"] == "spot" and listed["price_source"] == "spot price history"
    assert listed["usd_per_hour"] is not None


def test_human_output(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        [
            "cloud",
            "up",
            "--instance-type",
            "g5.xlarge",
            "--ssh-cidr",
            CIDR,
            "--ami",
            aws.ami(),
            "--no-wait-ssh",
            "--new-key",
            "--yes",
        ],
        capsys,
    )
    assert code == 0, err
    assert "next: provision probe -i" in out and "cloud: run " in err
    code, out, _ = run_cli(["cloud", "ls"], capsys)
    assert code == 0 and "g5.xlarge" in out and "in 8.0h" in out
    code, out, _ = run_cli(["cloud", "down", "--all", "--yes"], capsys)
    assert code == 0 and "terminated 1 instance(s)" in out


def _foreign_tagged_instance(aws: Aws, run_tag: str) -> str:
    """An instance someone else tagged with `provision:run` (already expired), made straight on moto."""
    res = aws.ec2.run_instances(
        ImageId=aws.ami(),
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "provision:run", "Value": run_tag},
                    {"Key": "provision:expires-at", "Value": "2020-01-01T00:00:00Z"},
                ],
            }
        ],
    )
    return str(res["Instances"][0]["InstanceId"])


@pytest.mark.parametrize("selector", [["--expired"], ["--all"]])
def test_down_never_follows_a_run_tag_out_of_the_run_dirs(
    aws: Aws, capsys: pytest.CaptureFixture[str], tmp_path: Path, selector: list[str]
) -> None:
    """A `provision:run` tag of `../../../victim` made `down --expired` delete victim/id_ed25519.

    Only ids of the form provision makes are acted on; the others are reported and left alone
    (not terminated, no local path built from them).
    """
    victim = tmp_path / "victim" / "id_ed25519"
    victim.parent.mkdir()
    victim.write_text("someone else's key\n")
    # the path the tag names, relative to the work dir's run dirs, is the victim's file
    assert (aws.workdir / ".provision" / "runs" / "../../../victim" / "id_ed25519").resolve() == victim.resolve()
    foreign = _foreign_tagged_instance(aws, "../../../victim")
    code, ours, err = up(aws, capsys, "--instance-type", "g6.xlarge", "--ttl", "1s", "--new-key")
    assert code == 0, err
    time.sleep(1.2)
    code, out, err = run_cli(["cloud", "down", *selector, "--yes", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert victim.read_text() == "someone else's key\n"
    assert doc["runs"] == [ours["run"]] and doc["terminated"] == [ours["instances"][0]["id"]]
    assert doc["skipped"] == [{"resource": foreign, "run": "'../../../victim'", "reason": "not a provision run id"}]
    assert [i["InstanceId"] for i in aws.live()] == [foreign]  # not ours to end
    assert not any(str(tmp_path / "victim") in f for f in doc["local_files"])

    code, out, _ = run_cli(["cloud", "down", *selector, "--yes"], capsys)
    assert code == 0 and f"skipped {foreign} (provision:run='../../../victim'): not a provision run id; left" in out

    code, out, _ = run_cli(["cloud", "ls", "--json"], capsys)
    listed = json.loads(out)
    assert listed["instances"] == [] and [s["resource"] for s in listed["skipped"]] == [foreign]
    code, out, _ = run_cli(["cloud", "ls"], capsys)
    assert f"skipped {foreign}" in out


@pytest.mark.parametrize("bad", ["../../../victim", "20261130-020846-fc86/..", "x", "20261130-020846-FC86", ""])
def test_down_run_takes_only_a_provision_run_id(aws: Aws, capsys: pytest.CaptureFixture[str], bad: str) -> None:
    code, out, err = run_cli(["cloud", "down", "--run", bad], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    if bad:
        assert err.startswith("error: --run ") and "is not a provision run id" in err
    else:  # an empty value is refused by the option itself, as every text option's is
        assert err.startswith("error: Invalid value for '--run': is empty")


@pytest.mark.parametrize("market", [[], ["--spot"]])
def test_the_ttl_is_armed_on_the_host_at_launch(
    aws: Aws, capsys: pytest.CaptureFixture[str], market: list[str]
) -> None:
    """The request carries terminate-on-shutdown and the user data that powers off at the expiry.

    moto keeps both attributes as EC2 does (DescribeInstanceAttribute); what the script does on
    a booted host is tested on an SSH test host (test_cloud_host_ttl.py).
    """
    code, doc, err = up(
        aws, capsys, "--instance-type", "g5.xlarge", "--count", "2", "--ttl", "2h", "--new-key", *market
    )
    assert code == 0, err
    for inst in aws.live():
        iid = inst["InstanceId"]
        behaviour = aws.ec2.describe_instance_attribute(InstanceId=iid, Attribute="instanceInitiatedShutdownBehavior")
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        raw = aws.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
        script = base64.b64decode(raw).decode()
        expires = tags(inst)["provision:expires-at"]
        epoch = int(datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp())
        assert script.startswith("#!/bin/sh\n") and expires in script and f"{epoch} - $(date +%s)" in script
        assert f"provision run {doc['run']}" in script
        assert len(raw) < 16 * 1024  # EC2's user data limit
        assert tags(inst)["provision:host-ttl"] == "shutdown-at-expiry"
    code, out, err = run_cli(["cloud", "ls", "--json"], capsys)
    assert code == 0, err
    assert [i["ttl_on_host"] for i in json.loads(out)["instances"]] == [True, True]
    code, out, _ = run_cli(["cloud", "ls"], capsys)
    header, *rows = out.splitlines()[:3]
    assert header.split()[-3:] == ["expires", "on", "host"]
    assert all(r.split()[-3:] == ["in", "2.0h", "armed"] for r in rows)


def test_ls_says_when_an_instance_has_no_ttl_on_the_host(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    """One launched by an older provision (its key pair, group and tags, no TTL on the host): `ls`
    shows that its TTL needs `down --expired`."""
    run = "20261130-020846-fc86"
    aws.ec2.create_key_pair(KeyName=f"provision-{run}")
    group = aws.ec2.create_security_group(GroupName=f"provision-{run}", Description="an older provision's")["GroupId"]
    aws.ec2.run_instances(
        ImageId=aws.ami(),
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        KeyName=f"provision-{run}",
        SecurityGroupIds=[group],
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "provision:run", "Value": run},
                    {"Key": "provision:expires-at", "Value": "2099-01-01T00:00:00Z"},
                ],
            }
        ],
    )
    code, out, _ = run_cli(["cloud", "ls", "--json"], capsys)
    assert code == 0 and [i["ttl_on_host"] for i in json.loads(out)["instances"]] == [False]
    code, out, _ = run_cli(["cloud", "ls"], capsys)
    assert code == 0 and out.splitlines()[1].split()[-1] == "no"


@pytest.mark.parametrize(
    ("cidr", "world", "ranges"),
    [("0.0.0.0/0", "the whole internet", "IpRanges"), ("::/0", "the whole IPv6 internet", "Ipv6Ranges")],
)
def test_ssh_to_the_world_is_allowed_only_with_a_warning(
    aws: Aws, capsys: pytest.CaptureFixture[str], cidr: str, world: str, ranges: str
) -> None:
    code, out, err = run_cli(
        [
            "cloud",
            "up",
            "--instance-type",
            "g5.xlarge",
            "--ssh-cidr",
            cidr,
            "--ami",
            aws.ami(),
            "--os",
            "ubuntu-22.04",
            "--no-wait-ssh",
            "--new-key",
            "--yes",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    said = f"--ssh-cidr {cidr} opens port 22 (SSH) of every instance of this run to {world}"
    (line,) = [x for x in err.splitlines() if x.startswith("warning: ")]
    assert line.startswith(f"warning: {said}; give your own address")
    assert err.index("warning: ") < err.index("cloud: run ")  # said before anything is launched
    doc = json.loads(out)
    assert len(doc["warnings"]) == 1 and doc["warnings"][0].startswith(said)
    (group,) = aws.groups()
    assert [
        [next(v for k, v in r.items() if k.startswith("Cidr")) for r in p[ranges]] for p in group["IpPermissions"]
    ] == [[cidr]]


def test_no_warning_for_a_narrow_ssh_cidr(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = up(aws, capsys, "--instance-type", "g5.xlarge", "--new-key")
    assert code == 0 and doc["warnings"] == [] and "warning:" not in err


def _someone_elses_server(aws: Aws, run_tag: str) -> tuple[str, str, str]:
    """Issue 25's scenario, made straight on moto: someone else's m5.large in its own group `prod-db`
    with its own key pair `prod-deploy-key`, all three tagged `provision:run` with a well-formed id
    and a `provision:expires-at` long past. (instance id, group id, key pair name)"""
    stale = [
        {"Key": "provision:run", "Value": run_tag},
        {"Key": "provision:expires-at", "Value": "2020-01-01T00:00:00Z"},
    ]
    group = aws.ec2.create_security_group(
        GroupName="prod-db",
        Description="the production database",
        TagSpecifications=[{"ResourceType": "security-group", "Tags": stale}],
    )["GroupId"]
    aws.ec2.create_key_pair(KeyName="prod-deploy-key", TagSpecifications=[{"ResourceType": "key-pair", "Tags": stale}])
    inst = aws.ec2.run_instances(
        ImageId=aws.ami(),
        InstanceType="m5.large",
        MinCount=1,
        MaxCount=1,
        KeyName="prod-deploy-key",
        SecurityGroupIds=[group],
        TagSpecifications=[{"ResourceType": "instance", "Tags": stale}],
    )["Instances"][0]["InstanceId"]
    return str(inst), str(group), "prod-deploy-key"


# (selector, whose run id someone else's server is tagged with): a made-up one, or our own run's
@pytest.mark.parametrize(("selector", "same_run"), [("--expired", False), ("--all", True), ("--run", True)])
def test_down_ends_only_what_provision_made(
    aws: Aws, capsys: pytest.CaptureFixture[str], selector: str, same_run: bool
) -> None:
    """Tags are writable by anyone who may tag in the account: an m5.large with its own group and
    key pair, tagged as an expired run, was terminated and its group deleted (also with the id of
    our own run). Only what provision made (its `provision-<run>` key pair, group, and instances
    launched with both) is ended; the rest is `skipped` with the reason and left running."""
    code, ours, err = up(aws, capsys, "--instance-type", "g6.xlarge", "--ttl", "1s", "--new-key")
    assert code == 0, err
    run = ours["run"]
    inst, group, key = _someone_elses_server(aws, run if same_run else "20200101-000000-beef")
    time.sleep(1.2)
    args = {"--expired": ["--expired"], "--all": ["--all", "--yes"], "--run": ["--run", run]}[selector]
    code, out, err = run_cli(["cloud", "down", *args, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["runs"] == [run] and doc["terminated"] == [ours["instances"][0]["id"]]
    assert doc["key_pairs"] == [f"provision-{run}"] and len(doc["security_groups"]) == 1
    skipped = {s["resource"]: s for s in doc["skipped"]}
    assert sorted(skipped) == sorted([inst, group, key])
    tagged = run if same_run else "20200101-000000-beef"
    assert (
        skipped[inst]["reason"]
        == f"launched with key pair 'prod-deploy-key', not provision-{tagged}: provision did not make it"
    )
    assert skipped[group]["reason"] == f"named 'prod-db', not provision-{tagged}: provision did not make it"
    assert skipped[key]["reason"] == f"named 'prod-deploy-key', not provision-{tagged}: provision did not make it"
    assert {s["run"] for s in doc["skipped"]} == {repr(tagged)}
    # someone else's server still runs, in its group, with its key pair
    (live,) = aws.live()
    assert live["InstanceId"] == inst and live["State"]["Name"] == "running"
    assert [g["GroupId"] for g in aws.groups()] == [group]
    assert [k["KeyName"] for k in aws.key_pairs()] == [key]
    code, out, _ = run_cli(["cloud", "ls", "--json"], capsys)
    listed = json.loads(out)
    assert listed["instances"] == [] and [s["resource"] for s in listed["skipped"]] == [inst]


def on_a_terminal(aws: Aws, args: list[str], answer: str) -> tuple[int, str, str]:
    """``provision ARGS`` with a real terminal (a pty) on stdin, ``answer`` typed into it."""
    import os
    import subprocess
    import sys

    provision = str(Path(sys.executable).with_name("provision"))
    controller, terminal = os.openpty()
    try:
        proc = subprocess.Popen(
            [provision, *args],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=aws.workdir,
            env=dict(os.environ, AWS_EC2_METADATA_DISABLED="true", COLUMNS="400"),
            text=True,
        )
        os.write(controller, answer.encode())  # the terminal holds the line until the prompt reads it
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(terminal)
        os.close(controller)
    return proc.returncode, out, err


def test_cloud_up_says_what_it_launches_and_asks(aws: Aws) -> None:
    """On a terminal, without --yes: the count, types, region and price, then the question; "n"
    launches nothing (exit 130)."""
    args = ["cloud", "up", "--instance-type", "g5.xlarge", "--count", "2", "--ssh-cidr", "0.0.0.0/1"]
    code, out, err = on_a_terminal(aws, [*args, "--ami", aws.ami(), "--new-key", "--no-wait-ssh"], "n\n")
    assert code == 130, err
    assert "warning: --ssh-cidr 0.0.0.0/1 opens port 22" in err  # said before the question
    assert ": 2 x g5.xlarge in us-east-1, on-demand $" in err
    assert "launch these instances (they cost money while they run)? [y/N]" in out
    assert err.splitlines()[-1].startswith("error: nothing was launched: the launch was not confirmed")
    assert aws.live() == [] and aws.groups() == [] and aws.key_pairs() == []


def test_cloud_down_all_says_what_it_ends_and_asks(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    """On a terminal, without --yes: the runs, how many instances, groups and key pairs, then the
    question; "n" ends nothing (exit 130), "y" ends them."""
    code, ours, err = up(aws, capsys, "--instance-type", "g5.xlarge", "--count", "2", "--new-key")
    assert code == 0, err
    ids = sorted(i["id"] for i in ours["instances"])
    code, out, err = on_a_terminal(aws, ["cloud", "down", "--all"], "n\n")
    assert code == 130, err
    said = f"about to end 1 run(s) ({ours['run']}): terminate 2 instance(s) ({', '.join(ids)}), "
    assert said + "delete 1 security group(s) and 1 key pair(s)" in err
    assert "end them? [y/N]" in out
    assert err.splitlines()[-1].startswith("error: nothing was ended: the teardown was not confirmed")
    assert sorted(i["InstanceId"] for i in aws.live()) == ids and len(aws.groups()) == 1
    code, out, err = on_a_terminal(aws, ["cloud", "down", "--all"], "y\n")
    assert code == 0, err
    assert "terminated 2 instance(s), deleted 1 security group(s), 1 key pair(s)" in out
    assert aws.live() == [] and aws.groups() == [] and aws.key_pairs() == []
