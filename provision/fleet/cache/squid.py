"""squid for one run: its config (loopback only, the allow-list of :mod:`.sources` as http_access
rules, refresh patterns), its access log's stats, and the process with its store shared between
runs (owned by squid's user when started as root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from provision.fleet.cache.sources import DENIED_NETWORKS, RepoSources

SQUID_USER = "proxy"  # Debian's and Ubuntu's squid package user; squid switches to it from root


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


def _uncovered(names: Iterable[str]) -> list[str]:
    """``names`` less those a ".name" among them covers (squid warns about and drops those)."""
    wild = {h for h in names if h.startswith(".")}
    return sorted({h for h in names if h in wild or not any(h == w[1:] or h.endswith(w) for w in wild)})


def _acl_rules(sources: RepoSources) -> list[str]:
    """squid's http_access rules: only the allowed origins, the lock's before the address checks."""
    # no -n here: squid resolves the request's name, so a public name that resolves into one of
    # these networks is refused too
    lines = [f"acl {name} dst {' '.join(nets)}" for name, nets in DENIED_NETWORKS.items()]
    allow_lock: list[str] = []
    allow_public: list[str] = []
    for kind, origins, out in (("lock", sources.lock, allow_lock), ("public", sources.public, allow_public)):
        # One ACL per (scheme, port, names|addresses): values on one http_access line are ANDed,
        # so each line allows exactly those hosts on that port. `-n`: no DNS in either direction
        # (a name is matched as written, an address listed only matches a URL with that address).
        groups: dict[tuple[str, int, bool], set[str]] = {}
        for o in origins:
            if o.scheme == "https" and o.port != 443:
                continue  # CONNECT goes to 443 only
            groups.setdefault((o.scheme, o.port, o.is_address), set()).add(o.host)
        for (scheme, port, is_address), names in sorted(groups.items()):
            name = f"{kind}_{scheme}_{port}_{'addr' if is_address else 'name'}"
            hosts = _uncovered(names)
            lines.append(f"acl {name} {'dst' if is_address else 'dstdomain'} -n {' '.join(hosts)}")
            if scheme == "https":
                out.append(f"http_access allow CONNECT {name}")
            else:
                lines.append(f"acl port_{port} port {port}")
                out.append(f"http_access allow !CONNECT {name} port_{port}")
    public = sorted({o.host for o in sources.public})
    if public:  # squid resolves only names it may fetch: an unlisted one is refused before any DNS
        lines.append(f"acl public_any dstdomain -n {' '.join(_uncovered(public))}")
    return [
        *dict.fromkeys(lines),  # one port ACL per port, in order
        "http_access deny manager",  # squid's own cache manager pages are not for the hosts
        "http_access deny !loopback",
        "http_access deny CONNECT !SSL_ports",
        # 1. the lock's repositories win wherever they are: listed on purpose, LAN mirrors included
        *allow_lock,
        "http_access deny !public_any" if public else "http_access deny all",
        # 2. then nothing that resolves to the controller itself, link-local or a private network
        *(f"http_access deny {name}" for name in DENIED_NETWORKS),
        # 3. then the public archives and the roles' defaults, by name
        *allow_public,
        "http_access deny all",
    ]


def squid_conf(
    *, port: int, store: Path, run: Path, parent: str | None, sources: RepoSources, cache_gib: int = 50
) -> str:
    """squid.conf for one run: loopback only, the run's repositories only, the shared store, this run's logs."""
    lines = [
        "# written by provision for one `provision up` run (the fleet cache); see provision/fleet/cache/squid.py",
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
        # HTTPS sources tunnel through uncached; nothing but loopback (the tunnels) may connect,
        # and only to the run's repositories
        *_acl_rules(sources),
        *SQUID_REFRESH,
    ]
    if parent:  # the controller itself goes out through a proxy: squid does too
        m = re.match(r"^https?://(?:[^@/]*@)?([^:/]+)(?::(\d+))?", parent)
        if m:
            lines += [
                f"cache_peer {m.group(1)} parent {m.group(2) or '80'} 0 no-query default",
                "never_direct allow all",
            ]
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


class Squid:
    """One squid process on 127.0.0.1 for this run, with the store shared between runs."""

    def __init__(self, root: Path, run: str, sources: RepoSources | None = None) -> None:
        self.sources = sources or RepoSources()
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
        mkdir_passable(self.store.parent)
        mkdir_passable(self.workdir.parent)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.store.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        conf = self.workdir / "squid.conf"
        conf.write_text(
            squid_conf(
                port=self.port,
                store=self.store,
                run=self.workdir,
                parent=os.environ.get("http_proxy") or os.environ.get("HTTP_PROXY"),
                sources=self.sources,
            )
        )
        if os.geteuid() == 0:  # squid runs as `proxy` when started as root: it must own its files
            uid, gid = _user_ids(SQUID_USER)
            blocked = _not_traversable(self.store, uid)
            if blocked is not None:
                raise RuntimeError(
                    f"squid runs as user {SQUID_USER} and cannot enter {blocked}; "
                    "set install.cache_dir to a folder it can reach"
                )
            _chown_tree(self.store, uid, gid)
            _chown_tree(self.workdir, uid, gid)
        self._end_orphans()
        if not (self.store / "00").exists():
            subprocess.run([exe, "-N", "-z", "-f", str(conf)], capture_output=True, timeout=120, check=False)
        # in the controller's process group: a Ctrl-C or a killed `up` (killpg) ends it too
        self.proc = subprocess.Popen(
            [exe, "-N", "-f", str(conf)], stdout=subprocess.DEVNULL, stderr=(self.workdir / "squid.out").open("wb")
        )
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


@contextlib.contextmanager
def _connect(port: int) -> Iterator[None]:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give ``path`` and everything under it to ``uid``; a folder already theirs is left as is
    (squid owns what it writes there, and the store can hold many thousands of files)."""
    # Never through a symlink: squid's user owns what is in the store, so a link it planted there
    # (store/00 -> /etc/shadow) must not make root give that user the link's target. lchown
    # changes the link itself, and the walk does not descend into linked folders.
    if path.is_symlink():
        raise RuntimeError(f"{path} is a symlink; the cache's folders must be real folders")
    if path.stat().st_uid == uid:
        return
    os.chown(path, uid, gid, follow_symlinks=False)
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in (*dirs, *files):
            os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)


def _user_ids(user: str) -> tuple[int, int]:
    """``user``'s uid and gid; a machine without that user cannot run squid the Debian way."""

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise RuntimeError(f"squid's user {user} does not exist on this machine") from None
    return entry.pw_uid, entry.pw_gid


def mkdir_passable(path: Path) -> None:
    """Make the folder ``path`` if it is missing, 0711 whatever the umask (``up`` runs under 077):
    squid's user must pass through the cache root and ``squid-runs`` to the folders it owns. An
    existing folder keeps the mode its owner gave it (:func:`_not_traversable` says if it blocks)."""
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o711)


def _not_traversable(path: Path, uid: int) -> Path | None:
    """The first folder above ``path`` that ``uid`` cannot enter (by its mode bits), else None."""
    for parent in reversed(path.parents):
        st = parent.stat()
        if not (st.st_mode & 0o001 or (st.st_uid == uid and st.st_mode & 0o100)):
            return parent
    return None


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return text[-1] if text else "(no output)"
