"""preflight against faults a killed run or a drifted host leaves, on a real Debian 12 test host:
a dpkg run killed half-way (repaired with `dpkg --configure -a` before anything installs) and a
clock far from the controller's (refused, one line, nothing changed).

The clock: a test host is a container and shares the kernel's clock with the machine running the
test, so its clock cannot be set wrong. The check compares the host's `date +%s` with
preflight_controller_time when it is given (the controller's clock otherwise), and the test
gives a controller time 15 minutes off: the same comparison, the skew on the other side.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.hosts import harness
from tests.integration import roles_harness as rh

TORCH_CPU = "torch==2.13.0+cpu"
# Only preflight does anything here: the CPU stack has no driver, and the venv roles are off.
ONLY_PREFLIGHT = {"frameworks_enabled": False, "verify_frameworks": {}, "python_env_enabled": False}
PACKAGE = "provision-test-interrupted"
# the repair task's header, then its result line (a skipped task prints the header too)
REPAIRED = re.compile(r"TASK \[preflight : Run dpkg --configure -a[^\n]*\n\s*changed: ")
# A package whose postinst waits while /tmp/pv-hang exists: dpkg is killed in it, as a killed
# `provision up` (or a cut-off upgrade) kills dpkg between unpacking and configuring.
BUILD_AND_INTERRUPT = f"""set -e
d=/tmp/pv-deb; rm -rf $d; mkdir -p $d/DEBIAN
printf 'Package: {PACKAGE}\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: provision tests <t@example.invalid>\\n\
Description: postinst waits while /tmp/pv-hang exists\\n' > $d/DEBIAN/control
printf '#!/bin/sh\\nwhile [ -e /tmp/pv-hang ]; do sleep 0.2; done\\n' > $d/DEBIAN/postinst; chmod 755 $d/DEBIAN/postinst
dpkg-deb --build $d /tmp/pv.deb >/dev/null
touch /tmp/pv-hang
dpkg -i /tmp/pv.deb >/tmp/pv-dpkg.log 2>&1 &
pid=$!
for i in $(seq 200); do
  [ "$(dpkg-query -W -f '${{Status}}' {PACKAGE} 2>/dev/null)" = "install ok half-configured" ] && break; sleep 0.1
done
kill -KILL $pid; wait $pid || true
rm -f /tmp/pv-hang
dpkg-query -W -f '${{Status}}\\n' {PACKAGE}
"""


def _group(host: harness.TestHost) -> dict[str, object]:
    return rh.lock_group("faults", [host.name], os="debian-12", frameworks=[TORCH_CPU])


def test_a_dpkg_run_killed_half_way_is_finished_before_anything_installs(
    testhosts: harness.HostSet, tmp_path: Path
) -> None:
    host = testhosts.hosts[0]
    try:
        assert rh.ssh(testhosts, host, BUILD_AND_INTERRUPT).strip() == "install ok half-configured"
        # what every later apt call says until someone repairs it (apt's own words)
        apt = rh.ssh(testhosts, host, "apt-get install -s -y hello 2>&1; true")
        audit = rh.ssh(testhosts, host, "dpkg --audit 2>&1; true")
        assert "dpkg was interrupted, you must manually run 'dpkg --configure -a'" in apt or PACKAGE in audit, apt
        outcome = rh.apply(
            rh.render(tmp_path / "run", testhosts, host, _group(host), overrides=ONLY_PREFLIGHT), host.name
        )
        assert outcome.rc == 0 and outcome.failed == 0, outcome.output[-3000:]
        assert REPAIRED.search(outcome.output), outcome.output[-3000:]
        after = rh.ssh(
            testhosts,
            host,
            f"dpkg-query -W -f '${{Status}}' {PACKAGE}; echo; dpkg --audit; "
            "find /var/lib/dpkg/updates -mindepth 1 -regex '.*/[0-9]+'; apt-get check -q 2>&1 | tail -n 1",
        )
        assert after.splitlines()[0] == "install ok installed", after
        assert "interrupted" not in after and len(after.splitlines()) == 2, after
        # a second run finds nothing to repair: the repair is not a change every run reports
        again = rh.apply(tmp_path / "run", host.name)
        assert again.rc == 0 and not REPAIRED.search(again.output), again.output[-3000:]
    finally:
        rh.ssh(
            testhosts,
            host,
            f"rm -f /tmp/pv-hang; dpkg --configure -a >/dev/null 2>&1; dpkg --purge {PACKAGE} "
            ">/dev/null 2>&1; rm -rf /tmp/pv-deb /tmp/pv.deb",
            check=False,
        )


@pytest.mark.parametrize(("skew_s", "words"), [(900, "ahead of"), (-900, "behind")])
def test_a_clock_far_from_the_controllers_is_refused_before_any_change(
    testhosts: harness.HostSet, tmp_path: Path, skew_s: int, words: str
) -> None:
    host = testhosts.hosts[1]
    overrides = {**ONLY_PREFLIGHT, "preflight_controller_time": int(time.time()) - skew_s}
    before = rh.host_snapshot(testhosts, host)
    outcome = rh.apply(rh.render(tmp_path / "run", testhosts, host, _group(host), overrides=overrides), host.name)
    assert outcome.rc != 0 and outcome.failed == 1 and outcome.changed == 0, outcome.output[-2000:]
    [line] = outcome.error_lines()
    m = re.search(rf"preflight: the host's clock is (\d+) s {words} the controller's \(more than 300 s", line)
    assert m and 850 <= int(m.group(1)) <= 960, line  # 900 s, less the seconds the run took to get there
    assert "timedatectl set-ntp true" in line and "chronyc makestep" in line, line
    assert rh.host_snapshot(testhosts, host) == before


def test_a_clock_within_five_minutes_passes(testhosts: harness.HostSet, tmp_path: Path) -> None:
    host = testhosts.hosts[1]
    overrides = {**ONLY_PREFLIGHT, "preflight_controller_time": int(time.time()) + 200}
    outcome = rh.apply(rh.render(tmp_path / "run", testhosts, host, _group(host), overrides=overrides), host.name)
    assert outcome.rc == 0 and outcome.failed == 0, outcome.output[-3000:]


def test_check_mode_without_python3_apt_is_refused_in_one_line(testhosts: harness.HostSet, tmp_path: Path) -> None:
    """Seen on the GPU machine lent to this work (Ubuntu 24.04 without python3-apt): `up --check`
    failed at the first apt task with Ansible's "python3-apt must be installed to use check mode".
    Here python3-apt's modules are moved aside on a real Debian 12 host for the length of the test."""
    host = testhosts.hosts[1]
    site = "/usr/lib/python3/dist-packages"
    run = rh.render(tmp_path / "run", testhosts, host, _group(host), overrides=ONLY_PREFLIGHT)
    try:
        rh.ssh(testhosts, host, f"mv {site}/apt {site}/apt.hidden")
        outcome = rh.apply(run, host.name, "--check")
        assert outcome.rc != 0 and outcome.failed == 1 and outcome.changed == 0, outcome.output[-2000:]
        [line] = outcome.error_lines()
        assert "preflight: check mode cannot tell what apt would change without python3-apt" in line, line
        assert "install python3-apt there, or run without --check" in line, line
    finally:
        rh.ssh(testhosts, host, f"test ! -d {site}/apt.hidden || mv {site}/apt.hidden {site}/apt", check=False)
    # with it back, the same check run passes
    again = rh.apply(run, host.name, "--check")
    assert again.rc == 0 and again.failed == 0, again.output[-3000:]
