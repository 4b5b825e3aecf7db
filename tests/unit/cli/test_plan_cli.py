"""`provision plan` through the real CLI: --assume (no host contacted), the run dir, the contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.ansible.render import render_run
from provision.errors import BadInput
from provision.files import read_lock
from provision.model import Lock
from provision.model.settings import InstallSettings
from tests.cli_run import provision
from tests.support.run_dir import syntax_check

BIN = Path(sys.executable).parent


def _plan(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return provision("plan", *args, cwd=cwd)


def test_assume_writes_lock_and_a_run_dir_plain_ansible_accepts(tmp_path: Path) -> None:
    r = _plan("--assume", "os=ubuntu-22.04,gpu=H100-SXM:8,name=gpu-a", "--out", "run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["out"] == "run"
    [host] = doc["hosts"]
    assert host["host"] == "gpu-a" and host["probed"] is False
    lock = read_lock(tmp_path / "provision.lock")
    [group] = lock.groups
    driver = group.stack.driver
    assert any(c.startswith(f"driver {driver.version}") for c in host["changes"])
    assert f"fabric manager {driver.version}" in host["changes"]  # 8 x H100-SXM: an NVSwitch board
    run = tmp_path / "run"
    assert (run / "provision.lock").read_text() == (tmp_path / "provision.lock").read_text()
    assert sorted(p.name for p in (run / "group_vars").iterdir()) == ["all.yml", f"{group.name}.yml"]
    syntax_check(run)


def test_human_output_says_what_changes_and_how_to_apply(tmp_path: Path) -> None:
    r = _plan("--assume", "os=debian-12,gpu=L4:1,name=h1", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "not probed" in r.stdout and "cd run && ansible-playbook site.yml" in r.stdout


def test_config_and_overrides_reach_group_vars(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml").write_text(
        "stack: {frameworks: ['torch==2.13.0+cpu']}\ninstall: {venv: /srv/venv, reboot: never,"
        " pip: {find_links: [/var/tmp/wheels]}}\n"
    )
    r = _plan(
        "--assume",
        "os=debian-12,name=h1",
        "-c",
        "provision.yaml",
        "--out",
        "run",
        "--set",
        "frameworks_no_index=true",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    text = next((tmp_path / "run" / "group_vars").glob("cpu_*.yml")).read_text()
    assert "nvidia_driver_enabled: false" in text
    assert "- torch==2.13.0+cpu" in text
    assert "python_env_path: /srv/venv" in text and "nvidia_driver_reboot: never" in text
    assert "frameworks_no_index: true" in text


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["--assume", "colour=blue"], 2, "--assume key 'colour' is unknown"),
        (["--assume", "os=debian-12,gpu=H100-SXM:x,name=h1"], 2, "not a number"),
        (["--assume", "os=solaris-11,name=h1"], 2, "solaris"),
        ([], 2, "nothing to plan for"),
        (["--assume", "os=debian-12,name=h1", "--set", "ansible_become_exe=sh"], 2, "not a role variable"),
        (["--assume", "os=debian-12,name=bad;host"], 2, "cannot be used in an inventory"),
        (["--assume", "os=ubuntu-22.04,gpu=K80:1,name=h1", "--set", "x"], 2, "not NAME=VALUE"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], code: int, words: str) -> None:
    r = _plan(*args, cwd=tmp_path)
    assert r.returncode == code, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], r.stderr
    assert not (tmp_path / "provision.lock").exists()


def test_unsatisfiable_is_exit_3_naming_the_host(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("stack: {frameworks: ['torch>=2.8']}\n")
    r = _plan("--assume", "os=ubuntu-22.04,gpu=K80:1,name=old-box", "-c", "p.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["error"]["code"] == "unsatisfiable" and doc["error"]["message"].startswith("old-box: ")


def test_an_unwritable_out_dir_is_bad_input_and_writes_no_lock(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _plan("--assume", "os=ubuntu-22.04,gpu=H100-SXM:8,name=h1", "--out", str(blocker / "run"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: cannot write to {blocker / 'run'}: Not a directory (give --out a writable folder)"
    ]
    assert not (tmp_path / "provision.lock").exists()


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_users_non_empty_folder_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """--out at an Ansible project of the user's: plan used to delete its group_vars/*.yml."""
    mine = tmp_path / "mine"
    (mine / "group_vars").mkdir(parents=True)
    (mine / "group_vars" / "webservers.yml").write_text("http_port: 80\n")
    (mine / "site.yml").write_text("- hosts: all\n")
    before = _tree(mine)
    r = _plan("--assume", "os=debian-12,gpu=L4:1,name=h1", "--out", "mine", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "error: --out mine is a non-empty folder that is not a provision run dir (plan would replace its files) "
        "(give --out a new or empty folder, or a run dir an earlier `provision plan` wrote)"
    ]
    assert _tree(mine) == before
    assert not (tmp_path / "provision.lock").exists()


