"""Fixtures for the EC2 tests: a moto server on loopback and an environment that can only reach it.

Every test gets fake credentials, ``AWS_ENDPOINT_URL`` pointing at the moto server, no
``AWS_PROFILE`` and no AWS config files, and the guard below checks that a client built from
that environment really targets loopback, so nothing here can reach a real AWS endpoint.

For the chain onto SSH test hosts (:class:`MappedEc2`, :func:`admin_users`) two stand-ins fill
in what moto cannot boot: the console output answers with the test host's real host keys in
cloud-init's ``BEGIN SSH HOST KEY KEYS`` block, and the ``admin`` login user of Debian's EC2
images is added to the test hosts (passwordless sudo, as on EC2).
"""

from __future__ import annotations

import base64
import json
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provision.cloud.aws.ec2 import Ec2
from provision.cloud.interface import LaunchResult
from provision.cloud.request import LaunchRequest
from tests.hosts import harness
from tests.integration import roles_harness as rh

REGION = "us-east-1"
CIDR = "203.0.113.7/32"  # the address `cloud up --ssh-cidr` opens port 22 to
_AMIS: dict[str, str] = {}


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    os.environ["MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION"] = "true"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclass
class Aws:
    url: str
    ec2: Any
    workdir: Path

    def session(self) -> Any:
        import boto3

        return boto3.session.Session(region_name=REGION)

    def ami(self, arch: str = "x86_64") -> str:
        # moto's built-in images are the same after every reset: look each architecture up once.
        if arch not in _AMIS:
            _AMIS[arch] = self._find_ami(arch)
        return _AMIS[arch]

    def _find_ami(self, arch: str) -> str:
        images = self.ec2.describe_images(Filters=[{"Name": "architecture", "Values": [arch]}])["Images"]
        linux = [i for i in images if "ubuntu" in i["Name"].lower() or "amzn" in i["Name"].lower()]
        return str(sorted(linux or images, key=lambda i: i["ImageId"])[0]["ImageId"])

    def live(self) -> list[dict[str, Any]]:
        res = self.ec2.describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
        )
        return [i for r in res["Reservations"] for i in r["Instances"]]

    def groups(self) -> list[dict[str, Any]]:
        return [g for g in self.ec2.describe_security_groups()["SecurityGroups"] if g["GroupName"] != "default"]

    def key_pairs(self) -> list[dict[str, Any]]:
        return list(self.ec2.describe_key_pairs()["KeyPairs"])


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Aws]:
    import boto3

    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.ssh/id_ed25519.pub unless a test makes one
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST"), timeout=10)
    ec2 = boto3.client("ec2", region_name=REGION)
    # The guard: the environment must send every call to the loopback moto server.
    assert ec2.meta.endpoint_url == moto_url, ec2.meta.endpoint_url
    yield Aws(moto_url, ec2, work)


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``provision ARGS`` in-process through the real entry point; (exit code, stdout, stderr)."""
    from provision.cli.app import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(args=args)
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def up(aws: Aws, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict, str]:
    """`provision cloud up --json` of one Ubuntu 22.04 instance without waiting for SSH (moto has none)."""
    args = [
        "cloud",
        "up",
        "--ssh-cidr",
        CIDR,
        "--ami",
        aws.ami(),
        "--os",
        "ubuntu-22.04",
        "--no-wait-ssh",
        "--yes",
        "--json",
        *extra,
    ]
    code, out, err = run_cli(args, capsys)
    return code, (json.loads(out) if out.strip() else {}), err


def tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def nothing_left(aws: Aws) -> bool:
    """No instance, security group or key pair exists on the moto server."""
    return aws.live() == [] and aws.groups() == [] and aws.key_pairs() == []


@pytest.fixture
def admin_users(testhosts: harness.HostSet) -> Iterator[harness.HostSet]:
    """The `admin` user of Debian's EC2 images, on every test host (removed afterwards)."""
    add = (
        "id admin >/dev/null 2>&1 || useradd -m -s /bin/bash -G sudo admin; "
        "echo 'admin ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/90-cloud-admin; "
        "mkdir -p ~admin/.ssh && cp /root/.ssh/authorized_keys ~admin/.ssh/ && chown -R admin:admin ~admin/.ssh"
    )
    for h in testhosts.hosts:
        rh.ssh(testhosts, h, add)
    yield testhosts
    for h in testhosts.hosts:
        rh.ssh(testhosts, h, "rm -f /etc/sudoers.d/90-cloud-admin; userdel -r admin 2>/dev/null || true")


