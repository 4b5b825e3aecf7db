"""What the user controls of a run: ``install:`` as render needs it (:class:`InstallSettings`),
its checks, and the credentials split off its URLs (:class:`Credentials`: never in group_vars,
never in argv).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from provision.ansible.checks import _check_path, _check_url
from provision.errors import BadInput
from provision.model.defaults import DEFAULT_VENV, INSTALL_METHOD_CHOICES


@dataclass(frozen=True)
class PipSettings:
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()


def pip_sources(
    extra_index_urls: Sequence[str], find_links: Sequence[str], trusted_hosts: Sequence[str], *, no_index: bool = False
) -> list[str]:
    """pip's options for where packages come from besides the main index, as the frameworks role
    passes them: the fleet cache's ``pip download`` and python_env's uv install say the same."""
    out = ["--no-index"] if no_index else [f"--extra-index-url={u}" for u in extra_index_urls]
    out += [f"--find-links={u}" for u in find_links]
    out += [f"--trusted-host={h}" for h in trusted_hosts]
    return out


@dataclass(frozen=True)
class InstallSettings:
    """provision.yaml's ``install:`` section, as render needs it."""

    method: str = "auto"  # auto | nvidia-repo | distro
    venv: str = DEFAULT_VENV
    pip: PipSettings = field(default_factory=PipSettings)
    apt_mirror: str | None = None
    apt_proxy: str | None = None
    reboot: str = "auto"  # auto | never
    reboot_controller: bool = False
    mok_key: str | None = None
    mok_cert: str | None = None
    python_mirror: str | None = None  # install.python_mirror (uv's python-install-mirror)
    python_downloads_json: str | None = None  # install.python_downloads_json (uv's python-downloads-json-url)
    installer: str = "auto"  # install.installer: auto | uv | pip (the closure's installer on hosts)

    @classmethod
    def from_config(cls, install: Any) -> InstallSettings:
        """From :class:`provision.config.InstallConfig` (duck-typed: render does not import config)."""
        pip = install.pip
        return cls(
            method=install.method,
            venv=install.venv,
            pip=PipSettings(
                pip.index_url, tuple(pip.extra_index_urls), tuple(pip.find_links), tuple(pip.trusted_hosts)
            ),
            apt_mirror=install.apt.mirror,
            apt_proxy=install.apt.proxy,
            reboot=install.reboot,
            python_mirror=install.python_mirror,
            python_downloads_json=install.python_downloads_json,
            installer=install.installer,
        )


# --- credentials: never in group_vars, never in argv -------------------------------------------
#
# A user:token@ in install.pip.index_url / extra_index_urls or install.apt.proxy is split off its
# URL. The URL goes into group_vars without it; the credential goes into the run dir's
# secrets.yml (0600, read by site.yml's vars_files, so plain `ansible-playbook site.yml` still
# runs) and, during the play, into root-only files on the host that pip and apt read themselves:
#   - pip: a netrc file named by NETRC (pip asks requests' get_netrc_auth for an index host's
#     login: https://pip.pypa.io/en/stable/topics/authentication/#netrc-support), and for the
#     proxy a config file named by PIP_CONFIG_FILE with `proxy =` (the --proxy option:
#     https://pip.pypa.io/en/stable/topics/configuration/#environment-variables);
#   - apt: a configuration file named by APT_CONFIG with Acquire::http(s)::Proxy, credential
#     included (apt.conf(5), "the standard form of http://[[user][:pass]@]host[:port]/"). apt
#     reads APT_CONFIG first, then /etc/apt/apt.conf.d/ and /etc/apt/apt.conf (apt.conf(5),
#     DESCRIPTION), so a host's own Acquire::http::Proxy still wins, as it wins over http_proxy.
# Not the environment: Ansible puts a task's `environment:` into the command line it runs over
# SSH (`VAR=value /usr/bin/python3 ...`), visible in `ps` on the controller and the host. Only the
# files' paths travel that way. site.yml removes the folder at the end of the play, failed or not.
# `up` adds its run id (``/root/.provision-credentials-<run>``): one folder per run.
CREDENTIALS_DIR = "/root/.provision-credentials"
# Characters a netrc token cannot carry unquoted (Python's netrc, which pip's requests reads).
_NETRC_UNSAFE = re.compile(r"[\s\"'#\\]")
# The role variables only secrets.yml may give (Credentials.role_vars): `--set` of one is refused.
CREDENTIAL_VARS = frozenset({"nvidia_driver_debian_mirror_auth"})


