"""The event reducer of the ansible-runner facade, fed events in the runner's own format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.ansible.apply import EventReducer, _message, run_playbook


def _events() -> list[dict[str, object]]:
    task = lambda name, role=None: {"event": "playbook_on_task_start", "event_data": {"task": name, "role": role}}  # noqa: E731

    def on(kind: str, host: str, res: dict[str, object], **extra: object) -> dict[str, object]:
        return {"event": kind, "event_data": {"host": host, "res": res, **extra}}

    return [
        {"event": "playbook_on_play_start", "event_data": {"play": "site"}},
        task("Install the driver", "nvidia_driver"),
        {
            "event": "runner_on_start",
            "event_data": {"host": "a", "task": "Install the driver", "role": "nvidia_driver"},
        },
        on("runner_on_ok", "a", {"changed": True}),
        on("runner_on_ok", "b", {"changed": False}),
        task("Probe something", "preflight"),
        on("runner_on_failed", "a", {"msg": "tolerated"}, ignore_errors=True),
        on("runner_on_failed", "b", {"msg": "no headers\nfor the kernel"}),
        on("runner_on_unreachable", "c", {"msg": "Connection refused"}),
        on("runner_on_skipped", "a", {}),
    ]


def test_reducer_counts_changes_failures_and_unreachable_hosts() -> None:
    reducer = EventReducer()
    changed_hosts = [p.host for p in map(reducer.feed, _events()) if p is not None]
    assert changed_hosts == ["a", "a", "b", "a", "b", "c", "a"]
    a, b, c = reducer.hosts["a"], reducer.hosts["b"], reducer.hosts["c"]
    assert (a.changed, a.tasks_done, a.failed) == (1, 3, False)  # ignore_errors does not fail a host
    assert "nvidia_driver" in a.role_seconds
    assert (b.failed, b.failed_task, b.message, b.role) == (
        True,
        "Probe something",
        "no headers for the kernel",
        "preflight",
    )
    assert (c.unreachable, c.message) == (True, "Connection refused")


def test_the_runner_is_told_to_check_host_keys_and_gets_its_own_ssh_masters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ansible-runner itself is replaced (a stand-in that records its arguments): what is checked
    is what run_playbook asks of it; the real runs are in tests/integration/test_apply_trust.py."""
    import ansible_runner.interface

    seen: list[dict[str, Any]] = []

    def fake_init_runner(**kwargs: Any) -> Any:
        seen.append({**kwargs, "control_dir_existed": Path(kwargs["envvars"]["ANSIBLE_SSH_CONTROL_PATH_DIR"]).is_dir()})
        config = type("C", (), {"env": dict(kwargs["envvars"]), "artifact_dir": str(tmp_path / "a" / "none")})()
        return type(
            "R", (), {"stats": {}, "status": "successful", "rc": 0, "config": config, "run": lambda self: None}
        )()

    monkeypatch.setattr(ansible_runner.interface, "init_runner", fake_init_runner)
    for _ in range(2):
        run_playbook(
            tmp_path,
            "site.yml",
            inventory=tmp_path / "inventory.yml",
            artifacts=tmp_path / "a",
            envvars={"ANSIBLE_HOST_KEY_CHECKING": "False"},
            passwords={"x: $": "pw"},
        )
    first, second = seen
    # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless told: always told, never loosened
    assert first["envvars"]["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert first["passwords"] == {"x: $": "pw"} and first["suppress_env_files"] is True
    dirs = [s["envvars"]["ANSIBLE_SSH_CONTROL_PATH_DIR"] for s in seen]
    assert first["control_dir_existed"] and dirs[0] != dirs[1] and not any(Path(d).exists() for d in dirs)
    assert all(len(d) + 1 + 40 < 108 for d in dirs)  # ansible's %C socket name fits a UNIX socket path
    assert second["envvars"]["ANSIBLE_HOST_KEY_CHECKING"] == "True"


def test_a_refused_host_key_is_one_line() -> None:
    banner = (
        'Data could not be sent to remote host "n1". Make sure this host can be reached over ssh: '
        "@@@@@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@@@@@\nIT IS POSSIBLE ...\n"
        "Host key for 10.0.0.1 has changed and you have requested strict checking.\n"
        "Host key verification failed.\n"
    )
    assert _message({"msg": banner}).startswith("host key verification failed: Host key for 10.0.0.1 has changed (")
    unknown = "No ED25519 host key is known for 10.0.0.1 and you have requested strict checking.\nHost key verification failed."
    assert _message({"msg": unknown}).startswith(
        "host key verification failed: No ED25519 host key is known for 10.0.0.1 ("
    )
