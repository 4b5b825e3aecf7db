"""`provision rollback`: which lock each host goes back to, and every refusal before any change.

The locks are written by the real `plan` (--assume) and kept in a real state DB as `up` keeps
them; applying a rolled-back lock on a host is tests/integration/test_up_lock.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.cli.plan import parse_assume
from provision.config import Config
from provision.errors import BadInput
from provision.files import read_lock
from provision.fleet.health_spec import group_hash
from provision.fleet.planning import PlanInputs, PlanRun, plan
from provision.fleet.rollback import Step, choose, rollback_lock
from provision.fleet.state import State
from provision.model.lock import Lock, dumps_lock
from tests.cli_run import provision


def _group_lock(tmp_path: Path, assume: str) -> tuple[str, str]:
    """A one-group lock from the real plan, as `up` keeps it: (its hash, its content)."""
    where = tmp_path / assume.replace(",", "_").replace("=", "-").replace(":", "x").replace("+", "p")
    plan(
        PlanInputs(config=Config(), assume=parse_assume(assume)),
        PlanRun(out=where / "run", lock_path=where / "provision.lock"),
    )
    lock = read_lock(where / "provision.lock")
    [group] = lock.groups
    return group_hash(group), dumps_lock(Lock(lock.knowledge, [group]))


@pytest.fixture(scope="module")
def locks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("locks")
    return {
        "a": _group_lock(tmp, "os=debian-12,gpu=L4:1,name=th1"),
        "b": _group_lock(tmp, "os=debian-12,gpu=T4:1,name=th1"),
    }


def _history(path: Path, locks: dict[str, tuple[str, str]], runs: list[tuple[str, str, str, str]]) -> State:
    state = State(path)
    for run, host, key, verdict in runs:
        lock_hash, content = locks[key]
        state.keep_lock(lock_hash, content)
        state.record_applied(run, host, lock_hash, 3)
        state.record_verdict(run, host, lock_hash, verdict)
    return state


def test_each_host_goes_back_to_its_last_passing_lock_as_one_lock(
    tmp_path: Path, locks: dict[str, tuple[str, str]]
) -> None:
    a, b = locks["a"][0], locks["b"][0]
    assert a != b
    state = _history(tmp_path / "s.db", locks, [("r1", "th1", "a", "pass"), ("r1", "th2", "a", "pass")])
    state.record_applied("r2", "th1", b, 3)
    state.record_verdict("r2", "th1", b, "pass")
    state.record_applied("r2", "th2", b, 3)
    state.record_verdict("r2", "th2", b, "fail")
    steps = choose(state, ["th1", "th2"], None)
    assert steps == [Step("th1", b, a, "r1"), Step("th2", b, a, "r1")]
    lock = rollback_lock(state, steps)
    [group] = lock.groups
    assert group.hosts == ["th1", "th2"] and group_hash(group) == a  # the kept group, for both hosts
    assert lock.knowledge == json.loads(locks["a"][1])["knowledge"]
    # --to by run id and by lock hash name the same lock
    assert choose(state, ["th1"], "r1") == choose(state, ["th1"], a) == [Step("th1", b, a, "r1")]
    state.close()


def test_a_host_without_an_earlier_passing_lock_or_an_unknown_to_is_refused(
    tmp_path: Path, locks: dict[str, tuple[str, str]]
) -> None:
    a, b = locks["a"][0], locks["b"][0]
    state = _history(tmp_path / "s.db", locks, [("r1", "th1", "a", "fail"), ("r2", "th1", "b", "pass")])
    with pytest.raises(BadInput, match=f"th1 has no earlier lock that passed verification there \\(it runs {b}\\)"):
        choose(state, ["th1"], None)  # a failed there: no rollback to it
    with pytest.raises(BadInput, match="th9 has no lock applied"):
        choose(state, ["th9"], None)
    with pytest.raises(BadInput, match=r"--to nope: the state DB .* knows no such lock hash or run of th1"):
        choose(state, ["th1"], "nope")
    with pytest.raises(BadInput, match=f"th1 already runs lock {b}"):
        choose(state, ["th1"], "r2")
    # --to may name a lock that never passed there: the user chose it; the step says no run passed
    assert choose(state, ["th1"], a) == [Step("th1", b, a, None)]
    state.close()


def test_the_cli_refuses_in_one_line_with_exit_2_before_any_run(
    tmp_path: Path, locks: dict[str, tuple[str, str]]
) -> None:
    _history(tmp_path / "s.db", locks, [("r1", "localhost", "a", "pass")]).close()
    r = provision("rollback", "--local", "--yes", "--state", "s.db", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: localhost has no earlier lock that passed verification there (it runs {locks['a'][0]});"
        " nothing was changed (see provision status for each host's locks; --to LOCK_HASH|RUN_ID picks one)"
    ]
    r = provision("rollback", "--local", "--yes", "--state", "s.db", "--to", "r9", "--json", cwd=tmp_path)
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "bad_input", r.stdout
    assert not (tmp_path / ".provision").exists()  # no run folder: nothing was started
    r = provision("rollback", "--local", "--state", "s.db", cwd=tmp_path)
    assert r.returncode == 2 and "there is no terminal to ask on" in r.stderr, r.stderr


def test_status_says_rolled_back_from(tmp_path: Path, locks: dict[str, tuple[str, str]]) -> None:
    a, b = locks["a"][0], locks["b"][0]
    state = _history(tmp_path / "s.db", locks, [("r1", "th1", "a", "pass"), ("r2", "th1", "b", "pass")])
    state.record_applied("r3", "th1", a, 4, rolled_back_from=b)
    state.record_verdict("r3", "th1", a, "pass")
    state.record_verdict("r4", "th1", a, "pass")  # a later converged up: still rolled back from b
    state.close()
    r = provision("status", "--state", "s.db", "--json", cwd=tmp_path)
    [host] = json.loads(r.stdout)["hosts"]
    assert (host["lock_hash"], host["rolled_back_from"], host["previous_lock_hash"]) == (a, b, b)
    assert host["rollback"] == {"possible": True, "lock_hash": b, "run": "r2"}  # and forward again to b
