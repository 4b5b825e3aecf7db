"""URLs a person or a host reads (issue 25, items 5 to 7 and the tampered lock), through the real CLI.

A login in any install URL is shown redacted (one function, provision.errors.redact) and written
only to the run's 0600 secrets.yml; a URL from --set or a lock is one http(s)/file URL or refused;
a repository's key is the lock's (for --set) and the knowledge's (for a lock read from a file).
`plan --assume` contacts nothing (cli_run's offline mode refuses any socket); `up --lock` is given
hosts on TEST-NET-1 (192.0.2.0/24 answers nothing), so a refusal that needed a host would time out.
The apt mirror's login on a real host: tests/integration/test_secrets.py.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from provision.ansible.apply import _message
from provision.config import load_config
from provision.errors import redact
from provision.files import read_lock
from provision.fleet.cache.wheels import WheelSet
from provision.fleet.planning import PlanInputs, PlanRun, plan
from tests.cli_run import provision

TOKENS = ("TOKEN-idx", "TOKEN-fl", "TOKEN-apt")
CONFIG = """\
stack: {frameworks: ['torch==2.13.0+cpu']}
install:
  pip:
    index_url: 'https://ci-bot:TOKEN-idx@h.example/simple'
    find_links: ['https://fl:TOKEN-fl@w.example/wheels/', /srv/wheels]
  apt: {mirror: 'http://apt:TOKEN-apt@deb.example/debian'}
