"""``--help`` with its options in sections (targets, stack, install, run, output), for commands
with too many options to read as one list (``up`` has 50).

click prints one flat "Options:" list; :class:`SectionedCommand` prints one list per section, in
the order given, from a table of option names (click's parameter names) to sections. Every
visible option must be in the table (a test checks it), so a new option cannot fall out of the
help unnoticed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

Sections = Sequence[tuple[str, Sequence[str]]]

HELP = "help"  # click's help option, whatever click names it inside (its name varies by version)
# Option blocks of cli/options.py and cli/cloud.py, by click's parameter names: the options every
# command has (command_options) and click's own --help; ssh_options; stack_options; launch_options.
OUTPUT: tuple[str, ...] = ("as_json", "debug", HELP)
SSH: tuple[str, ...] = ("ssh_config", "accept_new_host_keys")
STACK: tuple[str, ...] = (
    "frameworks",
    "driver",
    "allow_unknown_driver",
    "kernel_modules",
    "cuda_toolkit",
    "cudnn",
    "python",
)
STACK += ("torch_index", "torch_variant")
LAUNCH: tuple[str, ...] = (
    "instance_type",
    "gpu",
    "gpus",
    "count",
    "region",
    "spot",
    "on_demand_fallback",
    "ttl",
    "ssh_cidr",
)
LAUNCH += ("ssh_key", "new_key", "ami", "os_name", "base", "root_gib", "max_hourly_usd", "ssh_address")


class SectionedCommand(click.Command):
    """A command whose help lists its options under the titles of ``sections``."""

    def __init__(self, *args: Any, sections: Sections, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def _records(self, ctx: click.Context) -> dict[str, tuple[str, str]]:
        """Each visible option's help line, by its parameter name (:data:`HELP` for --help)."""
        help_option = self.get_help_option(ctx)
        records = {}
        for p in self.get_params(ctx):
            record = p.get_help_record(ctx)
            if record is not None:
                records[HELP if p is help_option else p.name or ""] = record
        return records

    def unsectioned(self, ctx: click.Context) -> list[str]:
        """The visible options no section names (none, where the table is complete)."""
        named = {name for _, names in self.sections for name in names}
        return [name for name in self._records(ctx) if name not in named]

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = self._records(ctx)
        for title, names in self.sections:
            rows = [r for r in (records.get(n) for n in names) if r is not None]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [records[name] for name in self.unsectioned(ctx)]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)
