"""reference/exit-codes.md: the exit codes and error codes from provision/errors.py."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from refdocs.md import RefDocError, code, generated, prose, run_cli, table

if TYPE_CHECKING:
    from provision.errors import ProvisionError

# A real error: the command and its exit code (bad input: an ambiguous GPU name)
EXAMPLE = ("resolve", "--gpu", "H100", "--json")


def error_classes() -> list[type[ProvisionError]]:
    """ProvisionError and every subclass, parents first."""
    from provision.errors import ProvisionError

    found: list[type[ProvisionError]] = []
    todo: list[type[ProvisionError]] = [ProvisionError]
    while todo:
        cls = todo.pop(0)
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def page() -> str:
    from provision.errors import EXIT_MEANINGS, ExitCode

    missing = [c.name for c in ExitCode if c not in EXIT_MEANINGS]
    if missing:
        raise RefDocError(f"exit-codes.md: ExitCode {', '.join(missing)} has no entry in errors.EXIT_MEANINGS")
    classes = error_classes()
    codes = {c: sorted({str(e.code) for e in classes if e.exit_code == c}) for c in ExitCode}
    with tempfile.TemporaryDirectory() as tmp:
        doc, stderr = run_cli(EXAMPLE, Path(tmp), expect_rc=int(ExitCode.BAD_INPUT))

    return "".join(
        [
            "# Exit codes\n\n",
            generated("`provision/errors.py` (`ExitCode`, `EXIT_MEANINGS` and the error classes)"),
            "Every command exits with one of these codes. A failure is one line on stderr, "
            "`error: <what> (<how to fix>)`, with no traceback unless `--debug` is given; with `--json` the "
            "same error is also the JSON document on stdout.\n\n",
            table(
                ("Exit code", "Name", "Meaning", "`error.code` in JSON"),
                [
                    (f"`{int(c)}`", c.name, prose(EXIT_MEANINGS[c]), ", ".join(f"`{x}`" for x in codes[c]))
                    for c in ExitCode
                ],
            ),
            "\nAn exception that is none of these is a bug: it is reported with `error.code` `internal`, exit 1, "
            "its traceback behind `--debug`.\n\n## Error classes\n\n",
            table(
                ("Class", "`error.code`", "Exit code", "What it is"),
                [
                    (f"`{e.__name__}`", f"`{e.code}`", f"`{int(e.exit_code)}`", prose((e.__doc__ or "").strip()))
                    for e in classes
                ],
            ),
            f"\n## The error object\n\nWith `--json`, an error is this document on stdout (`provision "
            f"{' '.join(EXAMPLE)}`, exit {int(ExitCode.BAD_INPUT)}, run while this page was built); `unsatisfiable` "
            "adds `conflicts`, the rules that fail:\n\n",
            code(json.dumps(doc, indent=2), "json"),
            "\nand on stderr:\n\n",
            code(stderr, "text"),
        ]
    )
