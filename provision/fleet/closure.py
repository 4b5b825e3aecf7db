"""The lock's wheel closure: every distribution a group's frameworks pull in, by version and sha256.

At plan time pip resolves each group's framework pins for the group's Python and platform from
exactly the sources its hosts install from (the frameworks role's variables, ``--set`` included:
an index, or a find-links wheelhouse with no index), on metadata alone
(:func:`provision.matrix.pypi.pip_dry_run`: PEP 658 metadata or range requests, no wheel
download). The lock group gets the result as ``python_packages``; hosts then install that list
with ``--require-hashes --no-deps``, each entry only from the index it was resolved on
(:func:`provision.ansible.role_vars.locked_installs`), and the fleet cache's wheelhouse fills
from the same list. A conflict is :class:`~provision.errors.Unsatisfiable` (exit 3) before any
host is touched; an index pip cannot reach is one line saying so (exit 1).

Results are cached per input (pins, Python, platform, sources, the local wheelhouse's files) for
a day: plans of one session agree, and a later plan sees new releases of the dependencies.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from provision.ansible.role_vars import PYPI, group_vars
from provision.ansible.settings import netrc_text, split_credentials
from provision.errors import BadInput, OperationFailed, Unreachable, Unsatisfiable
from provision.files import sha256_file
from provision.fleet.cache.wheels import WheelSet, last_error, netrc_env
from provision.matrix import load
from provision.matrix.pypi import default_cache, pip_dry_run
from provision.model.lock import LockGroup, PythonPackage
from provision.model.settings import InstallSettings
from provision.stack.rules import cudnn_gpu_problem

CACHE_TTL_S = 24 * 3600
# pip's own defaults (5 retries, 15 s) make an unreachable index a minute's wait at plan time
_NETWORK = ("--retries=1", "--timeout=20")
_UNREACHABLE = (
    "NewConnectionError",
    "NameResolutionError",
    "connection broken by",
    "Max retries exceeded",
    "Could not fetch URL",
    "ProxyError",
    "ConnectTimeout",
)
_HOST = re.compile(r"host='([^']+)'(?:, port=(\d+))?")
_PYPI_FILES = "files.pythonhosted.org"


def wants_closure(setting: str, applied: bool) -> bool:
    """install.lock_closure: ``auto`` resolves for a lock that will be applied: not for an
    ``--assume`` plan (it reaches nothing, no host and no index) nor for `up --check`'s plan
    (check mode installs nothing, and `make demo` runs it where only PyPI is reachable);
    ``always`` for every plan, ``never`` not at all."""
    return setting == "always" or (setting == "auto" and applied)


def lock_closures(
    groups: Sequence[LockGroup],
    install: InstallSettings,
    overrides: Mapping[str, object] | None = None,
    *,
    cache: Path | None = None,
) -> list[LockGroup]:
    """``groups`` each with its ``python_packages`` set to its frameworks' closure."""
    bare, creds = split_credentials(install)
    netrc = netrc_text(creds.netrc) if creds.netrc else ""
    out = []
    for g in groups:
        ws = group_wheel_set(g, bare, overrides or {}, netrc)
        closure = resolve(ws, g.name, cache or default_cache()) if ws is not None else []
        why = cudnn_closure_problem(g, closure)
        if why is not None:
            raise Unsatisfiable(
                f"group {g.name}: {why}",
                "pin a framework release whose cuDNN range has a release with kernels for this GPU",
            )
        out.append(replace(g, python_packages=closure))
    return out


def group_wheel_set(
    group: LockGroup, bare: InstallSettings, overrides: Mapping[str, object], netrc: str
) -> WheelSet | None:
    """A group's wheels as its frameworks role installs them: its role variables (``bare``: the
    install settings without credentials, split_credentials) with ``--set``'s overrides, as plan,
    the closure and the bundle read them (None: the group installs no framework)."""
    data = {**group_vars(group, bare), **overrides}
    # the Python the roles install into (an override may name another than the lock's host)
    python = data.get("python_env_python")
    return WheelSet.from_group_vars(data, python=str(python) if python else None, arch=group.host.arch, netrc=netrc)


_CUDNN_WHEEL = re.compile(r"nvidia-cudnn-cu\d+")


def cudnn_closure_problem(group: LockGroup, closure: Sequence[PythonPackage]) -> str | None:
    """Rule cudnn_gpu on what pip really resolved: the closure's cuDNN wheel must have kernels for
    the group's GPU. The resolver checks a framework's cuDNN range against the releases wheels.yaml
    knows; the closure is resolved later against the live index, which may hold a newer cuDNN (9.11
    dropped every GPU below compute capability 7.5), so the version the hosts would install is
    checked here too (None: no cuDNN wheel, no known GPU, or it runs there)."""
    if group.host.gpu is None:
        return None
    k = load()
    gpu = k.gpu(group.host.gpu)
    for p in closure:
        if _CUDNN_WHEEL.fullmatch(canonicalize_name(p.name)):
            why = cudnn_gpu_problem(k, p.version, gpu)
            if why is not None:
                return f"the wheel closure installs {p.name} {p.version} (cuDNN), which {why}"
    return None


def resolve(ws: WheelSet, group: str, cache: Path) -> list[PythonPackage]:
    """The closure of every install entry of ``ws``; a name two entries resolve differently is a conflict."""
    out: dict[str, PythonPackage] = {}
    for packages, index_url in ws.installs:
        for p in _resolve_entry(ws, packages, index_url, group, cache):
            have = out.setdefault(canonicalize_name(p.name), p)
            if have.version != p.version:
                raise Unsatisfiable(
                    f"group {group}: the frameworks need {p.name} {have.version} and {p.version} at once",
                    "pin frameworks that agree on their dependencies (stack.frameworks)",
                )
    return sorted(out.values(), key=lambda p: canonicalize_name(p.name))


