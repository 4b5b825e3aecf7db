"""The event reducer of the ansible-runner facade, fed events in the runner's own format."""

from __future__ import annotations

from provision.apply import EventReducer


def _events() -> list[dict[str, object]]:
    task = lambda name, role=None: {"event": "playbook_on_task_start", "event_data": {"task": name, "role": role}}  # noqa: E731
    def on(kind: str, host: str, res: dict[str, object], **extra: object) -> dict[str, object]:
        return {"event": kind, "event_data": {"host": host, "res": res, **extra}}
    return [
        {"event": "playbook_on_play_start", "event_data": {"play": "site"}},
        task("Install the driver", "nvidia_driver"),
        {"event": "runner_on_start", "event_data": {"host": "a", "task": "Install the driver", "role": "nvidia_driver"}},
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
    assert (b.failed, b.failed_task, b.message, b.role) == (True, "Probe something", "no headers for the kernel", "preflight")
    assert (c.unreachable, c.message) == (True, "Connection refused")
