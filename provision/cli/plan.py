"""`provision plan`: resolve per host, write provision.lock and the Ansible run dir; change nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import (
    NONEMPTY,
    command_options,
    config_option,
    deprecated_lock_option,
    host_defaults,
    lock_option,
    login_options,
    parse_sets,
    reboot_controller_option,
    set_option,
    ssh_options,
    stack_options,
    target_options,
)
from provision.errors import BadInput
from provision.fleet.planning import Assumed, PlanInputs, PlanRun
from provision.fleet.planning import plan as run_plan
from provision.model.packages import PackagePlan
from provision.stack.request import StackRequest

if TYPE_CHECKING:
    from rich.console import Console

    from provision.fleet.planning import PlanResult
    from provision.model.lock import Lock


@click.command(name="plan")
@target_options(
    local="Plan for the machine provision runs on (probed).",
    inventory="Plan for an Ansible inventory's hosts (probed).",
)
@click.option(
    "--assume",
    type=NONEMPTY,
    metavar="FACTS",
    help="Do not contact hosts; assume os=ID-VERSION,gpu=NAME:COUNT[,arch=,nvswitch=N,python=X.Y,name=HOST].",
)
@config_option()
@stack_options
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".provision/run"),
    show_default=True,
    help="The run dir to write.",
)
@lock_option(
    "Where to write the lock (the change against the lock there before is printed).",
    default=Path("provision.lock"),
    name="--lock-out",
)
@deprecated_lock_option("--lock-out")
@set_option("Set a role variable in the run dir (mirrors, air-gapped repositories); repeatable.")
@reboot_controller_option()
@ssh_options()
@login_options()
@command_options
def plan(
    *,
    local: bool,
    inventory: str | None,
    assume: str | None,
    config_path: Path | None,
    stack_flags: dict[str, Any],
    out: Path,
    lock_path: Path,
    old_lock_path: Path | None,
    sets: tuple[str, ...],
    reboot_controller: bool,
    accept_new_host_keys: bool,
    ssh_config: Path | None,
    login_user: str | None,
    private_key: Path | None,
    ask_become_pass: bool,
    as_json: bool,
) -> int:
    """Resolve per host, write provision.lock and the Ansible run dir; no host is changed.

    Then `cd OUT && ansible-playbook site.yml` applies it with plain Ansible (OUT holds the roles
    too: commit it or copy it to another machine), or `provision up --from-lock LOCK` applies exactly
    this lock and verifies. With --assume the hosts are not contacted (with -i: the inventory's
    hosts, all assumed alike). The stack options override the config's stack: section.
    Exit status: 0 planned, 1 a host could not be probed, 2 bad input, 3 unsatisfiable.
    """
    from provision.config import Config, load_config  # noqa: PLC0415 (start-up: `provision --help` loads this module, not config)

    if old_lock_path is not None:
        lock_path = old_lock_path
    config = load_config(config_path) if config_path is not None else Config()
    previous = previous_lock(lock_path)
    result = run_plan(
        PlanInputs(
            config=config,
            request=StackRequest.build(**config.request_args(stack_flags)),  # parsed once, here
            local=local,
            inventory=inventory,
            assume=parse_assume(assume) if assume else None,
            overrides=parse_sets(sets),
            reboot_controller=reboot_controller,
            host_defaults=host_defaults(login_user, private_key, ask_become_pass),
        ),
        PlanRun(out=out, lock_path=lock_path, accept_new_host_keys=accept_new_host_keys, ssh_config=ssh_config),
    )
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision plan --help` loads this module, not cli.output)
    from provision.fleet.review import lock_changes  # noqa: PLC0415 (start-up: `provision plan --help` loads this module, not fleet.review)

    changes = lock_changes(previous, result.lock) if previous is not None else None
    doc = result.to_json()
    if changes is not None:  # null: there was no lock to compare with
        doc["lock_changes"] = [{"hosts": hosts, "changes": lines} for hosts, lines in changes]
    emit(doc, as_json, lambda con: _human(con, result, changes))
    return 0


def previous_lock(path: Path) -> Lock | None:
    """The lock that ``plan`` is about to replace at ``path``, or None (none there, or unreadable)."""
    from provision.files import read_lock  # noqa: PLC0415 (start-up: `provision --help` loads this module, not the lock reader)

    if not path.is_file():
        return None
    try:
        return read_lock(path)
    except BadInput:  # a broken old lock is replaced; there is nothing to compare with
        return None


def host_blocks(con: Console, result: PlanResult) -> None:
    """Per host what is there and what changes; hosts with the same block print it once, named as ranges."""
    from provision.fleet.review import group_alike, host_ranges  # noqa: PLC0415 (start-up: as in plan())

    by_name = {h.host: h for h in result.hosts}

    def block(name: str) -> tuple[str, ...]:
        h = by_name[name]
        if h.probed:
            fw = ", ".join(f"{k} {v}" for k, v in (h.present.get("frameworks") or {}).items())
            now = f"driver {h.present.get('driver') or 'none'}" + (f"; {fw}" if fw else "")
        else:
            now = "not probed (--assume)"
        lines = [f"  there now:    {now}", *(f"  note:         {n}" for n in h.notes)]
        lines.append("  will install: " + ("\n                ".join(h.changes) or "nothing"))
        lines.append(f"  reboot:       {h.reboot}")
        return (h.group, *lines)

    for names, (group, *lines) in group_alike(by_name, block):
        count = f"{len(names)} hosts: " if len(names) > 1 else ""
        con.print(f"[bold]{count}{host_ranges(names)}[/bold]  (group {group})", markup=True)
        for line in lines:
            con.print(line, markup=False)


def change_lines(con: Console, changes: list[tuple[list[str], list[str]]] | None, lock_path: Path) -> None:
    """The change against the lock being replaced, per set of hosts that change alike."""
    from provision.fleet.review import host_ranges  # noqa: PLC0415 (start-up: as in plan())

    if changes is None:
        return
    con.print("", markup=False)
    if not changes:
        con.print(f"against the previous {lock_path}: no change", markup=False)
        return
    con.print(f"[bold]against the previous {lock_path}:[/bold]", markup=True)
    for hosts, lines in changes:
        con.print(f"  {host_ranges(hosts)}:", markup=False, soft_wrap=True)
        for line in lines:
            con.print(f"    {line}", markup=False)


def _human(con: Console, result: PlanResult, changes: list[tuple[list[str], list[str]]] | None = None) -> None:
    review(con, result)
    change_lines(con, changes, result.lock_path)
    con.print(f"lock: {result.lock_path}", markup=False)
    con.print(f"apply: cd {result.out} && ansible-playbook site.yml", markup=False)
    con.print(f"   or: provision up (the same hosts) --from-lock {result.lock_path}", markup=False)


def review(con: Console, result: PlanResult) -> None:
    """The plan as a reviewer reads it (``plan`` and ``up``'s confirmation): hosts that plan alike
    as one block, each lock group's packages, the notes and warnings."""
    from provision.fleet.review import host_ranges  # noqa: PLC0415 (start-up: as in plan())

    host_blocks(con, result)
    for g in result.groups:
        if g.get("packages"):
            con.print("", markup=False)
            con.print(f"[bold]group {g['name']}[/bold]  ({host_ranges(g['hosts'])})", markup=True)
            for line in package_lines(PackagePlan.from_json(g["packages"])):
                con.print(f"  {line}", markup=False, soft_wrap=True)
            if g.get("python_packages"):  # the wheel closure: the lock lists each one
                con.print(
                    f"  + {len(g['python_packages'])} wheels by sha256 (the lock's python_packages)", markup=False
                )
    for note in result.notes:
        con.print(f"note: {note}", markup=False, soft_wrap=True)
    for g in result.groups:
        for w in g["warnings"]:
            con.print(f"warning ({g['name']}): {w['message']}", markup=False)


def package_lines(plan: PackagePlan) -> list[str]:
    """The package plan as a terraform-like listing: what is added, installed, held, enabled."""
    lines = [f"package manager: {plan.manager}"]
    for r in plan.repositories:
        fpr = r.key_fingerprint or "NOT VERIFIED"
        lines.append(f"+ repository {r.name}: {r.url}")
        lines.append(f"    key {r.key_url} (fingerprint {fpr})")
    lines += [f"+ module stream {m}" for m in plan.module_streams]
    sep = "=" if plan.manager == "apt" else "-"
    specs = [i.name + (f"{sep}{i.version}" if i.version else "") for i in plan.install]
    width = max((len(x) for x in specs), default=0)
    for i, spec in zip(plan.install, specs, strict=True):
        notes = [i.role, f"from {i.repository or 'the OS archive'}"]
        if i.name in plan.holds:
            notes.append("held")
        if i.version is None:
            notes.append("unversioned")
        lines.append(f"+ {spec.ljust(width)}  ({', '.join(notes)})")
    lines += [f"+ service {s.name} (enabled by {s.role})" for s in plan.services]
    if plan.pip and plan.pip.requirements:
        extra = "".join(f" + {u}" for u in plan.pip.extra_index_urls)
        lines.append(f"+ pip {' '.join(plan.pip.requirements)} (from {plan.pip.index_url}{extra})")
    return lines


# --assume KEY=VALUE,...: the command line describes hosts that are not contacted
ASSUME_KEYS = ("os", "gpu", "arch", "instance_type", "nvswitch", "python", "name")


def parse_assume(text: str) -> Assumed:
    """``os=ubuntu-22.04,gpu=H100-SXM:8[,arch=..,instance_type=..,nvswitch=N,python=X.Y,name=HOST]``."""
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not value.strip():
            raise BadInput(
                f"--assume part {part!r} is not KEY=VALUE",
                "write e.g. --assume os=ubuntu-22.04,gpu=H100-SXM:8",
            )
        if key not in ASSUME_KEYS:
            raise BadInput(f"--assume key {key!r} is unknown", f"use {', '.join(ASSUME_KEYS)}")
        values[key] = value.strip()
    gpu, count = values.get("gpu"), None
    if gpu and ":" in gpu:
        gpu, _, n = gpu.rpartition(":")
        if not n.isdigit():
            raise BadInput(f"--assume gpu count {n!r} is not a number", "write gpu=NAME:COUNT, e.g. gpu=H100-SXM:8")
        count = int(n)
    nvswitch = values.get("nvswitch")
    if nvswitch is not None and not nvswitch.isdigit():
        raise BadInput(f"--assume nvswitch={nvswitch!r} is not a number", "give the NVSwitch count, e.g. nvswitch=4")
    return Assumed(
        os=values.get("os"),
        gpu=gpu,
        gpu_count=count,
        arch=values.get("arch"),
        instance_type=values.get("instance_type"),
        nvswitch_count=int(nvswitch) if nvswitch else None,
        python=values.get("python"),
        name=values.get("name"),
    )
