"""The fleet cache (``install.cache: auto|off``): N hosts download each artifact once.

For a run that applies to SSH hosts the controller, for the length of the run:

- runs squid, a caching HTTP proxy from the OS's packages, for the hosts' apt/dnf traffic
  (cached by URL, ``collapsed_forwarding`` so hosts asking at the same moment share one
  upstream fetch; package files are kept, index files are revalidated);
- fills a wheelhouse once per (Python, architecture) with ``pip download`` of exactly the pins
  the hosts' frameworks role would install, from the same indexes and find-links, and serves it
  over HTTP;
- opens one SSH connection per host (host keys verified as everywhere) with reverse port
  forwards, so a host reaches both on its own ``127.0.0.1``: hosts need no route to the
  controller, which is what cloud instances behind NAT and jump hosts have.

Nothing persists on a host: the proxy reaches apt through the play's ``environment`` and the
wheelhouse is a ``--find-links`` of this run's host_vars, so a killed run leaves no host pointing
at a tunnel that is gone. ``auto`` never fails a run: a part that cannot start (no squid on the
controller, a wheel that has no binary for the host's platform) is left out with a note and the
hosts fetch that part themselves.

Why squid and not apt-cacher-ng: apt-cacher-ng 3.7 cannot bind its port in gVisor sandboxes
such as our CI (its resolver fails on the bind address), and squid also serves dnf.
HTTPS sources pass through uncached (a proxy cannot read TLS); the Debian/Ubuntu archives and
security mirrors are plain HTTP (apt checks their signatures), and wheels never go through the
proxy.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from provision.errors import ProvisionError

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    import paramiko

    from provision.hosts.inventory import HostTarget

SQUID_USER = "proxy"  # Debian's and Ubuntu's squid package user; squid switches to it from root

# Wheels for the hosts' platform: manylinux up to the oldest glibc among the OS releases the
# tool supports (RHEL 8's 2.28), so a wheel taken here installs on every one of them.
MANYLINUX_MAX_MINOR = 28
MANYLINUX_MIN_MINOR = 17

# Package files and by-hash indexes never change under one URL. Index files do: they are kept
# 5 minutes at most, so the hosts of one run share one fetch (they update within minutes of each
# other) and the next run sees the archive as it is then. Five minutes stale is harmless: the
# archives keep the by-hash files an index names for days. `ignore-reload`: apt asks for index
# files with `Cache-Control: max-age=0`, which would otherwise send every host's request upstream.
SQUID_REFRESH = (
    r"refresh_pattern -i (\.deb|\.udeb|\.rpm|\.drpm|\.whl)$ 129600 100% 129600 "
    r"refresh-ims override-expire ignore-reload",
    r"refresh_pattern -i /by-hash/ 129600 100% 129600 refresh-ims override-expire ignore-reload",
    r"refresh_pattern -i (Release|Release\.gpg|InRelease|Packages|Sources|Index|repomd\.xml)(\.(gz|xz|bz2|lz4|zst))?$ "
    r"5 100% 5 refresh-ims override-expire override-lastmod ignore-reload",
    "refresh_pattern . 0 20% 4320",
)
# squid's native log line plus %<bs: body bytes received from upstream ('-' when none came)
SQUID_LOGFORMAT = "%ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt %<bs"


def default_root() -> Path:
    """Where the cache lives between runs: the system's cache dir for root, XDG's otherwise."""
    if os.geteuid() == 0:
        return Path("/var/cache/provision")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "provision"


# --- pure parts: what would be run ----------------------------------------------------------


def wheel_platforms(arch: str) -> list[str]:
    """``pip download --platform`` values for a glibc Linux host of ``arch``."""
    tags = [f"manylinux_2_{m}_{arch}" for m in range(MANYLINUX_MAX_MINOR, MANYLINUX_MIN_MINOR - 1, -1)]
    return [*tags, f"manylinux2014_{arch}"]


@dataclass(frozen=True)
class WheelSet:
    """What one host group's frameworks role installs, as the rendered group_vars say."""

    python: str  # "3.11"
    arch: str  # "x86_64"
    installs: tuple[tuple[tuple[str, ...], str], ...]  # (packages, index_url or "")
    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    no_index: bool = False
    # the indexes' logins (netrc text; render keeps them out of the URLs): pip reads them from
    # the file NETRC names, never from its command line, which `ps` shows to everyone
    netrc: str = field(default="", repr=False)

    @property
    def key(self) -> str:
        """The wheelhouse folder: one per interpreter and platform, shared by every run."""
        return f"cp{self.python.replace('.', '')}-{self.arch}"

    @classmethod
    def from_group_vars(cls, data: Mapping[str, Any], host: Mapping[str, Any], *,
                        netrc: str = "") -> WheelSet | None:  # fmt: skip
        """None where the group installs no frameworks or its platform is unknown."""
        installs = data.get("frameworks_installs") or []
        if not data.get("frameworks_enabled", True) or not installs:
            return None
        python, arch = host.get("python"), host.get("arch")
        if not python or not arch:
            return None
        return cls(
            python=str(python),
            arch=str(arch),
            installs=tuple((tuple(str(p) for p in e["packages"]), str(e.get("index_url") or "")) for e in installs),
            index_url=str(data.get("frameworks_index_url") or ""),
            extra_index_urls=tuple(data.get("frameworks_extra_index_urls") or ()),
            find_links=tuple(data.get("frameworks_find_links") or ()),
            trusted_hosts=tuple(data.get("frameworks_trusted_hosts") or ()),
            no_index=bool(data.get("frameworks_no_index")),
            netrc=netrc,
        )

    def download_commands(self, python_exe: str, dest: Path) -> list[list[str]]:
        """One ``pip download`` per role install entry, with the options the role would pass."""
        abi = f"cp{self.python.replace('.', '')}"
        common = ["--only-binary=:all:", f"--python-version={self.python}", "--implementation=cp", f"--abi={abi}",
                  *(f"--platform={p}" for p in wheel_platforms(self.arch))]  # fmt: skip
        sources = ["--no-index"] if self.no_index else [f"--extra-index-url={u}" for u in self.extra_index_urls]
        sources += [f"--find-links={u}" for u in self.find_links]
        sources += [f"--trusted-host={h}" for h in self.trusted_hosts]
        out = []
        for packages, index_url in self.installs:
            index = index_url or self.index_url
            index_args = [f"--index-url={index}"] if index and not self.no_index else []
            out.append([python_exe, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
                        f"--dest={dest}", *common, *index_args, *sources, *packages])  # fmt: skip
        return out


