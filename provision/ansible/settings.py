"""What the user controls of a run, as render needs it: pip's source options, and the credentials
split off the install URLs (:class:`Credentials`: never in group_vars,
never in argv).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from provision.model.settings import AptSettings, InstallSettings, index_logins, netrc_credential, split_credential


def pip_sources(
    extra_index_urls: Sequence[str], find_links: Sequence[str], trusted_hosts: Sequence[str], *, no_index: bool = False
) -> list[str]:
    """pip's options for where packages come from besides the main index, as the frameworks role
    passes them: the fleet cache's ``pip download`` and python_env's uv install say the same."""
    out = ["--no-index"] if no_index else [f"--extra-index-url={u}" for u in extra_index_urls]
    out += [f"--find-links={u}" for u in find_links]
    out += [f"--trusted-host={h}" for h in trusted_hosts]
    return out


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


def split_credentials(install: InstallSettings) -> tuple[InstallSettings, Credentials]:
    """The settings with every URL bare, and the credentials that were in them (the record was
    checked when it was built, credentials included: :func:`provision.model.settings.index_logins`)."""
    bare_pip, netrc = index_logins(install.pip)
    apt = install.apt
    proxy, proxy_cred = split_credential(apt.proxy) if apt.proxy else (None, None)
    mirror = split_credential(apt.mirror)[0] if apt.mirror else None
    creds = Credentials(
        netrc=netrc,
        proxy=apt.proxy if proxy_cred else None,
        apt_auth=_apt_auth(apt.mirror) if apt.mirror else "",
    )
    return replace(install, pip=bare_pip, apt=AptSettings(mirror, proxy)), creds


def _apt_auth(url: str) -> str:
    """install.apt.mirror's login as apt_auth.conf(5) reads it: the machine with its scheme (an
    entry without one matches https only) and path (the login is for this mirror alone)."""
    bare, cred = netrc_credential(url, "install.apt.mirror")
    if cred is None:
        return ""
    parts = urllib.parse.urlsplit(bare)
    return f"machine {parts.scheme}://{parts.netloc}{parts.path.rstrip('/')} login {cred[0]} password {cred[1]}\n"
