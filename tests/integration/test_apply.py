"""The ansible-runner facade against real SSH test hosts: changed counts from the runner's
stats, idempotence on a second run, a failing host named with its task while others pass, and
the event stream written as JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

from provision.ansible.apply import HostProgress, run_playbook
from tests.hosts import harness

PLAYBOOKS = Path(__file__).parent / "playbooks"


def _inventory(testhosts: harness.HostSet, path: Path) -> Path:
    hosts = "\n".join(f"{h.name} ansible_host={h.address}" for h in testhosts.hosts)
    path.write_text(
        f"[testhosts]\n{hosts}\n\n[testhosts:vars]\nansible_user=root\n"
        f"ansible_ssh_private_key_file={testhosts.key}\nansible_python_interpreter=/usr/bin/python3\n"
        f"ansible_ssh_common_args='-o UserKnownHostsFile={testhosts.known_hosts} -o StrictHostKeyChecking=yes'\n"
    )
    return path


def test_apply_counts_changes_then_converges_and_isolates_a_failure(testhosts: harness.HostSet, tmp_path: Path) -> None:
    inventory = _inventory(testhosts, tmp_path / "inventory.ini")
    names = [h.name for h in testhosts.hosts]
    seen: list[HostProgress] = []
    # the hosts are fresh clones each session, so nothing of an earlier run is there
    first = run_playbook(
        PLAYBOOKS,
        "marker.yml",
        inventory=inventory,
        artifacts=tmp_path / "a1",
        extravars={"fail_hosts": [names[0]]},
        on_progress=seen.append,
    )
    assert not first.ok and first.status == "failed"
    broken = first.hosts[names[0]]
    assert not broken.ok and broken.failed_task == "Fail where asked" and broken.message == "broken on purpose"
    for name in names[1:]:
        assert first.hosts[name].ok and first.hosts[name].failed_task is None
    assert {p.host for p in seen} == set(names) and all(p.tasks_done >= 1 for p in seen)

    events = [json.loads(line) for line in first.events.read_text().splitlines()]
    assert any(e["event"] == "runner_on_failed" and e["event_data"]["host"] == names[0] for e in events)

    second = run_playbook(
        PLAYBOOKS, "marker.yml", inventory=inventory, artifacts=tmp_path / "a2", extravars={"fail_hosts": []}
    )
    assert second.ok
    assert all(outcome.changed == 0 for outcome in second.hosts.values())


def test_check_mode_reports_changes_but_makes_none(testhosts: harness.HostSet, tmp_path: Path) -> None:
    inventory = _inventory(testhosts, tmp_path / "inventory.ini")
    extravars = {"fail_hosts": [], "marker_path": "/var/tmp/provision-check-mode"}
    for attempt in ("c1", "c2"):  # the second check run would see the file had the first made it
        result = run_playbook(
            PLAYBOOKS, "marker.yml", inventory=inventory, artifacts=tmp_path / attempt, extravars=extravars, check=True
        )
        assert result.ok
        assert all(outcome.changed == 1 for outcome in result.hosts.values())
