"""`Include` in the ssh config: the probe (paramiko, which ignores the keyword) reads the files
OpenSSH reads, so that the probe and the apply (OpenSSH with `-F` that config) reach the same
machine. OpenSSH's own parse is the reference: `ssh -G -F CONFIG HOST` prints what ssh resolved,
without connecting. What the probe cannot follow as ssh does is exit 2, naming file and line."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.hosts.inventory import parse_host
from provision.hosts.ssh_config import resolve_settings
from tests.support.probe_fixtures import run_probe


def _ssh_g(config: Path, host: str, home: Path) -> tuple[int, dict[str, str], str]:
    """OpenSSH's resolution of ``host``: (exit code, {option: value}, stderr)."""
    r = subprocess.run(
        ["ssh", "-G", "-F", str(config), host],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "HOME": str(home)},
        stdin=subprocess.DEVNULL,
    )
    options: dict[str, str] = {}
    for line in r.stdout.splitlines():
        key, _, value = line.partition(" ")
        options.setdefault(key, value)
    return r.returncode, options, r.stderr


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own: ssh's `~` in an Include is $HOME (glob's GLOB_TILDE), and a
    relative path is under ~/.ssh; the user's own ~/.ssh is never touched."""
    home = tmp_path / "home"
    (home / ".ssh" / "conf.d").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_include_resolves_as_openssh_resolves_it(home: Path, tmp_path: Path) -> None:
    ssh = home / ".ssh"
    # lexical order of a glob; each file starts where the Include stood (here: every host), its own
    # Host lines hold only inside it
    _write(ssh / "conf.d" / "20-late.conf", "Port 2999\nUser late\n")
    _write(
        ssh / "conf.d" / "10-early.conf",
        "Host gamma\n  HostName 10.1.1.3\n  Port 2401\nHost alpha\n  HostName 10.1.1.1\n",
    )
    _write(ssh / "alpha-settings", "Port 2301\nUser alphauser\n")  # no Host lines: under the block it sits in
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # a relative path is under ~/.ssh, whatever it climbs to
    _write(outside / "delta", "Host delta\n  HostName 10.1.1.4\n")
    climb = "../" * 40 + str(outside / "delta").lstrip("/")
    config = _write(
        tmp_path / "config",
        "Host alpha\n"
        "  Include ~/.ssh/alpha-settings\n"
        "  IdentityFile ~/.ssh/alpha_key\n"
        "Host beta\n"
        "  HostName 10.1.1.2\n"
        "Host *\n"
        f"  Include conf.d/*.conf {climb} conf.d/nothing-matches-*\n"
        "  User fallback\n",
    )
    for name in ("alpha", "beta", "gamma", "delta", "epsilon"):
        code, want, err = _ssh_g(config, name, home)
        assert code == 0, err
        got = resolve_settings(parse_host(name), config)
        assert (got.hostname, str(got.port), got.user) == (want["hostname"], want["port"], want["user"]), name
    # what each host got, so a wrong reference would show too
    alpha, gamma = resolve_settings(parse_host("alpha"), config), resolve_settings(parse_host("gamma"), config)
    assert (alpha.hostname, alpha.port, alpha.user) == ("10.1.1.1", 2301, "alphauser")
    assert (gamma.hostname, gamma.port, gamma.user) == ("10.1.1.3", 2401, "late")
    assert resolve_settings(parse_host("delta"), config).hostname == "10.1.1.4"
    assert resolve_settings(parse_host("epsilon"), config).port == 2999


# case: (the included file, the main config, the probe's refusal, whether ssh refuses too)
REFUSED = {
    "conditional with Host lines": (
        "Host other\n  Port 2500\n",
        "Host alpha\n  Include {inc}\n",
        "an Include inside a Host or Match block names a file with Host or Match lines",
        False,
    ),
    "a token": ("Port 2500\n", "Include {inc}-%h\n", "`%` or `${` in an Include path", False),
    "a loop": ("Include {inc}\n", "Include {inc}\n", "Include nests deeper than 16 files", True),
}


@pytest.mark.parametrize("case", REFUSED)
def test_an_include_the_probe_cannot_follow_is_bad_input(home: Path, tmp_path: Path, case: str) -> None:
    included, main, message, ssh_fails = REFUSED[case]
    inc = tmp_path / "inc"
    _write(inc, included.format(inc=inc))
    config = _write(tmp_path / "config", main.format(inc=inc))
    code, _, err = _ssh_g(config, "alpha", home)
    assert (code != 0) is ssh_fails, err  # where ssh itself refuses, the probe refuses as well
    with pytest.raises(BadInput, match=re.escape(message)):
        resolve_settings(parse_host("alpha"), config)
    if case == "a loop":  # the CLI: one line, exit 2, before any host is contacted
        r = run_probe("-F", str(config), "alpha")
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("error: SSH config "), r.stderr


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("RevokedHostKeys", "/etc/ssh/revoked"),
        ("KnownHostsCommand", "/usr/bin/printf %H"),
        ("HostKeyAlias", "other"),
        ("VerifyHostKeyDNS", "yes"),
    ],
)
def test_an_option_that_changes_ssh_trust_the_probe_cannot_honour_is_bad_input(
    home: Path, tmp_path: Path, option: str, value: str
) -> None:
    """ssh_config(5) options that change which host keys ssh trusts, which paramiko ignores: ssh
    applies each to the host (`ssh -G`), so the probe refuses the host rather than trust otherwise
    than the apply would; for another host the same file is fine."""
    config = _write(tmp_path / "config", f"Host alpha\n  {option} {value}\nHost *\n  Port 2222\n")
    code, resolved, err = _ssh_g(config, "alpha", home)
    assert code == 0 and resolved[option.lower()] in (value, "true"), err  # ssh -G prints yes as true
    with pytest.raises(BadInput, match=f"^{option} "):
        resolve_settings(parse_host("alpha"), config)
    assert resolve_settings(parse_host("beta"), config).port == 2222
