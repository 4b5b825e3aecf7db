#!/usr/bin/python
"""Ansible module: make sure every distribution of the lock's closure in the venv is the file the
lock pins by sha256, not merely a distribution of the same name and version.

Why: `--require-hashes` checks only what pip or uv download. A distribution of the locked name
and version that the venv already holds is "already satisfied" and kept, whatever file it came
from (a wheel built elsewhere, a mirror's other file, an image's own install). And what is
installed cannot be checked against the lock afterwards: the lock pins the wheel file's sha256,
while an installed distribution keeps only its files' hashes (`RECORD`), from which the wheel's
hash cannot be computed.

So provision keeps its own record, `<venv>/provision-closure.json`: for each distribution it
installed, the locked version and wheel sha256, and the sha256 of the distribution's `RECORD`
right after the install (RECORD lists every installed file with its own sha256, so a
distribution reinstalled from another file, or by another tool, has another RECORD).

- O(state=check), before the install: each distribution of the closure that the venv holds is
  trusted only when the record names it with the lock's version and sha256 and its RECORD is
  unchanged; every other one is returned in RV(untrusted), to be uninstalled so that the hashed
  install puts the locked file in its place (pip and uv alike: neither can be told to reinstall
  only what differs from a hash).
  It also returns RV(stale): the distributions provision installed for an earlier lock (the
  record names them, their RECORD unchanged since) that this lock's closure lacks, to be
  uninstalled too, so that the venv holds this lock's closure and not the union of every lock
  applied to it (a lock applied again after a newer one, `provision rollback`, removes what the
  newer one added). A distribution the record does not name, or one reinstalled since by another
  tool, is the user's own and stays.
- O(state=record), after the install: every distribution of the closure must be there exactly
  once at the lock's version, and none may still be one the check refused (the same RECORD
  file: its uninstall did not happen); else the module fails naming it. Each one not trusted
  before was installed by this run's hashed install, and the record is rewritten to say so.

Other designs weighed: `--force-reinstall` on every run reinstalls torch and its CUDA wheels
(gigabytes) each time and reports a change on a converged host; a fresh venv per lock, switched
atomically, does the same on every lock change and moves the venv users point at. A marker
inside each `.dist-info` would survive a reinstall by another tool (pip removes only what RECORD
lists), so the record lives beside the venv and binds each entry to RECORD's hash instead.

The limit: the record is provision's own note, root-owned in the venv; anyone who can write the
venv can rewrite it too. It tells provision's files from files put there some other way; it is no
defence against root on the host.

Runs on the managed host: stdlib only (packaging when the host's Python has it, for versions).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: frameworks_closure
short_description: Check and record that the venv's closure distributions are the lock's files
options:
  venv:
    {description: The venv the closure is installed into., type: path, required: true}
  requirements:
    description: "The lock's hashed requirement lines (name==version --hash=sha256:...)."
    type: list
    elements: str
    required: true
  state:
    {description: "check (before the install) or record (after).", type: str, choices: [check, record], required: true}
  untrusted:
    {description: "state=record: RV(untrusted) of the check, which must be gone.", type: dict, default: {}}
  stale:
    {description: "state=record: RV(stale) of the check, which must be gone.", type: dict, default: {}}
"""

RETURN = r"""
untrusted:
  description: "Distributions of the closure not installed by provision from the locked file: name -> RECORD ids."
  type: dict
  returned: state=check
stale:
  description: "Distributions provision installed for an earlier lock that this lock lacks: name -> RECORD ids."
  type: dict
  returned: state=check
remove:
  description: "The names of RV(untrusted) and RV(stale) together, sorted: what the role uninstalls."
  type: list
  elements: str
  returned: state=check
record: {description: The record's path., type: str, returned: always}
"""

RECORD_FILE = "provision-closure.json"
_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s+--hash=sha256:([0-9a-f]{64})$")


