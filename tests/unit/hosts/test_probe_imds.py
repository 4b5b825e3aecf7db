"""EC2 instance type via IMDSv2, against a tiny metadata server on loopback (never the real one).

The server plays the instance metadata service: a token from PUT /latest/api/token, then
GET /latest/meta-data/instance-type only with that token (HttpTokens=required, as provision's
instances are launched).
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.hosts import gather
from provision.hosts.local import LocalTransport
from tests.support.http_server import serving
from tests.support.probe_fixtures import table_lookup

TOKEN = "AQAEAF-test-token=="


class _Imds(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None]]

    def do_PUT(self) -> None:
        self.seen.append(("PUT", self.path, self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")))
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._answer(200, TOKEN)
        else:
            self._answer(400, "")

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("X-aws-ec2-metadata-token")))
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self._answer(401, "")
        elif self.path == "/latest/meta-data/instance-type":
            self._answer(200, "p5.48xlarge")
        else:
            self._answer(404, "")

    def _answer(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def imds() -> Iterator[tuple[str, list[tuple[str, str, str | None]]]]:
    seen: list[tuple[str, str, str | None]] = []
    handler = type("Handler", (_Imds,), {"seen": seen})
    with serving(handler) as url:
        yield url, seen


def _probe(endpoint: str | None, disabled: bool = False) -> str | None:
    options = gather.GatherOptions(imds_endpoint=endpoint, imds_disabled=disabled, lookup=table_lookup)
    return gather.gather(LocalTransport(), options).ec2_instance_type


def test_instance_type_via_imdsv2(imds: tuple[str, list[tuple[str, str, str | None]]]) -> None:
    endpoint, seen = imds
    assert _probe(endpoint) == "p5.48xlarge"
    assert seen == [("PUT", "/latest/api/token", "60"), ("GET", "/latest/meta-data/instance-type", TOKEN)]


def test_no_metadata_service_is_no_instance_type() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _probe(f"http://127.0.0.1:{port}") is None


def test_a_metadata_address_that_never_answers_is_given_up_on() -> None:
    """Off EC2 a packet filter may drop what goes to 169.254.169.254: nothing refuses, nothing
    answers. The snippet gives up after its own short timeout (TIMEOUT per request) and prints
    nothing. (How fast is not asserted here: the subprocess limit only catches a hang.)"""
    with socket.socket() as silent:  # accepts the connection (backlog), never reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        snippet = Path(gather.SNIPPETS) / "imds.py"
        r = subprocess.run([sys.executable, str(snippet), endpoint], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout) == (0, ""), r.stderr


def test_disabled_is_not_asked(imds: tuple[str, list[tuple[str, str, str | None]]]) -> None:
    endpoint, seen = imds
    assert _probe(endpoint, disabled=True) is None
    assert seen == []


def test_default_endpoint_is_asked_only_on_ec2_hardware() -> None:
    env = gather.probe_env(gather.GatherOptions(), ["main"])
    imds_part = gather.PROBE_SCRIPT.read_text().split("sec imds")[1].split("sec venv")[0]
    assert "/sys/class/dmi/id/sys_vendor" in imds_part and env["PROVISION_IMDS_ENDPOINT"] == gather.IMDS_DEFAULT
    assert env["PROVISION_IMDS_ASK"] == "ec2" and '"$PROVISION_IMDS_ASK" = always ] ||' in imds_part


def test_aws_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = gather.GatherOptions.from_env(venv=None)
    assert (options.imds_endpoint, options.imds_disabled) == ("http://127.0.0.1:9", True)
