"""signed_repo's handling of entries the image already has for the repository (Signed-By conflicts).

The `signed_repo_apt_conflicts` module (playbooks/roles/signed_repo/library) run as Ansible runs
it, on an apt directory in a temporary folder holding the entry shapes real images carry:
cuda-keyring's one-line list (`deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] URL /`,
NVIDIA's Driver Installation Guide, "Network repository installation"), a deb822 `.sources` file,
and a sources.list with other entries that must stay. The run against real apt is in
tests/integration/test_roles_images.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from provision.resources import playbooks_dir

MODULE = playbooks_dir() / "roles" / "signed_repo" / "library" / "signed_repo_apt_conflicts.py"
URL = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"

KEYRING_LIST = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {URL} /\n"
SOURCES_LIST = (
    "deb http://archive.ubuntu.com/ubuntu jammy main restricted\n"
    "# deb http://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64 /\n"
    "deb [arch=amd64 trusted=yes] http://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64 /\n"
)
DEB822_ONLY = (
    "Types: deb\n"
    f"URIs: {URL}\n"
    "Suites: /\n"
    "Signed-By: /usr/share/keyrings/nvidia-dlami.gpg\n"
    "\n"
    "Types: deb\n"
    "URIs: http://archive.ubuntu.com/ubuntu\n"
    "Suites: jammy\n"
    "Components: main\n"
)
DEB822_SHARED = "Types: deb\nURIs: http://mirror.example/ubuntu https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64\nSuites: /\nEnabled: yes\n"


def _apt_dir(tmp: Path) -> Path:
    apt = tmp / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text(SOURCES_LIST)
    (apt / "sources.list.d" / "cuda-ubuntu2204-x86_64.list").write_text(KEYRING_LIST)
    (apt / "sources.list.d" / "dlami.sources").write_text(DEB822_ONLY)
    (apt / "sources.list.d" / "mixed.sources").write_text(DEB822_SHARED)
    (apt / "sources.list.d" / "cuda.list").write_text(f"deb [signed-by=/usr/share/keyrings/cuda.asc] {URL} /\n")
    return apt


def _run(tmp: Path, apt: Path, *, check_mode: bool = False) -> dict[str, Any]:
    args = {
        "url": URL,
        "keep": str(apt / "sources.list.d" / "cuda.list"),
        "name": "cuda",
        "apt_dir": str(apt),
        "backup_dir": str(tmp / "backups"),
        "_ansible_check_mode": check_mode,
    }
    (tmp / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    r = subprocess.run([sys.executable, str(MODULE), str(tmp / "args.json")], capture_output=True, text=True)
    return dict(json.loads(r.stdout))


def _active_one_line(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("deb")]


def test_every_other_entry_for_the_url_is_disabled_with_a_backup_and_ours_is_kept(tmp_path: Path) -> None:
    apt = _apt_dir(tmp_path)
    before = {p.name: p.read_text() for p in [apt / "sources.list", *(apt / "sources.list.d").iterdir()]}
    result = _run(tmp_path, apt)
    assert not result.get("failed"), result
    assert result["changed"]
    assert {Path(d["path"]).name for d in result["disabled"]} == {
        "sources.list",
        "cuda-ubuntu2204-x86_64.list",
        "dlami.sources",
        "mixed.sources",
    }
    # one-line: commented out (http:// and no trailing slash is the same repository); others stay
    assert _active_one_line((apt / "sources.list").read_text()) == [
        "deb http://archive.ubuntu.com/ubuntu jammy main restricted"
    ]
    assert _active_one_line((apt / "sources.list.d" / "cuda-ubuntu2204-x86_64.list").read_text()) == []
    assert (
        "# provision (signed_repo cuda) disabled: deb [signed-by="
        in (apt / "sources.list.d" / "cuda-ubuntu2204-x86_64.list").read_text()
    )
    # deb822: a stanza with only that URI is disabled, the next stanza is untouched
    dlami = (apt / "sources.list.d" / "dlami.sources").read_text()
    first, _, second = dlami.partition("\n\n")
    assert "Enabled: no" in first and "Enabled" not in second and "URIs: http://archive.ubuntu.com/ubuntu" in second
    # deb822: a stanza that names another URI too keeps it, without ours, still enabled
    mixed = (apt / "sources.list.d" / "mixed.sources").read_text()
    assert "URIs: http://mirror.example/ubuntu\n" in mixed and "Enabled: yes" in mixed
    # ours is left alone; a backup of each changed file holds it as it was
    assert (apt / "sources.list.d" / "cuda.list").read_text() == before["cuda.list"]
    backups = {Path(b).name.rsplit(".", 1)[0]: Path(b).read_text() for b in result["backups"]}
    assert backups == {name: before[name] for name in backups} and len(backups) == 4

    again = _run(tmp_path, apt)
    assert again["changed"] is False and again["disabled"] == []


def test_check_mode_reports_without_writing(tmp_path: Path) -> None:
    apt = _apt_dir(tmp_path)
    before = (apt / "sources.list.d" / "cuda-ubuntu2204-x86_64.list").read_text()
    result = _run(tmp_path, apt, check_mode=True)
    assert result["changed"] and result["disabled"]
    assert (apt / "sources.list.d" / "cuda-ubuntu2204-x86_64.list").read_text() == before
    assert not (tmp_path / "backups").exists()


def test_a_host_without_the_repository_is_left_alone(tmp_path: Path) -> None:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    result = _run(tmp_path, apt)
    assert result["changed"] is False and result["disabled"] == []