def test_re_planning_into_its_own_run_dir_replaces_what_it_wrote(tmp_path: Path) -> None:
    r = _plan("--assume", "os=debian-12,gpu=L4:1,name=a", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / ".provision-run-dir").is_file()
    (tmp_path / "run" / "group_vars" / "gone.yml").write_text("x: 1\n")  # a group an earlier lock had
    (tmp_path / "run" / "notes.txt").write_text("the user's\n")
    r = _plan("--assume", "os=ubuntu-22.04,gpu=H100-SXM:8,name=a", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "run" / "group_vars").iterdir())
    assert "gone.yml" not in names and "all.yml" in names
    assert (tmp_path / "run" / "notes.txt").read_text() == "the user's\n"  # files plan does not own stay


def test_a_run_dir_from_before_the_marker_is_still_re_planned(tmp_path: Path) -> None:
    r = _plan("--assume", "os=debian-12,gpu=L4:1,name=h1", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (tmp_path / "run" / ".provision-run-dir").unlink()  # as an earlier release wrote it
    r = _plan("--assume", "os=debian-12,gpu=L4:1,name=h1", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / ".provision-run-dir").is_file()


def test_plan_with_the_lock_inside_a_new_out_folder(tmp_path: Path) -> None:
    """`--lock run/provision.lock --out run`: the lock written first made `run` a non-empty folder
    that was not yet a run dir, so the run dir was refused (exit 2) by plan's own lock."""
    args = ("--assume", "os=debian-12,gpu=L4:1,name=a", "--out", "run", "--lock", "run/provision.lock")
    r = _plan(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / "provision.lock").is_file() and (tmp_path / "run" / "site.yml").is_file()
    again = _plan(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr


CONTRACT = ["manager", "repositories", "module_streams", "install", "holds", "services", "pip"]


def test_plan_json_shows_each_groups_package_plan_exactly_as_the_lock_has_it(tmp_path: Path) -> None:
    r = _plan("--assume", "os=rocky-9,gpu=B200:8,name=b", "--out", "run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [group] = json.loads(r.stdout)["groups"]
    assert list(group) == ["name", "hosts", "stack", "packages", "python_packages", "warnings"]
    assert group["python_packages"] == []  # an --assume plan reaches no index (install.lock_closure: auto)
    packages = group["packages"]
    assert list(packages) == CONTRACT
    assert packages["manager"] == "dnf" and packages["module_streams"] == ["nvidia-driver:620-open"]
    assert [r["name"] for r in packages["repositories"]] == ["epel", "cuda"]  # dkms from EPEL first
    assert all(list(r) == ["name", "url", "key_url", "key_fingerprint"] for r in packages["repositories"])
    assert all(list(i) == ["name", "version", "role", "repository"] for i in packages["install"])
    assert all(list(s) == ["name", "role"] for s in packages["services"])
    assert set(packages["holds"]) <= {i["name"] for i in packages["install"]}
    assert {"nvlsm", "nvidia-fabricmanager"} <= {i["name"] for i in packages["install"]}
    [locked] = read_lock(tmp_path / "provision.lock").groups
    assert locked.packages is not None and locked.packages.to_json() == packages


def test_human_plan_lists_repositories_streams_packages_holds_and_services(tmp_path: Path) -> None:
    r = _plan("--assume", "os=rhel-9,gpu=H100-SXM:8,name=h", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "group h100_sxm_x8_rhel_9  (h)" in out and "package manager: dnf" in out
    assert "+ repository cuda: https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/" in out
    assert "(fingerprint 610C7B14E068A878070DA4E99CD0A493D42D0685)" in out
    assert "+ module stream nvidia-driver:620-open" in out
    assert "+ nvidia-open-3:620.70.06" in out and "(nvidia_driver, from cuda, held)" in out
    assert "+ nvidia-fabricmanager-620.70.06" in out
    assert "+ service nvidia-fabricmanager (enabled by fabric_manager)" in out
    assert all(len(line) < 200 for line in out.splitlines())  # one line each, not wrapped at 80


@pytest.mark.parametrize("os_id", ["rhel-8", "rocky-8"])
def test_el8_is_refused_at_plan_time_in_one_line_exit_2(tmp_path: Path, os_id: str) -> None:
    r = _plan("--assume", f"os={os_id},gpu=L4:1,name=h1", "--out", "run", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert f"{os_id} is not supported: ansible-core >= 2.17 cannot manage EL8" in line
    assert not (tmp_path / "provision.lock").exists() and not (tmp_path / "run").exists()


def test_debian_13_is_planned_with_its_own_repository_key(tmp_path: Path) -> None:
    r = _plan("--assume", "os=debian-13,gpu=L40S:1,name=h1", "--out", "run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [repo] = json.loads(r.stdout)["groups"][0]["packages"]["repositories"]
    assert repo["key_url"].endswith("/debian13/x86_64/8793F200.pub")
    assert repo["key_fingerprint"] == "02182E60104FCDC26EAE1B8597A5D4CB8793F200"


def test_ubuntus_distro_driver_without_a_host_is_planned_for_the_host_to_complete(tmp_path: Path) -> None:
    """--assume gives no kernel: the distro driver's module packages keep {kernel_flavour} and
    {kernel} for the nvidia_driver role to fill in, and the run dir takes them (it refused them)."""
    (tmp_path / "provision.yaml").write_text("install: {method: distro}\n")
    r = _plan("--assume", "os=ubuntu-24.04,gpu=L4:1,name=h1", "-c", "provision.yaml", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    vars_text = next((tmp_path / "run" / "group_vars").glob("l4_*.yml")).read_text()
    assert "-server-open-{kernel_flavour}" in vars_text and "-server-open-{kernel}" in vars_text
    # the placeholders are the only braces let through: a name with anything else is still refused
    lock = json.loads((tmp_path / "provision.lock").read_text().replace("{kernel}", "{kernel} x"))
    with pytest.raises(BadInput, match="is not a package name"):
        render_run(Lock.from_json(lock), {"h1": {}}, InstallSettings(), roles_path="/r")


def test_a_host_whose_python_no_wheel_fits_gets_a_standalone_cpython_in_the_plan(tmp_path: Path) -> None:
    """The assumed host's python3 (3.12 on Ubuntu 24.04) bounds the OS's Pythons only: torch 2.0.1 has
    no 3.12 wheel, so python_source auto plans a standalone 3.11, says so, and the run dir builds it."""
    (tmp_path / "provision.yaml").write_text("stack: {frameworks: ['torch==2.0.1']}\n")
    r = _plan("--assume", "os=ubuntu-24.04,gpu=A10G:1,python=3.12,name=gpu1", "-c", "provision.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "python 3.11 (a standalone CPython, installed by uv)" in r.stdout
    [group] = read_lock(tmp_path / "provision.lock").groups
    assert (group.stack.python, group.stack.python_source) == ("3.11", "standalone")
    vars_text = next((tmp_path / ".provision" / "run" / "group_vars").glob("a10g*.yml")).read_text()
    assert "python_env_source: standalone" in vars_text and "python_env_uv_version:" in vars_text
    (tmp_path / "os.yaml").write_text("stack: {frameworks: ['torch==2.0.1']}\ninstall: {python_source: os}\n")
    refused = _plan(
        "--assume", "os=ubuntu-24.04,gpu=A10G:1,python=3.12,name=h1", "-c", "os.yaml", "--out", "r2", cwd=tmp_path
    )
    assert refused.returncode == 3 and "python" in refused.stderr, refused.stderr


def test_out_dir_is_self_contained_and_runs_from_a_copy(tmp_path: Path) -> None:
    """`plan --out DIR` carries the roles (ansible.cfg names them relatively) and the lock: the
    copy runs where neither this checkout nor the plan's folder is reachable."""
    import shutil

    from provision.resources import playbooks_dir

    made = tmp_path / "made"
    made.mkdir()
    r = _plan("--assume", "os=debian-12,gpu=L4:1,name=gpu-a", "--out", "DIR", cwd=made)
    assert r.returncode == 0, r.stderr
    copy = tmp_path / "elsewhere" / "DIR"
    shutil.copytree(made / "DIR", copy)
    shutil.rmtree(made)  # the folder the plan was written in is gone
    assert "roles_path = roles\n" in (copy / "ansible.cfg").read_text()
    assert sorted(p.name for p in (copy / "roles").iterdir()) == sorted(
        p.name for p in (playbooks_dir() / "roles").iterdir()
    )
    checkout = str(playbooks_dir().parent)
    for f in copy.rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert checkout not in text and str(tmp_path) not in text, f
    assert read_lock(copy / "provision.lock").groups[0].hosts == ["gpu-a"]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("ANSIBLE_ROLES_PATH", None)
    env.pop("ANSIBLE_CONFIG", None)
    for cmd in (["ansible-playbook", "--syntax-check", "site.yml"], ["ansible-inventory", "--list"]):
        done = subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=copy, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
    inventory = json.loads(done.stdout)
    assert inventory["_meta"]["hostvars"]["gpu-a"]["nvidia_driver_version"]
    # what Ansible itself takes roles_path to be, from the copy's ansible.cfg: the copy's roles
    config = subprocess.run(
        [str(BIN / "ansible-config"), "dump", "--only-changed"], cwd=copy, capture_output=True, text=True, env=env
    )
    assert f"DEFAULT_ROLES_PATH({copy / 'ansible.cfg'}) = ['{copy / 'roles'}']" in config.stdout, config.stdout
    # planning again into it replaces the roles it copied (no stale role survives)
    (copy / "roles" / "stale").mkdir()
    again = _plan("--assume", "os=debian-12,gpu=L4:1,name=gpu-a", "--out", str(copy), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert not (copy / "roles" / "stale").exists() and (copy / "roles" / "verify" / "tasks").is_dir()


def test_a_probed_host_without_an_nvidia_gpu_gets_no_driver_unless_one_is_pinned() -> None:
    """A real probe's facts (a Debian 12 VM whose lspci lists no NVIDIA device): the resolver plans
    no driver for it and says why; a pinned driver is still honoured (the user asked for it)."""
    from provision.hosts import gather
    from provision.hosts.facts import probed_host
    from provision.matrix import load
    from provision.stack.request import NO_GPU_FOUND, HostSpec, StackRequest
    from provision.stack.resolve import resolve
    from tests.support.probe_fixtures import fixture

    sections = {
        "id": "root\n0",
        "os_release": fixture("os-release/debian-12"),
        "uname": "6.1.0-40-amd64\nx86_64",
        "lspci": fixture("lspci/vm-no-gpu.txt"),
        "python": "Python 3.11.2",
        "pythons": "python3.11\n",
    }
    facts = gather.facts_from_sections(sections, gather.GatherOptions(lookup=load().gpu_by_pci_id))
    host = HostSpec.from_facts(probed_host(facts))
    assert host.gpu is None and host.probed is not None
    res = resolve(StackRequest.build(frameworks=["torch==2.8.0"]), host)
    assert res.stack.driver is None
    assert f"{NO_GPU_FOUND}: rules that need a GPU are skipped" in res.reasons
    assert any(r.startswith("driver: none installed (no NVIDIA GPU on this host") for r in res.reasons)
    pinned = resolve(StackRequest.build(frameworks=["torch==2.8.0"], driver="580"), host)
    assert pinned.stack.driver is not None and pinned.stack.driver.branch == "580"
    described = resolve(StackRequest.build(frameworks=["torch==2.8.0"]), HostSpec.describe(os="debian-12"))
    assert described.stack.driver is not None  # no GPU *given* is not no GPU *found*: unchanged


def test_plan_local_on_a_machine_without_an_nvidia_gpu_says_so(tmp_path: Path) -> None:
    """This machine, probed for real: without an NVIDIA GPU, plan says so and plans no driver."""
    probe = subprocess.run(
        [sys.executable, "-m", "provision", "probe", "--local", "--json"], capture_output=True, text=True, check=True
    )
    if json.loads(probe.stdout)["hosts"][0]["facts"]["gpus"]:
        pytest.skip("this machine has an NVIDIA GPU")
    # the frameworks alone: the default torch's index (download.pytorch.org) is not reachable
    # from the test machines, and the wheel closure is test_closure.py's
    (tmp_path / "p.yaml").write_text("install: {lock_closure: never}\n")
    r = _plan("--local", "-c", "p.yaml", "--out", "run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [host] = json.loads(r.stdout)["hosts"]
    # the default there is torch's CPU build (issue 28): nothing preflight would refuse
    assert host["notes"] == ["no NVIDIA GPU found on this host: no driver is planned, the frameworks run on the CPU"]
    assert not any(c.startswith("driver ") for c in host["changes"]) and host["reboot"] == "no"
    assert read_lock(tmp_path / "provision.lock").groups[0].stack.driver is None
    assert "preflight_require_gpu: false" in "".join(p.read_text() for p in (tmp_path / "run" / "group_vars").iterdir())
    cuda = _plan("--local", "-c", "p.yaml", "--torch-variant", "cu128", "--out", "run4", "--json", cwd=tmp_path)
    assert json.loads(cuda.stdout)["hosts"][0]["notes"] == [
        "no NVIDIA GPU found on this host: no driver is planned; up's preflight refuses the CUDA build of "
        "torch here (a CPU-only stack, e.g. torch==X+cpu, passes; up --check runs the rest on the CPU)"
    ]
    human = _plan("--local", "-c", "p.yaml", "--out", "run2", "--lock-out", "l2", cwd=tmp_path)
    assert "note:         no NVIDIA GPU found on this host" in human.stdout
    (tmp_path / "cpu.yaml").write_text("stack: {frameworks: ['torch==2.13.0+cpu']}\ninstall: {lock_closure: never}\n")
    cpu = _plan("--local", "-c", "cpu.yaml", "--out", "run3", "--lock-out", "l3", "--json", cwd=tmp_path)
    assert cpu.returncode == 0, cpu.stderr
    [host] = json.loads(cpu.stdout)["hosts"]
    assert host["notes"] == ["no NVIDIA GPU found on this host: no driver is planned, the frameworks run on the CPU"]
    assert "preflight_require_gpu: false" in "".join(
        p.read_text() for p in (tmp_path / "run3" / "group_vars").iterdir()
    )
