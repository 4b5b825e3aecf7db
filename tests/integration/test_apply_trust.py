"""The apply trusts exactly what the probe trusted: real `provision plan` (paramiko probe) on the
SSH test hosts, then the rendered run dir applied through provision.apply (ansible-runner,
OpenSSH) after the trust was changed in between: the host's keys swapped, its entry gone from
known_hosts, a forged entry there. Such a host fails unreachable at its first task with nothing
changed on it; the other host goes on. A sudo password from the inventory reaches the apply and
lands in no file.

To keep each apply short, the applied playbook is the rendered site.yml's own play (its hosts,
become, vars_prompt) with the roles replaced by one task that makes a marker folder as root.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
import yaml

from provision.ansible.apply import ApplyResult, run_playbook
from provision.ansible.render import become_answers
from tests.hosts import harness
from tests.integration import roles_harness as rh

MARKER = "/opt/provision-trust-marker"


def _ssh_config(hostset: harness.HostSet, folder: Path, known_hosts: Path, users: dict[str, str] | None = None) -> Path:
    """The set's ssh_config with this test's own known_hosts file (and, per host, another user)."""
    text = hostset.ssh_config.read_text().replace(str(hostset.known_hosts), str(known_hosts))
    for name, user in (users or {}).items():
        text = text.replace(f"Host {name}\n  HostName", f"Host {name}\n  User {user}\n  HostName", 1)
    path = folder / "ssh_config"
    path.write_text(text)
    return path


# an inventory's ssh args and settings that would accept any key
LAX = (
    "ansible_ssh_common_args='-o StrictHostKeyChecking=no' ansible_ssh_args='-o StrictHostKeyChecking=no' "
    "ansible_host_key_checking=false ansible_ssh_host_key_checking=false"
)


def _inventory(hostset: harness.HostSet, folder: Path, extra: str = "", only: str | None = None) -> Path:
    """Hosts by name only: address, user, key and known_hosts come from the ssh config (-F);
    ``extra`` host vars for every host, or for host ``only``."""
    lines = [f"{h.name} {extra if only in (None, h.name) else ''}".rstrip() for h in hostset.hosts]
    path = folder / "hosts.ini"
    path.write_text(
        "[testhosts]\n" + "\n".join(lines) + "\n[testhosts:vars]\nansible_python_interpreter=/usr/bin/python3\n"
    )
    return path


def _plan(folder: Path, inventory: Path, ssh_config: Path) -> Path:
    # the frameworks alone (no PyTorch index is reachable here; the closure is test_up_lock's)
    (folder / "p.yaml").write_text(
        f"stack: {{frameworks: ['{harness.TORCH_CPU}+cpu'], driver: none}}\ninstall: {{lock_closure: never}}\n"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "plan",
            "-i",
            str(inventory),
            "-F",
            str(ssh_config),
            "-c",
            "p.yaml",
            "--out",
            "run",
            "--lock",
            "run/provision.lock",
            "--json",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = folder / "run"
    [play] = yaml.safe_load((run / "site.yml").read_text())
    play["roles"] = []
    play["tasks"] = [
        {
            "name": "Make the marker folder",
            "ansible.builtin.file": {"path": MARKER, "state": "directory", "mode": "0755"},
        }
    ]
    (run / "marker.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    return run


def _apply(run: Path, artifacts: Path, passwords: dict[str, str] | None = None) -> ApplyResult:
    return run_playbook(
        run,
        "marker.yml",
        inventory=run / "inventory.yml",
        artifacts=artifacts,
        passwords=become_answers(passwords or {}),
    )


def _has_marker(hostset: harness.HostSet, host: harness.TestHost) -> bool:
    # read in the host's root as mounted here: SSH to a host with a swapped key is refused
    return (hostset.directory / "hosts" / host.name / "root" / MARKER.lstrip("/")).exists()


def _offered_key(host: harness.TestHost) -> str:
    r = subprocess.run(
        ["ssh-keyscan", "-T", "5", "-t", "ed25519", host.address], capture_output=True, text=True, timeout=30
    )
    return r.stdout.split()[-1] if r.stdout.split() else ""


def _serve_key(hostset: harness.HostSet, host: harness.TestHost, private: bytes, public: bytes) -> None:
    """Put a host key in place in the host's root (the overlay mounted on this machine) and wait
    until sshd offers it (Debian 12's sshd re-executes per connection and reads its keys then)."""
    etc = hostset.directory / "hosts" / host.name / "root" / "etc" / "ssh"
    key = etc / "ssh_host_ed25519_key"
    key.write_bytes(private)
    key.chmod(0o600)
    (etc / "ssh_host_ed25519_key.pub").write_bytes(public)
    want = public.split()[1].decode()
    for _ in range(50):
        if _offered_key(host) == want:
            return
        subprocess.run(["sleep", "0.2"], check=True)
    raise AssertionError(f"{host.name} does not offer the key put in place")


@pytest.fixture
def swapped_keys(testhosts: harness.HostSet, tmp_path: Path) -> Iterator[harness.TestHost]:
    """A function whose call swaps the first host's host key; the old key is back afterwards."""
    host = testhosts.hosts[0]
    etc = testhosts.directory / "hosts" / host.name / "root" / "etc" / "ssh"
    old = ((etc / "ssh_host_ed25519_key").read_bytes(), (etc / "ssh_host_ed25519_key.pub").read_bytes())
    try:
        yield host
    finally:
        _serve_key(testhosts, host, *old)


def _swap(testhosts: harness.HostSet, host: harness.TestHost, folder: Path) -> None:
    new = folder / "new_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "swapped", "-f", str(new)], check=True)
    _serve_key(testhosts, host, new.read_bytes(), new.with_suffix(".pub").read_bytes())


@pytest.mark.parametrize("change", ["swapped", "unknown", "changed"])
def test_a_host_whose_trust_changed_after_the_probe_is_refused_and_the_other_goes_on(
    testhosts: harness.HostSet, tmp_path: Path, swapped_keys: harness.TestHost, change: str
) -> None:
    host, other = testhosts.hosts[0], testhosts.hosts[1]
    rh.ssh(testhosts, host, f"rm -rf {MARKER}")
    rh.ssh(testhosts, other, f"rm -rf {MARKER}")
    known = tmp_path / "known_hosts"
    shutil.copyfile(testhosts.known_hosts, known)
    # the inventory asks for strict checking itself, as the test hosts' own inventory does: before
    # the fix ansible-runner's ANSIBLE_HOST_KEY_CHECKING=False put "=no" ahead of it
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "".join(
            f"{h.name} ansible_host={h.address} ansible_user=root ansible_ssh_private_key_file={testhosts.key} "
            f"ansible_python_interpreter=/usr/bin/python3 "
            f"ansible_ssh_common_args='-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes'\n"
            for h in testhosts.hosts
        )
    )
    run = _plan(tmp_path, inventory, _ssh_config(testhosts, tmp_path, known))

    # between the probe and the apply
    kept = [line for line in known.read_text().splitlines() if not line.startswith(f"{host.address} ")]
    if change == "swapped":
        _swap(testhosts, host, tmp_path)
    elif change == "unknown":
        known.write_text("\n".join(kept) + "\n")
    else:  # a forged key recorded for the host: some other ed25519 key
        forged = paramiko.Ed25519Key.from_private_key_file(str(testhosts.key))
        known.write_text("\n".join([*kept, f"{host.address} {forged.get_name()} {forged.get_base64()}"]) + "\n")
    before = known.read_text()

    result = _apply(run, tmp_path / "artifacts")
    refused = result.hosts[host.name]
    assert refused.unreachable and not refused.ok, refused
    assert refused.failed_task == "Gathering Facts", refused  # its first task
    why = "No ED25519 host key is known for" if change == "unknown" else f"Host key for {host.address} has changed"
    # With pipelining, ansible may be writing the module to ssh's stdin when ssh exits: it then
    # reports its own "[Errno 32] Broken pipe" without ssh's words (ansible's ssh plugin); the
    # refusal itself is what the assertions above and below check.
    assert refused.message is not None and (
        refused.message.startswith(f"host key verification failed: {why}")
        or refused.message.endswith("[Errno 32] Broken pipe")
    ), refused
    assert not _has_marker(testhosts, host)
    assert known.read_text() == before  # nothing was recorded in the known_hosts the probe used
    assert result.hosts[other.name].ok and result.hosts[other.name].changed == 1
    assert _has_marker(testhosts, other)
    rh.ssh(testhosts, other, f"rm -rf {MARKER}")


