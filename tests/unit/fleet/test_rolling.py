"""`up --rolling hooks`: the command templates, their quoting through a real /bin/sh, the wait for
a host to run nothing (a recording stand-in scheduler: a shell script that answers "busy" twice,
then "idle"), and the batches of --max-unavailable and --canary. The run itself (drain, apply,
verify, resume, a failed host left drained) is proven on the SSH test hosts in
tests/integration/test_up_fleet.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from provision.errors import BadInput
from provision.fleet.batch import _hand_back, _take_out, make_batches
from provision.fleet.planning import HostPlan
from provision.fleet.records import DRAIN_TASK, RESUME_TASK, HostRun
from provision.fleet.rolling import (
    UPGRADE_PREFIX,
    HookFailed,
    Hooks,
    Rolling,
    check_template,
    failed_reason,
    render,
    upgrade_reason,
)
from provision.remote.health import slurm

if TYPE_CHECKING:
    from provision.fleet.batch import BatchRun


def hooks(tmp_path: Path, timeout_s: float = 30.0) -> Hooks:
    """Hooks whose commands append what they were given to a log, one line per call; the
    wait-idle stand-in answers busy (exit 1) on its first two calls per host, then idle."""
    log = tmp_path / "calls.log"
    script = tmp_path / "scheduler.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'log={log}\nverb=$1; shift\nprintf "%s|%s\\n" "$verb" "$*" >> "$log"\n'
        'if [ "$verb" = idle ]; then\n'
        f'  n=$(grep -c "^idle|$1\\$" "$log")\n'
        '  [ "$n" -gt 2 ] || { echo "1 job running on $1"; exit 1; }\n'
        "fi\n"
    )
    script.chmod(0o755)
    return Hooks(
        drain=f"{script} drain {{host}} {{reason}}",
        resume=f"{script} resume {{host}}",
        wait_idle=f"{script} idle {{host}}",
        drain_timeout_s=timeout_s,
        poll_s=0.01,
    )


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.log").read_text().splitlines()


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("drain all", "does not name {host}"),
        ("drain {host} {hostname}", "names {hostname}"),
        ("drain {} {host}", "names {}"),
        ("drain {host", "expected '}'"),
    ],
)
def test_a_bad_template_is_bad_input(template: str, needle: str) -> None:
    with pytest.raises(BadInput, match="--drain-cmd") as caught:
        check_template("--drain-cmd", template)
    assert needle in str(caught.value)


def test_literal_braces_and_both_placeholders_are_fine() -> None:
    check_template("--drain-cmd", "kubectl get node {host} -o jsonpath='{{.spec}}' # {reason}")
    assert render("echo {{x}} {host}", "gpu01") == "echo {x} gpu01"


def test_values_reach_the_command_as_one_word_each_through_a_real_shell(tmp_path: Path) -> None:
    rolling = Rolling(hooks(tmp_path))
    reason = upgrade_reason("0123abcd", "4567ef01") + " it's $HOME; `x`"
    rolling.drain("gpu 01", reason)
    assert calls(tmp_path) == [f"drain|gpu 01 {reason}"]


def test_the_reasons_carry_the_prefix_health_never_resumes() -> None:
    assert upgrade_reason(None, "4567ef01") == "provision-upgrade: none -> 4567ef01"
    assert upgrade_reason("0123abcd", "4567ef01") == "provision-upgrade: 0123abcd -> 4567ef01"
    assert failed_reason("import: torch is not importable").startswith(f"{UPGRADE_PREFIX} verify failed: import")
    assert len(failed_reason("x" * 1000)) == 250
    # provision-health's Slurm mode resumes only a node drained with its own prefix
    for reason in (upgrade_reason("a", "b"), failed_reason("x")):
        assert not slurm.Node("gpu01", "IDLE+DRAIN", reason).ours


def test_wait_idle_asks_until_the_host_runs_nothing(tmp_path: Path) -> None:
    rolling = Rolling(hooks(tmp_path))
    rolling.wait_idle("gpu01")
    assert calls(tmp_path) == ["idle|gpu01"] * 3


def test_a_host_still_busy_at_the_timeout_fails_naming_it_and_what_the_scheduler_said(tmp_path: Path) -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    slow = Hooks(**{**hooks(tmp_path).__dict__, "drain_timeout_s": 0.015})
    rolling = Rolling(slow, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(HookFailed, match=r"gpu01: still busy after --drain-timeout 0.015 s: 1 job running on gpu01"):
        rolling.wait_idle("gpu01")
    assert calls(tmp_path) == ["idle|gpu01"] * 2  # asked, waited, asked, and no wait past the bound


def test_a_failing_command_names_host_command_and_output(tmp_path: Path) -> None:
    broken = Hooks(
        drain="echo 'no such node' >&2; exit 3 # {host}",
        resume="true {host}",
        wait_idle="true {host}",
        drain_timeout_s=5,
    )
    with pytest.raises(HookFailed, match=r"gpu01: drain failed \(exit 3\): no such node: echo"):
        Rolling(broken).drain("gpu01", "r")


def test_build_takes_the_command_line_and_refuses_what_is_missing() -> None:
    built = Hooks.build(drain="d {host} {reason}", resume="r {host}", wait_idle="w {host}", drain_timeout_s=60)
    assert (built.drain, built.drain_timeout_s) == ("d {host} {reason}", 60)
    with pytest.raises(BadInput, match="needs --resume-cmd"):
        Hooks.build(drain="d {host}", resume=None, wait_idle="w {host}", drain_timeout_s=60)
    with pytest.raises(BadInput, match="needs --drain-timeout"):
        Hooks.build(drain="d {host}", resume="r {host}", wait_idle="w {host}", drain_timeout_s=None)


def run(name: str) -> HostRun:
    plan = HostPlan(name, "g", probed=True, present={}, changes=[], reboot="no")
    return HostRun(host=name, group="g", lock_hash="h", plan=plan)


def test_batches_of_max_unavailable_after_a_canary() -> None:
    hosts = [run(f"h{i}") for i in range(6)]

    def names(batches: list[list[HostRun]]) -> list[list[str]]:
        return [[h.host for h in b] for b in batches]

    assert names(make_batches(hosts, 2, canary=1)) == [["h0"], ["h1", "h2"], ["h3", "h4"], ["h5"]]
    assert names(make_batches(hosts, 1, canary=6)) == [["h0", "h1", "h2", "h3", "h4", "h5"]]
    assert names(make_batches(hosts, 4)) == [["h0", "h1", "h2", "h3"], ["h4", "h5"]]
    assert make_batches([], 1, canary=2) == []


def test_the_shell_is_the_os_one(tmp_path: Path) -> None:
    # the hooks run with /bin/sh -c, as a user's shell line would: pipes and && work
    marker = tmp_path / "m"
    Rolling(
        Hooks(
            drain=f"echo {{host}} | tr a-z A-Z > {marker} && true {{reason}}",
            resume="true {host}",
            wait_idle="true {host}",
            drain_timeout_s=5,
        )
    ).drain("gpu", "x")
    assert marker.read_text() == "GPU\n"


class _Known:
    lock_hash = "0123abcd"


class _State:
    def host(self, name: str) -> _Known | None:
        return _Known() if name == "old" else None


@dataclass
class _Run:
    """What _take_out reads of a BatchRun: the state DB's hosts and where it says things."""

    said: list[str] = field(default_factory=list)
    state: _State = field(default_factory=_State)

    def say(self, line: str) -> None:
        self.said.append(line)


