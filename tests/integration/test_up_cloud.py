"""`provision up --cloud`: launch on moto, provision the SSH test hosts behind it, end the run.

The launch is the real `cloud up` code against the moto server; the instances' addresses are
mapped onto the SSH test hosts by :class:`MappedEc2` (the test-only ``address_map`` and the
console answered with the hosts' real host keys, see cloud_fixtures), put in place of the real
client through :func:`provision.cloud.launcher.connect`. Everything else is real: the SSH wait,
the generated inventory and known_hosts, `up` (probe, resolve, Ansible, the smoke job with the
CPU torch from the wheelhouse), and the teardown on moto.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from provision.cloud import launcher
from provision.cloud.aws.ec2 import Ec2
from provision.cloud.errors import CloudError
from provision.cloud.launcher import LaunchArgs, Prepared
from provision.cloud.oneshot import up_on_cloud
from provision.errors import OperationFailed
from provision.fleet.records import HostRun, UpResult
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration.cloud_fixtures import (
    REGION,
    Aws,
    MappedEc2,
    admin_users,
    aws,
    aws_error,
    moto_url,
    nothing_left,
    run_cli,
)

__all__ = ["admin_users", "aws", "moto_url"]

LAUNCH = ["--instance-type", "g5.xlarge", "--ssh-cidr", "10.0.0.0/8", "--os", "debian-12"]


@dataclass
class OneShot:
    aws: Aws
    hostset: harness.HostSet
    config: Path  # the CPU torch stack from the wheelhouse, no driver
    clients: list[MappedEc2]  # every client `up --cloud` built

    def args(self, *extra: str) -> list[str]:
        return [
            "up",
            "--cloud",
            *LAUNCH,
            "--count",
            str(len(self.hostset.hosts)),
            "--ami",
            self.aws.ami(),
            "--ssh-key",
            str(self.hostset.key.with_suffix(".pub")),
            "-c",
            str(self.config),
            "--set",
            "frameworks_no_index=true",
            "--yes",
            "--json",
            *extra,
        ]


@pytest.fixture
def oneshot(
    aws: Aws, testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OneShot]:
    """`up --cloud` on moto whose clients are MappedEc2s onto the test hosts (left fresh afterwards)."""
    made: list[MappedEc2] = []

    def connect(prepared: Prepared) -> MappedEc2:
        assert prepared.request.region == REGION
        made.append(MappedEc2(prepared.session, prepared.request.region, testhosts))
        return made[-1]

    monkeypatch.setattr(launcher, "connect", connect)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield OneShot(aws, testhosts, rh.cpu_torch_config(tmp_path, testhosts, wheelhouse), made)
    rh.unprovision(testhosts, testhosts.hosts)


def left_behind(aws: Aws) -> list[str]:
    """What a test run left in the work dir: a run's private key or its inventory."""
    found = [*aws.workdir.glob("inventory/ec2-*.yml"), *aws.workdir.glob(".provision/runs/*/id_ed25519")]
    return [str(p) for p in found]


# --- bad input: exit 2, one line, nothing created on moto, no host touched ----------------------

BAD: list[tuple[list[str], str]] = [
    (["--cloud", "-i", "hosts.yml", *LAUNCH], "not both"),
    (["--cloud", "--local", *LAUNCH], "not both"),
    (["--cloud", "--limit", "i-*", *LAUNCH], "--limit"),
    (["-i", "hosts.yml", "--instance-type", "g5.xlarge"], "--instance-type: only with --cloud"),
    (["-i", "hosts.yml", "--down-after"], "--down-after: only with --cloud"),
    (["--cloud", "--instance-type", "t3.micro", "--ssh-cidr", "10.0.0.0/8"], "not an EC2 instance type with NVIDIA"),
    (["--cloud", *LAUNCH, "--count", "0"], "--count 0"),
    (["--cloud", *LAUNCH, "--ttl", "8x"], "malformed --ttl"),
    (["--cloud", "--instance-type", "g5.xlarge", "--ssh-cidr", "10.0.0.1/8"], "malformed --ssh-cidr"),
    (["--cloud", "--instance-type", "g5.xlarge"], "--ssh-cidr is required"),
    (["--cloud", *LAUNCH, "--ami", "not-an-ami"], "malformed --ami"),
    (["--cloud", *LAUNCH, "--on-demand-fallback"], "needs --spot"),
    (["--cloud", *LAUNCH, "--max-hourly-usd", "0.01"], "--max-hourly-usd"),
    (["--cloud", *LAUNCH, "--ssh-key", "/nonexistent.pub"], "no such file"),
    (["--cloud", *LAUNCH, "--serial", "0"], "--serial 0"),
    (["--cloud", *LAUNCH, "--set", "no-value"], "NAME=VALUE"),
    (["--cloud", *LAUNCH, "-c", "bad.yaml"], "bad.yaml"),
    (["--cloud", "--gpu", "H100-SXM", "--gpu-count", "64", "--ssh-cidr", "10.0.0.0/8"], "no EC2 instance type has 64"),
]


