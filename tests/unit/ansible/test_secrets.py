"""Credentials in install URLs and the controller's environment: what render writes, where, with
which modes, and what ansible-playbook gets from the controller's environment (issue 13).

The end-to-end check (real plan/up over SSH, `ps` sampled on both ends, a login index and a login
proxy) is tests/integration/test_secrets.py; these are the parts that need no host.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.ansible.apply import RUNNER_ENV_ALLOW, _forget_environment, _without_inherited, runner_environment
from provision.ansible.render import render_run
from provision.ansible.rundir import write_run_dir
from provision.errors import BadInput
from provision.fleet.cache.tunnel import host_vars
from provision.fleet.cache.wheels import WheelSet, netrc_env
from provision.model import Lock
from provision.model.settings import AptSettings, InstallSettings, PipSettings, split_credential
from tests.support.run_dir import syntax_check

GOLDEN = Path(__file__).parents[1] / "golden" / "render"
HOSTS = {"gpu-1.example": {"ansible_host": "10.0.0.1"}}
TOKENS = ("s3cr3t-index", "s3cr3t-extra", "s3cr3t-proxy")
INSTALL = InstallSettings(
    pip=PipSettings(
        index_url="https://alice:s3cr3t-index@mirror.example/simple",
        extra_index_urls=("https://bob:s3cr3t-extra@extra.example:8443/simple", "https://plain.example/"),
    ),
    apt=AptSettings(proxy="http://carol:s3cr3t-proxy@proxy.example:3128"),
)


def _lock() -> dict:
    return json.loads((GOLDEN / "debian-12.lock").read_text())


def test_split_credential_keeps_the_url_and_decodes_the_login() -> None:
    assert split_credential("https://u%40corp:p%2Fw@h.example:8443/simple/") == (
        "https://h.example:8443/simple/",
        ("u@corp", "p/w"),
    )
    assert split_credential("https://h.example/simple") == ("https://h.example/simple", None)
    assert split_credential("http://[::1]:3128") == ("http://[::1]:3128", None)
    assert split_credential("http://u:p@[::1]:3128")[0] == "http://[::1]:3128"


def test_credentials_are_only_in_secrets_yml_and_the_play_env_only_names_files() -> None:
    files = render_run(Lock.from_json(_lock()), HOSTS, INSTALL, roles_path="/usr/share/provision/roles").files
    holders = {rel for rel, text in files.items() if any(t in text for t in TOKENS)}
    assert holders == {"secrets.yml"}
    group = next(rel for rel in files if rel.startswith("group_vars/") and rel != "group_vars/all.yml")
    role_vars = yaml.safe_load(files[group])
    assert role_vars["frameworks_index_url"] == "https://mirror.example/simple"
    assert "https://extra.example:8443/simple" in role_vars["frameworks_extra_index_urls"]
    env = yaml.safe_load(files["group_vars/all.yml"])["provision_environment"]
    assert env["http_proxy"] == env["https_proxy"] == "http://proxy.example:3128"
    assert {k: v.rsplit("/", 1)[-1] for k, v in env.items() if not k.endswith("_proxy")} == {
        "NETRC": "netrc",
        "PIP_CONFIG_FILE": "pip.conf",
        "APT_CONFIG": "apt.conf",
        "PROVISION_APPLY": "1",  # the host lock's mark on the play's processes (hosts/runlock.py)
    }
    secret_files = {f["name"]: f["content"] for f in yaml.safe_load(files["secrets.yml"])["provision_credential_files"]}
    assert secret_files["netrc"] == (
        "machine mirror.example login alice password s3cr3t-index\n"
        "machine extra.example login bob password s3cr3t-extra\n"
    )
    assert "proxy = http://carol:s3cr3t-proxy@proxy.example:3128" in secret_files["pip.conf"]
    assert 'Acquire::http::Proxy "http://carol:s3cr3t-proxy@proxy.example:3128";' in secret_files["apt.conf"]
    # the credential tasks never log their content
    play = yaml.safe_load(files["site.yml"])[0]
    assert play["vars_files"] == ["secrets.yml"]
    writes = [t for t in play["tasks"][0]["block"] if "ansible.builtin.copy" in t]
    assert writes and all(t["no_log"] is True for t in writes)
    assert play["tasks"][0]["always"][0]["ansible.builtin.file"]["state"] == "absent"


def test_each_up_run_has_its_own_credentials_folder_mark_and_run_lock() -> None:
    """Issue 25: `up --check` wrote and removed the folder a running apply's pip read its netrc
    from. A run id (what `up` passes) gives the run a folder of its own, its own mark on the play's
    processes, and the run lock's settings for the driver role's reboot (hosts/runlock.py)."""
    from provision.hosts.runlock import CLAIM_PATH, LOCK_PATH

    runs = {}
    for run in ("20261204-080000-aaaa", "20261204-080001-bbbb"):
        files = render_run(
            Lock.from_json(_lock()), HOSTS, INSTALL, roles_path="/usr/share/provision/roles", run=run
        ).files
        runs[run] = yaml.safe_load(files["group_vars/all.yml"])
    folders = {run: all_vars["provision_credentials_dir"] for run, all_vars in runs.items()}
    assert folders == {run: f"/root/.provision-credentials-{run}" for run in runs}
    for run, all_vars in runs.items():
        env = all_vars["provision_environment"]
        assert env["NETRC"] == f"{folders[run]}/netrc" and env["APT_CONFIG"] == f"{folders[run]}/apt.conf"
        assert env["PROVISION_APPLY"] == run
        lock = all_vars["provision_run_lock"]
        assert (lock["run"], lock["path"], lock["claim"]) == (run, LOCK_PATH, CLAIM_PATH)


def test_a_run_without_credentials_renders_as_before() -> None:
    plain = InstallSettings(
        pip=PipSettings(find_links=("/srv/wheels",)), apt=AptSettings(proxy="http://proxy.example:3128")
    )
    files = render_run(Lock.from_json(_lock()), HOSTS, plain, roles_path="/usr/share/provision/roles").files
    assert "secrets.yml" not in files
    assert "roles" in yaml.safe_load(files["site.yml"])[0]


@pytest.mark.parametrize(
    ("pip", "message"),
    [
        (
            PipSettings(index_url="https://a:x@h.example/s", extra_index_urls=("https://b:y@h.example/t",)),
            "two different credentials for the index host h.example",
        ),
        (PipSettings(index_url="https://a:x%20y@h.example/s"), "cannot go into a netrc file"),
        (PipSettings(index_url="https://:tok@h.example/s"), "cannot go into a netrc file"),
    ],
)
def test_credentials_pip_cannot_look_up_are_bad_input(pip: PipSettings, message: str) -> None:
    # refused when the settings are built (config loading), before any render
    with pytest.raises(BadInput, match=message):
        render_run(Lock.from_json(_lock()), HOSTS, InstallSettings(pip=pip), roles_path="/usr/share/provision/roles")


def test_the_run_dir_is_private_and_passes_ansible_syntax_check(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir(mode=0o755)
    out.chmod(0o755)
    lock = _lock()
    write_run_dir(out, Lock.from_json(lock), json.dumps(lock), HOSTS, INSTALL)
    for path in [out, *out.rglob("*")]:
        mode = path.stat().st_mode
        assert not mode & 0o077, f"{path} is {stat.filemode(mode)}"
    syntax_check(out)
    # planned again without credentials: the old secrets.yml does not stay behind
    write_run_dir(out, Lock.from_json(lock), json.dumps(lock), HOSTS, InstallSettings())
    assert not (out / "secrets.yml").exists()


def test_ansible_playbook_gets_only_the_allow_listed_environment() -> None:
    parent = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "LANG": "C.UTF-8",
        "AWS_SECRET_ACCESS_KEY": "x",
        "GITHUB_TOKEN": "y",
        "ANSIBLE_BECOME_PASS": "z",
        "http_proxy": "p",
    }
    env = runner_environment({"ANSIBLE_CONFIG": "/run/ansible.cfg"}, parent=parent)
    assert set(env) == {"PATH", "HOME", "SSH_AUTH_SOCK", "LANG", "ANSIBLE_CONFIG"}
    assert env["PATH"].endswith(":/usr/bin")
    assert set(env) - {"ANSIBLE_CONFIG"} <= RUNNER_ENV_ALLOW
    # what the runner seeded from the parent goes; what it set itself, and ours, stays
    prepared = {**parent, **env, "PYTHONPATH": "/runner/callbacks", "ANSIBLE_STDOUT_CALLBACK": "awx_display"}
    kept = _without_inherited(prepared, env, parent=parent)
    assert set(kept) == set(env) | {"PYTHONPATH", "ANSIBLE_STDOUT_CALLBACK"}


def test_the_runners_command_artifact_loses_its_environment(tmp_path: Path) -> None:
    command = tmp_path / "command"
    command.write_text(json.dumps({"command": ["ansible-playbook"], "cwd": "/x", "env": {"K": "v"}}))
    _forget_environment(command)
    assert json.loads(command.read_text()) == {"command": ["ansible-playbook"], "cwd": "/x"}


def test_the_fleet_cache_tunnels_drop_the_credential_proxies() -> None:
    env = {
        "http_proxy": "http://proxy.example:3128",
        "APT_CONFIG": "/r/apt.conf",
        "PIP_CONFIG_FILE": "/r/pip.conf",
        "NETRC": "/r/netrc",
    }
    both = host_vars(4000, 4001, "cp311-x86_64", env)["provision_environment"]
    assert "APT_CONFIG" not in both and "PIP_CONFIG_FILE" not in both and both["http_proxy"] == "http://127.0.0.1:4000"
    wheels_only = host_vars(None, 4001, "cp311-x86_64", env)["provision_environment"]
    assert "PIP_CONFIG_FILE" not in wheels_only and wheels_only["APT_CONFIG"] == "/r/apt.conf"


def test_the_controllers_pip_download_reads_logins_from_a_private_netrc() -> None:
    ws = WheelSet(
        python="3.11",
        arch="x86_64",
        installs=((("torch==2.13.0",), "https://mirror.example/simple"),),
        netrc="machine mirror.example login alice password s3cr3t-index\n",
    )
    for cmd in ws.download_commands(sys.executable, Path("/tmp/w")):
        assert not any("s3cr3t" in a for a in cmd)
    with netrc_env(ws.netrc) as env:
        assert env is not None
        path = Path(env["NETRC"])
        assert path.read_text() == ws.netrc
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not path.exists()
    with netrc_env("") as none:
        assert none is None


def test_a_credential_pip_cannot_use_is_one_line_exit_2_and_nothing_written(tmp_path: Path) -> None:
    config = tmp_path / "provision.yaml"
    config.write_text(
        "stack: {frameworks: ['torch==2.13.0+cpu'], driver: none}\n"
        "install: {pip: {index_url: 'https://a:tok-aaa@h.example/s', extra_index_urls: ['https://b:tok-bbb@h.example/t']}}\n"
    )
    bindir = Path(sys.executable).parent
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "plan",
            "--assume",
            "os=debian-12,gpu=T4,name=h1",
            "-c",
            str(config),
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
    )
    assert r.returncode == 2, r.stderr
    assert (
        r.stderr.startswith("error: install.pip.extra_index_urls: two different credentials")
        and r.stderr.count("\n") == 1
    )
    assert "tok-aaa" not in r.stderr and "tok-bbb" not in r.stderr  # names the host, never a token
    assert sorted(p.name for p in tmp_path.iterdir()) == ["provision.yaml"]


def test_artifacts_ansible_chmods_0644_are_closed_again(tmp_path: Path) -> None:
    from provision.ansible.apply import _owner_only

    cache = tmp_path / "artifacts" / "fact_cache"
    cache.mkdir(parents=True)
    (cache / "host1").write_text("{}")
    (cache / "host1").chmod(0o644)  # what Ansible's jsonfile cache plugin does
    cache.chmod(0o755)
    _owner_only(tmp_path / "artifacts")
    assert stat.S_IMODE((cache / "host1").stat().st_mode) == 0o600 and stat.S_IMODE(cache.stat().st_mode) == 0o700