def canonical(name: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def same_version(a: str, b: str) -> bool:
    try:
        from packaging.version import InvalidVersion, Version  # noqa: PLC0415 (the host's Python may lack packaging: the fallback below)
    except ImportError:
        return a.lower() == b.lower()
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a.lower() == b.lower()


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    sha256: str


@dataclass(frozen=True)
class Installed:
    """One distribution in the venv: its metadata folder and its RECORD's sha256 ("" without one)."""

    name: str
    version: str
    path: str
    record: str
    # which RECORD file this is (inode, mtime): an uninstall and install make a new one, even of
    # a file whose RECORD reads the same
    identity: str = ""


def parse_requirements(lines: list[str]) -> list[Locked]:
    out = []
    for line in lines:
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise ValueError(f"frameworks: {line!r} is no hashed requirement line (name==version --hash=sha256:...)")
        out.append(Locked(m.group(1), m.group(2), m.group(3)))
    return out


def site_dirs(venv: Path) -> list[Path]:
    """The venv's purelib and platlib, as its own interpreter names them."""
    code = "import json, sysconfig; print(json.dumps([sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]))"
    out = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True, check=True)
    return sorted({Path(p) for p in json.loads(out.stdout)})


def _headers(path: Path) -> dict[str, str]:
    """Name and Version from METADATA / PKG-INFO (the header block only)."""
    out: dict[str, str] = {}
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key in ("Name", "Version") and key not in out:
                    out[key] = value.strip()
    except OSError:
        pass
    return out


def installed(venv: Path) -> dict[str, list[Installed]]:
    """canonical name -> the distributions the venv holds under it (.dist-info and .egg-info)."""
    out: dict[str, list[Installed]] = {}
    for site in site_dirs(venv):
        if not site.is_dir():
            continue
        for entry in sorted(site.iterdir()):
            record: Path | None = None  # an egg-info has none: never provision's (pip and uv write RECORD)
            if entry.suffix == ".dist-info":
                meta, record = entry / "METADATA", entry / "RECORD"
            elif entry.suffix == ".egg-info":
                meta = entry / "PKG-INFO" if entry.is_dir() else entry
            else:
                continue
            head = _headers(meta)
            stem_name, _, stem_version = entry.stem.partition("-")
            name = head.get("Name") or stem_name
            version = head.get("Version") or stem_version.split("-")[0]
            digest, identity = "", ""
            if record and record.is_file():
                st = record.stat()
                digest, identity = hashlib.sha256(record.read_bytes()).hexdigest(), f"{st.st_ino}:{st.st_mtime_ns}"
            out.setdefault(canonical(name), []).append(Installed(name, version, str(entry), digest, identity))
    return out


