"""`provision bundle` end to end on the controller: a real plan's lock (its closure from a local
wheelhouse), real `pip download` by hash (uv's wheel from PyPI by the knowledge's sha256), a real
tarball, then `--verify` on it and on a copy with one byte of one wheel flipped."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.cli_run import provision
from tests.support.bundles import flip_byte
from tests.wheels import make_wheel, sha256

ASSUME = ("--assume", "os=debian-12,python=3.11,name=a")
# the test hosts' way (test_closure.py): the wheels from a find-links wheelhouse, no index
NO_INDEX = ("--set", "frameworks_no_index=true")
# uv's wheel comes from PyPI (by its pinned hash): `make test` runs this module, `make check` does not
pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """One bundle for the module: planning and uv's 20 MB wheel cost seconds each."""
    root = tmp_path_factory.mktemp("bundle")
    house = root / "house"
    make_wheel(house, "torch", "2.13.0+cpu", ("filelock<3.19",))
    make_wheel(house, "filelock", "3.18.0")
    make_wheel(house, "filelock", "3.19.0", who="not locked")  # in the wheelhouse, not in the lock's closure
    (root / "provision.yaml").write_text(
        json.dumps(
            {
                "stack": {"frameworks": ["torch==2.13.0+cpu"]},
                "install": {"lock_closure": "always", "pip": {"find_links": [str(house)]}},
            }
        )
    )
    r = provision("plan", *ASSUME, "-c", "provision.yaml", "--out", "run", *NO_INDEX, cwd=root)
    assert r.returncode == 0, r.stderr
    return root, _bundle(root, "provision.lock", "site.tar.gz")


