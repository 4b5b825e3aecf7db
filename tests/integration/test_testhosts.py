"""The SSH test hosts themselves: reachable by paramiko and ansible-runner with host keys verified,
and torn down without leaving anything behind."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import paramiko
import pytest

from provision.resources import playbooks_dir
from tests.conftest import require_testhost_support
from tests.hosts import harness


def _client(hostset: harness.HostSet, known_hosts: Path | None) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    if known_hosts is not None:
        client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def test_paramiko_reaches_every_host_with_verified_key(testhosts: harness.HostSet) -> None:
    for host in testhosts.hosts:
        client = _client(testhosts, testhosts.known_hosts)
        client.connect(
            host.address,
            port=host.port,
            username=host.user,
            key_filename=str(testhosts.key),
            allow_agent=False,
            look_for_keys=False,
            timeout=10,
        )
        try:
            _, out, _ = client.exec_command("hostname && . /etc/os-release && echo $ID-$VERSION_ID")
            assert out.read().decode().split() == [host.name, "debian-12"]
        finally:
            client.close()


def test_paramiko_refuses_a_host_whose_key_is_unknown(testhosts: harness.HostSet) -> None:
    host = testhosts.hosts[0]
    client = _client(testhosts, known_hosts=None)
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        client.connect(
            host.address,
            username=host.user,
            key_filename=str(testhosts.key),
            allow_agent=False,
            look_for_keys=False,
            timeout=10,
        )


def test_paramiko_refuses_a_changed_host_key(testhosts: harness.HostSet, tmp_path: Path) -> None:
    host = testhosts.hosts[0]
    forged = tmp_path / "known_hosts"
    other = paramiko.Ed25519Key.from_private_key(io.StringIO(testhosts.key.read_text()))
    forged.write_text(f"{host.address} {other.get_name()} {other.get_base64()}\n")
    client = _client(testhosts, forged)
    with pytest.raises(paramiko.BadHostKeyException):
        client.connect(
            host.address,
            username=host.user,
            key_filename=str(testhosts.key),
            allow_agent=False,
            look_for_keys=False,
            timeout=10,
        )


def _ping(testhosts: harness.HostSet, tmp_path: Path, known_hosts: Path) -> dict[str, dict[str, int]]:
    import ansible_runner

    hosts = "\n".join(f"{h.name} ansible_host={h.address}" for h in testhosts.hosts)
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        f"[testhosts]\n{hosts}\n\n[testhosts:vars]\nansible_user=root\n"
        f"ansible_ssh_private_key_file={testhosts.key}\nansible_python_interpreter=/usr/bin/python3\n"
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes'\n"
    )
    (tmp_path / "runner").mkdir()
    result = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        playbook=str(playbooks_dir() / "ping.yml"),
        inventory=str(inventory),
        quiet=True,
        # the venv need not be activated: ansible-playbook is found beside this Python
        # own ControlPersist sockets: a master connection left by another run would skip the
        # host-key check this test is about
        envvars={
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        },
    )
    stats = result.stats or {}
    return {key: dict(stats.get(key, {})) for key in ("ok", "failures", "dark")}


def test_ansible_runner_reaches_every_host_with_verified_key(testhosts: harness.HostSet, tmp_path: Path) -> None:
    stats = _ping(testhosts, tmp_path, testhosts.known_hosts)
    assert set(stats["ok"]) == {h.name for h in testhosts.hosts}
    assert stats["failures"] == {} and stats["dark"] == {}


def test_ansible_runner_refuses_hosts_whose_keys_are_unknown(testhosts: harness.HostSet, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    stats = _ping(testhosts, tmp_path, empty)
    assert set(stats["dark"]) == {h.name for h in testhosts.hosts}
    assert stats["ok"] == {}


def test_teardown_leaves_no_namespaces_mounts_links_or_processes(tmp_path: Path) -> None:
    require_testhost_support()
    directory = tmp_path / "teardown-set"
    net = os.environ.get("TESTHOSTS_TEARDOWN_NET", "10.200.9")
    with harness.running(2, directory, prefix="tdn", net=net, bridge="tdnbr0") as hostset:
        assert len(hostset.hosts) == 2
        assert harness.leftovers(hostset), "a running set must be visible to the leftovers check"
    assert harness.leftovers(hostset) == []
