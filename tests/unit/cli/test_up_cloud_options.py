"""The launch options `cloud up` and `up --cloud` share: declared once, gathered into LaunchArgs.

No AWS here: AWS_ENDPOINT_URL points at a closed loopback port (see tests/support/cloud_cli.py), so a
command that got past its checks would fail with exit 1, not 2.
"""

from __future__ import annotations

from typing import Any

import click
import pytest

from provision.cli.cloud import launch_options
from provision.cli.cloud import up as cloud_up
from provision.cli.up import up
from provision.cloud.launcher import LaunchArgs
from tests.support.cloud_cli import offline_aws, run_cli

__all__ = ["offline_aws"]


def _options(command: click.Command) -> dict[str, tuple[Any, ...]]:
    return {
        p.name: (tuple(p.opts), p.default, getattr(p, "help", None))
        for p in command.params
        if isinstance(p, click.Option) and p.name
    }


def test_both_commands_declare_the_same_launch_options() -> None:
    launch = {f for f in LaunchArgs.__dataclass_fields__ if f != "given"}
    on_up, on_cloud_up = _options(up), _options(cloud_up)
    assert launch <= set(on_up) and launch <= set(on_cloud_up)
    for name in launch - {"keep_on_failure"}:  # each command says what it keeps on failure
        assert on_up[name] == on_cloud_up[name], name


def test_launch_args_record_what_was_typed() -> None:
    seen: list[LaunchArgs] = []

    @click.command()
    @launch_options
    def probe_launch(*, launch: LaunchArgs) -> None:
        seen.append(launch)

    probe_launch.main(["--count", "1", "--os", "debian-12", "--gpu", "L4"], standalone_mode=False)
    [args] = seen
    assert args.given == {"count", "os_name", "gpu"}  # --count 1 is the default, but it was typed
    assert (args.count, args.os_name, args.gpu, args.ttl, args.base) == (1, "debian-12", "L4", "8h", "os")


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--ttl", "8h"], "--ttl"),
        (["--os", "debian-12", "--spot"], "--os, --spot"),
        (["--keep-on-failure"], "--keep-on-failure"),
    ],
)
def test_a_launch_option_without_cloud_is_bad_input(
    offline_aws: None, capsys: pytest.CaptureFixture[str], extra: list[str], named: str
) -> None:
    code, _, err = run_cli(["up", "-i", "hosts.yml", "--yes", *extra], capsys)
    assert code == 2 and err == f"error: {named}: only with --cloud (add --cloud to launch instances, or drop them)\n"


def test_nothing_to_provision_names_cloud_too(offline_aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["up", "--yes"], capsys)
    assert code == 2 and "--cloud" in err
