"""`up`'s fleet behaviour that needs no test host: where the state DB is (config, --state,
status), hosts that cannot be probed (real refused connections on loopback), the report of a
--serial stop, and bad input found before any host is contacted."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from provision.config import parse_config
from provision.errors import BadInput, Unreachable
from provision.fleet.batch import unprobed_run
from provision.fleet.planning import HostPlan, ProbeFailure
from provision.fleet.records import NOT_RUN, PROBE_TASK, HostRun, UpResult
from provision.fleet.report import render_html
from provision.fleet.state import DEFAULT_PATH, State, state_path
from provision.model.report import UpReport
from tests.cli_run import provision

# this machine's run lock: one such test at a time across xdist workers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("this_machine")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return provision(*args, cwd=cwd)


def closed_port() -> int:
    """A loopback port where nothing listens: bound and closed again, so connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the state DB's place ---------------------------------------------------------------------


def test_state_path_in_the_config() -> None:
    assert parse_config({"state": {"path": "fleet/state.db"}}).state.path == "fleet/state.db"
    assert parse_config({}).state.path is None
    assert parse_config(None).state.path is None


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"state": {"pth": "x.db"}}, "did you mean `state.path`?"),
        ({"stat": {"path": "x.db"}}, "did you mean `state`?"),
        ({"state": {"path": 3}}, "`state.path` must be a string"),
        ({"state": {"path": " "}}, "`state.path` is empty"),
        ({"state": "x.db"}, "`state` must be a mapping"),
    ],
)
def test_bad_state_config_is_bad_input(data: dict[str, object], needle: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_config(data)
    assert needle in caught.value.one_line()


def test_state_path_precedence() -> None:
    assert state_path(Path("cli.db"), "config.db") == Path("cli.db")
    assert state_path(None, "config.db") == Path("config.db")
    assert state_path(None, "~/fleet.db") == Path.home() / "fleet.db"
    assert state_path(None, None) == DEFAULT_PATH


def test_up_uses_the_configured_state_and_state_overrides_it(tmp_path: Path) -> None:
    """Both checked through errors that come before any host is contacted: an unusable
    configured path is refused by name; with --state the run goes past the state DB (made
    at the --state path) and stops at the next check, a runs folder that cannot be made."""
    (tmp_path / "provision.yaml").write_text("state: {path: blocker/state.db}\n")
    (tmp_path / "blocker").write_text("a file, not a folder\n")
    r = run("up", "--local", "--yes", "-c", "provision.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "cannot use the state database blocker/state.db" in r.stderr, r.stderr

    (tmp_path / ".provision").mkdir()
    (tmp_path / ".provision" / "runs").write_text("a file where the runs folder goes\n")
    r = run("up", "--local", "--yes", "-c", "provision.yaml", "--state", "mine.db", cwd=tmp_path)
    assert r.returncode == 2 and "cannot make the run folder" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1
    assert (tmp_path / "mine.db").is_file()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--check-drift", "--local", "-i", "inv.ini"], "not both"),
        (["--check-drift", "-i", "inv.ini", "-F", "nope.conf"], "SSH config nope.conf not found"),
        (["-c", "nope.yaml"], "config file not found"),
    ],
)
def test_status_bad_input(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "inv.ini").write_text("a ansible_host=192.0.2.1\n")
    r = run("status", *args, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


def test_status_reads_the_state_path_of_the_config(tmp_path: Path) -> None:
    state = State(tmp_path / "fleet" / "state.db")
    state.record_applied("r1", "th1", "abc", 5)
    state.record_verdict("r1", "th1", "abc", "pass")
    state.close()
    (tmp_path / "provision.yaml").write_text("state: {path: fleet/state.db}\n")
    r = run("status", "-c", "provision.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["state"] == "fleet/state.db" and [h["host"] for h in doc["hosts"]] == ["th1"]
    assert not (tmp_path / ".provision").exists()  # the default place was not made

    r = run("status", "-c", "provision.yaml", "--state", "other.db", cwd=tmp_path)  # --state wins
    assert r.returncode == 2 and "no state database at other.db (--state)" in r.stderr, r.stderr
    (tmp_path / "missing.yaml").write_text("state: {path: nowhere/state.db}\n")
    r = run("status", "-c", "missing.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "no state database at nowhere/state.db (state.path in missing.yaml)" in r.stderr


# --- hosts that cannot be probed --------------------------------------------------------------


def _refusing_inventory(tmp_path: Path, names: list[str]) -> Path:
    port = closed_port()
    inv = tmp_path / "inv.ini"
    inv.write_text("".join(f"{n} ansible_host=127.0.0.1 ansible_port={port} ansible_user=root\n" for n in names))
    return inv


def test_plan_still_refuses_a_fleet_with_an_unprobed_host(tmp_path: Path) -> None:
    _refusing_inventory(tmp_path, ["ghost1", "ghost2"])
    r = run("plan", "-i", "inv.ini", "--out", "run", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    # every host's reason, on one line
    assert "cannot probe any of the 2 hosts: ghost1: cannot reach" in r.stderr and "ghost2: cannot reach" in r.stderr
    assert not (tmp_path / "provision.lock").exists()


def test_up_where_no_host_can_be_probed_fails_with_each_reason_and_applies_nothing(tmp_path: Path) -> None:
    _refusing_inventory(tmp_path, ["ghost1", "ghost2"])
    r = run("up", "-i", "inv.ini", "--yes", "--json", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    error = json.loads(r.stdout)["error"]
    assert error["code"] == "unreachable"
    assert "ghost1: cannot reach" in error["message"] and "ghost2: cannot reach" in error["message"]
    assert "refused" in error["message"].lower()
    # issue 28: the run keeps a report naming each host's reason (not an empty folder), and nothing
    # was applied: no Ansible apply folder, no lock applied
    [run_dir] = list((tmp_path / ".provision" / "runs").iterdir())
    assert str(run_dir / "report.html") in error["message"]
    report = json.loads((run_dir / "report.json").read_text())
    assert {d["host"]: d["failed_task"] for d in report["details"]} == {"ghost1": "(probe)", "ghost2": "(probe)"}
    assert not (run_dir / "apply").exists()


def test_an_unprobed_host_fails_alone_in_the_report() -> None:
    error = Unreachable("cannot reach root@10.200.30.99:22: timed out after 10s", "check the address")
    host = unprobed_run(ProbeFailure("ghost", error))
    assert host.to_json() == {
        "host": "ghost",
        "ok": False,
        "changed": 0,
        "failed_task": PROBE_TASK,
        "reboots": 0,
        "verdict": "fail",
        "duration_s": 0.0,
    }
    assert host.message == "cannot reach root@10.200.30.99:22: timed out after 10s (check the address)"
    page = render_html(
        UpReport.from_json(UpResult(run="r1", run_dir=Path("r1"), check=False, hosts=[host]).report_json())
    )
    assert "(probe)" in page and "timed out after 10s" in page


# --- the report of a --serial stop ------------------------------------------------------------


def test_a_serial_stop_is_in_report_json_and_html() -> None:
    def host(name: str, verdict: str, batch: int, message: str | None = None) -> HostRun:
        plan = HostPlan(name, "g", probed=True, present={}, changes=[], reboot="no")
        return HostRun(name, "g", "h", plan, verdict=verdict, batch=batch, message=message)

    result = UpResult(
        run="r1",
        run_dir=Path("r1"),
        check=False,
        stopped_after_batch=2,
        hosts=[
            host("th1", "pass", 1),
            host("th2", "fail", 2, "training: loss did not fall"),
            host("th3", NOT_RUN, 3, "not run: batch 2 did not pass (th2); --serial stopped here"),
        ],
    )
    doc = result.report_json()
    assert doc["ok"] is False and doc["stopped_after_batch"] == 2
    assert [(d["host"], d["batch"], d["verdict"]) for d in doc["details"]] == [
        ("th1", 1, "pass"),
        ("th2", 2, "fail"),
        ("th3", 3, NOT_RUN),
    ]
    page = render_html(UpReport.from_json(doc))
    assert "stopped the run after batch 2" in page and 'class="not-run"' in page
    assert "batch 2 did not pass (th2)" in page


# --- bad input before any host is contacted ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-i", "inv.ini", "-F", "nope.conf"], "SSH config nope.conf not found"),
        (["-i", "badargs.ini"], "ansible_ssh_common_args of host `a` does not parse"),
        (["--local", "--set", "nothing_role_x=1"], "is not a role variable"),
        (["--local", "--set", "frameworks_no_index=maybe"], "--set frameworks_no_index: 'maybe' is not a boolean"),
        (["-i", "inv.ini", "--limit", "a,"], "empty part"),
        (["--local", "-c", "bad-install.yaml"], "install.method"),
    ],
)
def test_up_bad_input_touches_no_host(tmp_path: Path, args: list[str], needle: str) -> None:
    """The inventory's one host is an address nobody may contact (TEST-NET-1): the run must
    stop before trying, with exit 2 and one line, and leave no run folder."""
    (tmp_path / "inv.ini").write_text("a ansible_host=192.0.2.1\n")
    (tmp_path / "badargs.ini").write_text('a ansible_host=192.0.2.1 ansible_ssh_common_args="-o \'open"\n')
    (tmp_path / "bad-install.yaml").write_text("install: {method: apt-get}\n")
    r = run("up", "--yes", *args, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert needle in r.stderr, r.stderr
    assert not (tmp_path / ".provision" / "runs").exists()


def test_a_broken_stage_leads_the_reasons_a_host_failed() -> None:
    """The job's checks as it lists them for a venv where torch cannot be imported: the version
    check fails because of the import, so the import comes first in `up`'s one-line message."""
    from provision.fleet.verify import HostResult, failures

    report = {
        "ok": False,
        "verdict": "fail",
        "checks": [
            {
                "name": "version_python",
                "ok": False,
                "message": "drift: python is not installed on this host, expected 3.11",
            },
            {"name": "cpu_matmul", "ok": True},
            {"name": "stage_import", "ok": False, "code": "error", "message": "import: torch is not importable: boom"},
        ],
    }
    assert failures(HostResult("th1", report=report)) == [
        "import: torch is not importable: boom",
        "drift: python is not installed on this host, expected 3.11",
    ]


def test_an_interrupted_run_says_so_in_the_report() -> None:
    plan = HostPlan("th1", "g", probed=True, present={}, changes=[], reboot="no")
    host = HostRun(
        "th1", "g", "h", plan, message="interrupted before this host was verified; run the same command again"
    )
    doc = UpResult(run="r1", run_dir=Path("r1"), check=False, hosts=[host], interrupted=True).report_json()
    assert doc["interrupted"] is True and doc["ok"] is False and doc["details"][0]["verdict"] == NOT_RUN
    assert "Interrupted (Ctrl-C)" in render_html(UpReport.from_json(doc))


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_during_a_run_sets_the_cancel_flag_and_the_handlers_are_restored(name: str) -> None:
    """ansible-runner polls this flag; a real SIGINT, SIGTERM or SIGHUP sets it (to its number)
    instead of raising in the runner's loop, and the handlers before it are back afterwards."""
    import os
    import signal

    from provision.ansible.apply import _signals_cancel

    sig = signal.Signals[name]
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with _signals_cancel() as cancelled:
        assert cancelled() is None
        os.kill(os.getpid(), sig)
        assert cancelled() == sig
    assert {s: signal.getsignal(s) for s in before} == before


def test_an_interruption_exits_128_plus_its_signal_also_through_clicks_abort() -> None:
    """Exit 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP (the shell's convention), also when
    click turned the KeyboardInterrupt into its Abort on the way out."""
    import signal

    import click

    from provision.errors import Interrupted, SignalInterrupt

    def through_click(exc: BaseException) -> BaseException:
        try:
            try:
                raise exc
            except KeyboardInterrupt as inner:
                raise click.Abort() from inner
        except click.Abort as outer:
            return outer

    assert Interrupted.after(KeyboardInterrupt(), "m", "h").status() == 130
    assert Interrupted.after(through_click(SignalInterrupt(signal.SIGTERM)), "m", "h").status() == 143
    assert Interrupted.after(SignalInterrupt(signal.SIGHUP), "m", "h").status() == 129
    assert Interrupted.after(SignalInterrupt(signal.SIGINT), "m", "h").status() == 130
