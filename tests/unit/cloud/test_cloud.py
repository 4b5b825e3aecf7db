"""`provision cloud`: input checks, error classification, host keys, prices, inventory (no AWS).

The bad-input tests point AWS_ENDPOINT_URL at a closed loopback port: had the command sent any
request, it would fail to connect (exit 1), so exit 2 proves it stopped before any AWS call.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.cloud.aws import errors as cerr
from provision.cloud.aws.images import ImageQuery, normalize_os, parameter_name, ssh_user
from provision.cloud.aws.prices import cost_so_far, on_demand
from provision.cloud.inventory import Host, host_keys_from_console, inventory_doc, write_known_hosts
from provision.cloud.request import build_types, check_budget, parse_cidr, parse_ttl, types_for_gpu
from provision.errors import BadInput
from tests.support.cloud_cli import offline_aws, run_cli

__all__ = ["offline_aws"]  # a fixture, used by name


GOOD = ["cloud", "up", "--instance-type", "g5.xlarge", "--ssh-cidr", "203.0.113.7/32", "--ami", "ami-0abc1234"]


@pytest.mark.parametrize(
    "change, message",
    [
        (["--instance-type", "t3.micro"], "error: `t3.micro` is not an EC2 instance type with NVIDIA GPUs"),
        (["--instance-type", "g5.xlarge,inf2.xlarge"], "error: `inf2.xlarge` is not an EC2 instance type with NVIDIA"),
        (["--count", "0"], "error: --count 0 launches nothing"),
        (["--ttl", "8x"], "error: malformed --ttl `8x`"),
        (["--ttl", "0h"], "error: --ttl 0h is out of range"),
        (["--ssh-cidr", "10.0.0.300/8"], "error: malformed --ssh-cidr `10.0.0.300/8`"),
        (["--ssh-cidr", "10.0.0.1/8"], "error: malformed --ssh-cidr `10.0.0.1/8`"),
        (["--ami", "ubuntu"], "error: malformed --ami `ubuntu`"),
        (["--os", "windows-2022"], "error: unknown --os `windows-2022` for EC2"),
        (["--on-demand-fallback"], "error: --on-demand-fallback needs --spot"),
        (["--ssh-key", "/nonexistent.pub"], "error: --ssh-key /nonexistent.pub: no such file"),
        (["--ssh-key", "/etc/hostname"], "error: /etc/hostname is not a key EC2 can import"),
        (["--gpu", "H100-SXM"], "error: give --instance-type or --gpu, not both"),
        (["--max-hourly-usd", "1"], "error: every candidate costs more than --max-hourly-usd 1"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_any_aws_call(
    offline_aws: None, capsys: pytest.CaptureFixture[str], change: list[str], message: str
) -> None:
    args = list(GOOD)
    for i in range(0, len(change), 2):
        opt = change[i]
        if opt in args:
            args[args.index(opt) + 1] = change[i + 1]
        elif i + 1 < len(change) and not change[i + 1].startswith("--"):
            args += [opt, change[i + 1]]
        else:
            args += [opt]
    code, out, err = run_cli(args, capsys)
    assert code == 2, err
    assert err.startswith(message), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_missing_ssh_cidr_never_defaults_to_the_world(offline_aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["cloud", "up", "--instance-type", "g5.xlarge"], capsys)
    assert code == 2 and err.startswith("error: --ssh-cidr is required")


def test_missing_credentials_exit_2(
    offline_aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    for args in (GOOD, ["cloud", "ls"], ["cloud", "down", "--all"]):
        code, out, err = run_cli([*args, "--json"], capsys)
        assert code == 2, err
        assert err.startswith("error: no AWS credentials found (set AWS_PROFILE")
        assert json.loads(out)["error"]["code"] == "bad_input"


def test_missing_region_exit_2(
    offline_aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    code, _, err = run_cli(["cloud", "ls"], capsys)
    assert code == 2 and err.startswith("error: no AWS region given")


def test_down_needs_exactly_one_selector(offline_aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    for args in ([], ["--all", "--expired"], ["--run", "x", "--all"]):
        code, _, err = run_cli(["cloud", "down", *args], capsys)
        assert code == 2 and err.startswith("error: say what to end")


def test_unreachable_endpoint_is_exit_1_not_a_traceback(
    offline_aws: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the proof above: a command that does call AWS here fails to connect."""
    monkeypatch.setattr(cerr, "call", _no_retry_call(cerr.call))
    code, _, err = run_cli(["cloud", "ls"], capsys)
    assert code == 1 and err.startswith("error: listing instances: EndpointConnectionError")


