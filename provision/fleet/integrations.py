"""What `up` lays out for ``integrations:`` (provision/config.py :class:`IntegrationsConfig`).

Two parts. :func:`role_vars` (pure) turns the config and a host's probed GPUs into the health
role's variables: the files it writes (Slurm's HealthCheckProgram wrapper and the
``provision_verified`` feature's helper beside the program, ``helpers.conf`` and ``gres.conf``
where slurmd reads them; their text from :mod:`provision.fleet.slurm_files`) and the arguments of
the systemd timer that writes node_exporter's textfile and the NFD features file.
:func:`check_hosts` is the one side effect: before any change, one read-only command per host over
the Transport says whether the host can take what the config asks (slurmd installed, the
directories there, no ``gres.conf``/``helpers.conf`` of the user's that provision would
overwrite); any host that cannot is bad input for the whole run, nothing changed anywhere.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput, ProvisionError
from provision.fleet import slurm_files

if TYPE_CHECKING:
    from provision.config import IntegrationsConfig
    from provision.hosts.inventory import HostTarget
    from provision.hosts.transport import Transport
    from provision.model.facts import ProbedGpu

# The health role's places (playbooks/roles/health/defaults/main.yml; a unit test holds them equal).
LIB_DIR = "/usr/local/lib/provision"
SPEC_FILE = "/etc/provision/health.json"
HEALTH_PYTHON = "/usr/bin/python3"
SLURM_PROGRAM = f"{LIB_DIR}/provision-health-slurm"  # slurm.conf's HealthCheckProgram
SLURM_HELPER = f"{LIB_DIR}/provision-feature-verified"  # helpers.conf's Helper
SLURM_STATE = "/var/lib/provision/health-state-slurm.json"  # Slurm's runs' own state file
# The first line of every file provision writes into Slurm's folder: a file without it is the
# user's, and `up` refuses to overwrite it (check_hosts).
MARK = "# Written by provision up (integrations.slurm): docs/how-to/slurm.md"
SLURM_FILES = ("helpers.conf", "gres.conf")


def _slurm_files(cfg: IntegrationsConfig, gpus: Sequence[ProbedGpu]) -> list[dict[str, str]]:
    paths = slurm_files.HealthPaths(LIB_DIR, SPEC_FILE, HEALTH_PYTHON, SLURM_STATE)
    conf = cfg.slurm.config_dir
    files = [
        {"path": SLURM_PROGRAM, "content": slurm_files.health_check_program(paths), "mode": "0755"},
        {"path": SLURM_HELPER, "content": slurm_files.feature_helper(paths), "mode": "0755"},
        {
            "path": f"{conf}/helpers.conf",
            "content": f"{MARK}\n{slurm_files.helpers_conf(SLURM_HELPER)}",
            "mode": "0644",
        },
    ]
    if cfg.slurm.gres_conf:
        # each host's own file: lines without NodeName= are the reading node's (gres.conf(5) NodeName)
        files.append(
            {"path": f"{conf}/gres.conf", "content": f"{MARK}\n{slurm_files.gres_conf(None, gpus)}", "mode": "0644"}
        )
    return files


def export_args(cfg: IntegrationsConfig) -> list[str]:
    """provision-health's arguments for the timer's runs (empty: no timer)."""
    args: list[str] = []
    if cfg.prometheus.textfile_dir is not None:
        args += ["--textfile", cfg.prometheus.textfile_dir]
    if cfg.kubernetes.nfd_features_dir is not None:
        args += ["--nfd-features", cfg.kubernetes.nfd_features_dir]
    return args


def role_vars(cfg: IntegrationsConfig, gpus: Sequence[ProbedGpu]) -> dict[str, Any]:
    """The health role's integration variables for one host (its defaults/main.yml documents them)."""
    return {
        "health_files": _slurm_files(cfg, gpus) if cfg.slurm.enabled else [],
        "health_export_args": export_args(cfg),
        "health_export_interval": cfg.export_interval,
    }


