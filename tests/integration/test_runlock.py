"""One run per host: the host lock (provision/hosts/runlock.py) over real SSH on the test hosts.

"The other run" is a second controller process that takes the lock with the same code `up` uses
(RunLocks), logged in as the set's sudo user 'deploy', so the holder runs through sudo as it does
for a non-root login. It is then killed (SIGKILL: no cleanup of its own runs) or stopped (SIGSTOP:
its connection stays open and silent, as a controller cut off from the network), and the test
measures when the host lets go.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ansible.roles import default_roles_path
from provision.hosts.runlock import APPLY_MARK, CLAIM_PATH, LOCK_PATH, HostBusy, RunLocks, run_lock_vars
from provision.hosts.ssh import connect
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration import up_harness as uh
from tests.support.targets import target_for

PLAYBOOK = Path(__file__).parent / "playbooks" / "reboot_lock.yml"

# The other controller: takes the lock on one host as 'deploy', says so, then waits to be killed.
OTHER = """
import sys, time
from provision.hosts.inventory import HostTarget
from provision.hosts.runlock import RunLocks
from provision.hosts.ssh import connect
name, address, key, known, heartbeat, stale = sys.argv[1:7]
target = HostTarget(name, address, user="deploy", key_file=key,
                    vars={"ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"})