@pytest.mark.parametrize(("args", "says"), BAD)
def test_bad_input_is_exit_2_before_anything_is_created(
    aws: Aws, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    (aws.workdir / "bad.yaml").write_text("stack: {unknown_key: 1}\n")
    code, out, err = run_cli(["up", *args, "--yes"], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and says in err, err
    assert "Traceback" not in err + out
    assert nothing_left(aws)
    assert not (aws.workdir / ".provision").exists() and not (aws.workdir / "inventory").exists()


def test_without_a_terminal_or_yes_nothing_is_launched(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["up", "--cloud", *LAUNCH, "--json"], capsys)
    assert code == 2 and json.loads(out)["error"]["code"] == "bad_input"
    assert "--yes" in err and nothing_left(aws)


def test_missing_credentials_are_exit_2_before_any_call(
    aws: Aws, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    code, _, err = run_cli(["up", "--cloud", *LAUNCH, "--ami", "ami-0abc1234", "--yes"], capsys)
    assert code == 2 and "no AWS credentials" in err, err
    assert nothing_left(aws)


class _Terminal(io.StringIO):
    """A stand-in for a terminal on stdin: it answers with the text it was given."""

    def isatty(self) -> bool:
        return True


def test_a_launch_not_confirmed_launches_nothing(
    aws: Aws, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminal on stdin (a stand-in whose answer is `n`): `up --cloud` asks before launching."""
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    code, out, err = run_cli(["up", "--cloud", *LAUNCH, "--ami", "ami-0abc1234"], capsys)
    assert code == 130 and "launch these instances" in out and "nothing was launched" in err
    assert nothing_left(aws)


def test_ssh_to_the_world_is_warned_about_before_the_launch_is_confirmed(
    aws: Aws, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same terminal stand-in answering `n`: the warning comes before the question."""
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    args = [
        "up",
        "--cloud",
        "--instance-type",
        "g5.xlarge",
        "--ssh-cidr",
        "0.0.0.0/0",
        "--os",
        "debian-12",
        "--ami",
        "ami-0abc1234",
    ]
    code, out, err = run_cli(args, capsys)
    assert code == 130 and "launch these instances" in out and nothing_left(aws)
    assert (
        "warning: --ssh-cidr 0.0.0.0/0 opens port 22 (SSH) of every instance of this run to the whole internet" in err
    )


def test_the_run_in_up_json_carries_the_ssh_cidr_warning(aws: Aws) -> None:
    args = LaunchArgs(instance_type="g5.xlarge", ssh_cidr="0.0.0.0/0", ami=aws.ami(), os_name="debian-12")
    prepared = launcher.prepare(args, wait_ssh=False)
    ec2 = Ec2(prepared.session, REGION, sleep=lambda _s: None, poll_s=0.01)
    _, run = up_on_cloud(
        prepared,
        lambda inv: _passed(["i-1"]),
        cloud=ec2,
        down_after=True,
        keep_on_failure=False,
        say=lambda _m: None,
        workdir=aws.workdir,
    )
    (warning,) = run.to_json()["warnings"]
    assert warning.startswith("--ssh-cidr 0.0.0.0/0 opens port 22 (SSH)") and nothing_left(aws)


# --- the end of a run whose teardown fails (moto, no hosts) ---------------------------------------


def _passed(names: list[str]) -> UpResult:
    """A stand-in for `up`'s result: every host passed (the real `up` runs in the tests below)."""
    hosts = [HostRun(host=n, group="g", lock_hash="h", plan=cast(Any, None), verdict="pass") for n in names]
    return UpResult(run="up-run", run_dir=Path("."), check=False, hosts=hosts)


@pytest.fixture
def no_terminate(aws: Aws) -> tuple[Prepared, Ec2]:
    """A launch (no SSH wait) whose TerminateInstances always answers 500 (after the retries)."""
    args = LaunchArgs(instance_type="g5.xlarge", ssh_cidr="198.51.100.0/24", ami=aws.ami(), os_name="debian-12")
    prepared = launcher.prepare(args, wait_ssh=False)
    ec2 = Ec2(prepared.session, REGION, sleep=lambda _s: None, poll_s=0.01)
    ec2.client.meta.events.register("before-call.ec2.TerminateInstances", lambda **_: aws_error("InternalError", 500))
    return prepared, ec2


def test_a_passed_run_that_cannot_be_ended_is_exit_1_naming_the_command(
    aws: Aws, no_terminate: tuple[Prepared, Ec2]
) -> None:
    prepared, ec2 = no_terminate
    said: list[str] = []
    with pytest.raises(CloudError) as caught:
        up_on_cloud(
            prepared,
            lambda inv: _passed(["i-1"]),
            cloud=ec2,
            down_after=True,
            keep_on_failure=False,
            say=said.append,
            workdir=aws.workdir,
        )
    err = caught.value
    assert "could not be ended" in err.message and f"cloud down --run {prepared.run}" in err.hint
    assert err.details["up"]["ok"] is True and err.details["cloud"]["ended"] is False
    assert err.details["cloud"]["down_error"]
    assert any("may still cost money" in m for m in said)
    assert len(aws.live()) == 1
    Ec2(prepared.session, REGION, sleep=lambda _s: None, poll_s=0.01).down(run=prepared.run)
    assert nothing_left(aws)


def test_a_failed_run_that_cannot_be_ended_reports_the_first_failure(
    aws: Aws, no_terminate: tuple[Prepared, Ec2]
) -> None:
    prepared, ec2 = no_terminate
    said: list[str] = []

    def unreachable(inventory: str) -> UpResult:
        assert Path(inventory).is_file()
        raise OperationFailed("cannot probe i-1", "check SSH")

    with pytest.raises(OperationFailed) as caught:
        up_on_cloud(
            prepared,
            unreachable,
            cloud=ec2,
            down_after=True,
            keep_on_failure=False,
            say=said.append,
            workdir=aws.workdir,
        )
    assert caught.value.message == "cannot probe i-1"
    assert caught.value.details["cloud"]["down_command"] == f"provision cloud down --run {prepared.run}"
    assert any("could not end run" in m and "may still cost money" in m for m in said)
    Ec2(prepared.session, REGION, sleep=lambda _s: None, poll_s=0.01).down(run=prepared.run)
    assert nothing_left(aws)


# --- the one-shot run on the test hosts -----------------------------------------------------------


@pytest.mark.slow  # installs torch on every host
def test_one_shot_provisions_verifies_and_ends_the_run(
    oneshot: OneShot, admin_users: harness.HostSet, capsys: pytest.CaptureFixture[str]
) -> None:
    aws, hostset = oneshot.aws, admin_users
    code, out, err = run_cli(oneshot.args("--down-after"), capsys)
    assert code == 0, err[-3000:] + out[-3000:]
    doc = json.loads(out)  # one document on stdout, nothing else
    cloud = doc["cloud"]
    ids = [i["id"] for i in cloud["instances"]]
    assert doc["ok"] is True and len(ids) == len(hostset.hosts)
    assert {h["host"] for h in doc["hosts"]} == set(ids)  # the inventory names are the instance ids
    for h in doc["hosts"]:
        assert h["verdict"] == "pass" and h["failed_task"] is None, h
    [ec2] = oneshot.clients  # each instance was served by its own test host
    assert sorted(h.name for h in ec2.order.values()) == sorted(h.name for h in hostset.hosts)
    report = json.loads((aws.workdir / ".provision/runs" / doc["run"] / "report.json").read_text())
    # applied by Ansible (new hosts are never on the converged fast path), then verified by the job
    assert all(d["applied"] and d["verify"]["verdict"] == "pass" for d in report["details"]), report["details"]
    for h in hostset.hosts:  # the stack really is on the hosts
        shown = rh.ssh(hostset, h, "/opt/provision/venv/bin/python -c 'import torch; print(torch.__version__)'")
        assert shown.strip() == harness.TORCH_CPU.split("==")[1] + "+cpu"

    # the run was ended: every instance terminated, its security group and key pair deleted
    assert cloud["ended"] is True and cloud["down_command"] is None
    assert sorted(cloud["terminated"]) == sorted(ids)
    assert len(cloud["security_groups"]) == 1 and len(cloud["key_pairs"]) == 1
    assert nothing_left(aws) and left_behind(aws) == []
    reservations = aws.ec2.describe_instances(InstanceIds=ids)["Reservations"]
    assert {i["State"]["Name"] for r in reservations for i in r["Instances"]} == {"terminated"}
    assert f"ended run {cloud['run']}" in err


def test_a_failed_run_is_still_ended_with_down_after(oneshot: OneShot, capsys: pytest.CaptureFixture[str]) -> None:
    """No `admin` user on the hosts: SSH refuses the login, so `up` fails after the launch."""
    code, out, err = run_cli(oneshot.args("--down-after"), capsys)
    assert code == 1, err[-3000:]
    doc = json.loads(out)
    assert doc["ok"] is False
    cloud = _cloud_of(doc)
    assert cloud["ended"] is True and len(cloud["terminated"]) == len(oneshot.hostset.hosts)
    assert nothing_left(oneshot.aws) and left_behind(oneshot.aws) == []
    assert "ending run" in err


@pytest.mark.parametrize(
    ("extra", "kept", "says"),
    [
        (("--down-after", "--keep-on-failure"), True, "instance(s) for debugging (--keep-on-failure)"),
        (("--ttl", "2h"), False, "keep running and cost money"),
    ],
    ids=["keep-on-failure", "no-down-after"],
)
def test_a_failed_run_left_running_says_how_to_end_it(
    oneshot: OneShot, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], kept: bool, says: str
) -> None:
    code, out, err = run_cli(oneshot.args(*extra), capsys)
    assert code == 1
    cloud = _cloud_of(json.loads(out))
    run = cloud["run"]
    assert cloud["ended"] is False and cloud["kept"] is kept
    assert cloud["down_command"] == f"provision cloud down --run {run}"
    line = " ".join(err.split())
    assert says in line and f"end them with `provision cloud down --run {run}`" in line
    assert f"marks them expired at {cloud['expires_at']}" in line
    assert len(oneshot.aws.live()) == len(oneshot.hostset.hosts)
    code, _, _ = run_cli(["cloud", "down", "--run", run], capsys)
    assert code == 0 and nothing_left(oneshot.aws)


def test_sigterm_during_the_run_ends_it(
    oneshot: OneShot, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGTERM to this process as `up` starts probing, as `kill` or a cancelled CI job sends."""
    import provision.fleet.planning

    before = signal.getsignal(signal.SIGTERM)
    real_plan = provision.fleet.planning.plan

    def plan_then_killed(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return real_plan(*args, **kwargs)

    # patched where `up` looks it up: fleet/up.py imports plan by name (module-top imports, issue 26)
    monkeypatch.setattr("provision.fleet.up.plan", plan_then_killed)
    code, _, err = run_cli(oneshot.args("--down-after"), capsys)
    assert code == 143, err[-2000:]  # 128 + SIGTERM, as for every command (issue 25)
    assert "ended run" in err and nothing_left(oneshot.aws) and left_behind(oneshot.aws) == []
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is only in place during the run


def _cloud_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The run, from the `up` document or from the error object when `up` raised."""
    if "cloud" in doc:
        return dict(doc["cloud"])
    return dict(doc["error"]["cloud"])
