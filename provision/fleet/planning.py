"""`provision plan` as a function: targets -> facts -> resolve per host -> lock -> run dir.

No host is changed. Facts come from the probe (``--local``, ``-i``) or are assumed
(``--assume os=ubuntu-22.04,gpu=H100-SXM:8``) for hosts that are not contacted. Hosts whose
resolved stacks are the same form one lock group (and one Ansible group in the run dir).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput, LockMismatch, OperationFailed, ProvisionError, Unreachable, Unsatisfiable, redact
from provision.files import write_lock
from provision.fleet.targets import HostDefaults, check_one_source, select_targets
from provision.matrix import load
from provision.model.host import ResolvedHost
from provision.model.lock import Lock, LockGroup
from provision.model.stack import FrameworkPin, Stack
from provision.model.versions import build_matches, version_matches
from provision.stack.request import NO_GPU_FOUND, HostSpec, StackRequest

if TYPE_CHECKING:
    from provision.ansible.render import RunVars
    from provision.config import Config
    from provision.hosts.facts import HostFacts
    from provision.hosts.inventory import HostTarget
    from provision.model.facts import ProbedGpu
    from provision.stack.request import StackRequest
    from provision.stack.resolution import Resolution


@dataclass(frozen=True)
class Assumed:
    """A host description given on the command line instead of probed."""

    os: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    arch: str | None = None
    instance_type: str | None = None
    nvswitch_count: int | None = None
    python: str | None = None
    name: str | None = None  # the host described; None: the inventory's hosts (-i) are


@dataclass
class HostPlan:
    """What plan says about one host."""

    host: str
    group: str
    probed: bool
    present: dict[str, Any]
    changes: list[str]
    reboot: str
    # What the user should know beyond the changes, e.g. that the probe found no NVIDIA GPU.
    notes: list[str] = field(default_factory=list)
    # What up must change of provision-health here (health_spec.installed_change); None: nothing.
    # Not one of the changes (`plan`'s "will install" is the stack), but a host with one is applied.
    health: str | None = None
    gpus: tuple[ProbedGpu, ...] = ()  # the probe's, in PCI order (integrations.slurm's Gres= lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "group": self.group,
            "probed": self.probed,
            "present": self.present,
            "changes": self.changes,
            "reboot": self.reboot,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class ProbeFailure:
    """A host left out of the plan because it could not be probed (``skip_unprobed``)."""

    host: str
    error: ProvisionError

    @property
    def reason(self) -> str:
        """What went wrong, one line, without the ``error:`` prefix."""
        return self.error.reason()


@dataclass
class PlanResult:
    out: Path
    lock_path: Path
    hosts: list[HostPlan] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    files: tuple[str, ...] = ()
    unprobed: list[ProbeFailure] = field(default_factory=list)  # only with skip_unprobed
    notes: list[str] = field(default_factory=list)  # what the user should know of the lock and the install
    lock: Lock = field(default_factory=lambda: Lock({}, []))  # what lock_path holds (up applies it)
    # the role variables the run dir's files hold, as rendered (up's fleet cache reads these)
    run_vars: RunVars | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "out": str(self.out),
            "lock": str(self.lock_path),
            "hosts": [h.to_json() for h in self.hosts],
            "groups": self.groups,
            "files": list(self.files),
            "notes": self.notes,
        }


@dataclass
class _Target:
    name: str
    connection: dict[str, Any]
    target: HostTarget | None = None  # None: assumed, never contacted
    facts: HostFacts | None = None


@dataclass(frozen=True)
class PlanInputs:
    """What the user asked `plan` for: the config, the stack request (the command line's stack
    options win over the config's ``stack:``), which hosts (``--local``, ``-i``, ``--assume``), ``--set`` role
    variables, ``--reboot-controller``, and with ``up --lock`` the lock to apply instead of resolving."""

    config: Config
    # the stack request, parsed once by the command line (config and flags); None: the config's
    request: StackRequest | None = None
    local: bool = False
    inventory: str | None = None
    assume: Assumed | None = None
    overrides: Mapping[str, object] | None = None
    reboot_controller: bool = False
    locked: Lock | None = None
    host_defaults: HostDefaults | None = None  # -u, --private-key, -K


@dataclass(frozen=True)
class PlanRun:
    """How this run plans: where the run dir and the lock go, how hosts are reached, which of them
    (``only``: `up --limit`), and the modes `up` sets (``skip_unprobed``, ``check``, ``bundle_roles``,
    ``run_id``)."""

    out: Path = Path(".provision/run")
    lock_path: Path = Path("provision.lock")
    accept_new_host_keys: bool = False
    ssh_config: Path | None = None
    only: Sequence[str] | None = None
    skip_unprobed: bool = False
    check: bool = False
    bundle_roles: bool = True
    # `up`'s run id (see provision.ansible.render.render_run); None for `plan`
    run_id: str | None = None


def plan(inputs: PlanInputs, context: PlanRun | None = None) -> PlanResult:
    """Resolve per host, write ``lock_path`` and the run dir ``out``; contact hosts only to probe.

    A host that cannot be probed stops the plan (one lock is written for all hosts, and `plan`
    must not write a lock that silently lacks one) unless ``skip_unprobed``: then the host is
    left out of the lock and the run dir and listed in :attr:`PlanResult.unprobed` (`up` fails
    it alone). When no host at all can be probed there is nothing to plan: that raises with
    every host's reason either way. ``check``: the plan of `up --check`, which installs nothing (see
    :func:`provision.fleet.closure.wants_closure`).

    With ``locked`` (`up --lock`) nothing is resolved: each host is probed only to check that it
    is still the host its lock group was resolved for (:func:`check_locked`), and the lock's
    groups (their wheel closure included), restricted to these hosts, are what the run dir
    renders and ``lock_path`` gets. ``bundle_roles``: the run dir carries a copy of the roles
    (`plan --out`; `up` runs its own run dir in place and passes False). ``run_id``: `up`'s run id
    (see :func:`provision.ansible.render.render_run`).
    """
    from provision.ansible.rundir import check_out_dir, ensure_dir, write_run_dir  # noqa: PLC0415 (start-up: `provision --help` loads this module, not ansible.rundir)
    from provision.stack.lock import build_lock, dumps_lock  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.lock)

    ctx = context or PlanRun()
    config, local, inventory = inputs.config, inputs.local, inputs.inventory
    request = inputs.request or StackRequest.build(**config.request_args())
    assume, overrides, locked = inputs.assume, inputs.overrides, inputs.locked
    reboot_controller = inputs.reboot_controller
    out, lock_path, accept_new_host_keys, ssh_config = ctx.out, ctx.lock_path, ctx.accept_new_host_keys, ctx.ssh_config
    only, skip_unprobed, check, bundle_roles = ctx.only, ctx.skip_unprobed, ctx.check, ctx.bundle_roles
    run_id = ctx.run_id
    check_one_source(local, inventory, hint="plan the local machine or an inventory's hosts")
    check_assume(assume, local, inventory)
    install = replace(config.install, reboot_controller=reboot_controller)
    check_out_dir(out)  # before any host is contacted: a user's folder is refused, nothing written
    targets, user_groups = _targets(local, inventory, assume, inputs.host_defaults)
    if only is not None:  # `up --limit`: plan (and probe) only these hosts
        targets = [t for t in targets if t.name in set(only)]
    check_inputs(overrides, [t.target for t in targets if t.target is not None and assume is None], ssh_config)
    if locked is not None:
        if assume is not None:
            raise BadInput("--assume with a given lock", "the lock already describes its hosts")
        check_locked_names(locked, [t.name for t in targets])  # before any host is contacted
    for t in targets:  # the apply's ssh trusts what the probe trusts (before any contact)
        if t.target is not None and not t.target.local and assume is None:
            from provision.hosts.ssh_config import ssh_trust_vars  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.ssh_config)

            t.connection.update(ssh_trust_vars(t.target, ssh_config))
    unprobed: list[ProbeFailure] = []
    if assume is not None:
        for t in targets:
            t.target = None  # --assume: the facts are given, no host is contacted
    else:
        unprobed = _probe(
            targets, config, skip_unprobed, accept_new_host_keys=accept_new_host_keys, ssh_config=ssh_config
        )
        targets = [t for t in targets if t.facts is not None]

    if locked is not None:
        lock, notes = check_locked(locked, targets, unprobed=[f.host for f in unprobed])
        lock_groups = lock.groups
    else:
        lock_groups = _resolve_groups(targets, request, assume)
        from provision.fleet.closure import lock_closures, wants_closure  # noqa: PLC0415 (start-up: `provision --help` loads this module, not fleet.closure)

        if wants_closure(config.install.lock_closure, applied=assume is None and not check):
            # before anything is written: a conflict leaves no lock
            lock_groups = lock_closures(lock_groups, install, overrides)
        lock = build_lock(lock_groups)
        notes = []
    notes += [
        # a plan without one (--assume, --check, install.lock_closure: never) says so, as `up --lock` does
        f"group {g.name}: its wheels are not locked by hash (the lock has no wheel closure); "
        "pip resolves the frameworks' dependencies on the hosts"
        for g in lock.groups
        if g.stack.frameworks and not g.python_packages
    ]
    if install.pip.index_url:  # the lock names upstream indexes; the site's mirror stands in for PyPI
        notes.append(
            redact(f"pip: the hosts install from {install.pip.index_url} in place of PyPI (install.pip.index_url)")
        )
    text = dumps_lock(lock)
    from provision.ansible.role_vars import check_installs_override, check_repositories_override  # noqa: PLC0415 (start-up: `provision --help` loads this module, not ansible.role_vars)

    check_installs_override(overrides or {}, lock, install)  # before anything is written
    check_repositories_override(overrides or {}, lock)
    # both places are checked before either is written: bad paths leave nothing half-made
    ensure_dir(out, "--out")
    ensure_dir(lock_path.parent, "--lock")
    # The run dir first: it renders (and may refuse a value) before any file is written, and a
    # --lock inside --out would otherwise make the folder look like a user's non-empty folder.
    run = write_run_dir(
        out,
        lock,
        text,
        {t.name: t.connection for t in targets},
        install,
        overrides=overrides,
        user_groups=user_groups,
        bundle_roles=bundle_roles,
        run=run_id,
    )
    by_name = {t.name: t for t in targets}
    # The health role's spec per host (host_vars: it carries what that host's probe saw)
    from provision.ansible.rundir import write_host_vars  # noqa: PLC0415 (start-up: as above)
    from provision.fleet.health_spec import host_vars, installed_change, write_program  # noqa: PLC0415 (start-up: `provision --help` loads this module, not remote.health)
    from provision.fleet.integrations import add_integrations  # noqa: PLC0415 (start-up: as above)

    why = "provision-health's spec for this host (the health role): from provision.lock and this host's probe"
    sources = write_program(out)
    health_vars = host_vars(lock, {n: t.facts for n, t in by_name.items()}, install.venv, sources)
    add_integrations(health_vars, config.integrations, {n: _probed_gpus(t) for n, t in by_name.items()})
    write_host_vars(out, health_vars, why)
    write_lock(lock, lock_path)
    result = PlanResult(
        out=out, lock_path=lock_path, files=run.files, unprobed=unprobed, notes=notes, lock=lock, run_vars=run.vars
    )
    for g in lock_groups:
        result.groups.append(
            {
                "name": g.name,
                "hosts": g.hosts,
                "stack": g.stack.to_json(),
                "packages": g.packages.to_json() if g.packages else None,
                "python_packages": g.to_json()["python_packages"],
                "warnings": g.warnings,
            }
        )
        for name in g.hosts:
            hp = _host_plan(by_name[name], g.name, g.stack, install.reboot)
            facts, role_vars = by_name[name].facts, run.vars.groups[run.vars.group_of[name]]
            if facts is not None:
                hp.health = installed_change(facts.health, health_vars[name]["health_spec"], role_vars)
            result.hosts.append(hp)
    return result


def _probed_gpus(t: _Target) -> tuple[ProbedGpu, ...]:  # on the PCI bus; none for a host planned without a probe
    from provision.hosts.facts import probed_host  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.facts)

    return probed_host(t.facts).gpus if t.facts is not None else ()


def _resolve_groups(targets: Sequence[_Target], request: StackRequest, assume: Assumed | None) -> list[LockGroup]:
    """Resolve each host's stack; hosts with the same resolution share a lock group."""
    from provision.stack.lock import lock_group  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.lock)
    from provision.stack.packages import check_plannable  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.packages)
    from provision.stack.resolve import resolve  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.resolve)

    groups: dict[str, tuple[list[str], Resolution, str | None]] = {}
    # The resolver is pure: the same request on the same host description gives the same
    # resolution, so a fleet of alike hosts is resolved once per distinct description, not once
    # per host (issue 26's benchmark: 1,000 described hosts spent ~85 % of plan resolving them
    # one by one). The key is the whole typed input: the request (the host's python3 included)
    # and the HostSpec with what the probe found (``probed`` is left out of HostSpec's own repr
    # and equality, so it is named here). Equal reprs are equal inputs; values that are equal but
    # print differently only miss the memo. A failure is raised at its first host, as before.
    resolved: dict[str, Resolution] = {}
    for t in targets:
        if t.facts is not None:
            from provision.hosts.facts import host_description, probed_host  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.facts)

            try:
                host = HostSpec.from_facts(probed_host(t.facts))
            except BadInput as exc:  # a mixed host, a GPU the data lacks: say which host
                exc.message = f"{t.name}: {exc.message}"
                raise
            python = host_description(t.facts).python
        else:
            a = assume or Assumed()
            host = HostSpec.describe(
                gpu=a.gpu,
                gpu_count=a.gpu_count,
                instance_type=a.instance_type,
                os=a.os,
                arch=a.arch,
                nvswitch_count=a.nvswitch_count,
            )
            python = a.python
        # the host's python3: the only OS Python its venv can be built with
        host_request = request.on_host(python) if python else request
        memo = repr((host_request, host, host.probed))
        resolution = resolved.get(memo)
        if resolution is None:
            try:
                check_plannable(host)  # EL8 is refused before its versions are looked at
                resolution = resolve(host_request, host)
                check_plannable(host, resolution.packages)
            except (Unsatisfiable, BadInput) as exc:
                exc.message = f"{t.name}: {exc.message}"
                raise
            resolved[memo] = resolution
        # A stack that keeps the host's driver was resolved against the driver the probe found: the
        # lock records it (`up --lock` refuses a host whose driver moved), a group per kept driver.
        kept = t.facts.driver.version if t.facts is not None and resolution.stack.driver is None else None
        key = repr((resolution.host, resolution.stack, resolution.packages, kept))
        groups.setdefault(key, ([], resolution, kept))[0].append(t.name)

    lock_groups = []
    for names, res, kept in groups.values():
        resolved_host = replace(res.host, kept_driver=kept)
        lock_groups.append(lock_group(_group_label(resolved_host), names, replace(res, host=resolved_host)))
    return _unique_names(lock_groups)


