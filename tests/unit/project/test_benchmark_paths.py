"""Every path into the repository a benchmark names exists (issue 25).

The benchmarks are run by hand, rarely, so a file that moved breaks them silently:
benchmarks/bench_ddp.py and bench_verify.py ran ``REPO / "provision" / "smoke" / "job.py"`` long
after the job moved to provision/remote/smoke/. Two ways a benchmark names a path are read: text
(docstrings, comments, shell scripts, the README: ``provision/remote/smoke/job.py``,
``$ROOT/benchmarks/tune_gpu.sh``) and Python's path arithmetic (``REPO / "provision" / ...``,
``os.path.join(REPO, "provision", ...)``), whose parts no text search sees as one path.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BENCHMARKS = REPO / "benchmarks"
# the repository's top-level folders: a path starting with one of these is a path into the repo
TOP = ("provision", "benchmarks", "tests", "playbooks", "templates", "docs", "examples", "inventory")
# what the benchmarks write (.gitignore: benchmarks/results/*.json), not what they read
OUTPUTS = "benchmarks/results"

# A path in text: at the start, after a space, quote, bracket, `=`, `:` or `,`, or after a shell
# variable (`$ROOT/`, `${root}/`); not inside another path (`~/.cache/provision/...`).
_PREFIX = r"""(?:^|[\s"'`(\[=:,]|\$\{?\w+\}?/)"""
_TEXT_PATH = re.compile(_PREFIX + "((?:" + "|".join(TOP) + r")(?:/[\w.*-]+)+)", re.M)


def _text_paths(text: str) -> set[str]:
    return {m.rstrip("./") for m in _TEXT_PATH.findall(text)}  # a sentence's full stop is not part of it


def _joined(node: ast.AST) -> list[str] | None:
    """The string parts of ``a / "b" / "c"`` or ``os.path.join(a, "b", "c")`` (None if not such)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        if not (isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)):
            return None
        return [*(_joined(node.left) or []), node.right.value]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) > 1
        and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args[1:])
    ):
        return [str(a.value) for a in node.args[1:] if isinstance(a, ast.Constant)]
    return None


def _code_paths(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        parts = _joined(node)
        if parts and parts[0] in TOP:
            found.add("/".join(parts))
    # `a / "b" / "c"` is also `a / "b"` inside it: the whole path is the one named
    return {p for p in found if not any(q.startswith(p + "/") for q in found)}


def named_paths(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    found = _text_paths(text)
    if path.suffix == ".py":
        found |= _code_paths(text)
    return {p for p in found if not (p == OUTPUTS or p.startswith(OUTPUTS + "/"))}


def _missing(path: Path) -> list[str]:
    return sorted(p for p in named_paths(path) if not any(REPO.glob(p)))


def test_every_path_a_benchmark_names_exists() -> None:
    files = sorted(p for p in BENCHMARKS.iterdir() if p.is_file())
    assert any(p.name == "bench_ddp.py" for p in files)
    missing = {p.name: m for p in files if (m := _missing(p))}
    assert missing == {}, "benchmarks name paths that are not in the repository"


def test_the_reader_sees_the_ways_benchmarks_name_paths() -> None:
    """The check is only as good as what it reads: the job path as bench_ddp.py wrote it before
    the fix (path arithmetic), a shell variable's path, a docstring's, and an output's (skipped)."""
    source = '''
"""Runs ``python provision/remote/smoke/job.py``; writes benchmarks/results/ddp.json."""
import os
REPO = None
JOB = REPO / "provision" / "smoke" / "job.py"
OTHER = os.path.join(REPO, "tests", "cli_run.py")
CACHE = "~/.cache/provision/pypi/x.json"
'''
    assert _code_paths(source) == {"provision/smoke/job.py", "tests/cli_run.py"}
    assert _text_paths(source) == {"provision/remote/smoke/job.py", "benchmarks/results/ddp.json"}
    assert _text_paths('JOB=$ROOT/provision/remote/smoke/job.py\nbash "${root}/benchmarks/tune_gpu.sh"') == {
        "provision/remote/smoke/job.py",
        "benchmarks/tune_gpu.sh",
    }
