"""provision.yaml's ``install:`` section as one frozen record (:class:`InstallSettings`), checked
when it is built: config loading builds it once and every stage after takes it as it is (render,
the closure, the fleet cache). The value checks it needs (a plain URL, an absolute path, a
credential pip can look up) live here too, the one home render's own checks use.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field

from provision.errors import BadInput

# A URL that reaches a command line or a YAML file as one plain value: http(s) or file, no space,
# quote, backslash or shell/Jinja character (render's checks and config's URL keys share it).
URL = re.compile(r"^(https?|file)://[^\s\"'\\<>{}|^`]+$")
# A control character: no value provision writes may break a line or a terminal.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TRUSTED_HOST = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]+)?$")
# Characters a netrc token cannot carry unquoted (Python's netrc, which pip's requests reads).
_NETRC_UNSAFE = re.compile(r"[\s\"'#\\]")


def check_url(value: str, what: str) -> str:
    if not URL.match(value):
        raise BadInput(f"{what} {value!r} is not a plain http(s) or file URL", "give a URL without spaces or quotes")
    return value


def check_path(value: str, what: str) -> str:
    if not value.startswith("/") or CONTROL.search(value) or "{" in value or ".." in value.split("/"):
        raise BadInput(f"{what} {value!r} is not an absolute path", "give an absolute path such as /opt/provision/venv")
    return value


@dataclass(frozen=True)
class PipSettings:
    """``install.pip``: where hosts install wheels from."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class AptSettings:
    """``install.apt``: apt's sources on Debian and Ubuntu."""

    mirror: str | None = None
    proxy: str | None = None


@dataclass(frozen=True)
class InstallSettings:
    """provision.yaml's ``install:`` (and ``--reboot-controller``), valid once built.

    The choice keys' words are checked by config loading, which names the key and the file; the
    checks here are the ones render relied on (paths, URLs, hosts, credentials), so a record
    built in code is held to them too.
    """

    method: str = "auto"  # auto | nvidia-repo | distro
    venv: str = "/opt/provision/venv"
    pip: PipSettings = field(default_factory=PipSettings)
    apt: AptSettings = field(default_factory=AptSettings)
    reboot: str = "auto"  # auto | never
    cache: str = "auto"  # auto | off: the fleet cache (provision/fleet/cache/)
    cache_dir: str | None = None  # where it keeps packages and wheels between runs
    python_source: str = "auto"  # auto | os | standalone: where the venv's Python comes from
    # A mirror of python-build-standalone's release downloads (uv's python-install-mirror) and a
    # download list of the site's own (uv's python-downloads-json-url): air-gapped sites
    python_mirror: str | None = None
    python_downloads_json: str | None = None
    # auto | always | never: the lock's wheel closure (provision/fleet/closure.py); auto resolves
    # it where hosts are probed and leaves it out of --assume plans, which reach nothing
    lock_closure: str = "auto"
    # auto | uv | pip: what installs the closure's hashed lists on hosts (auto: uv for a closure)
    installer: str = "auto"
    reboot_controller: bool = False  # --reboot-controller: the machine running Ansible may reboot
    mok_key: str | None = None
    mok_cert: str | None = None

    def __post_init__(self) -> None:
        if self.method not in ("auto", "nvidia-repo", "distro"):
            raise BadInput(f"install.method {self.method!r} is unknown", "use auto, nvidia-repo or distro")
        if self.reboot not in ("auto", "never"):
            raise BadInput(f"install.reboot {self.reboot!r} is unknown", "use auto or never")
        check_path(self.venv, "install.venv")
        pip = self.pip
        for url in (pip.index_url, self.apt.mirror, self.apt.proxy, *pip.extra_index_urls):
            if url:
                check_url(url, "URL")
        for link in pip.find_links:
            if not link.startswith("/"):
                check_url(link, "install.pip.find_links entry")
            else:
                check_path(link, "install.pip.find_links entry")
        for host in pip.trusted_hosts:
            if not _TRUSTED_HOST.match(host):
                raise BadInput(f"install.pip.trusted_hosts entry {host!r} is not a host name", "give host or host:port")
        for path in (self.mok_key, self.mok_cert):
            if path:
                check_path(path, "MOK key path")
        index_logins(pip)  # a credential pip cannot look up is bad input before any host is probed


def split_credential(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http://user:token@host:port/path`` -> (``http://host:port/path``, (user, token))."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    login = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), (login, password)


def index_logins(pip: PipSettings) -> tuple[PipSettings, tuple[tuple[str, str, str], ...]]:
    """``pip`` with its index URLs bare, and the (host, login, password) split off them.

    pip looks an index's login up by host name (netrc), so a host has one credential and a
    credential must be a netrc token: anything else is bad input.
    """
    by_host: dict[str, tuple[str, str]] = {}

    def bare(url: str, what: str) -> str:
        plain, cred = split_credential(url)
        if cred is None:
            return url
        host = urllib.parse.urlsplit(plain).hostname or ""
        if not cred[0] or _NETRC_UNSAFE.search(cred[0] + cred[1]):
            raise BadInput(
                f"{what}: the credential in {plain} cannot go into a netrc file",
                "give user:token@ with a non-empty user and no spaces, quotes, '#' or '\\'",
            )
        if by_host.setdefault(host, cred) != cred:
            raise BadInput(
                f"{what}: two different credentials for the index host {host}",
                "pip looks a login up by host name (netrc): use one credential per host",
            )
        return plain

    bare_pip = PipSettings(
        bare(pip.index_url, "install.pip.index_url") if pip.index_url else pip.index_url,
        tuple(bare(u, "install.pip.extra_index_urls") for u in pip.extra_index_urls),
        pip.find_links,
        pip.trusted_hosts,
    )
    return bare_pip, tuple((host, login, password) for host, (login, password) in by_host.items())