def check_locked_names(locked: Lock, names: Sequence[str]) -> None:
    """Every host to apply must be named by the lock (checked before any host is contacted).

    A host the lock does not name was never resolved: applying some group's stack to it would be
    a guess, so it is refused. The opposite, a lock host that is not among ``names``, is fine:
    a lock planned for a whole fleet is applied to part of it with --limit or a smaller
    inventory, as `up --limit` does with a fresh plan (:func:`check_locked` leaves it out).
    """
    from provision.stack.lock import find_group  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.lock)

    for name in names:
        if find_group(locked, name) is None:
            raise BadInput(f"host {name} is not in the lock", "run provision plan again for these hosts")


def check_locked(locked: Lock, targets: Sequence[_Target], unprobed: Sequence[str] = ()) -> tuple[Lock, list[str]]:
    """The lock restricted to ``targets``, after checking each probed host still fits its group.

    A host that differs from its group's host description (another OS, arch, GPU model or count)
    is bad input naming the host and what differs, before any change: its versions were decided
    for another machine. The groups keep their name, stack and packages byte for byte (so the
    state DB's group hash is the plan's); only their host lists shrink to this run's hosts.
    ``unprobed``: this run's hosts that could not be probed (`up` fails them alone; no note).
    """
    from provision.hosts.facts import probed_host  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.facts)
    from provision.stack.drift import host_differences  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.drift)
    from provision.stack.lock import find_group  # noqa: PLC0415 (start-up: `provision --help` loads this module, not stack.lock)

    names = {t.name for t in targets}
    for t in targets:
        group = find_group(locked, t.name)
        if group is None:  # check_locked_names ran before the probe; a caller may skip it
            check_locked_names(locked, [t.name])
            continue
        if t.facts is None:
            continue
        try:
            spec = HostSpec.from_facts(probed_host(t.facts))
        except BadInput as exc:  # a mixed host, a GPU the data lacks: say which host
            exc.message = f"{t.name}: {exc.message}"
            raise
        differs = host_differences(group, spec, driver=t.facts.driver.version)
        if differs:
            raise LockMismatch(
                f"host {t.name} does not match lock group {group.name}: " + "; ".join(differs),
                "run provision plan again for this host, or apply a lock planned for it",
            )
    groups = [replace(g, hosts=[h for h in g.hosts if h in names]) for g in locked.groups]
    lock = Lock(dict(locked.knowledge), [g for g in groups if g.hosts])
    notes = [
        f"{h}: in the lock, not among the hosts of this run: skipped"
        for g in locked.groups
        for h in g.hosts
        if h not in names and h not in unprobed
    ]
    current = load()
    if locked.knowledge.get("sha256") != current.sha256:
        # The lock is the decision the user reviewed: it is applied as written. The knowledge
        # may since have learnt of a newer release or a bad combination; plan again to see.
        notes.append(
            f"the lock was resolved with knowledge {locked.knowledge.get('version') or '?'} "
            f"({(locked.knowledge.get('sha256') or '?')[:12]}), this provision has {current.version} "
            f"({current.sha256[:12]}): applying the lock as written; `provision plan` re-resolves"
        )
    return lock, notes


