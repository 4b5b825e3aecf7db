"""`provision up -i` over a fleet on the SSH test hosts: a host that cannot be probed fails alone,
and `--serial` stops at the first batch that fails verification (health-gated rolling).

Real parts throughout, as in test_up.py: SSH probes (and real refused / unreachable
connections), the resolver, ansible-runner applying the roles with the CPU torch stack from
the local wheelhouse, the smoke job over SSH; and a Ctrl-C during an apply. Needs at least 3
test hosts.
"""

from __future__ import annotations

import json
import signal
from datetime import datetime
from pathlib import Path

import pytest

from provision.fleet.state import State
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration.up_harness import run_up, up_args, up_until
from tests.support.shadow_torch import SHADOW, shadow_text

pytestmark = pytest.mark.slow  # installs torch on test hosts

SHADOW_TEXT = shadow_text("test_up_fleet")


def _hosts(testhosts: harness.HostSet, n: int) -> list[harness.TestHost]:
    assert len(testhosts.hosts) >= n, f"these tests need PROVISION_TESTHOSTS >= {n}"
    return testhosts.hosts[:n]


def _inventory(testhosts: harness.HostSet, path: Path, names: list[str], extra: list[str]) -> Path:
    """The test set's inventory, cut to ``names``, with ``extra`` host lines added."""
    lines = testhosts.inventory.read_text().splitlines()
    out: list[str] = []
    in_hosts = False
    for line in lines:
        if line.strip() == "[testhosts]":
            in_hosts = True
            out += [line, *extra]
            continue
        if line.startswith("["):
            in_hosts = False
        if in_hosts and line.strip() and line.split()[0] not in names:
            continue
        out.append(line)
    path.write_text("\n".join(out) + "\n")
    return path


def test_hosts_that_cannot_be_probed_fail_alone(testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path) -> None:
    good = _hosts(testhosts, 3)[:2]
    third = testhosts.hosts[2]
    ghost_address = f"{testhosts.net}.99"  # in the test net, no host there
    inventory = _inventory(
        testhosts,
        tmp_path / "inventory.ini",
        [h.name for h in good],
        [
            f"ghost ansible_host={ghost_address}",
            f"refused ansible_host={third.address} ansible_port=2222",  # a real host, nothing listens there
            # a real host whose key this client does not know: refused without --accept-new-host-keys
            f"stranger ansible_host={third.address} "
            "ansible_ssh_common_args='-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes'",
        ],
    )
    config = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)

    try:
        rc, doc = run_up(tmp_path, up_args(testhosts, config, inventory=inventory))
    finally:
        rh.unprovision(testhosts, good)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert rc == 1 and doc["ok"] is False, doc
    assert list(hosts) == ["ghost", "refused", "stranger", good[0].name, good[1].name]  # inventory order
    for name in ("ghost", "refused", "stranger"):
        assert hosts[name]["verdict"] == "fail" and hosts[name]["failed_task"] == "(probe)", hosts[name]
        assert hosts[name]["changed"] == 0
    for h in good:
        assert hosts[h.name]["verdict"] == "pass", hosts[h.name]

    run_dir = tmp_path / ".provision" / "runs" / doc["run"]
    details = {d["host"]: d for d in json.loads((run_dir / "report.json").read_text())["details"]}
    assert all(details[h.name]["applied"] for h in good)
    assert ghost_address in details["ghost"]["message"] and "\n" not in details["ghost"]["message"]
    assert "refused" in details["refused"]["message"].lower(), details["refused"]
    assert "unknown host key for stranger" in details["stranger"]["message"], details["stranger"]
    assert not any(details[n]["applied"] for n in ("ghost", "refused", "stranger"))
    # never handed to Ansible: not in the run's inventory, no event names them
    ansible_inventory = (run_dir / "ansible" / "inventory.yml").read_text()
    assert not any(n in ansible_inventory for n in ("ghost", "refused", "stranger"))
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    in_events = {str((e.get("event_data") or {}).get("host")) for e in events}
    assert {h.name for h in good} <= in_events and not in_events & {"ghost", "refused", "stranger"}
    page = (run_dir / "report.html").read_text()
    assert "(probe)" in page and ghost_address in page


def scheduler(tmp_path: Path) -> tuple[list[str], Path]:
    """A recording stand-in for a scheduler's drain, wait and resume commands (the generic
    `--rolling hooks` form, as kubectl or scontrol would be plugged in): each call is a line of
    its log with the time; the wait answers "busy" on its first call for a host, then "idle"."""
    log, script = tmp_path / "scheduler.log", tmp_path / "scheduler.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'log={log}\nverb=$1; shift\nprintf "%s|%s|%s\\n" "$(date +%s.%N)" "$verb" "$*" >> "$log"\n'
        f'if [ "$verb" = idle ] && [ "$(grep -c "|idle|$1\\$" "$log")" -lt 2 ]; then echo "1 job on $1"; exit 1; fi\n'
    )
    script.chmod(0o755)
    args = [
        *("--rolling", "hooks", "--max-unavailable", "1", "--drain-timeout", "120"),
        *("--drain-cmd", f"{script} drain {{host}} {{reason}}", "--resume-cmd", f"{script} resume {{host}}"),
        *("--wait-idle-cmd", f"{script} idle {{host}}"),
    ]
    return args, log


