"""HOST arguments and Ansible inventories -> typed targets; bad input is exit 2 before any contact."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import BadInput, ExitCode
from provision.hosts.inventory import HostTarget, is_valid_hostname, load_inventory, parse_host, parse_hosts


@pytest.mark.parametrize(
    ("arg", "name", "user", "port"),
    [
        ("gpu1", "gpu1", None, None),
        ("deploy@gpu1.example.com", "gpu1.example.com", "deploy", None),
        ("deploy@gpu1:2222", "gpu1", "deploy", 2222),
        ("10.0.0.5:22", "10.0.0.5", None, 22),
        ("root@[2001:db8::1]:2200", "2001:db8::1", "root", 2200),
        ("2001:db8::7", "2001:db8::7", None, None),
        ("ip-10-0-0-5.ec2.internal", "ip-10-0-0-5.ec2.internal", None, None),
    ],
)
def test_host_argument(arg: str, name: str, user: str | None, port: int | None) -> None:
    target = parse_host(arg)
    assert (target.name, target.address, target.user, target.port) == (name, name, user, port)


@pytest.mark.parametrize(
    "arg",
    [
        "",
        "a b",
        "gpu1:",
        "gpu1:0",
        "gpu1:65536",
        "gpu1:ssh",
        "@gpu1",
        "bad user@gpu1",
        "-gpu1",
        "gpu-.x",
        "gpu..x",
        "gpu1:22:33",
        "[gpu1]:22",
        "[2001:db8::1",
        "999.1.1.1",
        "a" * 64 + ".com",
        "gpu_1!",
    ],
)
def test_malformed_host_arguments_are_bad_input(arg: str) -> None:
    with pytest.raises(BadInput) as info:
        parse_host(arg)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "\n" not in info.value.one_line()


def test_hostname_validation() -> None:
    assert is_valid_hostname("gpu-01.example.com") and is_valid_hostname("10.200.1.11")
    assert not is_valid_hostname("gpu 01") and not is_valid_hostname("") and not is_valid_hostname("1.2.3")


def test_duplicate_hosts_are_bad_input() -> None:
    with pytest.raises(BadInput, match="twice"):
        parse_hosts(["gpu1", "root@gpu1"])


INI = """
# a comment
bastion ansible_host=203.0.113.10 ansible_user=admin

[gpus]
gpu[01:03].example.com ansible_user=deploy
gpu09.example.com ansible_host=10.0.0.9 ansible_port=2222 ansible_ssh_private_key_file=~/.ssh/gpu.pem

[gpus:vars]
ansible_user=ubuntu
ansible_become_password='s3cret word'
ansible_ssh_common_args='-o UserKnownHostsFile=/tmp/kh -J jump@bastion'

[local]
localhost ansible_connection=local

[dc:children]
gpus
"""


def test_ini_inventory(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(INI)
    targets = {t.name: t for t in load_inventory(path)}
    assert list(targets) == [
        "bastion",
        "gpu01.example.com",
        "gpu02.example.com",
        "gpu03.example.com",
        "gpu09.example.com",
        "localhost",
    ]
    assert targets["bastion"] == HostTarget("bastion", "203.0.113.10", user="admin", groups=("ungrouped",))
    g1 = targets["gpu01.example.com"]
    assert g1.user == "deploy"  # host var beats group var
    assert g1.groups == ("dc", "gpus")
    assert g1.become_password == "s3cret word"
    assert g1.public_vars()["ansible_become_password"] == "********"
    assert "s3cret" not in repr(g1)
    g9 = targets["gpu09.example.com"]
    assert (g9.address, g9.user, g9.port, g9.key_file) == ("10.0.0.9", "ubuntu", 2222, "~/.ssh/gpu.pem")
    assert targets["localhost"].local is True


YAML = """
all:
  vars:
    ansible_user: root
  hosts:
    head:
      ansible_host: 10.1.0.1
  children:
    hgx:
      vars:
        ansible_user: ubuntu
      hosts:
        hgx[1:2]:
          ansible_port: 2200
    a100:
      hosts:
        node-a:
        node-b:
          ansible_user: admin