def _no_retry_call(real: Any) -> Any:
    def call(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        kwargs["sleep"] = lambda _s: None
        return real(fn, *args, **kwargs)

    return call


# --- parsing and choosing -----------------------------------------------------------------------


def test_parse_ttl() -> None:
    assert parse_ttl("8h") == timedelta(hours=8)
    assert parse_ttl("1h30m") == timedelta(minutes=90)
    assert parse_ttl("2d") == timedelta(days=2)
    for bad in ("", "8", "h", "-1h", "1.5h", "31d", "8 h"):
        with pytest.raises(BadInput):
            parse_ttl(bad)


def test_parse_cidr() -> None:
    assert parse_cidr("203.0.113.7/32") == "203.0.113.7/32"
    assert parse_cidr("203.0.113.7") == "203.0.113.7/32"
    assert parse_cidr("2001:db8::/64") == "2001:db8::/64"
    assert parse_cidr("0.0.0.0/0") == "0.0.0.0/0"  # allowed, but only when given explicitly
    for bad in ("203.0.113.7/33", "nonsense", "10.0.0.1/8"):
        with pytest.raises(BadInput):
            parse_cidr(bad)


def test_gpu_choice_is_the_cheapest_type_that_fits() -> None:
    one = types_for_gpu("h100 sxm", 1)
    assert one[0].name == "p5.4xlarge" and one[0].usd_per_hour is not None
    assert [t.name for t in types_for_gpu("H100-SXM", 8)] == ["p5.48xlarge"]
    # priced types first, cheapest first; unpriced after them
    a10g = types_for_gpu("A10G", 4)
    assert {t.name for t in a10g} == {"g5.12xlarge", "g5.24xlarge", "g5.48xlarge"}
    assert [t.gpu_count for t in a10g] == sorted(t.gpu_count for t in a10g)
    with pytest.raises(BadInput, match="no EC2 instance type has 16 x H100-SXM"):
        types_for_gpu("H100-SXM", 16)
    with pytest.raises(BadInput):
        build_types(None, None, 2)


def test_graviton_type_is_arm64() -> None:
    (t,) = build_types("g5g.xlarge", None, None)
    assert t.arch == "arm64" and t.gpu == "T4G"


def test_budget_uses_count_times_price() -> None:
    types = build_types("p5.4xlarge,p5.48xlarge", None, None)
    assert [t.name for t in check_budget(types, 1, 10.0)] == ["p5.4xlarge"]
    with pytest.raises(BadInput, match="more than --max-hourly-usd 10"):
        check_budget(types, 2, 10.0)
    assert check_budget(types, 2, None) == types


# --- errors ---------------------------------------------------------------------------------------


def client_error(code: str, status: int = 400) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "RunInstances"
    )


@pytest.mark.parametrize(
    "code, status, kind",
    [
        ("RequestLimitExceeded", 400, cerr.Kind.RETRY),
        ("Throttling", 400, cerr.Kind.RETRY),
        ("InternalError", 500, cerr.Kind.RETRY),
        ("Whatever", 503, cerr.Kind.RETRY),
        ("InsufficientInstanceCapacity", 500, cerr.Kind.RETRY),  # a 5xx is retried whatever its code
        ("InsufficientInstanceCapacity", 400, cerr.Kind.CAPACITY),
        ("Unsupported", 400, cerr.Kind.CAPACITY),
        ("SpotMaxPriceTooLow", 400, cerr.Kind.CAPACITY),
        ("VcpuLimitExceeded", 400, cerr.Kind.QUOTA),
        ("MaxSpotInstanceCountExceeded", 400, cerr.Kind.QUOTA),
        ("UnauthorizedOperation", 403, cerr.Kind.AUTH),
        ("AuthFailure", 401, cerr.Kind.AUTH),
        ("InvalidAMIID.NotFound", 400, cerr.Kind.BAD_IMAGE),
        ("InvalidParameterValue", 400, cerr.Kind.BAD_REQUEST),
    ],
)
def test_classify(code: str, status: int, kind: cerr.Kind) -> None:
    c = cerr.classify(client_error(code, status))
    assert c is not None and c.kind is kind and c.code == code


def test_classify_non_aws_and_connection_errors() -> None:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    assert cerr.classify(ValueError("x")) is None
    assert cerr.classify(EndpointConnectionError(endpoint_url="http://x")).kind is cerr.Kind.RETRY  # type: ignore[union-attr]
    assert cerr.classify(NoCredentialsError()).kind is cerr.Kind.AUTH  # type: ignore[union-attr]


