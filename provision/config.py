"""``provision.yaml``: its schema (docs/explanation/design.md, "Config file") and validation into typed values.

Every key is optional. An unknown key, a value of the wrong type or an unknown choice is bad
input (exit 2) with the dotted path of the key and, for a misspelt key, the nearest known one.
The ``stack:`` section becomes the resolver's request (:meth:`StackConfig.as_request_args`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import BadInput
from provision.files import load_yaml
from provision.model.defaults import DEFAULT_VENV, INSTALL_METHOD_CHOICES
from provision.model.settings import AptSettings, InstallSettings, PipSettings, check_url
from provision.stack.request import DRIVER_FORMS, DRIVER_SPEC, PYTHON_SOURCES

# install.lock_closure's choices, the default first (docs/explanation/design.md, "The lock")
LOCK_CLOSURE = ("auto", "always", "never")
# install.installer's choices, the default first: what installs the lock's wheel closure on hosts
# (provision/ansible/role_vars.py installer(); docs/explanation/design.md, "The lock")
INSTALLERS = ("auto", "uv", "pip")

DRIVER_WORDS = ("auto", "none")


@dataclass(frozen=True)
class StackConfig:
    frameworks: tuple[str, ...] = ()
    driver: str = "auto"  # auto | none | "580" | "580.95.05"
    kernel_modules: str = "auto"  # auto | open | proprietary
    cuda_toolkit: str = "none"  # none | "12.8"
    cudnn: str = "none"  # none | "9.10.2.21"
    python: str = "auto"  # auto | "3.11"
    torch_index: str = "auto"  # auto | pypi | pytorch

    def as_request_args(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`provision.resolve.StackRequest.build`."""
        return {
            "frameworks": list(self.frameworks),
            "driver": self.driver,
            "kernel_modules": self.kernel_modules,
            "cuda_toolkit": self.cuda_toolkit,
            "cudnn": self.cudnn,
            "python": self.python,
            "torch_index": self.torch_index,
        }


@dataclass(frozen=True)
class VerifyConfig:
    allow_cpu: bool = False


@dataclass(frozen=True)
class StateConfig:
    """Where `up` and `status` keep the fleet's SQLite state (None: the embedded default).

    A relative path is taken from the current directory, like ``--state`` and the default
    ``.provision/state.db``, so one working directory holds one fleet's runs and state.
    """

    path: str | None = None


@dataclass(frozen=True)
class SlurmIntegration:
    """``integrations.slurm``: `up` writes provision-health's Slurm programs, ``helpers.conf`` and
    ``gres.conf`` (docs/how-to/slurm.md); the ``slurm.conf`` lines are printed, never written."""

    enabled: bool = False
    config_dir: str = "/etc/slurm"  # where slurmd reads gres.conf and helpers.conf (beside slurm.conf)
    gres_conf: bool = True
    health_check_interval: int = 300  # printed in the slurm.conf lines (HealthCheckInterval)


@dataclass(frozen=True)
class PrometheusIntegration:
    textfile_dir: str | None = None  # node_exporter's --collector.textfile.directory


@dataclass(frozen=True)
class KubernetesIntegration:
    nfd_features_dir: str | None = None  # Node Feature Discovery's local source (features.d)


@dataclass(frozen=True)
class IntegrationsConfig:
    """``integrations:``: what `up` lays out for the engines a fleet already runs (provision-health
    in Slurm's health check; its textfile and NFD file by a systemd timer every ``export_interval``)."""

    slurm: SlurmIntegration = field(default_factory=SlurmIntegration)
    prometheus: PrometheusIntegration = field(default_factory=PrometheusIntegration)
    kubernetes: KubernetesIntegration = field(default_factory=KubernetesIntegration)
    export_interval: int = 60

    @property
    def exports(self) -> bool:
        return self.prometheus.textfile_dir is not None or self.kubernetes.nfd_features_dir is not None


