"""The TTL user data (provision/cloud/hostttl.py) run for real on an SSH test host.

The test hosts are Debian 12 with systemd as PID 1 and logind, as on an EC2 instance booted
from Debian's image; /bin/sh is dash, so the script is held to POSIX sh. The script runs as
cloud-init would run it (as root, once) and the test reads what systemd-logind scheduled
(/run/systemd/shutdown/scheduled) and that the boot unit is enabled. The power-off paths that
would end the test host (expiry already past) run with a stand-in `shutdown` first on PATH that
only records its arguments, named as such below. Every test cancels and removes what it armed.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from provision.cloud.aws.hostttl import user_data
from provision.ids import new_run_id
from tests.hosts import harness
from tests.integration import roles_harness as rh

UNDO = (
    "shutdown -c 2>/dev/null; systemctl disable provision-ttl.service 2>/dev/null; "
    "rm -f /etc/systemd/system/provision-ttl.service /usr/local/sbin/provision-ttl /tmp/provision-ud.sh; "
    "rm -rf /tmp/stand-in-shutdown; systemctl daemon-reload"
)


@pytest.fixture
def host(testhosts: harness.HostSet) -> Iterator[tuple[harness.HostSet, harness.TestHost]]:
    h = testhosts.hosts[0]
    rh.ssh(testhosts, h, UNDO)
    yield testhosts, h
    rh.ssh(testhosts, h, UNDO)


def run_user_data(hs: harness.HostSet, h: harness.TestHost, script: str, env: str = "") -> None:
    rh.ssh(
        hs,
        h,
        f"printf %s {shlex.quote(script)} > /tmp/provision-ud.sh && chmod 0755 /tmp/provision-ud.sh && "
        f"{env} /tmp/provision-ud.sh",
    )


def scheduled(hs: harness.HostSet, h: harness.TestHost) -> dict[str, str]:
    text = rh.ssh(hs, h, "cat /run/systemd/shutdown/scheduled 2>/dev/null || true")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_user_data_arms_a_power_off_at_the_expiry_and_a_unit_that_rearms_it_at_boot(
    host: tuple[harness.HostSet, harness.TestHost],
) -> None:
    hs, h = host
    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=2, seconds=30)
    run_user_data(hs, h, user_data(new_run_id(), expires))
    armed = scheduled(hs, h)
    assert armed.get("MODE") == "poweroff", armed
    at = datetime.fromtimestamp(int(armed["USEC"]) / 1e6, timezone.utc)
    assert expires <= at <= expires + timedelta(seconds=61)  # whole minutes, rounded up
    assert rh.ssh(hs, h, "systemctl is-enabled provision-ttl.service").strip() == "enabled"
    # what each boot does: the unit arms the same power-off again (a scheduled shutdown is lost on reboot)
    rh.ssh(hs, h, "shutdown -c && systemctl start provision-ttl.service")
    again = scheduled(hs, h)
    assert again.get("MODE") == "poweroff" and abs(int(again["USEC"]) - int(armed["USEC"])) <= 60_000_000


def test_an_expiry_already_past_powers_off_at_once(host: tuple[harness.HostSet, harness.TestHost]) -> None:
    """A stopped instance started after its expiry: the boot unit powers it off now.

    Stand-in: `shutdown` here is a script that records its arguments (a real power-off would end
    the test host); everything else (dash, date, systemctl) is the host's own.
    """
    hs, h = host
    rh.ssh(
        hs,
        h,
        "mkdir -p /tmp/stand-in-shutdown && printf '#!/bin/sh\\necho \"$@\" >> /tmp/stand-in-shutdown/calls\\n' "
        "> /tmp/stand-in-shutdown/shutdown && chmod 0755 /tmp/stand-in-shutdown/shutdown",
    )
    run = new_run_id()
    run_user_data(
        hs,
        h,
        user_data(run, datetime.now(timezone.utc) - timedelta(minutes=5)),
        env="PATH=/tmp/stand-in-shutdown:$PATH",
    )
    (call,) = rh.ssh(hs, h, "cat /tmp/stand-in-shutdown/calls").splitlines()
    assert call.startswith("-P now provision: run " + run + " expired at ")
    assert scheduled(hs, h) == {}  # nothing real was scheduled