def test_a_batch_is_drained_and_waited_for_and_a_host_that_stays_busy_is_handed_back(tmp_path: Path) -> None:
    h = hooks(tmp_path, timeout_s=30.0)
    # "busy" stays busy: its wait never ends before the (tiny) timeout; "nodrain" cannot be drained
    busy = Hooks(
        drain=f"case {{host}} in nodrain) echo refused >&2; exit 1;; esac; {h.drain}",
        resume=h.resume,
        wait_idle=f"case {{host}} in busy) echo 'job 7 running'; exit 1;; esac; {h.wait_idle}",
        drain_timeout_s=0.5,
        poll_s=0.01,
    )
    hosts = [run("old"), run("busy"), run("nodrain")]
    ready = _take_out(Rolling(busy), hosts, cast("BatchRun", _Run()))
    assert [x.host for x in ready] == ["old"]
    assert (hosts[1].failed_task, hosts[1].verdict) == (DRAIN_TASK, "fail")
    assert hosts[1].message is not None and "still busy after --drain-timeout 0.5 s: job 7 running" in hosts[1].message
    assert hosts[2].failed_task == DRAIN_TASK and "refused" in (hosts[2].message or "")
    log = calls(tmp_path)
    assert log[:2] == ["drain|old provision-upgrade: 0123abcd -> h", "drain|busy provision-upgrade: none -> h"]
    assert "resume|busy" in log and "resume|old" not in log  # the busy host is handed back at once
    assert not any(line.startswith(("drain|nodrain", "idle|nodrain")) for line in log)


def test_after_the_verify_a_pass_is_resumed_a_fail_stays_drained_and_a_failed_resume_fails_the_host(
    tmp_path: Path,
) -> None:
    h = hooks(tmp_path)
    stuck = Hooks(
        drain=h.drain,
        resume=f"case {{host}} in stuck) echo 'slurmctld not answering' >&2; exit 1;; esac; {h.resume}",
        wait_idle=h.wait_idle,
        drain_timeout_s=5,
    )
    passed, failed, resumeless = run("passed"), run("failed"), run("stuck")
    passed.verdict = resumeless.verdict = "pass"
    failed.verdict, failed.message = "fail", "import: torch is not importable"
    said: list[str] = []
    _hand_back(Rolling(stuck), [passed, failed, resumeless], said.append)
    assert calls(tmp_path) == [
        "resume|passed",
        "drain|failed provision-upgrade: verify failed: import: torch is not importable",
    ]
    assert passed.failed_task is None and failed.failed_task is None
    assert (resumeless.failed_task, resumeless.verdict) == (RESUME_TASK, "fail")
    assert "slurmctld not answering" in (resumeless.message or "")
