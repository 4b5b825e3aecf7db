"""`up --rolling slurm`: the built-in scontrol hooks through a real /bin/sh, with a stand-in
``scontrol`` (a shell script on PATH: no Slurm runs in unit tests) that logs its arguments and
prints ``show node`` lines in the form Slurm 22.05 prints them (src/api/node_info.c: "State=%s" of
node_state_string_complete(), base state then "+FLAG"s). The real scontrol against a real
slurmctld is exercised in tests/integration/test_slurm.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from provision.cli.up import RollingArgs, rolling_options
from provision.errors import BadInput
from provision.fleet.rolling import HookFailed, Rolling, slurm_hooks, upgrade_reason
from tests.cli_run import provision


@pytest.fixture
def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in scontrol on PATH: each call's arguments, one per line after a "--" line, go to
    calls.log; `show node` prints the state held in state.txt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'{{ echo --; for a in "$@"; do echo "$a"; done; }} >> {tmp_path}/calls.log\n'
        'case "$*" in\n'
        '  version) echo "slurm 22.05.8";;\n'
        f'  "-o show node "*) echo "NodeName=$4 Arch=x86_64 State=$(cat {tmp_path}/state.txt) NextState=IDLE Reason=x";;\n'
        "esac\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def logged(folder: Path) -> list[list[str]]:
    return [call.strip("\n").splitlines() for call in (folder / "calls.log").read_text().split("--\n") if call]


@pytest.mark.parametrize(
    ("state", "idle"),
    [
        ("IDLE+DRAIN", True),
        ("IDLE+DRAIN+NOT_RESPONDING", True),
        ("MIXED+DRAIN", False),
        ("ALLOCATED+DRAIN", False),
        ("IDLE+COMPLETING+DRAIN", False),
        ("DOWN+DRAIN", False),
    ],
)
def test_the_wait_reads_slurms_node_state(scontrol: Path, state: str, idle: bool) -> None:
    (scontrol / "state.txt").write_text(state)
    rolling = Rolling(slurm_hooks(None, 0.05), sleep=lambda _: None)
    if idle:
        assert rolling.wait_idle("node-1") >= 0
    else:
        with pytest.raises(HookFailed, match="still busy after --drain-timeout"):
            rolling.wait_idle("node-1")
    assert logged(scontrol)[0] == ["-o", "show", "node", "node-1"]


def test_drain_and_resume_pass_the_reason_as_one_word_also_through_a_joining_via(scontrol: Path) -> None:
    # ssh joins its arguments with spaces and the remote shell parses the result (OpenSSH ssh.c):
    # this stand-in for `ssh login1` does the same, so the reason must arrive quoted once more
    via = scontrol / "via.sh"
    via.write_text('#!/bin/sh\nexec /bin/sh -c "$*"\n')
    via.chmod(0o755)
    reason = upgrade_reason("aaa", "bbb")  # spaces and "->": split, or a redirection, if unquoted
    for through in (None, str(via)):
        (scontrol / "calls.log").unlink(missing_ok=True)
        rolling = Rolling(slurm_hooks(through, 60))
        rolling.preflight()
        rolling.drain("node-1", reason)
        rolling.resume("node-1")
        assert logged(scontrol) == [
            ["version"],
            ["update", "nodename=node-1", "state=drain", f"reason={reason}"],
            ["update", "nodename=node-1", "state=resume"],
        ]
    assert not list(scontrol.glob("bbb*")) and not (Path.cwd() / " bbb").exists()


def test_no_scontrol_is_one_bad_input_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol anywhere
    with pytest.raises(BadInput, match=r"`scontrol version` does not run here \(exit 127") as got:
        Rolling(slurm_hooks(None, 60)).preflight()
    assert "--slurm-via 'ssh HOST'" in got.value.one_line()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"drain_cmd": "x {host}"}, "--drain-cmd only with --rolling hooks"),
        ({"slurm_via": " "}, "--slurm-via is empty"),
        ({"drain_timeout": None}, "--rolling needs --drain-timeout"),
    ],
)
def test_slurm_options_misused_are_bad_input(args: dict[str, object], said: str) -> None:
    given: dict[str, object] = {"rolling": "slurm", "drain_timeout": 60.0}
    with pytest.raises(BadInput, match=said):
        rolling_options(RollingArgs(**{**given, **args}), None)  # type: ignore[arg-type]


def test_slurm_via_only_with_rolling_slurm() -> None:
    with pytest.raises(BadInput, match="--slurm-via only with --rolling slurm"):
        rolling_options(
            RollingArgs(
                "hooks",
                drain_cmd="d {host}",
                wait_idle_cmd="w {host}",
                resume_cmd="r {host}",
                drain_timeout=60.0,
                slurm_via="ssh login1",
            ),
            None,
        )
    with pytest.raises(BadInput, match="only with --rolling"):
        rolling_options(RollingArgs(slurm_via="ssh x"), None)


def test_up_and_rollback_refuse_in_one_line_before_any_host(tmp_path: Path) -> None:
    """The command lines as a user types them: a --slurm-via that does not run is bad input (exit
    2, one line, no traceback) before any host is contacted; rollback takes the same options."""
    via = str(tmp_path / "no-such-ssh")
    up = provision(
        "up", "--local", "--yes", "--rolling", "slurm", "--drain-timeout", "60", "--slurm-via", via, cwd=tmp_path
    )
    assert up.returncode == 2, up.stderr
    [line] = up.stderr.strip().splitlines()
    assert f"`{via} 'scontrol version'` does not run here (exit 127" in line, line
    back = provision("rollback", "--local", "--yes", "--rolling", "slurm", cwd=tmp_path)
    assert back.returncode == 2, back.stderr
    [line] = back.stderr.strip().splitlines()
    assert "--rolling needs --drain-timeout" in line, line
