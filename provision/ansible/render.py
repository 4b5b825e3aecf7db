"""Lock + inventory -> an Ansible run dir (``site.yml``, ``inventory.yml``, ``group_vars/``,
``ansible.cfg``, ``provision.lock``) that plain ``ansible-playbook site.yml`` runs.

Python renders only the glue; the roles under ``playbooks/roles`` are static and read what is
rendered here through their documented variables (each role's ``defaults/main.yml``).

Double templating: the templates in ``templates/`` use ``[[ ]]`` delimiters, so Ansible's
``{{ }}`` would pass through them untouched; the data parts are dumped with ``yaml.safe_dump``
(nothing can inject YAML) and refused when a string holds a Jinja marker (so nothing a user typed,
a host name, a path, a mirror URL, is ever templated by Ansible). Values are validated first, so
a bad one is a one-line ``BadInput`` rather than a broken run dir.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provision.errors import BadInput
from provision.stack.lock import write_durably

# The roles in the order site.yml runs them (DESIGN.md).
ROLES: tuple[str, ...] = (
    "preflight",
    "nvidia_driver",
    "fabric_manager",
    "cuda_toolkit",
    "cudnn",
    "python_env",
    "frameworks",
    "container_toolkit",
    "dcgm",
    "verify",
)
PYPI = "https://pypi.org/simple"
# Connection variables a user's inventory may give a host; everything else is not ours to copy.
CONNECTION_VARS = frozenset(
    {
        "ansible_host",
        "ansible_port",
        "ansible_user",
        "ansible_ssh_private_key_file",
        "ansible_connection",
        "ansible_python_interpreter",
        "ansible_ssh_common_args",
        "ansible_become",
        "ansible_become_user",
        "ansible_become_method",
        "ansible_ssh_extra_args",
    }
)

_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
_GROUP = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_:-]*$")
_URL = re.compile(r"^(https?|file)://[^\s\"'\\<>{}|^`]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# ansible.cfg values: no INI syntax, no interpolation, no line breaks.
_CFG_PATH = re.compile(r"^/[^\s%;#\x00-\x1f]*$")


_JINJA = re.compile(r"\{\{|\{%|\{#")


def dump(data: Any) -> str:
    """YAML for Ansible: plain data, refused if any string could be read as a Jinja template.

    (Tagging strings ``!unsafe`` would also stop templating, but ansible-core 2.19 turns an unsafe
    "3.10" into the float 3.1 and "570" into an int; refusing template markers keeps strings strings.)
    """
    _refuse_templates(data, "")
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)


def _refuse_templates(value: Any, where: str) -> None:
    if isinstance(value, str):
        if _JINJA.search(value):
            raise BadInput(
                f"{where or 'a value'} {value!r} contains a template marker ({{{{, {{% or {{#)",
                "remove it: values are passed to Ansible as data, never as templates",
            )
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _refuse_templates(str(k), f"{where}.{k}".strip("."))
            _refuse_templates(v, f"{where}.{k}".strip("."))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _refuse_templates(v, f"{where}[{i}]")


# --- what the user controls -------------------------------------------------------------------


@dataclass(frozen=True)
class PipSettings:
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class InstallSettings:
    """provision.yaml's ``install:`` section, as render needs it."""

    method: str = "auto"  # auto | nvidia-repo | distro
    venv: str = "/opt/provision/venv"
    pip: PipSettings = field(default_factory=PipSettings)
    apt_mirror: str | None = None
    apt_proxy: str | None = None
    reboot: str = "auto"  # auto | never
    reboot_controller: bool = False
    mok_key: str | None = None
    mok_cert: str | None = None

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
CREDENTIALS_DIR = "/root/.provision-credentials"
# Characters a netrc token cannot carry unquoted (Python's netrc, which pip's requests reads).
_NETRC_UNSAFE = re.compile(r"[\s\"'#\\]")


