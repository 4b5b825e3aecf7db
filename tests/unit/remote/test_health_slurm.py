"""provision-health's Slurm mode (provision/remote/health/slurm.py) against a STAND-IN ``scontrol``.

The stand-in (named as such) is a shell script that records each call's arguments, one per
tab-separated field, and answers ``show node`` from a file: the text 22.05's ``scontrol show node``
prints (its layout as the real 22.05.8 printed it on the test cluster, tests/integration/test_slurm.py). The
health program itself is real: ``python3 -m health`` run from a folder holding its FILES, as on a
host, with a spec it finds healthy (nothing expected) or unhealthy (a venv that is not there).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from provision.remote.health import SOURCES, slurm
from tests.support.health_host import PROC_VERSION

SHOW = """NodeName={name} Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.13
   AvailableFeatures=provision_verified
   ActiveFeatures=provision_verified
   Gres=(null)
   NodeAddr={name} NodeHostName={name} Version=22.05.8
   OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)
   RealMemory=1 AllocMem=0 FreeMem=1234 Sockets=2 Boards=1
   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug
   CfgTRES=cpu=2,mem=1M,billing=2
{reason}"""


def show(name: str = "sl2", state: str = "IDLE", reason: str | None = None) -> str:
    line = f"   Reason={reason} [root@2026-12-04T20:00:00]\n" if reason is not None else ""
    return SHOW.format(name=name, state=state, reason=line)


@pytest.fixture
def scontrol(tmp_path: Path) -> dict[str, Path]:
    """The recording stand-in scontrol: ``log`` gets one line per call; ``node`` is what it shows."""
    log, node = tmp_path / "scontrol.log", tmp_path / "node.txt"
    node.write_text(show())
    program = tmp_path / "scontrol"
    program.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\t" "$@" >> {log}; echo >> {log}\n'
        f'[ -n "$SCONTROL_SLEEP" ] && sleep "$SCONTROL_SLEEP"\n'
        f'case "$1" in show) cat {node} ;; update) exit 0 ;; *) echo "invalid" >&2; exit 1 ;; esac\n'
    )
    program.chmod(0o755)
    return {"program": program, "log": log, "node": node}


def calls(stand_in: dict[str, Path]) -> list[list[str]]:
    text = stand_in["log"].read_text() if stand_in["log"].exists() else ""
    return [line.rstrip("\t").split("\t") for line in text.splitlines()]


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """The program's files laid out as on a host (``<dir>/health/``), and a stand-in proc/kmsg."""
    folder = tmp_path / "lib" / "health"
    folder.mkdir(parents=True)
    for name, source in SOURCES.items():
        (folder / name).write_text(source.read_text())
    (tmp_path / "proc").mkdir()
    (tmp_path / "kmsg").write_text("6,1,100,-;Linux version 6.1.0\n")
    return tmp_path


def health(program: Path, scontrol: dict[str, Path], *, venv: str | None = None, extra: tuple[str, ...] = ()) -> Any:
    spec: dict[str, Any] = {
        "schema": "provision.health/1",
        "lock_hash": "0123456789abcdef",
        "expected": {},
        "driver": {},
        "gpus": {"count": 0},
        "python_packages": [],
        "venv": venv,
        "verify": {"verdict": "pass", "at": "2026-12-04T10:00:00+00:00", "max_age_s": None},
    }
    (program / "health.json").write_text(json.dumps(spec))
    argv = [sys.executable, "-m", "health", "--spec", str(program / "health.json"), "--slurm"]
    argv += ["--slurm-node", "sl2", "--scontrol", str(scontrol["program"]), "--state", str(program / "state.json")]
    argv += ["--proc", str(program / "proc"), "--kmsg", str(program / "kmsg"), "--nvml-library", "libnone.so", *extra]
    return subprocess.run(argv, cwd=program / "lib", capture_output=True, text=True, timeout=60, check=False)


def test_an_unhealthy_idle_node_is_drained_with_the_problem_line(program: Path, scontrol: dict[str, Path]) -> None:
    done = health(program, scontrol, venv="/nonexistent/venv")
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == ["unhealthy: venv /nonexistent/venv missing", "slurm: sl2 drained"]
    assert calls(scontrol) == [
        ["show", "node", "sl2"],
        ["update", "NodeName=sl2", "State=DRAIN", "Reason=provision-health: venv /nonexistent/venv missing"],
    ]


