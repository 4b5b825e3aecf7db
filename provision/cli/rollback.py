"""`provision rollback`: put each host back on the last lock that passed verification there.

Exit status: 0 every host rolled back and passes, 1 a host failed (apply or verification), 2 bad
input (among it: a host with no earlier passing lock, a --to the state DB does not know, a wheel
or pinned OS package version of the old lock gone from every source; all checked before any host
is changed), 130 interrupted or not confirmed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from provision.cli.options import (
    NONEMPTY,
    command_options,
    config_option,
    limit_option,
    login_options,
    reboot_controller_option,
    refuse_unasked,
    set_option,
    ssh_options,
    state_option,
    target_options,
    verbose_option,
    yes_option,
)
from provision.cli.up import RollingArgs, rolling_click_options
from provision.errors import ExitCode, signals_as_interrupt

if TYPE_CHECKING:
    from rich.console import Console

    from provision.fleet.records import UpResult
    from provision.fleet.rollback import Step


@click.command(name="rollback")
@target_options(local="Roll back the machine provision runs on.", inventory="Roll back an Ansible inventory's hosts.")
@config_option("provision.yaml: its state.path, install and verify settings, as `up` used them.")
@limit_option()
@click.option(
    "--to",
    "to",
    type=NONEMPTY,
    metavar="LOCK_HASH|RUN_ID",
    help="Go back to this lock (a hash, or the run that applied it) instead of each host's last passing one.",
)
@yes_option("Do not ask before changing hosts.")
@rolling_click_options
@set_option()
@reboot_controller_option()
@ssh_options()
@login_options()
@state_option()
@verbose_option()
@command_options
def rollback(
    *,
    local: bool,
    inventory: str | None,
    config_path: Path | None,
    limit: str | None,
    to: str | None,
    yes: bool,
    rolling: RollingArgs,
    sets: tuple[str, ...],
    reboot_controller: bool,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
    login_user: str | None,
    private_key: Path | None,
    ask_become_pass: bool,
    state_path: Path | None,
    verbosity: int,
    as_json: bool,
) -> int:
    """Re-apply, on each host, the last lock that passed verification there (from the state DB).

    For each host the lock is the one of its newest run that passed verification with a lock other
    than the one it runs now (`provision status` shows it), or the lock --to names. A host with
    none, a --to the state DB does not know, or an old lock needing a wheel or an OS package
    version that is gone from every source (named in the error), is refused (exit 2) before any
    host is changed.
    The locks are applied as `up --from-lock` applies one: exact package versions (downgrades
    allowed, holds moved back), the venv brought to the old lock's hashed closure (what a newer
    lock added is removed), then verified; the state DB and the report say "rolled back from B
    to A".

    With --rolling (the options of `up --rolling`, the same code path) each batch of hosts is
    drained through the scheduler first and resumed only when it passes.

    Exit status: 0 every host rolled back and passes, 1 a host failed, 2 bad input.
    """
    from provision.cli.up import ProgressView, _ask, apply_options, rolling_options  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cli.up's view)
    from provision.config import Config, load_config  # noqa: PLC0415 (start-up: `provision --help` loads this module, not config)
    from provision.fleet.rollback import rollback as run_rollback  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.rollback)
    from provision.fleet.up import check_options  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.up)

    refuse_unasked(yes, as_json, "rollback changes hosts", "pass --yes to go ahead without asking")
    hooks, serial = rolling_options(rolling, None)
    config = load_config(config_path) if config_path is not None else Config()
    options = apply_options(
        local=local,
        inventory=inventory,
        limit=limit,
        sets=sets,
        accept_new_host_keys=accept_new_host_keys,
        ssh_config=ssh_config,
        reboot_controller=reboot_controller,
        state_path=state_path,
        login=(login_user, private_key, ask_become_pass),
        verbosity=verbosity,
    )
    options.rolling, options.serial, options.canary = hooks, serial, rolling.canary
    check_options(options)
    view = ProgressView(as_json)

    def say(msg: str) -> None:
        sys.stderr.write(msg + "\n")

    with signals_as_interrupt(say):
        try:
            steps, result = run_rollback(
                config,
                options,
                to,
                confirm=None if yes else _ask,
                on_progress=view.update,
                on_phase=view.phase,
                on_total=view.set_total,
            )
        finally:
            view.stop()
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision rollback --help` loads this module, not cli.output)

    doc = {**result.to_json(), "rollback": [s.to_json() for s in steps]}
    emit(doc, as_json, lambda con: _human(con, steps, result))
    return int(ExitCode.OK if result.ok else ExitCode.FAILED)


def _human(con: Console, steps: list[Step], result: UpResult) -> None:
    from provision.cli.up import _human as up_table  # noqa: PLC0415 (start-up: as above)

    verdicts = {h.host: h.verdict for h in result.hosts}
    for s in steps:
        verdict = verdicts.get(s.host, "not-run")
        said = "rolled back" if verdict == "pass" else f"rollback {verdict}:"
        con.print(f"{s.host}: {said} from {s.from_hash} to {s.to_hash}", markup=False)
    up_table(con, result)