@dataclass(frozen=True)
class Credentials:
    """The credentials split off the install URLs (see above)."""

    netrc: tuple[tuple[str, str, str], ...] = ()  # (host, login, password) of pip's indexes
    proxy: str | None = None  # install.apt.proxy as given, credential included

    def __bool__(self) -> bool:
        return bool(self.netrc or self.proxy)

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

    def environment(self) -> dict[str, str]:
        """What the play's environment says about them: paths only, never a credential."""
        out = {}
        if self.netrc:
            out["NETRC"] = f"{CREDENTIALS_DIR}/netrc"
        if self.proxy:
            out["PIP_CONFIG_FILE"] = f"{CREDENTIALS_DIR}/pip.conf"
            out["APT_CONFIG"] = f"{CREDENTIALS_DIR}/apt.conf"
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


def _split_credentials(install: InstallSettings) -> tuple[InstallSettings, Credentials]:
    by_host: dict[str, tuple[str, str]] = {}

    def index(url: str | None, what: str) -> str | None:
        if not url:
            return url
        bare, cred = split_credential(url)
        if cred is None:
            return url
        host = urllib.parse.urlsplit(bare).hostname or ""
        if not cred[0] or _NETRC_UNSAFE.search(cred[0] + cred[1]):
            raise BadInput(
                f"{what}: the credential in {bare} cannot go into a netrc file",
                "give user:token@ with a non-empty user and no spaces, quotes, '#' or '\\'",
            )
        if by_host.setdefault(host, cred) != cred:
            raise BadInput(
                f"{what}: two different credentials for the index host {host}",
                "pip looks a login up by host name (netrc): use one credential per host",
            )
        return bare

    pip = install.pip
    bare_pip = PipSettings(
        index(pip.index_url, "install.pip.index_url"),
        tuple(str(index(u, "install.pip.extra_index_urls")) for u in pip.extra_index_urls),
        pip.find_links,
        pip.trusted_hosts,
    )
    proxy, proxy_cred = split_credential(install.apt_proxy) if install.apt_proxy else (None, None)
    creds = Credentials(
        netrc=tuple((host, login, password) for host, (login, password) in by_host.items()),
        proxy=install.apt_proxy if proxy_cred else None,
    )
    return InstallSettings(**{**install.__dict__, "pip": bare_pip, "apt_proxy": proxy}), creds


@dataclass(frozen=True)
class RunDir:
    path: Path
    files: tuple[str, ...]


def check_host_name(name: str) -> str:
    if not _HOST.match(name):
        raise BadInput(
            f"host name {name!r} cannot be used in an inventory",
            "use letters, digits, '.', '_' and '-' only",
        )
    return name


def _check_url(value: str, what: str) -> str:
    if not _URL.match(value):
        raise BadInput(f"{what} {value!r} is not a plain http(s) or file URL", "give a URL without spaces or quotes")
    return value


def _check_path(value: str, what: str) -> str:
    if not value.startswith("/") or _CONTROL.search(value) or "{" in value or ".." in value.split("/"):
        raise BadInput(f"{what} {value!r} is not an absolute path", "give an absolute path such as /opt/provision/venv")
    return value


def _check_text(value: Any, what: str) -> str:
    if not isinstance(value, str) or _CONTROL.search(value):
        raise BadInput(f"{what} must be one line of text", "remove line breaks and control characters")
    return value


