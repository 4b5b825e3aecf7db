"""Value checks for what goes into a run dir: the patterns a host name, URL, path, version or
package name must match, one-line text, and ``dump``, the YAML writer that refuses any string
Ansible could read as a Jinja template. Each check fails as a one-line ``BadInput``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from provision.errors import BadInput
from provision.model.settings import CONTROL

_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
_GROUP = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_:-]*$")
# ansible.cfg values: no INI syntax, no interpolation, no line breaks.
_CFG_PATH = re.compile(r"^/[^\s%;#\x00-\x1f]*$")


_JINJA = re.compile(r"\{\{|\{%|\{#")


def dump(data: Any) -> str:
    """YAML for Ansible: plain data, refused if any string could be read as a Jinja template.

    (Tagging strings ``!unsafe`` would also stop templating, but ansible-core 2.19 turns an unsafe
    "3.10" into the float 3.1 and "570" into an int; refusing template markers keeps strings strings.)
    """
    refuse_templates(data, "")
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)


def refuse_templates(value: object, where: str) -> None:
    """Refuse (BadInput, one line naming ``where``) any text in ``value``, its keys included, that
    holds a Jinja marker: a value handed to Ansible as a variable is still templated on the
    controller, so a host's or a user's ``{{ ... }}`` would run there. :func:`dump` calls it on what
    it writes; a caller that hands Ansible data another way (host_vars) calls it itself."""
    if isinstance(value, str):
        if _JINJA.search(value):
            raise BadInput(
                f"{where or 'a value'} {value!r} contains a template marker ({{{{, {{% or {{#)",
                "remove it: values are passed to Ansible as data, never as templates",
            )
    elif isinstance(value, Mapping):
        for k, v in value.items():
            refuse_templates(str(k), f"{where}.{k}".strip("."))
            refuse_templates(v, f"{where}.{k}".strip("."))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            refuse_templates(v, f"{where}[{i}]")


def check_host_name(name: str) -> str:
    if not _HOST.match(name):
        raise BadInput(
            f"host name {name!r} cannot be used in an inventory",
            "use letters, digits, '.', '_' and '-' only",
        )
    return name


def _check_text(value: object, what: str) -> str:
    if not isinstance(value, str) or CONTROL.search(value):
        raise BadInput(f"{what} must be one line of text", "remove line breaks and control characters")
    return value


def _check_version(value: object, what: str) -> str:
    if not isinstance(value, str) or not _VERSION.match(value):
        raise BadInput(f"the lock's {what} {value!r} is not a version", "regenerate the lock with `provision plan`")
    return value


def _check_package(value: object, what: str) -> str:
    if not isinstance(value, str) or not _PACKAGE.match(value):
        raise BadInput(
            f"the lock's {what} {value!r} is not a package name", "regenerate the lock with `provision plan`"
        )
    return value
