"""The frameworks role's `frameworks_closure` module (playbooks/roles/frameworks/library), run as
Ansible runs it, on a real venv that real pip and real uv (the knowledge's uv, from its pinned
wheel in the wheelhouse) install real wheels into, from a local folder: two files of one name and
version, the locked one and another. The role's own runs on SSH test hosts are
tests/integration/test_wheel_trust.py."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from provision.matrix import load
from provision.resources import playbooks_dir
from tests.hosts import harness
from tests.wheels import make_wheel, sha256

MODULE = playbooks_dir() / "roles" / "frameworks" / "library" / "frameworks_closure.py"

pytestmark = pytest.mark.slow


def _module(tmp: Path, venv: Path, lines: list[str], state: str, **extra: Any) -> dict[str, Any]:
    args = {"venv": str(venv), "requirements": lines, "state": state, **extra}
    (tmp / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    r = subprocess.run([sys.executable, str(MODULE), str(tmp / "args.json")], capture_output=True, text=True)
    return dict(json.loads(r.stdout))


@pytest.fixture(scope="module")
def uv_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """uv's own binary from the knowledge's pinned x86_64 wheel (checked against the pin first)."""
    sp = load().t.standalone_python
    assert sp is not None
    (wheel,) = harness.fill_wheelhouse().glob(f"uv-{sp.uv}-*x86_64*.whl")
    assert sha256(wheel) in sp.uv_wheels["x86_64"].values()
    out = tmp_path_factory.mktemp("uv") / "uv"
    with zipfile.ZipFile(wheel) as z:
        out.write_bytes(z.read(f"uv-{sp.uv}.data/scripts/uv"))
    out.chmod(0o755)
    return out


def _installer(name: str, uv: Path, venv: Path, sub: str) -> list[str]:
    """``pip <sub>`` or ``uv pip <sub>`` against ``venv``."""
    python = str(venv / "bin" / "python")
    if name == "pip":
        return [sys.executable, "-m", "pip", "--python", python, "-q", sub]
    return [str(uv), "pip", sub, "-q", "--python", python]


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_foreign_file_of_the_locked_version_is_found_and_only_a_hashed_reinstall_clears_it(
    installer: str, uv_binary: Path, tmp_path: Path
) -> None:
    locked = make_wheel(tmp_path / "locked", "provtoy", "1.0", who="locked")
    foreign = make_wheel(tmp_path / "foreign", "provtoy", "1.0", who="foreign")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(tmp_path / "uv-cache")}

    def sh(sub: str, *args: str) -> None:
        subprocess.run(
            [*_installer(installer, uv_binary, venv, sub), *args], check=True, env={"PATH": "/usr/bin:/bin", **env}
        )

    lines = [f"provtoy==1.0 --hash=sha256:{sha256(locked)}"]
    (tmp_path / "req.txt").write_text(lines[0] + "\n")
    hashed = ["install", "--require-hashes", "--no-deps", "--no-index", "-r", str(tmp_path / "req.txt")]

    # the defect: a distribution of the locked name and version from another file satisfies the
    # hashed install, which then checks nothing
    sh("install", "--no-deps", str(foreign))
    sh(*hashed, f"--find-links={tmp_path / 'locked'}")
    who = [str(venv / "bin" / "python"), "-c", "import provtoy; print(provtoy.WHO)"]
    assert subprocess.run(who, capture_output=True, text=True, check=True).stdout.strip() == "foreign"

    checked = _module(tmp_path, venv, lines, "check")
    assert checked["untrusted"].keys() == {"provtoy"} and checked["remove"] == ["provtoy"], checked
    # recording without the uninstall in between: the same RECORD file is refused, naming it
    kept = _module(tmp_path, venv, lines, "record", untrusted=checked["untrusted"])
    assert kept.get("failed") and "provtoy==1.0" in kept["msg"] and "still holds" in kept["msg"], kept
    assert not (venv / "provision-closure.json").exists()

    sh("uninstall", *(["--yes"] if installer == "pip" else []), "provtoy")
    sh(*hashed, f"--find-links={tmp_path / 'locked'}")
    done = _module(tmp_path, venv, lines, "record", untrusted=checked["untrusted"])
    assert done["changed"] and not done.get("failed"), done
    assert subprocess.run(who, capture_output=True, text=True, check=True).stdout.strip() == "locked"
    entry = json.loads((venv / "provision-closure.json").read_text())["packages"]["provtoy"]
    assert (entry["version"], entry["sha256"]) == ("1.0", sha256(locked))

    # converged: trusted, and recording again changes nothing
    assert _module(tmp_path, venv, lines, "check")["untrusted"] == {}
    assert _module(tmp_path, venv, lines, "record")["changed"] is False

    # the foreign file put back over it (another tool's reinstall): its RECORD differs, untrusted again
    sh("install", "--no-deps", "--reinstall" if installer == "uv" else "--force-reinstall", str(foreign))
    assert _module(tmp_path, venv, lines, "check")["untrusted"].keys() == {"provtoy"}
    # a lock with another version than the venv holds: the record step names it
    other = _module(tmp_path, venv, [f"provtoy==2.0 --hash=sha256:{sha256(locked)}"], "record")
    assert other.get("failed") and "provtoy==2.0 (the venv holds 1.0" in other["msg"], other


def test_a_line_that_is_no_hashed_pin_is_refused(tmp_path: Path) -> None:
    out = _module(tmp_path, tmp_path, ["provtoy>=1.0"], "check")
    assert out.get("failed") and "'provtoy>=1.0' is no hashed requirement line" in out["msg"], out


def test_what_an_earlier_lock_installed_and_this_one_lacks_is_stale_and_the_users_own_stays(tmp_path: Path) -> None:
    """Lock B = A's closure plus provextra. Going back to A (`provision rollback`), the check names
    provextra stale: provision installed it for B and A lacks it; the record step refuses while it
    is still there. A distribution provision never installed (userpkg) is never stale."""
    toy = make_wheel(tmp_path / "wheels", "provtoy", "1.0")
    extra = make_wheel(tmp_path / "wheels", "provextra", "1.0")
    user = make_wheel(tmp_path / "wheels", "userpkg", "1.0")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)

    def pip(*args: str) -> None:
        base = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "-q"]
        subprocess.run([*base, *args], check=True, env={"PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})

    lock_a = [f"provtoy==1.0 --hash=sha256:{sha256(toy)}"]
    lock_b = [*lock_a, f"provextra==1.0 --hash=sha256:{sha256(extra)}"]
    # B applied: the hashed install put its closure in (recorded as the role does after it)
    pip("install", "--no-deps", str(toy), str(extra), str(user))
    assert _module(tmp_path, venv, lock_b, "check")["stale"] == {}
    assert _module(tmp_path, venv, lock_b, "record")["changed"]

    back = _module(tmp_path, venv, lock_a, "check")
    assert back["untrusted"] == {} and back["stale"].keys() == {"provextra"} and back["remove"] == ["provextra"], back
    refused = _module(tmp_path, venv, lock_a, "record", stale=back["stale"])
    assert refused.get("failed") and "provextra in" in refused["msg"] and "came with an earlier lock" in refused["msg"]
    pip("uninstall", "--yes", "provextra")
    done = _module(tmp_path, venv, lock_a, "record", stale=back["stale"])
    assert done["changed"] and not done.get("failed"), done
    assert json.loads((venv / "provision-closure.json").read_text())["packages"].keys() == {"provtoy"}
    assert _module(tmp_path, venv, lock_a, "check")["stale"] == {}  # userpkg: never provision's, never stale

    # B again, then provextra replaced by another file by another tool: its RECORD differs, the user's now
    pip("install", "--no-deps", str(extra))
    assert _module(tmp_path, venv, lock_b, "record")["changed"]
    pip("install", "--no-deps", "--force-reinstall", str(make_wheel(tmp_path / "own", "provextra", "1.0", who="own")))
    assert _module(tmp_path, venv, lock_a, "check")["stale"] == {}
