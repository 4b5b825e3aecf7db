"""The fleet state in SQLite: what was applied, what was verified, and when a host is converged."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.fleet.state import State


def test_converged_only_when_applied_and_verified_with_the_same_lock(tmp_path: Path) -> None:
    state = State(tmp_path / "state.db")
    assert state.host("th1") is None
    state.record_applied("r1", "th1", "hash-a", changed=12)
    assert not state.host("th1").converged("hash-a")  # type: ignore[union-attr]
    state.record_verdict("r1", "th1", "hash-a", "pass")
    assert state.host("th1").converged("hash-a")  # type: ignore[union-attr]
    assert not state.host("th1").converged("hash-b")  # type: ignore[union-attr]
    state.record_verdict("r2", "th1", "hash-a", "fail")
    assert not state.host("th1").converged("hash-a")  # type: ignore[union-attr]
    state.close()
    # it is on disk: a new process sees the same
    again = State(tmp_path / "state.db")
    assert [(h.host, h.verdict, h.last_run) for h in again.hosts()] == [("th1", "fail", "r2")]


def test_a_state_path_that_cannot_be_used_is_bad_input(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BadInput, match="cannot use the state database"):
        State(blocker / "state.db")