@dataclass(frozen=True)
class Config:
    stack: StackConfig = field(default_factory=StackConfig)
    install: InstallSettings = field(default_factory=InstallSettings)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    path: str | None = None
    state: StateConfig = field(default_factory=StateConfig)
    integrations: IntegrationsConfig = field(default_factory=IntegrationsConfig)

    def request_args(self, flags: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The stack request with install.method and install.python_source folded in (they decide
        the driver's packages and the venv's Python), and ``flags`` over it: the command line's
        stack options (provision/cli/options.py stack_options, only those given) win."""
        return {
            **self.stack.as_request_args(),
            "install_method": self.install.method,
            "python_source": self.install.python_source,
            **{k: v for k, v in (flags or {}).items() if v is not None},
        }


@dataclass(frozen=True)
class Key:
    """One key of ``provision.yaml``: what the validator accepts and what the reference page says
    (docs/_hooks/refdocs/config_page.py renders this table; the default comes from :class:`Config`).

    ``kind`` is the YAML shape in words; ``choices`` the words a choice key takes, its default first.
    """

    path: str  # dotted: "install.pip.index_url"
    kind: str
    description: str
    choices: tuple[str, ...] = ()


# Every key, sections first, in the order of docs/design.md's example. The validator's known keys
# and choices come from here, so the reference page cannot name a key the validator refuses.
KEYS: tuple[Key, ...] = (
    Key("stack", "mapping", "What to install: the resolver's request (flags on the command line win over it)."),
    Key(
        "stack.frameworks",
        "list of strings",
        "Framework specs, the same as `--framework`: PEP 508 names with extras and PEP 440 specifiers "
        "(`torch==2.8.0`, `tensorflow[and-cuda]`, `jax[cuda12]`); a `+cpu` local tag asks for a CPU-only stack.",
    ),
    Key(
        "stack.driver",
        "string",
        '`auto` (the resolver picks), `none` (leave the host\'s driver alone), a branch (`"580"`) '
        'or an exact version (`"580.95.05"`).',
    ),
    Key("stack.kernel_modules", "choice", "The driver's kernel-module flavour.", ("auto", "open", "proprietary")),
    Key(
        "stack.cuda_toolkit",
        "string",
        '`none` or a system CUDA toolkit version (`"12.8"`, quoted); frameworks bring their own CUDA runtime.',
    ),
    Key("stack.cudnn", "string", '`none` or a system cuDNN version (`"9.10.2.21"`, quoted).'),
    Key("stack.python", "string", "`auto` (the OS's python3 when the wheels fit) or the venv's Python `\"X.Y\"`."),
    Key(
        "stack.torch_index",
        "choice",
        "Where torch wheels may come from: PyPI, PyTorch's per-CUDA indexes, or either.",
        ("auto", "pypi", "pytorch"),
    ),
    Key("install", "mapping", "How the hosts get it: install methods, sources, mirrors, reboots, the cache."),
    Key(
        "install.method",
        "choice",
        "How the driver is installed: NVIDIA's CUDA network repository or the OS's own packages.",
        INSTALL_METHOD_CHOICES,
    ),
    Key("install.venv", "string", "Where the frameworks' virtual environment lives on each host."),
    Key("install.pip", "mapping", "Where hosts install wheels from (air-gapped sites: a local index or wheelhouse)."),
    Key("install.pip.index_url", "string or null", "An index that stands in for PyPI (a mirror of it); null: PyPI."),
    Key("install.pip.extra_index_urls", "list of strings", "More package indexes."),
    Key("install.pip.find_links", "list of strings", "Folders or URLs of wheels (pip's --find-links)."),
    Key("install.pip.trusted_hosts", "list of strings", "Hosts pip trusts without valid HTTPS (pip's --trusted-host)."),
    Key("install.apt", "mapping", "apt's sources on Debian and Ubuntu (air-gapped sites: the local mirror and proxy)."),
    Key("install.apt.mirror", "string or null", "A Debian archive mirror for the `distro` driver's packages."),
    Key("install.apt.proxy", "string or null", "An HTTP proxy for apt."),
    Key(
        "install.reboot",
        "choice",
        "`auto` reboots a host when the driver needs it (never the controller unless asked); `never` leaves it.",
        ("auto", "never"),
    ),
    Key(
        "install.cache",
        "choice",
        "The fleet cache of `provision up` (a squid proxy and a wheelhouse on the controller).",
        ("auto", "off"),
    ),
    Key(
        "install.cache_dir",
        "string or null",
        "The fleet cache's store (null: /var/cache/provision as root, else ~/.cache/provision).",
    ),
    Key(
        "install.python_source",
        "choice",
        "The venv's Python: the OS's, a standalone CPython installed by uv, or auto (the OS's when it fits).",
        PYTHON_SOURCES,
    ),
    Key(
        "install.python_mirror",
        "URL or null",
        "A mirror of python-build-standalone's downloads (`http(s)://` or `file://`).",
    ),
    Key(
        "install.python_downloads_json",
        "URL or null",
        "A download list of the site's own, in uv's format (URLs and sha256s).",
    ),
    Key(
        "install.lock_closure",
        "choice",
        "The lock's hashed wheel closure: auto resolves it where hosts are probed, not for `--assume` plans.",
        LOCK_CLOSURE,
    ),
    Key(
        "install.installer",
        "choice",
        "What installs the closure on hosts (auto: uv for a closure whose wheels all come from indexes).",
        INSTALLERS,
    ),
    Key("verify", "mapping", "How `verify` (and `up`) judge a host."),
    Key("verify.allow_cpu", "bool", "Let a host without a usable GPU pass on the CPU (CI, laptops)."),
    Key("state", "mapping", "The fleet's SQLite state of `up` and `status`."),
    Key(
        "state.path",
        "string or null",
        "The state DB (null: .provision/state.db, from the current directory); `--state` overrides it.",
    ),
    Key(
        "integrations",
        "mapping",
        "What `up` lays out beside provision-health for the engines a fleet runs (Slurm, Prometheus, Kubernetes).",
    ),
    Key("integrations.slurm", "mapping", "provision-health as Slurm's health check and node feature."),
    Key(
        "integrations.slurm.enabled",
        "bool",
        "Write the HealthCheckProgram, the `provision_verified` feature's helper, helpers.conf and gres.conf; "
        "a host without slurmd is bad input.",
    ),
    Key(
        "integrations.slurm.config_dir", "string", "Where slurmd reads gres.conf and helpers.conf (beside slurm.conf)."
    ),
    Key("integrations.slurm.gres_conf", "bool", "Write gres.conf from the probed GPUs."),
    Key(
        "integrations.slurm.health_check_interval",
        "integer",
        "Seconds, printed in the slurm.conf lines you add (HealthCheckInterval); provision never edits slurm.conf.",
    ),
    Key("integrations.prometheus", "mapping", "provision-health's metrics for node_exporter's textfile collector."),
    Key(
        "integrations.prometheus.textfile_dir",
        "string or null",
        "node_exporter's textfile directory (it must exist on the host); null: no textfile.",
    ),
    Key("integrations.kubernetes", "mapping", "provision-health's labels for Node Feature Discovery."),
    Key(
        "integrations.kubernetes.nfd_features_dir",
        "string or null",
        "NFD's local features.d directory (it must exist on the host); null: no features file.",
    ),
    Key(
        "integrations.export_interval",
        "integer",
        "Seconds between the systemd timer's runs that write the textfile and the NFD file.",
    ),
)
_BY_PATH = {k.path: k for k in KEYS}
# The keys each section may hold (dotted paths for nested sections).
_SCHEMA_KEYS: dict[str, set[str]] = {
    section.path: {k.path[len(section.path) + 1 :] for k in KEYS if k.path.rpartition(".")[0] == section.path}
    for section in KEYS
    if section.kind == "mapping"
}
_TOP_KEYS = {k.path for k in KEYS if "." not in k.path}
_ALL_PATHS = sorted(_BY_PATH)


def default_of(path: str) -> Any:
    """The value a key has when the file leaves it out: read from :class:`Config` itself."""
    value: Any = Config()
    for part in path.split("."):
        value = getattr(value, part)
    return value


def load_config(path: Path | str) -> Config:
    """Read and validate ``provision.yaml``; any problem is one BadInput line."""
    import yaml  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"{p} is not UTF-8 text (byte {exc.start} cannot be decoded)", "save the config as UTF-8"
        ) from None
    except FileNotFoundError:
        raise BadInput(f"config file not found: {p}", "check the -c path") from None
    except OSError as exc:
        raise BadInput(f"cannot read config {p}: {exc.strerror}", "check the file's permissions") from None
    try:
        data = load_yaml(text, str(p))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInput(f"{p} is not valid YAML{where}", "fix the YAML syntax") from None
    return parse_config(data, str(p))


def parse_config(data: Any, where: str = "provision.yaml") -> Config:
    if data is None:
        return Config(path=where)
    top = _mapping(data, "", where)
    _known(top, "", _TOP_KEYS, where)
    stack = _mapping(top.get("stack"), "stack", where)
    install = _mapping(top.get("install"), "install", where)
    verify = _mapping(top.get("verify"), "verify", where)
    state = _mapping(top.get("state"), "state", where)
    integrations = _mapping(top.get("integrations"), "integrations", where)
    for section, body in (
        ("stack", stack),
        ("install", install),
        ("verify", verify),
        ("state", state),
        ("integrations", integrations),
    ):
        _known(body, section, _SCHEMA_KEYS[section], where)
    pip = _mapping(install.get("pip"), "install.pip", where)
    apt = _mapping(install.get("apt"), "install.apt", where)
    _known(pip, "install.pip", _SCHEMA_KEYS["install.pip"], where)
    _known(apt, "install.apt", _SCHEMA_KEYS["install.apt"], where)
    frameworks = stack.get("frameworks", [])
    if isinstance(frameworks, str):
        frameworks = [frameworks]
    if not isinstance(frameworks, list) or not all(isinstance(f, str) for f in frameworks):
        raise _bad(where, "stack.frameworks", "must be a list of specs", 'e.g. frameworks: ["torch==2.8.0"]')
    sc = StackConfig(
        frameworks=tuple(frameworks),
        driver=_driver(stack.get("driver", "auto"), where),
        kernel_modules=_choice(stack, "kernel_modules", "stack", where),
        cuda_toolkit=_version(stack.get("cuda_toolkit", "none"), "stack.cuda_toolkit", "12.8", where),
        cudnn=_version(stack.get("cudnn", "none"), "stack.cudnn", "9.10.2.21", where),
        python=_python(stack.get("python", "auto"), where),
        torch_index=_choice(stack, "torch_index", "stack", where),
    )
    if install.get("cache") is False:  # YAML 1.1 reads a bare `off` as false
        install = {**install, "cache": "off"}
    # Built once, here: the record checks its paths, URLs and credentials (BadInput) and every
    # stage after takes it as it is.
    ic = InstallSettings(
        method=_choice(install, "method", "install", where),
        venv=_string(install.get("venv", DEFAULT_VENV), "install.venv", where) or DEFAULT_VENV,
        pip=PipSettings(
            index_url=_string(pip.get("index_url"), "install.pip.index_url", where),
            extra_index_urls=_strings(pip.get("extra_index_urls"), "install.pip.extra_index_urls", where),
            find_links=_strings(pip.get("find_links"), "install.pip.find_links", where),
            trusted_hosts=_strings(pip.get("trusted_hosts"), "install.pip.trusted_hosts", where),
        ),
        apt=AptSettings(
            mirror=_string(apt.get("mirror"), "install.apt.mirror", where),
            proxy=_string(apt.get("proxy"), "install.apt.proxy", where),
        ),
        reboot=_choice(install, "reboot", "install", where),
        cache=_choice(install, "cache", "install", where),
        cache_dir=_string(install.get("cache_dir"), "install.cache_dir", where),
        python_source=_choice(install, "python_source", "install", where),
        python_mirror=_url(install.get("python_mirror"), "install.python_mirror", where),
        python_downloads_json=_url(install.get("python_downloads_json"), "install.python_downloads_json", where),
        lock_closure=_choice(install, "lock_closure", "install", where),
        installer=_choice(install, "installer", "install", where),
    )
    allow_cpu = verify.get("allow_cpu", False)
    if not isinstance(allow_cpu, bool):
        raise _bad(where, "verify.allow_cpu", "must be true or false", "write allow_cpu: true")
    if ic.cache_dir is not None and not ic.cache_dir.strip():
        raise _bad(where, "install.cache_dir", "is empty", "give a folder, e.g. /var/cache/provision, or leave it out")
    state_path = _string(state.get("path"), "state.path", where)
    if state_path is not None and not state_path.strip():
        raise _bad(where, "state.path", "is empty", "give a file, e.g. path: .provision/state.db, or leave it out")
    return Config(sc, ic, VerifyConfig(allow_cpu), where, StateConfig(state_path), _integrations(integrations, where))


def _integrations(body: dict[str, Any], where: str) -> IntegrationsConfig:
    sections = {}
    for name in ("slurm", "prometheus", "kubernetes"):
        sections[name] = _mapping(body.get(name), f"integrations.{name}", where)
        _known(sections[name], f"integrations.{name}", _SCHEMA_KEYS[f"integrations.{name}"], where)
    slurm, prometheus, kubernetes = sections["slurm"], sections["prometheus"], sections["kubernetes"]
    defaults = SlurmIntegration()
    return IntegrationsConfig(
        slurm=SlurmIntegration(
            enabled=_bool(slurm.get("enabled", defaults.enabled), "integrations.slurm.enabled", where),
            config_dir=_absolute(slurm.get("config_dir", defaults.config_dir), "integrations.slurm.config_dir", where)
            or defaults.config_dir,
            gres_conf=_bool(slurm.get("gres_conf", defaults.gres_conf), "integrations.slurm.gres_conf", where),
            health_check_interval=_seconds(
                slurm.get("health_check_interval", defaults.health_check_interval),
                "integrations.slurm.health_check_interval",
                where,
            ),
        ),
        prometheus=PrometheusIntegration(
            _absolute(prometheus.get("textfile_dir"), "integrations.prometheus.textfile_dir", where)
        ),
        kubernetes=KubernetesIntegration(
            _absolute(kubernetes.get("nfd_features_dir"), "integrations.kubernetes.nfd_features_dir", where)
        ),
        export_interval=_seconds(
            body.get("export_interval", IntegrationsConfig.export_interval), "integrations.export_interval", where
        ),
    )


def _bool(value: Any, key: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(where, key, f"must be true or false (got {value!r})", f"write {key.rsplit('.', 1)[-1]}: true")
    return value


def _seconds(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(where, key, f"must be a whole number of seconds, 1 or more (got {value!r})", "e.g. 60")
    return value


def _absolute(value: Any, key: str, where: str) -> str | None:
    """A folder on the hosts: an absolute path (the role writes into it as root), or None."""
    text = _string(value, key, where)
    if text is not None and not text.startswith("/"):
        raise _bad(where, key, f"must be an absolute path on the hosts (got {text!r})", "e.g. /var/lib/node-exporter")
    return text


def _url(value: Any, key: str, where: str) -> str | None:
    """An http(s) or file URL (uv reads both for Python downloads), or None."""
    text = _string(value, key, where)
    if text is None:
        return None
    try:
        check_url(text, key)  # render's own check (provision.model.settings), so both agree
    except BadInput:
        raise _bad(
            where,
            key,
            f"must be an http(s):// or file:// URL (got {text!r})",
            f"e.g. {key.rsplit('.', maxsplit=1)[-1]}: file:///srv/python",
        ) from None
    return text


def _bad(where: str, key: str, what: str, hint: str, suggestions: list[str] | None = None) -> BadInput:
    return BadInput(f"{where}: `{key}` {what}", hint, suggestions=suggestions)


def _mapping(value: Any, key: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        name = key or "the top level"
        raise _bad(
            where,
            name,
            f"must be a mapping, not {type(value).__name__}",
            "see the docs' Reference > provision.yaml page (`make docs` builds it: site/reference/config/index.html)",
        )
    return value


def _known(body: dict[str, Any], section: str, keys: set[str], where: str) -> None:
    for key in body:
        if str(key) in keys:
            continue
        path = f"{section}.{key}" if section else str(key)
        close = difflib.get_close_matches(path, _ALL_PATHS, n=3, cutoff=0.6)
        close += [
            c
            for c in difflib.get_close_matches(str(key), sorted(keys), n=2, cutoff=0.6)
            if (f"{section}.{c}" if section else c) not in close
        ]
        full = [c if "." in c or not section else f"{section}.{c}" for c in close]
        hint = f"did you mean `{full[0]}`?" if full else f"known keys here: {', '.join(sorted(keys))}"
        raise _bad(where, path, "is not a known key", hint, full)


def _choice(body: dict[str, Any], key: str, section: str, where: str) -> str:
    choices = _BY_PATH[f"{section}.{key}"].choices
    value = body.get(key, choices[0])
    if not isinstance(value, str) or value.lower() not in choices:
        raise _bad(
            where,
            f"{section}.{key}",
            f"must be one of {', '.join(choices)} (got {value!r})",
            f"write {key}: {choices[0]}",
        )
    return value.lower()


def _driver(value: Any, where: str) -> str:
    _not_a_float(value, "stack.driver", "580.95.05", where)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _bad(
            where,
            "stack.driver",
            f"must be auto, none, a branch or a version (got {value!r})",
            'e.g. driver: "580"',
        )
    text = str(value).strip().lower()
    if text not in DRIVER_WORDS and not DRIVER_SPEC.match(text):
        raise _bad(where, "stack.driver", f"is not a driver branch or version (got {value!r})", DRIVER_FORMS)
    return text


def _version(value: Any, key: str, example: str, where: str) -> str:
    _not_a_float(value, key, example, where)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _bad(
            where,
            key,
            f"must be none or a version string (got {value!r})",
            f'quote it, e.g. {key.rsplit(".", maxsplit=1)[-1]}: "{example}"',
        )
    return str(value).strip()


def _python(value: Any, where: str) -> str:
    _not_a_float(value, "stack.python", "3.10", where)
    if not isinstance(value, str):
        raise _bad(where, "stack.python", f"must be auto or X.Y (got {value!r})", 'e.g. python: "3.11"')
    return value.strip()


def _not_a_float(value: Any, key: str, example: str, where: str) -> None:
    """A version-valued key must not be a YAML number with a fraction: YAML has already dropped
    what made it a version (``12.10`` is the float 12.1, ``9.10`` is 9.1), and the text the user
    typed is gone, so every float is refused rather than guessed at, even one that reads back the
    same (``12.8``): the rule is then the same for every value."""
    if isinstance(value, float):
        name = key.rsplit(".", maxsplit=1)[-1]
        raise _bad(
            where,
            key,
            f"is a number ({value!r}); YAML drops a version's trailing zeros (12.10 becomes 12.1)",
            f'quote it, e.g. {name}: "{example}"',
        )


def _string(value: Any, key: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(where, key, f"must be a string (got {value!r})", "quote the value")
    return value


def _strings(value: Any, key: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(where, key, "must be a list of strings", f"e.g. {key.rsplit('.', maxsplit=1)[-1]}: []")
    return tuple(value)
