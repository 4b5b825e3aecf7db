"""Host keys: known_hosts files read as OpenSSH reads them, keys recorded, fingerprints.

Host keys are always verified against known_hosts: an unknown key is refused unless the caller
accepts new keys (then :func:`record_host_key` records it, like ``StrictHostKeyChecking=accept-new``)
and a changed key is refused, always (that decision is :mod:`provision.hosts.ssh`'s).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput

if TYPE_CHECKING:
    import paramiko


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def host_key_name(hostname: str, port: int) -> str:
    """The name a host's key is filed under in known_hosts (``[host]:port`` off port 22)."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


_KNOWN_HOSTS_LOCK = threading.Lock()


def record_host_key(path: str, hostname: str, port: int, key: paramiko.PKey) -> None:
    """Append a key to a known_hosts file (parallel probes may record several at once)."""

    file = Path(path)
    with _KNOWN_HOSTS_LOCK:
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(file, "a") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            out.write(f"{host_key_name(hostname, port)} {key.get_name()} {key.get_base64()}\n")


class UnknownHostKey(Exception):
    """The host offered a key known_hosts lacks (and new keys are not accepted)."""

    def __init__(self, key: paramiko.PKey) -> None:
        super().__init__("unknown host key")
        self.key = key


class RevokedHostKey(Exception):
    """The host offered a key that a ``@revoked`` line of known_hosts names for it."""

    def __init__(self, key: paramiko.PKey) -> None:
        super().__init__("revoked host key")
        self.key = key


# The system-wide known_hosts files, OpenSSH's GlobalKnownHostsFile default (ssh_config(5)).
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


def load_known_hosts(client: paramiko.SSHClient, files: Sequence[str], host: str) -> frozenset[bytes]:
    """Load the keys known_hosts gives ``host`` (its name as :func:`host_key_name` writes it)
    into ``client``, and return the keys revoked for it (their wire bytes, ``PKey.asbytes()``).

    The user's files and the system-wide ones, as ssh reads them; paramiko's lookup handles
    hashed (|1|...) entries and [host]:port names. resolve_settings has checked every line.
    A revoked key is never loaded, even where a plain line lists it too: "the key contained on
    the line is revoked and must not ever be accepted" (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT),
    and OpenSSH checks the revoked lines before the known ones (openssh-portable hostfile.c
    check_key_not_revoked; ssh says "REVOKED HOST KEY DETECTED"), so the caller refuses such a
    key when the host offers it, whatever else known_hosts says.
    """
    keys = client.get_host_keys()
    parsed = [_known_hosts_entries(path) for path in (*files, *GLOBAL_KNOWN_HOSTS)]
    revoked = frozenset(blob for _, marked in parsed for names, blob in marked if _names_host(names, host))
    for entries, _ in parsed:
        for entry in entries:
            if entry.key.asbytes() in revoked:
                continue
            for name in entry.hostnames:
                known = keys.lookup(name)
                if known is None or entry.key.get_name() not in known:  # the first entry wins, as in load
                    keys.add(name, entry.key.get_name(), entry.key)
    return revoked


def _names_host(names: str, host: str) -> bool:
    """Whether a known_hosts line's host field names ``host``, as OpenSSH's match_hostname
    decides (match.c): a hashed name (``|1|salt|hash``) by its hash, else a comma list of
    patterns where ``*`` and ``?`` are wildcards, case does not count, and a matching negated
    (``!``) pattern excludes the host whatever else matches. Only ``*`` and ``?`` are special:
    ``[`` is literal (``[host]:port`` names), so this is not fnmatch."""
    import paramiko  # noqa: PLC0415 (paramiko is heavy: only an SSH connection loads it)

    if names.startswith("|1|"):
        return paramiko.HostKeys.hash_host(host, names) == names
    matched = False
    for pattern in names.lower().split(","):
        negated = pattern.startswith("!")
        text = pattern[1:] if negated else pattern
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)
        if re.fullmatch(regex, host.lower(), re.DOTALL):
            if negated:
                return False
            matched = True
    return matched


def _known_hosts_entries(path: str) -> tuple[list[Any], list[tuple[str, bytes]]]:
    """The usable entries of a known_hosts file, parsed line by line as ``HostKeys.load`` does,
    and its ``@revoked`` lines as (host field, key bytes). Other marked lines
    (``@cert-authority``) are skipped: paramiko has no host certificates, and ``load`` stops at
    them. A host known only through such a line is unknown, so refused, never trusted. A line
    that does not decode raises BadInput naming it (``load`` raised ``InvalidHostKey`` without
    saying where: it escaped from connect() as a misleading ProxyJump error); a ``@revoked``
    line too, since skipping it would trust what it revokes."""
    import paramiko  # noqa: PLC0415 (paramiko is heavy: only an SSH connection loads it)
    from paramiko.hostkeys import HostKeyEntry  # noqa: PLC0415 (paramiko is heavy: only an SSH connection loads it)

    entries: list[Any] = []
    revoked: list[tuple[str, bytes]] = []
    if not os.path.isfile(path):
        return entries, revoked

    def bad(lineno: int) -> BadInput:
        return BadInput(
            f"known_hosts file {path} line {lineno}: the key does not decode",
            f"fix or delete line {lineno} of {path}",
        )

    try:
        with open(path, encoding="utf-8", errors="replace") as lines:
            for lineno, line in enumerate(lines, start=1):
                text = line.strip()
                if not text or text.startswith("#"):
                    continue
                if text.startswith("@"):
                    fields = text.split()
                    if fields[0] == "@revoked":  # @revoked HOSTS KEYTYPE BASE64 [COMMENT] (sshd(8))
                        try:
                            revoked.append((fields[1], base64.b64decode(fields[3], validate=True)))
                        except (IndexError, binascii.Error):
                            raise bad(lineno) from None
                    continue
                try:
                    entry = HostKeyEntry.from_line(text, lineno)
                except paramiko.SSHException:  # e.g. a key type paramiko lacks: ssh skips unknown ones
                    continue
                except Exception:  # InvalidHostKey, and what a garbled key raises
                    raise bad(lineno) from None
                if entry is not None:  # None: fewer than three fields, skipped as load does
                    entries.append(entry)
    except OSError:  # unreadable: no keys from it, so its hosts are unknown
        return [], []
    return entries, revoked


def check_known_hosts_file(path: str) -> None:
    """BadInput naming the file and line where a line of ``path`` does not decode."""
    _known_hosts_entries(path)
