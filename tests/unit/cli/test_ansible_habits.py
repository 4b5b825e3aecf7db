"""Ansible's command-line habits that mean the same thing here (issue 28, point 6), through the
real CLI: ``-K/--ask-become-pass``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from provision.ansible.apply import ApplyResult, HostOutcome
from provision.ansible.render import become_answers, become_prompt
from provision.cli import options
from provision.cli.app import cli
from provision.fleet import batch
from provision.fleet import up as fleet_up
from provision.fleet.targets import HostDefaults, select_targets
from tests.cli_run import provision

PASSWORD = "s3cret-K-pass-9f1c"


def test_ask_become_pass_refuses_without_a_terminal(tmp_path: Path) -> None:
    r = provision("up", "--local", "--yes", "-K", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: -K asks for the sudo password and there is no terminal to ask on "
        "(run it at a terminal, or set ansible_become_password in a vars file kept out of git)"
    ]
    assert not (tmp_path / ".provision").exists()  # refused before any run folder


def test_ask_become_pass_reaches_the_apply_in_memory_and_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up --local -K`: the password, asked once without echo, is the answer ansible-runner gets
    to the play's sudo prompt for the host (run_playbook's in-memory ``passwords``); no file of
    the run (lock, inventory, group_vars, site.yml, events, report) holds it."""
    asked: list[str] = []
    got: dict[str, Any] = {}

    def getpass(prompt: str = "") -> str:
        asked.append(prompt)
        return PASSWORD

    def apply(*args: Any, **kwargs: Any) -> ApplyResult:
        # the real run_playbook would start ansible-runner; stop here with what it was given
        got.update(kwargs)
        artifacts: Path = kwargs["artifacts"]
        artifacts.mkdir(parents=True, exist_ok=True)
        host = HostOutcome("localhost", False, 0, False, "stand-in apply", "stopped by the test", {})
        return ApplyResult("failed", 2, {"localhost": host}, artifacts, artifacts / "events.jsonl")

    monkeypatch.setattr(options, "has_terminal", lambda: True)
    monkeypatch.setattr("getpass.getpass", getpass)
    monkeypatch.setattr(batch, "run_playbook", apply)
    monkeypatch.setattr(batch, "listed_tasks", lambda *a, **k: None)
    # stand-in: no host run lock. On this shared machine it waits for other runs' applies, and
    # it is tests/unit/hosts' business; the password's path does not go through it
    monkeypatch.setattr(fleet_up, "_take_host_locks", lambda *a, **k: None)
    monkeypatch.chdir(tmp_path)
    # no wheel closure: the package index is tests/integration's business
    (tmp_path / "p.yaml").write_text("install: {lock_closure: never}\n")
    r = CliRunner().invoke(cli, ["up", "--local", "-K", "--yes", "-c", "p.yaml", "--json"])
    assert asked == ["sudo password (-K): "], r.output
    assert got["passwords"] == become_answers({"localhost": PASSWORD}), r.output
    # the answer is keyed by the play's prompt for the host, as ansible-runner matches it
    assert [re.search(k, become_prompt("localhost") + ": ") is not None for k in got["passwords"]] == [True]
    [run_dir] = (tmp_path / ".provision" / "runs").iterdir()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"site.yml", "inventory.yml", "report.json", "provision.lock"} <= {p.name for p in files}, files
    assert [str(p) for p in files if PASSWORD.encode() in p.read_bytes()] == []
    assert PASSWORD not in r.output
    # the play asks for it (vars_prompt), the inventory names the prompt, not the password
    assert "provision_become_password_1" in (run_dir / "ansible" / "inventory.yml").read_text()


def test_an_inventorys_own_password_wins_over_K(tmp_path: Path) -> None:
    """As in Ansible, a host variable beats -K: -K fills in the hosts whose inventory sets none."""
    [t] = select_targets(True, None, hint="", defaults=HostDefaults(user="u", become_password=PASSWORD)).targets
    assert t.become_password == PASSWORD and t.user is None  # this machine: no SSH login
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1 ansible_host=10.0.0.1 ansible_become_password=own\nh2 ansible_host=10.0.0.2\n")
    inv.write_text(
        "h1 ansible_host=10.0.0.1 ansible_become_password=own ansible_user=alice\nh2 ansible_host=10.0.0.2\n"
    )
    defaults = HostDefaults(user="bob", key_file="/k", become_password="k")
    got = {
        t.name: (t.become_password, t.user, t.key_file)
        for t in select_targets(False, str(inv), hint="", defaults=defaults).targets
    }
    assert got == {"h1": ("own", "alice", "/k"), "h2": ("k", "bob", "/k")}


def test_e_is_set(tmp_path: Path) -> None:
    """`-e NAME=VALUE` is `--set`: the role variable lands in the run dir's group_vars."""
    r = provision(
        "plan",
        "--assume",
        "gpu=L4:1,os=ubuntu-24.04,name=g1",
        "--out",
        "run",
        "-e",
        "nvidia_driver_debian_mirror=http://mirror.example/debian",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert any(
        "nvidia_driver_debian_mirror: http://mirror.example/debian" in p.read_text()
        for p in (tmp_path / "run" / "group_vars").glob("*.yml")
    )
    bad = provision("plan", "--assume", "gpu=L4:1,os=ubuntu-24.04,name=g1", "-e", "@vars.yml", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_one_gpu_count_spelling_and_the_old_one_with_a_note(tmp_path: Path) -> None:
    """`--gpu-count` on `resolve` and `cloud up`; cloud's old `--gpus` still parses, hidden, with a note."""
    for cmd in (["resolve"], ["cloud", "up"]):
        helptext = provision(*cmd, "--help").stdout
        assert "--gpu-count" in helptext and "--gpus" not in helptext, cmd
    # no AWS here: both spellings stop at the same local check, before anything is sent
    new = provision("cloud", "up", "--gpu-count", "2", "--ssh-cidr", "10.0.0.0/8", "--yes", cwd=tmp_path)
    old = provision("cloud", "up", "--gpus", "2", "--ssh-cidr", "10.0.0.0/8", "--yes", cwd=tmp_path)
    assert new.returncode == old.returncode == 2, (new.stderr, old.stderr)
    assert "--gpu-count needs --gpu NAME" in new.stderr
    assert old.stderr.splitlines() == [
        "warning: --gpus is deprecated; use --gpu-count 2 (same meaning)",
        *new.stderr.splitlines(),
    ]


def test_up_to_an_unreachable_host_writes_the_report_with_its_reason(tmp_path: Path) -> None:
    """Issue 28: an `up` whose every host is unreachable left an empty run folder and no report."""
    (tmp_path / "inv.ini").write_text("h1 ansible_host=127.0.0.1 ansible_port=1\n")  # port 1: refused at once
    (tmp_path / "p.yaml").write_text("install: {lock_closure: never}\n")
    r = provision("up", "-i", "inv.ini", "--yes", "-c", "p.yaml", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    [run] = list((tmp_path / ".provision" / "runs").iterdir())
    assert f"report: {run / 'report.html'}" in r.stderr
    report = json.loads((run / "report.json").read_text())
    [host] = report["hosts"]
    assert host["host"] == "h1" and host["verdict"] == "fail"
    assert "Connection refused" in json.dumps(report)
