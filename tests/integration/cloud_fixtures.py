"""Fixtures for the EC2 tests: a moto server on loopback and an environment that can only reach it.

Every test gets fake credentials, ``AWS_ENDPOINT_URL`` pointing at the moto server, no
``AWS_PROFILE`` and no AWS config files, and the guard below checks that a client built from
that environment really targets loopback, so nothing here can reach a real AWS endpoint.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REGION = "us-east-1"
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
    from provision.cli import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(args=args)
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}