def test_the_rendered_ssh_args_carry_the_probes_trust(testhosts: harness.HostSet, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    shutil.copyfile(testhosts.known_hosts, known)
    config = _ssh_config(testhosts, tmp_path, known)
    run = _plan(tmp_path, _inventory(testhosts, tmp_path, LAX), config)
    hosts = yaml.safe_load((run / "inventory.yml").read_text())["all"]["children"]
    # the lock's group holds the connection settings (the user's [testhosts] sits beside it, bare)
    [locked] = json.loads((run / "provision.lock").read_text())["groups"]
    group = hosts[locked["name"]]
    for name, conn in group["hosts"].items():
        args = conn["ansible_ssh_common_args"]
        assert shlex.split(args) == [  # ours first: ssh takes an option's first value
            "-F",
            str(config),
            "-o",
            f"UserKnownHostsFile={known}",
            "-o",
            "GlobalKnownHostsFile=/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "StrictHostKeyChecking=no",
        ], (name, args)
        # variables beat the environment's ANSIBLE_SSH_ARGS, ANSIBLE_HOST_KEY_CHECKING, ANSIBLE_TRANSPORT;
        # the inventory's lax ones never reach the run dir
        assert conn["ansible_ssh_args"].startswith("-o StrictHostKeyChecking=yes "), (name, conn)
        assert conn["ansible_host_key_checking"] is True and conn["ansible_connection"] == "ssh", (name, conn)
        assert "ansible_ssh_host_key_checking" not in conn, (name, conn)
    assert "StrictHostKeyChecking=yes" in (run / "ansible.cfg").read_text()


@pytest.fixture
def sudo_user(testhosts: harness.HostSet) -> Iterator[tuple[str, str]]:
    """A login user on the second host whose sudo asks for a password (removed afterwards)."""
    host = testhosts.hosts[1]
    user, password = "trustpw", "Tr0st-s3cret-w0rd"
    rh.ssh(
        testhosts,
        host,
        f"id {user} >/dev/null 2>&1 || useradd -m -s /bin/bash {user}; echo {user}:{password} | chpasswd; "
        f"echo '{user} ALL=(ALL) ALL' > /etc/sudoers.d/{user}; chmod 440 /etc/sudoers.d/{user}; "
        f"mkdir -p ~{user}/.ssh && cp /root/.ssh/authorized_keys ~{user}/.ssh/ && chown -R {user}: ~{user}/.ssh",
    )
    try:
        yield user, password
    finally:
        rh.ssh(
            testhosts, host, f"rm -f /etc/sudoers.d/{user}; userdel -r {user} 2>/dev/null; rm -rf {MARKER}", check=False
        )


def test_a_sudo_password_reaches_the_apply_and_no_file(
    testhosts: harness.HostSet, tmp_path: Path, sudo_user: tuple[str, str]
) -> None:
    user, password = sudo_user
    host, other = testhosts.hosts[1], testhosts.hosts[0]
    rh.ssh(testhosts, other, f"rm -rf {MARKER}")
    assert rh.ssh(testhosts, host, f"sudo -l -U {user}").count("(ALL) ALL") == 1  # sudo needs the password
    known = tmp_path / "known_hosts"
    shutil.copyfile(testhosts.known_hosts, known)
    inventory = _inventory(testhosts, tmp_path, f"ansible_become_password={password}", only=host.name)
    run = _plan(tmp_path, inventory, _ssh_config(testhosts, tmp_path, known, {host.name: user}))

    result = _apply(run, tmp_path / "artifacts", {host.name: password})
    assert result.ok, result.hosts
    assert result.hosts[host.name].changed == 1
    assert rh.ssh(testhosts, host, f"stat -c %U {MARKER}").strip() == "root"  # made through sudo
    assert _has_marker(testhosts, other)
    rh.ssh(testhosts, other, f"rm -rf {MARKER}")

    leaks = [
        str(p) for p in tmp_path.rglob("*") if p.is_file() and password.encode() in p.read_bytes() and p != inventory
    ]
    assert leaks == []
    command = json.loads(next((tmp_path / "artifacts" / "runner" / "artifacts").glob("*/command")).read_text())
    assert password not in json.dumps(command)


@pytest.mark.slow  # installs torch on one host
def test_up_takes_the_sudo_password_to_the_apply(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path, sudo_user: tuple[str, str]
) -> None:
    """`provision up` (the whole command: probe, render, apply, verify) as a user whose sudo asks
    for a password: the apply's become tasks get it (they failed at the first one before)."""
    user, password = sudo_user
    host = testhosts.hosts[1]
    known = tmp_path / "known_hosts"
    shutil.copyfile(testhosts.known_hosts, known)
    inventory = _inventory(testhosts, tmp_path, f"ansible_become_password={password}", only=host.name)
    config = _ssh_config(testhosts, tmp_path, known, {host.name: user})
    settings = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "provision",
                "up",
                "-i",
                str(inventory),
                "-F",
                str(config),
                "-c",
                str(settings),
                "--set",
                "frameworks_no_index=true",
                "--limit",
                host.name,
                "--yes",
                "--json",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=1500,
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        )
        doc = json.loads(r.stdout)
        [got] = doc["hosts"]
        assert got["host"] == host.name and got["failed_task"] is None and got["verdict"] == "pass", (
            doc,
            r.stderr[-2000:],
        )
        assert got["changed"] > 0
    finally:
        rh.unprovision(testhosts, [host])
    leaks = [
        str(p) for p in tmp_path.rglob("*") if p.is_file() and password.encode() in p.read_bytes() and p != inventory
    ]
    assert leaks == [] and password not in r.stdout + r.stderr