"""


def test_yaml_inventory(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(YAML)
    targets = {t.name: t for t in load_inventory(path)}
    assert set(targets) == {"head", "hgx1", "hgx2", "node-a", "node-b"}
    assert (targets["head"].address, targets["head"].user) == ("10.1.0.1", "root")
    assert (targets["hgx2"].user, targets["hgx2"].port, targets["hgx2"].groups) == ("ubuntu", 2200, ("hgx",))
    assert targets["node-a"].user == "root" and targets["node-b"].user == "admin"


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("bad.yml", "all:\n  hosts:\n    - a\n    - b\n", "not a mapping"),
        ("bad2.yml", "all:\n  hosts: {a: 1}\n", "not a mapping"),
        ("bad3.yml", "all: [\n", "not valid YAML"),
        ("bad4.yml", "all:\n  hostz: {}\n", "must be a mapping with hosts"),
        ("bad.ini", "[gpus\ngpu1\n", "bad section header"),
        ("bad2.ini", "[gpus]\ngpu1 ansible_port\n", "not key=value"),
        ("bad3.ini", "[gpus]\ngpu_1! ansible_host=x\n", "invalid host name"),
        ("bad4.ini", "[gpus]\ngpu1 ansible_port=99999\n", "invalid port"),
        ("bad5.ini", "[gpus]\ngpu1 ansible_host='unterminated\n", "No closing quotation"),
        ("bad6.ini", "[g:vars]\nnovalue\n[g]\nh1\n", "key=value"),
        ("bad7.ini", "[a:children]\nb\n[b:children]\na\n[b]\nh1\n", "own ancestor"),
        ("bad8.ini", "[g]\nweb[09:01]\n", "empty host range"),
        ("empty.ini", "# nothing\n", "lists no hosts"),
        ("bad9.ini", "[g]\nh1 ansible_host='bad host'\n", "invalid host name"),
        # a template would reach sudo as the password itself: provision does not evaluate Jinja
        (
            "tpl.ini",
            "[g]\nh1\n[g:vars]\nansible_become_password=\"{{ lookup('env', 'PW') }}\"\n",
            "is a Jinja template",
        ),
        ("tpl.yml", "all:\n  hosts:\n    h1: {ansible_password: '{% raw %}x{% endraw %}'}\n", "is a Jinja template"),
    ],
)
def test_inventories_that_do_not_parse_are_bad_input(tmp_path: Path, name: str, text: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(BadInput, match=match) as info:
        load_inventory(path)
    assert info.value.exit_code == ExitCode.BAD_INPUT


def test_missing_inventory_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not found"):
        load_inventory(tmp_path / "nope.ini")


@pytest.mark.parametrize(
    "connection", ["paramiko", "ansible.builtin.paramiko_ssh", "persistent", "community.docker.docker"]
)
def test_a_connection_other_than_ssh_or_local_is_refused_before_any_contact(tmp_path: Path, connection: str) -> None:
    """`ansible_connection: paramiko` hung `up` at Gathering Facts: Ansible's paramiko plugin
    asks on a terminal about an unknown host key (MyAddPolicy), and the orphaned ansible-playbook
    waited on it. Any connection other than ssh or local is refused with exit 2, one line, before
    any host is contacted (the probe and its host key checks speak OpenSSH's terms only)."""
    from tests.cli_run import provision

    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[gpus]\ngpu1 ansible_host=10.9.0.1\n[gpus:vars]\nansible_connection={connection}\n")
    with pytest.raises(BadInput, match=f"ansible_connection `{connection}`"):
        load_inventory(inventory)
    if connection != "paramiko":  # the commands read inventories alike: one connection shows them
        return
    for command in (["probe"], ["plan", "--out", str(tmp_path / "out")], ["up", "--yes"]):
        r = provision(*command, "-i", str(inventory), cwd=tmp_path, offline=True)
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: host `gpu1` of "), (command, r.stderr)
        assert f"ansible_connection `{connection}` is not supported" in r.stderr, (command, r.stderr)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("connection", "local"),
    [
        ("ssh", False),
        ("ansible.builtin.ssh", False),
        ("smart", False),
        ("local", True),
        ("ansible.builtin.local", True),
    ],
)
def test_ssh_and_local_connections_stay(tmp_path: Path, connection: str, local: bool) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"gpu1 ansible_host=10.9.0.1 ansible_connection={connection}\n")
    [target] = load_inventory(inventory)
    assert target.local is local