def test_call_retries_only_retryable_errors_with_growing_backoff() -> None:
    answers: list[Any] = [client_error("RequestLimitExceeded"), client_error("InternalError", 500), "ok"]
    sleeps: list[float] = []

    def fn() -> Any:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert cerr.call(fn, sleep=sleeps.append, base_delay=1.0) == "ok"
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 1.0 and 0 <= sleeps[1] <= 2.0

    calls = []

    def capacity() -> None:
        calls.append(1)
        raise client_error("InsufficientInstanceCapacity")

    with pytest.raises(Exception, match="InsufficientInstanceCapacity"):
        cerr.call(capacity, sleep=sleeps.append)
    assert len(calls) == 1

    def always() -> None:
        raise client_error("Throttling")

    sleeps.clear()
    with pytest.raises(Exception, match="Throttling"):
        cerr.call(always, sleep=sleeps.append, attempts=4)
    assert len(sleeps) == 3


def test_quota_names() -> None:
    assert cerr.quota_for("p5.48xlarge", False) == ("L-417A185B", "Running On-Demand P instances")
    assert cerr.quota_for("g6e.xlarge", True) == ("L-3819A6DF", "All G and VT Spot Instance Requests")


# --- images ----------------------------------------------------------------------------------------


def test_image_parameters_and_users() -> None:
    assert parameter_name(ImageQuery("ubuntu-24.04", "arm64", "os")) == (
        "/aws/service/canonical/ubuntu/server/24.04/stable/current/arm64/hvm/ebs-gp3/ami-id"
    )
    assert parameter_name(ImageQuery("ubuntu-22.04", "x86_64", "dlami")) == (
        "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    )
    assert parameter_name(ImageQuery("rhel-9", "x86_64", "os")) is None  # found by owner + name
    assert [ssh_user(o) for o in ("ubuntu-22.04", "debian-12", "amzn-2023", "rhel-9")] == [
        "ubuntu",
        "admin",
        "ec2-user",
        "ec2-user",
    ]
    assert normalize_os("AmazonLinux-2023") == "amzn-2023"


# --- host keys and inventory ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_pubkeys(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    d = tmp_path_factory.mktemp("keys")
    out = []
    for kind in ("ed25519", "ecdsa", "rsa"):
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(d / kind)], check=True)
        k, blob = (d / f"{kind}.pub").read_text().split()[:2]
        out.append((k, blob))
    return out


def test_host_keys_from_cloud_init_console(host_pubkeys: list[tuple[str, str]]) -> None:
    body = "".join(f"ec2: {k} {b} root@ip-172-31-0-1\n" for k, b in host_pubkeys)
    text = (
        "[    5.0] Linux version 6.8\n-----BEGIN SSH HOST KEY FINGERPRINTS-----\n256 SHA256:x root (ED25519)\n"
        "-----END SSH HOST KEY FINGERPRINTS-----\n"
        f"-----BEGIN SSH HOST KEY KEYS-----\n{body}-----END SSH HOST KEY KEYS-----\nlogin:"
    )
    assert host_keys_from_console(text) == host_pubkeys


def test_host_keys_refuses_garbage_and_partial_blocks(host_pubkeys: list[tuple[str, str]]) -> None:
    k, b = host_pubkeys[0]
    assert host_keys_from_console("") == []
    assert host_keys_from_console(f"-----BEGIN SSH HOST KEY KEYS-----\n{k} {b}\n") == []  # no END yet
    forged = base64.b64encode(b"\x00\x00\x00\x07ssh-rsa" + b"x" * 40).decode()
    block = f"-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 {forged} r\nssh-ed25519 !!notbase64 r\n-----END SSH HOST KEY KEYS-----"
    assert host_keys_from_console(block) == []


def test_inventory_and_known_hosts(tmp_path: Path, host_pubkeys: list[tuple[str, str]]) -> None:
    hosts = [
        Host("i-1", "198.51.100.1", 22, "ubuntu", "g5.xlarge", "us-east-1a", tuple(host_pubkeys[:1])),
        Host("i-2", "10.0.0.2", 2222, "ubuntu", "g5.xlarge", "us-east-1b", tuple(host_pubkeys[1:2])),
    ]
    known = tmp_path / "known_hosts"
    assert write_known_hosts(known, hosts) == 2
    lines = known.read_text().splitlines()
    assert lines[0].startswith("198.51.100.1 ssh-ed25519 ") and lines[1].startswith("[10.0.0.2]:2222 ecdsa-sha2-")
    doc = inventory_doc(
        run="r1",
        region="us-east-1",
        hosts=hosts,
        private_key=tmp_path / "k",
        known_hosts=known,
        base="os",
        os_id="ubuntu-24.04",
    )
    again = yaml.safe_load(yaml.safe_dump(doc))
    assert again["all"]["hosts"]["i-2"] == {
        "ansible_host": "10.0.0.2",
        "ansible_port": 2222,
        "ansible_user": "ubuntu",
        "ec2_instance_type": "g5.xlarge",
        "ec2_zone": "us-east-1b",
    }
    assert again["all"]["vars"]["provision_known_hosts"] == str(known)


