"""`provision probe` over real SSH against the test hosts (Debian 12 containers, real sshd, real
host keys): key verification (unknown, accepted, changed), an unreachable address, a login user
that needs sudo, ProxyJump, ssh-agent, and one bad host among good ones."""

from __future__ import annotations

import http.server
import json
import os
import shlex
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from provision.errors import Unreachable
from provision.hosts import gather
from provision.hosts.inventory import HostTarget, parse_host
from provision.hosts.known_hosts import fingerprint
from provision.hosts.ssh import SSHTransport, connect
from provision.hosts.transport import CommandTimeout
from tests.hosts import harness
from tests.unit.probe_fixtures import run_probe as run

# Nothing listens here: the last octet is outside the range testhosts.sh hands out (.11 and up,
# one per host), on the set's own bridge, so the SYN goes unanswered and the connect times out.
UNUSED_OCTET = 250


def host_fingerprint(hostset: harness.HostSet, name: str) -> str:
    pub = hostset.directory / "hosts" / name / "root" / "etc" / "ssh" / "ssh_host_ed25519_key.pub"
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def ssh_config(hostset: harness.HostSet, path: Path, known_hosts: Path, **extra: str) -> Path:
    """An ssh_config for the set with its own known_hosts file (the user's is never touched)."""
    lines = []
    for h in hostset.hosts:
        lines += [
            f"Host {h.name}",
            f"  HostName {h.address}",
            "  User root",
            f"  IdentityFile {hostset.key}",
            f"  UserKnownHostsFile {known_hosts}",
            "",
        ]
    for alias, body in extra.items():
        lines += [f"Host {alias}", *[f"  {line}" for line in body.splitlines()], ""]
    path.write_text("\n".join(lines))
    return path


def target_for(hostset: harness.HostSet, host: harness.TestHost, user: str, key: bool = True) -> HostTarget:
    """A test host as an inventory would give it: address, user, the set's key and known_hosts."""
    return HostTarget(
        host.name,
        host.address,
        user=user,
        key_file=str(hostset.key) if key else None,
        vars={"ansible_ssh_common_args": f"-o UserKnownHostsFile={hostset.known_hosts}"},
    )


def root_run(hostset: harness.HostSet, name: str, command: str) -> str:
    host = next(h for h in hostset.hosts if h.name == name)
    target = target_for(hostset, host, "root")
    transport = connect(target)
    try:
        result = transport.run(command, timeout=120)
        assert result.ok, result.stderr
        return result.stdout
    finally:
        transport.close()