def cloud_init_console(hostset: harness.HostSet, host: harness.TestHost) -> str:
    """What cloud-init prints on the console, with this host's real host public keys."""
    etc = hostset.directory / "hosts" / host.name / "root" / "etc" / "ssh"
    keys = "".join(
        " ".join(p.read_text().split()[:2]) + f" root@{host.name}\n" for p in sorted(etc.glob("ssh_host_*_key.pub"))
    )
    return (
        "Cloud-init v. 24.1 running 'modules:final'\n"
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        f"{keys}"
        "-----END SSH HOST KEY KEYS-----\n"
        "Cloud-init v. 24.1 finished\n"
    )


class Http:
    """The HTTP response a botocore ``before-call`` hook answers with (botocore only reads it)."""

    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.content = b""


def aws_error(code: str, status: int = 400) -> tuple[Http, dict[str, Any]]:
    """An AWS error answer for a ``before-call`` hook: the caller sees EC2 refusing the call."""
    return Http(status), {
        "Error": {"Code": code, "Message": f"injected {code}"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }


class MappedEc2(Ec2):
    """The real :class:`Ec2` on moto, its instances reached at the SSH test hosts.

    The launch's test-only ``address_map`` hands each new instance the next test host, and
    ``GetConsoleOutput`` answers with that host's real keys; every other call goes to moto.
    Waits poll without sleeping.
    """

    def __init__(self, session: Any, region: str, hostset: harness.HostSet) -> None:
        super().__init__(session, region, sleep=lambda _s: None, poll_s=0.01)
        self.hostset = hostset
        self.order: dict[str, harness.TestHost] = {}  # instance id -> the test host it stands on
        self.client.meta.events.register("before-call.ec2.GetConsoleOutput", self._console)

    def address_map(self, instance_id: str, address: str) -> tuple[str, int]:
        self.order[instance_id] = self.hostset.hosts[len(self.order)]
        return self.order[instance_id].address, self.order[instance_id].port

    def _console(self, params: dict[str, Any], **_: Any) -> Any:
        iid = params["body"]["InstanceId"]
        text = cloud_init_console(self.hostset, self.order[iid])
        return Http(200), {"InstanceId": iid, "Output": base64.b64encode(text.encode()).decode()}

    def launch(self, req: LaunchRequest, **kwargs: Any) -> LaunchResult:
        kwargs.setdefault("address_map", self.address_map)
        kwargs.setdefault("ssh_timeout_s", 60)
        return super().launch(req, **kwargs)


class HoldingProxy:
    """A test-only HTTP proxy in front of the moto server that holds the answer to one EC2 action.

    It forwards every request to moto unchanged; for ``action`` (e.g. RunInstances) moto acts on
    the request (the instances exist) and the proxy then holds moto's answer until
    :meth:`release`, so the client is caught inside that call, as when a signal arrives while a
    real RunInstances is in flight. Point ``AWS_ENDPOINT_URL`` at :attr:`url`.
    """

    def __init__(self, upstream: str, action: str) -> None:
        import http.server
        import threading
        import urllib.error

        self.upstream = upstream
        self.held = threading.Event()  # moto has acted on the held call; its answer is waiting
        self._release = threading.Event()
        proxy = self
        marker = f"&Action={action}&".encode()  # a query-protocol form body: Action=...&Version=...

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                req = urllib.request.Request(proxy.upstream + self.path, data=body, headers=headers, method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        status, data, rheaders = resp.status, resp.read(), resp.headers
                except urllib.error.HTTPError as exc:
                    status, data, rheaders = exc.code, exc.read(), exc.headers
                if marker in b"&" + body:
                    proxy.held.set()
                    proxy._release.wait(120)
                try:
                    self.send_response(status)
                    for k, v in rheaders.items():
                        if k.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up on the held call (it was interrupted): nobody to answer

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._release.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
