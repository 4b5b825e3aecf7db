"""One run's fleet cache: start squid, the wheelhouse and the tunnels for the hosts, hand out their
host_vars, stop it all at the end and report what it did (:class:`CacheReport`).
"""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from provision.fleet.cache import one_line
from provision.fleet.cache.sources import SOURCES_COMMAND, RepoSources, host_sources
from provision.fleet.cache.squid import ProxyStats, Squid, mkdir_passable
from provision.fleet.cache.tunnel import Tunnel, host_vars
from provision.fleet.cache.wheels import WheelServer, WheelSet, fetch_closure, folder_bytes

if TYPE_CHECKING:
    from provision.fleet.verify import Connect
    from provision.hosts.inventory import HostTarget


@dataclass
class CacheReport:
    """What the cache did in a run (report.json's ``cache``)."""

    mode: str
    root: str | None = None
    apt: str = "off"  # on | off | why it is off
    wheels: dict[str, str] = field(default_factory=dict)  # wheelhouse key -> on | why not
    hosts: list[str] = field(default_factory=list)  # hosts reached through tunnels
    proxy: ProxyStats = field(default_factory=ProxyStats)
    wheel_bytes_added: int = 0  # bytes pip download put into the wheelhouse in this run
    wheels_served_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "root": self.root,
            "apt": self.apt,
            "wheels": self.wheels,
            "hosts": self.hosts,
            "proxy": self.proxy.__dict__,
            "wheel_bytes_added": self.wheel_bytes_added,
            "wheels_served_bytes": self.wheels_served_bytes,
            "upstream_bytes": self.proxy.upstream_bytes + self.wheel_bytes_added,
            "notes": self.notes,
        }