def test_probe_inventory_over_ssh(testhosts: harness.HostSet) -> None:
    result = run("-i", str(testhosts.inventory), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ok"] is True
    assert [h["host"] for h in doc["hosts"]] == [h.name for h in testhosts.hosts]
    for h in doc["hosts"]:
        facts = h["facts"]
        assert (facts["hostname"], facts["os"], facts["os_codename"]) == (h["host"], "debian-12", "bookworm")
        assert (facts["user"], facts["privileged"]) == ("root", True)
        assert facts["python"] == "3.11" and facts["arch"] == os.uname().machine
        assert facts["gpus"] == [] and facts["nvswitch_count"] == 0 and facts["driver_version"] is None
        assert facts["package_locks"] == [] and facts["disk_free_gib"] > 0


def test_probe_hosts_through_ssh_config(testhosts: harness.HostSet, tmp_path: Path) -> None:
    config = ssh_config(testhosts, tmp_path / "config", testhosts.known_hosts)
    names = [h.name for h in testhosts.hosts]
    result = run("-F", str(config), *names)
    assert result.returncode == 0, result.stderr
    for name in names:
        assert f"{name} (" in result.stdout
    assert "debian-12" in result.stdout


def test_unknown_host_key_is_refused_then_recorded_when_accepted(testhosts: harness.HostSet, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    config = ssh_config(testhosts, tmp_path / "config", known)
    host = testhosts.hosts[0]
    refused = run("-F", str(config), host.name)
    assert refused.returncode == 1
    line = refused.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("error: unknown host key for")
    assert host.name in line and host_fingerprint(testhosts, host.name) in line
    assert not known.exists()  # nothing recorded without the flag

    accepted = run("-F", str(config), "--accept-new-host-keys", host.name, "--json")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["hosts"][0]["facts"]["hostname"] == host.name
    recorded = paramiko.HostKeys(str(known)).lookup(host.address)
    assert recorded is not None and fingerprint(recorded["ssh-ed25519"]) == host_fingerprint(testhosts, host.name)

    again = run("-F", str(config), host.name)  # now known: no flag needed
    assert again.returncode == 0, again.stderr


def test_changed_host_key_is_refused_even_with_accept_new(testhosts: harness.HostSet, tmp_path: Path) -> None:
    host = testhosts.hosts[0]
    forged = paramiko.Ed25519Key.from_private_key_file(str(testhosts.key))  # some other ed25519 key
    known = tmp_path / "known_hosts"
    known.write_text(f"{host.address} {forged.get_name()} {forged.get_base64()}\n")
    config = ssh_config(testhosts, tmp_path / "config", known)
    for extra in ([], ["--accept-new-host-keys"]):
        result = run("-F", str(config), *extra, host.name)
        assert result.returncode == 1
        assert "has CHANGED" in result.stderr and host_fingerprint(testhosts, host.name) in result.stderr
        assert fingerprint(forged) in result.stderr
    assert known.read_text().count("\n") == 1  # the forged entry is left alone, nothing added


def _revoked_lines(host: harness.TestHost, key: str) -> dict[str, str]:
    """The forms a `@revoked` line for ``host``'s ed25519 key takes (sshd(8) SSH_KNOWN_HOSTS FILE
    FORMAT): its address, a wildcard pattern, a hashed name, and a list whose negated pattern
    leaves the host out (that one revokes nothing)."""
    hashed = paramiko.HostKeys.hash_host(host.address)
    return {
        "address": f"@revoked {host.address} ssh-ed25519 {key}",
        "wildcard": f"@revoked * ssh-ed25519 {key}",
        "hashed": f"@revoked {hashed} ssh-ed25519 {key}",
        "negated": f"@revoked *,!{host.address} ssh-ed25519 {key}",
    }


def test_a_revoked_host_key_is_refused_even_when_also_listed_plainly(
    testhosts: harness.HostSet, tmp_path: Path
) -> None:
    """A key marked `@revoked` is refused though a plain line lists the same key, with or without
    --accept-new-host-keys, as OpenSSH refuses it; the host lock, cache tunnels and sudo all
    ride on this connection. A `@revoked` line whose pattern leaves the host out revokes nothing."""
    host = testhosts.hosts[0]
    plain = next(line for line in testhosts.known_hosts.read_text().splitlines() if line.startswith(f"{host.address} "))
    key = plain.split()[2]
    known = tmp_path / "known_hosts"
    config = ssh_config(testhosts, tmp_path / "config", known)
    for form, revoked in _revoked_lines(host, key).items():
        known.write_text(f"{plain}\n{revoked}\n")
        openssh = subprocess.run(
            ["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", host.name, "true"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if form == "negated":
            assert openssh.returncode == 0, openssh.stderr
            transport = connect(host.name, ssh_config=config)
            transport.close()
            continue
        assert openssh.returncode == 255 and "REVOKED HOST KEY" in openssh.stderr, (form, openssh.stderr)
        # with the flag (each form), and without it (one form, whose JSON says unreachable)
        flags = ["--accept-new-host-keys"] if form != "address" else ["--json"]
        result = run("-F", str(config), *flags, host.name)
        assert result.returncode == 1, (form, result.stdout, result.stderr)
        line = result.stderr.strip()
        assert line.count("\n") == 0 and line.startswith(f"error: host key for {host.name}"), (form, line)
        assert "is REVOKED" in line and host_fingerprint(testhosts, host.name) in line, (form, line)
        if form == "address":
            doc = json.loads(result.stdout)
            assert doc["ok"] is False and doc["hosts"][0]["error"]["code"] == "unreachable", doc
        assert known.read_text() == f"{plain}\n{revoked}\n"  # nothing recorded


def test_unreachable_address(testhosts: harness.HostSet) -> None:
    address = f"{testhosts.net}.{UNUSED_OCTET}"
    result = run("--connect-timeout", "2", "--json", address)
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert doc["hosts"][0]["error"]["code"] == "unreachable"
    assert f"cannot reach {address}" in result.stderr


def test_one_unreachable_host_and_the_other_still_answers(testhosts: harness.HostSet, tmp_path: Path) -> None:
    address = f"{testhosts.net}.{UNUSED_OCTET}"
    inventory = tmp_path / "hosts.ini"
    good = testhosts.hosts[0]
    inventory.write_text(
        f"[gpus]\n{good.name} ansible_host={good.address}\ngone ansible_host={address}\n\n[gpus:vars]\n"
        f"ansible_user=root\nansible_ssh_private_key_file={testhosts.key}\n"
        f"ansible_ssh_common_args='-o UserKnownHostsFile={testhosts.known_hosts}'\n"
    )
    result = run("-i", str(inventory), "--json", "--connect-timeout", "3")
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    by_name = {h["host"]: h for h in doc["hosts"]}
    assert doc["ok"] is False
    assert by_name[good.name]["ok"] is True and by_name[good.name]["facts"]["os"] == "debian-12"
    assert by_name["gone"]["ok"] is False and by_name["gone"]["facts"] is None
    assert by_name["gone"]["error"]["code"] == "unreachable"
    assert result.stderr.count("error: ") == 1 and "gone" in result.stderr


@pytest.fixture
def dpkg_lock_held(testhosts: harness.HostSet) -> Iterator[str]:
    """The dpkg frontend lock held on the first host by a process named like apt's holder would be."""
    name = testhosts.hosts[0].name
    hold = (
        "import fcntl, time\nf = open('/var/lib/dpkg/lock-frontend', 'w')\n"
        "fcntl.lockf(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(300)\n"
    )
    root_run(
        testhosts,
        name,
        f"printf %s {shlex.quote(hold)} > /tmp/hold.py && "
        "(nohup python3 /tmp/hold.py > /tmp/hold.out 2>&1 &) && "
        "for i in $(seq 50); do grep -q held /tmp/hold.out && break; sleep 0.1; done",
    )
    try:
        yield name
    finally:
        root_run(testhosts, name, "pkill -f 'python3 /tmp/hol[d].py' || true")


def test_deploy_user_needs_sudo_for_the_package_locks(testhosts: harness.HostSet, dpkg_lock_held: str) -> None:
    """The dpkg lock files are root-only: only the sudo'ed part of the probe can see the holder."""
    host = next(h for h in testhosts.hosts if h.name == dpkg_lock_held)
    as_deploy = target_for(testhosts, host, "deploy")
    result = gather.probe_one(as_deploy, gather.GatherOptions(imds_disabled=True))
    assert result.ok, result.error
    facts = result.facts
    assert facts is not None
    assert (facts.user, facts.privileged) == ("deploy", False)
    assert facts.warnings == []
    assert facts.package_locks is not None
    held = {lock.path: lock for lock in facts.package_locks}
    assert "/var/lib/dpkg/lock-frontend" in held
    assert held["/var/lib/dpkg/lock-frontend"].process == "python3"


def test_user_without_sudo_gets_a_warning_not_a_guess(testhosts: harness.HostSet) -> None:
    name = testhosts.hosts[-1].name
    host = testhosts.hosts[-1]
    root_run(
        testhosts,
        name,
        "id plain >/dev/null 2>&1 || useradd -m -s /bin/bash plain; "
        "mkdir -p ~plain/.ssh && cp /root/.ssh/authorized_keys ~plain/.ssh/ && "
        "chown -R plain:plain ~plain/.ssh",
    )
    target = target_for(testhosts, host, "plain")
    result = gather.probe_one(target, gather.GatherOptions(imds_disabled=True))
    assert result.facts is not None
    assert result.facts.package_locks is None
    assert any(w.startswith("sudo failed") for w in result.facts.warnings)
    assert any("needs root" in w for w in result.facts.warnings)


def test_sudo_password_from_inventory_is_used_and_never_printed(testhosts: harness.HostSet, tmp_path: Path) -> None:
    host = testhosts.hosts[-1]
    password = "Pr0be-s3cret-word"
    root_run(
        testhosts,
        host.name,
        "id pwuser >/dev/null 2>&1 || useradd -m -s /bin/bash -G sudo pwuser; "
        f"echo pwuser:{password} | chpasswd && mkdir -p ~pwuser/.ssh && "
        "cp /root/.ssh/authorized_keys ~pwuser/.ssh/ && chown -R pwuser:pwuser ~pwuser/.ssh",
    )
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        f"{host.name} ansible_host={host.address} ansible_user=pwuser "
        f"ansible_ssh_private_key_file={testhosts.key} "
        f"ansible_become_password={password} "
        f"ansible_ssh_common_args='-o UserKnownHostsFile={testhosts.known_hosts}'\n"
    )
    result = run("-i", str(inventory), "--json", "--debug")
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)["hosts"][0]["facts"]
    assert facts["user"] == "pwuser" and facts["package_locks"] == [] and facts["warnings"] == []
    assert password not in result.stdout and password not in result.stderr


def test_proxy_jump_and_command_timeout(testhosts: harness.HostSet, tmp_path: Path) -> None:
    if len(testhosts.hosts) < 2:
        pytest.skip("needs two test hosts")
    jump, behind = testhosts.hosts[0], testhosts.hosts[1]
    config = ssh_config(
        testhosts,
        tmp_path / "config",
        testhosts.known_hosts,
        behind=f"HostName {behind.address}\nUser root\nIdentityFile {testhosts.key}\n"
        f"UserKnownHostsFile {testhosts.known_hosts}\nProxyJump {jump.name}",
    )
    transport = connect(parse_host("behind"), ssh_config=config)
    try:
        assert isinstance(transport, SSHTransport)
        seen_from = transport.run("echo $SSH_CONNECTION").stdout.split()[0]
        assert seen_from == jump.address  # the connection came through the jump host
        assert transport.run("hostname").stdout.strip() == behind.name
        with pytest.raises(CommandTimeout):
            transport.run("sleep 30", timeout=1)
        local = tmp_path / "f"
        local.write_text("payload")
        transport.put(local, "/tmp/provision-put", mode=0o600)
        transport.get("/tmp/provision-put", tmp_path / "back")
        assert (tmp_path / "back").read_text() == "payload"
    finally:
        transport.close()


def test_ssh_agent_key(testhosts: harness.HostSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(50):
            if sock.exists():
                break
            threading.Event().wait(0.1)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(testhosts.key)], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh keys to fall back on: only the agent
        host = testhosts.hosts[0]
        target = target_for(testhosts, host, "root", key=False)
        transport = connect(target, ssh_config=tmp_path / "no-config")
        try:
            assert transport.run("id -un").stdout.strip() == "root"
        finally:
            transport.close()
        monkeypatch.delenv("SSH_AUTH_SOCK")
        with pytest.raises(Unreachable, match="authentication failed"):
            connect(target, ssh_config=tmp_path / "no-config")
    finally:
        agent.terminate()
        agent.wait()


class _Imds(http.server.BaseHTTPRequestHandler):
    def do_PUT(self) -> None:
        self._send("tok" if self.headers.get("X-aws-ec2-metadata-token-ttl-seconds") else "")

    def do_GET(self) -> None:
        ok = self.headers.get("X-aws-ec2-metadata-token") == "tok" and self.path.endswith("/instance-type")
        self._send("g6e.xlarge" if ok else "", 200 if ok else 401)

    def _send(self, body: str, code: int = 200) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_ec2_instance_type_from_a_metadata_stand_in_on_the_bridge(testhosts: harness.HostSet) -> None:
    """A test-controlled IMDSv2 stand-in on the bridge address plays 169.254.169.254 for the hosts."""
    server = http.server.ThreadingHTTPServer((f"{testhosts.net}.1", 0), _Imds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://{testhosts.net}.1:{server.server_address[1]}"
        result = run(
            "-i",
            str(testhosts.inventory),
            "--json",
            env={"AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": endpoint},
        )
        assert result.returncode == 0, result.stderr
        assert {h["facts"]["ec2_instance_type"] for h in json.loads(result.stdout)["hosts"]} == {"g6e.xlarge"}
    finally:
        server.shutdown()
        server.server_close()


def test_unattended_upgrades_follow_apt_periodic(testhosts: harness.HostSet) -> None:
    """apt-daily-upgrade.timer runs on every Debian host; it upgrades only when APT::Periodic says so."""
    host = testhosts.hosts[-1]
    target = target_for(testhosts, host, "root")
    options = gather.GatherOptions(imds_disabled=True)
    before = gather.probe_one(target, options).facts
    assert before is not None and before.unattended_upgrades is not None
    assert before.unattended_upgrades.units.get("apt-daily-upgrade.timer") == "active"
    assert before.unattended_upgrades.enabled is False
    conf = "/etc/apt/apt.conf.d/20auto-upgrades"
    root_run(testhosts, host.name, f"printf '%s\\n' 'APT::Periodic::Unattended-Upgrade \"1\";' > {conf}")
    try:
        after = gather.probe_one(target, options).facts
        assert after is not None and after.unattended_upgrades is not None
        assert after.unattended_upgrades.enabled is True
    finally:
        root_run(testhosts, host.name, f"rm -f {conf}")


def test_proxy_command_from_ssh_config(testhosts: harness.HostSet, tmp_path: Path) -> None:
    """ProxyCommand (here OpenSSH's own `ssh -W` through the first host) carries the connection."""
    if len(testhosts.hosts) < 2:
        pytest.skip("needs two test hosts")
    jump, behind = testhosts.hosts[0], testhosts.hosts[1]
    config = tmp_path / "config"
    ssh_config(
        testhosts,
        config,
        testhosts.known_hosts,
        viacmd=f"HostName {behind.address}\nUser root\nIdentityFile {testhosts.key}\n"
        f"UserKnownHostsFile {testhosts.known_hosts}\n"
        f"ProxyCommand ssh -F {config} -o BatchMode=yes -W %h:%p {jump.name}",
    )
    transport = connect(parse_host("viacmd"), ssh_config=config)
    try:
        assert transport.run("echo $SSH_CONNECTION").stdout.split()[0] == jump.address
    finally:
        transport.close()


def test_package_query_format_is_what_real_dpkg_prints(testhosts: harness.HostSet) -> None:
    """The probe's dpkg-query format against the real dpkg of a Debian host (installed packages)."""
    from provision.hosts import parse_packages as pp

    out = root_run(
        testhosts,
        testhosts.hosts[0].name,
        f"dpkg-query -W -f='{gather.DPKG_FORMAT}' 'openssh-*' python3 sudo",
    )
    packages = pp.parse_dpkg_query(out)
    assert {"openssh-server", "python3", "sudo"} <= set(packages)
    assert packages["python3"].startswith("3.11")


@pytest.mark.usefixtures("descriptors_above_1024")
def test_a_command_runs_with_more_than_1024_descriptors_open(testhosts: harness.HostSet) -> None:
    """A fleet of 500+ hosts holds more than 1024 descriptors (FD_SETSIZE): select.select raised
    ValueError for the channel's descriptor above it; the transport must wait with poll/epoll."""
    host = testhosts.hosts[0]
    transport = connect(target_for(testhosts, host, "root"))
    try:
        # the sleep makes the transport wait for output (the path that called select)
        result = transport.run("sleep 1; echo waited", timeout=60)
    finally:
        transport.close()
    assert (result.exit_status, result.stdout) == (0, "waited\n")
