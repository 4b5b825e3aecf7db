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


def test_building_again_gives_the_same_bytes(built: tuple[Path, dict[str, object]]) -> None:
    root, doc = built
    _bundle(root, "--lock=provision.lock", "again.tar.gz")
    assert sha256(root / "again.tar.gz") == doc["sha256"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("bundle", "-o", "x.tar.gz"), "no lock to bundle"),
        (("bundle", "provision.lock"), "no output file"),
        (("bundle", "missing.lock", "-o", "x.tar.gz"), "no lock file at missing.lock"),
        (("bundle", "--verify", "missing.tar.gz"), "no bundle file at missing.tar.gz"),
        (("bundle", "--verify", "provision.lock"), "is not a readable bundle"),
        (("bundle", "--verify", "site.tar.gz", "-o", "y"), "--verify takes no lock, -o or --set"),
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


def test_a_lock_with_a_standalone_python_is_refused_before_any_download(tmp_path: Path) -> None:
    r = provision("plan", *ASSUME, "--python-source", "standalone", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = provision("bundle", "provision.lock", "-o", "x.tar.gz", cwd=tmp_path, offline=True)
    assert r.returncode == 2, r.stderr
    assert "installs a standalone CPython, which bundles do not carry yet" in r.stderr
    assert "network use refused" not in r.stderr and not list(tmp_path.glob("*x.tar.gz*"))
