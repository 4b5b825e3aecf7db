"""One list of package-manager lock files: the preflight role's package_locks.json, read by the
role's wait_package_lock.py (the task passes it) and by probe's lock snippet (gather passes it)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from provision.hosts import gather
from provision.resources import playbooks_dir

ROLE_FILES = playbooks_dir() / "roles" / "preflight" / "files"
DATA = ROLE_FILES / "package_locks.json"
ROLE_SCRIPT = ROLE_FILES / "wait_package_lock.py"
SNIPPET = gather.SNIPPETS / "package_locks.py"


def test_the_one_list_covers_apt_dpkg_rpm_and_dnf_and_both_readers_take_it() -> None:
    doc = json.loads(DATA.read_text())
    assert "/var/lib/apt/lists/lock" in doc["fcntl"] and "/var/lib/rpm/.rpm.lock" in doc["fcntl"]
    assert "/var/cache/apt/archives/lock" in doc["fcntl"] and "/var/run/dnf.pid" in doc["pid_files"]
    assert gather.package_lock_files() == (doc["fcntl"], doc["pid_files"])
    root = gather.probe_command(gather.GatherOptions(), ["root"])
    for path in doc["fcntl"]:
        assert f"fcntl:{path}" in root
    for path in doc["pid_files"]:
        assert f"pid:{path}" in root
    tasks = (playbooks_dir() / "roles" / "preflight" / "tasks" / "main.yml").read_text()
    assert re.search(
        r"wait_package_lock\.py [^\n]*\}\}\s+\{\{ lookup\('ansible\.builtin\.file', 'package_locks\.json'\)", tasks
    )
    # no second list hides in either program
    for program in (ROLE_SCRIPT, SNIPPET):
        assert not re.search(r"\"/var/(lib|cache|run)/", program.read_text()), program


def test_both_programs_see_the_same_held_lock(tmp_path: Path) -> None:
    lock, pid_file = tmp_path / "lock-frontend", tmp_path / "dnf.pid"
    lock.write_text("")
    pid_file.write_text(f"{os.getpid()}\n")
    locks = {"fcntl": [str(lock)], "pid_files": [str(pid_file)]}
    args = [f"fcntl:{lock}", f"pid:{pid_file}"]
    with open(lock, "r+") as held:
        fcntl.lockf(held, fcntl.LOCK_EX)  # this process holds it; the programs run as others
        waited = subprocess.run(
            [sys.executable, str(ROLE_SCRIPT), "0", json.dumps(locks)], capture_output=True, text=True, timeout=60
        )
        probed = subprocess.run([sys.executable, str(SNIPPET), *args], capture_output=True, text=True, timeout=60)
    assert waited.returncode == 1 and f"lock {lock} is still held after 0s" in waited.stdout
    assert {h["path"] for h in json.loads(probed.stdout)["held"]} == {str(lock), str(pid_file)}
    pid_file.write_text("")
    free = subprocess.run([sys.executable, str(ROLE_SCRIPT), "0", json.dumps(locks)], capture_output=True, text=True)
    assert (free.returncode, free.stdout.strip()) == (0, "free")
    probed = subprocess.run([sys.executable, str(SNIPPET), *args], capture_output=True, text=True, timeout=60)
    assert json.loads(probed.stdout) == {"held": [], "denied": []}
