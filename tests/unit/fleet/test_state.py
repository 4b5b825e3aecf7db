"""The fleet state in SQLite: what was applied, what was verified, and when a host is converged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.fleet.state import (
    RunRecord,
    State,
    previous_lock,
    read_history,
    rollback_target,
    rolled_back_from,
)


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


def test_every_lock_is_kept_and_each_run_knows_its_lock(tmp_path: Path) -> None:
    state = State(tmp_path / "state.db")
    state.keep_lock("hash-a", '{"lock": "A"}')
    state.record_applied("r1", "th1", "hash-a", changed=12)
    state.record_verdict("r1", "th1", "hash-a", "pass")
    state.keep_lock("hash-b", '{"lock": "B"}')
    state.keep_lock("hash-a", '{"lock": "changed"}')  # the hash names the content: the first copy stays
    state.record_applied("r2", "th1", "hash-b", changed=3)
    state.record_failed("r2", "th1", "frameworks : install", "hash-b")
    state.record_failed("r3", "th1", "(probe)")  # no lock: the probe failed before one was chosen
    state.close()
    again = State(tmp_path / "state.db")
    assert again.lock_content("hash-a") == '{"lock": "A"}'
    assert again.lock_content("hash-b") == '{"lock": "B"}'
    assert again.lock_content("hash-c") is None
    assert [(r.run, r.lock_hash, r.verdict, r.failed_task) for r in again.history()["th1"]] == [
        ("r3", None, None, "(probe)"),
        ("r2", "hash-b", None, "frameworks : install"),
        ("r1", "hash-a", "pass", None),
    ]
    again.close()
    history, kept = read_history(tmp_path / "state.db")
    assert [r.run for r in history["th1"]] == ["r3", "r2", "r1"]
    assert kept == {"hash-a", "hash-b"}


def test_a_state_db_made_before_the_locks_table_opens_and_gains_it(tmp_path: Path) -> None:
    # the schema of the release before (runs without lock_hash, no locks table), with a run in it
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE hosts (host TEXT PRIMARY KEY, lock_hash TEXT, applied_at REAL, verdict TEXT,"
        " verified_lock_hash TEXT, verified_at REAL, last_run TEXT);"
        "CREATE TABLE runs (run TEXT NOT NULL, host TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL,"
        " changed INTEGER, verdict TEXT, failed_task TEXT, PRIMARY KEY (run, host));"
        "INSERT INTO runs (run, host, started_at, finished_at, verdict) VALUES ('old', 'th1', 1.0, 2.0, 'pass');"
    )
    db.commit()
    db.close()
    history, kept = read_history(path)  # read-only: the old DB reads, with no lock per run, unchanged
    assert [(r.run, r.lock_hash, r.verdict) for r in history["th1"]] == [("old", None, "pass")]
    assert kept == set()
    state = State(path)
    state.keep_lock("hash-a", "{}")
    state.record_verdict("new", "th1", "hash-a", "pass")
    assert [(r.run, r.lock_hash) for r in state.history()["th1"]] == [("new", "hash-a"), ("old", None)]
    state.close()
    State(path).close()  # opening it again adds nothing twice


def test_the_lock_before_and_the_rollback_target_come_from_the_history() -> None:
    def run(name: str, lock: str | None, verdict: str | None) -> RunRecord:
        return RunRecord(name, "th1", 0.0, 0.0, lock, verdict, None)

    runs = [run("r4", "c", "fail"), run("r3", "b", "pass"), run("r2", "a", "pass"), run("r1", None, "pass")]
    assert previous_lock(runs, "c") == "b"
    assert rollback_target(runs, "c", {"a", "b", "c"}) == runs[1]
    assert rollback_target(runs, "c", {"a", "c"}) == runs[2]  # b's content is not kept: a is the one
    assert rollback_target(runs, "b", {"a", "b"}) == runs[2]
    assert rollback_target(runs[:2], "b", {"b", "c"}) is None  # c never passed: nothing to go back to
    assert previous_lock(runs[:1], "c") is None
    # a failed apply of d (the host stayed on c) is no lock the host ran, nor does it end a rollback
    failed = RunRecord("r5", "th1", 0.0, 0.0, "d", None, "frameworks : Install")
    assert previous_lock([failed, *runs], "c") == "b"
    rolled = RunRecord("r4", "th1", 0.0, 0.0, "c", "pass", None, rolled_back_from="b")
    assert rolled_back_from([failed, rolled, *runs[1:]], "c") == "b"
    assert rolled_back_from(runs, "c") is None  # c came by up