def check_assume(assume: Assumed | None, local: bool, inventory: str | None) -> None:
    """``--assume`` describes hosts that are not contacted: the inventory's (``-i``) or the one
    its ``name=`` gives. With ``--local`` the machine would be both probed and described, and
    without either the lock would name a host called "assumed" that nothing can apply to."""
    if assume is None:
        return
    if local:
        raise BadInput(
            "--assume and --local together: --local probes this machine, --assume describes hosts not contacted",
            "drop --assume to plan this machine as it is, or drop --local and add name=HOST to --assume",
        )
    if not inventory and assume.name is None:
        raise BadInput(
            "--assume does not say which host it describes",
            "add name=HOST (e.g. --assume os=ubuntu-22.04,gpu=H100-SXM:8,name=gpu1) or give -i INVENTORY",
        )


def check_inputs(
    overrides: Mapping[str, object] | None, targets: Sequence[HostTarget], ssh_config: Path | None
) -> None:
    """Everything `plan` and `up` take that can be wrong, as BadInput before any host is contacted
    (the stack request and the install settings were checked when the command line built them):
    ``--set`` names and values (none the lock owns), the ``-F`` file, and each host's SSH settings
    (port, ssh args, the SSH config it names), read from files only."""
    from provision.ansible.roles import check_overrides, check_user_sets  # noqa: PLC0415 (start-up: `provision --help` loads this module, not ansible.roles)
    from provision.hosts.ssh_config import resolve_settings  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.ssh_config)

    check_user_sets(overrides or {})
    check_overrides(overrides or {})
    check_ssh_config(ssh_config)
    for t in targets:
        if not t.local:
            resolve_settings(t, ssh_config)


