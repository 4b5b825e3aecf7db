"""reference/roles.md: each role's variables from its meta/argument_specs.yml (what Ansible checks
before the role runs) with the defaults from its defaults/main.yml (its public interface)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from refdocs.md import RefDocError, generated, literal, prose, table


def roles() -> list[Path]:
    """Every role folder: site.yml's roles in the order it runs them, then the helper roles."""
    from provision.ansible.roles import ROLES
    from provision.resources import playbooks_dir

    found = sorted(p for p in (playbooks_dir() / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
    order = {name: i for i, name in enumerate(ROLES)}
    return sorted(found, key=lambda p: (order.get(p.name, len(order)), p.name))


def spec(role: Path) -> dict[str, Any]:
    doc = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    main = ((doc or {}).get("argument_specs") or {}).get("main")
    if not isinstance(main, dict):
        raise RefDocError(f"roles.md: {role.name}/meta/argument_specs.yml has no argument_specs.main")
    return main


def defaults(role: Path) -> dict[str, Any]:
    path = role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def variables(options: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Each variable and, under a list or dict of mappings, each of its keys (``name[].key``)."""
    for name, opt in options.items():
        yield prefix + name, opt
        if isinstance(opt.get("options"), dict):
            inner = f"{prefix}{name}[]." if opt.get("type") == "list" else f"{prefix}{name}."
            yield from variables(opt["options"], inner)


def _type(opt: dict[str, Any]) -> str:
    text = str(opt.get("type", "str"))
    if opt.get("elements"):
        text += f" of {opt['elements']}"
    if opt.get("choices"):
        text += ": " + " | ".join(f"`{c}`" for c in opt["choices"])
    return text


def _description(opt: dict[str, Any]) -> str:
    text = opt.get("description", "")
    return " ".join(text) if isinstance(text, list) else str(text)


def _default(name: str, opt: dict[str, Any], values: dict[str, Any]) -> str:
    if "." in name:  # a key inside a variable's entries: its own spec says
        return "required" if opt.get("required") else literal(opt["default"]) if "default" in opt else ""
    if name in values:
        return literal(values[name])
    return "required" if opt.get("required") else ""


def page() -> str:
    from provision.ansible.role_vars import LOCK_OWNED

    parts = [
        "# Roles\n\n",
        generated("each role's `meta/argument_specs.yml` and `defaults/main.yml` under `playbooks/roles/`"),
        "The roles' variables are their public interface: `provision plan` renders them into the run dir's "
        "`group_vars` from the lock and `provision.yaml`, and `--set VAR=VALUE` (on `plan` and `up`) sets one "
        "of them, checked against these specs before any host is touched. Variables marked *lock* are decided "
        "by `provision.lock` and refused by `--set`. Ansible checks the same specs when a role starts.\n\n",
    ]
    for role in roles():
        main = spec(role)
        values = defaults(role)
        options = main.get("options") or {}
        undocumented = sorted(set(values) - set(options))
        if undocumented:
            raise RefDocError(f"roles.md: {role.name} defaults {', '.join(undocumented)} with no argument spec")
        rows = [
            (
                f"`{name}`" + (" *lock*" if name in LOCK_OWNED else ""),
                _type(opt),
                _default(name, opt, values),
                prose(_description(opt)),
            )
            for name, opt in variables(options)
        ]
        parts.append(f"## {role.name}\n\n{prose(str(main.get('short_description', '')))}\n\n")
        parts.append(table(("Variable", "Type", "Default", "Description"), rows) + "\n")
    return "".join(parts)