def test_a_rolling_run_stops_after_the_batch_that_fails_verification_and_leaves_that_host_drained(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    """`up --rolling hooks --max-unavailable 1` (batches of one, as --serial 1): each host is
    drained and waited for before its apply, and resumed after its verify passed; the host whose
    verify fails stays drained with the reason rewritten, and the run stops before the next batch,
    whose host is never drained nor touched."""
    first, broken, later = _hosts(testhosts, 3)
    inventory = _inventory(testhosts, tmp_path / "inventory.ini", [first.name, broken.name, later.name], [])
    config = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)
    rh.unprovision(testhosts, [first, broken, later])  # fresh hosts: nothing of an earlier test's installs
    rh.ssh(testhosts, broken, f"echo {rh.quote(SHADOW_TEXT)} > {SHADOW}")
    before = rh.host_snapshot(testhosts, later)
    rolling, log = scheduler(tmp_path)
    try:
        rc, doc = run_up(tmp_path, up_args(testhosts, config, *rolling, inventory=inventory))
    finally:
        rh.ssh(testhosts, broken, f"rm -f {SHADOW}")
        rh.unprovision(testhosts, [first, broken])
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert rc == 1 and doc["ok"] is False, doc
    assert hosts[first.name]["verdict"] == "pass", hosts[first.name]
    # the broken host was applied (Ansible succeeded) and failed only its verification
    assert hosts[broken.name]["verdict"] == "fail" and hosts[broken.name]["failed_task"] is None, hosts
    assert hosts[broken.name]["changed"] > 0
    assert hosts[later.name]["verdict"] == "not-run" and hosts[later.name]["changed"] == 0

    run_dir = tmp_path / ".provision" / "runs" / doc["run"]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["stopped_after_batch"] == 2
    details = {d["host"]: d for d in report["details"]}
    assert [details[h.name]["batch"] for h in (first, broken, later)] == [1, 2, 3]
    # the root cause first in the one-line message, before the checks it made fail
    assert details[broken.name]["message"].startswith("import: torch is not importable"), details[broken.name]
    assert not details[later.name]["applied"] and details[later.name]["verify"] is None
    assert "batch 2" in details[later.name]["message"]
    assert "stopped the run after batch 2" in (run_dir / "report.html").read_text()

    # the later batch's host was not touched: same packages, no venv, no smoke job files
    assert rh.host_snapshot(testhosts, later) == before
    assert (
        rh.ssh(testhosts, later, "ls -d /opt/provision /tmp/provision-verify.* 2>&1 || true").count("No such file") == 2
    )
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    in_events = {str((e.get("event_data") or {}).get("host")) for e in events}
    assert {first.name, broken.name} <= in_events and later.name not in in_events

    # the scheduler was asked in order: drain, wait (busy, then idle), and only then the apply;
    # resumed after the verify; the failed host drained again with why, never resumed
    state = State(tmp_path / ".provision" / "state.db")
    lock_hash = {h.host: h.lock_hash for h in state.hosts()}  # what each host was applied with
    calls = [line.split("|", 2) for line in log.read_text().splitlines()]
    said = [(verb, args) for _, verb, args in calls]
    why = details[broken.name]["message"]
    assert said == [
        ("drain", f"{first.name} provision-upgrade: none -> {lock_hash[first.name]}"),
        ("idle", first.name),
        ("idle", first.name),
        ("resume", first.name),
        ("drain", f"{broken.name} provision-upgrade: none -> {lock_hash[broken.name]}"),
        ("idle", broken.name),
        ("idle", broken.name),
        ("drain", f"{broken.name} provision-upgrade: verify failed: {why}"[: len(broken.name) + 251]),
    ], said
    at = {(verb, args.split()[0], n): float(t) for n, (t, verb, args) in enumerate(calls)}

    def when(verb: str, host: str) -> list[float]:
        return [t for (v, h, _), t in at.items() if v == verb and h == host]

    for host in (first.name, broken.name):
        applied = [
            datetime.fromisoformat(e["created"]).timestamp()
            for e in events
            if (e.get("event_data") or {}).get("host") == host
        ]
        assert max(when("idle", host)) < min(applied), host  # idle before its first task
    assert when("resume", first.name)[0] > max(
        datetime.fromisoformat(e["created"]).timestamp()
        for e in events
        if (e.get("event_data") or {}).get("host") == first.name
    )


def test_ctrl_c_writes_the_report_so_far_and_exits_130(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) during the apply: exit 130,
    one line naming the report, and report.json/html say the run was interrupted. Check mode,
    so the host is left as it was."""
    host = _hosts(testhosts, 1)[0]
    config = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)
    args = up_args(testhosts, config, "--check", "--limit", host.name)
    args.remove("--json")
    proc, seen = up_until(tmp_path, args, "[preflight]", signal.SIGINT, 300)
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + rest + err
    assert err.startswith("error: interrupted; what the run got to is in ") and err.count("\n") == 1, err
    [run_dir] = (tmp_path / ".provision" / "runs").iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["interrupted"] is True and report["ok"] is False
    [detail] = report["details"]
    assert detail["verdict"] == "not-run" and "interrupted" in detail["message"]
    assert "Interrupted (Ctrl-C)" in (run_dir / "report.html").read_text()
    assert (run_dir / "events.jsonl").read_text().strip()  # what the apply got to is kept