"""
ASSUME = ("--assume", "os=debian-12,gpu=L4:1,name=h1")


def _plan(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    r = provision("plan", *ASSUME, "--out", "run", *args, cwd=tmp_path, offline=True)
    return r.returncode, r.stdout, r.stderr


def _written(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())


def test_redact_hides_every_urls_login_and_nothing_else() -> None:
    assert redact("from https://ci-bot:TOKEN@h.example/simple and http://u:p@ss@[::1]:80/x") == (
        "from https://***@h.example/simple and http://***@[::1]:80/x"
    )
    assert redact("https://h.example/a@b file:///srv/w http://[::1]:3128") == (
        "https://h.example/a@b file:///srv/w http://[::1]:3128"
    )
    # a failed task's words (apt, pip) reach the report and events.jsonl through the same function
    assert _message({"msg": "401 from http://apt:TOKEN@deb.example/debian"}) == "401 from http://***@deb.example/debian"


def test_logins_are_shown_redacted_and_written_only_to_secrets_yml(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml").write_text(CONFIG)
    for args in ((), ("--json",)):
        rc, out, err = _plan(tmp_path, "-c", "provision.yaml", *args)
        assert rc == 0, err
        assert not any(t in out + err for t in TOKENS)
    notes = json.loads(out)["notes"]
    assert "pip: the hosts install from https://***@h.example/simple in place of PyPI (install.pip.index_url)" in notes
    # plan --assume locks no wheel closure: it says so (item: a lock without a hashed closure)
    assert any("its wheels are not locked by hash" in n for n in notes)
    holders = [rel for rel in _written(tmp_path) if any(t in (tmp_path / rel).read_text() for t in TOKENS)]
    assert holders == ["provision.yaml", "run/secrets.yml"]
    secrets = tmp_path / "run" / "secrets.yml"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    doc = yaml.safe_load(secrets.read_text())
    netrc = next(f["content"] for f in doc["provision_credential_files"] if f["name"] == "netrc")
    assert "machine w.example login fl password TOKEN-fl" in netrc  # pip reads netrc for find-links too
    # apt_auth.conf(5): a machine without a scheme matches https only, so the mirror's is kept
    assert doc["nvidia_driver_debian_mirror_auth"] == "machine http://deb.example/debian login apt password TOKEN-apt\n"
    [group] = [p for p in (tmp_path / "run" / "group_vars").iterdir() if p.name != "all.yml"]
    role_vars = yaml.safe_load(group.read_text())
    assert role_vars["nvidia_driver_debian_mirror"] == "http://deb.example/debian"
    assert role_vars["frameworks_find_links"] == ["https://w.example/wheels/", "/srv/wheels"]
    assert role_vars["frameworks_installer"] == "pip"  # a login index: pip (role_vars.installer)
    # the controller's pip (closure resolution, the fleet cache's download) gets these sources as
    # argv and the logins through a private netrc (closure.lock_closures, wheels.netrc_env)
    ws = WheelSet.from_group_vars(role_vars, {"python": role_vars["python_env_python"], "arch": "x86_64"})
    assert ws is not None
    argv = [a for _, index in ws.installs for a in ws.source_args(index)]
    assert "--find-links=https://w.example/wheels/" in argv and not any(t in " ".join(argv) for t in TOKENS)


@pytest.mark.parametrize("key", ["python_mirror", "python_downloads_json"])
def test_a_python_download_url_with_a_login_is_refused_in_one_line(tmp_path: Path, key: str) -> None:
    (tmp_path / "provision.yaml").write_text(f"install: {{{key}: 'https://u:TOKEN-py@py.example/x'}}\n")
    rc, _, err = _plan(tmp_path, "-c", "provision.yaml")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: install.{key}: https://py.example/x is given with a login") and "TOKEN" not in err
    assert _written(tmp_path) == ["provision.yaml"]


def test_an_error_that_quotes_a_url_shows_no_login(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml").write_text("install: {apt: {mirror: 'http://u:TOKEN-bad@deb.example/deb ian'}}\n")
    for args in ((), ("--json",)):
        rc, out, err = _plan(tmp_path, "-c", "provision.yaml", *args)
        assert rc == 2 and "TOKEN" not in out + err and "http://***@deb.example/deb ian" in out + err
    assert _written(tmp_path) == ["provision.yaml"]


ZEROS = "0" * 40


@pytest.mark.parametrize(
    ("setting", "error"),
    [
        ('nvidia_driver_debian_mirror="[trusted=yes] http://x/debian"', "is not one plain http(s) or file URL"),
        ('nvidia_driver_debian_mirror="http://x/debian\\ndeb [trusted=yes] http://y/ bookworm main"', "not one plain"),
        ("nvidia_driver_debian_mirror=http://x/debian\ndeb [trusted=yes] http://y/ bookworm main", "not one plain"),
        ("nvidia_driver_debian_mirror=ftp://x/debian", "not one plain"),
        ("frameworks_extra_index_urls=[http://x/simple, 'http://y/ s']", "not one plain"),
        (
            "nvidia_driver_repositories=[{name: cuda, url: 'http://m/cuda/ [trusted=yes]', key_url: http://m/k.pub,"
            f" key_fingerprint: '{ZEROS}'}}]",
            "not one plain",
        ),
        (
            f"nvidia_driver_repositories=[{{name: cuda, url: http://m/cuda/, key_url: http://m/k.pub, key_fingerprint: '{ZEROS}'}}]",
            f"the key fingerprint {ZEROS} of cuda is not the lock's",
        ),
        (
            f"nvidia_driver_repositories=[{{name: other, url: http://m/x/, key_url: http://m/k.pub, key_fingerprint: '{ZEROS}'}}]",
            "'other' is no repository of the lock",
        ),
        ("nvidia_driver_debian_mirror=http://u:TOKEN-set@x/debian", "http://x/debian is given with a login"),
        ("nvidia_driver_debian_mirror_auth=machine x login u password TOKEN-set", "a login is never given on"),
    ],
)
def test_a_set_url_or_key_that_is_not_the_plans_is_refused_before_anything_is_written(
    tmp_path: Path, setting: str, error: str
) -> None:
    rc, _, err = _plan(tmp_path, "--set", setting)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: --set "), err
    assert error in err and "TOKEN" not in err
    assert _written(tmp_path) == []


def test_a_set_mirror_of_a_planned_repository_with_its_key_is_taken(tmp_path: Path) -> None:
    rc, _, err = _plan(tmp_path)
    assert rc == 0, err
    [repo] = json.loads((tmp_path / "provision.lock").read_text())["groups"][0]["packages"]["repositories"]
    mirror = {"name": repo["name"], "url": "http://m/cuda/", "key_url": "http://m/k.pub"}
    mirror["key_fingerprint"] = repo["key_fingerprint"]
    rc, _, err = _plan(tmp_path, "--set", f"nvidia_driver_repositories=[{json.dumps(mirror)}]")
    assert rc == 0, err
    [group] = [p for p in (tmp_path / "run" / "group_vars").iterdir() if p.name != "all.yml"]
    assert yaml.safe_load(group.read_text())["nvidia_driver_repositories"] == [mirror]


def _tampered_up(tmp_path: Path, edit: str, value: str) -> tuple[int, str]:
    rc, _, err = _plan(tmp_path)
    assert rc == 0, err
    lock = json.loads((tmp_path / "provision.lock").read_text())
    group = lock["groups"][0]
    if edit == "requirement":
        group["packages"]["pip"]["requirements"] = [value]
    else:
        group["packages"]["repositories"][0][edit] = value
    (tmp_path / "tampered.lock").write_text(json.dumps(lock))
    (tmp_path / "inv.ini").write_text("h1 ansible_host=192.0.2.1\n")
    r = provision("up", "-i", "inv.ini", "--yes", "--from-lock", "tampered.lock", cwd=tmp_path)
    assert not (tmp_path / ".provision").exists()  # refused before any run, state DB or host contact
    return r.returncode, r.stderr


@pytest.mark.parametrize(
    ("edit", "value", "error"),
    [
        ("key_fingerprint", ZEROS, f"key fingerprint {ZEROS} (the knowledge's: "),
        ("url", "http://evil.example/cuda/", "url http://evil.example/cuda/ (the knowledge's: https://"),
        ("requirement", "--index-url=http://x==1", "'--index-url=http://x==1' is not one exact PEP 508 pin"),
    ],
)
def test_a_tampered_lock_is_refused_before_any_host_is_contacted(
    tmp_path: Path, edit: str, value: str, error: str
) -> None:
    rc, err = _tampered_up(tmp_path, edit, value)
    assert rc == 2 and err.count("\n") == 1 and error in err, err
    if edit != "requirement":
        assert "the lock's repository cuda is not the knowledge's for debian-12" in err


def test_a_lock_without_a_wheel_closure_says_so_in_plan_and_up_lock(tmp_path: Path) -> None:
    """This machine probed for real (read-only): `plan --local` with install.lock_closure: never,
    then the plan `up --lock` makes from that lock (planning.plan with ``locked``, nothing applied)."""
    (tmp_path / "p.yaml").write_text("stack: {frameworks: ['torch==2.13.0+cpu']}\ninstall: {lock_closure: never}\n")
    r = provision("plan", "--local", "-c", "p.yaml", "--out", "run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [note] = [n for n in json.loads(r.stdout)["notes"] if "not locked by hash" in n]
    locked = read_lock(tmp_path / "provision.lock")
    assert not locked.groups[0].python_packages
    again = plan(
        PlanInputs(config=load_config(tmp_path / "p.yaml"), local=True, locked=locked),
        PlanRun(out=tmp_path / "up-run", lock_path=tmp_path / "up.lock", bundle_roles=False),
    )
    assert note in again.notes
