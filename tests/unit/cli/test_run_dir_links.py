"""`plan --out DIR` into an existing run dir writes through nothing it did not make (issue 25).

Through the real CLI (`plan --assume`, no host contacted), with real links, files and owners: a
link planted in a run dir, or a run dir that is not the user's, is refused in one line (exit 2)
before anything is written, and what the link points at keeps its content and mode.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest

from tests.cli_run import provision

ASSUME = ("--assume", "os=debian-12,gpu=L4:1,name=h1")


def _plan(cwd: Path, out: str = "run") -> subprocess.CompletedProcess[str]:
    return provision("plan", *ASSUME, "--out", out, cwd=cwd, offline=True)


def _snapshot(*roots: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``roots`` (links not followed): mode, owner, and content or link target."""
    seen: dict[str, tuple[int, int, str]] = {}
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))]:
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                what = "-> " + os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                what = path.read_text()
            else:
                what = ""
            seen[str(path)] = (st.st_mode, st.st_uid, what)
    return seen


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run dir an earlier plan wrote (the roles copied in, the marker, 0700)."""
    r = _plan(tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path / "run"


def _refused(r: subprocess.CompletedProcess[str], *words: str) -> str:
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in r.stderr and r.stdout == ""
    assert all(w in line for w in words), line
    return line


def test_a_site_yml_link_to_a_file_outside_is_refused_and_the_file_keeps_content_and_mode(
    tmp_path: Path, run_dir: Path
) -> None:
    """The finding: `site.yml -> victim` truncated the victim and chmodded it 0600."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    victim.chmod(0o644)
    (run_dir / "site.yml").unlink()
    (run_dir / "site.yml").symlink_to(victim)
    before = _snapshot(run_dir, victim)
    line = _refused(_plan(tmp_path), "symbolic link", f"run/site.yml -> {victim}", "remove the link")
    assert "--out run" in line
    assert victim.read_text() == "the user's own file\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert _snapshot(run_dir, victim) == before  # nothing touched, the run dir included


def test_a_group_vars_link_to_a_folder_is_refused_and_the_folder_keeps_its_yml_and_mode(
    tmp_path: Path, run_dir: Path
) -> None:
    """The finding: `group_vars -> dir` deleted every *.yml there and chmodded the folder 0700."""
    victim = tmp_path / "project_vars"
    victim.mkdir()
    (victim / "web.yml").write_text("http_port: 80\n")
    (victim / "db.yml").write_text("port: 5432\n")
    victim.chmod(0o755)
    for old in (run_dir / "group_vars").iterdir():
        old.unlink()
    (run_dir / "group_vars").rmdir()
    (run_dir / "group_vars").symlink_to(victim)
    before = _snapshot(run_dir, victim)
    _refused(_plan(tmp_path), f"run/group_vars -> {victim}")
    assert sorted(p.name for p in victim.iterdir()) == ["db.yml", "web.yml"]
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755
    assert _snapshot(run_dir, victim) == before


def test_a_link_deep_in_the_copied_roles_is_refused(tmp_path: Path, run_dir: Path) -> None:
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (victim / "keep.yml").write_text("x: 1\n")
    (run_dir / "roles" / "preflight" / "extra").symlink_to(victim)
    before = _snapshot(run_dir, victim)
    _refused(_plan(tmp_path), f"run/roles/preflight/extra -> {victim}")
    assert _snapshot(run_dir, victim) == before


def test_out_itself_a_link_is_refused(tmp_path: Path, run_dir: Path) -> None:
    (tmp_path / "alias").symlink_to(run_dir)
    before = _snapshot(run_dir)
    _refused(_plan(tmp_path, "alias"), "--out alias is a symbolic link", "real path")
    assert _snapshot(run_dir) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_run_dir_owned_by_another_user_is_refused_untouched(tmp_path: Path, run_dir: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    for path in [run_dir, *run_dir.rglob("*")]:
        os.chown(path, nobody, -1, follow_symlinks=False)
    before = _snapshot(run_dir)
    _refused(_plan(tmp_path), f"belongs to uid {nobody}", f"not to uid {os.geteuid()}")
    assert _snapshot(run_dir) == before


def test_a_non_empty_run_dir_others_may_write_to_is_refused(tmp_path: Path, run_dir: Path) -> None:
    (run_dir / "group_vars").chmod(0o777)
    before = _snapshot(run_dir)
    _refused(_plan(tmp_path), "writable by group or others", "chmod go-w")
    assert _snapshot(run_dir) == before


def test_a_new_empty_folder_and_a_clean_run_dir_are_still_planned(tmp_path: Path, run_dir: Path) -> None:
    """The checks refuse links and strangers' folders only: `mkdir run` under umask 002 (0775,
    empty) and plan's own run dir re-planned still work, and the result is 0700/0600."""
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    fresh.chmod(0o775)
    assert _plan(tmp_path, "fresh").returncode == 0
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    r = _plan(tmp_path)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE((run_dir / "site.yml").lstat().st_mode) == 0o600


def test_the_writes_themselves_replace_a_link_and_never_write_through_it(tmp_path: Path) -> None:
    """Behind the check: a link made after it (a race) is replaced by the new file, symbolic or
    hard, and a folder link is refused rather than chmodded through."""
    from provision.errors import BadInput
    from provision.files import private_dir, replace_file, write_durably

    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    victim.chmod(0o644)
    run = tmp_path / "run"
    run.mkdir()
    (run / "site.yml").symlink_to(victim)
    os.link(victim, run / "inventory.yml")
    replace_file(run / "site.yml", "- hosts: all\n")
    write_durably(run / "inventory.yml", "all: {}\n")
    assert victim.read_text() == "keep\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    for name in ("site.yml", "inventory.yml"):
        st = (run / name).lstat()
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_nlink == 1
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    (run / "group_vars").symlink_to(folder)
    with pytest.raises(BadInput, match="is a symbolic link"):
        private_dir(run / "group_vars")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755


def test_a_private_folder_s_missing_parents_are_private_too(tmp_path: Path) -> None:
    """mkdir(parents=True) would make the run dir's files/ 0755 on the way to files/health/ (found
    by the integration test that no run file is open to others); each missing folder is 0700."""
    from provision.files import private_dir

    (tmp_path / "run").mkdir(mode=0o755)
    private_dir(tmp_path / "run" / "files" / "health")
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o755  # a folder that was there stays as it was
    for folder in (tmp_path / "run" / "files", tmp_path / "run" / "files" / "health"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