@dataclass(frozen=True)
class Credentials:
    """The credentials split off the install URLs (see above)."""

    # repr=False: a traceback (--debug) or a log line that prints the object shows no credential
    netrc: tuple[tuple[str, str, str], ...] = field(default=(), repr=False)  # (host, login, password): pip's
    proxy: str | None = field(default=None, repr=False)  # install.apt.proxy as given, credential included
    apt_auth: str = field(default="", repr=False)  # apt_auth.conf(5) text of install.apt.mirror's login

    def __bool__(self) -> bool:
        return bool(self.netrc or self.proxy or self.apt_auth)

    def role_vars(self) -> dict[str, str]:
        """The role variables that carry a credential (:data:`CREDENTIAL_VARS`): secrets.yml
        gives them (the play's vars_files), never group_vars."""
        return {"nvidia_driver_debian_mirror_auth": self.apt_auth} if self.apt_auth else {}

    def files(self) -> list[dict[str, str]]:
        """The files site.yml writes into :data:`CREDENTIALS_DIR` on each host (name, content)."""
        out = []
        if self.netrc:
            out.append({"name": "netrc", "content": netrc_text(self.netrc)})
        if self.proxy:
            out.append({"name": "pip.conf", "content": f"[global]\nproxy = {self.proxy}\n"})
            out.append(
                {
                    "name": "apt.conf",
                    "content": f'Acquire::http::Proxy "{self.proxy}";\nAcquire::https::Proxy "{self.proxy}";\n',
                }
            )
        return out

    def environment(self, folder: str = CREDENTIALS_DIR) -> dict[str, str]:
        """What the play's environment says about them (in ``folder`` on the host): paths only,
        never a credential."""
        out = {}
        if self.netrc:
            out["NETRC"] = f"{folder}/netrc"
        if self.proxy:
            out["PIP_CONFIG_FILE"] = f"{folder}/pip.conf"
            out["APT_CONFIG"] = f"{folder}/apt.conf"
        return out


def netrc_text(entries: Sequence[tuple[str, str, str]]) -> str:
    return "".join(f"machine {host} login {login} password {password}\n" for host, login, password in entries)


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


def split_credentials(install: InstallSettings) -> tuple[InstallSettings, Credentials]:
    """The settings with every URL bare, and the credentials that were in them."""
    check_settings(install)
    return _split_credentials(install)