def _resolve_entry(
    ws: WheelSet, packages: Sequence[str], index_url: str, group: str, cache: Path
) -> list[PythonPackage]:
    sources = ws.source_args(index_url)
    key = json.dumps([list(packages), ws.python, ws.target_args(), sources, _local_files(ws.find_links)])
    path = cache / "closure" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
    try:
        doc = json.loads(path.read_text())
        if time.time() - float(doc["time"]) < CACHE_TTL_S:
            return [PythonPackage.from_json(p, f"closure cache {path}") for p in doc["packages"]]
    except (OSError, ValueError, KeyError, TypeError, BadInput):
        pass  # no cache entry, or an unreadable one: resolve again
    with netrc_env(ws.netrc) as env:
        proc = pip_dry_run(packages, ws.python, ws.target_args(), [*sources, *_NETWORK], deps=True, env=env)
    where = f"group {group} (Python {ws.python}, {ws.arch})"
    # pip takes what it can reach and only warns about an index it cannot: a closure without that
    # index's wheels is not the one the hosts would install, so that is a failure too
    if proc.returncode != 0 or any(m in proc.stderr for m in _UNREACHABLE):
        raise _failure(proc.stderr, packages, where, sources)
    indexes = [i for i in [index_url or ws.index_url, *ws.extra_index_urls] if i and not ws.no_index]
    found = [_package(item, indexes, where) for item in json.loads(proc.stdout).get("install", [])]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"time": time.time(), "packages": [p.to_json() for p in found]}, indent=1))
    tmp.replace(path)
    return found


def _failure(stderr: str, packages: Sequence[str], where: str, sources: Sequence[str]) -> Exception:
    """pip's failure as one line: a conflict or a pin with no wheel (exit 3), an index it cannot reach."""
    errors = [ln.removeprefix("ERROR: ").strip() for ln in stderr.splitlines() if ln.startswith("ERROR:")]
    pins = " ".join(packages)
    if any(m in stderr for m in _UNREACHABLE):
        found = _HOST.search(stderr)
        index = "the index"
        if found:
            port = found.group(2)
            index = found.group(1) + (f":{port}" if port and port not in ("80", "443") else "")
        return Unreachable(
            f"{where}: cannot reach {index} to lock the wheel closure of {pins}",
            "check the network and install.pip, or set install.lock_closure: never to lock the frameworks alone",
        )
    conflict = next((e for e in errors if e.startswith("Cannot install")), None)
    if conflict is not None or any("ResolutionImpossible" in e for e in errors):
        return Unsatisfiable(
            f"{where}: pip finds no wheel set for {pins}: " + (conflict or errors[-1]).rstrip("."),
            "pin versions whose dependencies agree (stack.frameworks)",
        )
    missing = next((e for e in errors if e.startswith("No matching distribution found for")), None)
    if missing is not None:
        return Unsatisfiable(
            f"{where}: {missing.replace('No matching distribution found for', 'no wheel for')} in {' '.join(sources)}",
            "pin a version that has a wheel for this Python and platform, or add the source it is on",
        )
    return OperationFailed(f"{where}: pip cannot resolve {pins}: {last_error(stderr)}", "run with --debug")


def _package(item: Mapping[str, Any], indexes: Sequence[str], where: str) -> PythonPackage:
    """One entry of pip's installation report -> the lock's entry (its file's sha256 from the index)."""
    info = item["download_info"]
    url = str(info["url"])
    archive = info.get("archive_info") or {}
    sha256 = (archive.get("hashes") or {}).get("sha256")
    if not sha256 and str(archive.get("hash") or "").startswith("sha256="):
        sha256 = str(archive["hash"]).split("=", 1)[1]
    if not sha256 and url.startswith("file:"):  # a find-links folder: the file itself is here
        sha256 = sha256_file(Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path)))
    if not sha256:
        raise OperationFailed(
            f"{where}: the index gives no sha256 for {url.split('#', 1)[0]}",
            "use an index that publishes file hashes (the simple API's #sha256=)",
        )
    md = item["metadata"]
    return PythonPackage(
        str(md["name"]), str(md["version"]), str(sha256), url.split("#", 1)[0], _index_of(url, indexes)
    )


def _index_of(url: str, indexes: Sequence[str]) -> str:
    """Which of the install's indexes served ``url``: the one on the file's host (PyPI's files are
    on files.pythonhosted.org); "" for a find-links file; else the entry's main index."""
    if not indexes or url.startswith("file:"):
        return ""
    host = urllib.parse.urlsplit(url).netloc
    same = [i for i in indexes if urllib.parse.urlsplit(i).netloc == host]
    if same:  # the index whose path the file's path is under (download.pytorch.org/whl/cu128/...)
        path = urllib.parse.urlsplit(url).path
        return max(same, key=lambda i: path.startswith(urllib.parse.urlsplit(i).path.rstrip("/") + "/"))
    if host == _PYPI_FILES and PYPI in (i.rstrip("/") for i in indexes):
        return PYPI
    return indexes[0]


def _local_files(find_links: Sequence[str]) -> list[list[Any]]:
    """The wheel files of local find-links folders (name, size, mtime): a refilled wheelhouse is a new input."""
    out: list[list[Any]] = []
    for link in find_links:
        folder = (
            Path(urllib.request.url2pathname(urllib.parse.urlsplit(link).path))
            if link.startswith("file:")
            else Path(link)
        )
        if ("://" in link and not link.startswith("file:")) or not folder.is_dir():
            continue
        for f in sorted(folder.iterdir()):
            if f.is_file():
                st = f.stat()
                out.append([str(f), st.st_size, st.st_mtime_ns])
    return out
