"""The fleet as the state DB remembers it, and drift: probe each known host, compare with its lock.

``provision status`` prints what this module returns. The comparison itself is pure and lives in
:mod:`provision.stack.drift`; this module reaches the hosts (:mod:`provision.hosts.gather`) and
finds each host's lock under the runs folder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput
from provision.files import read_lock
from provision.fleet.state import (
    HealthState,
    RunRecord,
    previous_lock,
    read_fleet,
    rollback_target,
    rolled_back_from,
)
from provision.fleet.state import state_path as where_state
from provision.model.lock import find_group

if TYPE_CHECKING:
    from provision.hosts.facts import HostFacts


def locate_state(override: Path | None, configured: str | None, config_path: Path | None) -> Path:
    """The state DB's path; BadInput when one was named (``--state`` or the config) and is missing."""

    path = where_state(override, configured)
    if (override is not None or configured) and not path.exists():
        source = "--state" if override is not None else f"state.path in {config_path}"
        raise BadInput(
            f"no state database at {path} ({source})",
            "run `provision up` with the same --state / config first, or fix the path",
        )
    return path


def _when(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else None


def fleet_hosts(path: Path) -> list[dict[str, Any]] | None:
    """One row per host the state DB knows: lock applied, last verdict, when, last run; None when
    there is no state DB yet (nothing is created: status only reads)."""

    fleet = read_fleet(path)
    if fleet is None:
        return None
    health, history, kept = fleet.health, fleet.history, fleet.kept
    return [
        {
            "host": r.host,
            "lock_hash": r.lock_hash,
            "applied_at": _when(r.applied_at),
            "verdict": r.verdict,
            "verified_lock_hash": r.verified_lock_hash,
            "verified_at": _when(r.verified_at),
            "last_run": r.last_run,
            "converged": r.lock_hash is not None and r.converged(r.lock_hash),
            "health": _health_json(health.get(r.host)),
            "previous_lock_hash": previous_lock(history.get(r.host, []), r.lock_hash),
            "rolled_back_from": rolled_back_from(history.get(r.host, []), r.lock_hash),
            "rollback": _rollback_json(rollback_target(history.get(r.host, []), r.lock_hash, kept)),
        }
        for r in fleet.hosts
    ]


def _rollback_json(target: RunRecord | None) -> dict[str, Any]:
    """Whether `provision rollback` has a lock to go back to on the host, and which (its last pass)."""
    if target is None:
        return {"possible": False, "lock_hash": None, "run": None}
    return {"possible": True, "lock_hash": target.lock_hash, "run": target.run}


def _health_json(h: HealthState | None) -> dict[str, Any] | None:
    """A host's last `provision health` answer (None: never checked)."""
    if h is None:
        return None
    return {"status": h.status, "checked_at": _when(h.checked_at), "problems": h.problems, "lock_hash": h.lock_hash}


def observed_versions(facts: HostFacts) -> dict[str, str | None]:
    """What a probe saw, keyed like :func:`provision.stack.drift.drift`'s input."""
    observed: dict[str, str | None] = {"driver": facts.driver.version}
    for name, version in facts.frameworks().items():
        observed[name] = version
    if facts.venv is not None:  # a venv that lacks a locked framework: "not installed"
        for name in ("torch", "tensorflow", "jax"):
            observed.setdefault(name, None)
    if facts.cuda_toolkits:
        observed["cuda_toolkit"] = facts.cuda_toolkits[0].version
    return observed


def check_drift(  # noqa: PLR0917
    hosts: list[dict[str, Any]],
    runs_dir: Path,
    inventory: str | None,
    venv: str,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
) -> bool:
    """Probe the hosts of ``hosts`` and add ``drift`` (or ``error``) to each row; True when none drifted."""
    from provision.hosts.gather import GatherOptions, matrix_lookup, probe_hosts  # noqa: PLC0415 (start-up: `provision status` lists the state DB without hosts/ and the drift check)
    from provision.hosts.inventory import LOCALHOST, load_inventory  # noqa: PLC0415 (start-up: `provision status` lists the state DB without hosts/ and the drift check)
    from provision.stack.drift import drift  # noqa: PLC0415 (start-up: `provision status` lists the state DB without hosts/ and the drift check)

    targets = {t.name: t for t in (load_inventory(inventory) if inventory else [LOCALHOST])}
    known = [h for h in hosts if h["host"] in targets and h["last_run"]]
    options = GatherOptions.from_env(venv=venv, lookup=matrix_lookup())
    results = probe_hosts(
        [targets[h["host"]] for h in known], options, accept_new_host_keys=accept_new_host_keys, ssh_config=ssh_config
    )
    ok = True
    for h, r in zip(known, results, strict=True):
        lock_path = runs_dir / str(h["last_run"]) / "provision.lock"
        if r.error is not None or r.facts is None:
            h["drift"], h["error"] = None, r.error.one_line() if r.error else "no facts"
            ok = False
            continue
        if not lock_path.exists():
            h["drift"], h["error"] = None, f"the lock of run {h['last_run']} is gone ({lock_path})"
            ok = False
            continue
        group = find_group(read_lock(lock_path), h["host"])
        found = drift(group, observed_versions(r.facts)) if group is not None else []
        h["drift"] = [d.to_json() for d in found]
        h["drift_text"] = [str(d) for d in found]
        ok = ok and not found
    for h in hosts:
        if h["host"] not in targets:
            h.setdefault("drift", None)
            h.setdefault("error", "not in the given inventory: not probed")
    return ok