def squid_conf(*, port: int, store: Path, run: Path, parent: str | None, cache_gib: int = 50) -> str:
    """squid.conf for one run: loopback only, the shared store, this run's logs."""
    lines = [
        "# written by provision for one `provision up` run (the fleet cache); see provision/cache.py",
        f"http_port 127.0.0.1:{port}",
        "visible_hostname provision-fleet-cache",
        f"pid_filename {run / 'squid.pid'}",
        f"cache_dir ufs {store} {cache_gib * 1024} 16 256",
        f"coredump_dir {run}",
        "maximum_object_size 16 GB",
        "cache_mem 64 MB",
        "collapsed_forwarding on",
        "range_offset_limit none",
        f"logformat provision {SQUID_LOGFORMAT}",
        f"access_log stdio:{run / 'access.log'} provision",
        f"cache_log {run / 'cache.log'}",
        "cache_store_log none",
        "logfile_rotate 0",
        "shutdown_lifetime 1 seconds",
        "acl loopback src 127.0.0.0/8 ::1",
        "acl SSL_ports port 443",
        "acl CONNECT method CONNECT",
        # HTTPS sources tunnel through uncached; nothing but loopback (the tunnels) may connect
        "http_access deny CONNECT !SSL_ports",
        "http_access allow loopback",
        "http_access deny all",
        *SQUID_REFRESH,
    ]
    if parent:  # the controller itself goes out through a proxy: squid does too
        m = re.match(r"^https?://(?:[^@/]*@)?([^:/]+)(?::(\d+))?", parent)
        if m:
            lines += [f"cache_peer {m.group(1)} parent {m.group(2) or '80'} 0 no-query default",
                      "never_direct allow all"]  # fmt: skip
    return "\n".join(lines) + "\n"