def _netrc_credential(url: str, what: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` split (:func:`split_credential`), its login checked to fit a netrc-style file
    (pip's netrc, apt's auth.conf: whitespace-separated tokens)."""
    bare, cred = split_credential(url)
    if cred is not None and (not cred[0] or _NETRC_UNSAFE.search(cred[0] + cred[1])):
        raise BadInput(
            f"{what}: the credential in {bare} cannot go into a netrc file",
            "give user:token@ with a non-empty user and no spaces, quotes, '#' or '\\'",
        )
    return bare, cred


def _apt_auth(url: str) -> str:
    """install.apt.mirror's login as apt_auth.conf(5) reads it: the machine with its scheme (an
    entry without one matches https only) and path (the login is for this mirror alone)."""
    bare, cred = _netrc_credential(url, "install.apt.mirror")
    if cred is None:
        return ""
    parts = urllib.parse.urlsplit(bare)
    return f"machine {parts.scheme}://{parts.netloc}{parts.path.rstrip('/')} login {cred[0]} password {cred[1]}\n"


def _split_credentials(install: InstallSettings) -> tuple[InstallSettings, Credentials]:
    by_host: dict[str, tuple[str, str]] = {}

    def index(url: str | None, what: str) -> str | None:
        if not url:
            return url
        bare, cred = _netrc_credential(url, what)
        if cred is None:
            return url
        host = urllib.parse.urlsplit(bare).hostname or ""
        if by_host.setdefault(host, cred) != cred:
            raise BadInput(
                f"{what}: two different credentials for the index host {host}",
                "pip looks a login up by host name (netrc): use one credential per host",
            )
        return bare

    # uv downloads a standalone CPython without a netrc or any other login file
    # (https://docs.astral.sh/uv/reference/environment/ names none for UV_PYTHON_INSTALL_MIRROR /
    # UV_PYTHON_DOWNLOADS_JSON_URL): a login there would have to travel in the URL, so it is refused.
    for key, url in (
        ("install.python_mirror", install.python_mirror),
        ("install.python_downloads_json", install.python_downloads_json),
    ):
        if url and split_credential(url)[1] is not None:
            raise BadInput(
                f"{key}: {split_credential(url)[0]} is given with a login, which uv cannot read from a file",
                "serve the Python downloads without a login (on the hosts' network or as a file:// copy)",
            )
    pip = install.pip
    bare_pip = PipSettings(
        index(pip.index_url, "install.pip.index_url"),
        tuple(str(index(u, "install.pip.extra_index_urls")) for u in pip.extra_index_urls),
        # pip reads netrc for every URL it fetches, find-links pages included
        tuple(str(index(u, "install.pip.find_links")) for u in pip.find_links),
        pip.trusted_hosts,
    )
    proxy, proxy_cred = split_credential(install.apt_proxy) if install.apt_proxy else (None, None)
    mirror = split_credential(install.apt_mirror)[0] if install.apt_mirror else None
    creds = Credentials(
        netrc=tuple((host, login, password) for host, (login, password) in by_host.items()),
        proxy=install.apt_proxy if proxy_cred else None,
        apt_auth=_apt_auth(install.apt_mirror) if install.apt_mirror else "",
    )
    bare = {"pip": bare_pip, "apt_proxy": proxy, "apt_mirror": mirror}
    return InstallSettings(**{**install.__dict__, **bare}), creds


def check_settings(install: InstallSettings) -> None:
    if install.method not in INSTALL_METHOD_CHOICES:
        raise BadInput(f"install.method {install.method!r} is unknown", "use auto, nvidia-repo or distro")
    if install.reboot not in ("auto", "never"):
        raise BadInput(f"install.reboot {install.reboot!r} is unknown", "use auto or never")
    _check_path(install.venv, "install.venv")
    for key, url in (
        ("install.pip.index_url", install.pip.index_url),
        ("install.apt.mirror", install.apt_mirror),
        ("install.apt.proxy", install.apt_proxy),
        ("install.python_mirror", install.python_mirror),
        ("install.python_downloads_json", install.python_downloads_json),
        *(("install.pip.extra_index_urls entry", u) for u in install.pip.extra_index_urls),
    ):
        if url:
            _check_url(url, key)
    for link in install.pip.find_links:
        if not link.startswith("/"):
            _check_url(link, "install.pip.find_links entry")
        else:
            _check_path(link, "install.pip.find_links entry")
    for host in install.pip.trusted_hosts:
        if not re.match(r"^[A-Za-z0-9.-]+(:[0-9]+)?$", host):
            raise BadInput(f"install.pip.trusted_hosts entry {host!r} is not a host name", "give host or host:port")
    for path in (install.mok_key, install.mok_cert):
        if path:
            _check_path(path, "MOK key path")
    _split_credentials(install)  # a credential pip cannot look up is bad input before any host is probed
