"""Rollback's look for the old lock's artifacts before any change (provision/fleet/rollback_sources.py).

Real wheel files, a real HTTP server answering HEAD, and this machine's real dpkg and apt for the
OS package command (a Debian machine, as the test hosts are); the refusal through the real
`provision rollback` is in tests/integration/test_up_lock.py.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.fleet.rollback_sources import apt_missing_command, check_sources, missing_wheels, wheel_folders
from provision.model.host import ResolvedHost
from provision.model.lock import Lock, LockGroup, PythonPackage
from provision.model.stack import Stack
from tests.support.http_server import serving
from tests.wheels import make_wheel, sha256


def _pkg(wheel: Path, url: str = "", digest: str = "") -> PythonPackage:
    name, version = wheel.name.split("-")[:2]
    return PythonPackage(name, version, digest or sha256(wheel), url or wheel.as_uri(), "")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real HTTP server over a folder (HEAD answers 200 for a file, 404 for none)."""
    root = tmp_path / "index"
    root.mkdir()
    with serving(partial(SimpleHTTPRequestHandler, directory=str(root))) as url:
        yield url, root


def test_a_wheel_is_found_by_name_and_hash_in_a_folder_or_at_its_url(tmp_path: Path, served: tuple[str, Path]) -> None:
    base, index = served
    built = make_wheel(tmp_path / "built", "alpha", "1.0")
    other = make_wheel(tmp_path / "other", "alpha", "1.0", who="someone else")  # same name, other bytes
    house = tmp_path / "cache" / "wheels" / "cp311-x86_64"
    house.mkdir(parents=True)
    shutil.copy(built, house)
    gone_url = f"{base}/alpha-1.0-py3-none-any.whl"
    # in the cache's wheelhouse (by name and sha256), though its URL answers 404
    folders = wheel_folders(tmp_path / "cache", [])
    assert folders == [house]
    assert missing_wheels([_pkg(built, gone_url)], folders) == []
    # a file of that name with other bytes is not it
    wrong = _pkg(other, gone_url)
    assert missing_wheels([wrong], folders) == [wrong]
    # at its recorded URL: the index answers HEAD
    shutil.copy(other, index)
    assert missing_wheels([wrong], []) == []
    # a find-links folder (a path or a file: URL) holds it
    assert missing_wheels([_pkg(built, gone_url)], wheel_folders(tmp_path / "none", [str(tmp_path / "built")])) == []
    assert (
        missing_wheels([_pkg(built, gone_url)], wheel_folders(tmp_path / "none", [(tmp_path / "built").as_uri()])) == []
    )
    # its file: URL with the right bytes
    assert missing_wheels([_pkg(built)], []) == []
    built.unlink()
    assert missing_wheels([_pkg(other, built.as_uri())], []) == [_pkg(other, built.as_uri())]


def test_an_index_that_cannot_be_reached_or_says_gone_does_not_have_it(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "beta", "2.0")
    unreachable = _pkg(wheel, "http://127.0.0.1:9/beta-2.0-py3-none-any.whl")  # port 9: discard, nothing listens
    assert missing_wheels([unreachable], []) == [unreachable]


def test_the_refusal_names_the_first_missing_wheel_in_one_line(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "gamma", "3.0")
    pkg = _pkg(wheel)
    wheel.unlink()
    group = LockGroup(
        "g",
        ["th1"],
        ResolvedHost(None, None, 0, "debian-12", "x86_64", "3.11"),
        Stack(None, None, None, None),
        python_packages=[pkg],
    )
    with pytest.raises(BadInput) as exc:
        check_sources(Lock({}, [group]), [], [], _no_connect)
    assert (
        "gamma==3.0" in exc.value.message
        and pkg.url in exc.value.message
        and "nothing was changed" in exc.value.message
    )
    assert "\n" not in exc.value.one_line()


def _no_connect(target: object) -> object:
    raise AssertionError("no host is contacted for a lock without apt pins")


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="needs a Debian machine's apt")
def test_the_apt_command_prints_only_the_pins_apt_has_nowhere() -> None:
    installed = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "bash"], capture_output=True, text=True, check=True
    ).stdout
    pins = [("bash", installed), ("bash", "0.0-not-a-version"), ("provision-no-such-package", "1.0")]
    out = subprocess.run(["sh", "-c", apt_missing_command(pins)], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["bash=0.0-not-a-version", "provision-no-such-package=1.0"]
    # a version apt's lists name (madison's second column), whether installed or not
    madison = subprocess.run(["apt-cache", "madison", "bash"], capture_output=True, text=True, check=True).stdout
    listed = [line.split("|")[1].strip() for line in madison.splitlines()]
    if listed:
        assert (
            subprocess.run(
                ["sh", "-c", apt_missing_command([("bash", listed[0])])], capture_output=True, text=True
            ).stdout
            == ""
        )
