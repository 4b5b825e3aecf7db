"""Hostile YAML and JSON a user hands provision are bad input, answered fast (issue 25).

A nine-line alias bomb in an inventory spun the controller (the inventory walk visited the 9**8
groups the aliases stand for); a deeply nested provision.yaml or lock was an internal error
(RecursionError, exit 1). Each is now exit 2 in one line, through the real CLI, in well under a
second (each test asserts a generous bound and reports the time it measured).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.files import MAX_DEPTH, load_yaml
from tests.cli_run import provision

# this machine's run lock: one such test at a time across xdist workers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("this_machine")

ASSUME = ("--assume", "os=debian-12,gpu=L4:1,name=h1")
NAMES = "abcdefghi"


def _children_bomb(levels: int) -> str:
    """Each group has nine children that are all the group below: 9**levels groups to walk."""
    lines = ["l0: &l0 {hosts: {h1: {ansible_host: 127.0.0.1}}}"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} {{children: {{" + ", ".join(f"{n}: *l{i - 1}" for n in NAMES) + "}}")
    return "\n".join(lines) + "\n"


def _vars_bomb() -> str:
    """The classic billion laughs, as a group's vars."""
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _timed(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    r = provision(*args, cwd=cwd, timeout=30, offline=True)  # before the fix: killed at 30 s
    return r, time.monotonic() - started


def _bad_input(r: subprocess.CompletedProcess[str], seconds: float, *words: str) -> None:
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in r.stderr and "internal error" not in line
    assert all(w in line for w in words), line
    # the process as a whole (interpreter start included); measured about 0.2-0.5 s on the
    # shared 2-core machine, so 10 s only catches a spin, not a loaded machine
    assert seconds < 10, f"{seconds:.1f} s"
    print(f"exit 2 after {seconds:.2f} s: {line}")


def test_a_nine_line_alias_bomb_inventory_is_bad_input_at_once(tmp_path: Path) -> None:
    (tmp_path / "bomb.yml").write_text(_children_bomb(8))
    assert len((tmp_path / "bomb.yml").read_text().splitlines()) == 9
    r, seconds = _timed("probe", "-i", "bomb.yml", "--json", cwd=tmp_path)
    _bad_input(r, seconds, "inventory bomb.yml", "aliases expand to", "alias bomb")
    assert json.loads(r.stdout)["error"]["code"] == "bad_input"


def test_an_alias_bomb_in_a_folder_inventorys_group_vars_is_bad_input(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n")
    (inv / "group_vars" / "all.yml").write_text(_vars_bomb())
    r, seconds = _timed("plan", "-i", "inv", *ASSUME, "--out", "run", cwd=tmp_path)
    _bad_input(r, seconds, f"vars file {Path('inv/group_vars/all.yml')}", "aliases expand to")
    assert not (tmp_path / "run").exists() and not (tmp_path / "provision.lock").exists()


def test_a_deeply_nested_config_is_bad_input_not_an_internal_error(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml").write_text("stack: " + "[" * 5000 + "]" * 5000 + "\n")
    r, seconds = _timed("plan", "-c", "provision.yaml", *ASSUME, "--out", "run", cwd=tmp_path)
    _bad_input(r, seconds, "provision.yaml nests deeper than 100 levels")


def test_a_deeply_nested_block_config_is_bad_input(tmp_path: Path) -> None:
    """Block nesting, under libyaml's own limit of 1000: the composer's count refuses it."""
    text = "".join("  " * i + "a:\n" for i in range(300))
    (tmp_path / "provision.yaml").write_text(text)
    r, seconds = _timed("plan", "-c", "provision.yaml", *ASSUME, "--out", "run", cwd=tmp_path)
    _bad_input(r, seconds, "provision.yaml nests deeper than 100 levels")


def test_a_deeply_nested_lock_is_bad_input_not_an_internal_error(tmp_path: Path) -> None:
    (tmp_path / "deep.lock").write_text("[" * 100_000 + "]" * 100_000)
    r, seconds = _timed("verify", "--lock", "deep.lock", "--local", cwd=tmp_path)
    _bad_input(r, seconds, "deep.lock nests too deep to be a lock")


def test_a_set_value_that_is_an_alias_bomb_is_bad_input(tmp_path: Path) -> None:
    bomb = "{" + ", ".join(_vars_bomb().splitlines()) + "}"
    r, seconds = _timed("plan", *ASSUME, "--out", "run", "--set", f"nvidia_driver_x={bomb}", cwd=tmp_path)
    _bad_input(r, seconds, "--set nvidia_driver_x", "aliases expand to")


def test_an_alias_inside_its_own_anchor_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "provision.yaml").write_text("stack: &s {frameworks: [*s]}\n")
    r, seconds = _timed("plan", "-c", "provision.yaml", *ASSUME, "--out", "run", cwd=tmp_path)
    _bad_input(r, seconds, "alias inside its own anchor")


def test_ordinary_anchors_still_load() -> None:
    """Anchors as inventories use them (shared vars merged into a thousand hosts) are far under
    the bound: what the aliases add here is 1000 hosts x 4 keys and values x 2."""
    hosts = "".join(f"    h{i}: {{<<: *defaults, ansible_host: 10.0.{i // 256}.{i % 256}}}\n" for i in range(1000))
    text = "all:\n  vars:\n    defaults: &defaults {ansible_user: deploy, ansible_port: 22}\n  hosts:\n" + hosts
    data = load_yaml(text, "inventory")
    assert data["all"]["hosts"]["h999"] == {"ansible_user": "deploy", "ansible_port": 22, "ansible_host": "10.0.3.231"}


def test_the_bounds_hold_on_the_pure_python_parser_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where PyYAML has no libyaml, the same loader is built on its Python parser."""
    import yaml

    from provision import files

    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    files._bounded_loader.cache_clear()
    try:
        assert files._bounded_loader().__mro__[1] is yaml.SafeLoader
        with pytest.raises(BadInput, match=f"nests deeper than {MAX_DEPTH} levels"):
            load_yaml("x: " + "[" * 5000 + "]" * 5000, "deep.yaml")
        with pytest.raises(BadInput, match="aliases expand to"):
            load_yaml(_vars_bomb(), "bomb.yml")
        assert load_yaml("a: &a [1]\nb: *a\n", "ok.yml") == {"a": [1], "b": [1]}
    finally:
        files._bounded_loader.cache_clear()


def test_the_alias_bound_is_what_aliases_add_not_the_documents_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large document written out is as costly as it is long, so it is read; aliases alone may
    add at most MAX_ALIASED values (lowered here to 1000, so the documents stay small)."""
    from provision import files

    monkeypatch.setattr(files, "MAX_ALIASED", 1000)
    written = "[" + ", ".join(["x"] * 1010) + "]"
    assert len(load_yaml(written, "big.yml")) == 1010
    at_bound = "a: &a [" + ", ".join(["x"] * 99) + "]\nb: [" + ", ".join(["*a"] * 10) + "]\n"
    assert len(load_yaml(at_bound, "ten.yml")["b"]) == 10  # 10 x 100 nodes through aliases: 1000
    just_over = at_bound.replace("[*a", "[*a, *a")
    with pytest.raises(BadInput, match="aliases expand to"):
        load_yaml(just_over, "many.yml")