locks = RunLocks("20261201-070000-0ther", connect, heartbeat_s=float(heartbeat), stale_s=float(stale))
failed = locks.take([target])
print("failed" if failed else "held", flush=True)
time.sleep(600)
"""


def _other_controller(
    hostset: harness.HostSet, host: harness.TestHost, heartbeat_s: float = 10, stale_s: float = 90
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            OTHER,
            host.name,
            host.address,
            str(hostset.key),
            str(hostset.known_hosts),
            str(heartbeat_s),
            str(stale_s),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=uh.up_env(),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def _lock_is_free(hostset: harness.HostSet, host: harness.TestHost) -> bool:
    return rh.ssh(hostset, host, f"flock -n {LOCK_PATH} true && echo free || echo held").strip() == "free"


def _wait_free(hostset: harness.HostSet, host: harness.TestHost, within_s: float) -> float:
    started = time.monotonic()
    while not _lock_is_free(hostset, host):
        assert time.monotonic() - started < within_s, f"the lock on {host.name} is still held after {within_s}s"
        time.sleep(0.5)
    return time.monotonic() - started


@pytest.fixture
def other(testhosts: harness.HostSet) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def test_a_second_run_is_refused_naming_the_first_and_a_killed_controller_lets_go(
    testhosts: harness.HostSet, other: list[subprocess.Popen[str]]
) -> None:
    host = testhosts.hosts[0]
    target = target_for(testhosts, host, "deploy")
    proc = _other_controller(testhosts, host)
    other.append(proc)
    mine = RunLocks("20261201-080000-m1ne", connect)
    try:
        failed = mine.take([target])
        [(name, error)] = failed.items()
        assert name == host.name and isinstance(error, HostBusy)
        line = error.reason()
        assert "\n" not in line
        assert line.startswith(
            f"{host.name}: another provision up holds this host: run 20261201-070000-0ther (since 20"
        )
        assert f" UTC, controller {getpass.getuser()}@{socket.gethostname()} pid {proc.pid})" in line, line
        # the holder's file names the run (what an operator finds on the host)
        assert json.loads(rh.ssh(testhosts, host, f"cat {LOCK_PATH}"))["run"] == "20261201-070000-0ther"

        os.kill(proc.pid, signal.SIGKILL)  # the other controller dies without a word
        proc.wait()
        took = _wait_free(testhosts, host, within_s=15)
        print(f"lock released {took:.1f}s after the controller was killed")
        assert mine.take([target]) == {}
        assert json.loads(rh.ssh(testhosts, host, f"cat {LOCK_PATH}"))["run"] == "20261201-080000-m1ne"
    finally:
        mine.release()
    _wait_free(testhosts, host, within_s=10)


def test_a_controller_that_goes_silent_loses_the_lock_after_the_stale_time(
    testhosts: harness.HostSet, other: list[subprocess.Popen[str]]
) -> None:
    """SIGSTOP keeps the TCP connection open and sends nothing: no end of file ever reaches the
    holder, only the missing heartbeats (1 s apart here, stale after 4 s; up: 10 s and 90 s)."""
    host = testhosts.hosts[0]
    proc = _other_controller(testhosts, host, heartbeat_s=1, stale_s=4)
    other.append(proc)
    time.sleep(6)  # heartbeats keep it: still held past the stale time
    assert not _lock_is_free(testhosts, host)
    os.kill(proc.pid, signal.SIGSTOP)
    took = _wait_free(testhosts, host, within_s=20)
    print(f"lock released {took:.1f}s after the controller went silent")
    assert took >= 2


def _marked_sleeper(hostset: harness.HostSet, host: harness.TestHost, seconds: int) -> None:
    """A process that carries the play's mark, as a killed controller's Ansible task does: started
    in its own session (setsid) so it outlives the SSH command that started it, as those do."""
    rh.ssh(hostset, host, f"{APPLY_MARK}=1 setsid sleep {seconds} </dev/null >/dev/null 2>&1 &")


def test_the_lock_waits_for_an_earlier_applys_processes_then_holds(testhosts: harness.HostSet) -> None:
    """The sleeper runs until the holder has the flock (its run is in the lock file) and has had
    time to look for marked processes; only then does the test end it, so the lock can only be
    held after it waited, however slow the connection is."""
    host = testhosts.hosts[0]
    target = target_for(testhosts, host, "deploy")
    _marked_sleeper(testhosts, host, 600)

    def end_sleeper_once_the_holder_waits() -> None:
        deadline = time.monotonic() + 120
        while "20261201-090000-wa1t" not in rh.ssh(testhosts, host, f"cat {LOCK_PATH} 2>/dev/null", check=False):
            assert time.monotonic() < deadline, "the holder never took the flock"
            time.sleep(0.2)
        time.sleep(2)  # the holder looks right after writing the file; it prints a wait line every 2 s
        rh.ssh(testhosts, host, "pkill -x sleep")

    ender = threading.Thread(target=end_sleeper_once_the_holder_waits)
    mine = RunLocks("20261201-090000-wa1t", connect)
    ender.start()
    try:
        assert mine.take([target]) == {}
        [left] = mine.waited(host.name)
        assert left.command == "sleep 600", left
    finally:
        ender.join()
        mine.release()
        rh.ssh(testhosts, host, "pkill -x sleep || true")
    _wait_free(testhosts, host, within_s=10)


def test_an_earlier_applys_process_that_outlives_the_wait_fails_the_host_naming_it(
    testhosts: harness.HostSet,
) -> None:
    host = testhosts.hosts[0]
    target = target_for(testhosts, host, "deploy")
    _marked_sleeper(testhosts, host, 120)
    mine = RunLocks("20261201-090000-l3ft", connect, leftover_s=3)
    try:
        [(name, error)] = mine.take([target]).items()
        line = error.reason()
        assert name == host.name and isinstance(error, HostBusy), line
        assert "processes of an earlier apply still run after 3s: pid " in line and "(sleep 120)" in line, line
        assert "\n" not in line
        assert _lock_is_free(testhosts, host)  # a host it did not take is left free
    finally:
        mine.release()
        rh.ssh(testhosts, host, "pkill -x sleep || true")


def test_up_on_a_host_another_run_holds_fails_that_host_alone(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path, other: list[subprocess.Popen[str]]
) -> None:
    busy, free = testhosts.hosts[0], testhosts.hosts[1]
    before = rh.host_snapshot(testhosts, busy)
    other.append(_other_controller(testhosts, busy))
    config = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)
    try:
        # only these two: the session's other hosts stay fresh for the tests after this one
        rc, doc = uh.run_up(tmp_path, uh.up_args(testhosts, config, "--limit", f"{busy.name},{free.name}"))
        assert rc == 1, doc
        by_host = {h["host"]: h for h in doc["hosts"]}
        assert by_host[busy.name]["failed_task"] == "(host lock)" and by_host[busy.name]["verdict"] == "fail"
        assert by_host[free.name]["ok"] is True, doc
        report = json.loads((tmp_path / ".provision" / "runs" / doc["run"] / "report.json").read_text())
        [detail] = [d for d in report["details"] if d["host"] == busy.name]
        assert "another provision up holds this host: run 20261201-070000-0ther" in detail["message"]
        assert rh.host_snapshot(testhosts, busy) == before  # the busy host was not touched
        assert not _lock_is_free(testhosts, busy)  # still the other run's
        assert _lock_is_free(testhosts, free)  # up let go of its own at the end
    finally:
        rh.unprovision(testhosts, [free])


def test_the_lock_holds_across_a_reboot_while_the_play_goes_on(testhosts: harness.HostSet, tmp_path: Path) -> None:
    """Issue 25: a reboot ended the holder and another run took the host while the play went on.

    The play is the driver role's own reboot tasks (reboot.yml) with the test-only switch that
    kills the holder and removes its file as a reboot does (a test host cannot reboot), then a
    marked task that goes on. Stand-in: while the "host is down" the controller's connections for
    its re-take wait (a reboot's downtime as the controller sees it), so the other run's attempts
    certainly fall into the gap; the other run's own connections are real and reach the host.
    8 of 8 attempts by another run are refused: 2 before the reboot, 3 while this run holds no
    flock (only the claim), 3 after the re-take while the play goes on.
    """
    host = testhosts.hosts[0]
    target = target_for(testhosts, host, "deploy")
    run = "20261204-080000-r3b0"
    down = threading.Event()

    def connect_after_boot(t: Any) -> Any:
        while down.is_set():
            time.sleep(0.1)
        return connect(t)

    mine = RunLocks(run, connect_after_boot, retake_s=0.5)
    attempts: list[tuple[str, str]] = []

    def other_run(phase: str) -> None:
        theirs = RunLocks("20261204-080000-0ther", connect)
        try:
            failed = theirs.take([target])
        finally:
            theirs.release()
        error = failed.get(host.name)
        attempts.append((phase, error.reason() if isinstance(error, HostBusy) else f"not refused: {error}"))

    play_dir = tmp_path / "play"
    play_dir.mkdir()
    (play_dir / "ansible.cfg").write_text(f"[defaults]\nroles_path = {default_roles_path()}\n")
    inventory = {"all": {"hosts": {host.name: rh.connection(testhosts, host)}}}
    (play_dir / "inventory.yml").write_text(yaml.safe_dump(inventory))
    extra = {"provision_run_lock": run_lock_vars(run), "provision_environment": {APPLY_MARK: run}}
    play: subprocess.Popen[str] | None = None
    try:
        assert mine.take([target]) == {}
        for _ in range(2):
            other_run("before")
        down.set()
        play = subprocess.Popen(
            [str(rh.BIN / "ansible-playbook"), "-i", "inventory.yml", "-e", json.dumps(extra), str(PLAYBOOK)],
            cwd=play_dir,
            env={**uh.up_env(), "ANSIBLE_CONFIG": str(play_dir / "ansible.cfg")},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while mine.alive(host.name):
            assert time.monotonic() < deadline and play.poll() is None, "the play never ended the holder"
            time.sleep(0.1)
        for _ in range(3):
            other_run("rebooting")
        assert not mine.alive(host.name)  # all three fell into the gap
        down.clear()
        while not mine.alive(host.name):
            assert time.monotonic() < deadline, "this run never took its lock again"
            time.sleep(0.1)
        marked = f"grep -lzx {APPLY_MARK}={run} /proc/[0-9]*/environ 2>/dev/null || true"
        while not rh.ssh(testhosts, host, marked).strip():  # the play's next task runs, marked
            assert time.monotonic() < deadline and play.poll() is None, "the play did not go on"
            time.sleep(0.2)
        for _ in range(3):
            other_run("after")
        assert play.poll() is None, "the play no longer went on during the attempts"
        out, _ = play.communicate(timeout=120)
        assert play.returncode == 0, out[-3000:]
    finally:
        if play is not None and play.poll() is None:
            play.kill()
            play.communicate()
        down.clear()
        mine.release()
    refused = [reason for _, reason in attempts]
    assert len(attempts) == 8 and not [r for r in refused if r.startswith("not refused")], attempts
    for phase, reason in attempts:
        if phase == "rebooting":
            assert "holds this host across its reboot: run 20261204-080000-r3b0" in reason, reason
        else:
            assert "another provision up holds this host: run 20261204-080000-r3b0" in reason, reason
    assert rh.ssh(testhosts, host, f"test -e {CLAIM_PATH} && echo claimed || echo gone").strip() == "gone"
    _wait_free(testhosts, host, within_s=10)


def _processes_of(folder: Path) -> dict[int, str]:
    """The processes of a run started in ``folder``: working there, or carrying it in their
    environment (ansible-playbook and its ssh children and masters: ANSIBLE_CONFIG names the run's
    ansible.cfg), by pid, with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended while we looked
            continue
        if str(folder).encode() in env or cwd.startswith(str(folder)):
            found[int(entry.name)] = cmd
    return found


SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_to_up_stops_ansible_releases_the_lock_and_writes_the_report(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """Issue 25: SIGTERM/SIGHUP killed `up` with no report and left ansible-playbook running after
    the lock was freed; Ctrl-C sometimes did the same. The signal goes to the provision process
    alone (`kill PID`, `timeout -s`, a CI runner), while its play runs (check mode: the host stays
    as it was): exit 128 + the signal, report.json says interrupted, the host lock is free and,
    5 s later, no process of the run is alive."""
    host = testhosts.hosts[0]
    config = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)
    args = uh.up_args(testhosts, config, "--check", "--limit", host.name)
    args.remove("--json")  # progress lines on stdout: the test sees the play start
    # as a terminal starts its foreground job: SIGINT at its default (test_cloud_signals.AS_FOREGROUND)
    as_foreground = [
        "-c",
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])",
    ]
    proc = subprocess.Popen(
        [sys.executable, *as_foreground, *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=uh.up_env(),
    )
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "[preflight]" in line:
                break
        running = _processes_of(tmp_path)
        assert any("ansible-playbook" in cmd for cmd in running.values()), ("".join(seen), running)
        assert not _lock_is_free(testhosts, host)  # up holds it while its check runs
        proc.send_signal(sig)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, "".join(seen) + rest + err
    assert err.strip().endswith("run the same command again to complete the hosts not verified)"), err
    assert "Traceback" not in err
    [run_dir] = (tmp_path / ".provision" / "runs").iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["interrupted"] is True and report["ok"] is False
    assert _lock_is_free(testhosts, host)
    time.sleep(5)
    assert _processes_of(tmp_path) == {}, running


def test_verify_on_a_host_another_run_holds_fails_that_host_naming_the_run(
    testhosts: harness.HostSet, tmp_path: Path, other: list[subprocess.Popen[str]]
) -> None:
    """Issue 25: `provision verify` took no lock, so its job ran beside another run's apply."""
    busy = testhosts.hosts[0]
    other.append(_other_controller(testhosts, busy))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "verify",
            "-i",
            str(testhosts.inventory),
            "-F",
            str(testhosts.ssh_config),
            "--allow-cpu",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=uh.up_env(),
        timeout=600,
    )
    assert r.returncode == 1, r.stderr[-2000:]
    by_host = {h["host"]: h for h in json.loads(r.stdout)["hosts"]}
    assert set(by_host) == {h.name for h in testhosts.hosts}
    message = by_host[busy.name]["error"]["message"]
    assert "another provision up holds this host: run 20261201-070000-0ther" in message, message
    assert not _lock_is_free(testhosts, busy)  # still the other run's
    for h in testhosts.hosts[1:]:
        assert _lock_is_free(testhosts, h)  # verify let go of its own
