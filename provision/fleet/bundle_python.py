"""The standalone CPython in a bundle: the python-build-standalone archive each group's hosts
install, and a download list of the bundle's own that points uv at it (issue 31).

On the controller, the knowledge's uv release (os.yaml ``standalone_python``, the one python_env
installs on the hosts, run from its wheel fetched by the pinned sha256) installs the group's Python
into a throwaway folder with the site's own sources (``install.python_mirror`` /
``install.python_downloads_json``, as the hosts would use them) and keeps the archive it
downloaded (``UV_PYTHON_CACHE_DIR``: uv downloads the archive into that folder as
``<first 9 hex of its sha256>-<file>`` and checks the sha256 while unpacking it, uv's
``crates/uv-python/src/downloads.rs``, read 2026-12-06; seen keeping the archive with uv 0.13.8).
So the archive is the one the host would have downloaded, byte for byte.

In the bundle, under ``python/``:

- ``<build>/<file>``: the archive, where a python-build-standalone mirror has it
  (``<mirror>/<release tag>/<file>``: how uv's ``python-install-mirror`` rewrites a download,
  https://docs.astral.sh/uv/reference/settings/#python-install-mirror);
- ``downloads.json``: uv's ``python-downloads-json-url`` list (its format: uv's own
  ``crates/uv-python/download-metadata.json``) naming only these archives, each by its sha256 and
  at python-build-standalone's release URL.

On a host, python_env runs uv with that list and ``file://<bundle>/python`` as the mirror (and
``UV_OFFLINE``): the request it makes on line (``uv python install 3.12``) finds the one build of
that minor in the list and reads it from the bundle, checking its sha256 again.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
import subprocess
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from provision.errors import BadInput, OperationFailed
from provision.files import sha256_file
from provision.model.settings import InstallSettings

DOWNLOADS = "downloads.json"
# python-build-standalone's release downloads, the prefix uv's python-install-mirror replaces
# (https://docs.astral.sh/uv/reference/settings/#python-install-mirror; uv's downloads.rs strips
# CPYTHON_DOWNLOADS_URL_PREFIX and refuses a mirror for a URL without it)
RELEASES = "https://github.com/astral-sh/python-build-standalone/releases/download"


@dataclass(frozen=True)
class BundledPython:
    """One archive the bundle carries."""

    key: str  # uv's download key: cpython-3.11.7-linux-x86_64-gnu
    member: str  # python/<build>/<file>
    entry: dict[str, Any]  # its downloads.json entry (its sha256 among them)


def uv_binary(wheels: Path, dest: Path) -> Path:
    """uv's executable, out of the one uv wheel in ``wheels`` (fetched by the knowledge's hash)."""
    found = sorted(wheels.glob("uv-*.whl"))
    if len(found) != 1:
        raise OperationFailed(f"bundle: {len(found)} uv wheels in {wheels}, not one", "build the bundle again")
    with zipfile.ZipFile(found[0]) as whl:
        # a wheel's scripts live in <name>-<version>.data/scripts/ (PEP 427 "The .data directory")
        name = next((n for n in whl.namelist() if n.endswith(".data/scripts/uv")), None)
        if name is None:
            raise OperationFailed(f"bundle: {found[0].name} holds no uv executable", "build the bundle again")
        dest.mkdir(parents=True, exist_ok=True)
        exe = dest / "uv"
        exe.write_bytes(whl.read(name))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def fetch(uv: Path, python: str, arch: str, *, install: InstallSettings, stage: Path, work: Path) -> BundledPython:
    """The archive uv installs for CPython ``python`` (X.Y) on glibc Linux ``arch``, into
    ``stage/python/<build>/<file>``, with its downloads.json entry."""
    request = f"cpython-{python}-linux-{arch}-gnu"  # uv's request form <impl>-<version>-<os>-<arch>-<libc>
    cache, target = work / "archives", work / "installed"
    env = _env(install, {"UV_PYTHON_INSTALL_DIR": str(target), "UV_PYTHON_CACHE_DIR": str(cache)}, work)
    _uv(uv, ["python", "install", request, "--no-bin"], env, f"installing CPython {python} for {arch}")
    installed = json.loads(
        _uv(uv, ["python", "list", "--only-installed", "--managed-python", "--output-format", "json"], env, "listing")
    )
    if len(installed) != 1:
        raise OperationFailed(f"bundle: uv installed {len(installed)} Pythons for {request}", "build the bundle again")
    key = str(installed[0]["key"])
    downloads = json.loads(
        _uv(uv, ["python", "list", "--only-downloads", "--all-arches", "--output-format", "json", key], env, "listing")
    )
    download = next((d for d in downloads if d["key"] == key), None)
    archives = [p for p in cache.rglob("*") if p.is_file()]
    if download is None or not download.get("url") or len(archives) != 1:
        raise OperationFailed(f"bundle: uv kept no single archive for {key}", "build the bundle again")
    build, file = _build_and_file(str(download["url"]))
    member = f"python/{build}/{file}"
    dest = stage / member
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(archives[0], dest)
    digest = sha256_file(dest)
    parts = download["version_parts"]
    version = str(download["version"])
    numbers = f"{parts['major']}.{parts['minor']}.{parts['patch']}"
    entry = {
        "name": download["implementation"],
        "arch": {"family": download["arch"], "variant": None},
        "os": download["os"],
        "libc": download["libc"],
        "major": parts["major"],
        "minor": parts["minor"],
        "patch": parts["patch"],
        "prerelease": version[len(numbers) :] if version.startswith(numbers) else "",
        "url": f"{RELEASES}/{build}/{quote(file)}",
        "sha256": digest,
        "variant": None,
        "build": build,
    }
    return BundledPython(key, member, entry)


def write_downloads(stage: Path, pythons: Mapping[str, BundledPython]) -> Path:
    """``stage/python/downloads.json``: the bundle's archives, and only them."""
    path = stage / "python" / DOWNLOADS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({p.key: p.entry for p in pythons.values()}, indent=1, sort_keys=True) + "\n")
    return path


