"""`provision probe` as users call it: the local machine, and bad input (exit 2, one line, no host
contacted: a loopback listener stands where a host would be and counts connections)."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.probe_fixtures import run_probe as run


@pytest.fixture
def listener() -> Iterator[tuple[int, list[int]]]:
    """A TCP port on loopback that records every connection made to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        server.close()


def test_local_probe_json() -> None:
    result = run("--local", "--json", "--venv", str(Path(sys.executable).parent.parent))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)  # exactly one JSON document on stdout
    assert doc["ok"] is True and len(doc["hosts"]) == 1
    host = doc["hosts"][0]
    assert (host["host"], host["ok"], host["error"]) == ("localhost", True, None)
    facts = host["facts"]
    for key in (
        "os",
        "arch",
        "kernel",
        "gpus",
        "nvswitch_count",
        "driver_version",
        "secure_boot",
        "nouveau_loaded",
        "disk_free_gib",
        "python",
        "kernel_headers",
        "package_locks",
        "unattended_upgrades",
        "container_runtimes",
        "ec2_instance_type",
        "memory_gib",
        "cpus",
    ):
        assert key in facts
    assert facts["python"] and facts["disk_free_gib"] > 0 and facts["cpus"] >= 1
    assert facts["venv"]["packages"]["nvidia-ml-py"]  # a dependency of provision, in this venv


def test_local_probe_human_output() -> None:
    result = run()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("localhost")
    assert "kernel headers" in result.stdout and "disk free" in result.stdout


@pytest.mark.parametrize(
    "bad",
    ["bad..host", "root@", "gpu1:99999", "user name@gpu1", "host:port"],
)
def test_malformed_host_is_exit_2_and_nothing_contacted(listener: tuple[int, list[int]], bad: str) -> None:
    port, accepted = listener
    result = run(f"127.0.0.1:{port}", bad)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr
    assert accepted == []


def test_bad_inventory_is_exit_2_and_nothing_contacted(listener: tuple[int, list[int]], tmp_path: Path) -> None:
    port, accepted = listener
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[gpus]\nok ansible_host=127.0.0.1 ansible_port={port}\nbad ansible_port=x\n")
    result = run("-i", str(inventory), "--json")
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["error"]["code"] == "bad_input"
    assert "invalid port" in doc["error"]["message"]
    assert accepted == []


def test_yaml_inventory_that_does_not_parse(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    - gpu1\n")
    result = run("-i", str(inventory))
    assert result.returncode == 2 and "inventory does not parse" in result.stderr


def test_local_and_hosts_together_is_bad_input() -> None:
    result = run("--local", "gpu1")
    assert result.returncode == 2 and "not --local and HOST" in result.stderr


def test_a_port_that_is_not_sshd_is_one_error_line(tmp_path: Path) -> None:
    """A server that accepts and hangs up: exit 1 and exactly one stderr line (paramiko's own
    traceback logging must not reach the terminal)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def hang_up() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        result = run("-F", str(tmp_path / "none"), f"root@127.0.0.1:{server.getsockname()[1]}")
    finally:
        stop.set()
        thread.join()
        server.close()
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: cannot reach 127.0.0.1")


def test_ssh_settings_that_do_not_parse_are_bad_input(listener: tuple[int, list[int]], tmp_path: Path) -> None:
    port, accepted = listener
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"h1 ansible_host=127.0.0.1 ansible_port={port} ansible_ssh_common_args='-o \"Unclosed'\n")
    result = run("-i", str(inventory))
    assert result.returncode == 2 and "ansible_ssh_common_args of host `h1` does not parse" in result.stderr
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu1\n  Port twenty-two\n")
    result = run("-F", str(config), "gpu1")
    assert result.returncode == 2 and "invalid SSH port `twenty-two`" in result.stderr
    assert accepted == []
