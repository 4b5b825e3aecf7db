"""Placeholders for contract commands whose issue has not landed: `error: not implemented yet`, exit 2.

They accept any arguments so that a documented invocation (``provision up --local --check``)
gets this one honest line rather than a usage error about an option that will exist.
"""

from __future__ import annotations

import click

from provision.cli import command_options
from provision.errors import NotImplementedYet


def pending_command(name: str, summary: str) -> click.Command:
    @click.command(
        name=name.rsplit(maxsplit=1)[-1],
        help=f"{summary}\n\nNot implemented yet: answers exit 2.",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    @command_options
    @click.pass_context
    def command(ctx: click.Context, as_json: bool) -> None:
        raise NotImplementedYet(name)

    return command


def pending_group(name: str, summary: str, subcommands: dict[str, str]) -> click.Group:
    group = click.Group(name=name, help=summary)
    for sub, sub_summary in subcommands.items():
        group.add_command(pending_command(f"{name} {sub}", sub_summary))
    return group
