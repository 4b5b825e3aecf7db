"""`up --bundle` on the host side: the root script that checks and unpacks the copy, run for real
with sh, sha256sum and tar on this machine (its folder moved under tmp_path), and the role
variables that point a play at the unpacked bundle."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from provision.errors import BadInput, OperationFailed
from provision.fleet import bundle_host
from provision.fleet.bundle_file import SCHEMA, write_bundle
from provision.fleet.bundle_host import Bundle, host_vars, mismatch, open_bundle
from tests.cli_run import provision
from tests.support.bundles import flip_byte
from tests.wheels import make_wheel

WHEEL_DIR = "wheels/cp311-x86_64"


def _bundle(tmp_path: Path) -> Bundle:
    src = tmp_path / "src"
    wheel = make_wheel(src, "alpha", "1.0")
    lock = src / "provision.lock"
    lock.write_text('{"schema": "provision.lock/2"}\n')
    out = tmp_path / "site.tar.gz"
    info = {
        "schema": SCHEMA,
        "os": ["debian-12"],
        "arch": ["x86_64"],
        "groups": {"g": {"wheels": WHEEL_DIR, "uv": "uv/x86_64", "apt": "apt/debian-12-x86_64"}},
    }
    written = write_bundle(out, {f"{WHEEL_DIR}/{wheel.name}": wheel, "provision.lock": lock}, info)
    return Bundle(out, written.sha256, out.stat().st_size, info)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "bundles"
    monkeypatch.setattr(bundle_host, "ROOT", str(where))
    return where


def _run(bundle: Bundle, src: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", bundle_host._script(bundle, src, None)], capture_output=True, text=True, check=False
    )


def test_the_copy_is_checked_unpacked_once_and_checked_again_on_every_run(tmp_path: Path, root: Path) -> None:
    bundle = _bundle(tmp_path)
    copy = tmp_path / "home" / f"{bundle.sha256}.tar.gz.part"  # where a non-root login's copy lands
    copy.parent.mkdir()
    shutil.copy(bundle.path, copy)
    r = _run(bundle, str(copy))
    assert r.returncode == 0, r.stdout + r.stderr
    unpacked = root / bundle.sha256
    assert (unpacked / "provision.lock").read_text() == '{"schema": "provision.lock/2"}\n'
    assert sorted(p.name for p in root.iterdir()) == [bundle.sha256]  # no tarball kept beside it
    assert not copy.exists()  # root's copy replaced the login's

    r = _run(bundle, "")  # the next run: nothing sent, the unpacked files checked again
    assert r.returncode == 0, r.stdout + r.stderr

    wheel = next((unpacked / WHEEL_DIR).iterdir())
    data = bytearray(wheel.read_bytes())
    data[10] ^= 1
    wheel.write_bytes(bytes(data))
    r = _run(bundle, "")
    assert r.returncode == 4
    assert r.stdout.startswith(f"bundle member {WHEEL_DIR}/{wheel.name} does not match its sha256 in the MANIFEST")
    assert not unpacked.exists()  # so the next run copies it again


def test_a_copy_that_changed_on_the_way_is_refused_and_removed(tmp_path: Path, root: Path) -> None:
    bundle = _bundle(tmp_path)
    wheel = next(n for n in _names(bundle.path) if n.startswith("wheels/"))
    root.mkdir()
    part = root / f"{bundle.sha256}.tar.gz.part"
    flip_byte(bundle.path, part, wheel)
    got = hashlib.sha256(part.read_bytes()).hexdigest()
    r = _run(bundle, str(part))
    assert r.returncode == 3
    assert r.stdout.strip() == (
        f"the copied bundle's sha256 is {got}, not {bundle.sha256}: copied again on the next run"
    )
    assert list(root.iterdir()) == []


def test_the_play_installs_from_the_unpacked_bundle_with_no_proxy(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    env = {"http_proxy": "http://proxy:3128", "https_proxy": "http://proxy:3128", "PROVISION_APPLY": "run1"}
    env["PIP_CONFIG_FILE"] = "/root/.provision-credentials-run1/pip.conf"
    got = host_vars(bundle, "g", env)
    where = f"/var/lib/provision/bundles/{bundle.sha256}"
    assert got["provision_environment"] == {
        "PROVISION_APPLY": "run1",
        "UV_OFFLINE": "1",
        "APT_CONFIG": f"{where}.apt/apt.conf",
    }
    assert got["frameworks_find_links"] == [f"{where}/{WHEEL_DIR}"] and got["frameworks_no_index"] is True
    assert got["python_env_pip_args"] == ["--no-index", f"--find-links={where}/uv/x86_64"]
    # no repository is added on the host (their packages are in the bundle's), so no key is fetched
    assert got["nvidia_driver_repositories"] == got["cuda_toolkit_repositories"] == []


def test_open_bundle_checks_every_byte_before_it_gives_the_lock(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    opened, lock = open_bundle(bundle.path, tmp_path / "work")
    assert opened.sha256 == hashlib.sha256(bundle.path.read_bytes()).hexdigest() == bundle.sha256
    assert lock.read_text() == '{"schema": "provision.lock/2"}\n'
    wheel = next(n for n in _names(bundle.path) if n.startswith("wheels/"))
    flip_byte(bundle.path, tmp_path / "bad.tar.gz", wheel)
    with pytest.raises(OperationFailed, match=f"^bundle member {wheel} does not match"):
        open_bundle(tmp_path / "bad.tar.gz", tmp_path / "work")


def test_a_host_of_another_release_is_refused_as_the_bundle_s(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    exc = mismatch(BadInput("host th1 does not match lock group g: os debian-13, locked debian-12", ""), bundle)
    assert exc.message == (
        "host th1 does not match lock group g: os debian-13, locked debian-12 "
        "(the bundle site.tar.gz is for debian-12 on x86_64)"
    )


def test_up_refuses_a_bundle_for_another_release_in_one_line_before_any_change(tmp_path: Path) -> None:
    """`up --local --bundle` on this machine (Debian 12; probed for real) with a bundle whose lock
    was planned for a Debian 13 machine of the same name: exit 2, one line, nothing staged."""
    r = provision("plan", "--assume", "os=debian-13,python=3.13,name=localhost", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = {"schema": SCHEMA, "os": ["debian-13"], "arch": ["x86_64"], "groups": {}}
    write_bundle(tmp_path / "trixie.tar.gz", {"provision.lock": tmp_path / "provision.lock"}, info)
    r = provision("up", "--local", "--bundle", "trixie.tar.gz", "--yes", "--state", "s.db", cwd=tmp_path, timeout=300)
    assert r.returncode == 2, r.stderr
    [line] = [x for x in r.stderr.strip().splitlines() if x.startswith("error:")]
    assert line.startswith("error: host localhost does not match lock group "), r.stderr
    assert "os debian-12, locked debian-13" in line and "(the bundle trixie.tar.gz is for debian-13 on x86_64)" in line
    assert not Path(bundle_host.ROOT).exists() or not any(Path(bundle_host.ROOT).iterdir())


def _names(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()
