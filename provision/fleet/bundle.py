"""``provision bundle``: everything a lock's hosts install, in one verified file (issue 31).

On a controller that can reach the sources once, the bundle takes from the lock:

- each group's framework wheel closure, by the lock's hashes, with the same code that fills the
  fleet cache's wheelhouse (:func:`provision.fleet.cache.wheels.fetch_closure`: ``pip download
  --require-hashes --no-deps`` from exactly the index each wheel was resolved on);
- uv's wheel for each group's CPU, by the sha256 the knowledge pins (os.yaml
  ``standalone_python.uv_wheels``), from the index python_env installs it from;
- the roles (``playbooks/``) and what runs on the hosts (``provision/remote``: the smoke job);
- the OS packages each group's play installs (the driver's and NVIDIA's repositories' too, with
  the headers of the kernels ``--kernel`` names), with their dependency closure, as a signed flat
  apt repository per OS release and CPU (:mod:`provision.fleet.bundle_apt`);
- the standalone CPython of a group whose lock installs one, with a download list of the bundle's
  own that points uv at it (:mod:`provision.fleet.bundle_python`);
- the lock itself, and ``bundle.json`` saying which OS releases and CPUs it is for.

:mod:`provision.fleet.bundle_file` writes the tarball and its MANIFEST and checks them.
Not yet in a bundle (a later slice of issue 31): dnf and Ubuntu hosts (a lock that needs one is
refused here, before anything is downloaded). ``--sign`` signs the MANIFEST
(:mod:`provision.fleet.bundle_sign`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.ansible.role_vars import PYPI
from provision.ansible.settings import netrc_text, split_credentials
from provision.errors import BadInput, OperationFailed
from provision.files import sha256_file
from provision.fleet import bundle_python
from provision.fleet.bundle_apt import (
    KEY_FILE,
    build_repo,
    check_group,
    play_packages,
    repository_sources,
    sources_list,
)
from provision.fleet.bundle_file import LOCK, SCHEMA, write_bundle
from provision.fleet.cache.sources import role_defaults
from provision.fleet.cache.wheels import WheelSet, fetch_closure
from provision.fleet.closure import group_wheel_set
from provision.matrix import load
from provision.model.lock import Lock
from provision.model.settings import InstallSettings
from provision.resources import playbooks_dir

_REMOTE = Path(__file__).resolve().parent.parent / "remote"
_SKIP = ("__pycache__", ".pytest_cache")


@dataclass(frozen=True)
class Built:
    """What ``provision bundle`` wrote."""

    path: Path
    sha256: str  # of the whole file
    size: int
    manifest_sha256: str
    parts: dict[str, int]  # part (wheels, uv, roles, ...) -> bytes
    info: dict[str, Any]


def uv_wheels(arch: str, python: str, index_url: str, netrc: str) -> WheelSet:
    """uv's wheel for ``arch`` as a one-line locked closure: its release and the sha256 of its
    wheels are the knowledge's (os.yaml standalone_python, which python_env installs it by), so
    it is fetched by hash like the frameworks."""
    sp = load().t.standalone_python
    hashes = sorted((sp.uv_wheels.get(arch) or {}).values()) if sp is not None else []
    if sp is None or not hashes:
        raise BadInput(f"the knowledge pins no uv wheel for {arch}", "use a provision release that supports this CPU")
    line = f"uv=={sp.uv}" + "".join(f" --hash=sha256:{h}" for h in hashes)
    return WheelSet(python=python, arch=arch, installs=(), locked=((index_url, (line,)),), netrc=netrc)


def check_lock(lock: Lock, kernels: Sequence[str] = ()) -> None:
    """BadInput (before any download) for a lock a bundle cannot carry yet."""
    for g in lock.groups:
        if not g.host.os or not g.host.arch:
            raise BadInput(f"lock group {g.name} names no OS release or CPU", "plan against the hosts (probe) first")
        if g.stack.python_source == "standalone":
            bundle_python.check_arch(str(g.host.arch))
        check_group(g, kernels)


def build(
    lock: Lock,
    lock_path: Path,
    install: InstallSettings,
    out: Path,
    *,
    python_exe: str,
    overrides: Mapping[str, object] | None = None,
    say: Callable[[str], None] = lambda _: None,
    sign: Callable[[bytes], bytes] | None = None,
    kernels: Sequence[str] = (),
) -> Built:
    """Write the bundle of ``lock`` (read from ``lock_path``) to ``out``; ``kernels``: the hosts'
    kernel releases, whose headers a driver's DKMS build needs."""
    check_lock(lock, kernels)
    bare, creds = split_credentials(install)
    netrc = netrc_text(creds.netrc) if creds.netrc else ""
    index = install.pip.index_url or PYPI
    with tempfile.TemporaryDirectory(prefix=".provision-bundle-", dir=out.parent) as tmp:
        stage = Path(tmp)
        files: dict[str, Path] = {LOCK: lock_path}
        parts: dict[str, int] = {"lock": lock_path.stat().st_size}
        groups: dict[str, Any] = {}
        fetched: set[str] = set()
        pythons: dict[str, bundle_python.BundledPython] = {}
        for g in lock.groups:
            ws = group_wheel_set(g, bare, overrides or {}, netrc)
            arch = str(g.host.arch)
            entry: dict[str, Any] = {"os": g.host.os, "arch": arch, "hosts": list(g.hosts), "wheels": None}
            if ws is not None:
                if not ws.locked:
                    raise BadInput(
                        f"lock group {g.name} has no wheel closure (python_packages) to bundle",
                        "plan again with install.lock_closure: always",
                    )
                entry["wheels"] = f"wheels/{ws.key}"
                entry["python"] = ws.python
                if ws.key not in fetched:
                    _fetch(ws, stage, f"wheels/{ws.key}", python_exe, say)
                    _check_hashes(stage / "wheels" / ws.key, {p.sha256 for p in g.python_packages}, g.name)
                    fetched.add(ws.key)
                uv_key = f"uv/{arch}"
                if uv_key not in fetched:
                    _fetch(uv_wheels(arch, ws.python, index, netrc), stage, uv_key, python_exe, say)
                    fetched.add(uv_key)
                entry["uv"] = uv_key
                if g.stack.python_source == "standalone":
                    entry["standalone_python"] = _standalone(
                        g.stack.python, arch, bare=bare, stage=stage, uv_key=uv_key, pythons=pythons, say=say
                    )
            entry["apt"] = f"apt/{g.host.os}-{arch}"
            groups[g.name] = entry
        if pythons:
            bundle_python.write_downloads(stage, pythons)
        apt = _os_packages(lock, bare, stage, say, kernels)
        for name, path in _tree(stage, ("wheels", "uv", "apt", "python")):
            files[name] = path
            part = name.split("/", 1)[0]
            parts[part] = parts.get(part, 0) + path.stat().st_size
        for prefix, root in (("playbooks", playbooks_dir()), ("remote", _REMOTE)):
            for name, path in _tree(root, ()):
                files[f"{prefix}/{name}"] = path
                parts[prefix] = parts.get(prefix, 0) + path.stat().st_size
        info = {
            "schema": SCHEMA,
            "lock_sha256": sha256_file(lock_path),
            "os": sorted({str(g.host.os) for g in lock.groups}),
            "arch": sorted({str(g.host.arch) for g in lock.groups}),
            "groups": groups,
            "apt": apt,
            "kernels": sorted(kernels),
        }
        say(f"bundle: writing {out} ({len(files) + 1} files and their MANIFEST)")
        written = write_bundle(out, files, info, sign)
    return Built(out, written.sha256, out.stat().st_size, written.manifest_sha256, parts, info)


