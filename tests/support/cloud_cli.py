"""`provision cloud` in-process without AWS: a fixture that makes any AWS request fail, and a runner.

The fixture points AWS_ENDPOINT_URL at a closed loopback port: had a command sent any request, it
would fail to connect (exit 1), so exit 2 proves it stopped before any AWS call. A test module
that uses it imports it by name (and lists it in ``__all__``, so the import is not unused).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


@pytest.fixture
def offline_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens: any AWS request would fail to connect
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from provision.cli.app import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(args=args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err