class FleetCache:
    """Start what the hosts of one run need, hand out their host_vars, stop it all at the end."""

    def __init__(self, root: Path, run_dir: Path, *, python_exe: str, say: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.run_dir = run_dir
        self.python_exe = python_exe
        self.say = say or (lambda _t: None)
        self.report = CacheReport(mode="auto", root=str(root))
        self.squid: Squid | None = None
        self.wheels: WheelServer | None = None
        self.tunnels: list[Tunnel] = []
        self._lockfile: IO[str] | None = None

    def start(
        self,
        targets: Sequence[HostTarget],
        wheel_sets: Mapping[str, WheelSet | None],
        environment: Mapping[str, str],
        *,
        connect: Connect,
        sources: RepoSources | None = None,
    ) -> dict[str, dict[str, Any]]:
        """host -> role variables; hosts missing from it fetch everything themselves.

        ``sources``: what squid may fetch (:class:`RepoSources`; none: nothing)."""
        try:
            mkdir_passable(self.root)
            self._lockfile = (self.root / ".lock").open("w")
        except OSError as exc:  # auto never fails a run: no cache this time, and the note says why
            self.report.apt = f"off: cannot use {self.root}: {exc.strerror}"
            self.report.notes.append(
                f"the cache folder {self.root} cannot be used ({exc.strerror}): "
                "hosts fetch themselves; set install.cache_dir to a writable folder"
            )
            return {}
        try:  # one run at a time on one store: a second run goes without the cache
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.report.apt = "off: another provision run is using the cache"
            self.report.notes.append(f"the cache at {self.root} is in use by another run: hosts fetch themselves")
            return {}
        apt_local = self._start_squid(sources or RepoSources())
        keys = self._fill_wheels(wheel_sets)
        wheels_local = self._serve_wheels() if any(keys.values()) else None
        out: dict[str, dict[str, Any]] = {}
        for t in targets:
            key = keys.get(t.name)
            if t.local or not (apt_local or (wheels_local and key)):
                continue  # nothing to reach: no tunnel
            tunnel = None
            try:
                tunnel = self._open_tunnel(t, connect)
                apt_here = apt_local if apt_local and self._sources_served(t.name, tunnel) else None
                if not (apt_here or (wheels_local and key)):
                    tunnel.close()
                    continue
                apt_remote = tunnel.forward(apt_here) if apt_here else None
                wheels_remote = tunnel.forward(wheels_local) if wheels_local and key else None
            except Exception as exc:  # auto never fails a run: this host fetches itself
                if tunnel is not None:
                    tunnel.close()
                self.report.notes.append(f"{t.name}: no tunnel ({one_line(exc)}): the host fetches itself")
                continue
            self.tunnels.append(tunnel)
            self.report.hosts.append(t.name)
            out[t.name] = host_vars(apt_remote, wheels_remote, key, environment)
        return out

    def _sources_served(self, name: str, tunnel: Tunnel) -> bool:
        """Whether squid serves every plain-http apt/dnf source of the host. One it would refuse
        (a site mirror the lock does not name, a dnf mirror list) would fail the host's package
        step with 403: such a host gets no proxy and fetches its packages itself, as without
        the cache."""
        assert self.squid is not None
        _stdin, stdout, _stderr = tunnel.client.exec_command(SOURCES_COMMAND, timeout=30)
        refused = [u for u in host_sources(stdout.read().decode(errors="replace")) if not self.squid.sources.allows(u)]
        if refused:
            self.report.notes.append(
                f"{name}: its package source {refused[0]} is not one of this run's repositories: the host fetches "
                "its packages itself (name the mirror in install.apt.mirror to cache it)"
            )
        return not refused

    def _start_squid(self, sources: RepoSources) -> int | None:
        squid = Squid(self.root, self.run_dir.name, sources)
        try:
            squid.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            self.report.apt = f"off: {one_line(exc)}"
            self.report.notes.append(f"apt/dnf cache off: {one_line(exc)}")
            squid.stop()
            return None
        self.squid = squid
        self.report.apt = "on"
        self.say(f"fleet cache: squid on 127.0.0.1:{squid.port} (store {squid.store})")
        return squid.port

    def _fill_wheels(self, wheel_sets: Mapping[str, WheelSet | None]) -> dict[str, str | None]:
        """host -> wheelhouse key, for hosts whose wheels are all in the wheelhouse."""
        done: dict[WheelSet, bool] = {}
        house = self.root / "wheels"
        for ws in {w for w in wheel_sets.values() if w is not None}:
            dest = house / ws.key
            dest.mkdir(parents=True, exist_ok=True)
            before = folder_bytes(dest)
            self.say(f"fleet cache: filling the wheelhouse for {ws.key}")
            why = fetch_closure(ws, self.python_exe, dest, self.root / "requirements" / ws.key)
            ok = why is None
            self.report.wheel_bytes_added += folder_bytes(dest) - before
            self.report.wheels[ws.key] = "on" if ok else f"off: {why}"
            if not ok:
                self.report.notes.append(f"wheelhouse {ws.key}: {why}: these hosts fetch their wheels themselves")
            done[ws] = ok
        return {h: (w.key if w is not None and done.get(w) else None) for h, w in wheel_sets.items()}

    def _serve_wheels(self) -> int:
        self.wheels = WheelServer(self.root / "wheels")
        return self.wheels.start()

    def _open_tunnel(self, target: HostTarget, connect: Connect) -> Tunnel:
        transport = connect(target)
        client = getattr(transport, "client", None)
        if client is None:
            transport.close()
            raise RuntimeError("not an SSH connection")
        return Tunnel(client, target.name)

    def close(self) -> CacheReport:
        for t in self.tunnels:
            t.close()
        if self.wheels is not None:
            self.wheels.stop()
            self.report.wheels_served_bytes = self.wheels.served
        if self.squid is not None:
            self.squid.stop(keep=self.run_dir / "cache" / "squid-access.log")
            self.report.proxy = self.squid.stats()
        if self._lockfile is not None:
            self._lockfile.close()
        return self.report