@dataclass
class ProxyStats:
    requests: int = 0
    hits: int = 0  # answered without a trip upstream (from the store, or collapsed onto a fetch)
    upstream_bytes: int = 0  # what squid fetched from the network (misses, revalidations)
    served_bytes: int = 0  # what the hosts got


def squid_stats(log: str) -> ProxyStats:
    """Sum the access log (:data:`SQUID_LOGFORMAT`): requests, hits, bytes served and fetched."""
    stats = ProxyStats()
    for line in log.splitlines():
        parts = line.split()
        if len(parts) < 11 or "/" not in parts[3]:
            continue
        code = parts[3].split("/")[0]
        if code.startswith("NONE"):  # a connection that sent no request (the readiness probe)
            continue
        stats.requests += 1
        stats.served_bytes += int(parts[4]) if parts[4].isdigit() else 0
        # A hit is a request answered without a trip upstream, whatever squid calls it: TCP_HIT and
        # TCP_MEM_HIT, but also a request collapsed onto another host's fetch still in flight,
        # which squid logs as TCP_CF_HIT, TCP_CF_MISS or even TCP_MISS, always with HIER_NONE.
        status = parts[3].split("/")[1]
        if parts[8].startswith("HIER_NONE") and (status.startswith("2") or status == "304"):
            stats.hits += 1
        stats.upstream_bytes += int(parts[10]) if parts[10].isdigit() else 0
    return stats


def host_vars(apt_port: int | None, wheels_port: int | None, wheel_key: str | None,
              environment: Mapping[str, str]) -> dict[str, Any]:  # fmt: skip
    """The role variables that point one host at its end of the tunnels."""
    out: dict[str, Any] = {}
    # The credential files' proxy settings (render.Credentials: APT_CONFIG for apt, PIP_CONFIG_FILE
    # for pip) would send apt and pip past the tunnels, straight to install.apt.proxy; through a
    # tunnel they need no proxy and no proxy login.
    dropped = ({"APT_CONFIG"} if apt_port is not None else set()) | (
        {"PIP_CONFIG_FILE"} if wheels_port is not None and wheel_key is not None else set())
    if dropped & set(environment):
        out["provision_environment"] = {k: v for k, v in environment.items() if k not in dropped}
    if apt_port is not None:
        out["provision_environment"] = {
            **{k: v for k, v in environment.items() if k not in dropped},
            "http_proxy": f"http://127.0.0.1:{apt_port}",
            "no_proxy": "127.0.0.1,localhost",
        }
    if wheels_port is not None and wheel_key is not None:
        out["frameworks_find_links"] = [f"http://127.0.0.1:{wheels_port}/{wheel_key}/"]
        out["frameworks_no_index"] = True
    return out


# --- the running parts ------------------------------------------------------------------------


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


