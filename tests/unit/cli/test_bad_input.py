"""Bad input that used to slip through, through the real CLI: each is one line on stderr, exit 2,
no traceback, and nothing written where the command ran (no lock, no run dir, no state DB).

Numbers YAML turns into other versions, driver versions of no form NVIDIA uses, `--set` of what
the lock decides, a config that is not UTF-8, empty option values, a torch variant against the
spec's own tag, a zero or negative `--top`, `--assume` that names no host or comes with
`--local`, and a `--state` file that is no state DB. Also: `status` only reads.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import provision

# this machine's run lock: one such test at a time across xdist workers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("this_machine")

BIN = Path(sys.executable).parent
ASSUME = ["--assume", "os=debian-12,gpu=L4:1,name=h1"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return provision(*args, cwd=cwd)


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(tmp_path: Path, *args: str) -> str:
    """Run ``args`` in ``tmp_path``; assert the bad-input contract and that nothing was written."""
    before, names = tree(tmp_path), sorted(p.name for p in tmp_path.iterdir())
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert tree(tmp_path) == before  # no lock, no run dir, no state DB, no file changed
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # no empty folder either
    return lines[0]


# --- versions YAML reads as numbers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ("stack: {cudnn: 9.10}", "`stack.cudnn` is a number (9.1)"),
        ("stack: {cuda_toolkit: 12.10}", "`stack.cuda_toolkit` is a number (12.1)"),
        ("stack: {python: 3.10}", "`stack.python` is a number (3.1)"),
        ("stack: {driver: 580.10}", "`stack.driver` is a number (580.1)"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "resolve", "up"])
def test_a_version_yaml_read_as_a_number_is_refused(tmp_path: Path, command: str, config: str, words: str) -> None:
    (tmp_path / "p.yaml").write_text(config + "\n")
    args = {"plan": ASSUME, "resolve": ["--gpu", "L4"], "up": ["--local", "--yes", "--check"]}[command]
    line = refused(tmp_path, command, *args, "-c", "p.yaml")
    assert words in line and "(quote it, e.g." in line


def test_a_set_value_yaml_read_as_a_number_is_refused_for_a_string_variable(tmp_path: Path) -> None:
    line = refused(tmp_path, "plan", *ASSUME, "--set", "nvidia_driver_kernel=6.10")
    assert line.startswith("error: --set nvidia_driver_kernel: 6.1 is a number") and "quote it" in line


# --- driver versions ----------------------------------------------------------------------------


@pytest.mark.parametrize("driver", ["580.1", "580.95.5", "580.1234", "5800"])
def test_a_driver_version_that_cannot_exist_is_refused(tmp_path: Path, driver: str) -> None:
    line = refused(tmp_path, "resolve", "--gpu", "L4", "--driver", driver)
    assert f"malformed driver `{driver}`" in line and "NNN.NN, NNN.NNN, NNN.NN.NN or NNN.NNN.NN" in line
    (tmp_path / "p.yaml").write_text(f"stack: {{driver: '{driver}'}}\n")
    line = refused(tmp_path, "plan", *ASSUME, "-c", "p.yaml")
    assert "`stack.driver` is not a driver branch or version" in line


def test_a_driver_version_the_data_does_not_list_needs_allow_unknown_driver(tmp_path: Path) -> None:
    args = ("resolve", "--gpu", "L4", "--os", "ubuntu-22.04", "--driver", "580.95.99", "--json")
    assert "unknown driver release `580.95.99`" in refused(tmp_path, *args[:-1])
    r = run(*args, "--allow-unknown-driver", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stack"]["driver"]["version"] == "580.95.99"


# --- --set of what the lock decides -------------------------------------------------------------


@pytest.mark.parametrize(
    ("var", "instead"),
    [
        ("nvidia_driver_version=580.95.05", "stack.driver"),
        ("cuda_toolkit_enabled=true", "stack.cuda_toolkit"),
        ("frameworks_enabled=false", "stack.frameworks"),
        ("nvidia_driver_packages=[]", "stack.driver"),
        ("python_env_python='3.12'", "stack.python"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "up"])
def test_set_of_a_variable_the_lock_owns_is_refused(tmp_path: Path, command: str, var: str, instead: str) -> None:
    args = ASSUME if command == "plan" else ["--local", "--yes", "--check"]
    line = refused(tmp_path, command, *args, "--set", var)
    name = var.split("=", 1)[0]
    assert line.startswith(f"error: --set {name}: the lock decides this variable") and instead in line


@pytest.mark.parametrize("var", ["health_spec={}", "health_sources={}"])
def test_set_of_a_per_host_health_variable_is_refused(tmp_path: Path, var: str) -> None:
    # host_vars/ (the spec plan builds per host) would win over --set: it would silently do nothing
    line = refused(tmp_path, "plan", *ASSUME, "--set", var)
    assert line.startswith(f"error: --set {var.split('=', maxsplit=1)[0]}: plan builds it for each host"), line


def test_set_of_an_install_setting_still_works(tmp_path: Path) -> None:
    r = run("plan", *ASSUME, "--set", "nvidia_driver_debian_mirror=http://mirror/debian", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_set_frameworks_installs_may_move_the_locked_wheels_to_another_index_only(tmp_path: Path) -> None:
    """A mirror of the wheels' index is where from, not what: the same requirements pass, others
    are refused after the resolve and before the lock or the run dir is written."""
    first = run("plan", *ASSUME, "--out", "run1", "--lock-out", "l1", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    [req] = json.loads(first.stdout)["groups"][0]["packages"]["pip"]["requirements"]
    mirrored = f"frameworks_installs=[{{packages: ['{req}'], index_url: 'http://mirror.example/simple'}}]"
    again = run("plan", *ASSUME, "--out", "run2", "--lock-out", "l2", "--set", mirrored, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    rendered = "".join(p.read_text() for p in (tmp_path / "run2" / "group_vars").iterdir())
    assert "index_url: http://mirror.example/simple" in rendered
    other = "frameworks_installs=[{packages: ['torch==2.0.1'], index_url: ''}]"
    line = refused(tmp_path, "plan", *ASSUME, "--out", "run3", "--lock-out", "l3", "--set", other)
    assert f"--set frameworks_installs: its packages torch==2.0.1 are not the lock's ({req}" in line


# --- the config file, empty values, contradictions, counts ---------------------------------------


def test_a_config_that_is_not_utf8_is_bad_input_not_an_internal_error(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_bytes("stack: {frameworks: ['torch']}  # d\u00e9j\u00e0\n".encode("latin-1"))
    for args in (["plan", *ASSUME], ["resolve"], ["up", "--local", "--yes"], ["status"]):
        line = refused(tmp_path, *args, "-c", "p.yaml")
        assert "p.yaml is not UTF-8 text" in line and "save the config as UTF-8" in line


@pytest.mark.parametrize(
    "args",
    [
        ["resolve", "--gpu", ""],
        ["resolve", "--gpu", "L4", "--os", " "],
        ["resolve", "--gpu", "L4", "--driver", ""],
        ["resolve", "--gpu", "L4", "--cuda-toolkit", ""],
        ["resolve", "--framework", ""],
        ["matrix", "--gpu", ""],
        ["cloud", "up", "--gpu", "", "--ssh-cidr", "10.0.0.1/32"],
        ["advise", "gpu", "--params", ""],
        ["plan", "--assume", ""],
        ["plan", "-i", ""],
        ["probe", "--venv", ""],
    ],
)
def test_an_empty_value_is_refused_not_read_as_not_given(tmp_path: Path, args: list[str]) -> None:
    line = refused(tmp_path, *args)
    assert "is empty (give a value, or leave the option out)" in line


def test_a_torch_variant_against_the_specs_own_tag_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "resolve", "--gpu", "L4", "--framework", "torch==2.7.1+cu128", "--torch-variant", "cu126")
    assert "--torch-variant cu126 contradicts the framework spec's +cu128" in line
    agree = run("resolve", "--gpu", "L4", "--framework", "torch==2.7.1+cu128", "--torch-variant", "cu128", cwd=tmp_path)
    assert agree.returncode == 0, agree.stderr


@pytest.mark.parametrize("top", ["0", "-3"])
def test_advise_top_must_be_at_least_one(tmp_path: Path, top: str) -> None:
    line = refused(tmp_path, "advise", "gpu", "--params", "7B", "--top", top)
    assert "--top" in line


# --- --assume -----------------------------------------------------------------------------------


def test_assume_with_local_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "plan", "--local", *ASSUME)
    assert "--assume and --local together" in line


def test_assume_without_a_name_or_an_inventory_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "plan", "--assume", "os=debian-12,gpu=L4:1")
    assert "--assume does not say which host it describes" in line and "name=HOST" in line and "-i" in line


def test_assume_with_an_inventory_needs_no_name(tmp_path: Path) -> None:
    (tmp_path / "inv.ini").write_text("gpu1\ngpu2\n")
    r = run("plan", "-i", "inv.ini", "--assume", "os=debian-12,gpu=L4:1", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [h["host"] for h in json.loads(r.stdout)["hosts"]] == ["gpu1", "gpu2"]


# --- status only reads --------------------------------------------------------------------------


def test_status_without_a_state_db_says_so_and_creates_nothing(tmp_path: Path) -> None:
    r = run("status", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "no state yet (.provision/state.db does not exist)" in r.stdout
    r = run("status", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["ok"], doc["state_exists"], doc["hosts"]) == (True, False, [])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", [b"not a database\n", b"", b"SQLite format 3\x00" + bytes(100)])
def test_a_state_file_that_is_no_state_db_is_refused_and_left_as_it_was(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "notes.txt").write_bytes(content)
    line = refused(tmp_path, "status", "--state", "notes.txt")
    assert "notes.txt is not a provision state database" in line


def test_a_sqlite_db_of_another_program_is_refused_and_not_given_provisions_tables(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "other.db")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    line = refused(tmp_path, "status", "--state", "other.db")
    assert "other.db is not a provision state database (no such table: hosts)" in line
    db = sqlite3.connect(f"{(tmp_path / 'other.db').as_uri()}?mode=ro", uri=True)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["t"]
    db.close()
