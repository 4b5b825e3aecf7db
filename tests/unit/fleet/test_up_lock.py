"""`up --lock FILE`: a lock is applied only to the hosts it was planned for.

The locks are written by the real `plan` (--assume); the probed host is the HGX H100 Ubuntu
22.04 scenario of test_probe_facts (the real parsers over the real tools' output). What needs a
host applying is tests/integration/test_up_lock.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from provision.cli.plan import parse_assume
from provision.cli.up import refuse_stack_with_lock
from provision.config import Config
from provision.errors import BadInput
from provision.files import read_lock
from provision.fleet.planning import PlanInputs, PlanRun, _Target, check_locked, check_locked_names, plan
from provision.fleet.up import group_hash
from provision.hosts import gather
from provision.stack.drift import host_differences
from provision.stack.lock import Lock
from provision.stack.request import HostSpec, StackRequest
from tests.support.probe_fixtures import OPTIONS, hgx_ubuntu_2204


def _lock(tmp_path: Path, assume: str) -> Lock:
    where = tmp_path / assume.replace(",", "_").replace("=", "-").replace(":", "x")
    plan(
        PlanInputs(config=Config(), assume=parse_assume(assume)),
        PlanRun(out=where / "run", lock_path=where / "provision.lock"),
    )
    return read_lock(where / "provision.lock")


def _hgx(name: str = "hgx-07") -> _Target:
    return _Target(name, {}, facts=gather.facts_from_sections(hgx_ubuntu_2204(), OPTIONS))


def test_a_host_that_is_the_locked_one_gets_the_lock_unchanged(tmp_path: Path) -> None:
    locked = _lock(tmp_path, "os=ubuntu-22.04,gpu=H100-SXM:8,name=hgx-07")
    lock, notes = check_locked(locked, [_hgx()])
    [group], [mine] = lock.groups, locked.groups
    assert group.to_json() == mine.to_json() and group_hash(group) == group_hash(mine)
    assert lock.knowledge == locked.knowledge and notes == []


def test_another_os_and_gpu_is_refused_naming_the_host_and_what_differs(tmp_path: Path) -> None:
    locked = _lock(tmp_path, "os=debian-12,gpu=L4:1,name=hgx-07")
    with pytest.raises(BadInput) as err:
        check_locked(locked, [_hgx()])
    message = err.value.message
    assert message.startswith("host hgx-07 does not match lock group l4_x1_debian_12: ")
    assert "os ubuntu-22.04, locked debian-12" in message and "gpu H100-SXM, locked L4" in message
    assert "gpu count 8, locked 1" in message and "\n" not in message


def test_host_differences_compares_the_host_description(tmp_path: Path) -> None:
    [group] = _lock(tmp_path, "os=ubuntu-22.04,gpu=H100-SXM:8,name=h").groups
    assert host_differences(group, HostSpec.describe(gpu="H100-SXM", gpu_count=8, os="ubuntu-22.04")) == []
    assert host_differences(group, HostSpec.describe(gpu="H100-SXM", gpu_count=8, os="ubuntu-24.04")) == [
        "os ubuntu-24.04, locked ubuntu-22.04"
    ]
    arm = HostSpec.describe(gpu="H100-SXM", gpu_count=4, os="ubuntu-22.04", arch="aarch64")
    assert host_differences(group, arm) == ["arch aarch64, locked x86_64", "gpu count 4, locked 8"]
    cpu = HostSpec.describe(os="ubuntu-22.04")
    assert host_differences(group, cpu) == ["gpu none, locked H100-SXM", "gpu count 0, locked 8"]


def test_hosts_the_lock_does_not_name_are_refused_and_lock_hosts_not_in_the_run_are_skipped(tmp_path: Path) -> None:
    locked = _lock(tmp_path, "os=ubuntu-22.04,gpu=H100-SXM:8,name=hgx-07")
    with pytest.raises(BadInput, match="host other is not in the lock"):
        check_locked_names(locked, ["hgx-07", "other"])
    locked.groups[0].hosts.append("hgx-08")  # a fleet's lock applied to one of its hosts
    lock, notes = check_locked(locked, [_hgx()])
    assert lock.groups[0].hosts == ["hgx-07"] and notes == [
        "hgx-08: in the lock, not among the hosts of this run: skipped"
    ]


def test_a_lock_of_other_knowledge_is_applied_with_a_note(tmp_path: Path) -> None:
    locked = _lock(tmp_path, "os=ubuntu-22.04,gpu=H100-SXM:8,name=hgx-07")
    locked = replace(locked, knowledge={"version": "old", "sha256": "0" * 64})
    lock, [note] = check_locked(locked, [_hgx()])
    assert lock.knowledge == locked.knowledge  # the run's lock says what it was resolved with
    assert "knowledge old (000000000000)" in note and "applying the lock as written" in note


def test_stack_options_and_cloud_with_lock_are_refused() -> None:
    @click.command()
    @click.option("--driver")
    @click.option("--framework", "frameworks", multiple=True)
    @click.option("--cloud", is_flag=True)
    def cmd(driver: str | None, frameworks: tuple[str, ...], cloud: bool) -> None:
        given = {"driver": driver, "frameworks": list(frameworks) or None}  # as stack_options passes them
        try:
            refuse_stack_with_lock(cloud, {k: v for k, v in given.items() if v is not None})
        except BadInput as exc:
            click.echo(exc.message)
            raise SystemExit(2) from None

    runner = CliRunner()
    r = runner.invoke(cmd, ["--driver", "580", "--framework", "torch"])
    assert (
        r.exit_code == 2 and r.output == "--driver, --framework with --from-lock: the lock already decided the stack\n"
    )
    assert runner.invoke(cmd, []).exit_code == 0
    assert "with --cloud" in runner.invoke(cmd, ["--cloud"]).output


def _up(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", "up", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_up_refuses_before_contacting_any_host(tmp_path: Path) -> None:
    lock = _lock(tmp_path, "os=debian-12,gpu=L4:1,name=th1")
    (tmp_path / "lock.json").write_text(json.dumps(lock.to_json()))
    # 192.0.2.1 (TEST-NET-1) answers nothing: a refusal that needed the host would time out
    (tmp_path / "inv.ini").write_text("th1 ansible_host=192.0.2.1\nth2 ansible_host=192.0.2.2\n")
    r = _up("-i", "inv.ini", "--yes", "--from-lock", "lock.json", cwd=tmp_path)
    assert (
        r.returncode == 2
        and r.stderr == "error: host th2 is not in the lock (run provision plan again for these hosts)\n"
    )
    missing = _up("-i", "inv.ini", "--yes", "--lock", "nope.lock", cwd=tmp_path)
    assert missing.returncode == 2 and "no lock file at nope.lock" in missing.stderr
    flags = _up(
        "-i", "inv.ini", "--yes", "--from-lock", "lock.json", "--driver", "580", "--framework", "torch", cwd=tmp_path
    )
    assert flags.returncode == 2 and flags.stderr.startswith("error: --framework, --driver with --from-lock: "), (
        flags.stderr
    )
    cloud = _up("--cloud", "--yes", "--from-lock", "lock.json", cwd=tmp_path)
    assert cloud.returncode == 2 and "--from-lock with --cloud" in cloud.stderr
    assert not (tmp_path / ".provision").exists()  # no run, no state DB


def test_a_kept_driver_is_locked_and_a_host_whose_driver_moved_is_refused() -> None:
    """A stack that keeps the host's driver (driver none) was resolved against the driver the
    probe found: the lock records it, hosts with other kept drivers are other groups, and up
    --lock refuses a host whose driver is no longer that one."""
    from provision.fleet.planning import _resolve_groups

    [kept] = _resolve_groups([_hgx()], StackRequest.build(**Config().request_args({"driver": "none"})), None)
    assert kept.stack.driver is None and kept.host.kept_driver == "580.95.05"
    [planned] = _resolve_groups([_hgx()], StackRequest.build(**Config().request_args({"driver": "580"})), None)
    assert planned.stack.driver is not None and "kept_driver" not in planned.host.to_json()  # installs its own
    lock = Lock({}, [kept])
    assert check_locked(lock, [_hgx()])[0].groups[0].to_json() == kept.to_json()
    kept = replace(kept, host=replace(kept.host, kept_driver="570.195.03"))  # the host's driver moved since the plan
    with pytest.raises(BadInput) as err:
        check_locked(Lock({}, [kept]), [_hgx()])
    assert "kept driver 580.95.05, locked 570.195.03" in err.value.message
