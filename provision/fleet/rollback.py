"""`provision rollback` as a function: choose each host's earlier lock from the state DB, then apply
it through `up --from-lock`'s path (:func:`provision.fleet.up.up`; no second apply engine).

The choice is made for every selected host before any host is contacted: the newest run that passed
verification on the host with a lock other than the one it runs (or the lock ``--to`` names, by
its hash or by the id of a run on the host), whose content the state DB keeps (``locks`` table).
A host without one is bad input and nothing is changed anywhere. The chosen groups are written
as one ``provision.lock`` (each group listing the hosts that go back to it) and applied as ``up
--from-lock`` applies a lock: the hosts are probed only to check that they still fit their group,
the roles bring each host to that lock (apt installs the exact pinned versions with downgrades
allowed and moves the holds, the frameworks role removes what a newer lock added to the venv and
installs the old closure by hash), verify runs, and each host's run row says which lock it was
rolled back from. Before that, every wheel and pinned OS package version the chosen locks need
is looked for (:mod:`provision.fleet.rollback_sources`); one gone from every source is bad input.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from provision.errors import BadInput
from provision.files import write_lock
from provision.fleet import verify as verify_api
from provision.fleet.cache.config import cache_root
from provision.fleet.rollback_sources import check_sources, wheel_folders
from provision.fleet.state import RunRecord, State, rollback_target, state_path
from provision.fleet.targets import select_targets
from provision.fleet.up import apply_limit, limit_patterns
from provision.fleet.up import up as run_up
from provision.model.lock import Lock, LockGroup, parse_lock

if TYPE_CHECKING:
    from collections.abc import Callable

    from provision.config import Config
    from provision.fleet.records import Progress, UpOptions, UpResult
    from provision.fleet.up import Confirm


@dataclass(frozen=True)
class Step:
    """One host's way back: from the lock it runs to an earlier one (and the run it passed in)."""

    host: str
    from_hash: str
    to_hash: str
    to_run: str | None  # the run that passed with it there; None: --to named a lock never verified there

    def to_json(self) -> dict[str, str | None]:
        return {"host": self.host, "from": self.from_hash, "to": self.to_hash, "run": self.to_run}


def choose(state: State, hosts: list[str], to: str | None) -> list[Step]:
    """Each host's step back; BadInput (one line, before any change) for the first host that has none."""

    history = state.history()
    known = {h.host: h for h in state.hosts()}
    kept = state.kept_locks()
    steps: list[Step] = []
    for host in hosts:
        row = known.get(host)
        runs = history.get(host, [])
        if row is None or row.lock_hash is None:
            raise BadInput(
                f"{host} has no lock applied in the state DB {state.path}",
                "run provision up on it first (or give the --state that up used)",
            )
        current = row.lock_hash
        if to is None:
            target = rollback_target(runs, current, kept)
            if target is None or target.lock_hash is None:
                raise BadInput(
                    f"{host} has no earlier lock that passed verification there (it runs {current});"
                    " nothing was changed",
                    "see provision status for each host's locks; --to LOCK_HASH|RUN_ID picks one",
                )
            steps.append(Step(host, current, target.lock_hash, target.run))
            continue
        steps.append(_step_to(state, host, current, runs, to))
    return steps


def _step_to(state: State, host: str, current: str, runs: list[RunRecord], to: str) -> Step:
    """``--to``: a lock hash the state DB keeps, or the id of a run on the host (its lock)."""
    by_run = next((r for r in runs if r.run == to), None)
    if by_run is not None:
        if by_run.lock_hash is None:
            raise BadInput(
                f"run {to} on {host} has no lock recorded"
                " (a failed probe, or a run from before the state DB kept locks)",
                "pick another run or a lock hash from provision status",
            )
        wanted = by_run.lock_hash
    elif state.lock_content(to) is not None:
        wanted = to
    else:
        raise BadInput(
            f"--to {to}: the state DB {state.path} knows no such lock hash or run of {host}",
            "give a lock hash or run id that provision status --json lists for the host",
        )
    if state.lock_content(wanted) is None:
        raise BadInput(f"the content of lock {wanted} is not in the state DB", "pick another run or lock hash")
    if wanted == current:
        raise BadInput(f"{host} already runs lock {wanted}", "to apply it again, run provision up --from-lock")
    passed = next((r.run for r in runs if r.lock_hash == wanted and r.verdict == "pass"), None)
    return Step(host, current, wanted, passed)


def rollback_lock(state: State, steps: list[Step]) -> Lock:
    """One lock of the kept groups, each listing the hosts that go back to it."""
    groups: dict[str, LockGroup] = {}
    knowledge: dict[str, str] = {}
    for step in steps:
        if step.to_hash not in groups:
            content = state.lock_content(step.to_hash)
            assert content is not None  # choose() checked it
            kept = parse_lock(content, f"the state DB's lock {step.to_hash}")
            [group] = kept.groups
            knowledge = knowledge or kept.knowledge
            groups[step.to_hash] = replace(group, hosts=[])
        groups[step.to_hash].hosts.append(step.host)
    # group names are per lock; two kept locks may share one (same GPU and OS): keep them apart
    named: list[LockGroup] = []
    for lock_hash, group in groups.items():
        clash = any(g.name == group.name for g in named)
        named.append(replace(group, name=f"{group.name}_{lock_hash[:8]}") if clash else group)
    return Lock(knowledge, named)


def rollback(
    config: Config,
    options: UpOptions,
    to: str | None,
    *,
    confirm: Confirm | None = None,
    on_progress: Progress | None = None,
    on_phase: Callable[[str], None] | None = None,
    on_total: Callable[[int | None], None] | None = None,
) -> tuple[list[Step], UpResult]:
    """Choose every host's step back (BadInput before any change), then apply them as one lock."""

    chosen = select_targets(
        options.local,
        options.inventory,
        hint="roll back this machine or an inventory's hosts",
        defaults=options.host_defaults,
    )
    selected = apply_limit([t.name for t in chosen.targets], limit_patterns(options.limit))
    state = State(state_path(options.state_path, config.state.path))
    try:
        steps = choose(state, selected, to)
        lock = rollback_lock(state, steps)
    finally:
        state.close()
    # every artifact the old locks need, before any change (provision/fleet/rollback_sources.py)
    check_sources(
        lock,
        wheel_folders(cache_root(config), config.install.pip.find_links),
        [t for t in chosen.targets if t.name in selected],
        verify_api.default_connect(accept_new_host_keys=options.accept_new_host_keys, ssh_config=options.ssh_config),
    )
    with tempfile.TemporaryDirectory(prefix="provision-rollback-") as tmp:
        path = write_lock(lock, Path(tmp) / "provision.lock")  # up copies it into the run folder
        options.lock = path
        options.rollback_from = {s.host: s.from_hash for s in steps}
        result = run_up(config, options, confirm=confirm, on_progress=on_progress, on_phase=on_phase, on_total=on_total)
    return steps, result
