"""`provision bundle --kernel` of a lock with the NVIDIA driver from NVIDIA's repository: the
STAND-IN repository of the role tests (tests/integration/standin_repo.py: NVIDIA's package names,
versions and relationships, signed with a throwaway key whose fingerprint the lock pins in place
of NVIDIA's), served on loopback, and Debian's real archive for what the packages need. Real apt on
the controller resolves the closure; nothing is installed anywhere."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.cli_run import provision
from tests.integration import standin_plans as sp
from tests.integration import standin_repo as sr

# Debian's archive, for what the stand-in packages depend on (kmod, ...)
pytestmark = pytest.mark.network

KERNEL = sr.STANDIN_KERNEL


def _lock(tmp_path: Path) -> dict[str, Any]:
    """A lock for an HGX H100 Debian 12 host with the driver from NVIDIA's repository and no
    framework (its CUDA wheels would come from an index out of reach here: taken out of the lock)."""
    r = provision(
        "plan",
        "--assume",
        "os=debian-12,python=3.11,gpu=H100-SXM:8,name=a",
        "--install-method",
        "nvidia-repo",
        "--out",
        "run",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "provision.lock").read_text())
    for group in doc["groups"]:
        group["stack"]["frameworks"], group["packages"]["pip"], group["python_packages"] = {}, None, []
    return doc


def test_the_driver_s_packages_from_its_repository_and_the_kernel_s_headers_are_bundled(tmp_path: Path) -> None:
    lock = _lock(tmp_path)
    [group] = lock["groups"]
    root = tmp_path / "standin"
    folder = sr.repo_folder(root / "served", "debian12")
    repo = sr.build_repo(folder, sr.repository_debs([group["packages"]]), key_file=sr.APT_KEY_FILE, scratch=root)
    with sr.serve(root / "served", "127.0.0.1") as server:
        url = f"{server}/{folder.relative_to(root / 'served').as_posix()}"
        group["packages"] = sp.standin_repository(group["packages"], url, sr.APT_KEY_FILE, repo.fingerprint)
        (tmp_path / "standin.lock").write_text(json.dumps(lock))

        r = provision("bundle", "standin.lock", "-o", "x.tar.gz", cwd=tmp_path, offline=True)
        assert r.returncode == 2 and "pass --kernel RELEASE" in r.stderr, r.stderr  # before any download

        r = provision("bundle", "standin.lock", "--kernel", KERNEL, "-o", "driver.tar.gz", "--json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)["info"]
    folder_name = "apt/debian-12-x86_64"
    names = info["apt"][folder_name]["names"]
    driver = next(e for e in group["packages"]["install"] if e["name"] == "nvidia-open")
    assert f"nvidia-open={driver['version']}" in names and f"linux-headers-{KERNEL}" in names and "gpg" in names
    assert info["kernels"] == [KERNEL]
    with tarfile.open(tmp_path / "driver.tar.gz") as tar:
        debs = {Path(n).name.split("_")[0] for n in tar.getnames() if n.endswith(".deb")}
    # the driver and what it pulls in from the stand-in, and from Debian's archive what they need
    assert {"nvidia-open", "nvidia-kernel-open-dkms", "libnvidia-compute", "kmod", "gpg", "libc6"} <= debs


def test_a_key_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    lock = _lock(tmp_path)
    [group] = lock["groups"]
    root = tmp_path / "standin"
    folder = sr.repo_folder(root / "served", "debian12")
    sr.build_repo(folder, sr.repository_debs([group["packages"]]), key_file=sr.APT_KEY_FILE, scratch=root)
    pinned = next(r["key_fingerprint"] for r in group["packages"]["repositories"] if r["name"] == "cuda")
    with sr.serve(root / "served", "127.0.0.1") as server:
        url = f"{server}/{folder.relative_to(root / 'served').as_posix()}"
        # the stand-in's key served where the lock pins NVIDIA's real one
        group["packages"] = sp.standin_repository(group["packages"], url, sr.APT_KEY_FILE, pinned)
        (tmp_path / "standin.lock").write_text(json.dumps(lock))
        r = provision("bundle", "standin.lock", "--kernel", KERNEL, "-o", "x.tar.gz", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert f"is not the lock's pinned {pinned}" in r.stderr and not list(tmp_path.glob("*x.tar.gz*"))
