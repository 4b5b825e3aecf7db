"""`provision plan` through the real CLI: --assume (no host contacted), the run dir, the contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.stack.lock import read_lock

BIN = Path(sys.executable).parent


def _plan(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", "plan", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )


def test_assume_writes_lock_and_a_run_dir_plain_ansible_accepts(tmp_path: Path) -> None:
    r = _plan("--assume", "os=ubuntu-22.04,gpu=H100-SXM:8,name=gpu-a", "--out", "run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["out"] == "run"
    [host] = doc["hosts"]
    assert host["host"] == "gpu-a" and host["probed"] is False
    lock = read_lock(tmp_path / "provision.lock")
    [group] = lock.groups
    driver = group.stack["driver"]
    assert any(c.startswith(f"driver {driver['version']}") for c in host["changes"])
    assert f"fabric manager {driver['version']}" in host["changes"]  # 8 x H100-SXM: an NVSwitch board
    run = tmp_path / "run"
    assert (run / "provision.lock").read_text() == (tmp_path / "provision.lock").read_text()
    assert sorted(p.name for p in (run / "group_vars").iterdir()) == ["all.yml", f"{group.name}.yml"]
    check = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "site.yml"],
        cwd=run,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
    assert check.returncode == 0, check.stderr


def test_human_output_says_what_changes_and_how_to_apply(tmp_path: Path) -> None:
    r = _plan("--assume", "os=debian-12,gpu=L4:1", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "not probed" in r.stdout and "cd run && ansible-playbook site.yml" in r.stdout


def test_config_and_overrides_reach_group_vars(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml").write_text(
        "stack: {frameworks: ['torch==2.13.0+cpu']}\ninstall: {venv: /srv/venv, reboot: never,"
        " pip: {find_links: [/var/tmp/wheels]}}\n"
    )
    r = _plan(
        "--assume",
        "os=debian-12",
        "-c",
        "provision.yaml",
        "--out",
        "run",
        "--set",
        "frameworks_no_index=true",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    text = next((tmp_path / "run" / "group_vars").glob("cpu_*.yml")).read_text()
    assert "nvidia_driver_enabled: false" in text
    assert "- torch==2.13.0+cpu" in text
    assert "python_env_path: /srv/venv" in text and "nvidia_driver_reboot: never" in text
    assert "frameworks_no_index: true" in text


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["--assume", "colour=blue"], 2, "--assume key 'colour' is unknown"),
        (["--assume", "os=debian-12,gpu=H100-SXM:x"], 2, "not a number"),
        (["--assume", "os=solaris-11"], 2, "solaris"),
        ([], 2, "nothing to plan for"),
        (["--assume", "os=debian-12", "--set", "ansible_become_exe=sh"], 2, "not a role variable"),
        (["--assume", "os=debian-12,name=bad;host"], 2, "cannot be used in an inventory"),
        (["--assume", "os=ubuntu-22.04,gpu=K80:1", "--set", "x"], 2, "not NAME=VALUE"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], code: int, words: str) -> None:
    r = _plan(*args, cwd=tmp_path)
    assert r.returncode == code, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], r.stderr
    assert not (tmp_path / "provision.lock").exists()


def test_unsatisfiable_is_exit_3_naming_the_host(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("stack: {frameworks: ['torch>=2.8']}\n")
    r = _plan("--assume", "os=ubuntu-22.04,gpu=K80:1,name=old-box", "-c", "p.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["error"]["code"] == "unsatisfiable" and doc["error"]["message"].startswith("old-box: ")


def test_an_unwritable_out_dir_is_bad_input_and_writes_no_lock(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _plan("--assume", "os=ubuntu-22.04,gpu=H100-SXM:8", "--out", str(blocker / "run"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: cannot write to {blocker / 'run'}: Not a directory (give --out a writable folder)"
    ]
    assert not (tmp_path / "provision.lock").exists()


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_users_non_empty_folder_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """--out at an Ansible project of the user's: plan used to delete its group_vars/*.yml."""
    mine = tmp_path / "mine"
    (mine / "group_vars").mkdir(parents=True)
    (mine / "group_vars" / "webservers.yml").write_text("http_port: 80\n")
    (mine / "site.yml").write_text("- hosts: all\n")
    before = _tree(mine)
    r = _plan("--assume", "os=debian-12,gpu=L4:1", "--out", "mine", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "error: --out mine is a non-empty folder that is not a provision run dir (plan would replace its files) "
        "(give --out a new or empty folder, or a run dir an earlier `provision plan` wrote)"
    ]
    assert _tree(mine) == before
    assert not (tmp_path / "provision.lock").exists()


def test_re_planning_into_its_own_run_dir_replaces_what_it_wrote(tmp_path: Path) -> None:
    r = _plan("--assume", "os=debian-12,gpu=L4:1,name=a", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / ".provision-run-dir").is_file()
    (tmp_path / "run" / "group_vars" / "gone.yml").write_text("x: 1\n")  # a group an earlier lock had
    (tmp_path / "run" / "notes.txt").write_text("the user's\n")
    r = _plan("--assume", "os=ubuntu-22.04,gpu=H100-SXM:8,name=a", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "run" / "group_vars").iterdir())
    assert "gone.yml" not in names and "all.yml" in names
    assert (tmp_path / "run" / "notes.txt").read_text() == "the user's\n"  # files plan does not own stay


def test_a_run_dir_from_before_the_marker_is_still_re_planned(tmp_path: Path) -> None:
    r = _plan("--assume", "os=debian-12,gpu=L4:1", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (tmp_path / "run" / ".provision-run-dir").unlink()  # as an earlier release wrote it
    r = _plan("--assume", "os=debian-12,gpu=L4:1", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / ".provision-run-dir").is_file()


def test_plan_with_the_lock_inside_a_new_out_folder(tmp_path: Path) -> None:
    """`--lock run/provision.lock --out run`: the lock written first made `run` a non-empty folder
    that was not yet a run dir, so the run dir was refused (exit 2) by plan's own lock."""
    args = ("--assume", "os=debian-12,gpu=L4:1,name=a", "--out", "run", "--lock", "run/provision.lock")
    r = _plan(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / "provision.lock").is_file() and (tmp_path / "run" / "site.yml").is_file()
    again = _plan(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