def check_ssh_config(ssh_config: Path | None) -> None:
    """``-F FILE`` must exist: SSH would silently fall back to ~/.ssh/config without it."""
    if ssh_config is not None and not ssh_config.is_file():
        raise BadInput(f"SSH config {ssh_config} not found", "give an existing file with -F, or leave -F out")


def _targets(
    local: bool, inventory: str | None, assume: Assumed | None, defaults: HostDefaults | None = None
) -> tuple[list[_Target], dict[str, dict[str, list[str]]]]:
    """The hosts to plan, and the inventory's own groups (kept in the run dir's inventory)."""
    from provision.ansible.checks import check_host_name  # noqa: PLC0415 (start-up: `provision --help` loads this module, not ansible.checks)

    if inventory or local:
        inv = select_targets(local, inventory, hint="plan the local machine or an inventory's hosts", defaults=defaults)
        return [_Target(t.name, _connection_vars(t), t) for t in inv.targets], inv.group_tree()
    if assume is None or assume.name is None:  # check_assume refused a nameless --assume already
        raise BadInput(
            "nothing to plan for", "give --local, -i INVENTORY or --assume os=ubuntu-22.04,gpu=H100-SXM:8,name=HOST"
        )
    return [_Target(check_host_name(assume.name), {})], {}


