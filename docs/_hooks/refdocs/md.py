"""Markdown pieces the reference pages share, and running the real CLI for their examples."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# docs/_hooks/refdocs/md.py -> the repository: the pages describe this checkout's code
REPO = Path(__file__).resolve().parents[3]


class RefDocError(Exception):
    """A reference page cannot be written truthfully (an undocumented key, a failed example)."""


def cell(value: Any) -> str:
    """One table cell: pipes escaped, line breaks folded (a Markdown table row is one line)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return " ".join(text.replace("|", "\\|").split())


_SPECIAL = str.maketrans({"<": "&lt;", ">": "&gt;", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]"})


def prose(text: str) -> str:
    """Plain text (a help text, a description) as Markdown that shows it as typed: ``<run-id>``
    stays text instead of an HTML tag, ``*`` and ``_`` no emphasis; `code spans` (and a
    docstring's reST ````literals````) are kept as code."""
    parts = text.replace("``", "`").split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: nothing is a code span
        return text.translate(_SPECIAL)
    return "`".join(p if i % 2 else p.translate(_SPECIAL) for i, p in enumerate(parts))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: str, lang: str = "") -> str:
    """A fenced block long enough that no run of backticks inside closes it."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def generated(source: str) -> str:
    """The note at the top of every generated page, naming what it is generated from."""
    return (
        f'!!! note "Generated"\n    Generated from {source} on every build of the site (`make docs`), so it '
        "says what the code does: change the source, not this page.\n\n"
    )


def literal(value: Any) -> str:
    """A default value as YAML/JSON shows it (`null`, `[]`, `true`), in backticks; empty for none."""
    if value is None or value == "":
        return "`null`" if value is None else '`""`'
    if isinstance(value, tuple):
        value = list(value)
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def run_cli(args: Sequence[str], cwd: Path, expect_rc: int = 0) -> tuple[dict[str, Any], str]:
    """``python -m provision ARGS`` on this checkout: its one JSON document on stdout, and stderr.

    A real run of the command (a subprocess, as a user runs it), so an example on a page is an
    output the code produced during this build.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "provision", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != expect_rc:
        raise RefDocError(
            f"`provision {' '.join(args)}` exited {proc.returncode}, not {expect_rc}: {proc.stderr.strip()[-500:]}"
        )
    doc = json.loads(proc.stdout)
    if not isinstance(doc, dict):
        raise RefDocError(f"`provision {' '.join(args)}` printed {type(doc).__name__}, not a JSON object")
    return doc, proc.stderr


def keys_table(where: str, described: dict[str, str], actual: Iterable[str], optional: Iterable[str] = ()) -> str:
    """A table of an object's keys with their meaning, checked against a real object's keys: a
    key the code writes with no description here, or a described key the code no longer writes
    (unless ``optional``: present only in some documents), fails the build."""
    seen = list(actual)
    undocumented = [k for k in seen if k not in described]
    gone = [k for k in described if k not in seen and k not in set(optional)]
    if undocumented or gone:
        raise RefDocError(
            f"{where}: "
            + "; ".join(
                filter(
                    None,
                    [
                        f"keys with no description: {', '.join(undocumented)}" if undocumented else "",
                        f"described keys the code does not write: {', '.join(gone)}" if gone else "",
                    ],
                )
            )
            + " (update docs/_hooks/refdocs)"
        )
    return described_table(described)


def described_table(described: dict[str, str]) -> str:
    """Keys and their meanings (Markdown written in refdocs: links and code spans work)."""
    return table(("Key", "Meaning"), [(f"`{k}`", v) for k, v in described.items()])


# The host the examples plan for, with --assume (no host is contacted): an 8-GPU HGX H100 on Ubuntu.
ASSUME = "os=ubuntu-22.04,gpu=H100-SXM:8,name=gpu1"


@functools.cache
def plan_example() -> tuple[dict[str, Any], dict[str, Any]]:
    """`provision plan --assume ASSUME --json`, run once per build: its JSON document and the lock it wrote."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        doc, _ = run_cli(["plan", "--assume", ASSUME, "--lock", "provision.lock", "--out", "run", "--json"], Path(tmp))
        lock = json.loads((Path(tmp) / "provision.lock").read_text(encoding="utf-8"))
    return doc, lock
