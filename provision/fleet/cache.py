"""The fleet cache (``install.cache: auto|off``): N hosts download each artifact once.

For a run that applies to SSH hosts the controller, for the length of the run:

- runs squid, a caching HTTP proxy from the OS's packages, for the hosts' apt/dnf traffic
  (cached by URL, ``collapsed_forwarding`` so hosts asking at the same moment share one
  upstream fetch; package files are kept, index files are revalidated);
- fills a wheelhouse once per (Python, architecture) with ``pip download`` of exactly the pins
  the hosts' frameworks role would install, from the same indexes and find-links, and serves it
  over HTTP;
- opens one SSH connection per host (host keys verified as everywhere) with reverse port
  forwards, so a host reaches both on its own ``127.0.0.1``: hosts need no route to the
  controller, which is what cloud instances behind NAT and jump hosts have.

Not an open proxy: every tunnelled request comes from 127.0.0.1, so squid fetches only from this
run's repositories and indexes (:class:`RepoSources`, :func:`_acl_rules`) and the forwards must
listen on the host's loopback only (:meth:`Tunnel.forward`).

Nothing persists on a host: the proxy reaches apt through the play's ``environment`` and the
wheelhouse is a ``--find-links`` of this run's host_vars, so a killed run leaves no host pointing
at a tunnel that is gone. ``auto`` never fails a run: a part that cannot start (no squid on the
controller, a wheel that has no binary for the host's platform) is left out with a note and the
hosts fetch that part themselves.

Why squid and not apt-cacher-ng: apt-cacher-ng 3.7 cannot bind its port in gVisor sandboxes
such as our CI (its resolver fails on the bind address), and squid also serves dnf.
HTTPS sources pass through uncached (a proxy cannot read TLS); the Debian/Ubuntu archives and
security mirrors are plain HTTP (apt checks their signatures), and wheels never go through the
proxy.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from provision.errors import ProvisionError

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    import paramiko

    from provision.hosts.inventory import HostTarget

SQUID_USER = "proxy"  # Debian's and Ubuntu's squid package user; squid switches to it from root

# Wheels for the hosts' platform: manylinux up to the oldest glibc among the OS releases the
# tool supports (RHEL 8's 2.28), so a wheel taken here installs on every one of them.
MANYLINUX_MAX_MINOR = 28
MANYLINUX_MIN_MINOR = 17

# Package files and by-hash indexes never change under one URL. Index files do: they are kept
# 5 minutes at most, so the hosts of one run share one fetch (they update within minutes of each
# other) and the next run sees the archive as it is then. Five minutes stale is harmless: the
# archives keep the by-hash files an index names for days. `ignore-reload`: apt asks for index
# files with `Cache-Control: max-age=0`, which would otherwise send every host's request upstream.
SQUID_REFRESH = (
    r"refresh_pattern -i (\.deb|\.udeb|\.rpm|\.drpm|\.whl)$ 129600 100% 129600 "
    r"refresh-ims override-expire ignore-reload",
    r"refresh_pattern -i /by-hash/ 129600 100% 129600 refresh-ims override-expire ignore-reload",
    r"refresh_pattern -i (Release|Release\.gpg|InRelease|Packages|Sources|Index|repomd\.xml)(\.(gz|xz|bz2|lz4|zst))?$ "
    r"5 100% 5 refresh-ims override-expire override-lastmod ignore-reload",
    "refresh_pattern . 0 20% 4320",
)
# squid's native log line plus %<bs: body bytes received from upstream ('-' when none came)
SQUID_LOGFORMAT = "%ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt %<bs"


def default_root() -> Path:
    """Where the cache lives between runs: the system's cache dir for root, XDG's otherwise."""
    if os.geteuid() == 0:
        return Path("/var/cache/provision")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "provision"


# --- pure parts: what would be run ----------------------------------------------------------


def wheel_platforms(arch: str) -> list[str]:
    """``pip download --platform`` values for a glibc Linux host of ``arch``."""
    tags = [f"manylinux_2_{m}_{arch}" for m in range(MANYLINUX_MAX_MINOR, MANYLINUX_MIN_MINOR - 1, -1)]
    return [*tags, f"manylinux2014_{arch}"]


@dataclass(frozen=True)
class WheelSet:
    """What one host group's frameworks role installs, as the rendered group_vars say."""

    python: str  # "3.11"
    arch: str  # "x86_64"
    installs: tuple[tuple[tuple[str, ...], str], ...]  # (packages, index_url or "")
    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    no_index: bool = False
    # the indexes' logins (netrc text; render keeps them out of the URLs): pip reads them from
    # the file NETRC names, never from its command line, which `ps` shows to everyone
    netrc: str = field(default="", repr=False)

    @property
    def key(self) -> str:
        """The wheelhouse folder: one per interpreter and platform, shared by every run."""
        return f"cp{self.python.replace('.', '')}-{self.arch}"

    @classmethod
    def from_group_vars(cls, data: Mapping[str, Any], host: Mapping[str, Any], *, netrc: str = "") -> WheelSet | None:
        """None where the group installs no frameworks or its platform is unknown."""
        installs = data.get("frameworks_installs") or []
        if not data.get("frameworks_enabled", True) or not installs:
            return None
        python, arch = host.get("python"), host.get("arch")
        if not python or not arch:
            return None
        return cls(
            python=str(python),
            arch=str(arch),
            installs=tuple((tuple(str(p) for p in e["packages"]), str(e.get("index_url") or "")) for e in installs),
            index_url=str(data.get("frameworks_index_url") or ""),
            extra_index_urls=tuple(data.get("frameworks_extra_index_urls") or ()),
            find_links=tuple(data.get("frameworks_find_links") or ()),
            trusted_hosts=tuple(data.get("frameworks_trusted_hosts") or ()),
            no_index=bool(data.get("frameworks_no_index")),
            netrc=netrc,
        )

    def download_commands(self, python_exe: str, dest: Path) -> list[list[str]]:
        """One ``pip download`` per role install entry, with the options the role would pass."""
        abi = f"cp{self.python.replace('.', '')}"
        common = [
            "--only-binary=:all:",
            f"--python-version={self.python}",
            "--implementation=cp",
            f"--abi={abi}",
            *(f"--platform={p}" for p in wheel_platforms(self.arch)),
        ]
        sources = ["--no-index"] if self.no_index else [f"--extra-index-url={u}" for u in self.extra_index_urls]
        sources += [f"--find-links={u}" for u in self.find_links]
        sources += [f"--trusted-host={h}" for h in self.trusted_hosts]
        out = []
        for packages, index_url in self.installs:
            index = index_url or self.index_url
            index_args = [f"--index-url={index}"] if index and not self.no_index else []
            out.append(
                [
                    python_exe,
                    "-m",
                    "pip",
                    "download",
                    "--disable-pip-version-check",
                    "--quiet",
                    f"--dest={dest}",
                    *common,
                    *index_args,
                    *sources,
                    *packages,
                ]
            )
        return out


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
        from urllib.parse import urlsplit

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
        import ipaddress

        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True