def _local_connection() -> dict[str, Any]:
    # Interpreter discovery on a developer machine can find a pyenv shim first; the OS's python3
    # is the one with the OS's apt/dnf bindings that the roles' package modules need.
    system = Path("/usr/bin/python3")
    return {"ansible_connection": "local", **({"ansible_python_interpreter": str(system)} if system.exists() else {})}


TRUST_VARS = frozenset({"ansible_ssh_args", "ansible_host_key_checking", "ansible_ssh_host_key_checking"})


def _connection_vars(t: HostTarget) -> dict[str, Any]:
    # the trust variables are ours alone (ssh_trust_vars): a user's would never reach the run dir
    out: dict[str, Any] = {k: v for k, v in t.vars.items() if k.startswith("ansible_") and k not in TRUST_VARS}
    if t.local:
        out.update(_local_connection())
    elif t.address != t.name:
        out["ansible_host"] = t.address
    if t.user:
        out["ansible_user"] = t.user
    if t.port:
        out["ansible_port"] = t.port
    if t.key_file:
        out["ansible_ssh_private_key_file"] = t.key_file
    return out


class NoHostProbed(Unreachable):
    """No host could be probed: nothing to plan. ``failures`` say why, host by host (`up`'s report)."""

    def __init__(self, message: str, hint: str, failures: list[ProbeFailure]) -> None:
        super().__init__(message, hint)
        self.failures = failures


