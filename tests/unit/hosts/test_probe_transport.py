"""Transports without a network: SSH settings resolution, host-key helpers, the local transport."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from provision.errors import BadInput
from provision.hosts.inventory import HostTarget, parse_host
from provision.hosts.known_hosts import check_known_hosts_file, fingerprint, load_known_hosts, record_host_key
from provision.hosts.local import LocalTransport
from provision.hosts.ssh import connect
from provision.hosts.ssh_config import resolve_settings, ssh_trust_args
from provision.hosts.transport import CommandTimeout, sudo_stdin, sudo_wrap
from tests.support.probe_fixtures import run_probe

SSH_CONFIG = """
Host gpu1
  HostName 10.9.0.1
  User ubuntu
  Port 2201
  IdentityFile ~/.ssh/gpu1_ed25519
  UserKnownHostsFile /etc/provision/known_hosts /tmp/second_known_hosts
  ProxyJump jump@bastion.example.com:2222
  IdentitiesOnly yes

Host 10.200.*
  User root

Host *
  ServerAliveInterval 30
"""


@pytest.fixture
def ssh_config(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.write_text(SSH_CONFIG)
    return path


def test_ssh_config_fills_what_the_host_argument_leaves_out(ssh_config: Path) -> None:
    s = resolve_settings(parse_host("gpu1"), ssh_config)
    assert (s.name, s.hostname, s.user, s.port) == ("gpu1", "10.9.0.1", "ubuntu", 2201)
    assert s.key_files == (os.path.expanduser("~/.ssh/gpu1_ed25519"),)
    assert s.known_hosts_files == ("/etc/provision/known_hosts", "/tmp/second_known_hosts")
    assert s.proxy_jump == "jump@bastion.example.com:2222"
    assert s.identities_only is True


def test_explicit_user_and_port_win_over_ssh_config(ssh_config: Path) -> None:
    s = resolve_settings(parse_host("admin@gpu1:22"), ssh_config)
    assert (s.hostname, s.user, s.port) == ("10.9.0.1", "admin", 22)


def test_inventory_vars_and_ssh_args(ssh_config: Path) -> None:
    target = HostTarget(
        "node7",
        "10.200.1.17",
        port=None,
        key_file="/keys/id",
        vars={
            "ansible_ssh_common_args": "-o UserKnownHostsFile=/kh -o StrictHostKeyChecking=yes "
            "-J hop1,hop2 -oProxyCommand=none",
            "ansible_become_password": "pw",
        },
    )
    s = resolve_settings(target, ssh_config)
    # the config is matched against the address, as ssh matches the HostName it is given
    assert (s.hostname, s.user, s.port) == ("10.200.1.17", "root", 22)
    assert s.key_files == ("/keys/id",)
    assert s.known_hosts_files == ("/kh",)
    assert s.proxy_jump == "hop1,hop2" and s.proxy_command is None
    assert s.sudo_password == "pw" and "pw" not in repr(s)


def test_no_ssh_config_defaults(tmp_path: Path) -> None:
    s = resolve_settings(parse_host("gpu9"), tmp_path / "absent")
    assert (s.hostname, s.port) == ("gpu9", 22)
    assert s.known_hosts_files[0] == os.path.expanduser("~/.ssh/known_hosts")
    assert s.proxy_jump is None


def test_fingerprint_matches_ssh_keygen(tmp_path: Path) -> None:
    key_path = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_path)], check=True)
    keygen = subprocess.run(
        ["ssh-keygen", "-lf", str(key_path) + ".pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    key = paramiko.Ed25519Key.from_private_key_file(str(key_path))
    assert fingerprint(key) == keygen


def test_record_host_key_is_readable_by_ssh_tools(tmp_path: Path) -> None:
    key_path = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_path)], check=True)
    key = paramiko.Ed25519Key.from_private_key_file(str(key_path))
    known = tmp_path / "dir" / "known_hosts"
    record_host_key(str(known), "10.0.0.1", 22, key)
    record_host_key(str(known), "10.0.0.2", 2222, key)
    keys = paramiko.HostKeys(str(known))
    assert keys.lookup("10.0.0.1")["ssh-ed25519"] == key
    assert keys.lookup("[10.0.0.2]:2222")["ssh-ed25519"] == key
    found = subprocess.run(["ssh-keygen", "-F", "[10.0.0.2]:2222", "-f", str(known)], capture_output=True, text=True)
    assert found.returncode == 0


def test_local_transport_runs_shell_and_argv() -> None:
    local = LocalTransport()
    assert local.name == "localhost"
    r = local.run("echo out; echo err >&2; exit 3")
    assert (r.exit_status, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
    r = local.run(["printf", "%s|", "a b", "$HOME"])
    assert r.stdout == "a b|$HOME|"  # argv items reach the command verbatim, unexpanded
    assert local.run("cat", stdin=b"data").stdout == "data"


def test_local_transport_timeout_stops_the_whole_pipeline(tmp_path: Path) -> None:
    marker = tmp_path / "late"
    start = time.monotonic()
    with pytest.raises(CommandTimeout, match=r"timed out after 0\.5s on localhost"):
        LocalTransport().run(f"sleep 5; touch {marker}", timeout=0.5)
    assert time.monotonic() - start < 3
    time.sleep(0.2)
    assert not marker.exists()


def test_local_transport_copies(tmp_path: Path) -> None:
    src = tmp_path / "a"
    src.write_text("x")
    local = LocalTransport()
    local.put(src, str(tmp_path / "b"), mode=0o600)
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o600
    local.get(str(tmp_path / "b"), tmp_path / "c")
    assert (tmp_path / "c").read_text() == "x"


def test_sudo_never_puts_the_password_on_the_command_line() -> None:
    wrapped = sudo_wrap("cat /etc/shadow", "hunter2")
    assert "hunter2" not in wrapped and wrapped.startswith("sudo -S -p ''")
    assert sudo_stdin("hunter2", b"in") == b"hunter2\nin"
    assert sudo_wrap("id", None).startswith("sudo -n -- sh -c ")


def test_local_sudo_as_root_runs_plainly() -> None:
    if os.geteuid() != 0:
        pytest.skip("checks the root path")
    assert LocalTransport().run("id -u", sudo=True).stdout.strip() == "0"


def test_connect_to_localhost_is_local() -> None:
    transport = connect("localhost")
    assert isinstance(transport, LocalTransport)
    transport.close()


def _bad_known_hosts(tmp_path: Path) -> Path:
    good = paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    # line 3: a key whose base64 does not decode (a truncated paste); line 2 is a good one
    known.write_text(
        f"# comment\n10.9.0.9 {good.get_name()} {good.get_base64()}\n10.9.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI\n"
    )
    return known


def test_a_known_hosts_line_that_does_not_decode_is_bad_input_naming_file_and_line(tmp_path: Path) -> None:
    known = _bad_known_hosts(tmp_path)
    config = tmp_path / "config"
    config.write_text(f"Host gpu1\n  HostName 10.9.0.1\n  UserKnownHostsFile {known}\n")
    with pytest.raises(BadInput) as caught:
        resolve_settings(parse_host("gpu1"), config)
    assert caught.value.message == f"known_hosts file {known} line 3: the key does not decode"
    assert caught.value.hint == f"fix or delete line 3 of {known}"

    # the CLI: one line, exit 2 (bad input), before any host is contacted (10.9.0.1 does not exist)
    probed = run_probe("-F", str(config), "gpu1")
    assert probed.returncode == 2, probed.stderr
    assert (
        probed.stderr == f"error: known_hosts file {known} line 3: the key does not decode "
        f"(fix or delete line 3 of {known})\n"
    )


def test_ssh_trust_args_name_the_probes_files(tmp_path: Path, ssh_config: Path) -> None:
    args = shlex.split(ssh_trust_args(parse_host("gpu1"), ssh_config))
    assert args == [
        "-F",
        str(ssh_config),
        "-o",
        "UserKnownHostsFile=/etc/provision/known_hosts /tmp/second_known_hosts",
        "-o",
        "GlobalKnownHostsFile=/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2",
        "-o",
        "StrictHostKeyChecking=yes",
    ]
    # no config file: ssh must not read the passwd home's ~/.ssh/config that the probe never read
    spaced = tmp_path / "my keys" / "known_hosts"
    target = HostTarget("n1", "10.0.0.5", vars={"ansible_ssh_common_args": f"""-o 'UserKnownHostsFile="{spaced}"'"""})
    args = shlex.split(ssh_trust_args(target, tmp_path / "absent"))
    assert args[:4] == ["-F", "/dev/null", "-o", f'UserKnownHostsFile="{spaced}"']
    home = HostTarget("n2", "10.0.0.6")
    assert f"UserKnownHostsFile={os.path.expanduser('~/.ssh/known_hosts')} " in ssh_trust_args(home, tmp_path / "x")


def test_known_hosts_markers_and_unknown_types_are_skipped_not_fatal(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    known.write_text(
        f"@cert-authority *.example {key.get_name()} {key.get_base64()}\n"
        "10.9.0.2 ssh-unknowntype AAAA\n"
        f"10.9.0.3 {key.get_name()} {key.get_base64()}\n"
    )
    check_known_hosts_file(str(known))  # no BadInput: ssh reads such files
    client = paramiko.SSHClient()
    assert load_known_hosts(client, [str(known)], "10.9.0.3") == frozenset()
    assert client.get_host_keys().lookup("10.9.0.3") is not None
    assert client.get_host_keys().lookup("a.example") is None  # a CA line trusts nothing here


def test_revoked_lines_name_hosts_as_openssh_matches_them(tmp_path: Path) -> None:
    """Which hosts a `@revoked` line names (OpenSSH's match_hostname): `[host]:port` is literal
    (not an fnmatch class), `*`/`?` are wildcards, case does not count, a negated pattern wins.
    The real refusal, beside OpenSSH's, is test_probe_ssh's test on a test host."""
    key, other = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    known.write_text(
        f"[gpu1.example]:2222,gpu2.example {key.get_name()} {key.get_base64()}\n"
        f"[gpu1.example]:2222,gpu2.example {other.get_name()} {other.get_base64()}\n"
        f"@revoked [gpu1.example]:2222,GPU?.EXAMPLE,!gpu3.example {key.get_name()} {key.get_base64()} old\n"
    )
    revoked = {key.asbytes()}
    for host, want in [
        ("[gpu1.example]:2222", revoked),
        ("gpu2.example", revoked),
        ("g", set()),
        ("gpu3.example", set()),
    ]:
        client = paramiko.SSHClient()
        assert load_known_hosts(client, [str(known)], host) == want, host
        if want:  # the revoked key is not known, though a plain line lists it
            known_keys = client.get_host_keys().lookup(host)
            assert known_keys is not None and [k.asbytes() for k in known_keys.values()] == [other.asbytes()]
    # a @revoked line that does not decode is bad input: skipping it would trust what it revokes
    known.write_text("@revoked * ssh-ed25519 AAAA!\n")
    with pytest.raises(BadInput, match="line 1: the key does not decode"):
        check_known_hosts_file(str(known))
