"""Before `provision rollback` changes anything: is every artifact the old lock needs still somewhere?

A lock kept in the state DB may be weeks old: its wheels may have left the wheelhouse and the
index, its pinned OS package versions may have left the archive (Debian keeps one version of a
package per suite; a security update replaces the one before it). Applying such a lock would fail
half-way, after other packages were already changed, so rollback looks first and refuses in one
line naming the first missing artifact (BadInput, exit 2; nothing changed on any host).

Wheels (:func:`missing_wheels`), each by its sha256, in the places a host's install can take it
from: the fleet cache's wheelhouse (``<cache>/wheels/<key>/``), the config's ``install.pip.
find_links`` folders (a local wheel by its file name), and the URL the lock records for it (a
``file:`` URL: the file; ``http(s)``: the index answers a HEAD request for it). Only an answer
that says "not there" counts as missing: a source that asks for a login (401/403) may well have
it, and the apply will say so if not.

OS packages (:func:`apt_missing_command`, :func:`check_hosts_packages`), on each apt host,
read-only: the exact version a lock pins is available when dpkg has it installed now or apt's
package lists name it (``apt-cache madison NAME``: "displays available versions of a package in
a tabular format", apt-cache(8), apt's doc/apt-cache.8.xml; its rows are ``name | version |
source``). apt's lists are as fresh as the host's last ``apt-get update``; a version they name
that the mirror has deleted since shows only in the apply. Packages of the plan's own
repositories (NVIDIA's) are left to the apply: the repository may be one the roll back adds
again. dnf hosts are not asked here (the apply's ``dnf`` install with ``allow_downgrade`` fails
on its own, naming the version).
"""

from __future__ import annotations

import shlex
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from provision.errors import BadInput, ProvisionError
from provision.files import sha256_file

if TYPE_CHECKING:
    from provision.hosts.inventory import HostTarget
    from provision.hosts.transport import Transport
    from provision.model.lock import Lock, LockGroup, PythonPackage

# HTTP answers that mean the file is not there (RFC 9110 15.5.5 404 Not Found, 15.5.11 410 Gone)
_GONE = frozenset({404, 410})
_HEAD_TIMEOUT_S = 20
_PARALLEL = 16  # HEAD requests (and local hashes) at once


def _file_name(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])


class _Hashes:
    """sha256 of local files, each read once (a torch wheel is hundreds of MB)."""

    def __init__(self) -> None:
        self._known: dict[Path, str] = {}

    def of(self, path: Path) -> str | None:
        if path not in self._known:
            try:
                self._known[path] = sha256_file(path)
            except OSError:
                return None
        return self._known[path]