def test_the_documented_manual_apply_keeps_host_key_checking_against_the_users_environment(
    testhosts: harness.HostSet, tmp_path: Path
) -> None:
    """`cd OUT && ansible-playbook site.yml` (the documented manual apply), plain ansible-playbook
    from the venv, in a user's environment that turns host key checking off
    (`ANSIBLE_SSH_ARGS='-o StrictHostKeyChecking=no'`, which replaces ansible.cfg's ssh_args and
    came first on ssh's command line, and `ANSIBLE_HOST_KEY_CHECKING=False`): the run dir's
    inventory variables beat the environment, so a host whose key is unknown, or changed, since
    the probe is still refused and the other host goes on. `--tags` that no task carries keeps
    the play to its fact gathering (the connection and its key check): a host let in is not
    provisioned. ANSIBLE_SSH_CONTROL_PATH_DIR keeps this test's ssh masters its own."""
    host, other = testhosts.hosts[0], testhosts.hosts[1]
    known = tmp_path / "known_hosts"
    shutil.copyfile(testhosts.known_hosts, known)
    run = _plan(tmp_path, _inventory(testhosts, tmp_path), _ssh_config(testhosts, tmp_path, known))
    kept = [line for line in known.read_text().splitlines() if not line.startswith(f"{host.address} ")]
    forged = paramiko.Ed25519Key.from_private_key_file(str(testhosts.key))  # some other ed25519 key
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_SSH_ARGS="-o StrictHostKeyChecking=no",
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"),
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    for change, entries in [
        ("unknown", kept),
        ("changed", [*kept, f"{host.address} ssh-ed25519 {forged.get_base64()}"]),
    ]:
        known.write_text("\n".join(entries) + "\n")
        r = subprocess.run(
            ["ansible-playbook", "site.yml", "--tags", "provision-no-such-tag"],
            cwd=run,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        out = r.stdout + r.stderr
        assert r.returncode == 4, (change, out)  # 4: a host was unreachable
        assert "Host key verification failed" in out, (change, out)
        recap = {line.split()[0]: line for line in out.splitlines() if " : ok=" in line}
        assert "unreachable=1" in recap[host.name] and "ok=0" in recap[host.name], (change, out)
        assert "unreachable=0" in recap[other.name] and "failed=0" in recap[other.name], (change, out)
        assert known.read_text() == "\n".join(entries) + "\n", change  # nothing was recorded