def test_a_healthy_node_drained_by_provision_health_is_resumed(program: Path, scontrol: dict[str, Path]) -> None:
    scontrol["node"].write_text(show(state="IDLE+DRAIN", reason="provision-health: drift torch: locked 2.13.0"))
    done = health(program, scontrol)
    assert (done.returncode, done.stdout.splitlines()) == (0, ["healthy", "slurm: sl2 resumed"]), done.stderr
    assert calls(scontrol)[1] == ["update", "NodeName=sl2", "State=RESUME"]


@pytest.mark.parametrize("reason", ["maintenance", "provision-upgrade: rolling to lock 1a2b", ""])
def test_a_drain_by_anyone_else_is_never_undone(program: Path, scontrol: dict[str, Path], reason: str) -> None:
    scontrol["node"].write_text(show(state="IDLE+DRAIN", reason=reason))
    healthy = health(program, scontrol)
    sick = health(program, scontrol, venv="/nonexistent/venv")
    assert (healthy.returncode, sick.returncode) == (0, 1)
    assert [c[0] for c in calls(scontrol)] == ["show", "show"]  # no update either time
    assert sick.stdout.splitlines()[1] == f"slurm: sl2 drained by another ({reason or 'no reason'}), left as is"


def test_its_own_drain_follows_the_problems(program: Path, scontrol: dict[str, Path]) -> None:
    scontrol["node"].write_text(show(state="MIXED+DRAIN", reason="provision-health: xid 79 on GPU 3"))
    done = health(program, scontrol, venv="/nonexistent/venv")
    assert done.stdout.splitlines()[1] == "slurm: sl2 drain reason updated"
    assert calls(scontrol)[1][-1] == "Reason=provision-health: venv /nonexistent/venv missing"
    # The same problems again: the reason is already right, nothing is written.
    scontrol["node"].write_text(show(state="MIXED+DRAIN", reason="provision-health: venv /nonexistent/venv missing"))
    again = health(program, scontrol, venv="/nonexistent/venv")
    assert again.stdout.splitlines()[1] == "slurm: sl2 unchanged" and len(calls(scontrol)) == 3


XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def xid_host(program: Path) -> Path:
    """The stand-in proc tree with the NVIDIA module loaded (so the kernel log is read), a boot id,
    and a kernel log holding one Xid 79 (NVIDIA's catalog: RESTART_BM). Returns the boot id file."""
    (program / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (program / "proc" / "driver" / "nvidia" / "version").write_text(PROC_VERSION)
    boot = program / "proc" / "sys" / "kernel" / "random" / "boot_id"
    boot.parent.mkdir(parents=True)
    boot.write_text("6a1f0c9e-0000-4000-8000-000000000001\n")
    with (program / "kmsg").open("a") as fh:
        fh.write(f"3,2,5000,-;{XID_79}\n")
    return boot


def drained_as_told(scontrol: dict[str, Path]) -> None:
    """What slurmctld would then show: the node drained with the reason the last update gave."""
    reason = calls(scontrol)[-1][-1].removeprefix("Reason=")
    scontrol["node"].write_text(show(state="IDLE+DRAIN", reason=reason))


@pytest.mark.parametrize("cleared_by", ["reboot", "--clear-xids"])
def test_an_xid_drains_and_the_node_stays_drained_until_cleared(
    program: Path, scontrol: dict[str, Path], cleared_by: str
) -> None:
    """The defect this guards: one Xid 79 drained the node for ONE run, and the next run (no new
    line in the log) resumed it with the GPU still gone."""
    boot = xid_host(program)
    first = health(program, scontrol)
    assert (first.returncode, first.stdout.splitlines()) == (
        1,
        ["unhealthy: xid 79 on PCI 0000:3b:00", "slurm: sl2 drained"],
    )
    assert calls(scontrol)[-1][-1] == "Reason=provision-health: xid 79 on PCI 0000:3b:00"
    drained_as_told(scontrol)
    for _ in range(2):  # later health checks of that boot: still unhealthy, the drain untouched
        again = health(program, scontrol)
        assert (again.returncode, again.stdout.splitlines()[1]) == (1, "slurm: sl2 unchanged"), again.stdout
    assert [c[0] for c in calls(scontrol)] == ["show", "update", "show", "show"]
    if cleared_by == "reboot":
        boot.write_text("6a1f0c9e-0000-4000-8000-000000000002\n")
        (program / "kmsg").write_text("6,1,100,-;Linux version 6.1.0\n")
    else:
        argv = [sys.executable, "-m", "health", "--clear-xids", "--state", str(program / "state.json")]
        done = subprocess.run(argv, cwd=program / "lib", capture_output=True, text=True, timeout=60, check=False)
        assert (done.returncode, done.stdout) == (0, "cleared: xid 79 on PCI 0000:3b:00\n"), done.stderr
    resumed = health(program, scontrol)
    assert (resumed.returncode, resumed.stdout.splitlines()) == (0, ["healthy", "slurm: sl2 resumed"]), resumed.stdout
    assert calls(scontrol)[-1] == ["update", "NodeName=sl2", "State=RESUME"]


def test_json_keeps_stdout_one_document(program: Path, scontrol: dict[str, Path]) -> None:
    done = health(program, scontrol, venv="/nonexistent/venv", extra=("--json",))
    assert json.loads(done.stdout)["exit"] == 1 and done.stderr.strip() == "slurm: sl2 drained"


def test_cannot_tell_changes_nothing() -> None:
    node = slurm.Node("sl2", "IDLE+DRAIN", "provision-health: venv missing")
    assert slurm.decide(node, 2, []) is None
    assert slurm.decide(slurm.Node("sl2", "IDLE", ""), 2, []) is None


def test_a_missing_scontrol_is_one_line_and_the_verdict_stays(program: Path, scontrol: dict[str, Path]) -> None:
    scontrol["program"] = program / "no-scontrol"
    done = health(program, scontrol)
    assert done.returncode == 0 and done.stdout == "healthy\n"
    assert done.stderr.splitlines() == [
        f"error: {program / 'no-scontrol'} not found (install slurm-client, or pass --scontrol)"
    ]


def test_an_scontrol_that_cannot_run_is_one_line(program: Path, scontrol: dict[str, Path]) -> None:
    not_executable = program / "scontrol-not-executable"
    not_executable.write_text("#!/bin/sh\n")
    not_executable.chmod(0o644)
    scontrol["program"] = not_executable
    done = health(program, scontrol)
    assert done.returncode == 0 and done.stdout == "healthy\n"
    assert done.stderr.splitlines() == [f"error: cannot run {not_executable}: Permission denied"]


def test_an_unknown_node_is_one_line(program: Path, scontrol: dict[str, Path]) -> None:
    scontrol["node"].write_text(show(name="sl9"))
    done = health(program, scontrol)
    assert done.stderr.strip() == "error: scontrol show node sl2: no such node (pass --slurm-node NAME)"
    assert [c[0] for c in calls(scontrol)] == ["show"]


def test_a_hung_scontrol_is_cut_off(scontrol: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCONTROL_SLEEP", "30")
    started = time.monotonic()
    with pytest.raises(slurm.SlurmError, match=r"^scontrol show took over 0.5 s \(is slurmctld up\?\)$"):
        slurm.reconcile(1, ["x"], "sl2", str(scontrol["program"]), timeout=0.5)
    assert time.monotonic() - started < 5


def test_the_node_text_is_read_with_its_reason_whole() -> None:
    fields = slurm.parse_node(
        show(state="DOWN+DRAIN", reason="provision-health: drift torch: locked 2.13.0, found none")
    )
    assert fields["NodeName"] == "sl2" and fields["State"] == "DOWN+DRAIN"
    assert fields["Reason"] == "provision-health: drift torch: locked 2.13.0, found none"
    assert fields["CfgTRES"] == "cpu=2,mem=1M,billing=2"  # '=' inside a value stays in the value
    assert slurm.Node("sl2", fields["State"], fields["Reason"]).drained


def test_the_node_name_comes_from_the_option_then_slurmd_then_the_short_host_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert slurm.node_name("gpu7", {"SLURMD_NODENAME": "sl2"}) == "gpu7"
    assert slurm.node_name(None, {"SLURMD_NODENAME": "sl2"}) == "sl2"
    monkeypatch.setattr("socket.gethostname", lambda: "sl3.cluster.example")
    assert slurm.node_name(None, {}) == "sl3"