def _standalone(
    python: str,
    arch: str,
    *,
    bare: InstallSettings,
    stage: Path,
    uv_key: str,
    pythons: dict[str, bundle_python.BundledPython],
    say: Callable[[str], None],
) -> str:
    """The group's standalone CPython into the stage (once per Python and CPU); its bundle member."""
    tag = f"{python}-{arch}"
    if tag not in pythons:
        say(f"bundle: the standalone CPython {python} for {arch}, through uv")
        work = stage / ".python" / tag
        uv = bundle_python.uv_binary(stage / uv_key, work / "bin")
        pythons[tag] = bundle_python.fetch(uv, python, arch, install=bare, stage=stage, work=work)
    return pythons[tag].member


def _os_packages(
    lock: Lock, bare: InstallSettings, stage: Path, say: Callable[[str], None], kernels: Sequence[str]
) -> dict[str, Any]:
    """One signed apt repository per OS release and CPU under ``stage/apt``; {folder: {key, fingerprint}}."""
    defaults: dict[str, Any] = {}
    for d in role_defaults(playbooks_dir() / "roles"):
        defaults.update(d)
    names: dict[tuple[str, str], set[str]] = {}
    repos: dict[tuple[str, str], set[str]] = {}
    keys = (stage / ".keys").resolve()  # apt takes a signed-by that is not an absolute path for a fingerprint
    keys.mkdir(exist_ok=True)
    for g in lock.groups:
        where = (str(g.host.os), str(g.host.arch))
        names.setdefault(where, set()).update(play_packages(g, bare, defaults, kernels))
        repos.setdefault(where, set()).update(repository_sources(g, keys))
    mirror = bare.apt.mirror or str(defaults["nvidia_driver_debian_mirror"])
    security = str(defaults["nvidia_driver_debian_security_mirror"])
    out: dict[str, Any] = {}
    for (os_id, arch), wanted in sorted(names.items()):
        folder = f"apt/{os_id}-{arch}"
        sources = sources_list(os_id, mirror, security, defaults["nvidia_driver_debian_components"])
        sources += "".join(sorted(repos[(os_id, arch)]))
        repo = build_repo(stage / folder, sorted(wanted), sources, arch, say=say)
        out[folder] = {"key": f"{folder}/{KEY_FILE}", "fingerprint": repo.fingerprint, "names": sorted(wanted)}
    return out


