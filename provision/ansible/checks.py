"""Value checks for what goes into a run dir: the patterns a host name, URL, path, version or
package name must match, one-line text, and ``dump``, the YAML writer that refuses any string
Ansible could read as a Jinja template. Each check fails as a one-line ``BadInput``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

import yaml

from provision.errors import BadInput
from provision.model.defaults import DEFAULT_VENV

_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
_GROUP = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_:-]*$")
_URL = re.compile(r"(https?|file)://[^\s\"'\\<>{}|^`]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# ansible.cfg values: no INI syntax, no interpolation, no line breaks.
_CFG_PATH = re.compile(r"^/[^\s%;#\x00-\x1f]*$")


_JINJA = re.compile(r"\{\{|\{%|\{#")


def dump(data: Any) -> str:
    """YAML for Ansible: plain data, refused if any string could be read as a Jinja template.

    (Tagging strings ``!unsafe`` would also stop templating, but ansible-core 2.19 turns an unsafe
    "3.10" into the float 3.1 and "570" into an int; refusing template markers keeps strings strings.)
    """
    _refuse_templates(data, "")
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)


def _refuse_templates(value: Any, where: str) -> None:
    if isinstance(value, str):
        if _JINJA.search(value):
            raise BadInput(
                f"{where or 'a value'} {value!r} contains a template marker ({{{{, {{% or {{#)",
                "remove it: values are passed to Ansible as data, never as templates",
            )
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _refuse_templates(str(k), f"{where}.{k}".strip("."))
            _refuse_templates(v, f"{where}.{k}".strip("."))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _refuse_templates(v, f"{where}[{i}]")


def check_host_name(name: str) -> str:
    if not _HOST.match(name):
        raise BadInput(
            f"host name {name!r} cannot be used in an inventory",
            "use letters, digits, '.', '_' and '-' only",
        )
    return name


def _check_url(value: Any, what: str) -> str:
    """One URL, the one check of every URL that reaches a run dir (install settings, the lock,
    ``--set``): http, https or file, and nothing a sources.list line or a command would read as
    more than a URL: no whitespace or line break (a second apt line), no quotes, and no square
    brackets but an IPv6 host's (apt's ``[trusted=yes]`` options)."""
    ok = isinstance(value, str) and _URL.fullmatch(value) is not None  # fullmatch: `$` lets a "\n" end it
    if ok:
        try:
            host = urllib.parse.urlsplit(value).hostname or ""
        except ValueError:  # brackets that are no IPv6 host
            ok = False
        else:
            rest = value.replace(f"[{host}]", "", 1) if ":" in host else value
            ok = "[" not in rest and "]" not in rest
    if not ok:
        raise BadInput(
            f"{what} {value!r} is not one plain http(s) or file URL",
            "give one http://, https:// or file:// URL, without spaces, line breaks, quotes or [options]",
        )
    return str(value)


def _check_path(value: str, what: str) -> str:
    if not value.startswith("/") or _CONTROL.search(value) or "{" in value or ".." in value.split("/"):
        raise BadInput(f"{what} {value!r} is not an absolute path", f"give an absolute path such as {DEFAULT_VENV}")
    return value


def _check_text(value: Any, what: str) -> str:
    if not isinstance(value, str) or _CONTROL.search(value):
        raise BadInput(f"{what} must be one line of text", "remove line breaks and control characters")
    return value


def _check_version(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _VERSION.match(value):
        raise BadInput(f"the lock's {what} {value!r} is not a version", "regenerate the lock with `provision plan`")
    return value


def _check_package(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _PACKAGE.match(value):
        raise BadInput(
            f"the lock's {what} {value!r} is not a package name", "regenerate the lock with `provision plan`"
        )
    return value
