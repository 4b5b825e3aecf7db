"""The stand-in NVIDIA repository (standin_repo) read by this machine's real apt, without a host:
NVIDIA's names and version strings, and what its relationships and pinning packages make apt do.

What is a stand-in here: the package contents, the -1 revisions and the signing key (see
standin_repo); the names, versions, Depends/Provides/Conflicts and the pinning packages'
preferences are NVIDIA's (standin_repo.RULES names the source of each).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration import standin_plans as sp
from tests.integration import standin_repo as sr

# two releases of the 595 branch (the default plan's is the newest), one of 580, one of 575
RELEASES = ("575.57.08", "580.95.05", "595.45.04", "595.58.03")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, sr.Repo]:
    root = tmp_path_factory.mktemp("standin")
    plans = [sp.apt_plan("debian12", v, fabric_manager=True) for v in RELEASES]
    folder = sr.repo_folder(root / "served", "debian12")
    return root, sr.build_repo(folder, sr.repository_debs(plans), key_file=sr.APT_KEY_FILE, scratch=root)


def _apt(root: Path, repo: sr.Repo, *args: str, preferences: Path | None = None) -> subprocess.CompletedProcess[str]:
    """apt-get on a private state (only kmod installed) whose only source is the stand-in."""
    apt = root / "apt"
    for sub in ("state/lists/partial", "cache/archives/partial", "etc/preferences.d", "etc/apt.conf.d"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    # nothing installed but kmod, which the module packages need from the OS archive
    (apt / "status").write_text(
        "Package: kmod\nStatus: install ok installed\nVersion: 30+20221128-1\nArchitecture: amd64\n"
        "Maintainer: Debian\nDescription: kmod (as installed on the host)\n"
    )
    key = apt / "standin.asc"  # apt reads an armored signed-by key by its .asc name
    key.write_text(repo.key.read_text())
    (apt / "sources.list").write_text(f"deb [signed-by={key}] file:{repo.path}/ /\n")
    options = {
        "Dir::State": apt / "state",
        "Dir::State::status": apt / "status",
        "Dir::Cache": apt / "cache",
        "Dir::Etc::SourceList": apt / "sources.list",
        "Dir::Etc::SourceParts": apt / "none",
        "Dir::Etc::Parts": apt / "etc/apt.conf.d",
        "Dir::Etc::PreferencesParts": preferences or apt / "etc/preferences.d",
        "Dir::Etc::Preferences": apt / "none",
        "APT::Architecture": "amd64",
        "Debug::NoLocking": "1",
    }
    argv = ["apt-get", "-q", *(f"-o{k}={v}" for k, v in options.items())]
    if not (apt / "state/lists/.updated").exists():
        subprocess.run([*argv, "update"], check=True, capture_output=True, text=True)
        (apt / "state/lists/.updated").touch()
    return subprocess.run([*argv, *args], capture_output=True, text=True)


def _would_install(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """``Inst <name> (<version> ...)`` lines of a simulation."""
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith("Inst ")]
    return {w[1]: w[2].lstrip("(") for w in lines}


def test_names_and_version_strings_are_nvidias(repo: tuple[Path, sr.Repo]) -> None:
    _, r = repo
    index = (r.path / "Packages").read_text()
    found = {
        (stanza.split("\n")[0].removeprefix("Package: "), line.removeprefix("Version: "))
        for stanza in index.split("\n\n")
        if stanza.strip()
        for line in stanza.splitlines()
        if line.startswith("Version: ")
    }
    assert {
        ("nvidia-open-580", "580.95.05-1"),  # below 590: the branch in the name
        ("nvidia-fabricmanager-575", "575.57.08-1"),  # Fabric Manager: below 580
        ("nvidia-fabricmanager", "580.95.05-1"),  # and from 580, one name
        ("nvidia-open", "595.45.04-1"),  # from 590: one name, every release
        ("nvidia-open", "595.58.03-1"),
        ("nvidia-fabricmanager", "595.58.03-1"),
        ("nvidia-driver-pinning-580", "580-1"),  # branch pinning packages: <branch>-N
        ("nvidia-driver-pinning-595", "595-1"),
        ("nvidia-driver-pinning-595.58.03", "595.58.03-1"),  # exact-version pinning: its own package
        ("nvidia-driver-pinning-580.95.05", "580.95.05-1"),  # below 590 too
    } <= found
    assert (r.path / "3bf863cc.pub").exists() and r.path.parts[-5:] == (
        "compute",
        "cuda",
        "repos",
        "debian12",
        "x86_64",
    )


def test_pinning_the_branch_package_at_the_driver_version_finds_nothing(repo: tuple[Path, sr.Repo]) -> None:
    """What the roles did before issue 14 (`nvidia-driver-pinning-595=595.58.03-*`): apt refuses it."""
    root, r = repo
    result = _apt(root, r, "-s", "install", "nvidia-driver-pinning-595=595.58.03-*", "nvidia-open=595.58.03-*")
    assert result.returncode != 0
    assert "Version '595.58.03-*' for 'nvidia-driver-pinning-595' was not found" in result.stderr


def test_the_exact_pinning_package_keeps_every_part_at_its_release(repo: tuple[Path, sr.Repo], tmp_path: Path) -> None:
    """nvidia-open depends with >= (as NVIDIA's metapackages do): asked for the older 595 release
    alone, apt takes the newest parts; with the exact-version pinning package's preferences file
    (unpacked from the stand-in package) every part stays at the release."""
    root, r = repo
    loose = _would_install(_apt(root, r, "-s", "install", "nvidia-open=595.45.04-1"))
    assert loose["nvidia-open"] == "595.45.04-1" and loose["nvidia-kernel-open-dkms"] == "595.58.03-1"

    unpacked = tmp_path / "pin"
    subprocess.run(
        ["dpkg-deb", "-x", str(r.path / "nvidia-driver-pinning-595.45.04_595.45.04-1_amd64.deb"), str(unpacked)],
        check=True,
    )
    preferences = unpacked / "etc/apt/preferences.d"
    assert "Pin: version 595.45.04-*" in (preferences / "nvidia-driver-pin").read_text()
    pinned = _would_install(
        _apt(root, r, "-s", "install", "nvidia-open", "nvidia-fabricmanager", preferences=preferences)
    )
    assert {name: pinned[name] for name in ("nvidia-open", "nvidia-kernel-open-dkms", "libnvidia-compute")} == {
        "nvidia-open": "595.45.04-1",
        "nvidia-kernel-open-dkms": "595.45.04-1",
        "libnvidia-compute": "595.45.04-1",
    }
    assert pinned["nvidia-fabricmanager"] == "595.45.04-1"


def test_fabric_manager_of_a_branch_and_the_unversioned_one_exclude_each_other(repo: tuple[Path, sr.Repo]) -> None:
    root, r = repo
    result = _apt(root, r, "-s", "install", "nvidia-fabricmanager-575", "nvidia-fabricmanager=595.58.03-1")
    assert result.returncode != 0 and "Conflicts: nvidia-fabricmanager" in result.stdout, result.stdout
