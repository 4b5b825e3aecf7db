"""Reading a plan: what changed against the lock it replaces, and hosts that plan alike as one block.

``plan`` (and ``up``'s confirmation) print this, so a reviewer sees "driver 570.195.03 ->
580.95.05", "+ fabric manager 580.95.05", "- cudnn" per set of hosts (as ``uv lock`` or
``terraform plan`` do), and 128 identical hosts as one block with their names as ranges
(``node[001-128]``) instead of 128 copies.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

from provision.model.lock import Lock
from provision.model.stack import Stack

T = TypeVar("T")


def components(stack: Stack) -> dict[str, str]:
    """The lock's components of one group, by the names a reviewer knows, each with its version."""
    out: dict[str, str] = {}
    if stack.driver is not None:
        out["driver"] = stack.driver.version
        if stack.driver.kernel_modules:
            out["driver kernel modules"] = stack.driver.kernel_modules
    if stack.fabric_manager:
        out["fabric manager"] = stack.fabric_manager
    if stack.cuda_toolkit:
        out["cuda-toolkit"] = stack.cuda_toolkit
    if stack.cudnn is not None:
        out["cudnn"] = stack.cudnn.version
    for name, fw in sorted(stack.frameworks.items()):
        out[name] = fw.version + (f"+{fw.variant}" if fw.variant else "")
    if stack.python:
        out["python"] = stack.python
    if stack.container_toolkit:
        out["nvidia-container-toolkit"] = stack.container_toolkit
    if stack.dcgm:
        out["dcgm"] = stack.dcgm
    return out


def component_changes(old: dict[str, str] | None, new: dict[str, str] | None) -> list[str]:
    """``name a -> b``, ``+ name b``, ``- name``: one line per component that differs."""
    if old == new:
        return []
    if old is None:
        return ["+ host (not in the previous lock)"]
    if new is None:
        return ["- host (not in this lock)"]
    lines = []
    for name in [*new, *(n for n in old if n not in new)]:
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if before is None:
            lines.append(f"+ {name} {after}")
        elif after is None:
            lines.append(f"- {name}")
        else:
            lines.append(f"{name} {before} -> {after}")
    return lines


def lock_changes(old: Lock, new: Lock) -> list[tuple[list[str], list[str]]]:
    """The change from ``old`` to ``new``, as (hosts, lines) with hosts that change alike together."""
    before = {h: components(g.stack) for g in old.groups for h in g.hosts}
    after = {h: components(g.stack) for g in new.groups for h in g.hosts}
    order = [*after, *(h for h in before if h not in after)]
    changed = {h: component_changes(before.get(h), after.get(h)) for h in order}
    return [(hosts, lines) for hosts, lines in group_alike(order, lambda h: tuple(changed[h])) if lines]


def group_alike(items: Iterable[str], key: Callable[[str], Hashable]) -> list[tuple[list[str], list[str]]]:
    """``items`` grouped by ``key`` (first-seen order), each with the key's lines (a tuple of str)."""
    groups: dict[Hashable, list[str]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return [(names, list(k) if isinstance(k, tuple) else [str(k)]) for k, names in groups.items()]


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def host_ranges(names: Sequence[str]) -> str:
    """Host names with runs of numbered names collapsed: ``node[001-128], gpu-a`` (input order)."""
    out: list[str] = []
    run: list[str] = []  # [prefix, first digits, last digits]

    def flush() -> None:
        if run:
            prefix, first, last = run
            out.append(f"{prefix}{first}" if first == last else f"{prefix}[{first}-{last}]")
            run.clear()

    for name in names:
        m = _NUMBERED.match(name)
        if m and run and m.group(1) == run[0] and len(m.group(2)) == len(run[2]) and int(m.group(2)) == int(run[2]) + 1:
            run[2] = m.group(2)
            continue
        flush()
        if m:
            run.extend([m.group(1), m.group(2), m.group(2)])
        else:
            out.append(name)
    flush()
    return ", ".join(out)
