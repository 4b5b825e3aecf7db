"""The built wheel is self-sufficient: installed into a fresh venv it runs, and it carries the
playbooks and templates that the package finds there (not in a source checkout)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_wheel_installs_into_a_fresh_venv_and_finds_its_content(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)], check=True)
    (wheel,) = dist.glob("provision_gpu-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "provision/_content/playbooks/ping.yml" in names
    assert "provision/_content/templates/README.md" in names
    # every tracked file under playbooks/ and templates/ is in the wheel
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "playbooks", "templates"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert {f"provision/_content/{name}" for name in tracked} <= set(names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True)

    # run from elsewhere so that the source checkout cannot be imported by accident
    result = subprocess.run(
        [str(venv / "bin" / "provision"), "--help"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "Usage: provision" in result.stdout
    where = subprocess.run(
        [str(py), "-c", "import provision.resources as r; print(r.playbooks_dir()); print(r.templates_dir())"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    site = venv / "lib"
    assert all(Path(p).is_relative_to(site) for p in where), where
    assert (Path(where[0]) / "ping.yml").is_file()