def _check_version(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _VERSION.match(value):
        raise BadInput(f"the lock's {what} {value!r} is not a version", "regenerate the lock with `provision plan`")
    return value


def _check_package(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _PACKAGE.match(value):
        raise BadInput(
            f"the lock's {what} {value!r} is not a package name", "regenerate the lock with `provision plan`"
        )
    return value


def check_settings(install: InstallSettings) -> None:
    if install.method not in ("auto", "nvidia-repo", "distro"):
        raise BadInput(f"install.method {install.method!r} is unknown", "use auto, nvidia-repo or distro")
    if install.reboot not in ("auto", "never"):
        raise BadInput(f"install.reboot {install.reboot!r} is unknown", "use auto or never")
    _check_path(install.venv, "install.venv")
    for url in (install.pip.index_url, install.apt_mirror, install.apt_proxy, *install.pip.extra_index_urls):
        if url:
            _check_url(url, "URL")
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


# --- lock group -> role variables -------------------------------------------------------------


def group_vars(group: Mapping[str, Any], install: InstallSettings) -> dict[str, Any]:
    """The role variables of one lock group (every role's documented interface)."""
    host = group.get("host") or {}
    stack = group.get("stack") or {}
    packages = group.get("packages") or {}
    os_id = _check_text(host.get("os") or "", "the lock's host.os")
    distro = os_id.split("-")[0]
    family = str(packages.get("os_family") or ("debian" if distro in ("debian", "ubuntu") else distro))
    out: dict[str, Any] = {}

    driver = stack.get("driver")
    method = _method(driver, packages, install)
    uses_dkms = not (method == "distro" and distro == "ubuntu")
    out.update(_driver_vars(driver, packages, method, install, family))
    out.update(
        {
            "preflight_driver_install": driver is not None,
            "preflight_driver_uses_dkms": uses_dkms,
            "preflight_require_gpu": driver is not None,
            "preflight_mok_signing": bool(install.mok_key and install.mok_cert),
            "preflight_disk_paths": ["/", str(Path(install.venv).parent)],
        }
    )

    fm = stack.get("fabric_manager")
    out["fabric_manager_enabled"] = fm is not None
    if fm is not None:
        out["fabric_manager_version"] = _check_version(fm.get("version"), "fabric_manager.version")
        names = list(packages.get("fabric_manager") or [])
        out["fabric_manager_package"] = _fm_package(names, out["fabric_manager_version"], family)

    toolkit = stack.get("cuda_toolkit")
    out["cuda_toolkit_enabled"] = toolkit is not None
    if toolkit is not None:
        out["cuda_toolkit_version"] = _check_version(toolkit.get("version"), "cuda_toolkit.version")
        out["cuda_toolkit_method"] = method
        names = list(packages.get("cuda_toolkit") or [])
        if names and method == "nvidia-repo":
            out["cuda_toolkit_package"] = _check_package(names[0], "cuda_toolkit package")

    cudnn = stack.get("cudnn")
    out["cudnn_enabled"] = cudnn is not None
    if cudnn is not None:
        out["cudnn_version"] = _check_version(cudnn.get("version"), "cudnn.version")
        out["cudnn_cuda_major"] = _check_version(str(cudnn.get("cuda_major") or ""), "cudnn.cuda_major")
        names = [_check_package(n, "cudnn package") for n in packages.get("cudnn") or []]
        if names:
            out["cudnn_packages"] = names

    python = _check_version(stack.get("python") or host.get("python"), "python")
    out.update(
        {
            "python_env_path": install.venv,
            "python_env_python": python,
            "python_env_os_packages": _python_packages(os_id, family, python),
        }
    )
    out.update(_framework_vars(stack, packages, install))

    for extra in ("container_toolkit", "dcgm"):
        item = stack.get(extra)
        out[f"{extra}_enabled"] = item is not None
        if item is not None:
            out[f"{extra}_version"] = _check_text(str(item.get("version") or ""), f"{extra}.version")
    if stack.get("dcgm") is not None:
        out["dcgm_cuda_major"] = str(stack["dcgm"].get("cuda_major") or "")

    out.update(
        {
            "verify_driver_version": driver["version"] if driver else "",
            "verify_frameworks": _pinned_versions(out["frameworks_installs"]),
            "verify_venv": install.venv,
            "verify_stack": dict(stack),
        }
    )
    return out


def _pinned_versions(installs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """{distribution: exact version} of the pinned requirements (``tensorflow[and-cuda]==2.20.0``)."""
    out: dict[str, str] = {}
    for entry in installs:
        for req in entry["packages"]:
            name, _, version = str(req).partition("==")
            out[name.split("[")[0].strip()] = version.strip()
    return out


def _method(driver: Mapping[str, Any] | None, packages: Mapping[str, Any], install: InstallSettings) -> str:
    locked = (driver or {}).get("install_method") or (packages.get("driver") or {}).get("method")
    if locked:
        return str(locked)
    return "nvidia-repo" if install.method == "auto" else install.method


def _driver_vars(
    driver: Mapping[str, Any] | None,
    packages: Mapping[str, Any],
    method: str,
    install: InstallSettings,
    family: str,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "nvidia_driver_enabled": driver is not None,
        "nvidia_driver_reboot": install.reboot,
        "nvidia_driver_reboot_controller": install.reboot_controller,
    }
    if install.apt_mirror:
        out["nvidia_driver_debian_mirror"] = install.apt_mirror
    if install.mok_key and install.mok_cert:
        out["nvidia_driver_mok_key"] = install.mok_key
        out["nvidia_driver_mok_cert"] = install.mok_cert
    if driver is None:
        return out
    version = _check_version(driver.get("version"), "driver.version")
    flavour = driver.get("kernel_modules")
    if flavour not in ("open", "proprietary"):
        raise BadInput(f"the lock's driver.kernel_modules {flavour!r} is unknown", "regenerate the lock")
    out.update(
        {
            "nvidia_driver_method": method,
            "nvidia_driver_branch": _check_version(str(driver.get("branch")), "driver.branch"),
            "nvidia_driver_version": version,
            "nvidia_driver_kernel_modules": flavour,
        }
    )
    pkg = packages.get("driver") or {}
    names = [_check_text(n, "driver package") for n in pkg.get("names") or []]
    if pkg.get("repo"):
        out["nvidia_driver_repo_url"] = _check_url(str(pkg["repo"]).rstrip("/"), "driver repository")
    if method == "nvidia-repo":
        pinning = [n for n in names if n.startswith("nvidia-driver-pinning-")]
        rest = [n for n in names if n not in pinning]
        streams = [n.split(":", 1)[1] for n in rest if n.startswith("@nvidia-driver:")]
        if streams:
            # RHEL-like module streams (NVIDIA's packaging before the pinning packages): enable the
            # stream, then install its packages at the exact version.
            out["nvidia_driver_dnf_module_stream"] = streams[0]
            dkms = "kmod-nvidia-open-dkms" if flavour == "open" else "kmod-nvidia-latest-dkms"
            rest = ["nvidia-driver", "nvidia-driver-cuda", dkms]
        out["nvidia_driver_repo_pinning_package"] = pinning[0] if pinning else ""
        out["nvidia_driver_repo_packages"] = [_check_package(n, "driver package") for n in rest]
    else:
        # Precompiled module packages follow the kernel's version, headers the kernel's: not pinned.
        floating = [n for n in names if n.startswith(("linux-modules-nvidia-", "linux-headers-"))]
        out["nvidia_driver_distro_packages"] = [_check_package(n, "driver package") for n in names if n not in floating]
        out["nvidia_driver_distro_unpinned_packages"] = [_check_package(n, "driver package") for n in floating]
        if "nvidia-driver" in names:
            # Debian's own packaging: the module is nvidia-current[-open] (dkms.conf of bookworm's
            # nvidia-[open-]kernel-dkms), the persistence daemon its own package (contrib) and version.
            module = "nvidia-current-open" if flavour == "open" else "nvidia-current"
            out["nvidia_driver_module_name"] = module
            out["nvidia_driver_persistenced_package"] = "nvidia-persistenced"
    return out


def _fm_package(names: Sequence[str], version: str, family: str) -> str:
    if not names:
        # NVIDIA's names when the lock has none: apt nvidia-fabricmanager-<branch>, dnf nvidia-fabric-manager.
        return (
            f"nvidia-fabricmanager-{version.split('.', maxsplit=1)[0]}"
            if family == "debian"
            else "nvidia-fabric-manager"
        )
    name = str(names[0]).split("=")[0]
    name = name.split(f"-{version}")[0]
    return _check_package(name, "fabric_manager package")


def _python_packages(os_id: str, family: str, python: str) -> list[str]:
    """OS packages that give ``python<X.Y>`` with its venv module (see docs: the OS table)."""
    default = _default_python(os_id)
    if family == "debian":
        return ["python3", "python3-venv"] if python == default else [f"python{python}", f"python{python}-venv"]
    return ["python3"] if python == default else [f"python{python}"]


def _default_python(os_id: str) -> str | None:
    try:
        from provision.matrix import load

        return load().os_release(os_id).default_python
    except BadInput:
        return None


def _framework_vars(stack: Mapping[str, Any], packages: Mapping[str, Any], install: InstallSettings) -> dict[str, Any]:
    frameworks = stack.get("frameworks") or {}
    pip = packages.get("pip") or {}
    requirements = list(pip.get("requirements") or [])
    if not requirements:  # a lock without packages.pip: exact pins from the stack
        requirements = [f"{name}=={fw['version']}" for name, fw in frameworks.items()]
    for req in requirements:
        _check_text(req, "framework requirement")
        if "==" not in req or " " in req.strip():
            raise BadInput(f"the lock's framework requirement {req!r} is not an exact pin", "regenerate the lock")
    mirror = install.pip.index_url

    def mirrored(url: str) -> str:
        return mirror if mirror and url.rstrip("/") == PYPI else url

    index = str(pip.get("index_url") or "")
    extras = [mirrored(str(u)) for u in pip.get("extra_index_urls") or []] + list(install.pip.extra_index_urls)
    for url in [index, *extras]:
        if url:
            _check_url(url, "index URL")
    return {
        "frameworks_enabled": bool(requirements),
        "frameworks_venv": install.venv,
        "frameworks_installs": [{"packages": requirements, "index_url": mirrored(index)}] if requirements else [],
        "frameworks_index_url": mirror or "",
        "frameworks_extra_index_urls": extras,
        "frameworks_find_links": list(install.pip.find_links),
        "frameworks_trusted_hosts": list(install.pip.trusted_hosts),
    }


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """Role variables set on top of the rendered ones (air-gapped mirrors, tests).

    Checked against the roles' argument specs, their documented interface, before any host is
    touched: Ansible would check the same types, but only when the play reaches the role, after
    the roles before it have changed the host.
    """
    specs = role_argument_specs()
    for name, value in overrides.items():
        spec = specs.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(specs), n=3, cutoff=0.85)
            hint = f"did you mean {', '.join(close)}?" if close else "use a name from a role's defaults/main.yml"
            raise BadInput(f"{name!r} is not a role variable", hint)
        problem = _spec_problem(value, spec)
        if problem:
            raise BadInput(f"--set {name}: {problem}", "see the role's variables in the README")


_KIND_NAMES = {
    "bool": "a boolean",
    "int": "an integer",
    "list": "a list",
    "dict": "a mapping",
    "str": "a string",
    "path": "a path",
}
# The strings Ansible's argument spec validation takes as booleans (module_utils.parsing.convert_bool).
_BOOL_STRINGS = {"y", "yes", "on", "1", "true", "t", "n", "no", "off", "0", "false", "f"}


def _spec_problem(value: Any, spec: Mapping[str, Any]) -> str | None:
    """Why ``value`` would fail the role's argument spec (the checks Ansible makes), or None."""
    kind = spec.get("type", "str")
    if value is None or kind == "raw":
        return None
    scalar = isinstance(value, (str, int, float, bool))
    ok = {
        "bool": isinstance(value, bool) or (isinstance(value, (str, int)) and str(value).lower() in _BOOL_STRINGS),
        "int": (isinstance(value, int) and not isinstance(value, bool))
        or (isinstance(value, str) and re.fullmatch(r"-?\d+", value) is not None),
        "list": isinstance(value, (list, str)),
        "dict": isinstance(value, dict),
    }.get(kind, scalar)  # str, path: any scalar (Ansible converts it)
    if not ok:
        return f"{value!r} is not {_KIND_NAMES.get(kind, kind)}"
    choices = spec.get("choices")
    if choices and value not in choices:
        return f"{value!r} is not one of {', '.join(map(str, choices))}"
    return None


@functools.cache
def role_argument_specs() -> dict[str, dict[str, Any]]:
    """Every role variable's argument spec (meta/argument_specs.yml), by variable name."""
    out: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        path = Path(default_roles_path()) / role / "meta" / "argument_specs.yml"
        out.update(yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"])
    return out


# --- the run dir ------------------------------------------------------------------------------


def group_name(index: int, group: Mapping[str, Any]) -> str:
    name = str(group.get("name") or f"group{index + 1}")
    name = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or f"group{index + 1}"
    if not name[0].isalpha():
        name = f"g_{name}"
    return name[:62]


def render_files(
    lock: Mapping[str, Any],
    hosts: Mapping[str, Mapping[str, Any]],
    install: InstallSettings,
    *,
    roles_path: str,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The run dir's files as {relative path: text}; pure, so golden tests compare it byte for byte.

    ``hosts`` maps each host of the lock to its connection variables (``ansible_host``, ...).
    """
    import jinja2

    install, creds = split_credentials(install)
    overrides = dict(overrides or {})
    check_overrides(overrides)
    if not _CFG_PATH.match(roles_path):
        raise BadInput(f"roles path {roles_path!r} cannot go into ansible.cfg", "install provision under a plain path")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_templates())),
        variable_start_string="[[",
        variable_end_string="]]",
        block_start_string="[%",
        block_end_string="%]",
        comment_start_string="[#",
        comment_end_string="#]",
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    files: dict[str, str] = {}
    inventory: dict[str, Any] = {}
    names: list[str] = []
    prompts: list[dict[str, Any]] = []  # one vars_prompt per host with a sudo password
    for i, group in enumerate(lock.get("groups") or []):
        name = group_name(i, group)
        if name in names:
            name = f"{name}_{i + 1}"
        names.append(name)
        members: dict[str, Any] = {}
        for host in group.get("hosts") or []:
            check_host_name(str(host))
            members[str(host)] = _connection(str(host), hosts.get(str(host), {}))
            if any(hosts.get(str(host), {}).get(k) is not None for k in BECOME_PASSWORD_VARS):
                prompts.append(
                    {
                        "name": f"provision_become_password_{len(prompts) + 1}",
                        "prompt": become_prompt(str(host)),
                        "private": True,
                        "unsafe": True,
                    }
                )
                members[str(host)]["ansible_become_password"] = "{{ " + prompts[-1]["name"] + " }}"
        inventory[name] = {"hosts": members}
        data = {**group_vars(group, install), **overrides}
        files[f"group_vars/{name}.yml"] = env.get_template("data.yml.j2").render(
            what=f"role variables of host group {name} (from provision.lock)", body=dump(data)
        )
    if not names:
        raise BadInput("the lock has no host groups", "run `provision plan` with at least one host")
    all_vars: dict[str, Any] = {}
    environment = {"http_proxy": install.apt_proxy, "https_proxy": install.apt_proxy} if install.apt_proxy else {}
    all_vars["provision_environment"] = {**environment, **creds.environment()}
    if creds:
        all_vars["provision_credentials_dir"] = CREDENTIALS_DIR
        files[SECRETS_FILE] = env.get_template("data.yml.j2").render(
            what="the credentials of install.pip / install.apt.proxy (0600: keep it private)",
            body=dump({"provision_credential_files": creds.files()}),
        )
    files["group_vars/all.yml"] = env.get_template("data.yml.j2").render(
        what="settings for every host", body=dump(all_vars)
    )
    # The user's values are checked for template markers; the one template added is ours: a
    # sudo password is never written here, only the name of the prompt that answers it.
    _refuse_templates(
        {
            h: {k: v for k, v in c.items() if k != "ansible_become_password"}
            for g in inventory.values()
            for h, c in g["hosts"].items()
        },
        "inventory",
    )
    files["inventory.yml"] = env.get_template("data.yml.j2").render(
        what="the hosts of provision.lock, by host group"
        + ("; a sudo password comes from the play's prompt, never from a file" if prompts else ""),
        body=yaml.safe_dump({"all": {"children": inventory}}, sort_keys=False, default_flow_style=False, width=1000),
    )
    play: dict[str, Any] = {
        "name": "Provision NVIDIA GPU hosts",
        "hosts": ":".join(names),
        "become": True,
        "gather_facts": True,
        "environment": "{{ provision_environment }}",
    }
    if prompts:
        # ansible-runner answers these from memory (run_playbook's passwords); plain
        # `ansible-playbook site.yml` asks at the terminal. An environment variable would be
        # written to disk: ansible-runner copies its whole env into artifacts/<id>/command.
        play["vars_prompt"] = prompts
    if creds:
        play.update(_credentials_play())
    else:
        play["roles"] = [{"role": r} for r in ROLES]
    # the one string here that Ansible must template is ours: dump it without the marker check
    body = yaml.safe_dump([play], sort_keys=False, default_flow_style=False, width=1000)
    files["site.yml"] = env.get_template("site.yml.j2").render(body=body)
    nhosts = sum(len(g.get("hosts") or []) for g in lock.get("groups") or [])
    files["ansible.cfg"] = env.get_template("ansible.cfg.j2").render(roles_path=roles_path, forks=_forks(nhosts))
    return files


# The inventory variables that carry a host's sudo password (HostTarget.become_password).
BECOME_PASSWORD_VARS = ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass")


def become_prompt(host: str) -> str:
    """The text the play prompts with for ``host``'s sudo password (vars_prompt appends ': ')."""
    return f"sudo password for {host}"


def become_answers(passwords: Mapping[str, str]) -> dict[str, str]:
    """{host: password} as ansible-runner's ``passwords``: {regex of the prompt: answer}."""
    return {rf"{re.escape(become_prompt(host))}:\s*$": pw for host, pw in passwords.items()}


SECRETS_FILE = "secrets.yml"


def _credentials_play() -> dict[str, Any]:
    """The play's body when the run has credentials: the roles inside a block whose ``always``
    removes the credentials from the host, also when a role fails (post_tasks would not run).

    The credential tasks are transient (the host ends as it started): never reported as changes,
    so a converged host still reports 0, and run in check mode too, so `up --check` reaches the
    same mirrors. ``no_log`` keeps the files' content out of the events and the runner's artifacts.
    """
    folder = "{{ provision_credentials_dir }}"
    transient = {"check_mode": False, "changed_when": False}
    place = [
        {
            "name": "Make the root-only folder for this run's credentials",
            "ansible.builtin.file": {
                "path": folder,
                "state": "directory",
                "owner": "root",
                "group": "root",
                "mode": "0700",
            },
            **transient,
        },
        {
            "name": "Write this run's credentials for pip and apt (root only; removed at the end of the play)",
            "ansible.builtin.copy": {
                "dest": folder + "/{{ item.name }}",
                "content": "{{ item.content }}",
                "owner": "root",
                "group": "root",
                "mode": "0600",
            },
            "loop": "{{ provision_credential_files }}",
            "loop_control": {"label": "{{ item.name }}"},
            "no_log": True,
            **transient,
        },
    ]
    roles = [{"name": f"Role {r}", "ansible.builtin.import_role": {"name": r}} for r in ROLES]
    remove = [
        {
            "name": "Remove this run's credentials from the host",
            "ansible.builtin.file": {"path": folder, "state": "absent"},
            **transient,
        }
    ]
    return {
        "vars_files": [SECRETS_FILE],
        "tasks": [
            {
                "name": "Apply the roles with this run's credentials on the host",
                "block": place + roles,
                "always": remove,
            }
        ],
    }


def _forks(hosts: int) -> int:
    # One fork per host up to 50: most of a run is waiting on apt/pip on the hosts, not on the controller.
    return max(5, min(50, hosts))


def _connection(host: str, given: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in CONNECTION_VARS:
            continue
        if key == "ansible_port":
            try:
                out[key] = int(value)
            except (TypeError, ValueError):
                raise BadInput(f"host {host}: ansible_port {value!r} is not a number", "give a port number") from None
        elif isinstance(value, bool):
            out[key] = value
        else:
            out[key] = _check_text(str(value), f"host {host}: {key}")
    return out


def _templates() -> Path:
    from provision.resources import templates_dir

    return templates_dir()


def default_roles_path() -> str:
    from provision.resources import playbooks_dir

    return str(playbooks_dir() / "roles")


def ensure_dir(path: Path, option: str) -> None:
    """Create ``path`` or say, as bad input, why it cannot be (before anything is written)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".provision-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BadInput(f"cannot write to {path}: {exc.strerror or exc}", f"give {option} a writable folder") from exc


# Written by `plan` into every run dir it makes: how a later `plan --out` tells its own run dir
# (re-rendered in place, stale group_vars/*.yml removed) from a folder of the user's (refused).
RUN_DIR_MARKER = ".provision-run-dir"
_MARKER_TEXT = (
    "# This folder is a provision run dir: `provision plan --out` re-renders it in place and removes\n"
    "# group_vars/*.yml it did not write. Delete this file and plan will refuse to write here.\n"
)
# What every run dir from before the marker held (render_files always writes these three).
_UNMARKED_RUN_DIR = ("provision.lock", "ansible.cfg", "site.yml")


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a run dir `plan` wrote (marked, or from a release before the marker)."""
    return (path / RUN_DIR_MARKER).is_file() or all((path / name).is_file() for name in _UNMARKED_RUN_DIR)


def check_out_dir(out: Path, option: str = "--out") -> None:
    """``out`` may be missing, empty, or one of plan's run dirs; anything else is the user's folder.

    Writing a run dir replaces its group_vars/*.yml, so a folder that merely exists (an Ansible
    project, a home directory) is refused before any host is contacted or any file written.
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise BadInput(f"{option} {out} is a file, not a folder", f"give {option} a new or empty folder")
    try:
        empty = next(out.iterdir(), None) is None
    except OSError as exc:
        raise BadInput(
            f"cannot read {option} {out}: {exc.strerror or exc}", f"give {option} a readable folder"
        ) from None
    if not empty and not is_run_dir(out):
        raise BadInput(
            f"{option} {out} is a non-empty folder that is not a provision run dir (plan would replace its files)",
            f"give {option} a new or empty folder, or a run dir an earlier `provision plan` wrote",
        )


def write_run_dir(
    out: Path,
    lock: Mapping[str, Any],
    lock_text: str,
    hosts: Mapping[str, Mapping[str, Any]],
    install: InstallSettings,
    *,
    overrides: Mapping[str, Any] | None = None,
    roles_path: str | None = None,
) -> RunDir:
    """Render and write the run dir (replacing the files it owns, keeping anything else there)."""
    files = render_files(lock, hosts, install, roles_path=roles_path or default_roles_path(), overrides=overrides)
    check_out_dir(out)
    ensure_dir(out, "--out")
    private_dir(out)
    write_private(out / RUN_DIR_MARKER, _MARKER_TEXT)
    stale = out / "group_vars"
    if stale.is_dir():
        for old in stale.glob("*.yml"):
            old.unlink()
    (out / SECRETS_FILE).unlink(missing_ok=True)  # a run without credentials keeps none from before
    for rel, text in files.items():
        target = out / rel
        private_dir(target.parent)
        write_private(target, text)
    write_durably(out / "provision.lock", lock_text)  # the run dir's copy: as durable as --lock's (0600)
    return RunDir(out, tuple(sorted([*files, "provision.lock"])))


def private_dir(path: Path) -> None:
    """Make ``path`` (and the folders it needs) and close it to group and others (0700 at most).

    A run dir holds the credentials' secrets.yml, the inventory and the runner's artifacts: only
    the user running provision (and root) may enter it.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        path.chmod(mode & 0o700)


@contextmanager
def private_umask() -> Iterator[None]:
    """Files and folders made meanwhile (by this process and by the programs it starts, which
    inherit the umask: ansible-playbook writing the runner's artifacts) are their owner's only."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def write_private(path: Path, text: str) -> None:
    """Write ``path`` readable by its owner only (0600), created so: never readable in between."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT: set it
        f.write(text)
