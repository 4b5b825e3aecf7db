"""What squid may fetch: the origins of this run's repositories and indexes (the lock's, the roles'
defaults, the OS archives), the networks refused unless the lock names them, and the plain-http
sources a host's own apt/dnf would use.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# --- what squid may fetch: the run's repositories and indexes, nothing else ---------------------

# Every tunnelled request reaches squid from 127.0.0.1, so "from loopback" says nothing about who
# asks: any user on any host of the run could otherwise reach the controller's own services and
# its LAN through the tunnel. squid fetches only from the origins (host and port) of the
# repositories and package indexes this run's rendered group_vars name, the roles' defaults and
# the archives of the hosts' OS releases, and refuses the rest with 403.

# The OS archives the hosts' own apt/dnf sources point at, by the lock's `os` (its part before
# the first "-"). A leading "." also matches subdomains (squid's dstdomain), for the country and
# cloud-region mirrors. Sources: the releases' default sources as shipped -- Debian 12's
# /etc/apt/sources.list.d/debian.sources (deb.debian.org, security.debian.org) and Debian's cloud
# images (cdn-aws.deb.debian.org); Ubuntu 24.04's /etc/apt/sources.list.d/ubuntu.sources
# (archive.ubuntu.com, security.ubuntu.com, ports.ubuntu.com for arm64) and
# https://wiki.ubuntu.com/Mirrors (CC.archive.ubuntu.com, <region>.ec2.archive.ubuntu.com);
# Rocky's /etc/yum.repos.d/rocky.repo (dl.rockylinux.org, mirrors.rockylinux.org); RHEL's
# redhat.repo (cdn.redhat.com); Amazon Linux 2023's amazonlinux.repo (cdn.amazonlinux.com).
OS_ARCHIVES: dict[str, tuple[str, ...]] = {
    "debian": (".deb.debian.org", "security.debian.org"),
    "ubuntu": (".archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com"),
    "rocky": ("dl.rockylinux.org", "mirrors.rockylinux.org"),
    "rhel": ("cdn.redhat.com",),
    "amzn": ("cdn.amazonlinux.com",),
}

# Destinations no host may reach through the cache unless the lock names them: the controller
# itself (RFC 1122 3.2.1.3: 0/8 and 127/8; Linux connects 0.0.0.0 to itself; RFC 4291 ::1, ::),
# link-local, where cloud metadata services answer (RFC 3927 169.254/16, RFC 4291 fe80::/10),
# and private networks (RFC 1918; RFC 6598 100.64/10, carrier-grade NAT; RFC 4193 fc00::/7).
DENIED_NETWORKS = {
    "to_controller": ("0.0.0.0/8", "127.0.0.0/8", "::1/128", "::/128"),
    "to_link_local": ("169.254.0.0/16", "fe80::/10"),
    "to_private": ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"),
}

_PROXY_KEYS = {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY"}


@dataclass(frozen=True, order=True)
class Origin:
    """Where a repository is: ``scheme`` http (fetched through squid) or https (CONNECT, on 443 only)."""

    scheme: str
    host: str  # lower case; an IPv6 address without brackets; ".example.org" for it and its subdomains
    port: int

    @classmethod
    def of(cls, url: str) -> Origin | None:
        """The origin of an http(s) URL; None for anything else (a path, a file:// find-link)."""

        try:
            parts = urlsplit(url.strip())
            host, port = parts.hostname, parts.port
        except ValueError:  # a port out of range, a broken IPv6 literal
            return None
        if parts.scheme not in ("http", "https") or not host or "{{" in url:
            return None
        return cls(parts.scheme, host.lower(), port or (443 if parts.scheme == "https" else 80))

    @property
    def is_address(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True


def _urls(value: object) -> Iterator[str]:
    """Every http(s) URL in a group_vars value (nested lists and mappings), proxies left out."""
    if isinstance(value, str):
        if value.startswith(("http://", "https://")):
            yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if k not in _PROXY_KEYS:
                yield from _urls(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _urls(v)


@dataclass(frozen=True)
class RepoSources:
    """The origins squid may fetch from in one run.

    ``lock``: what this run's rendered group_vars name (the driver and CUDA repositories, an
    ``install.apt.mirror``, the pip indexes and find-links): the operator chose them, so they are
    allowed wherever they are, a site mirror on the LAN or the tests' stand-ins on the bridge.
    ``public``: the roles' defaults and the OS archives (:data:`OS_ARCHIVES`): public names, so
    one that resolves into :data:`DENIED_NETWORKS` is refused like any other address there.
    Empty (the default): squid fetches nothing.
    """

    lock: frozenset[Origin] = frozenset()
    public: frozenset[Origin] = frozenset()

    @classmethod
    def for_run(
        cls,
        group_vars: Sequence[Mapping[str, Any]],
        oses: Sequence[str],
        role_defaults: Sequence[Mapping[str, Any]] = (),
    ) -> RepoSources:
        lock = {o for data in group_vars for u in _urls(data) if (o := Origin.of(u))}
        public = {o for data in role_defaults for u in _urls(data) if (o := Origin.of(u))}
        for os_id in oses:
            for host in OS_ARCHIVES.get(os_id.split("-", 1)[0], ()):
                public |= {Origin("http", host, 80), Origin("https", host, 443)}
        return cls(frozenset(lock), frozenset(public - lock))

    def allows(self, url: str) -> bool:
        """Whether squid would fetch ``url`` by name alone (what a host's own sources may use)."""
        o = Origin.of(url)
        return o is not None and any(_covers(a, o) for a in self.lock | self.public)


# What apt and dnf fetch on a host, one file after another (the loop keeps deb822 stanzas apart).
SOURCES_COMMAND = (
    "for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources "
    '/etc/yum.repos.d/*.repo; do [ -f "$f" ] && cat "$f" && echo; done; true'
)


def host_sources(text: str) -> list[str]:
    """The plain-http URLs of the enabled apt/dnf sources in ``text`` (:data:`SOURCES_COMMAND`'s
    output), and ``mirrorlist:URL`` for a dnf repository whose mirrors a list names (not known
    here). HTTPS sources are left out: they go through the host's own https_proxy, not squid.

    Formats: sources.list(5) one-line ``deb [options] URI suite ...`` and deb822 stanzas
    (``URIs:``, ``Enabled: no``); dnf.conf(5) ``[repo]`` sections (``baseurl`` may list several
    URLs and continue on indented lines; ``mirrorlist``, ``metalink``; ``enabled=0``)."""
    out: list[str] = []
    stanza: dict[str, str] = {}
    section: dict[str, str] | None = None
    last = ""

    def end_stanza() -> None:
        if stanza.get("enabled", "yes").lower() not in ("no", "false", "0"):
            out.extend(stanza.get("uris", "").split())
        stanza.clear()

    def end_section() -> None:
        if section is not None and section.get("enabled", "1").strip() not in ("0", "false", "no"):
            out.extend(section.get("baseurl", "").replace(",", " ").split())
            out.extend(f"mirrorlist:{u}" for k in ("mirrorlist", "metalink") if (u := section.get(k, "").strip()))

    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            end_stanza()
            continue
        if m := re.match(r"^\s*deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?(\S+)", line):
            out.append(m.group(1))
        elif re.match(r"^\[[^\]]+\]$", line.strip()):
            end_section()
            section, last = {}, ""
        elif section is not None and raw[:1].isspace() and last == "baseurl":
            section["baseurl"] += " " + line.strip()
        elif section is not None and "=" in line:
            key, value = (x.strip() for x in line.split("=", 1))
            section[key.lower()], last = value, key.lower()
        elif m := re.match(r"^([A-Za-z-]+):\s*(.*)$", line):
            stanza[m.group(1).lower()] = m.group(2)
    end_stanza()
    end_section()
    return [u for u in out if u.startswith(("http://", "mirrorlist:"))]


def _covers(allowed: Origin, o: Origin) -> bool:
    if (allowed.scheme, allowed.port) != (o.scheme, o.port):
        return False
    if allowed.host.startswith("."):
        return o.host == allowed.host[1:] or o.host.endswith(allowed.host)
    return o.host == allowed.host


def role_defaults(roles: Path) -> list[dict[str, Any]]:
    """The roles' defaults/main.yml (their URL literals are what a host fetches when no group_vars
    overrides them, e.g. nvidia_driver_debian_mirror)."""
    import yaml  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    out = []
    for path in sorted(roles.glob("*/defaults/main.yml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict):
            out.append(data)
    return out
