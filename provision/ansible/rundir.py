"""Writing a run dir on disk: the folder checks (``--out`` must be new, empty or plan's own run
dir, the user's own, with no link in it), the marker, replacing the files render owns (through
:mod:`provision.files`: 0600, renamed into place, no link followed), and the umask helper (a run
dir holds credentials and the runner's artifacts: its owner's only).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.ansible.render import SECRETS_FILE, RunVars, render_run
from provision.ansible.roles import BUNDLED_ROLES_PATH, default_roles_path
from provision.errors import BadInput
from provision.files import check_tree, private_dir, replace_file, write_durably
from provision.model import versions
from provision.model.lock import Lock
from provision.model.settings import InstallSettings
from provision.resources import playbooks_dir


@dataclass(frozen=True)
class RunDir:
    path: Path
    files: tuple[str, ...]
    vars: RunVars  # the role variables its files hold, as rendered (never read back from them)


def ensure_dir(path: Path, option: str) -> None:
    """Create ``path`` or say, as bad input, why it cannot be (before anything is written)."""

    try:
        path.mkdir(parents=True, exist_ok=True)
        # a fresh name (O_EXCL): a file or link of the user's at a fixed name is never written
        with tempfile.NamedTemporaryFile(prefix=".provision-write-test.", dir=path):
            pass
    except OSError as exc:
        raise BadInput(f"cannot write to {path}: {exc.strerror or exc}", f"give {option} a writable folder") from exc


# Written by `plan` into every run dir it makes: how a later `plan --out` tells its own run dir
# (re-rendered in place, stale group_vars/*.yml removed) from a folder of the user's (refused).
RUN_DIR_MARKER = ".provision-run-dir"
_MARKER_TEXT = (
    "# This folder is a provision run dir: `provision plan --out` re-renders it in place and removes\n"
    "# group_vars/*.yml it did not write. Delete this file and plan will refuse to write here.\n"
)
# What every run dir from before the marker held (render_run always writes these three).
_UNMARKED_RUN_DIR = ("provision.lock", "ansible.cfg", "site.yml")


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a run dir `plan` wrote (marked, or from a release before the marker)."""
    return (path / RUN_DIR_MARKER).is_file() or all((path / name).is_file() for name in _UNMARKED_RUN_DIR)


def check_out_dir(out: Path, option: str = "--out") -> None:
    """``out`` may be missing, empty, or one of plan's run dirs; anything else is the user's folder.

    Writing a run dir replaces its group_vars/*.yml, so a folder that merely exists (an Ansible
    project, a home directory) is refused before any host is contacted or any file written; so is
    a run dir that is not the user's own or that holds a link (:func:`provision.files.check_tree`).
    """
    check_tree(out, option)
    if not out.exists():
        return
    if not out.is_dir():
        raise BadInput(f"{option} {out} is a file, not a folder", f"give {option} a new or empty folder")
    try:
        empty = next(out.iterdir(), None) is None
    except OSError as exc:
        raise BadInput(
            f"cannot read {option} {out}: {exc.strerror or exc}", f"give {option} a readable folder"
        ) from None
    if not empty and not is_run_dir(out):
        raise BadInput(
            f"{option} {out} is a non-empty folder that is not a provision run dir (plan would replace its files)",
            f"give {option} a new or empty folder, or a run dir an earlier `provision plan` wrote",
        )


def write_run_dir(
    out: Path,
    lock: Lock,
    lock_text: str,
    hosts: Mapping[str, Mapping[str, Any]],
    install: InstallSettings,
    *,
    overrides: Mapping[str, object] | None = None,
    roles_path: str | None = None,
    user_groups: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    bundle_roles: bool = False,
    run: str | None = None,
) -> RunDir:
    """Render and write the run dir (replacing the files it owns, keeping anything else there).

    ``bundle_roles`` copies the roles into the run dir (``roles/``, named relatively by its
    ansible.cfg): `plan --out DIR` makes DIR whole, to commit or to run on another machine with
    ansible-core alone. `up`'s run dirs are run here and then kept as a record: they name the
    installed roles and spare every run a copy.
    """
    if bundle_roles:
        roles_path = BUNDLED_ROLES_PATH
    rendered = render_run(
        lock,
        hosts,
        install,
        roles_path=roles_path or default_roles_path(),
        overrides=overrides,
        user_groups=user_groups,
        run=run,
    )
    files = rendered.files
    check_out_dir(out)
    ensure_dir(out, "--out")
    private_dir(out)
    replace_file(out / RUN_DIR_MARKER, _MARKER_TEXT)
    stale = out / "group_vars"
    if stale.is_dir() and not stale.is_symlink():
        for old in stale.glob("*.yml"):
            old.unlink()
    (out / SECRETS_FILE).unlink(missing_ok=True)  # a run without credentials keeps none from before
    for rel, text in files.items():
        target = out / rel
        private_dir(target.parent)
        replace_file(target, text)
    written = [*files, "provision.lock"]
    if bundle_roles:
        _copy_roles(out / BUNDLED_ROLES_PATH)
        written.append(f"{BUNDLED_ROLES_PATH}/")
    write_durably(out / "provision.lock", lock_text)  # the run dir's copy: as durable as --lock's (0600)
    return RunDir(out, tuple(sorted(written)), rendered.vars)


def _copy_roles(dest: Path) -> None:
    """All of provision's roles into ``dest``, replacing an earlier plan's copy (the roles
    site.yml runs include others, signed_repo and package_plan: the whole folder goes)."""

    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(playbooks_dir() / "roles", dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # the verify role's filter reads the one version rule; a run dir taken to a machine without
    # provision carries it (playbooks/roles/verify/filter_plugins/version_rule.py)
    (dest / "verify" / "files").mkdir(exist_ok=True)
    shutil.copyfile(Path(versions.__file__), dest / "verify" / "files" / "versions.py")
    # closed like the rest of the run dir (folders 0700, files 0600): the copies keep the installed
    # package's modes otherwise, and the run dir's promise is that nothing in it is open to others
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600 | (path.stat().st_mode & 0o100))


@contextmanager
def private_umask() -> Iterator[None]:
    """Files and folders made meanwhile (by this process and by the programs it starts, which
    inherit the umask: ansible-playbook writing the runner's artifacts) are their owner's only."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def write_host_vars(ansible_dir: Path, per_host: dict[str, dict[str, Any]], why: str) -> None:
    """Add variables to this run's host_vars/<host>.yml (never to the lock: they are this run's)."""
    import yaml  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    for host, values in per_host.items():
        if not values:
            continue
        path = ansible_dir / "host_vars" / f"{host}.yml"
        private_dir(path.parent)
        old = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
        replace_file(path, f"# {why}\n" + yaml.safe_dump({**old, **values}, sort_keys=True))