def add_integrations(
    health_vars: dict[str, dict[str, Any]], cfg: IntegrationsConfig, gpus: Mapping[str, Sequence[ProbedGpu]]
) -> None:
    """Add :func:`role_vars` to each host's health role variables (``plan``'s host_vars), and a
    summary of them to its spec: the program ignores the key, but a converged host whose
    integrations the config changed then has another spec, so `up` applies it again
    (provision.fleet.health_spec.installed_change)."""
    for name, values in health_vars.items():
        extra = role_vars(cfg, gpus.get(name, ()))
        values.update(extra)
        values["health_spec"]["integrations"] = {
            "files": [f["path"] for f in extra["health_files"]],
            "export": extra["health_export_args"],
            "interval": extra["health_export_interval"],
        }


def slurm_conf_lines(cfg: IntegrationsConfig, gpus: Mapping[str, Sequence[ProbedGpu]]) -> list[str]:
    """The slurm.conf lines `up` prints for the user to add (never written by provision)."""
    return slurm_files.slurm_conf_lines(SLURM_PROGRAM, cfg.slurm.health_check_interval, gpus)


def check_command(cfg: IntegrationsConfig) -> str:
    """A read-only shell command that prints one line per thing the host lacks (nothing: fine)."""
    parts: list[str] = []
    if cfg.slurm.enabled:
        parts.append(
            "{ command -v slurmd >/dev/null 2>&1 || [ -x /usr/sbin/slurmd ]; } ||"
            " echo 'integrations.slurm: slurmd is not installed here'"
        )
        conf = cfg.slurm.config_dir
        parts.append(f"[ -d {shlex.quote(conf)} ] || echo {shlex.quote(f'integrations.slurm: no folder {conf}')}")
        for name in SLURM_FILES if cfg.slurm.gres_conf else SLURM_FILES[:1]:
            path = f"{conf}/{name}"
            mine = f"head -n 1 {shlex.quote(path)} | grep -qxF {shlex.quote(MARK)}"
            why = f"integrations.slurm: {path} is not provision's (move it away, or set gres_conf: false)"
            parts.append(f"[ ! -e {shlex.quote(path)} ] || {mine} || echo {shlex.quote(why)}")
    for key, folder in (
        ("integrations.prometheus.textfile_dir", cfg.prometheus.textfile_dir),
        ("integrations.kubernetes.nfd_features_dir", cfg.kubernetes.nfd_features_dir),
    ):
        if folder is not None:
            parts.append(f"[ -d {shlex.quote(folder)} ] || echo {shlex.quote(f'{key}: no folder {folder}')}")
    return "; ".join(parts)


def check_hosts(
    cfg: IntegrationsConfig, targets: Sequence[HostTarget], connect: Callable[[HostTarget], Transport]
) -> None:
    """Refuse the run (BadInput, every host's problems on one line) when a host cannot take the
    integrations; ``connect(target) -> Transport``. Hosts that cannot be reached are the probe's
    business (it reported them): they are skipped here."""
    command = check_command(cfg)
    if not command:
        return

    def one(target: HostTarget) -> str:
        try:
            transport = connect(target)
        except ProvisionError:  # unreachable now (refused, a host key): it fails alone in the apply, saying why
            return ""
        try:
            ran = transport.run(command, timeout=30)
        finally:
            transport.close()
        return "; ".join(line for line in ran.stdout.splitlines() if line) if ran.ok else ""

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(targets)))) as pool:
        found = dict(zip((t.name for t in targets), pool.map(one, targets), strict=True))
    bad = {name: lines for name, lines in found.items() if lines}
    if bad:
        raise BadInput(
            "; ".join(f"{name}: {lines}" for name, lines in bad.items()),
            "install what is missing on those hosts, or change `integrations:` in the config; nothing was changed",
        )
