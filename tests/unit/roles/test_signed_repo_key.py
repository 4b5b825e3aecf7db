"""signed_repo's key handling, with real gpg on throwaway keys (no stand-in).

- the `signed_repo_key` module (playbooks/roles/signed_repo/library) run as Ansible runs it, on
  key files that carry the pinned key alone, with a second key, with the pin only as a subkey;
- the dnf path's task variables, templated by Ansible for a Rocky 9 lock group. That path cannot
  run here (the test hosts are Debian); ansible-lint checks its syntax (test_roles_lint.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.resources import playbooks_dir

ROLES_DIR = playbooks_dir() / "roles"
MODULE = ROLES_DIR / "signed_repo" / "library" / "signed_repo_key.py"
GOLDEN = Path(__file__).parents[1] / "golden" / "render"


def _gpg(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    cmd = ["gpg", "--homedir", str(home), "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", ""]
    return subprocess.run([*cmd, *args], input=stdin, capture_output=True, check=True).stdout


def _new_key(home: Path, name: str, *, with_subkey: bool = False) -> tuple[str, bytes, str]:
    """A throwaway key in ``home``: (primary fingerprint, armored public key, subkey fingerprint)."""
    home.mkdir(mode=0o700, exist_ok=True)
    _gpg(home, "--quick-gen-key", f"{name} <{name}@provision.invalid>", "ed25519", "sign", "never")
    fpr = next(
        line.split(":")[9]
        for line in _gpg(home, "--with-colons", "--list-keys", name).decode().splitlines()
        if line.startswith("fpr:")
    )
    sub = ""
    if with_subkey:
        _gpg(home, "--quick-add-key", fpr, "ed25519", "sign", "never")
        sub = [
            line.split(":")[9]
            for line in _gpg(home, "--with-colons", "--list-keys", fpr).decode().splitlines()
            if line.startswith("fpr:")
        ][1]
    return fpr, _gpg(home, "--armor", "--export", fpr), sub


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("keys")
    pinned, pinned_pub, pinned_sub = _new_key(tmp / "a", "pinned", with_subkey=True)
    other, other_pub, _ = _new_key(tmp / "b", "other")
    for home in ("a", "b"):
        subprocess.run(["gpgconf", "--homedir", str(tmp / home), "--kill", "gpg-agent"], capture_output=True)
    return {
        "pinned": pinned,
        "pinned_pub": pinned_pub,
        "pinned_sub": pinned_sub,
        "other": other,
        "other_pub": other_pub,
    }


def _primaries(keyring: Path, tmp: Path) -> list[str]:
    """Primary fingerprints in a keyring, as a fresh gpg reads it (what apt's gpgv would trust)."""
    out = subprocess.run(
        ["gpg", "--homedir", str(tmp), "--batch", "--with-colons", "--show-keys", str(keyring)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = out.splitlines()
    return [lines[i + 1].split(":")[9] for i, line in enumerate(lines) if line.startswith("pub:")]


def _run_module(tmp: Path, src: bytes, fingerprint: str, *, check_mode: bool = False) -> dict[str, Any]:
    """The module as Ansible runs it: its file executed by python with the arguments as JSON."""
    (tmp / "download").write_bytes(src)
    args = {
        "src": str(tmp / "download"),
        "dest": str(tmp / "key.asc"),
        "fingerprint": fingerprint,
        "label": "nvidia_driver: the key at http://mirror/key.pub",
        "_ansible_check_mode": check_mode,
    }
    (tmp / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    r = subprocess.run(
        [sys.executable, str(MODULE), str(tmp / "args.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "GNUPGHOME": str(home)},
    )
    return dict(json.loads(r.stdout))


def test_a_file_with_the_pinned_key_and_another_gives_a_keyring_with_the_pinned_key_alone(
    keys: dict[str, Any], tmp_path: Path
) -> None:
    """The defect: the whole file used to be installed, so apt trusted the second key as well."""
    for order in ((keys["other_pub"], keys["pinned_pub"]), (keys["pinned_pub"], keys["other_pub"])):
        for p in tmp_path.iterdir():
            if p.is_file():
                p.unlink()
        result = _run_module(tmp_path, b"".join(order), keys["pinned"].lower())
        assert not result.get("failed"), result
        assert result["changed"] and result["dropped"] == [keys["other"]]
        assert _primaries(tmp_path / "key.asc", tmp_path / "home") == [keys["pinned"]]
    # the pinned key keeps its own subkey (a repository may be signed by one)
    listing = subprocess.run(
        [
            "gpg",
            "--homedir",
            str(tmp_path / "home"),
            "--batch",
            "--with-colons",
            "--show-keys",
            str(tmp_path / "key.asc"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert keys["pinned_sub"] in listing
    assert oct((tmp_path / "key.asc").stat().st_mode & 0o777) == "0o644"


def test_the_same_key_again_changes_nothing_and_check_mode_writes_nothing(keys: dict[str, Any], tmp_path: Path) -> None:
    first = _run_module(tmp_path, keys["pinned_pub"], keys["pinned"])
    assert first["changed"] and first["dropped"] == []
    again = _run_module(tmp_path, keys["pinned_pub"] + keys["other_pub"], keys["pinned"])
    assert not again["changed"], again
    (tmp_path / "key.asc").unlink()
    checked = _run_module(tmp_path, keys["pinned_pub"], keys["pinned"], check_mode=True)
    assert checked["changed"] and not (tmp_path / "key.asc").exists()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("other_only", "does not have the pinned fingerprint {pinned} as a primary key (it has {other})"),
        ("pin_is_a_subkey", "does not have the pinned fingerprint {pinned_sub} as a primary key"),
        ("not_a_key", "does not have the pinned fingerprint {pinned} as a primary key (it has no usable key"),
        ("short_pin", "cannot be checked: the pinned fingerprint '3BF863CC' is not a full one"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(
    keys: dict[str, Any], tmp_path: Path, case: str, expected: str
) -> None:
    src, pin = {
        "other_only": (keys["other_pub"], keys["pinned"]),
        "pin_is_a_subkey": (keys["pinned_pub"], keys["pinned_sub"]),
        "not_a_key": (b"<html>mirror error page</html>\n", keys["pinned"]),
        "short_pin": (keys["pinned_pub"], "3BF863CC"),
    }[case]
    result = _run_module(tmp_path, src, pin)
    assert result["failed"], result
    msg = str(result["msg"])
    assert msg.startswith("nvidia_driver: the key at http://mirror/key.pub ") and msg.endswith("; check the mirror")
    assert expected.format(**keys) in msg and "\n" not in msg, msg
    assert not (tmp_path / "key.asc").exists()


# --- the dnf path: what rpm_key and yum_repository are given -------------------------------------


def _load(path: Path) -> Any:
    """YAML as Ansible loads it: ansible-core 2.19 templates only strings its own loader read."""
    from ansible.parsing.dataloader import DataLoader

    return DataLoader().load_from_file(str(path), trusted_as_template=True)


def _tasks(role: str, name: str) -> list[dict[str, Any]]:
    return list(_load(ROLES_DIR / role / "tasks" / name))


def _templar(variables: dict[str, Any]) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    return Templar(loader=DataLoader(), variables=variables)


@pytest.mark.parametrize("role", ["nvidia_driver"])
def test_dnf_repositories_name_the_checked_local_key_not_the_remote_one(role: str) -> None:
    """gpgkey is a file:// URL to the copy holding the pinned key alone, and rpm_key imports that copy.

    Templated by Ansible's own Templar with the Rocky 9 golden lock group's variables on top of the
    roles' defaults, exactly as the play would see them (the scratch path stands for tempfile's):
    every role's repositories go through package_plan's one include of signed_repo.
    """
    [path] = [p for p in (GOLDEN / "rocky-9" / "group_vars").iterdir() if p.name != "all.yml"]
    group_vars = _load(path)
    variables: dict[str, Any] = {}
    for r in (role, "package_plan", "signed_repo"):
        variables.update(_load(ROLES_DIR / r / "defaults" / "main.yml"))
    variables.update(group_vars)
    variables.update(package_plan_label=role, package_plan_repository=group_vars[f"{role}_repositories"][0])
    [include] = [t for t in _tasks("package_plan", "repository.yml") if "ansible.builtin.include_role" in t]
    assert include["ansible.builtin.include_role"]["name"] == "signed_repo"
    variables.update(include["vars"])
    variables["signed_repo_scratch"] = {"path": "/tmp/provision-repo-x"}
    variables["signed_repo_key_result"] = {"fingerprint": "F" * 40}
    templar = _templar(variables)
    dnf = _tasks("signed_repo", "dnf.yml")
    variables.update(
        templar.template(next(t for t in dnf if "ansible.builtin.set_fact" in t)["ansible.builtin.set_fact"])
    )
    templar = _templar(variables)
    copy = templar.template(next(t for t in dnf if "ansible.builtin.copy" in t)["ansible.builtin.copy"])
    rpm_key = templar.template(next(t for t in dnf if "ansible.builtin.rpm_key" in t)["ansible.builtin.rpm_key"])
    repo = templar.template(
        next(t for t in dnf if "ansible.builtin.yum_repository" in t)["ansible.builtin.yum_repository"]
    )
    key_url = templar.template(variables["signed_repo_key_url"])
    assert key_url.startswith(("https://", "http://"))  # the remote key, fetched and checked once
    assert copy["src"] == "/tmp/provision-repo-x/key.asc" and copy["dest"].startswith("/etc/pki/rpm-gpg/RPM-GPG-KEY-")
    assert repo["gpgkey"] == f"file://{copy['dest']}" and repo["gpgcheck"] is True
    assert rpm_key["key"] == copy["src"] and "://" not in rpm_key["key"] and rpm_key["fingerprint"] == "F" * 40
    assert repo["baseurl"].startswith(("https://", "http://")) and repo["name"].startswith("provision-")


def test_no_role_trusts_a_key_it_did_not_check() -> None:
    """Only signed_repo adds repositories or keys: no other role has its own rpm_key, yum_repository
    or signed-by keyring (each would be a second copy of the check, free to drift)."""
    for path in ROLES_DIR.glob("*/tasks/*.yml"):
        if path.parts[-3] == "signed_repo":
            continue
        text = path.read_text()
        for word in (
            "rpm_key:",
            "yum_repository:",
            "signed-by",
            "gpgkey:",
            "apt_key:",
            "apt_repository:",
            "deb822_repository:",
        ):
            assert word not in text, f"{path} has {word}: use the signed_repo role"
