"""`provision probe`: facts from the local machine or SSH hosts, before anything is installed.

Targets are checked (HOST syntax, inventory parse) before any host is contacted; hosts are then
probed in parallel and each answers on its own: one unreachable host is reported and the others
still give their facts (exit 1 overall when any host failed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import (
    NONEMPTY,
    command_options,
    connect_timeout_option,
    host_defaults,
    login_options,
    parallel_option,
    ssh_options,
    target_options,
    timeout_option,
)
from provision.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from provision.hosts.gather import ProbeResult


@click.command(name="probe")
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@target_options(
    local="Probe the machine provision runs on (the default).",
    inventory="Probe the hosts of an Ansible inventory (INI or YAML).",
)
@click.option(
    "--venv", type=NONEMPTY, metavar="PATH", help="Also report the framework versions in this venv on each host."
)
@ssh_options()
@login_options()
@connect_timeout_option()
@timeout_option(120.0, "Give up on a host whose probe commands run longer.", minimum=1, dest="command_timeout")
@parallel_option(32, "Hosts probed at once.")
@command_options
def probe(
    *,  # click passes options by name
    hosts: tuple[str, ...],
    local: bool,
    inventory: str | None,
    accept_new_host_keys: bool,
    venv: str | None,
    ssh_config: Path | None,
    login_user: str | None,
    private_key: Path | None,
    ask_become_pass: bool,
    connect_timeout: float,
    command_timeout: float,
    parallel: int,
    as_json: bool,
) -> int:
    """Collect facts from the local machine or SSH hosts.

    HOST is [user@]name[:port]; SSH honours ~/.ssh/config (User, Port, IdentityFile,
    UserKnownHostsFile, ProxyJump), ssh-agent and an inventory's ansible_host, ansible_user,
    ansible_port and ansible_ssh_private_key_file. Host keys are verified against known_hosts.

    Exit status: 0 every host answered, 1 a host failed or was unreachable, 2 bad input.
    """
    from provision.fleet.targets import select_targets  # noqa: PLC0415 (start-up: `provision probe --help` loads this module, not fleet.targets)

    targets = select_targets(
        local,
        inventory,
        hosts,
        hint="probe the local machine, named hosts, or an inventory's hosts",
        defaults=host_defaults(login_user, private_key, ask_become_pass),
    ).targets
    from provision.hosts.gather import GatherOptions, matrix_lookup, probe_hosts  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.gather)
    from provision.hosts.ssh_config import resolve_settings  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.ssh_config)

    for target in targets:  # SSH settings that do not parse are bad input: found before any contact
        if not target.local:
            resolve_settings(target, ssh_config)

    options = GatherOptions.from_env(venv=venv, command_timeout=command_timeout, lookup=matrix_lookup())
    results = probe_hosts(
        targets,
        options,
        parallel=parallel,
        accept_new_host_keys=accept_new_host_keys,
        connect_timeout=connect_timeout,
        ssh_config=ssh_config,
    )
    ok = all(r.ok for r in results)
    for r in results:
        if r.error is not None:
            sys.stderr.write(r.error.one_line() + "\n")
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision probe --help` loads this module, not cli.output)

    emit({"ok": ok, "hosts": [r.to_json() for r in results]}, as_json, lambda c: _human(c, results))
    return int(ExitCode.OK if ok else ExitCode.FAILED)


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _lines(facts: dict[str, Any]) -> list[tuple[str, str]]:
    gpus: dict[str, int] = {}
    for g in facts["gpus"]:
        label = g["model"] or f"unknown NVIDIA {g['pci_id']}"
        gpus[label] = gpus.get(label, 0) + 1
    headers = facts["kernel_headers"] or {}
    locks = facts["package_locks"]
    upgrades = facts["unattended_upgrades"] or {}
    driver = facts["driver_version"]
    loaded = "loaded" if facts["driver_loaded"] else "not loaded"
    rows = [
        ("os", f"{facts['os']} ({facts['os_name'] or facts['os_codename'] or ''})".replace(" ()", "")),
        ("arch / kernel", f"{facts['arch']} / {facts['kernel']}"),
        (
            "kernel headers",
            "installed" if headers.get("installed") else ("installable" if headers.get("installable") else "missing"),
        ),
        ("gpus", ", ".join(f"{n} x {m}" for m, n in gpus.items()) or "none"),
        ("nvswitches", str(facts["nvswitch_count"])),
        ("driver", f"{driver} ({facts['driver_kernel_modules']}, {loaded})" if driver else "none"),
        ("secure boot", _yes_no(facts["secure_boot"])),
        ("nouveau loaded", _yes_no(facts["nouveau_loaded"])),
        ("cuda toolkits", ", ".join(t["version"] for t in facts["cuda_toolkits"]) or "none"),
        ("cudnn (system)", facts["cudnn"]["version"] if facts["cudnn"] else "none"),
        ("python", ", ".join(facts["pythons"]) or "none"),
        ("disk free", f"{facts['disk_free_gib']} GiB" if facts["disk_free_gib"] is not None else "unknown"),
        ("memory / cpus", f"{facts['memory_gib']} GiB / {facts['cpus']}"),
        (
            "package locks",
            "unknown"
            if locks is None
            else (", ".join(f"{lk['path']} ({lk['process'] or lk['pid']})" for lk in locks) or "none held"),
        ),
        ("unattended upgrades", "active" if upgrades.get("active") else "inactive"),
        ("container runtimes", ", ".join(facts["container_runtimes"]) or "none"),
    ]
    if facts["nvml"]:
        rows.insert(
            6,
            (
                "nvml",
                ", ".join(
                    f"{g['name']} ({g['memory_mib']} MiB, cc {g['compute_capability']})" for g in facts["nvml"]["gpus"]
                )
                or "no GPUs",
            ),
        )
    if facts["venv"]:
        venv = facts["venv"]
        rows.append(
            ("venv", venv["error"] or ", ".join(f"{k} {v}" for k, v in venv["packages"].items()) or "no frameworks")
        )
    if facts["ec2_instance_type"]:
        rows.append(("ec2 instance type", facts["ec2_instance_type"]))
    return rows


def _human(console: Console, results: list[ProbeResult]) -> None:
    from rich.markup import escape  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    for r in results:
        if r.facts is None:
            code = r.error.code if r.error else "failed"
            console.print(f"[bold]{escape(r.host)}[/bold]: [red]{code}[/red] (the error is on stderr)")
            continue
        facts = r.facts.to_json()
        console.print(f"[bold]{escape(r.host)}[/bold] ({r.duration_s:.1f}s)")
        for key, value in _lines(facts):
            console.print(f"  {key:<20} {escape(value)}")
        for warning in facts["warnings"]:
            console.print(f"  [yellow]warning[/yellow]: {escape(warning)}")
