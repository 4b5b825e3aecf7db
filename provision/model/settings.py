"""provision.yaml's ``install:`` section as one frozen record (:class:`InstallSettings`), checked
when it is built: config loading builds it once and every stage after takes it as it is (render,
the closure, the fleet cache). The value checks it needs (a plain URL, an absolute path, a
credential pip can look up) live here too, the one home render's own checks use.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from provision.errors import BadInput
from provision.model.defaults import DEFAULT_VENV, INSTALL_METHOD_CHOICES

# A URL that reaches a command line or a YAML file as one plain value: http(s) or file, no space,
# quote, backslash or shell/Jinja character (render's checks and config's URL keys share it).
URL = re.compile(r"(https?|file)://[^\s\"'\\<>{}|^`]+")  # whole values only: fullmatch
# A control character: no value provision writes may break a line or a terminal.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TRUSTED_HOST = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]+)?$")
# Characters a netrc token cannot carry unquoted (Python's netrc, which pip's requests reads).
_NETRC_UNSAFE = re.compile(r"[\s\"'#\\]")


def check_url(value: Any, what: str) -> str:
    """One URL, the one check of every URL that reaches a run dir (install settings, the lock,
    ``--set``): http, https or file, and nothing a sources.list line or a command would read as
    more than a URL: no whitespace or line break (a second apt line), no quotes, and no square
    brackets but an IPv6 host's (apt's ``[trusted=yes]`` options)."""
    ok = isinstance(value, str) and URL.fullmatch(value) is not None  # fullmatch: `$` lets a "\n" end it
    if ok:
        try:
            host = urllib.parse.urlsplit(value).hostname or ""
        except ValueError:  # brackets that are no IPv6 host
            ok = False
        else:
            rest = value.replace(f"[{host}]", "", 1) if ":" in host else value
            ok = "[" not in rest and "]" not in rest
    if not ok:
        raise BadInput(
            f"{what} {value!r} is not one plain http(s) or file URL",
            "give one http://, https:// or file:// URL, without spaces, line breaks, quotes or [options]",
        )
    return str(value)


def check_path(value: str, what: str) -> str:
    if not value.startswith("/") or CONTROL.search(value) or "{" in value or ".." in value.split("/"):
        raise BadInput(f"{what} {value!r} is not an absolute path", f"give an absolute path such as {DEFAULT_VENV}")
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
    venv: str = DEFAULT_VENV
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
        if self.method not in INSTALL_METHOD_CHOICES:
            raise BadInput(f"install.method {self.method!r} is unknown", f"use {', '.join(INSTALL_METHOD_CHOICES)}")
        if self.reboot not in ("auto", "never"):
            raise BadInput(f"install.reboot {self.reboot!r} is unknown", "use auto or never")
        check_path(self.venv, "install.venv")
        pip = self.pip
        for key, url in (
            ("install.pip.index_url", pip.index_url),
            ("install.apt.mirror", self.apt.mirror),
            ("install.apt.proxy", self.apt.proxy),
            ("install.python_mirror", self.python_mirror),
            ("install.python_downloads_json", self.python_downloads_json),
            *(("install.pip.extra_index_urls entry", u) for u in pip.extra_index_urls),
        ):
            if url:
                check_url(url, key)
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
        if self.apt.mirror:  # apt reads the mirror's login from an auth.conf file: netrc tokens
            netrc_credential(self.apt.mirror, "install.apt.mirror")
        # uv downloads a standalone CPython without a netrc or any other login file
        # (https://docs.astral.sh/uv/reference/environment/ names none for UV_PYTHON_INSTALL_MIRROR /
        # UV_PYTHON_DOWNLOADS_JSON_URL): a login there would have to travel in the URL, so it is refused.
        for key, url in (
            ("install.python_mirror", self.python_mirror),
            ("install.python_downloads_json", self.python_downloads_json),
        ):
            if url and split_credential(url)[1] is not None:
                raise BadInput(
                    f"{key}: {split_credential(url)[0]} is given with a login, which uv cannot read from a file",
                    "serve the Python downloads without a login (on the hosts' network or as a file:// copy)",
                )


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


def netrc_credential(url: str, what: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` split (:func:`split_credential`), its login checked to fit a netrc-style file
    (pip's netrc, apt's auth.conf: whitespace-separated tokens)."""
    plain, cred = split_credential(url)
    if cred is not None and (not cred[0] or _NETRC_UNSAFE.search(cred[0] + cred[1])):
        raise BadInput(
            f"{what}: the credential in {plain} cannot go into a netrc file",
            "give user:token@ with a non-empty user and no spaces, quotes, '#' or '\\'",
        )
    return plain, cred


def index_logins(pip: PipSettings) -> tuple[PipSettings, tuple[tuple[str, str, str], ...]]:
    """``pip`` with its index URLs bare, and the (host, login, password) split off them.

    pip looks an index's login up by host name (netrc), so a host has one credential and a
    credential must be a netrc token: anything else is bad input.
    """
    by_host: dict[str, tuple[str, str]] = {}

    def bare(url: str, what: str) -> str:
        plain, cred = netrc_credential(url, what)
        if cred is None:
            return url
        host = urllib.parse.urlsplit(plain).hostname or ""
        if by_host.setdefault(host, cred) != cred:
            raise BadInput(
                f"{what}: two different credentials for the index host {host}",
                "pip looks a login up by host name (netrc): use one credential per host",
            )
        return plain

    bare_pip = PipSettings(
        bare(pip.index_url, "install.pip.index_url") if pip.index_url else pip.index_url,
        tuple(bare(u, "install.pip.extra_index_urls") for u in pip.extra_index_urls),
        # pip reads netrc for every URL it fetches, find-links pages included
        tuple(bare(u, "install.pip.find_links") for u in pip.find_links),
        pip.trusted_hosts,
    )
    return bare_pip, tuple((host, login, password) for host, (login, password) in by_host.items())
