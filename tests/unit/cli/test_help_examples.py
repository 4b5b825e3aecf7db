"""Every command's ``--help`` ends with real examples (issue 28), and each example parses through
the real command (its options, types and choices), without running it."""

from __future__ import annotations

import shlex

import click
import pytest
from click.testing import CliRunner

from provision.cli.app import COMMANDS, cli


def _paths() -> list[list[str]]:
    """Every command path: the group, each command, and each subcommand of a group."""
    ctx = click.Context(cli)
    paths: list[list[str]] = [[]]
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        paths.append([name])
        if isinstance(command, click.Group):
            paths += [[name, sub] for sub in command.list_commands(ctx)]
    return paths


PATHS = _paths()


def _examples(path: list[str]) -> list[list[str]]:
    r = CliRunner().invoke(cli, [*path, "--help"])
    assert r.exit_code == 0, r.output
    _, sep, tail = r.output.rpartition("\n  Examples:\n")
    assert sep, f"`provision {' '.join(path)} --help` has no Examples section"
    assert "\n\n" not in tail.rstrip("\n"), "the examples are not the end of the help"
    lines = [shlex.split(line, comments=True) for line in tail.splitlines() if line.strip()]
    assert 2 <= len(lines) <= 3, tail
    return lines


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "provision")
def test_help_ends_with_examples_that_parse(path: list[str]) -> None:
    for argv in _examples(path):
        assert argv[0] == "provision", argv
        # walk the command path as click does, then parse the rest as the command would
        command: click.Command = cli
        ctx: click.Context | None = None
        args = argv[1:]
        while isinstance(command, click.Group) and args and not args[0].startswith("-"):
            parent = click.Context(command, info_name=command.name, parent=ctx)
            sub = command.get_command(parent, args[0])
            assert sub is not None, argv
            command, ctx, args = sub, parent, args[1:]
        with command.make_context(command.name, list(args), parent=ctx) as parsed:
            assert parsed.params is not None  # parsed: every option known, every value of its type


def test_the_documented_shell_completion_works() -> None:
    """docs/index.md's bash line: click's completion script, and a completion through it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "_PROVISION_COMPLETE": "bash_source"}
    script = subprocess.run(
        [sys.executable, "-m", "provision"], env=env, capture_output=True, text=True, timeout=60
    ).stdout
    assert "_provision_completion()" in script
    env = {**os.environ, "_PROVISION_COMPLETE": "bash_complete", "COMP_WORDS": "provision up --fr", "COMP_CWORD": "2"}
    got = subprocess.run([sys.executable, "-m", "provision"], env=env, capture_output=True, text=True, timeout=60)
    assert got.stdout.split() == ["plain,--from-lock", "plain,--framework"]
