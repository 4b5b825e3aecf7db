"""reference/config.md: provision.yaml's keys from provision/config.py's own table (``KEYS``), the
one the validator reads, with each default read from the ``Config`` dataclasses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from refdocs.md import RefDocError, code, generated, literal, prose, table

if TYPE_CHECKING:
    from provision.config import Key


def defaults_document() -> dict[str, Any]:
    """Every key at its default, nested as the file nests it (lists for tuples, null for None)."""
    from provision.config import KEYS, default_of

    doc: dict[str, Any] = {}
    for key in KEYS:
        *parents, name = key.path.split(".")
        where = doc
        for part in parents:
            where = where.setdefault(part, {})
        if key.kind == "mapping":
            where.setdefault(name, {})
        else:
            value = default_of(key.path)
            where[name] = list(value) if isinstance(value, tuple) else value
    return doc


def _type(key: Key) -> str:
    if key.choices:
        return " | ".join(f"`{c}`" for c in key.choices)
    return key.kind


def page() -> str:
    from provision.config import KEYS, Config, default_of, parse_config

    text = yaml.safe_dump(defaults_document(), sort_keys=False, default_flow_style=False)
    # The example must be a file the validator takes and reads back as the defaults.
    if parse_config(yaml.safe_load(text), "example") != Config(path="example"):
        raise RefDocError("config.md: the defaults document does not read back as Config()'s defaults")
    sections = [k for k in KEYS if k.kind == "mapping"]
    parts = [
        "# provision.yaml\n\n",
        generated("`provision/config.py` (its `KEYS` table, which the validator reads, and `Config`'s defaults)"),
        prose(
            "`-c provision.yaml` on `resolve`, `plan`, `up` and `status`. Every key is optional; an unknown key, "
            "a value of the wrong type or an unknown choice is bad input (exit 2) naming the dotted key and, for a "
            "misspelt key, the nearest known one. Options given on the command line win over the file. Quote "
            'versions (`"12.8"`, `"3.10"`): YAML reads 3.10 as the number 3.1, and such a number is refused.'
        )
        + "\n\n## Every key at its default\n\n",
        code(text, "yaml"),
    ]
    for section in sections:
        children = [k for k in KEYS if k.path.rpartition(".")[0] == section.path and k.kind != "mapping"]
        parts.append(f"\n## `{section.path}`\n\n{prose(section.description)}\n\n")
        if children:
            rows = [(f"`{k.path}`", _type(k), literal(default_of(k.path)), prose(k.description)) for k in children]
            parts.append(table(("Key", "Type", "Default", "Description"), rows))
        subs = [k for k in sections if k.path.rpartition(".")[0] == section.path]
        if subs:
            parts.append("\nSections: " + ", ".join(f"`{k.path}`" for k in subs) + ".\n")
    return "".join(parts)
