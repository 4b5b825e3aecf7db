"""The chain: `cloud up` on moto hands real SSH hosts to `provision probe -i` with verified keys.

Instances are launched on the moto server; their addresses are then mapped onto the SSH test
hosts (Debian 12 containers with a real sshd) by the launch's ``address_map`` override, a
test-only hook. Two stand-ins, because moto boots nothing: the console output is answered with
the test host's real host public keys in cloud-init's ``BEGIN SSH HOST KEY KEYS`` block, and
the ``admin`` login user that Debian's cloud images create is added to the test hosts (with
passwordless sudo, as on EC2). Everything after that is real: the SSH wait reads the banner of
the real sshd, and `provision probe -i inventory/ec2-<run>.yml` connects with the inventory's
user, key and known_hosts, verifying the host keys taken from the console, with no
--accept-new-host-keys. (`provision up -i` takes the same inventory once it exists.)
"""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta

import pytest
import yaml

from provision.cloud.request import LaunchRequest, describe_type
from provision.ids import new_run_id
from tests.hosts import harness
from tests.integration.cloud_fixtures import REGION, Aws, MappedEc2, admin_users, aws, moto_url, run_cli

__all__ = ["admin_users", "aws", "moto_url"]


def test_launched_hosts_are_probed_through_the_generated_inventory(
    aws: Aws, admin_users: harness.HostSet, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hostset = admin_users
    ec2 = MappedEc2(aws.session(), REGION, hostset)
    order = ec2.order
    req = LaunchRequest(
        run=new_run_id(),
        region=REGION,
        types=(describe_type("g5.xlarge"),),
        count=len(hostset.hosts),
        ttl=timedelta(hours=1),
        ssh_cidr="10.0.0.0/8",
        image=None,
        ami=aws.ami(),
        ssh_public_key=hostset.key.with_suffix(".pub"),
        wait_ssh=True,
        os_id="debian-12",
    )
    res = ec2.launch(req, ami_lookup=None, workdir=aws.workdir)
    assert res.host_keys >= len(hostset.hosts)
    inv = yaml.safe_load(res.inventory.read_text())
    assert {h["ansible_user"] for h in inv["all"]["hosts"].values()} == {"admin"}
    assert inv["all"]["vars"]["ansible_ssh_private_key_file"] == str(hostset.key)

    # The user's own known_hosts is empty (HOME is a fresh directory): only the run's file vouches.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, out, err = run_cli(["probe", "-i", str(res.inventory), "--json"], capsys)
    assert code == 0, err + out
    doc = json.loads(out)
    assert doc["ok"] is True
    by_name = {h["host"]: h for h in doc["hosts"]}
    assert set(by_name) == {i.id for i in res.instances}
    for iid, host in order.items():
        facts = by_name[iid]["facts"]
        assert facts["os"] == "debian-12"
        assert facts["hostname"] == host.name  # each inventory entry reached its own test host

    # A forged console (someone else's key) makes the same probe refuse the host.
    known = res.run_dir / "known_hosts"
    real = known.read_text()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(aws.workdir / "forged")], check=True)
    kind, blob = (aws.workdir / "forged.pub").read_text().split()[:2]
    first = order[next(iter(order))]
    known.write_text(
        "".join(
            f"{line.split()[0]} {kind} {blob}\n" if line.split()[0] == first.address else line + "\n"
            for line in real.splitlines()
        )
    )
    code, out, err = run_cli(["probe", "-i", str(res.inventory), "--json"], capsys)
    assert code == 1
    refused = {h["host"]: h for h in json.loads(out)["hosts"]}
    bad = next(i for i, h in order.items() if h == first)
    assert refused[bad]["ok"] is False and "host key" in json.dumps(refused[bad]["error"]).lower()
    assert all(h["ok"] for i, h in refused.items() if i != bad)

    ec2.down(run=req.run, workdir=aws.workdir)
    assert aws.live() == []