def _probe(
    targets: Sequence[_Target],
    config: Config,
    skip_unprobed: bool,
    *,
    accept_new_host_keys: bool = False,
    ssh_config: Path | None = None,
) -> list[ProbeFailure]:
    """Probe the targets in place (``t.facts``); the hosts that failed, when they may be skipped."""
    from provision.hosts.gather import GatherOptions, matrix_lookup, probe_hosts  # noqa: PLC0415 (start-up: `provision --help` loads this module, not hosts.gather)

    hosts = [t.target for t in targets if t.target is not None]
    options = GatherOptions.from_env(venv=config.install.venv, lookup=matrix_lookup())
    results = probe_hosts(hosts, options, accept_new_host_keys=accept_new_host_keys, ssh_config=ssh_config)
    failed = [ProbeFailure(r.host, r.error) for r in results if r.error is not None]
    for f in failed:
        # a host's entry that does not parse (port, SSH config) is the user's input, not the host
        if isinstance(f.error, BadInput):
            raise f.error
    if failed and len(failed) == len(results):
        if len(failed) == 1:
            raise NoHostProbed(
                f"cannot probe {failed[0].host}: {failed[0].error.message}",
                failed[0].error.hint or "check `provision probe` for this host",
                failed,
            )
        raise NoHostProbed(
            f"cannot probe any of the {len(failed)} hosts: " + "; ".join(f"{f.host}: {f.reason}" for f in failed),
            "check `provision probe` for these hosts",
            failed,
        )
    if failed and not skip_unprobed:
        first = failed[0].error
        raise OperationFailed(
            f"cannot probe {failed[0].host}: {first.message}"
            + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""),
            first.hint or "check `provision probe` for these hosts",
        )
    for t, r in zip(targets, results, strict=True):
        t.facts = r.facts
    return failed