def _bundle(root: Path, lock_arg: str, out: str) -> dict[str, object]:
    """`provision bundle` of the plan's lock, as the plan had its wheels' sources; its document."""
    r = provision("bundle", lock_arg, "-c", "provision.yaml", "-o", out, *NO_INDEX, "--json", cwd=root, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert isinstance(doc, dict)
    return doc


def test_the_bundle_holds_the_lock_its_closure_by_hash_uv_and_the_roles(built: tuple[Path, dict[str, object]]) -> None:
    root, doc = built
    with tarfile.open(root / "site.tar.gz") as tar:
        names = tar.getnames()
        lock = tar.extractfile("provision.lock").read()  # type: ignore[union-attr]
    assert names[0] == "MANIFEST"
    assert lock == (root / "provision.lock").read_bytes()
    wheels = sorted(n for n in names if n.startswith("wheels/"))
    assert wheels == [
        "wheels/cp311-x86_64/filelock-3.18.0-py3-none-any.whl",
        "wheels/cp311-x86_64/torch-2.13.0+cpu-py3-none-any.whl",
    ]
    assert [n for n in names if n.startswith("uv/")] == [
        "uv/x86_64/uv-0.13.8-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    ]
    assert "playbooks/site.yml" in names and "playbooks/roles/frameworks/tasks/main.yml" in names
    assert any(n.startswith("remote/smoke/") for n in names)
    assert not any("__pycache__" in n for n in names)
    info = doc["info"]
    assert isinstance(info, dict) and info["os"] == ["debian-12"] and info["arch"] == ["x86_64"]
    # the OS packages the play installs (python_env's), with their closure from Debian's archive,
    # as a flat repository signed with the bundle's own key
    repo = "apt/debian-12-x86_64"
    assert info["apt"][repo]["names"] == ["python3", "python3-packaging", "python3-venv"]
    assert {f"{repo}/{n}" for n in ("Packages", "Packages.gz", "Release", "InRelease", "bundle-key.asc")} <= set(names)
    with tarfile.open(root / "site.tar.gz") as tar:
        packages = tar.extractfile(f"{repo}/Packages").read().decode()  # type: ignore[union-attr]
    listed = {
        f"{repo}/{line.split(' ', 1)[1].removeprefix('./')}"
        for line in packages.splitlines()
        if line.startswith("Filename: ")
    }
    debs = {n for n in names if n.endswith(".deb")}
    assert listed == debs and any("/python3-venv_" in n for n in debs) and any("/libc6_" in n for n in debs)


def test_verify_passes_it_and_names_a_wheel_with_one_flipped_byte(built: tuple[Path, dict[str, object]]) -> None:
    root, doc = built
    r = provision("bundle", "--verify", "site.tar.gz", "--json", cwd=root)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["manifest_sha256"] == doc["manifest_sha256"]
    wheel = "wheels/cp311-x86_64/torch-2.13.0+cpu-py3-none-any.whl"
    flip_byte(root / "site.tar.gz", root / "bad.tar.gz", wheel)
    r = provision("bundle", "--verify", "bad.tar.gz", cwd=root)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"error: bundle member {wheel} does not match its sha256 in the MANIFEST (the file was changed or damaged"
        " on the way; copy or build the bundle again)"
    ]


def test_building_again_gives_the_same_files_and_a_new_repository_key(built: tuple[Path, dict[str, object]]) -> None:
    """The wheels, uv, the roles and the lock are the same bytes; the apt repository's index is
    signed with a key made for each bundle (and dated), so its key and signature differ."""
    root, doc = built
    _bundle(root, "--lock=provision.lock", "again.tar.gz")
    one, two = _manifest(root / "site.tar.gz"), _manifest(root / "again.tar.gz")
    signed = {"apt/debian-12-x86_64/" + n for n in ("Release", "InRelease", "bundle-key.asc")}
    assert set(one) == set(two) and signed <= set(one)
    assert {n for n in one if one[n] != two[n]} == signed | {"bundle.json"}  # bundle.json: the key's fingerprint
    assert sha256(root / "again.tar.gz") != doc["sha256"]


def _manifest(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        text = tar.extractfile("MANIFEST").read().decode()  # type: ignore[union-attr]
    return {line[66:]: line[:64] for line in text.splitlines()}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("bundle", "-o", "x.tar.gz"), "no lock to bundle"),
        (("bundle", "provision.lock"), "no output file"),
        (("bundle", "missing.lock", "-o", "x.tar.gz"), "no lock file at missing.lock"),
        (("bundle", "--verify", "missing.tar.gz"), "no bundle file at missing.tar.gz"),
        (("bundle", "--verify", "provision.lock"), "is not a readable bundle"),
        (("bundle", "--verify", "site.tar.gz", "-o", "y"), "--verify takes no lock, -o, --set, --kernel or --sign"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    built: tuple[Path, dict[str, object]], args: tuple[str, ...], words: str
) -> None:
    root, _ = built
    r = provision(*args, cwd=root)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and not (root / "x.tar.gz").exists()


@pytest.mark.parametrize(
    ("assume", "words"),
    [
        (
            "os=debian-12,python=3.11,gpu=H100-SXM:1,name=a",
            "pass --kernel RELEASE for each kernel the hosts run",
        ),
        ("os=rocky-9,name=a", "installs with dnf: bundles carry apt packages only so far"),
        ("os=ubuntu-24.04,name=a", "is for ubuntu-24.04: bundles are for Debian hosts so far"),
    ],
)
def test_a_lock_whose_os_packages_a_bundle_cannot_carry_is_refused_before_any_download(
    tmp_path: Path, assume: str, words: str
) -> None:
    r = provision("plan", "--assume", assume, "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = provision("bundle", "provision.lock", "-o", "x.tar.gz", cwd=tmp_path, offline=True)
    assert r.returncode == 2, r.stderr
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "network use refused" not in r.stderr and not list(tmp_path.glob("*x.tar.gz*"))


def test_a_standalone_python_for_another_cpu_is_refused_before_any_download(tmp_path: Path) -> None:
    """The controller runs the hosts' uv to fetch their CPython: an aarch64 group needs an aarch64
    controller (this one is x86_64, as CI's is)."""
    assume = ("--assume", "os=debian-12,arch=aarch64,python=3.11,name=a", "--python-source", "standalone")
    r = provision("plan", *assume, "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = provision("bundle", "provision.lock", "-o", "x.tar.gz", cwd=tmp_path, offline=True)
    assert r.returncode == 2, r.stderr
    assert "a bundle with a standalone CPython for aarch64 is built on an aarch64 controller" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "network use refused" not in r.stderr and not list(tmp_path.glob("*x.tar.gz*"))