def _urls(value: Any) -> Iterator[str]:
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
    import yaml

    out = []
    for path in sorted(roles.glob("*/defaults/main.yml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict):
            out.append(data)
    return out


def _uncovered(names: Iterable[str]) -> list[str]:
    """``names`` less those a ".name" among them covers (squid warns about and drops those)."""
    wild = {h for h in names if h.startswith(".")}
    return sorted({h for h in names if h in wild or not any(h == w[1:] or h.endswith(w) for w in wild)})


def _acl_rules(sources: RepoSources) -> list[str]:
    """squid's http_access rules: only the allowed origins, the lock's before the address checks."""
    # no -n here: squid resolves the request's name, so a public name that resolves into one of
    # these networks is refused too
    lines = [f"acl {name} dst {' '.join(nets)}" for name, nets in DENIED_NETWORKS.items()]
    allow_lock: list[str] = []
    allow_public: list[str] = []
    for kind, origins, out in (("lock", sources.lock, allow_lock), ("public", sources.public, allow_public)):
        # One ACL per (scheme, port, names|addresses): values on one http_access line are ANDed,
        # so each line allows exactly those hosts on that port. `-n`: no DNS in either direction
        # (a name is matched as written, an address listed only matches a URL with that address).
        groups: dict[tuple[str, int, bool], set[str]] = {}
        for o in origins:
            if o.scheme == "https" and o.port != 443:
                continue  # CONNECT goes to 443 only
            groups.setdefault((o.scheme, o.port, o.is_address), set()).add(o.host)
        for (scheme, port, is_address), names in sorted(groups.items()):
            name = f"{kind}_{scheme}_{port}_{'addr' if is_address else 'name'}"
            hosts = _uncovered(names)
            lines.append(f"acl {name} {'dst' if is_address else 'dstdomain'} -n {' '.join(hosts)}")
            if scheme == "https":
                out.append(f"http_access allow CONNECT {name}")
            else:
                lines.append(f"acl port_{port} port {port}")
                out.append(f"http_access allow !CONNECT {name} port_{port}")
    public = sorted({o.host for o in sources.public})
    if public:  # squid resolves only names it may fetch: an unlisted one is refused before any DNS
        lines.append(f"acl public_any dstdomain -n {' '.join(_uncovered(public))}")
    return [
        *dict.fromkeys(lines),  # one port ACL per port, in order
        "http_access deny manager",  # squid's own cache manager pages are not for the hosts
        "http_access deny !loopback",
        "http_access deny CONNECT !SSL_ports",
        # 1. the lock's repositories win wherever they are: listed on purpose, LAN mirrors included
        *allow_lock,
        "http_access deny !public_any" if public else "http_access deny all",
        # 2. then nothing that resolves to the controller itself, link-local or a private network
        *(f"http_access deny {name}" for name in DENIED_NETWORKS),
        # 3. then the public archives and the roles' defaults, by name
        *allow_public,
        "http_access deny all",
    ]


def squid_conf(
    *, port: int, store: Path, run: Path, parent: str | None, sources: RepoSources, cache_gib: int = 50
) -> str:
    """squid.conf for one run: loopback only, the run's repositories only, the shared store, this run's logs."""
    lines = [
        "# written by provision for one `provision up` run (the fleet cache); see provision/cache.py",
        f"http_port 127.0.0.1:{port}",
        "visible_hostname provision-fleet-cache",
        f"pid_filename {run / 'squid.pid'}",
        f"cache_dir ufs {store} {cache_gib * 1024} 16 256",
        f"coredump_dir {run}",
        "maximum_object_size 16 GB",
        "cache_mem 64 MB",
        "collapsed_forwarding on",
        "range_offset_limit none",
        f"logformat provision {SQUID_LOGFORMAT}",
        f"access_log stdio:{run / 'access.log'} provision",
        f"cache_log {run / 'cache.log'}",
        "cache_store_log none",
        "logfile_rotate 0",
        "shutdown_lifetime 1 seconds",
        "acl loopback src 127.0.0.0/8 ::1",
        "acl SSL_ports port 443",
        "acl CONNECT method CONNECT",
        # HTTPS sources tunnel through uncached; nothing but loopback (the tunnels) may connect,
        # and only to the run's repositories
        *_acl_rules(sources),
        *SQUID_REFRESH,
    ]
    if parent:  # the controller itself goes out through a proxy: squid does too
        m = re.match(r"^https?://(?:[^@/]*@)?([^:/]+)(?::(\d+))?", parent)
        if m:
            lines += [
                f"cache_peer {m.group(1)} parent {m.group(2) or '80'} 0 no-query default",
                "never_direct allow all",
            ]
    return "\n".join(lines) + "\n"


@dataclass
class ProxyStats:
    requests: int = 0
    hits: int = 0  # answered without a trip upstream (from the store, or collapsed onto a fetch)
    upstream_bytes: int = 0  # what squid fetched from the network (misses, revalidations)
    served_bytes: int = 0  # what the hosts got


def squid_stats(log: str) -> ProxyStats:
    """Sum the access log (:data:`SQUID_LOGFORMAT`): requests, hits, bytes served and fetched."""
    stats = ProxyStats()
    for line in log.splitlines():
        parts = line.split()
        if len(parts) < 11 or "/" not in parts[3]:
            continue
        code = parts[3].split("/")[0]
        if code.startswith("NONE"):  # a connection that sent no request (the readiness probe)
            continue
        stats.requests += 1
        stats.served_bytes += int(parts[4]) if parts[4].isdigit() else 0
        # A hit is a request answered without a trip upstream, whatever squid calls it: TCP_HIT and
        # TCP_MEM_HIT, but also a request collapsed onto another host's fetch still in flight,
        # which squid logs as TCP_CF_HIT, TCP_CF_MISS or even TCP_MISS, always with HIER_NONE.
        status = parts[3].split("/")[1]
        if parts[8].startswith("HIER_NONE") and (status.startswith("2") or status == "304"):
            stats.hits += 1
        stats.upstream_bytes += int(parts[10]) if parts[10].isdigit() else 0
    return stats


def host_vars(
    apt_port: int | None, wheels_port: int | None, wheel_key: str | None, environment: Mapping[str, str]
) -> dict[str, Any]:
    """The role variables that point one host at its end of the tunnels."""
    out: dict[str, Any] = {}
    # The credential files' proxy settings (render.Credentials: APT_CONFIG for apt, PIP_CONFIG_FILE
    # for pip) would send apt and pip past the tunnels, straight to install.apt.proxy; through a
    # tunnel they need no proxy and no proxy login.
    dropped = ({"APT_CONFIG"} if apt_port is not None else set()) | (
        {"PIP_CONFIG_FILE"} if wheels_port is not None and wheel_key is not None else set()
    )
    if dropped & set(environment):
        out["provision_environment"] = {k: v for k, v in environment.items() if k not in dropped}
    if apt_port is not None:
        out["provision_environment"] = {
            **{k: v for k, v in environment.items() if k not in dropped},
            "http_proxy": f"http://127.0.0.1:{apt_port}",
            "no_proxy": "127.0.0.1,localhost",
        }
    if wheels_port is not None and wheel_key is not None:
        out["frameworks_find_links"] = [f"http://127.0.0.1:{wheels_port}/{wheel_key}/"]
        out["frameworks_no_index"] = True
    return out


# --- the running parts ------------------------------------------------------------------------


@dataclass
class CacheReport:
    """What the cache did in a run (report.json's ``cache``)."""

    mode: str
    root: str | None = None
    apt: str = "off"  # on | off | why it is off
    wheels: dict[str, str] = field(default_factory=dict)  # wheelhouse key -> on | why not
    hosts: list[str] = field(default_factory=list)  # hosts reached through tunnels
    proxy: ProxyStats = field(default_factory=ProxyStats)
    wheel_bytes_added: int = 0  # bytes pip download put into the wheelhouse in this run
    wheels_served_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "root": self.root,
            "apt": self.apt,
            "wheels": self.wheels,
            "hosts": self.hosts,
            "proxy": self.proxy.__dict__,
            "wheel_bytes_added": self.wheel_bytes_added,
            "wheels_served_bytes": self.wheels_served_bytes,
            "upstream_bytes": self.proxy.upstream_bytes + self.wheel_bytes_added,
            "notes": self.notes,
        }


class Squid:
    """One squid process on 127.0.0.1 for this run, with the store shared between runs."""

    def __init__(self, root: Path, run: str, sources: RepoSources | None = None) -> None:
        self.sources = sources or RepoSources()
        # squid drops root for its `proxy` user: its files live under the cache root, which that
        # user can reach, not in the run dir (often in a private home or /tmp/pytest-of-*)
        self.store = root / "squid"
        self.workdir = root / "squid-runs" / run
        self.log = self.workdir / "access.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = 30.0) -> None:
        exe = shutil.which("squid", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if exe is None:
            raise RuntimeError("squid is not installed on this machine (apt-get install squid)")
        _mkdir_passable(self.store.parent)
        _mkdir_passable(self.workdir.parent)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.store.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        conf = self.workdir / "squid.conf"
        conf.write_text(
            squid_conf(
                port=self.port,
                store=self.store,
                run=self.workdir,
                parent=os.environ.get("http_proxy") or os.environ.get("HTTP_PROXY"),
                sources=self.sources,
            )
        )
        if os.geteuid() == 0:  # squid runs as `proxy` when started as root: it must own its files
            uid, gid = _user_ids(SQUID_USER)
            blocked = _not_traversable(self.store, uid)
            if blocked is not None:
                raise RuntimeError(
                    f"squid runs as user {SQUID_USER} and cannot enter {blocked}; "
                    "set install.cache_dir to a folder it can reach"
                )
            _chown_tree(self.store, uid, gid)
            _chown_tree(self.workdir, uid, gid)
        self._end_orphans()
        if not (self.store / "00").exists():
            subprocess.run([exe, "-N", "-z", "-f", str(conf)], capture_output=True, timeout=120, check=False)
        # in the controller's process group: a Ctrl-C or a killed `up` (killpg) ends it too
        self.proc = subprocess.Popen(
            [exe, "-N", "-f", str(conf)], stdout=subprocess.DEVNULL, stderr=(self.workdir / "squid.out").open("wb")
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"squid exited at start: {_tail(self.workdir / 'squid.out')}")
            with contextlib.suppress(OSError), _connect(self.port):
                return
            time.sleep(0.1)
        raise RuntimeError("squid did not answer within 30 s")

    def _end_orphans(self) -> None:
        """Stop a squid that a killed run left on this store (the caller holds the store's lock)."""
        import signal

        for pid_file in (self.store.parent / "squid-runs").glob("*/squid.pid"):
            if pid_file.parent == self.workdir:
                continue
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                if "squid" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(pid_file.parent, ignore_errors=True)

    def stats(self) -> ProxyStats:
        return squid_stats(self.log.read_text(errors="replace")) if self.log.exists() else ProxyStats()

    def stop(self, keep: Path | None = None) -> None:
        """Stop squid; ``keep``: copy its access log there (the run dir's record of what it served)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if keep is not None and (self.workdir / "access.log").exists():
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.workdir / "access.log", keep)
            self.log = keep  # stats() reads the kept copy; squid's own folder goes
            shutil.rmtree(self.workdir, ignore_errors=True)


class WheelServer:
    """The wheelhouse over HTTP on 127.0.0.1 (read-only files, a directory listing for pip)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.server: ThreadingHTTPServer | None = None
        self.served = 0
        self._lock = threading.Lock()

    def start(self) -> int:
        import functools
        from http import HTTPStatus
        from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

        outer = self

        class Handler(SimpleHTTPRequestHandler):
            def send_head(self) -> Any:
                # The wheelhouse and nothing else: the base class already drops `..` from the
                # path, but it follows symlinks, so a link in the wheelhouse could serve any file
                # the controller's user can read. Whatever resolves outside the folder, or is not a
                # plain file or folder (a FIFO would hang this thread), is not found.
                if not outer.serves(self.translate_path(self.path)):
                    self.send_error(HTTPStatus.NOT_FOUND, "File not found")
                    return None
                return super().send_head()

            def copyfile(self, source: Any, outputfile: Any) -> None:
                before = source.tell()
                super().copyfile(source, outputfile)
                with outer._lock:
                    outer.served += source.tell() - before

            def log_message(self, format: str, *args: Any) -> None:
                return  # the run's report says what was served; no per-request noise on stderr

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(self.directory)))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="provision-wheels", daemon=True).start()
        return int(self.server.server_address[1])

    def serves(self, local: str) -> bool:
        """Whether ``local`` (a request's path on disk) is a file or folder inside the wheelhouse."""
        root = os.path.realpath(self.directory)
        real = os.path.realpath(local)
        inside = real == root or real.startswith(root + os.sep)
        return inside and (os.path.isfile(real) or os.path.isdir(real))

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class Tunnel:
    """Reverse port forwards over one SSH connection: the host's 127.0.0.1:P -> a controller port."""

    def __init__(self, client: paramiko.SSHClient, name: str) -> None:
        self.client = client
        self.name = name
        self.ports: dict[int, int] = {}  # remote port -> local port
        transport = client.get_transport()
        if transport is not None:  # a driver build can leave the tunnel idle for minutes: keep NATs open
            transport.set_keepalive(30)

    def forward(self, local_port: int) -> int:
        """Forward the host's 127.0.0.1:P (P: the port sshd picks) to ``local_port``; returns P.

        We ask for the loopback address, which binds it there under sshd's default
        (``GatewayPorts no``: "sshd binds remote port forwardings to the loopback address",
        sshd_config(5)). ``GatewayPorts yes`` ignores the address asked for and binds the
        wildcard, which would put squid and the wheelhouse on the host's network: the host's own
        list of listening sockets decides, and a port bound anywhere else is no tunnel."""
        transport = self.client.get_transport()
        assert transport is not None
        remote = int(transport.request_port_forward("127.0.0.1", 0, handler=self._handler))
        self.ports[remote] = local_port
        try:
            exposed = [a for a in self._listening(remote) if not _is_loopback(a)]
        except Exception as exc:  # unverified is not loopback-only: no tunnel (auto says why)
            exposed = [f"unknown: cannot read the host's sockets ({_one_line(exc)})"]
        if exposed:
            with contextlib.suppress(Exception):
                transport.cancel_port_forward("127.0.0.1", remote)
            raise RuntimeError(
                f"the forwarded port {remote} listens on {', '.join(exposed)}, not only on loopback "
                "(GatewayPorts yes in the host's sshd_config?)"
            )
        return remote

    def _listening(self, port: int) -> list[str]:
        """The addresses the host listens on ``port`` at, from its kernel's socket tables."""
        _stdin, stdout, _stderr = self.client.exec_command("cat /proc/net/tcp /proc/net/tcp6", timeout=30)
        return listening_addresses(stdout.read().decode(errors="replace"), port)

    def _handler(self, channel: paramiko.Channel, origin: tuple[str, int], server: tuple[str, int]) -> None:
        local = self.ports.get(server[1])
        if local is None:
            channel.close()
            return
        threading.Thread(target=_pump, args=(channel, local), name=f"tunnel-{self.name}", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def listening_addresses(proc_net_tcp: str, port: int) -> list[str]:
    """Addresses in LISTEN state on ``port`` in Linux's /proc/net/tcp{,6} text (proc(5): local
    address as hex, IPv4 as one little-endian word, IPv6 as four; state 0A is TCP_LISTEN)."""
    import ipaddress
    import socket
    import struct

    out = []
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A" or ":" not in fields[1]:
            continue
        addr_hex, port_hex = fields[1].rsplit(":", 1)
        if int(port_hex, 16) != port:
            continue
        raw = bytes.fromhex(addr_hex)
        words = struct.unpack(f"<{len(raw) // 4}I", raw)  # the kernel prints each 32-bit word in host order
        packed = struct.pack(f">{len(words)}I", *words)
        out.append(str(ipaddress.ip_address(packed if len(packed) == 16 else socket.inet_ntoa(packed))))
    return out


def _is_loopback(address: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


def _pump(channel: paramiko.Channel, local_port: int) -> None:
    import selectors
    import socket

    try:
        sock = socket.create_connection(("127.0.0.1", local_port), timeout=10)
    except OSError:
        channel.close()
        return
    # A selector (epoll/poll), not select.select: a fleet's connections and tunnels take the
    # controller's descriptors past 1024, which select() cannot watch. A paramiko Channel has
    # fileno(), so it registers like the socket.
    waiter = selectors.DefaultSelector()
    waiter.register(sock, selectors.EVENT_READ, "sock")
    waiter.register(channel, selectors.EVENT_READ, "channel")
    try:
        while True:
            ready = {key.data for key, _ in waiter.select(60)}
            if "sock" in ready:
                data = sock.recv(1 << 16)
                if not data:
                    break
                channel.sendall(data)
            if "channel" in ready:
                data = channel.recv(1 << 16)
                if not data:
                    break
                sock.sendall(data)
    except OSError:
        pass
    finally:
        waiter.close()
        sock.close()
        channel.close()


class FleetCache:
    """Start what the hosts of one run need, hand out their host_vars, stop it all at the end."""

    def __init__(self, root: Path, run_dir: Path, *, python_exe: str, say: Any = None) -> None:
        self.root = root
        self.run_dir = run_dir
        self.python_exe = python_exe
        self.say = say or (lambda _t: None)
        self.report = CacheReport(mode="auto", root=str(root))
        self.squid: Squid | None = None
        self.wheels: WheelServer | None = None
        self.tunnels: list[Tunnel] = []
        self._lockfile: IO[str] | None = None

    def start(
        self,
        targets: Sequence[HostTarget],
        wheel_sets: Mapping[str, WheelSet | None],
        environment: Mapping[str, str],
        *,
        connect: Any,
        sources: RepoSources | None = None,
    ) -> dict[str, dict[str, Any]]:
        """host -> role variables; hosts missing from it fetch everything themselves.

        ``sources``: what squid may fetch (:class:`RepoSources`; none: nothing)."""
        try:
            _mkdir_passable(self.root)
            self._lockfile = (self.root / ".lock").open("w")
        except OSError as exc:  # auto never fails a run: no cache this time, and the note says why
            self.report.apt = f"off: cannot use {self.root}: {exc.strerror}"
            self.report.notes.append(
                f"the cache folder {self.root} cannot be used ({exc.strerror}): "
                "hosts fetch themselves; set install.cache_dir to a writable folder"
            )
            return {}
        try:  # one run at a time on one store: a second run goes without the cache
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.report.apt = "off: another provision run is using the cache"
            self.report.notes.append(f"the cache at {self.root} is in use by another run: hosts fetch themselves")
            return {}
        apt_local = self._start_squid(sources or RepoSources())
        keys = self._fill_wheels(wheel_sets)
        wheels_local = self._serve_wheels() if any(keys.values()) else None
        out: dict[str, dict[str, Any]] = {}
        for t in targets:
            key = keys.get(t.name)
            if t.local or not (apt_local or (wheels_local and key)):
                continue  # nothing to reach: no tunnel
            tunnel = None
            try:
                tunnel = self._open_tunnel(t, connect)
                apt_here = apt_local if apt_local and self._sources_served(t.name, tunnel) else None
                if not (apt_here or (wheels_local and key)):
                    tunnel.close()
                    continue
                apt_remote = tunnel.forward(apt_here) if apt_here else None
                wheels_remote = tunnel.forward(wheels_local) if wheels_local and key else None
            except Exception as exc:  # auto never fails a run: this host fetches itself
                if tunnel is not None:
                    tunnel.close()
                self.report.notes.append(f"{t.name}: no tunnel ({_one_line(exc)}): the host fetches itself")
                continue
            self.tunnels.append(tunnel)
            self.report.hosts.append(t.name)
            out[t.name] = host_vars(apt_remote, wheels_remote, key, environment)
        return out

    def _sources_served(self, name: str, tunnel: Tunnel) -> bool:
        """Whether squid serves every plain-http apt/dnf source of the host. One it would refuse
        (a site mirror the lock does not name, a dnf mirror list) would fail the host's package
        step with 403: such a host gets no proxy and fetches its packages itself, as without
        the cache."""
        assert self.squid is not None
        _stdin, stdout, _stderr = tunnel.client.exec_command(SOURCES_COMMAND, timeout=30)
        refused = [u for u in host_sources(stdout.read().decode(errors="replace")) if not self.squid.sources.allows(u)]
        if refused:
            self.report.notes.append(
                f"{name}: its package source {refused[0]} is not one of this run's repositories: the host fetches "
                "its packages itself (name the mirror in install.apt.mirror to cache it)"
            )
        return not refused

    def _start_squid(self, sources: RepoSources) -> int | None:
        squid = Squid(self.root, self.run_dir.name, sources)
        try:
            squid.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            self.report.apt = f"off: {_one_line(exc)}"
            self.report.notes.append(f"apt/dnf cache off: {_one_line(exc)}")
            squid.stop()
            return None
        self.squid = squid
        self.report.apt = "on"
        self.say(f"fleet cache: squid on 127.0.0.1:{squid.port} (store {squid.store})")
        return squid.port

    def _fill_wheels(self, wheel_sets: Mapping[str, WheelSet | None]) -> dict[str, str | None]:
        """host -> wheelhouse key, for hosts whose wheels are all in the wheelhouse."""
        done: dict[WheelSet, bool] = {}
        house = self.root / "wheels"
        for ws in {w for w in wheel_sets.values() if w is not None}:
            dest = house / ws.key
            dest.mkdir(parents=True, exist_ok=True)
            before = _folder_bytes(dest)
            self.say(f"fleet cache: filling the wheelhouse for {ws.key}")
            ok, why = True, ""
            with _netrc_env(ws.netrc) as env:
                for cmd in ws.download_commands(self.python_exe, dest):
                    try:
                        r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False, env=env)
                    except (OSError, subprocess.TimeoutExpired) as exc:
                        ok, why = False, _one_line(exc)
                        break
                    if r.returncode != 0:
                        ok, why = False, _last_error(r.stderr)
                        break
            self.report.wheel_bytes_added += _folder_bytes(dest) - before
            self.report.wheels[ws.key] = "on" if ok else f"off: {why}"
            if not ok:
                self.report.notes.append(f"wheelhouse {ws.key}: {why}: these hosts fetch their wheels themselves")
            done[ws] = ok
        return {h: (w.key if w is not None and done.get(w) else None) for h, w in wheel_sets.items()}

    def _serve_wheels(self) -> int:
        self.wheels = WheelServer(self.root / "wheels")
        return self.wheels.start()

    def _open_tunnel(self, target: HostTarget, connect: Any) -> Tunnel:
        transport = connect(target)
        client = getattr(transport, "client", None)
        if client is None:
            transport.close()
            raise RuntimeError("not an SSH connection")
        return Tunnel(client, target.name)

    def close(self) -> CacheReport:
        for t in self.tunnels:
            t.close()
        if self.wheels is not None:
            self.wheels.stop()
            self.report.wheels_served_bytes = self.wheels.served
        if self.squid is not None:
            self.squid.stop(keep=self.run_dir / "cache" / "squid-access.log")
            self.report.proxy = self.squid.stats()
        if self._lockfile is not None:
            self._lockfile.close()
        return self.report


@contextlib.contextmanager
def _connect(port: int) -> Iterator[None]:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=1):
        yield