def test_prices() -> None:
    price, read = on_demand("p5.4xlarge")
    assert price is not None and read
    assert on_demand("p5e.48xlarge") == (None, None)  # no on-demand price in the data: unknown, never guessed
    assert on_demand("t3.micro") == (None, None)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert cost_so_far(2.0, start, start + timedelta(minutes=90)) == 3.0
    assert cost_so_far(None, start) is None


@pytest.mark.parametrize(
    "args", [["cloud", "--help"], ["cloud", "up", "--help"], ["cloud", "up", "--instance-type", "g5.xlarge"]]
)
def test_help_and_bad_input_import_no_aws_sdk(args: list[str]) -> None:
    """boto3 loads only once a cloud command is about to talk to AWS."""
    code = (
        "import sys\nfrom provision.cli.app import cli\n"
        f"try:\n    cli.main({args!r})\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'paramiko')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


def test_public_keys_ec2_can_import_and_the_ones_it_cannot(tmp_path: Path) -> None:
    """Real keys from ssh-keygen: RSA and ED25519 pass; ECDSA (EC2 refuses it) and damaged keys do not."""
    from provision.cloud.launcher import public_key_problem

    keys = {}
    for kind in ("ed25519", "rsa", "ecdsa"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "me@laptop", "-f", str(tmp_path / kind)], check=True
        )
        keys[kind] = (tmp_path / f"{kind}.pub").read_text()
    assert public_key_problem(keys["ed25519"]) is None
    assert public_key_problem("# my key\n" + keys["rsa"]) is None
    assert "ecdsa-sha2-nistp256" in str(public_key_problem(keys["ecdsa"]))
    kind, blob, _ = keys["ed25519"].split()
    assert public_key_problem(f"{kind} {blob[:-4]}!!!!") == "the key is not base64"
    rsa_blob = keys["rsa"].split()[1]
    assert public_key_problem(f"ssh-ed25519 {rsa_blob}") == "the key's data is not a ssh-ed25519 key"
    assert public_key_problem(keys["ed25519"] + keys["rsa"]) == "2 key lines, not one"
    assert public_key_problem("") == "0 key lines, not one"


def test_run_ids_are_only_the_form_provision_makes() -> None:
    from provision.cloud.interface import local_files
    from provision.ids import check_run_id, is_run_id, new_run_id

    made = new_run_id(datetime(2026, 11, 30, 2, 8, 46, tzinfo=timezone.utc))
    assert made.startswith("20261130-020846-") and is_run_id(made)
    assert all(is_run_id(new_run_id()) for _ in range(50))
    for bad in [
        "",
        "../../../victim",
        f"{made}/..",
        f"{made}\n",
        f"../{made}",
        made.upper() + "A",
        "20261130-020846-fc8",
        "20261130-020846-fc86-",
        "2026113-020846-fc86",
        " 20261130-020846-fc86",
        "20261130_020846-fc86",
    ]:
        assert not is_run_id(bad), bad
        with pytest.raises(BadInput, match="is not a provision run id"):
            check_run_id(bad)
        with pytest.raises(ValueError):
            local_files(Path("/w"), bad)
    assert local_files(Path("/w"), made) == (
        Path(f"/w/.provision/runs/{made}/id_ed25519"),
        Path(f"/w/inventory/ec2-{made}.yml"),
    )


