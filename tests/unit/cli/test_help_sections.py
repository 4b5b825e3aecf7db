"""`provision up --help` lists its options in sections (issue 28: 50 options in one flat list were
hard to read), and every visible option is in one: a new option cannot fall out of the help."""

from __future__ import annotations

import click
from click.testing import CliRunner

from provision.cli.app import cli
from provision.cli.up import up


def test_up_help_lists_its_options_in_sections_in_order() -> None:
    r = CliRunner().invoke(cli, ["up", "--help"])
    assert r.exit_code == 0, r.output
    titles = [line for line in r.output.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles == [
        "Targets:",
        "Stack (what to install):",
        "Install:",
        "Run:",
        "Rolling (through a scheduler):",
        "Cloud (with --cloud):",
        "Output:",
    ]
    sections = r.output.split("\n\n")
    # a few options where a user looks for them
    for title, option in (("Targets:", "-K, --ask-become-pass"), ("Run:", "-C, --check"), ("Output:", "--json")):
        [block] = [s for s in sections if s.startswith(title)]
        assert option in block, (title, block)
    assert "Other options:" not in r.output


def test_every_visible_option_of_up_is_in_a_section() -> None:
    assert up.unsectioned(click.Context(up)) == []  # type: ignore[attr-defined]