def _group_label(host: ResolvedHost) -> str:
    """A name from what the group is, not from the hosts planned beside it (it is the health spec's
    ``group``: one that moved with ``--limit`` re-applied a converged host); a kept driver is named."""
    gpu = host.gpu or "cpu"
    count = host.gpu_count or 0
    label = f"{gpu}_x{count}_{host.os}" if host.gpu else f"cpu_{host.os}"
    if host.kept_driver:
        label += f"_driver_{host.kept_driver}"
    return re.sub(r"[^a-z0-9_]+", "_", label.lower()).strip("_")


def _unique_names(groups: Sequence[LockGroup]) -> list[LockGroup]:
    """Number names still alike (e.g. another python3): the only names the run's hosts change."""
    seen: dict[str, int] = {}
    out = []
    for g in groups:
        n = seen.get(g.name, 0)
        seen[g.name] = n + 1
        out.append(replace(g, name=f"{g.name}_{n + 1}") if n else g)
    return out


def _same_framework(have: str | None, locked: FrameworkPin) -> bool:
    """The probe's ``2.13.0+cpu`` is the lock's ``2.13.0`` with variant ``cpu`` (the one version rule)."""
    return version_matches("framework", have, locked.version) and build_matches(have, locked.variant)


def _host_plan(t: _Target, group: str, stack: Stack, reboot_setting: str) -> HostPlan:
    facts = t.facts
    present: dict[str, Any] = {}
    if facts is not None:
        present = {
            "os": facts.os.slug if facts.os else None,
            "gpu_count": len(facts.gpus),
            "driver": facts.driver.version,
            "cuda_toolkits": [tk.version for tk in facts.cuda_toolkits],
            "cudnn": facts.cudnn.version if facts.cudnn else None,
            "frameworks": facts.frameworks(),
            "nouveau_loaded": facts.nouveau_loaded,
        }
    changes: list[str] = []
    driver = stack.driver
    have_driver = present.get("driver")
    if driver and have_driver != driver.version:
        verb = f"{have_driver} -> " if have_driver else ""
        changes.append(
            f"driver {verb}{driver.version} ({driver.kernel_modules} modules, {driver.install_method or 'nvidia-repo'})"
        )
    if stack.fabric_manager is not None:
        changes.append(f"fabric manager {stack.fabric_manager}")
    toolkit = stack.cuda_toolkit
    if toolkit is not None and toolkit not in present.get("cuda_toolkits", []):
        changes.append(f"cuda toolkit {toolkit}")
    cudnn = stack.cudnn
    if cudnn and present.get("cudnn") != cudnn.version:
        changes.append(f"cudnn {cudnn.version}")
    if stack.python_source == "standalone" and not (facts and facts.venv and facts.venv.standalone(stack.python)):
        changes.append(f"python {stack.python} (a standalone CPython, installed by uv)")
    have_fw = present.get("frameworks") or {}
    for name, fw in stack.frameworks.items():
        if not _same_framework(have_fw.get(name), fw):
            changes.append(f"{name} {fw.version}" + (f" ({fw.variant})" if fw.variant else ""))
    reboot = "no"
    if driver and have_driver != driver.version:
        if facts is None:
            reboot = "if nouveau or another driver is loaded (not probed)"
        elif facts.nouveau_loaded or (facts.nvidia_module_loaded and have_driver):
            reboot = (
                "yes" if reboot_setting == "auto" else "needed; install.reboot is never, the run stops and asks for one"
            )
    notes: list[str] = []
    if facts is not None and not facts.gpus:
        cuda = sorted(n for n, fw in stack.frameworks.items() if fw.cuda)
        if driver:
            note = f"the pinned driver {driver.version} is planned, but up's preflight refuses it here"
        elif cuda:  # role_vars: preflight_require_gpu, as a CUDA build is of no use without a GPU
            note = (
                f"no driver is planned; up's preflight refuses the CUDA build of {', '.join(cuda)} here "
                "(a CPU-only stack, e.g. torch==X+cpu, passes; up --check runs the rest on the CPU)"
            )
        else:
            note = "no driver is planned, the frameworks run on the CPU"
        notes.append(f"{NO_GPU_FOUND}: {note}")
    return HostPlan(t.name, group, facts is not None, present, changes, reboot, notes, gpus=_probed_gpus(t))