def host_sources(where: str) -> dict[str, str]:
    """python_env's sources for a host with the bundle unpacked at ``where``."""
    return {
        "python_env_python_mirror": f"file://{where}/python",
        "python_env_python_downloads_json": f"{where}/python/{DOWNLOADS}",
    }


def _build_and_file(url: str) -> tuple[str, str]:
    """(release tag, file name) from a download URL: its last two path segments."""
    segments = [unquote(s) for s in urlsplit(url).path.split("/") if s]
    if len(segments) < 2 or not segments[-1].endswith((".tar.gz", ".tar.zst")):
        raise OperationFailed(f"bundle: uv's download URL {url} is not a release file", "check install.python_mirror")
    build, file = segments[-2], segments[-1]
    if "/" in build or build in (".", "..") or file.startswith("."):
        raise OperationFailed(f"bundle: uv's download URL {url} is not a release file", "check install.python_mirror")
    return build, file


def _env(install: InstallSettings, extra: Mapping[str, str], work: Path) -> dict[str, str]:
    # uv's settings as environment variables (https://docs.astral.sh/uv/reference/environment/):
    # no uv.toml of the controller's user, a cache of its own, the site's sources as python_env
    # gives them to the hosts (provision.ansible.role_vars._python_vars)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update({"UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(work / "cache"), "UV_NO_PROGRESS": "1", **extra})
    if install.python_mirror:
        env["UV_PYTHON_INSTALL_MIRROR"] = install.python_mirror
    if install.python_downloads_json:
        env["UV_PYTHON_DOWNLOADS_JSON_URL"] = install.python_downloads_json
    return env


def _uv(uv: Path, args: list[str], env: Mapping[str, str], what: str) -> str:
    try:
        r = subprocess.run([str(uv), *args], capture_output=True, text=True, env=dict(env), timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OperationFailed(f"bundle: uv failed {what}: {exc}", "check the controller") from exc
    if r.returncode != 0:
        lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith("error:")), lines[-1] if lines else f"exit {r.returncode}")
        raise OperationFailed(
            f"bundle: uv failed {what}: {why[:300]}",
            "check that the controller reaches install.python_mirror (or python-build-standalone's releases)",
        )
    return r.stdout


def check_arch(arch: str) -> None:
    """The controller runs uv for a group of ``arch``: refused before any download when it cannot."""
    here = platform.machine()
    if arch != here:
        raise BadInput(
            f"a bundle with a standalone CPython for {arch} is built on an {arch} controller (this one is {here})",
            f"run provision bundle on an {arch} machine",
        )
