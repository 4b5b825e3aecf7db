"""What ``install.cache`` means for one run: whether the cache runs (``off``, check mode, no SSH
host), where it lives between runs (``install.cache_dir`` or :func:`default_root`), and what it
caches, from the role variables the run dir's files hold as rendered (:func:`start_cache`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from provision.ansible.roles import default_roles_path
from provision.ansible.rundir import write_host_vars
from provision.fleet import verify as verify_api
from provision.fleet.cache.run import FleetCache
from provision.fleet.cache.sources import RepoSources, role_defaults
from provision.fleet.cache.wheels import WheelSet

if TYPE_CHECKING:
    from provision.ansible.render import RunVars
    from provision.config import Config
    from provision.fleet.records import UpOptions
    from provision.hosts.inventory import HostTarget
    from provision.model.lock import Lock


def default_root() -> Path:
    """Where the cache lives between runs: the system's cache dir for root, XDG's otherwise."""
    if os.geteuid() == 0:
        return Path("/var/cache/provision")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "provision"


def cache_root(config: Config) -> Path:
    """The cache's folder for ``config``: install.cache_dir, else :func:`default_root`."""
    return Path(config.install.cache_dir).expanduser() if config.install.cache_dir else default_root()


def start_cache(
    config: Config,
    options: UpOptions,
    run_dir: Path,
    lock: Lock,
    *,
    rendered: RunVars,
    targets: Sequence[HostTarget],
    say: Callable[[str], None],
) -> FleetCache | None:
    """The fleet cache for the hosts this run applies to (None: off, check mode or no SSH host).

    What it caches comes from ``rendered``, the role variables the run dir's files hold as
    `plan` rendered them (:class:`provision.ansible.render.RunVars`), and the lock's typed host
    descriptions: the files this run just wrote are never read back.
    """
    if config.install.cache == "off" or options.check or not any(not t.local for t in targets):
        return None

    # the lock's groups only: the user's inventory groups beside them (render's user_groups) hold
    # the same hosts and no variables
    group_of = rendered.group_of
    platform = {h: g.host for g in lock.groups for h in g.hosts}
    group_vars = {g: rendered.groups[g] for g in {group_of[t.name] for t in targets}}
    wheel_sets = {
        t.name: WheelSet.from_group_vars(
            group_vars[group_of[t.name]], python=h.python, arch=h.arch, netrc=rendered.netrc
        )
        if (h := platform.get(t.name)) is not None
        else None
        for t in targets
    }
    everyone = rendered.everyone
    # squid fetches only from what these hosts' variables and roles name, and their OS archives
    sources = RepoSources.for_run(
        [everyone, *group_vars.values()],
        [(h.os or "") if (h := platform.get(t.name)) is not None else "" for t in targets],
        role_defaults(Path(default_roles_path())),
    )
    cache = FleetCache(cache_root(config), run_dir, python_exe=sys.executable, say=say)
    connect = verify_api.default_connect(
        accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config
    )
    try:
        per_host = cache.start(
            targets, wheel_sets, dict(everyone.get("provision_environment") or {}), connect=connect, sources=sources
        )
    except BaseException:
        cache.close()
        raise
    for note in cache.report.notes:
        say(f"fleet cache: {note}")
    write_host_vars(run_dir / "ansible", per_host, "the fleet cache's tunnels for this run (provision/fleet/cache/)")
    return cache
