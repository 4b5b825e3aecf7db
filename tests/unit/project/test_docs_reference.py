"""The generated reference pages (docs/_hooks/refdocs) against the code and real outputs.

The pages are built from the code's own tables where it has them; where a page describes keys by
hand (the lock, the JSON documents), these tests hold the descriptions to what real commands
write: a lock from `provision plan --assume`, `provision probe --local`, the smoke job's report.
The whole site is built by test_docs_site.py (slow).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from provision.errors import BadInput
from tests.cli_run import provision

HOOKS = Path(__file__).resolve().parents[3] / "docs" / "_hooks"
sys.path.insert(0, str(HOOKS))

from refdocs import cli_page, config_page, exit_codes_page, json_page, lock_page  # noqa: E402


def test_every_documented_config_key_is_one_the_validator_takes() -> None:
    """config.md's table is the validator's: each key is accepted where the page puts it, and each
    choice key refuses a word outside its documented choices, naming them."""
    from provision.config import KEYS, default_of, parse_config

    for key in KEYS:
        *parents, name = key.path.split(".")
        doc: dict[str, Any] = {}
        where = doc
        for part in parents:
            where = where.setdefault(part, {})
        default = default_of(key.path)
        where[name] = {} if key.kind == "mapping" else list(default) if isinstance(default, tuple) else default
        parse_config(doc)
        if key.choices:
            where[name] = "no-such-choice"
            with pytest.raises(BadInput) as err:
                parse_config(doc)
            assert ", ".join(key.choices) in err.value.message, err.value.message
    with pytest.raises(BadInput, match="not a known key"):
        parse_config({"install": {"methd": "auto"}})


def test_the_documented_defaults_are_what_an_empty_file_gives() -> None:
    from provision.config import Config, parse_config

    text = yaml.safe_dump(config_page.defaults_document(), sort_keys=False)
    assert parse_config(yaml.safe_load(text), "x") == parse_config(None, "x") == Config(path="x")


def test_the_lock_keys_described_are_the_keys_plan_writes(tmp_path: Path) -> None:
    """Each documented key of provision.lock appears in a real lock (`plan --assume`), and the
    lock has no key the page leaves out."""
    proc = provision("plan", "--assume", "os=debian-12,gpu=L4:1,name=h1", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lock = json.loads((tmp_path / "provision.lock").read_text())
    assert list(lock) == list(lock_page.TOP)
    assert list(lock["knowledge"]) == list(lock_page.KNOWLEDGE)
    group = lock["groups"][0]
    assert list(group) == list(lock_page.GROUP)
    assert list(group["stack"]) == list(lock_page.STACK)
    assert set(group["host"]) <= set(lock_page.HOST)
    assert set(group["packages"]) == set(lock_page.PACKAGES)


def test_the_probe_document_is_as_described() -> None:
    proc = provision("probe", "--local", "--json")
    doc = json.loads(proc.stdout)
    contract = json_page.CONTRACTS["provision probe"]
    assert contract.items is not None
    key, described = contract.items
    assert set(doc) == set(contract.keys)
    assert [list(h) for h in doc[key]] == [list(described)]


def test_the_verify_report_is_as_described() -> None:
    """The smoke job's report over a recorded H200 run (tests/support/smoke_records.py), and
    the document of a host that could not be verified at all, hold exactly the described keys."""
    from provision.fleet.verify import HostResult
    from provision.remote.smoke.job import build_report
    from tests.support.smoke_records import LOCKED, REFS, h200_record

    report = build_report(h200_record(), REFS, LOCKED, argparse.Namespace(allow_cpu=False), time.monotonic())
    failed = HostResult("h1", error=BadInput("no venv", "install it")).to_json()
    described = set(json_page.VERIFY_REPORT)
    assert set(report) | {"error"} == described
    assert set(failed) <= described


def test_every_command_with_json_has_a_contract() -> None:
    """Walked with click itself (not the page's own walker): every command taking --json."""
    from provision.cli.app import cli

    found = []

    def walk(cmd: click.Command, ctx: click.Context) -> None:
        if any(p.name == "as_json" for p in cmd.params):
            found.append(ctx.command_path)
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(cli, click.Context(cli, info_name="provision"))
    assert len(found) > 10
    assert sorted(found) == sorted(json_page.CONTRACTS)


def test_the_exit_codes_page_names_every_code() -> None:
    from provision.errors import ExitCode

    page = exit_codes_page.page()
    for code in ExitCode:
        assert f"| `{int(code)}` | {code.name} |" in page
    for cls in exit_codes_page.error_classes():
        assert f"`{cls.__name__}`" in page and f"`{cls.code}`" in page


def test_the_up_document_is_as_described(tmp_path: Path) -> None:
    """`up --json` is UpResult.to_json (provision/cli/up.py adds `cloud` with --cloud): one host's
    run, as `up` records it, holds exactly the described keys."""
    from provision.fleet.planning import HostPlan
    from provision.fleet.records import HostRun, UpResult

    plan = HostPlan("h1", "l4_x1_debian_12", True, {}, ["driver 580.95.05"], "no")
    result = UpResult("run-1", tmp_path, False, [HostRun("h1", "l4_x1_debian_12", "0" * 64, plan, verdict="pass")])
    contract = json_page.CONTRACTS["provision up"]
    assert contract.items is not None
    doc = result.to_json()
    assert set(doc) | {"cloud"} == set(contract.keys)
    assert list(doc["hosts"][0]) == list(contract.items[1])


def test_the_cli_reference_never_breaks_an_option_name_and_shows_the_examples() -> None:
    """Each option's name is code the browser does not wrap (issue 28: `--accept-new-host-keys`
    broke at its hyphens in a narrow column), and each command's section has its --help examples."""
    text = cli_page.page()
    rows = [line for line in text.splitlines() if line.startswith(("| <code", "| `-"))]
    assert rows and all(line.startswith('| <code style="white-space: nowrap">-') for line in rows)
    for found in cli_page.commands():
        if found.command.epilog:
            assert cli_page.examples(found.command).count("$ provision ") >= 2, found.path
    assert "$ provision up --local --check --yes" in text
