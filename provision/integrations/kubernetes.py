"""node-problem-detector's custom plugin monitor config that runs provision-health (pure).

node-problem-detector (NPD, kubernetes/node-problem-detector) runs a custom plugin's ``path`` with
its ``args`` every ``invoke_interval`` and reads its exit status: 0 OK, 1 NonOK, 2 Unknown
(pkg/custompluginmonitor/types/types.go), the same three codes as provision-health's healthy,
unhealthy and cannot tell, so the program is a plugin as it is; its one line (stdout) becomes the
condition's message, cut at ``max_output_length``. The config's fields are NPD's documented ones
(docs/custom_plugin_monitor.md, config/custom-plugin-monitor.json); NPD refuses a rule whose
``timeout`` is above the global one and a permanent rule whose condition has no default
(pkg/custompluginmonitor/types/config.go, Validate), and the tests hold this file to both.

NPD's own image has no Python (its Dockerfile: ``debian-base:bookworm`` with util-linux, bash and
libsystemd-dev added), and its DaemonSet runs privileged (deployment/node-problem-detector.yaml), so
in a DaemonSet the rule runs the host's program with ``chroot`` into the host's root mounted at
``--host-root`` (coreutils' chroot: debian-base's build purges bash, e2fsprogs, ncurses and tzdata
but keeps coreutils, kubernetes/release images/build/debian-base/bookworm/Dockerfile.build).

The Node Feature Discovery labels are written on the host by provision-health itself
(``--nfd-features``, provision/remote/health/exporters.py); docs/how-to/kubernetes.md has both.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import PurePosixPath
from typing import Any

from provision.errors import ExitCode
from provision.remote.health.check import HEALTHY, SPEC, UNHEALTHY, UNKNOWN

# NPD's custom plugin statuses (types.go: OK 0, NonOK 1, Unknown 2): provision-health's exit codes.
NPD_STATUS = {"OK": HEALTHY, "NonOK": UNHEALTHY, "Unknown": UNKNOWN}
SOURCE = "provision-health"
CONDITION = "ProvisionUnhealthy"
# The budget: an answer in under 2 s; NPD's own default global timeout is 5 s (config.go).
TIMEOUT_S = 10
INTERVAL_S = 60
MAX_OUTPUT = 512  # NPD's default (80) would cut a line that names several problems
# Its own state file: each run reports an Xid once, and the run that sees it first is the one
# that reports it; NPD's runs beside Slurm's or a cron job's must not take each other's Xids.
NPD_STATE = "/var/lib/provision/health-state-npd.json"
# Debian's coreutils installs chroot(8) as /usr/sbin/chroot (its file list,
# https://packages.debian.org/bookworm/amd64/coreutils/filelist; `dpkg -S` here says the same)
CHROOT = "/usr/sbin/chroot"


def health_command(
    home: str, *, python: str = "python3", spec: str = str(SPEC), state: str = NPD_STATE, host_root: str | None = None
) -> list[str]:
    """provision-health as one argv: ``python3 -m health`` from ``home``, the folder that holds the
    program's ``health/`` folder (NPD runs a plugin with no working directory of ours, so the
    folder goes in PYTHONPATH, through env(1)); with ``host_root``, inside ``chroot host_root``,
    where every path is the host's own."""
    command = ["/usr/bin/env", f"PYTHONPATH={home}", python, "-m", "health", "--spec", spec, "--state", state]
    return [CHROOT, host_root, *command] if host_root else command


def npd_custom_plugin_monitor(
    home: str,
    *,
    python: str = "python3",
    spec: str = str(SPEC),
    interval_s: int = INTERVAL_S,
    timeout_s: int = TIMEOUT_S,
    host_root: str | None = None,
) -> dict[str, Any]:
    """The config (``--config.custom-plugin-monitor=FILE``): one permanent rule, provision-health,
    that sets the node condition ``ProvisionUnhealthy`` with the program's line as its message.
    ``host_root``: where a DaemonSet mounts the host's ``/`` (the rule chroots into it)."""
    if not PurePosixPath(home).is_absolute():
        raise ValueError(f"the provision-health folder must be an absolute path, not {home!r}")
    if host_root is not None and not PurePosixPath(host_root).is_absolute():
        raise ValueError(f"the host's root must be an absolute path, not {host_root!r}")
    if timeout_s > interval_s:
        raise ValueError(f"the timeout ({timeout_s}s) must not be longer than the interval ({interval_s}s)")
    path, *args = health_command(home, python=python, spec=spec, host_root=host_root)
    return {
        "plugin": "custom",
        "pluginConfig": {
            "invoke_interval": f"{interval_s}s",
            "timeout": f"{timeout_s}s",
            "max_output_length": MAX_OUTPUT,
            "concurrency": 1,  # one rule; two runs of it at once would share a state file
        },
        "source": SOURCE,
        "metricsReporting": True,
        "conditions": [
            {"type": CONDITION, "reason": "ProvisionHealthy", "message": "provision-health: this host is as locked"}
        ],
        "rules": [
            {
                "type": "permanent",
                "condition": CONDITION,
                "reason": "ProvisionHealthCheckFailed",
                "path": path,
                "args": args,
                "timeout": f"{timeout_s}s",
            }
        ],
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m provision.integrations.kubernetes --home DIR``: the config, as JSON on stdout."""
    p = argparse.ArgumentParser(
        prog="python -m provision.integrations.kubernetes",
        description="node-problem-detector's custom plugin monitor config that runs provision-health.",
    )
    p.add_argument("--home", required=True, help="the folder on the host that holds provision-health's health/")
    p.add_argument("--python", default="python3", help="the host's Python (3.8 or newer)")
    p.add_argument("--spec", default=str(SPEC), help="the health spec on the host")
    p.add_argument("--interval-s", type=int, default=INTERVAL_S, help="seconds between runs")
    p.add_argument("--timeout-s", type=int, default=TIMEOUT_S, help="seconds a run may take")
    p.add_argument(
        "--host-root", help="where NPD's DaemonSet mounts the host's / (NPD's image has no Python: the rule chroots)"
    )
    a = p.parse_args(argv)
    try:
        config = npd_custom_plugin_monitor(
            a.home, python=a.python, spec=a.spec, interval_s=a.interval_s, timeout_s=a.timeout_s, host_root=a.host_root
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    print(json.dumps(config, indent=2))
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
