"""The CLI contract every command shares (DESIGN.md): exit codes, one-line errors, --json error
objects, --debug tracebacks, --help/--version, and no heavy imports on the light paths."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from provision import __version__
from provision.cli.app import COMMANDS, cli
from provision.errors import BadInput, ExitCode, OperationFailed, Unsatisfiable


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=120)


def all_command_paths() -> list[list[str]]:
    paths: list[list[str]] = []
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        paths.append([name])
        if isinstance(command, click.Group):
            paths += [[name, sub] for sub in command.list_commands(ctx)]
    return paths


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"provision {__version__}"


@pytest.mark.parametrize("path", all_command_paths(), ids=" ".join)
def test_every_command_has_help_and_json(path: list[str]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output
    command = cli
    for name in path:
        command = command.get_command(click.Context(command), name)  # type: ignore[union-attr,assignment]
    if not isinstance(command, click.Group):
        assert "--json" in result.output


def test_unknown_command_is_bad_input_with_a_suggestion() -> None:
    result = run("resolv")
    assert result.returncode == ExitCode.BAD_INPUT
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: unknown command `resolv` (did you mean `resolve`? see 'provision --help')"
    ]


def test_usage_error_is_one_line_and_exit_2() -> None:
    result = run("--no-such-flag")
    assert result.returncode == ExitCode.BAD_INPUT
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--no-such-flag" in lines[0]
    assert "Traceback" not in result.stderr


def test_json_error_object_goes_to_stdout() -> None:
    result = run("nosuch", "--json")
    assert result.returncode == ExitCode.BAD_INPUT
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert doc["error"]["code"] == "bad_input"
    assert set(doc["error"]) >= {"code", "message", "hint", "suggestions"}


def test_error_line_and_json_from_error_types() -> None:
    err = Unsatisfiable(
        "torch 2.8.0 needs driver >= 525.60.13",
        "use driver 580",
        conflicts=["driver 470 < 525.60.13"],
        suggestions=[{"driver": "580"}],
    )
    assert err.one_line() == "error: torch 2.8.0 needs driver >= 525.60.13 (use driver 580)"
    assert err.exit_code == ExitCode.UNSATISFIABLE
    assert err.to_json() == {
        "ok": False,
        "error": {
            "code": "unsatisfiable",
            "message": "torch 2.8.0 needs driver >= 525.60.13",
            "hint": "use driver 580",
            "suggestions": [{"driver": "580"}],
            "conflicts": ["driver 470 < 525.60.13"],
        },
    }
    # a message with line breaks still makes exactly one line
    assert BadInput("two\nlines", "fix\nit").one_line() == "error: two lines (fix it)"
    assert OperationFailed("x").exit_code == ExitCode.FAILED


# A command module that fails in each way, registered only for these tests.
@click.command("boom")
@click.option("--kind", default="bug")
@click.option("--json", "as_json", is_flag=True)
@click.option("--debug", is_flag=True, expose_value=False)
def _boom(kind: str, as_json: bool) -> None:
    if kind == "bad":
        raise BadInput("the thing is wrong", "give a better thing")
    if kind == "interrupt":
        raise KeyboardInterrupt
    raise RuntimeError("kaput")


@pytest.fixture
def boom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "boom", f"{__name__}:_boom")


def _main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_internal_error_is_one_line_and_traceback_only_with_debug(
    boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _main(["boom"], capsys)
    assert code == ExitCode.FAILED
    assert err.splitlines() == [
        "error: internal error: RuntimeError: kaput (rerun with --debug for the traceback and report it)"
    ]
    code, _, err = _main(["boom", "--debug"], capsys)
    assert code == ExitCode.FAILED
    assert "Traceback (most recent call last)" in err and "RuntimeError: kaput" in err


def test_bad_input_from_a_command(boom: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(["boom", "--kind", "bad", "--json"], capsys)
    assert code == ExitCode.BAD_INPUT
    assert json.loads(out)["error"]["message"] == "the thing is wrong"
    assert err == "error: the thing is wrong (give a better thing)\n"


def test_interrupt_exits_130(boom: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(["boom", "--kind", "interrupt"], capsys)
    assert code == ExitCode.INTERRUPTED
    # click ends the ^C line with a newline first; then the one error line
    assert err.strip() == "error: interrupted (run the same command again to continue)"


HEAVY = ("ansible", "ansible_runner", "boto3", "botocore", "paramiko", "torch")


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_light_paths_import_nothing_heavy(args: list[str]) -> None:
    code = (
        "import sys\nfrom provision.cli.app import cli\n"
        f"try:\n    cli.main({args!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout
