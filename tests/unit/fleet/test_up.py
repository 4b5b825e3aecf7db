"""`provision up` and `provision status` without hosts: bad input before any host is touched,
--limit patterns, the lock-group hash of the fast path, the state DB listing, and report.html."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.fleet.report import render_html
from provision.fleet.state import State
from provision.fleet.up import apply_limit, group_hash, limit_patterns
from provision.model import FrameworkPin, ResolvedHost, Stack
from provision.model.report import UpReport
from provision.stack.lock import LockGroup, PythonPackage
from tests.cli_run import provision

# this machine's run lock: one such test at a time across xdist workers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("this_machine")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return provision(*args, cwd=cwd)


# a whole --rolling hooks command line but for what a case changes (the last option wins in click)
ROLL = [
    *("up", "--local", "--yes", "--rolling", "hooks", "--drain-cmd", "true {host} {reason}"),
    *("--resume-cmd", "true {host}", "--wait-idle-cmd", "true {host}", "--drain-timeout", "60"),
]


def test_limit_patterns_and_globs() -> None:
    names = ["th1", "th2", "gpu-a", "gpu-b"]
    assert apply_limit(names, limit_patterns("gpu-*")) == ["gpu-a", "gpu-b"]
    assert apply_limit(names, limit_patterns("th2,gpu-a")) == ["th2", "gpu-a"]
    assert apply_limit(names, limit_patterns("th1:th2")) == ["th1", "th2"]
    assert apply_limit(names, limit_patterns(None)) == names
    with pytest.raises(BadInput, match="matches no host"):
        apply_limit(names, limit_patterns("nope*"))
    with pytest.raises(BadInput, match="empty part"):
        limit_patterns("th1,,th2")


def test_group_hash_ignores_which_hosts_share_the_group() -> None:
    def group(hosts: list[str], torch: str) -> LockGroup:
        host, stack = {"os": "debian-12"}, {"frameworks": {"torch": {"version": torch}}}
        return LockGroup("g", hosts, ResolvedHost.from_json(host), Stack.from_json(stack))

    assert group_hash(group(["a"], "2.13.0")) == group_hash(group(["a", "b"], "2.13.0"))
    assert group_hash(group(["a"], "2.13.0")) != group_hash(group(["a"], "2.12.0"))
    # the same torch with another wheel closure (a dependency more, or another file) is another lock
    wheel = PythonPackage("filelock", "3.20.0", "a" * 64, "https://files.example/filelock.whl", "")
    other = PythonPackage("filelock", "3.20.0", "b" * 64, "https://files.example/filelock.whl", "")
    closed = replace(group(["a"], "2.13.0"), python_packages=[wheel])
    assert group_hash(closed) not in {
        group_hash(group(["a"], "2.13.0")),
        group_hash(replace(closed, python_packages=[other])),
    }


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["up"], "nothing to provision"),
        (["up", "--local", "-i", "inv.ini", "--yes"], "not both"),
        (["up", "-i", "missing.ini", "--yes"], "missing.ini"),
        (["up", "--local"], "--yes"),  # no terminal to ask on
        (["up", "--local", "--yes", "--limit", "nothere"], "matches no host"),
        (["up", "--local", "--yes", "--serial", "0"], "--serial"),
        (["up", "--local", "--yes", "-c", "bad.yaml"], "bad.yaml"),
        (["up", "--local", "--yes", "--drain-cmd", "true {host}"], "--drain-cmd only with --rolling"),
        (["up", "--local", "--yes", "--canary", "1"], "--canary is a batch of --rolling"),
        (["up", "--local", "--yes", "--rolling", "hooks"], "needs --drain-cmd, --resume-cmd, --wait-idle-cmd"),
        ([*ROLL, "--max-unavailable", "0"], "--max-unavailable 0"),
        ([*ROLL, "--serial", "2", "--max-unavailable", "2"], "one setting"),
        ([*ROLL[:-2]], "--rolling needs --drain-timeout"),
        ([*ROLL[:-2], "--drain-timeout", "0"], "--drain-timeout 0"),
        ([*ROLL[:-2], "--drain-timeout", "nan"], "--drain-timeout nan"),
        ([*ROLL, "--serial", "0"], "--serial 0 is not a batch size"),
        (["up", "--local", "--yes", "--max-unavailable", "2"], "--max-unavailable only with --rolling"),
        ([*ROLL, "--drain-cmd", "drain {hostname}"], "names {hostname}"),
        ([*ROLL, "--resume-cmd", "resume all"], "does not name {host}"),
        (["status", "--check-drift"], "-i INVENTORY"),
        (["status", "--state", "nope.db"], "no state database"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "inv.ini").write_text("th1\n")
    (tmp_path / "bad.yaml").write_text("stack: {frameworkz: []}\n")
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    assert not (tmp_path / ".provision" / "runs").exists()  # nothing was started


def test_bad_input_with_json_is_the_error_object(tmp_path: Path) -> None:
    r = run("up", "--local", "--yes", "--limit", "x*", "--json", cwd=tmp_path)
    assert r.returncode == 2
    assert json.loads(r.stdout)["error"]["code"] == "bad_input"


def test_status_lists_the_state_db(tmp_path: Path) -> None:
    state = State(tmp_path / "state.db")
    state.record_applied("r1", "th1", "abc", 5)
    state.record_verdict("r1", "th1", "abc", "pass")
    state.record_failed("r1", "th2", "Install the pinned wheels")
    state.close()
    r = run("status", "--state", "state.db", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    [host] = json.loads(r.stdout)["hosts"]  # a host that only failed has no row of its own
    assert host["host"] == "th1" and host["verdict"] == "pass" and host["converged"] is True
    assert host["last_run"] == "r1"
    # one lock only: nothing before it, nothing to roll back to
    assert host["previous_lock_hash"] is None and host["rollback"] == {
        "possible": False,
        "lock_hash": None,
        "run": None,
    }


def test_status_shows_the_lock_before_and_whether_a_rollback_is_possible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = State(tmp_path / "state.db")
    for run_id, lock_hash, verdict in (("r1", "aaaa", "pass"), ("r2", "bbbb", "fail"), ("r3", "cccc", "pass")):
        state.keep_lock(lock_hash, "{}")
        state.record_applied(run_id, "th1", lock_hash, 5)
        state.record_verdict(run_id, "th1", lock_hash, verdict)
    state.keep_lock("dddd", "{}")
    state.record_applied("r1", "th2", "dddd", 5)
    state.record_verdict("r1", "th2", "dddd", "pass")
    state.close()
    r = run("status", "--state", "state.db", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = {h["host"]: (h["lock_hash"], h["previous_lock_hash"], h["rollback"]) for h in json.loads(r.stdout)["hosts"]}
    assert got == {
        # bbbb ran before cccc, but failed verification there: the rollback goes to aaaa
        "th1": ("cccc", "bbbb", {"possible": True, "lock_hash": "aaaa", "run": "r1"}),
        "th2": ("dddd", None, {"possible": False, "lock_hash": None, "run": None}),
    }
    monkeypatch.setenv("COLUMNS", "200")  # rich's width when not at a terminal: the table in one line a host
    table = run("status", "--state", "state.db", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    [th1] = [line.split() for line in table.stdout.splitlines() if line.strip().startswith("th1")]
    assert th1[:8] == ["th1", "│", "cccc", "│", "bbbb", "│", "to", "aaaa"], table.stdout


def test_report_html_is_self_contained_with_the_verdicts_and_plots() -> None:
    doc = {
        "ok": False,
        "run": "r1",
        "check": False,
        "details": [
            {
                "host": "th1",
                "group": "g",
                "verdict": "pass",
                "changed": 3,
                "failed_task": None,
                "reboots": 0,
                "duration_s": 12.0,
                "role_seconds": {"preflight": 2.0, "frameworks": 8.5},
                "verify": {
                    "checks": [
                        {"name": "gemm_bf16", "value": 700.0, "threshold": 592.0},
                        {"name": "copy_d2d", "value": 3900.0, "threshold": 3000.0},
                    ],
                    "training": {"loss_curve": [2.3, 1.2, 0.5], "gpu_util_series": [90, 97, 99]},
                },
            },
            {
                "host": "th2",
                "group": "g",
                "verdict": "fail",
                "changed": 1,
                "failed_task": "Install the pinned wheels",
                "reboots": 0,
                "duration_s": 3.0,
                "message": "pip <exploded>",
                "role_seconds": {},
                "verify": None,
            },
        ],
    }
    page = render_html(UpReport.from_json(doc))
    assert page.startswith("<!doctype html>") and "<script" not in page and "<link" not in page
    assert "src=" not in page  # nothing to fetch: one self-contained page, its links inside it
    assert re.findall(r'href="([^"]*)"', page) == ["#host-th1", "#host-th2"]
    assert page.count("<svg") == 5  # GEMM, GPU memory copy, loss, utilization, time per role
    assert "No data in this run for: PCIe copies" in page
    assert "Install the pinned wheels" in page and "pip &lt;exploded&gt;" in page
    assert 'class="fail"' in page and 'class="pass"' in page
    assert "Fleet cache" not in page  # no cache in this run: no section

    doc["cache"] = {
        "apt": "on",
        "wheels": {"cp311-x86_64": "on"},
        "hosts": ["th1", "th2"],
        "proxy": {"requests": 40, "hits": 28, "served_bytes": 3 * 2**20},
        "wheels_served_bytes": 2**20,
        "upstream_bytes": 2**20,
        "notes": ["th3: no tunnel (<refused>): the host fetches itself"],
    }
    page = render_html(UpReport.from_json(doc))
    assert "<h2>Fleet cache</h2>" in page and "40 / 28" in page and "4.0 MiB" in page and "1.0 MiB" in page
    assert "no tunnel (&lt;refused&gt;)" in page


def test_a_probed_local_tag_matches_the_locked_variant() -> None:
    """The fast path needs plan to see torch 2.13.0+cpu in the venv as the lock's 2.13.0 (cpu)."""
    from provision.fleet.planning import _same_framework

    assert _same_framework("2.13.0+cpu", FrameworkPin.from_json("torch", {"version": "2.13.0", "variant": "cpu"}, "t"))
    assert _same_framework("2.8.0", FrameworkPin.from_json("torch", {"version": "2.8.0", "variant": "cu128"}, "t"))
    assert not _same_framework(
        "2.13.0+cu128", FrameworkPin.from_json("torch", {"version": "2.13.0", "variant": "cpu"}, "t")
    )
    assert not _same_framework(
        "2.12.0+cpu", FrameworkPin.from_json("torch", {"version": "2.13.0", "variant": "cpu"}, "t")
    )
    assert not _same_framework(None, FrameworkPin.from_json("torch", {"version": "2.13.0"}, "t"))


def test_a_report_that_cannot_be_written_never_hides_the_error_that_stopped_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """up writes the report in a `finally`: an exception there replaced the run's own error.

    STAND-IN: the full disk is report.write_html raising ENOSPC (a real full filesystem cannot be
    made without root here); the error in flight is the Interrupted that Ctrl-C raises."""
    import errno

    from provision.errors import Interrupted
    from provision.fleet import report
    from provision.fleet.records import UpResult
    from provision.fleet.report import finish_reports

    def full_disk(doc: object, path: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(report, "write_html", full_disk)
    result = UpResult(run="20261201-080000-abcd", run_dir=tmp_path, check=False, hosts=[])
    notes: list[str] = []
    with pytest.raises(Interrupted, match="interrupted; what the run got to"):
        try:
            raise Interrupted("interrupted; what the run got to is in report.html", "run the same command again")
        finally:
            finish_reports(result, notes.append)
    assert notes == [
        f"note: the report of run 20261201-080000-abcd was not written (No space left on device: "
        f"{tmp_path / 'report.html'}); the outcome above stands, and `provision status` has it"
    ]
    assert result.report_error is not None and (tmp_path / "report.json").exists()