def test_cidr_warnings_for_the_whole_internet_and_ranges_wider_than_a_slash_8_or_16() -> None:
    """`0.0.0.0/1` (half the internet) and `2000::/3` (all of IPv6's global unicast) passed silently."""
    from provision.cloud.request import cidr_warnings

    assert cidr_warnings(parse_cidr("0.0.0.0/0"))[0].startswith("--ssh-cidr 0.0.0.0/0 opens port 22 (SSH)")
    assert "whole IPv6 internet" in cidr_warnings(parse_cidr("::/0"))[0]
    assert cidr_warnings("0.0.0.0/1") == [
        "--ssh-cidr 0.0.0.0/1 opens port 22 (SSH) of every instance of this run to 2^31 addresses (a range wider "
        "than /8, not one network of yours); give your own address instead, e.g. --ssh-cidr 203.0.113.7/32"
    ]
    assert "2^125 addresses (a range wider than /16" in cidr_warnings("2000::/3")[0]
    assert all(cidr_warnings(c) for c in ("10.0.0.0/7", "2000::/15"))
    quiet = ("203.0.113.7/32", "10.0.0.0/8", "2001:db8::/32", "2001::/16")
    assert [cidr_warnings(parse_cidr(c)) for c in quiet] == [[], [], [], []]


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (GOOD, "cloud up launches paid instances"),
        ([*GOOD, "--json"], "cloud up launches paid instances"),
        (["cloud", "down", "--all"], "cloud down --all ends every run provision launched"),
        (["cloud", "down", "--all", "--json"], "cloud down --all ends every run provision launched"),
    ],
)
def test_what_spends_or_destroys_refuses_without_a_terminal_or_yes(
    offline_aws: None, capsys: pytest.CaptureFixture[str], args: list[str], what: str
) -> None:
    """No terminal on stdin (pytest's) and no --yes: one line, exit 2, and no AWS call (the
    endpoint is closed: a call would be exit 1), so nothing was launched or ended."""
    code, out, err = run_cli(args, capsys)
    assert code == 2, err
    line = f"error: {what} and there is no terminal to ask on (pass --yes to "
    assert err.splitlines()[-1].startswith(line) and "Traceback" not in err
    if "--json" in args:
        assert json.loads(out)["error"]["code"] == "bad_input"


def test_a_wide_ssh_cidr_is_said_before_the_launch_is_refused(
    offline_aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = list(GOOD)
    args[args.index("--ssh-cidr") + 1] = "0.0.0.0/1"
    code, _, err = run_cli(args, capsys)
    assert code == 2
    warning, refusal = err.splitlines()
    assert warning.startswith("warning: --ssh-cidr 0.0.0.0/1 opens port 22 (SSH) of every instance")
    assert refusal.startswith("error: cloud up launches paid instances and there is no terminal to ask on")


def _ec2(kind: str, name: str | None, run: str = "20261130-020846-fc86", groups: tuple[str, ...] = ()) -> dict:
    """A resource as EC2's Describe* calls return it (the keys listing.why_not_owned reads)."""
    tags = [{"Key": "provision:run", "Value": run}]
    if kind == "instance":
        nics = [{"Groups": [{"GroupId": "sg-1", "GroupName": g} for g in groups]}]
        return {"InstanceId": "i-1", "KeyName": name, "SecurityGroups": [], "NetworkInterfaces": nics, "Tags": tags}
    if kind == "security group":
        return {"GroupId": "sg-1", "GroupName": name, "Tags": tags}
    return {"KeyName": name, "Tags": tags}


def test_only_what_carries_provisions_names_is_provisions() -> None:
    from provision.cloud.aws.listing import split_owned, why_not_owned

    run = "20261130-020846-fc86"
    own = f"provision-{run}"
    assert why_not_owned("instance", _ec2("instance", own, groups=("default", own))) is None
    assert why_not_owned("security group", _ec2("security group", own)) is None
    assert why_not_owned("key pair", _ec2("key pair", own)) is None
    # someone else's, whatever the tag says
    assert why_not_owned("instance", _ec2("instance", "prod-deploy-key", groups=(own,))) == (
        f"launched with key pair 'prod-deploy-key', not {own}: provision did not make it"
    )
    assert why_not_owned("instance", _ec2("instance", None, groups=(own,))) == (
        f"launched with key pair None, not {own}: provision did not make it"
    )
    assert why_not_owned("instance", _ec2("instance", own, groups=("prod-db",))) == (
        f"not in security group {own}: provision did not launch it"
    )
    assert why_not_owned("security group", _ec2("security group", "prod-db")) == (
        f"named 'prod-db', not {own}: provision did not make it"
    )
    # another run's names do not make it this run's
    other = "provision-20261130-020846-0000"
    assert (
        why_not_owned("key pair", _ec2("key pair", other)) == f"named '{other}', not {own}: provision did not make it"
    )
    assert why_not_owned("key pair", _ec2("key pair", "provision-x", run="x")) == "not a provision run id"
    # a name may hold anything: it is quoted and cut, as the tag is
    long = "x" * 300
    (why,) = [s.reason for s in split_owned([_ec2("key pair", long)], "key pair")[1]]
    assert why.startswith("named 'xxx") and len(why) < 200