def _url_has(url: str, sha256: str, hashes: _Hashes) -> bool:
    """Whether the URL the lock records still gives the wheel (True when it cannot tell)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        return hashes.of(Path(urllib.parse.unquote(parts.path))) == sha256
    if parts.scheme not in ("http", "https"):
        return False
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=_HEAD_TIMEOUT_S):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code not in _GONE  # 401/403: a login the controller lacks; the host may have it
    except (urllib.error.URLError, OSError):
        return False  # unreachable from here: no host of this controller's runs gets it either


def missing_wheels(packages: Iterable[PythonPackage], folders: Sequence[Path]) -> list[PythonPackage]:
    """The wheels found in none of ``folders`` (by file name and sha256) nor at their recorded URL.
    Asked side by side: a closure of a hundred wheels is a hundred HEAD requests to the index."""
    hashes = _Hashes()

    def gone(p: PythonPackage) -> bool:
        local = (f / _file_name(p.url) for f in folders)
        return not any(hashes.of(path) == p.sha256 for path in local) and not _url_has(p.url, p.sha256, hashes)

    wanted = list(packages)
    with ThreadPoolExecutor(max_workers=max(1, min(_PARALLEL, len(wanted)))) as pool:
        return [p for p, is_gone in zip(wanted, pool.map(gone, wanted), strict=True) if is_gone]


def wheel_folders(cache_root: Path, find_links: Sequence[str]) -> list[Path]:
    """Where a host's install can find a wheel by name: the fleet cache's wheelhouses (one folder
    per interpreter and platform, provision/fleet/cache/run.py) and the local find-links folders."""
    house = cache_root / "wheels"
    cached = sorted(p for p in house.iterdir() if p.is_dir()) if house.is_dir() else []
    local = [
        Path(urllib.parse.unquote(urllib.parse.urlsplit(f).path))
        for f in find_links
        if "://" not in f or f.startswith("file:")
    ]
    return [*cached, *local]


def apt_pins(group: LockGroup) -> list[tuple[str, str]]:
    """(name, version) of the group's exactly pinned packages from the OS's own archive."""
    plan = group.packages
    if plan is None or plan.manager != "apt":
        return []
    return [
        (i.name, i.version)
        for i in plan.install
        if i.version is not None and i.repository is None and not any(c in i.version for c in "*?[")
    ]


def apt_missing_command(pins: Sequence[tuple[str, str]]) -> str:
    """A read-only shell command printing ``name=version`` for each pin neither installed nor in
    apt's lists. dpkg-query -W -f '${Version}' prints the installed version (dpkg-query(1));
    madison's second column is the version."""
    checks = []
    for name, version in pins:
        n, v = shlex.quote(name), shlex.quote(version)
        checks.append(
            f"{{ [ \"$(dpkg-query -W -f '${{Version}}' {n} 2>/dev/null)\" = {v} ]"
            f" || apt-cache madison {n} 2>/dev/null | awk -F'|' '{{gsub(/ /, \"\", $2); print $2}}' | grep -qxF -- {v}"
            f" || echo {shlex.quote(f'{name}={version}')}; }}"
        )
    return "; ".join(checks)


def check_hosts_packages(
    lock: Lock, targets: Sequence[HostTarget], connect: Callable[[HostTarget], Transport]
) -> dict[str, list[str]]:
    """host -> its group's pinned ``name=version`` that apt has nowhere (read-only on the hosts).
    A host that cannot be reached now is skipped: the apply fails it alone, saying why."""
    pins = {h: apt_pins(g) for g in lock.groups for h in g.hosts}

    def one(target: HostTarget) -> list[str]:
        command = apt_missing_command(pins.get(target.name, []))
        if not command:
            return []
        try:
            transport = connect(target)
        except ProvisionError:
            return []
        try:
            ran = transport.run(command, timeout=60)
        finally:
            transport.close()
        return [line for line in ran.stdout.splitlines() if line]

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(targets)))) as pool:
        found = dict(zip((t.name for t in targets), pool.map(one, targets), strict=True))
    return {h: gone for h, gone in found.items() if gone}


def check_sources(
    lock: Lock,
    folders: Sequence[Path],
    targets: Sequence[HostTarget],
    connect: Callable[[HostTarget], Transport],
) -> None:
    """BadInput (one line, naming the first missing artifact) when the lock needs one that is gone."""
    for g in lock.groups:
        gone = missing_wheels(g.python_packages, folders)
        if gone:
            p = gone[0]
            more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
            raise BadInput(
                f"the lock {', '.join(g.hosts)} would go back to needs the wheel {p.name}=={p.version}"
                f" (sha256 {p.sha256[:12]}...), which is in no source any more: not in the fleet cache's"
                f" wheelhouse nor install.pip.find_links, nor at {p.url}{more}; nothing was changed",
                "put the wheel back in a find-links folder or the index, or pick another lock with --to",
            )
    for host, pins in check_hosts_packages(lock, targets, connect).items():
        more = f" (and {len(pins) - 1} more)" if len(pins) > 1 else ""
        raise BadInput(
            f"{host}: the lock it would go back to pins {pins[0]}, which apt has neither installed nor in"
            f" its package lists{more}; nothing was changed",
            "run apt-get update there if the lists are old, or pick another lock with --to",
        )
