"""How results reach the terminal: one JSON document with ``--json``, else rich text.

``--json`` promises exactly one JSON document on stdout and nothing else there, so every human
line (progress, tables, warnings) goes through :func:`console`, which writes to stdout only when
JSON is off, and diagnostics go to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def dumps(doc: Any) -> str:
    """The canonical JSON rendering (stable key order is the caller's; no NaN)."""
    return json.dumps(doc, indent=2, allow_nan=False, default=str)


def emit_json(doc: Any) -> None:
    sys.stdout.write(dumps(doc) + "\n")
    sys.stdout.flush()


def console(stderr: bool = False) -> Console:
    # rich is imported lazily: `provision --help` and `--json` paths should not pay for it.
    from rich.console import Console  # noqa: PLC0415 (rich loads only where a table or console is printed, not for --json or --help)

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def emit(doc: Any, as_json: bool, human: Callable[[Console], None]) -> None:
    """Print ``doc`` as JSON, or call ``human`` with a console for the readable form."""
    if as_json:
        emit_json(doc)
    else:
        human(console())
