"""SSH settings: ``~/.ssh/config``, ssh options in inventory vars and explicit values, merged.

SSH follows OpenSSH's rules where users rely on them: ``~/.ssh/config`` (User, Port,
IdentityFile, IdentitiesOnly, UserKnownHostsFile, ProxyJump, ProxyCommand) and explicit values
(``user@``, ``:port``, inventory vars, ``-o`` options in ``ansible_ssh_common_args``) winning over
the config file. :func:`resolve_settings` reads files only (no host is contacted);
:func:`ssh_trust_args` hands the same trust to OpenSSH (the apply, through Ansible).
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput
from provision.hosts.inventory import HostTarget

if TYPE_CHECKING:
    pass
import glob

from provision.hosts.known_hosts import GLOBAL_KNOWN_HOSTS, check_known_hosts_file


@dataclass(frozen=True)
class SSHSettings:
    """Everything needed to open one SSH connection, after config and inventory are merged."""

    name: str
    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...] = ()
    identities_only: bool = False
    known_hosts_files: tuple[str, ...] = ()
    proxy_jump: str | None = None
    proxy_command: str | None = None
    password: str | None = field(default=None, repr=False)
    sudo_password: str | None = field(default=None, repr=False)
    # the ssh config file that was read (None: there was none)
    config_file: str | None = None


def default_ssh_config_path() -> Path:
    return Path(os.environ.get("PROVISION_SSH_CONFIG", "~/.ssh/config")).expanduser()


def _ssh_args_options(args: str) -> dict[str, str]:
    """``-o Key=Value``/``-o Key Value``, ``-i``, ``-p``, ``-l``, ``-J`` of ssh command-line args."""
    words = shlex.split(args)
    options: dict[str, str] = {}
    flag_keys = {"-i": "identityfile", "-p": "port", "-l": "user", "-J": "proxyjump", "-F": "_configfile"}
    i = 0
    while i < len(words):
        word = words[i]
        value: str | None = None
        if word == "-o" and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        elif word.startswith("-o") and len(word) > 2:
            value = word[2:]
        elif word in flag_keys and i + 1 < len(words):
            options[flag_keys[word]] = words[i + 1]
            i += 2
            continue
        if value is not None:
            key, sep, rest = value.partition("=")
            if not sep:
                key, _, rest = value.partition(" ")
            options[key.strip().lower()] = rest.strip()
        i += 1
    return options


# OpenSSH's limit on nested Includes (openssh-portable readconf.c READCONF_MAX_DEPTH: "Too many
# recursive configuration includes").
INCLUDE_MAX_DEPTH = 16
# A config line as paramiko's SSHConfig splits it (SETTINGS_REGEX): keyword, then value.
_CONFIG_LINE = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")


def _config_lines(path: Path, depth: int = 0, top: bool = True) -> list[str]:
    """The lines of an ssh config with each ``Include`` replaced by the files it names, which
    paramiko's SSHConfig (it ignores the keyword) then reads as OpenSSH reads the tree.

    As ssh_config(5) "Include" and readconf.c's oInclude have it: each path a glob, its matches in
    lexical order; ``~`` is ``$HOME`` (glob's GLOB_TILDE), a relative path is under ``~/.ssh`` (a
    user configuration: the probe's file and the apply's ``-F``); no match is no file; nesting
    deeper than :data:`INCLUDE_MAX_DEPTH` is an error. An included file starts under the
    condition its Include stood in, and its own Host/Match lines hold only inside it: after a file
    with such lines a ``Host *`` line restores the top level. An Include inside a Host/Match block
    whose files have Host/Match lines of their own (ssh ANDs the two conditions, which paramiko
    cannot express), and a path with ``%`` tokens or ``${}`` variables (OpenSSH 10.0 expands
    them, earlier releases do not), are BadInput: the probe cannot follow them as the apply's ssh
    does. ``top``: whether the lines so far hold for every host."""

    if depth > INCLUDE_MAX_DEPTH:
        raise BadInput(
            f"SSH config {path}: Include nests deeper than {INCLUDE_MAX_DEPTH} files (ssh refuses it too)",
            "look for an Include that names its own file or one above it",
        )
    lines: list[str] = []
    for lineno, raw in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        match = _CONFIG_LINE.match(raw.strip())
        keyword = match.group(1).lower() if match and not raw.strip().startswith("#") else ""
        if keyword in ("host", "match"):
            top = keyword == "host" and match is not None and match.group(2).split() == ["*"]
        if keyword != "include" or match is None:
            lines.append(raw)
            continue
        where = f"SSH config {path} line {lineno}"
        try:
            words = shlex.split(match.group(2))
        except ValueError as exc:
            raise BadInput(f"{where}: the Include does not parse: {exc}", "check its quotes") from None
        for word in words:
            if "%" in word or "${" in word:
                raise BadInput(
                    f"{where}: `%` or `${{` in an Include path, which OpenSSH expands from release 10.0 on "
                    "and earlier releases do not",
                    "write the path out",
                )
            pattern = os.path.expanduser(word if word.startswith(("/", "~")) else f"~/.ssh/{word}")
            for found in sorted(glob.glob(pattern)):
                if not os.path.isfile(found):
                    continue
                included = _config_lines(Path(found), depth + 1, top)
                blocks = any(
                    (m := _CONFIG_LINE.match(line.strip())) and m.group(1).lower() in ("host", "match")
                    for line in included
                )
                if blocks and not top:
                    raise BadInput(
                        f"{where}: an Include inside a Host or Match block names a file with Host or Match "
                        f"lines ({found}), which the probe cannot follow as ssh does",
                        "move that Include above the first Host or Match line, or copy the file's lines in",
                    )
                lines += [*included, "Host *"] if blocks else included
    return lines


# ssh_config(5) options that change which host keys OpenSSH trusts and that paramiko ignores: with
# one of them the probe would trust otherwise than the apply's `ssh -F` the same file. Each with
# the values that change nothing, and what ssh does.
UNHONOURED_TRUST = {
    "RevokedHostKeys": (("none",), "ssh refuses the host keys that file lists"),
    "KnownHostsCommand": (("none",), "ssh also trusts the host keys that command prints"),
    "HostKeyAlias": ((), "ssh looks the host key up under that alias, not the host's name"),
    "VerifyHostKeyDNS": (("no", "ask"), "ssh trusts a host key that matches a secure SSHFP record in DNS"),
}


def _pick_port(options: dict[str, str], looked: dict[str, Any]) -> str:
    return str(options.get("port") or looked.get("port") or 22)


def _unless_none(value: Any) -> str | None:
    return None if value is None or str(value).lower() == "none" else str(value)


def resolve_settings(target: HostTarget, ssh_config: Path | None = None) -> SSHSettings:
    """Merge, highest first: explicit target values, ssh options in inventory vars, ssh config.

    Reads files only (no host is contacted); what does not parse is BadInput.
    """
    import paramiko  # noqa: PLC0415 (paramiko is heavy: only an SSH connection loads it)

    options: dict[str, str] = {}
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if target.vars.get(var):
            try:
                options.update(_ssh_args_options(str(target.vars[var])))
            except ValueError as exc:
                raise BadInput(f"{var} of host `{target.name}` does not parse: {exc}", "check its quotes") from None
    path = (
        Path(options.pop("_configfile")).expanduser()
        if "_configfile" in options
        else (ssh_config or default_ssh_config_path())
    )
    looked: dict[str, Any] = {}
    if path.is_file():
        try:
            text = "\n".join(_config_lines(path))
            looked = dict(paramiko.SSHConfig.from_text(text).lookup(target.address))
        except (paramiko.SSHException, ValueError, OSError) as exc:
            raise BadInput(
                f"SSH config {path} does not parse: {exc}", "fix that file or pass another with -F"
            ) from None
    port_text = str(target.port or _pick_port(options, looked))
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise BadInput(f"invalid SSH port `{port_text}` for host `{target.name}`", "a port is a number from 1 to 65535")

    def pick(key: str) -> Any:
        return options.get(key, looked.get(key))

    for option, (lax, why) in UNHONOURED_TRUST.items():
        value = pick(option.lower())
        if value is not None and str(value).lower() not in lax:
            raise BadInput(
                f"{option} {value} for host `{target.name}` (SSH config {path} or its ssh args): {why}, "
                "which the probe (paramiko) cannot do alike",
                f"remove {option} for this host, or give another config with -F",
            )

    identity = pick("identityfile")
    key_files: list[str] = []
    if target.key_file:
        key_files.append(target.key_file)
    if isinstance(identity, list):
        key_files += [str(k) for k in identity]
    elif identity:
        key_files.append(str(identity))
    known = pick("userknownhostsfile")
    known_files = shlex.split(known) if known else ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
    port = int(port_text)
    known_files = [os.path.expanduser(k) for k in known_files]
    for known_file in (*known_files, *GLOBAL_KNOWN_HOSTS):
        check_known_hosts_file(known_file)
    return SSHSettings(
        name=target.name,
        hostname=str(
            options.get("hostname")
            or (looked.get("hostname") if target.address == target.name else target.address)
            or target.address
        ),
        port=port,
        user=target.user or str(pick("user") or getpass.getuser()),
        key_files=tuple(dict.fromkeys(os.path.expanduser(k) for k in key_files)),
        identities_only=str(pick("identitiesonly") or "no").lower() == "yes",
        known_hosts_files=tuple(known_files),
        proxy_jump=_unless_none(pick("proxyjump")),
        proxy_command=_unless_none(pick("proxycommand")),
        password=str(target.vars["ansible_password"]) if target.vars.get("ansible_password") else None,
        sudo_password=target.become_password,
        config_file=str(path) if path.is_file() else None,
    )


# ssh_args of the run dir's ansible.cfg and of each SSH host's inventory entry (ansible_ssh_args).
# StrictHostKeyChecking first: ssh takes the first value it is given, and Ansible's ssh plugin puts
# ssh_args ahead of everything (its "=no" for host_key_checking False comes after them).
SSH_ARGS = "-o StrictHostKeyChecking=yes -o ControlMaster=auto -o ControlPersist=60s"


def ssh_trust_vars(target: HostTarget, ssh_config: Path | None = None) -> dict[str, Any]:
    """The connection variables the run dir's inventory gives an SSH host so that the apply,
    ``up``'s and a user's own ``cd OUT && ansible-playbook site.yml`` alike, trusts what the
    probe trusted: the ssh plugin (not paramiko, ``ANSIBLE_TRANSPORT``), ssh_args led by
    ``StrictHostKeyChecking=yes`` (``ANSIBLE_SSH_ARGS`` would replace ansible.cfg's and come
    first on ssh's command line), host key checking on (``ANSIBLE_HOST_KEY_CHECKING=False``
    would add ``StrictHostKeyChecking=no``), and :func:`ssh_trust_args` ahead of the inventory's
    own ssh args. Variables, because "they will override any playbook keyword, any command-line
    option, environment variable and any configuration file setting" (Ansible's docs,
    reference_appendices/general_precedence.rst, "Variables"); ``ansible-doc -t connection ssh``
    names these variables for the ssh_args and host_key_checking options."""
    given = target.vars.get("ansible_ssh_common_args")
    return {
        "ansible_connection": "ssh",
        "ansible_ssh_args": SSH_ARGS,
        "ansible_host_key_checking": True,
        "ansible_ssh_common_args": ssh_trust_args(target, ssh_config) + (f" {given}" if given else ""),
    }


def ssh_trust_args(target: HostTarget, ssh_config: Path | None = None) -> str:
    """OpenSSH options that make ``ssh`` (the apply, through Ansible) trust what the probe trusts.

    The same config file (``-F``: OpenSSH would read the passwd home's ``~/.ssh/config``, Python
    reads ``$HOME``'s; ``/dev/null`` where the probe read none), the same known_hosts files with
    ``~`` already expanded, and ``StrictHostKeyChecking=yes``: an unknown or changed key is
    refused (a key accepted with --accept-new-host-keys was recorded by the probe). They go
    ahead of the inventory's own ssh args because ssh takes the first value of an option.
    """
    settings = resolve_settings(target, ssh_config)

    def files(paths: Sequence[str]) -> str:
        # ssh_config(5) splits the value on whitespace; a path with a space is double-quoted
        return " ".join(f'"{p}"' if any(c.isspace() for c in p) else p for p in paths)

    return shlex.join(
        [
            "-F",
            settings.config_file or "/dev/null",
            "-o",
            f"UserKnownHostsFile={files(settings.known_hosts_files)}",
            "-o",
            f"GlobalKnownHostsFile={files(GLOBAL_KNOWN_HOSTS)}",
            "-o",
            "StrictHostKeyChecking=yes",
        ]
    )