class Squid:
    """One squid process on 127.0.0.1 for this run, with the store shared between runs."""

    def __init__(self, root: Path, run: str) -> None:
        # squid drops root for its `proxy` user: its files live under the cache root, which that
        # user can reach, not in the run dir (often in a private home or /tmp/pytest-of-*)
        self.store = root / "squid"
        self.workdir = root / "squid-runs" / run
        self.log = self.workdir / "access.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = 30.0) -> None:
        exe = shutil.which("squid", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if exe is None:
            raise RuntimeError("squid is not installed on this machine (apt-get install squid)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.store.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        conf = self.workdir / "squid.conf"
        conf.write_text(squid_conf(port=self.port, store=self.store, run=self.workdir,
                                   parent=os.environ.get("http_proxy") or os.environ.get("HTTP_PROXY")))  # fmt: skip
        if os.geteuid() == 0:  # squid runs as `proxy` when started as root: it must own its files
            uid, gid = _user_ids(SQUID_USER)
            blocked = _not_traversable(self.store, uid)
            if blocked is not None:
                raise RuntimeError(f"squid runs as user {SQUID_USER} and cannot enter {blocked}; "
                                   "set install.cache_dir to a folder it can reach")  # fmt: skip
            _chown_tree(self.store, uid, gid)
            _chown_tree(self.workdir, uid, gid)
        self._end_orphans()
        if not (self.store / "00").exists():
            subprocess.run([exe, "-N", "-z", "-f", str(conf)], capture_output=True, timeout=120, check=False)
        # in the controller's process group: a Ctrl-C or a killed `up` (killpg) ends it too
        self.proc = subprocess.Popen([exe, "-N", "-f", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=(self.workdir / "squid.out").open("wb"))  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"squid exited at start: {_tail(self.workdir / 'squid.out')}")
            with contextlib.suppress(OSError), _connect(self.port):
                return
            time.sleep(0.1)
        raise RuntimeError("squid did not answer within 30 s")

    def _end_orphans(self) -> None:
        """Stop a squid that a killed run left on this store (the caller holds the store's lock)."""
        import signal

        for pid_file in (self.store.parent / "squid-runs").glob("*/squid.pid"):
            if pid_file.parent == self.workdir:
                continue
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                if "squid" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(pid_file.parent, ignore_errors=True)

    def stats(self) -> ProxyStats:
        return squid_stats(self.log.read_text(errors="replace")) if self.log.exists() else ProxyStats()

    def stop(self, keep: Path | None = None) -> None:
        """Stop squid; ``keep``: copy its access log there (the run dir's record of what it served)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if keep is not None and (self.workdir / "access.log").exists():
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.workdir / "access.log", keep)
            self.log = keep  # stats() reads the kept copy; squid's own folder goes
            shutil.rmtree(self.workdir, ignore_errors=True)


class WheelServer:
    """The wheelhouse over HTTP on 127.0.0.1 (read-only files, a directory listing for pip)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.server: ThreadingHTTPServer | None = None
        self.served = 0
        self._lock = threading.Lock()

    def start(self) -> int:
        import functools
        from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

        outer = self

        class Handler(SimpleHTTPRequestHandler):
            def copyfile(self, source: Any, outputfile: Any) -> None:
                before = source.tell()
                super().copyfile(source, outputfile)
                with outer._lock:
                    outer.served += source.tell() - before

            def log_message(self, format: str, *args: Any) -> None:
                return  # the run's report says what was served; no per-request noise on stderr

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(self.directory)))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="provision-wheels", daemon=True).start()
        return int(self.server.server_address[1])

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class Tunnel:
    """Reverse port forwards over one SSH connection: the host's 127.0.0.1:P -> a controller port."""

    def __init__(self, client: paramiko.SSHClient, name: str) -> None:
        self.client = client
        self.name = name
        self.ports: dict[int, int] = {}  # remote port -> local port
        transport = client.get_transport()
        if transport is not None:  # a driver build can leave the tunnel idle for minutes: keep NATs open
            transport.set_keepalive(30)

    def forward(self, local_port: int) -> int:
        transport = self.client.get_transport()
        assert transport is not None
        remote = transport.request_port_forward("127.0.0.1", 0, handler=self._handler)
        self.ports[remote] = local_port
        return int(remote)

    def _handler(self, channel: paramiko.Channel, origin: tuple[str, int], server: tuple[str, int]) -> None:
        local = self.ports.get(server[1])
        if local is None:
            channel.close()
            return
        threading.Thread(target=_pump, args=(channel, local), name=f"tunnel-{self.name}", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def _pump(channel: paramiko.Channel, local_port: int) -> None:
    import select
    import socket

    try:
        sock = socket.create_connection(("127.0.0.1", local_port), timeout=10)
    except OSError:
        channel.close()
        return
    try:
        while True:
            waiters: list[Any] = [sock, channel]  # a paramiko Channel has fileno(): select takes it
            ready = select.select(waiters, [], [], 60)[0]
            if not ready:
                continue
            if sock in ready:
                data = sock.recv(1 << 16)
                if not data:
                    break
                channel.sendall(data)
            if channel in ready:
                data = channel.recv(1 << 16)
                if not data:
                    break
                sock.sendall(data)
    except OSError:
        pass
    finally:
        sock.close()
        channel.close()


class FleetCache:
    """Start what the hosts of one run need, hand out their host_vars, stop it all at the end."""

    def __init__(self, root: Path, run_dir: Path, *, python_exe: str, say: Any = None) -> None:
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
        connect: Any,
    ) -> dict[str, dict[str, Any]]:
        """host -> role variables; hosts missing from it fetch everything themselves."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lockfile = (self.root / ".lock").open("w")
        except OSError as exc:  # auto never fails a run: no cache this time, and the note says why
            self.report.apt = f"off: cannot use {self.root}: {exc.strerror}"
            self.report.notes.append(f"the cache folder {self.root} cannot be used ({exc.strerror}): "
                                     "hosts fetch themselves; set install.cache_dir to a writable folder")  # fmt: skip
            return {}
        try:  # one run at a time on one store: a second run goes without the cache
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.report.apt = "off: another provision run is using the cache"
            self.report.notes.append(f"the cache at {self.root} is in use by another run: hosts fetch themselves")
            return {}
        apt_local = self._start_squid()
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
                apt_remote = tunnel.forward(apt_local) if apt_local else None
                wheels_remote = tunnel.forward(wheels_local) if wheels_local and key else None
            except Exception as exc:  # auto never fails a run: this host fetches itself
                if tunnel is not None:
                    tunnel.close()
                self.report.notes.append(f"{t.name}: no tunnel ({_one_line(exc)}): the host fetches itself")
                continue
            self.tunnels.append(tunnel)
            self.report.hosts.append(t.name)
            out[t.name] = host_vars(apt_remote, wheels_remote, key, environment)
        return out

    def _start_squid(self) -> int | None:
        squid = Squid(self.root, self.run_dir.name)
        try:
            squid.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            self.report.apt = f"off: {_one_line(exc)}"
            self.report.notes.append(f"apt/dnf cache off: {_one_line(exc)}")
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
            before = _folder_bytes(dest)
            self.say(f"fleet cache: filling the wheelhouse for {ws.key}")
            ok, why = True, ""
            with _netrc_env(ws.netrc) as env:
                for cmd in ws.download_commands(self.python_exe, dest):
                    try:
                        r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False, env=env)
                    except (OSError, subprocess.TimeoutExpired) as exc:
                        ok, why = False, _one_line(exc)
                        break
                    if r.returncode != 0:
                        ok, why = False, _last_error(r.stderr)
                        break
            self.report.wheel_bytes_added += _folder_bytes(dest) - before
            self.report.wheels[ws.key] = "on" if ok else f"off: {why}"
            if not ok:
                self.report.notes.append(f"wheelhouse {ws.key}: {why}: these hosts fetch their wheels themselves")
            done[ws] = ok
        return {h: (w.key if w is not None and done.get(w) else None) for h, w in wheel_sets.items()}

    def _serve_wheels(self) -> int:
        self.wheels = WheelServer(self.root / "wheels")
        return self.wheels.start()

    def _open_tunnel(self, target: HostTarget, connect: Any) -> Tunnel:
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


@contextlib.contextmanager
def _connect(port: int) -> Iterator[None]:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=1):
        yield


@contextlib.contextmanager
def _netrc_env(netrc: str) -> Iterator[dict[str, str] | None]:
    """The environment of the controller's ``pip download``: NETRC names a 0600 file with the
    indexes' logins for as long as the downloads run (None: no logins, this process's environment)."""
    if not netrc:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="provision-netrc-") as folder:  # 0700
        path = Path(folder) / "netrc"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(netrc)
        yield {**os.environ, "NETRC": str(path)}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give ``path`` and everything under it to ``uid``; a folder already theirs is left as is
    (squid owns what it writes there, and the store can hold many thousands of files)."""
    if path.stat().st_uid == uid:
        return
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, gid)


def _user_ids(user: str) -> tuple[int, int]:
    """``user``'s uid and gid; a machine without that user cannot run squid the Debian way."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise RuntimeError(f"squid's user {user} does not exist on this machine") from None
    return entry.pw_uid, entry.pw_gid


def _not_traversable(path: Path, uid: int) -> Path | None:
    """The first folder above ``path`` that ``uid`` cannot enter (by its mode bits), else None."""
    for parent in reversed(path.parents):
        st = parent.stat()
        if not (st.st_mode & 0o001 or (st.st_uid == uid and st.st_mode & 0o100)):
            return parent
    return None


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return text[-1] if text else "(no output)"


def _last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["pip download failed"])[-1][:200]


def _one_line(exc: BaseException) -> str:
    text = exc.reason() if isinstance(exc, ProvisionError) else str(exc)
    return (text.splitlines() or [type(exc).__name__])[0][:200]