@contextlib.contextmanager
def _netrc_env(netrc: str) -> Iterator[dict[str, str] | None]:
    """The environment of the controller's ``pip download``: NETRC names a 0600 file with the
    indexes' logins for as long as the downloads run (None: no logins, this process's environment)."""
    if not netrc:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="provision-netrc-") as folder:  # 0700
        path = Path(folder) / "netrc"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(netrc)
        yield {**os.environ, "NETRC": str(path)}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give ``path`` and everything under it to ``uid``; a folder already theirs is left as is
    (squid owns what it writes there, and the store can hold many thousands of files)."""
    # Never through a symlink: squid's user owns what is in the store, so a link it planted there
    # (store/00 -> /etc/shadow) must not make root give that user the link's target. lchown
    # changes the link itself, and the walk does not descend into linked folders.
    if path.is_symlink():
        raise RuntimeError(f"{path} is a symlink; the cache's folders must be real folders")
    if path.stat().st_uid == uid:
        return
    os.chown(path, uid, gid, follow_symlinks=False)
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in (*dirs, *files):
            os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)


def _user_ids(user: str) -> tuple[int, int]:
    """``user``'s uid and gid; a machine without that user cannot run squid the Debian way."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise RuntimeError(f"squid's user {user} does not exist on this machine") from None
    return entry.pw_uid, entry.pw_gid


def _mkdir_passable(path: Path) -> None:
    """Make the folder ``path`` if it is missing, 0711 whatever the umask (``up`` runs under 077):
    squid's user must pass through the cache root and ``squid-runs`` to the folders it owns. An
    existing folder keeps the mode its owner gave it (:func:`_not_traversable` says if it blocks)."""
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o711)


def _not_traversable(path: Path, uid: int) -> Path | None:
    """The first folder above ``path`` that ``uid`` cannot enter (by its mode bits), else None."""
    for parent in reversed(path.parents):
        st = parent.stat()
        if not (st.st_mode & 0o001 or (st.st_uid == uid and st.st_mode & 0o100)):
            return parent
    return None


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return text[-1] if text else "(no output)"


def _last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["pip download failed"])[-1][:200]


def _one_line(exc: BaseException) -> str:
    text = exc.reason() if isinstance(exc, ProvisionError) else str(exc)
    return (text.splitlines() or [type(exc).__name__])[0][:200]
