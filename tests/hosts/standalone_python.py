"""A STAND-IN for python-build-standalone, and a local mirror that serves it to uv.

Nothing here is python-build-standalone: the hosts cannot reach its releases, so the tests build
an archive of the same shape (an ``install_only`` tarball: ``python/bin/python3.X``,
``python/lib/libpython3.X.so*``, ``python/lib/python3.X/``) from the CPython that runs the tests,
relocated the way python-build-standalone's builds are (``RPATH=$ORIGIN/../lib``, with patchelf),
and a download list in uv's ``python-downloads-json-url`` format naming its sha256. uv installs
it exactly as it would a real build from a mirror: it downloads the file, refuses a sha256 that
differs from the list's, and unpacks it into its install dir.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

BUILD = "20261202"  # the stand-in's build tag (a python-build-standalone release date in real ones)
# what an install_only build needs least, left out to keep the archive small (site-packages: the
# running venv's own packages, not CPython's)
_SKIP = {"site-packages", "test", "__pycache__", "idlelib", "tkinter", "turtledemo", "lib2to3"}


def version() -> str:
    return platform.python_version()


def minor() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def build_archive(work: Path) -> Path:
    """The stand-in install_only archive of the running CPython, relocatable."""
    base = Path(sys.base_prefix)
    mm = minor()
    root = work / "python"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    exe = base / "bin" / f"python{mm}"
    shutil.copy2(exe, root / "bin" / exe.name)
    (root / "bin" / "python3").symlink_to(exe.name)
    for lib in base.joinpath("lib").glob(f"libpython{mm}*.so*"):
        shutil.copy2(lib, root / "lib" / lib.name, follow_symlinks=True)
    shutil.copytree(
        base / "lib" / f"python{mm}",
        root / "lib" / f"python{mm}",
        ignore=lambda _d, names: [n for n in names if n in _SKIP or n.startswith("config-")],
        symlinks=True,
    )
    (root / "lib" / f"python{mm}" / "site-packages").mkdir()
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        # as python-build-standalone does: the interpreter finds libpython beside it, wherever unpacked
        subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../lib", str(root / "bin" / exe.name)], check=True)
    name = f"cpython-{version()}+{BUILD}-{platform.machine()}-unknown-linux-gnu-install_only.tar.gz"
    out = work / BUILD / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz", compresslevel=1) as tar:
        tar.add(root, arcname="python")
    shutil.rmtree(root)
    return out


def downloads_json(archive: Path, url_prefix: str, sha256: str | None = None) -> dict[str, object]:
    """uv's download list naming ``archive`` at ``url_prefix``/<build>/<file> (sha256: the file's,
    unless another is given, which uv must refuse)."""
    major, mi, patch = (int(x) for x in version().split("."))
    digest = sha256 or hashlib.sha256(archive.read_bytes()).hexdigest()
    key = f"cpython-{version()}-linux-{platform.machine()}-gnu"
    return {
        key: {
            "name": "cpython",
            "arch": {"family": platform.machine(), "variant": None},
            "os": "linux",
            "libc": "gnu",
            "major": major,
            "minor": mi,
            "patch": patch,
            "prerelease": "",
            "url": f"{url_prefix}/{BUILD}/{archive.name.replace('+', '%2B')}",
            "sha256": digest,
            "variant": None,
            "build": BUILD,
        }
    }


def build_mirror(work: Path, host_dir: str, uv_version: str) -> Path:
    """``work`` as the host will see it at ``host_dir``: the stand-in archive, downloads.json (its
    sha256), bad.json (another sha256) and uv's wheel from PyPI for pip's --find-links."""
    work.mkdir(parents=True, exist_ok=True)
    archive = build_archive(work)
    prefix = f"file://{host_dir}"
    (work / "downloads.json").write_text(json.dumps(downloads_json(archive, prefix)))
    (work / "bad.json").write_text(json.dumps(downloads_json(archive, prefix, sha256="f" * 64)))
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(work), f"uv=={uv_version}"],
        check=True,
    )
    return work