def read_record(path: Path) -> dict[str, dict[str, str]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    packages = doc.get("packages") if isinstance(doc, dict) else None
    return packages if isinstance(packages, dict) else {}


def trusted(lock: Locked, dists: list[Installed], record: dict[str, dict[str, str]]) -> bool:
    """The venv holds one distribution of the name, at the lock's version, that provision
    installed from the lock's file and that nothing has reinstalled since."""
    entry = record.get(canonical(lock.name)) or {}
    return (
        len(dists) == 1
        and bool(dists[0].record)
        and same_version(dists[0].version, lock.version)
        and entry.get("version") == lock.version
        and entry.get("sha256") == lock.sha256
        and entry.get("record") == dists[0].record
    )


def check(
    locked: list[Locked], have: dict[str, list[Installed]], record: dict[str, dict[str, str]]
) -> dict[str, list[str]]:
    """The installed distributions of the closure that are not provision's locked files: name ->
    the identities of their RECORDs (what the record step must no longer find)."""
    out: dict[str, list[str]] = {}
    for lock in locked:
        dists = have.get(canonical(lock.name), [])
        if dists and not trusted(lock, dists, record):
            for d in dists:
                out.setdefault(d.name, []).append(d.identity)
    return out


def stale(
    locked: list[Locked], have: dict[str, list[Installed]], record: dict[str, dict[str, str]]
) -> dict[str, list[str]]:
    """What provision installed for an earlier lock and this lock's closure lacks: the record names
    it and the venv still holds that very distribution (RECORD unchanged). Name -> RECORD ids."""
    wanted = {canonical(lock.name) for lock in locked}
    out: dict[str, list[str]] = {}
    for name, entry in sorted(record.items()):
        if name in wanted:
            continue
        for d in have.get(name, []):
            if d.record and d.record == entry.get("record"):
                out.setdefault(d.name, []).append(d.identity)
    return out


def still_there(have: dict[str, list[Installed]], refused: dict[str, list[str]]) -> list[str]:
    """The names of ``refused`` (name -> RECORD ids) whose very distribution the venv still holds."""
    return sorted(
        name for name, ids in refused.items() if any(d.identity in ids for d in have.get(canonical(name), []))
    )


def new_record(
    locked: list[Locked], have: dict[str, list[Installed]], untrusted: dict[str, list[str]]
) -> dict[str, dict[str, str]]:
    """After the install: every distribution of the closure, as this run leaves it. ``untrusted``:
    what the check found (name -> RECORD identities). ValueError naming each one that is
    missing, twice there, at another version, or still the distribution the check refused."""
    out: dict[str, dict[str, str]] = {}
    wrong: list[str] = []
    refused = {canonical(name): set(ids) for name, ids in untrusted.items()}
    for lock in locked:
        dists = have.get(canonical(lock.name), [])
        if len(dists) != 1 or not dists[0].record or not same_version(dists[0].version, lock.version):
            found = ", ".join(f"{d.version} ({os.path.basename(d.path)})" for d in dists) or "nothing"
            wrong.append(f"{lock.name}=={lock.version} (the venv holds {found})")
            continue
        if dists[0].identity in refused.get(canonical(lock.name), set()):
            wrong.append(f"{lock.name}=={lock.version} (the venv still holds the file provision did not install)")
            continue
        # trusted before, or installed just now by the hashed install (the check's refusals are gone)
        out[canonical(lock.name)] = {"version": lock.version, "sha256": lock.sha256, "record": dists[0].record}
    if wrong:
        raise ValueError(
            "frameworks: after the hashed install the venv does not hold the lock's "
            + "; ".join(wrong)
            + " (remove the venv and run provision up again)"
        )
    return out


def write_atomically(path: Path, doc: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".provision-closure.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "requirements": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "choices": ["check", "record"], "required": True},
            "untrusted": {"type": "dict", "default": {}},
            "stale": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    venv = Path(module.params["venv"])
    path = venv / RECORD_FILE
    try:
        locked = parse_requirements(module.params["requirements"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not (venv / "bin" / "python").exists():
        if module.check_mode:  # python_env has not made the venv yet: its own tasks report that
            module.exit_json(changed=False, untrusted={}, stale={}, remove=[], record=str(path))
        module.fail_json(msg=f"frameworks: {venv} is no venv (python_env makes it)")
    try:
        have = installed(venv)
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        module.fail_json(msg=f"frameworks: cannot list what {venv} holds ({exc})")
    record = read_record(path)
    if module.params["state"] == "check":
        foreign, old = check(locked, have, record), stale(locked, have, record)
        module.exit_json(changed=False, untrusted=foreign, stale=old, remove=sorted({*foreign, *old}), record=str(path))
    try:
        packages = new_record(locked, have, module.params["untrusted"])
        left = still_there(have, module.params["stale"])
        if left:
            raise ValueError(
                f"frameworks: {', '.join(left)} in {venv} came with an earlier lock, this lock lacks it, and it"
                " could not be uninstalled (remove the venv and run provision up again)"
            )
    except ValueError as exc:
        if module.check_mode:  # nothing was uninstalled or installed: the run would change the venv
            module.exit_json(changed=True, record=str(path))
        module.fail_json(msg=str(exc))
    changed = packages != record
    if changed and not module.check_mode:
        write_atomically(path, {"schema": 1, "packages": packages})
    module.exit_json(changed=changed, record=str(path))


if __name__ == "__main__":
    main()