def _fetch(ws: WheelSet, stage: Path, sub: str, python_exe: str, say: Callable[[str], None]) -> None:
    dest = stage / sub
    dest.mkdir(parents=True, exist_ok=True)
    say(f"bundle: downloading {sub} by hash")
    why = fetch_closure(ws, python_exe, dest, stage / ".requirements" / sub.replace("/", "-"))
    if why is not None:
        raise OperationFailed(f"bundle: fetching {sub} failed: {why}", "check that the controller reaches the index")


def _check_hashes(folder: Path, want: set[str], group: str) -> None:
    """The folder holds exactly the lock's files: pip checked each download's hash, and this
    also refuses a file pip kept from an earlier run or one the lock does not name."""
    have = {sha256_file(p): p.name for p in folder.iterdir() if p.is_file()}
    extra = sorted(n for h, n in have.items() if h not in want)
    if extra:
        raise OperationFailed(f"bundle: {extra[0]} is not in group {group}'s locked closure", "plan again")
    missing = len(want - set(have))
    if missing:
        raise OperationFailed(f"bundle: {missing} wheel(s) of group {group}'s closure were not fetched", "plan again")


def _tree(root: Path, tops: tuple[str, ...]) -> list[tuple[str, Path]]:
    """Every plain file under ``root`` (only under ``tops`` where given) as (posix path, file),
    without caches; links are refused (a bundle member is a plain file)."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if tops and rel.split("/", 1)[0] not in tops:
            continue
        if any(part in _SKIP or part.endswith(".pyc") for part in p.relative_to(root).parts):
            continue
        if p.is_symlink():
            raise OperationFailed(f"bundle: {p} is a link", "bundles hold plain files only")
        if p.is_file():
            out.append((rel, p))
    return out
