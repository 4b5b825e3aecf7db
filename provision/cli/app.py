"""The command line: a thin layer over the command modules (one per command) and the packages they call.

Each subcommand lives in ``provision/cli/<name>.py`` and is imported only when it runs, so
``provision --help`` and ``provision resolve`` never import ansible, boto3, paramiko or torch.
This module owns the CLI contract that every command shares: exit codes, the one-line error
``error: <what> (<how to fix>)`` on stderr, the ``--json`` error object on stdout, ``--debug``
for the traceback, and ``130`` on Ctrl-C.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from provision import __version__
from provision.cli.examples import add_examples
from provision.cli.options import debug_option
from provision.errors import BadInput, ExitCode, Interrupted, ProvisionError

# name -> "module:attribute"; the order is the order of `provision --help`.
COMMANDS: dict[str, str] = {
    "up": "provision.cli.up:up",
    "plan": "provision.cli.plan:plan",
    "resolve": "provision.cli.resolve:resolve",
    "matrix": "provision.cli.matrix:matrix",
    "probe": "provision.cli.probe:probe",
    "verify": "provision.cli.verify:verify",
    "status": "provision.cli.status:status",
    "health": "provision.cli.health:health",
    "rollback": "provision.cli.rollback:rollback",
    "bundle": "provision.cli.bundle:bundle",
    "cloud": "provision.cli.cloud:cloud",
    "advise": "provision.cli.advise:advise",
    "tune": "provision.cli.tune:tune",
}


class ProvisionGroup(click.Group):
    """A group that loads subcommands lazily and reports errors per the CLI contract."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS) + [n for n in super().list_commands(ctx) if n not in COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        add_examples(command, cmd_name)
        if isinstance(command, click.Group):
            for sub_name, sub in command.commands.items():
                add_examples(sub, f"{cmd_name} {sub_name}")
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = _nearest(name, self.list_commands(ctx))
            raise BadInput(
                f"unknown command `{name}`",
                f"did you mean `{close[0]}`? see 'provision --help'" if close else "see 'provision --help'",
                suggestions=close,
            )
        return super().resolve_command(ctx, args)

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        as_json = "--json" in argv
        debug = "--debug" in argv
        try:
            rv = super().main(args=argv, prog_name=prog_name or "provision", standalone_mode=False, **extra)
        except ProvisionError as exc:
            sys.exit(_report(exc, as_json, debug))
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else "", err=as_json)
            sys.exit(ExitCode.OK)
        except click.ClickException as exc:
            sys.exit(_report(_usage_error(exc), as_json, debug))
        except (click.Abort, KeyboardInterrupt) as exc:
            interrupted = Interrupted.after(exc, "interrupted", "run the same command again to continue")
            sys.exit(_report(interrupted, as_json, debug))
        except Exception as exc:  # a bug: say so plainly, keep the traceback behind --debug
            err = ProvisionError(
                f"internal error: {type(exc).__name__}: {exc}",
                "rerun with --debug for the traceback and report it",
            )
            err.code = "internal"  # type: ignore[misc]
            sys.exit(_report(err, as_json, debug, cause=exc))
        sys.exit(rv if isinstance(rv, int) else ExitCode.OK)


def _usage_error(exc: click.ClickException) -> BadInput:
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "provision"
    return BadInput(exc.format_message(), f"see '{where} --help'")


def _nearest(word: str, choices: list[str]) -> list[str]:
    import difflib  # noqa: PLC0415 (difflib loads only for a mistyped name)

    return difflib.get_close_matches(word, choices, n=3, cutoff=0.5)


def _report(exc: ProvisionError, as_json: bool, debug: bool, cause: BaseException | None = None) -> int:
    if debug:
        shown = cause or exc
        import traceback  # noqa: PLC0415 (only for --debug: 6 ms of every start otherwise)

        traceback.print_exception(type(shown), shown, shown.__traceback__, file=sys.stderr)
    if as_json:
        from provision.cli.output import emit_json  # noqa: PLC0415 (start-up: `provision --version` loads this module, not cli.output)

        emit_json(exc.to_json())
    # The one line goes to stderr in both modes: scripts read stdout, people read stderr.
    sys.stderr.write(exc.one_line() + "\n")
    return exc.status()


@click.group(cls=ProvisionGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="provision", message="%(prog)s %(version)s")
@debug_option
def cli() -> None:
    """Turn fresh NVIDIA GPU machines into verified deep-learning hosts.

    Probe hosts, resolve a set of versions that work together (driver, CUDA, cuDNN, PyTorch /
    TensorFlow / JAX), apply them with Ansible, and prove each host with a training job.
    """


add_examples(cli, "provision")


def main() -> None:
    cli.main()
